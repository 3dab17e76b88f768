//! API errors as `metav1.Status`, with the codes and reasons the real API server uses, so clients
//! (`kube`, `kubectl`) react to them as they would in a cluster.

use serde_json::{Value, json};

use super::registry::Resource;
use super::schema::FieldError;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn not_found(res: &Resource, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", res.qualified()),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.plural}))
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub fn already_exists(res: &Resource, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", res.qualified()),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.plural}))
    }

    pub fn conflict(res: &Resource, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                res.qualified()
            ),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.plural}))
    }

    /// The resourceVersion a write was based on is not the stored one.
    pub fn stale(res: &Resource, name: &str) -> Self {
        Self::conflict(
            res,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 `Invalid`, listing each field.
    pub fn invalid(res: &Resource, name: &str, errors: &[FieldError]) -> Self {
        let list = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect::<Vec<_>>();
        let summary = if list.len() == 1 {
            list[0].clone()
        } else {
            format!("[{}]", list.join(", "))
        };
        let causes: Vec<Value> = errors
            .iter()
            .map(|e| json!({"reason": e.reason, "message": e.message, "field": e.field}))
            .collect();
        Self::new(
            422,
            "Invalid",
            format!("{}.{} \"{name}\" is invalid: {summary}", res.kind, res.group),
        )
        .with_details(json!({"name": name, "group": res.group, "kind": res.kind, "causes": causes}))
    }

    pub fn invalid_field(res: &Resource, name: &str, field: &str, message: impl Into<String>) -> Self {
        Self::invalid(
            res,
            name,
            &[FieldError {
                reason: "FieldValueInvalid",
                field: field.into(),
                message: message.into(),
            }],
        )
    }

    /// A watch or continue token from before the retained history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn method_not_allowed(message: impl Into<String>) -> Self {
        Self::new(405, "MethodNotAllowed", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> Self {
        Self::new(
            415,
            "UnsupportedMediaType",
            format!("the body of the request was in an unknown format: {content_type}"),
        )
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "InternalError", message)
    }

    /// The `metav1.Status` body.
    pub fn status(&self) -> Value {
        let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": self.message, "reason": self.reason, "code": self.code});
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}
