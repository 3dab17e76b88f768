//! The `pods/binding` subresource: how a scheduler assigns a pod to a node. A POST of a
//! `Binding` (`target` names the Node) sets `spec.nodeName` once and the `PodScheduled`
//! condition, as the real registry does; a pod already bound, or being deleted, is a 409.
//! The answer is a `Status` of `Success` with code 201.
//!
//! Pure but for [`serve`], which reads and writes the store.

use axum::http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

use super::errors::ApiError;
use super::http::Target;
use super::store::{Store, WriteOptions};
use super::{content, meta};

/// The node a `Binding` for pod `name` names, after checking the Binding's shape.
pub fn target_node(name: &str, binding: &Value) -> Result<String, ApiError> {
    let invalid = |field: &str, why: &str| {
        ApiError::new(
            422,
            "Invalid",
            format!("Binding \"{name}\" is invalid: {field}: {why}"),
        )
    };
    if let Some(kind) = binding.get("kind").and_then(Value::as_str)
        && kind != "Binding"
    {
        return Err(ApiError::bad_request(format!(
            "the body of a pods/binding request must be a v1 Binding, not a {kind}"
        )));
    }
    if let Some(body_name) = meta::name(binding)
        && body_name != name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    let target = binding
        .get("target")
        .ok_or_else(|| invalid("target", "Required value"))?;
    if let Some(kind) = target.get("kind").and_then(Value::as_str)
        && !kind.is_empty()
        && kind != "Node"
    {
        return Err(invalid(
            "target.kind",
            &format!("Unsupported value: {kind:?}: must be empty or \"Node\""),
        ));
    }
    match target.get("name").and_then(Value::as_str) {
        Some(node) if !node.is_empty() => Ok(node.to_owned()),
        _ => Err(invalid("target.name", "Required value")),
    }
}

/// The pod `old` bound to `node` at `now`, or why it cannot be.
pub fn bind(name: &str, old: &Value, binding: &Value, node: &str, now: &str) -> Result<Value, ApiError> {
    let conflict = |why: String| {
        ApiError::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on pods/binding \"{name}\": {why}"),
        )
    };
    if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str)
        && !uid.is_empty()
        && Some(uid) != old.pointer("/metadata/uid").and_then(Value::as_str)
    {
        return Err(conflict(format!(
            "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
            old.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )));
    }
    if old.pointer("/metadata/deletionTimestamp").is_some() {
        return Err(conflict(format!(
            "pod {name} is being deleted, cannot be assigned to a host"
        )));
    }
    if let Some(bound) = old
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(conflict(format!(
            "pod {name} is already assigned to node {bound:?}"
        )));
    }
    let mut new = old.clone();
    new["spec"]["nodeName"] = json!(node);
    // The Binding's annotations are copied onto the pod, as the registry does.
    if let Some(annotations) = binding
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
    {
        let metadata = meta::metadata_mut(&mut new);
        let target = metadata.entry("annotations").or_insert_with(|| json!({}));
        if let Some(target) = target.as_object_mut() {
            for (k, v) in annotations {
                target.insert(k.clone(), v.clone());
            }
        }
    }
    set_scheduled(&mut new, now);
    Ok(new)
}

/// POST on `/api/v1/namespaces/{ns}/pods/{name}/binding`.
pub fn serve(
    store: &Store,
    target: &Target,
    method: &Method,
    headers: &HeaderMap,
    body: &[u8],
    opts: &WriteOptions,
) -> Result<(StatusCode, Value), ApiError> {
    if *method != Method::POST {
        return Err(ApiError::method_not_allowed(format!(
            "method {method} is not supported on pods/binding"
        )));
    }
    let res = &target.resource;
    let ns = target.namespace.as_deref();
    let name = target
        .name
        .as_deref()
        .ok_or_else(|| ApiError::method_not_allowed("pods/binding needs a pod name"))?;
    // JSON or YAML: the protobuf decoder knows no Binding (and no scheduler we run sends one).
    let (binding, _) = content::parse(headers, body, &["application/json", "application/yaml"], res)?;
    let node = target_node(name, &binding)?;
    let now = meta::now();
    store.patch(res, ns, name, false, opts, |old| {
        bind(name, old, &binding, &node, &now)
    })?;
    // The main resource ignores status (a subresource): the condition is a second write.
    store.patch(res, ns, name, true, opts, |old| {
        let mut new = old.clone();
        set_scheduled(&mut new, &now);
        Ok(new)
    })?;
    Ok((
        StatusCode::CREATED,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// Sets the pod's `PodScheduled` condition True (keeping an existing True one as it is).
fn set_scheduled(pod: &mut Value, now: &str) {
    if !pod["status"].is_object() {
        pod["status"] = json!({});
    }
    if !pod["status"]["conditions"].is_array() {
        pod["status"]["conditions"] = json!([]);
    }
    let condition = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                           "lastTransitionTime": now});
    if let Some(conditions) = pod["status"]["conditions"].as_array_mut() {
        match conditions.iter_mut().find(|c| c["type"] == "PodScheduled") {
            Some(existing) if existing["status"] == "True" => {}
            Some(existing) => *existing = condition,
            None => conditions.push(condition),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    }

    #[test]
    fn a_binding_names_its_node_or_is_refused_naming_the_field() {
        assert_eq!(target_node("p", &binding("n1")).unwrap(), "n1");
        let e = target_node("p", &json!({"target": {}})).unwrap_err();
        assert!(e.code == 422 && e.message.contains("target.name"), "{e:?}");
        let e = target_node("p", &json!({"target": {"kind": "Pod", "name": "x"}})).unwrap_err();
        assert!(e.code == 422 && e.message.contains("target.kind"), "{e:?}");
        assert_eq!(target_node("q", &binding("n1")).unwrap_err().code, 400);
        assert_eq!(target_node("p", &json!({"kind": "Pod"})).unwrap_err().code, 400);
    }

    #[test]
    fn binding_sets_the_node_once_with_the_condition() {
        let pod = json!({"metadata": {"name": "p", "uid": "u1"}, "spec": {"containers": []},
                         "status": {"phase": "Pending"}});
        let bound = bind("p", &pod, &binding("n1"), "n1", "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(bound["spec"]["nodeName"], "n1");
        assert_eq!(
            bound["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}])
        );
        let again = bind("p", &bound, &binding("n2"), "n2", "x").unwrap_err();
        assert_eq!(again.code, 409);
        assert!(
            again.message.contains("already assigned to node \"n1\""),
            "{}",
            again.message
        );
        let mut stale = binding("n1");
        stale["metadata"]["uid"] = json!("u0");
        assert_eq!(bind("p", &pod, &stale, "n1", "x").unwrap_err().code, 409);
        let mut deleting = pod.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(
            bind("p", &deleting, &binding("n1"), "n1", "x").unwrap_err().code,
            409
        );
    }
}
