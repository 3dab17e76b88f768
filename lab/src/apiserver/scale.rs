//! The `/scale` subresource of the built-in workloads (Deployment, StatefulSet): an
//! autoscaling/v1 Scale made from the object's `spec.replicas`, `status.replicas` and
//! `spec.selector`, and writes through it that change `spec.replicas` and nothing else
//! (`kubectl scale`).
//!
//! Pure but for [`serve`], which reads and writes the store.

use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::http::Target;
use super::store::{Store, WriteOptions};
use super::{content, meta, patch};

/// The Scale view of a workload.
pub fn to_scale(obj: &Value) -> Value {
    let m = |f: &str| {
        obj.pointer(&format!("/metadata/{f}"))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let mut scale = json!({
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": m("name"), "namespace": m("namespace"), "uid": m("uid"),
                     "resourceVersion": m("resourceVersion"), "creationTimestamp": m("creationTimestamp")},
        "spec": {"replicas": obj.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(0)},
        "status": {"replicas": obj.pointer("/status/replicas").and_then(Value::as_i64).unwrap_or(0)},
    });
    if let Some(selector) = obj.pointer("/spec/selector") {
        let text = format_label_selector(selector);
        if !text.is_empty() {
            scale["status"]["selector"] = json!(text);
        }
    }
    scale
}

/// A structured label selector in its string form, as `metav1.FormatLabelSelector` writes it:
/// requirements sorted by key, values sorted.
pub fn format_label_selector(selector: &Value) -> String {
    let mut requirements: Vec<(String, String)> = Vec::new();
    if let Some(labels) = selector.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in labels {
            requirements.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for e in selector
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
        let mut values: Vec<&str> = e
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        values.sort_unstable();
        let text = match e.get("operator").and_then(Value::as_str).unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            _ => continue,
        };
        requirements.push((key.to_owned(), text));
    }
    requirements.sort();
    requirements
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(",")
}

/// The workload `old` with the replicas of `scale`, after checking that `scale` is a Scale of
/// this object (name, and resourceVersion when given).
pub fn apply_scale(name: &str, old: &Value, scale: &Value) -> Result<Value, ApiError> {
    let invalid = |field: &str, why: String| {
        ApiError::new(
            422,
            "Invalid",
            format!("Scale.autoscaling \"{name}\" is invalid: {field}: {why}"),
        )
    };
    if scale
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "Scale")
    {
        return Err(ApiError::bad_request(format!(
            "the body of a /scale request must be an autoscaling/v1 Scale, not a {}",
            scale["kind"]
        )));
    }
    if let Some(body_name) = meta::name(scale)
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    // Absent is Go's zero: autoscaling/v1 ScaleSpec.replicas is `omitempty`.
    let replicas = match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().filter(|r| i32::try_from(*r).is_ok()).ok_or_else(|| {
            invalid(
                "spec.replicas",
                format!("Invalid value: {v}: must be a 32-bit integer"),
            )
        })?,
    };
    if replicas < 0 {
        return Err(invalid(
            "spec.replicas",
            format!("Invalid value: {replicas}: must be greater than or equal to 0"),
        ));
    }
    let mut new = old.clone();
    new["spec"]["replicas"] = json!(replicas);
    // The Scale's resourceVersion is the workload's: the store refuses a stale one.
    match meta::resource_version(scale) {
        Some(rv) => meta::metadata_mut(&mut new).insert("resourceVersion".into(), json!(rv)),
        None => meta::metadata_mut(&mut new).remove("resourceVersion"),
    };
    Ok(new)
}

/// GET, PUT or PATCH on `…/{name}/scale`.
pub fn serve(
    store: &Store,
    target: &Target,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    opts: &WriteOptions,
) -> Result<(StatusCode, Value), ApiError> {
    let res = &target.resource;
    let ns = target.namespace.as_deref();
    let name = target
        .name
        .as_deref()
        .ok_or_else(|| ApiError::method_not_allowed("/scale needs an object name"))?;
    let written = match *method {
        Method::GET => return Ok((StatusCode::OK, to_scale(&*store.get(res, ns, name)?))),
        Method::PUT => {
            let (scale, _) = content::parse(headers, body, content::OBJECT_TYPES, res)?;
            store.patch(res, ns, name, false, opts, |old| apply_scale(name, old, &scale))?
        }
        Method::PATCH => {
            let (patch_body, mime) = content::parse(headers, body, content::PATCH_TYPES, res)?;
            store.patch(res, ns, name, false, opts, |old| {
                let current = to_scale(old);
                // A Scale has no lists, so a strategic merge patch is a merge patch.
                let scale = match mime.as_str() {
                    "application/json-patch+json" => patch::json_patch(&current, &patch_body)
                        .map_err(|e| ApiError::new(422, "Invalid", e.to_string()))?,
                    "application/merge-patch+json" | "application/strategic-merge-patch+json" => {
                        patch::merge_patch(&current, &patch_body)
                    }
                    _ => {
                        return Err(ApiError::unsupported_media_type(&format!(
                            "{mime} (server-side apply is not served on /scale)"
                        )));
                    }
                };
                apply_scale(name, old, &scale)
            })?
        }
        _ => {
            return Err(ApiError::method_not_allowed(format!(
                "method {method} is not supported on /scale"
            )));
        }
    };
    Ok((StatusCode::OK, to_scale(&written)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_format_as_kubernetes_does() {
        let s = json!({"matchLabels": {"b": "2", "a": "1"},
                       "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]},
                                            {"key": "0", "operator": "DoesNotExist"},
                                            {"key": "d", "operator": "Exists"}]});
        assert_eq!(format_label_selector(&s), "!0,a=1,b=2,c in (x,y),d");
        assert_eq!(format_label_selector(&json!({})), "");
    }

    #[test]
    fn a_scale_shows_the_workloads_replicas_and_selector() {
        let d = json!({"metadata": {"name": "d", "namespace": "n", "uid": "u", "resourceVersion": "7",
                                    "creationTimestamp": "2026-01-01T00:00:00Z"},
                       "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "d"}}},
                       "status": {"replicas": 1}});
        let s = to_scale(&d);
        assert_eq!(s["spec"], json!({"replicas": 2}));
        assert_eq!(s["status"], json!({"replicas": 1, "selector": "app=d"}));
        assert_eq!(s["metadata"]["resourceVersion"], "7");
        assert_eq!(s["apiVersion"], "autoscaling/v1");
    }

    #[test]
    fn writing_a_scale_changes_replicas_only_and_refuses_nonsense() {
        let d = json!({"metadata": {"name": "d", "resourceVersion": "7"}, "spec": {"replicas": 2, "paused": true}});
        let new = apply_scale("d", &d, &json!({"spec": {"replicas": 0}})).unwrap();
        assert_eq!(new["spec"], json!({"replicas": 0, "paused": true}));
        assert!(
            new.pointer("/metadata/resourceVersion").is_none(),
            "no precondition given"
        );
        let new = apply_scale(
            "d",
            &d,
            &json!({"metadata": {"resourceVersion": "6"}, "spec": {}}),
        )
        .unwrap();
        assert_eq!(
            (
                new["spec"]["replicas"].clone(),
                new["metadata"]["resourceVersion"].clone()
            ),
            (json!(0), json!("6"))
        );
        let err = apply_scale("d", &d, &json!({"spec": {"replicas": -1}})).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("spec.replicas: Invalid value: -1"),
            "{}",
            err.message
        );
        assert_eq!(
            apply_scale("d", &d, &json!({"metadata": {"name": "e"}}))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            apply_scale("d", &d, &json!({"kind": "Deployment"}))
                .unwrap_err()
                .code,
            400
        );
    }
}
