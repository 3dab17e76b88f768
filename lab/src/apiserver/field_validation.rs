//! `fieldValidation` (Ignore, Warn, Strict): what a write does with fields the object's schema
//! does not declare.
//!
//! Pure: no I/O. Only custom resources have a schema here, so only they are checked; built-ins
//! are stored as given whatever the directive. As on the real server, `Warn` is the default: the
//! write goes through, pruned, with one `Warning` header per unknown field; `Strict` refuses it
//! with 400 naming every unknown field (what `kubectl apply` asks for by default).

use serde_json::Value;

use super::errors::ApiError;
use super::registry::Resource;
use super::schema;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(text: Option<&str>) -> Result<Self, ApiError> {
        match text.unwrap_or_default() {
            "" | "Warn" => Ok(Self::Warn),
            "Ignore" => Ok(Self::Ignore),
            "Strict" => Ok(Self::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation must be one of Ignore, Warn or Strict, not {other:?}"
            ))),
        }
    }

    /// Checks `obj`, about to be written as `res`: an error under `Strict`, warnings (for the
    /// `Warning` header) under `Warn`, nothing under `Ignore` or for a kind without schema.
    pub fn check(self, res: &Resource, obj: &Value, warnings: &mut Vec<String>) -> Result<(), ApiError> {
        let Some(s) = res.schema.as_ref().filter(|_| self != Self::Ignore) else {
            return Ok(());
        };
        let mut unknown = Vec::new();
        // Validation errors are the store's to report, after this.
        let _ = schema::admit_noting_pruned(s, &mut obj.clone(), &mut unknown);
        if unknown.is_empty() {
            return Ok(());
        }
        let listed: Vec<String> = unknown.iter().map(|f| format!("unknown field {f:?}")).collect();
        if self == Self::Strict {
            return Err(ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                listed.join(", "),
                kind = res.kind,
                version = res.version,
            )));
        }
        warnings.extend(listed);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::registry::Registry;
    use serde_json::json;

    #[test]
    fn strict_refuses_warn_warns_ignore_ignores() {
        let mut registry = Registry::with_builtins();
        registry
            .sync_crd(&json!({"metadata": {"name": "vlans.kubeovn.io"}, "spec": {"group": "kubeovn.io",
                "scope": "Cluster", "names": {"plural": "vlans", "kind": "Vlan"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema":
                    {"type": "object", "properties": {"spec": {"type": "object", "properties": {"id": {"type": "integer"}}}}}}}]}}))
            .unwrap();
        let vlan = registry.lookup("kubeovn.io", "v1", "vlans").unwrap();
        let obj = json!({"metadata": {"name": "a"}, "spec": {"id": 1, "vid": 2}});
        let mut warnings = Vec::new();
        let err = FieldValidation::Strict
            .check(&vlan, &obj, &mut warnings)
            .unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message
                .contains("strict decoding error: unknown field \"spec.vid\""),
            "{}",
            err.message
        );
        FieldValidation::Warn.check(&vlan, &obj, &mut warnings).unwrap();
        assert_eq!(warnings, ["unknown field \"spec.vid\""]);
        FieldValidation::Ignore.check(&vlan, &obj, &mut warnings).unwrap();
        assert_eq!(warnings.len(), 1);
        let pods = registry.lookup("", "v1", "pods").unwrap();
        FieldValidation::Strict
            .check(&pods, &json!({"spec": {"anything": 1}}), &mut warnings)
            .unwrap();
        assert!(FieldValidation::parse(Some("Loose")).is_err());
        assert_eq!(FieldValidation::parse(None).unwrap(), FieldValidation::Warn);
    }
}
