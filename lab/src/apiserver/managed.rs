//! Server-side apply, managedFields, and strategic merge patch.
//!
//! PLACEHOLDER while the real implementation is written: apply is a JSON merge of the applied
//! configuration, strategic merge is a JSON merge patch, and managedFields are not recorded.

use serde_json::Value;

use super::errors::ApiError;
use super::patch::merge_patch;
use super::registry::Resource;

#[derive(Debug)]
pub enum ApplyError {
    Invalid(String),
}

impl ApplyError {
    pub fn into_api_error(self, res: &Resource, name: &str) -> ApiError {
        match self {
            Self::Invalid(why) => ApiError::invalid_field(res, name, "", why),
        }
    }
}

pub fn record_update(
    _old: Option<&Value>,
    _new: &mut Value,
    _manager: &str,
    _subresource: Option<&str>,
    _time: &str,
) {
}

pub fn apply(
    _res: &Resource,
    live: Option<&Value>,
    applied: &Value,
    _manager: &str,
    _force: bool,
    _subresource: Option<&str>,
    _time: &str,
) -> Result<Value, ApplyError> {
    Ok(merge_patch(live.unwrap_or(&Value::Null), applied))
}

pub fn strategic_merge(_res: &Resource, old: &Value, patch: &Value) -> Result<Value, String> {
    Ok(merge_patch(old, patch))
}
