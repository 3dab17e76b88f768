//! What the real API server's per-kind strategies do to a built-in object on create
//! (`PrepareForCreate`), for the kinds where clients can see it.
//!
//! Pure: no I/O. Nothing runs behind these kinds (no kubelet, no namespace controller beyond
//! deletion): a test that wants a running Pod writes its status through `/status`, as a kubelet
//! would.

use serde_json::{Value, json};

use super::registry::Resource;

/// Applies the create-time rules of `res`'s kind to `obj`.
pub fn prepare_for_create(res: &Resource, obj: &mut Value) {
    if !res.group.is_empty() {
        return;
    }
    match res.plural.as_str() {
        // namespaceStrategy: status is Active; the `kubernetes` finalizer is the namespace
        // controller's (kept in spec, not metadata).
        "namespaces" => {
            obj["status"] = json!({"phase": "Active"});
            let has_finalizers = obj
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some();
            if !has_finalizers {
                if !obj.get("spec").is_some_and(Value::is_object) {
                    obj["spec"] = json!({});
                }
                obj["spec"]["finalizers"] = json!(["kubernetes"]);
            }
        }
        // podStrategy: a new Pod is Pending, with its QoS class; the kubelet owns the rest.
        "pods" => {
            let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
            obj["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        // svcStrategy: status (load balancer ingress) is the cloud provider's.
        "services" => obj["status"] = json!({"loadBalancer": {}}),
        _ => {}
    }
}

/// The Pod QoS class (`qos.GetPodQOS`): BestEffort without any request or limit, Guaranteed when
/// every container limits CPU and memory with requests equal to limits, Burstable otherwise.
pub fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let resources = |c: &Value, kind: &str| {
        c.pointer(&format!("/resources/{kind}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let any = containers
        .iter()
        .any(|c| !resources(c, "requests").is_empty() || !resources(c, "limits").is_empty());
    if !any {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let limits = resources(c, "limits");
        let requests = resources(c, "requests");
        ["cpu", "memory"].iter().all(|r| {
            limits
                .get(*r)
                .is_some_and(|l| requests.get(*r).is_none_or(|q| q == l))
        })
    });
    if guaranteed { "Guaranteed" } else { "Burstable" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::registry::Registry;

    #[test]
    fn namespaces_start_active_with_the_kubernetes_finalizer() {
        let res = Registry::with_builtins().lookup("", "v1", "namespaces").unwrap();
        let mut ns = json!({"metadata": {"name": "a"}, "status": {"phase": "Terminating"}});
        prepare_for_create(&res, &mut ns);
        assert_eq!(ns["status"], json!({"phase": "Active"}));
        assert_eq!(ns["spec"]["finalizers"], json!(["kubernetes"]));
        let mut custom = json!({"metadata": {"name": "b"}, "spec": {"finalizers": []}});
        prepare_for_create(&res, &mut custom);
        assert_eq!(custom["spec"]["finalizers"], json!([]));
    }

    #[test]
    fn pods_start_pending_whatever_status_they_bring() {
        let res = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Running", "podIP": "1.2.3.4"}});
        prepare_for_create(&res, &mut pod);
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "BestEffort"})
        );
    }

    #[test]
    fn qos_classes() {
        let c = |resources: Value| json!({"containers": [{"name": "c", "resources": resources}]});
        assert_eq!(qos_class(&c(json!({}))), "BestEffort");
        assert_eq!(qos_class(&c(json!({"requests": {"cpu": "1"}}))), "Burstable");
        assert_eq!(
            qos_class(&c(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&c(
                json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}})
            )),
            "Burstable"
        );
    }
}
