//! What the real API server does to a built-in object on create, for the kinds where clients can
//! see it: the per-kind strategies' `PrepareForCreate`, and the defaults of the versioned types
//! (`SetDefaults_*`) that do not depend on anything running (no ClusterIP allocation: a Service
//! gets none). Defaults apply on create only (a real server also applies them on update), except
//! the one a client could notice at once: a Namespace's name label, set on every write.
//!
//! Pure: no I/O. Nothing runs behind these kinds (no kubelet, no namespace controller beyond
//! deletion): a test that wants a running Pod writes its status through `/status`, as a kubelet
//! would.

use serde_json::{Value, json};

use super::registry::Resource;

/// Applies the create-time rules of `res`'s kind to `obj`.
pub fn prepare_for_create(res: &Resource, obj: &mut Value) {
    if res.group == "apps" && res.plural == "deployments" {
        default_deployment(obj);
        return;
    }
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
        "services" => {
            default_service(obj);
            obj["status"] = json!({"loadBalancer": {}});
        }
        // SetDefaults_Secret.
        "secrets" if obj.get("type").and_then(Value::as_str).is_none_or(str::is_empty) => {
            obj["type"] = json!("Opaque");
        }
        _ => {}
    }
}

/// The label every Namespace carries (Kubernetes 1.21+, `SetDefaults_Namespace`), so that a
/// NetworkPolicy's `namespaceSelector` can pick a namespace by name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// What the real server sets on every create and update of `res`'s kind, whatever the client
/// sent: a Namespace's `kubernetes.io/metadata.name` label is its name (a client cannot remove
/// or change it).
pub fn default_on_every_write(res: &Resource, obj: &mut Value) {
    if !(res.group.is_empty() && res.plural == "namespaces") {
        return;
    }
    let Some(name) = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return;
    };
    let metadata = &mut obj["metadata"];
    if !metadata.get("labels").is_some_and(Value::is_object) {
        metadata["labels"] = json!({});
    }
    metadata["labels"][NAMESPACE_NAME_LABEL] = json!(name);
}

/// Sets `obj[key]` to `value` when it is absent or null.
fn default_field(obj: &mut Value, key: &str, value: Value) {
    if obj.get(key).is_none_or(Value::is_null) {
        obj[key] = value;
    }
}

/// apps/v1 `SetDefaults_Deployment`: one replica, a 25 %/25 % rolling update, ten old
/// ReplicaSets kept, ten minutes to make progress.
fn default_deployment(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    default_field(spec, "replicas", json!(1));
    default_field(spec, "revisionHistoryLimit", json!(10));
    default_field(spec, "progressDeadlineSeconds", json!(600));
    default_field(spec, "strategy", json!({}));
    let strategy = &mut spec["strategy"];
    default_field(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        default_field(strategy, "rollingUpdate", json!({}));
        default_field(&mut strategy["rollingUpdate"], "maxUnavailable", json!("25%"));
        default_field(&mut strategy["rollingUpdate"], "maxSurge", json!("25%"));
    }
}

/// core/v1 `SetDefaults_Service`: type ClusterIP, no session affinity, TCP ports whose target is
/// the port itself, cluster-wide internal traffic.
fn default_service(obj: &mut Value) {
    if !obj.get("spec").is_some_and(Value::is_object) {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    default_field(spec, "type", json!("ClusterIP"));
    default_field(spec, "sessionAffinity", json!("None"));
    if spec["type"] != "ExternalName" {
        default_field(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    for port in spec
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        default_field(port, "protocol", json!("TCP"));
        if port
            .get("targetPort")
            .is_none_or(|t| t.is_null() || *t == json!(0) || *t == json!(""))
        {
            port["targetPort"] = port.get("port").cloned().unwrap_or(Value::Null);
        }
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
    fn namespaces_always_carry_their_name_label() {
        let res = Registry::with_builtins().lookup("", "v1", "namespaces").unwrap();
        let mut ns = json!({"metadata": {"name": "team-a"}});
        default_on_every_write(&res, &mut ns);
        assert_eq!(ns["metadata"]["labels"][NAMESPACE_NAME_LABEL], "team-a");
        let mut changed =
            json!({"metadata": {"name": "team-a", "labels": {NAMESPACE_NAME_LABEL: "other", "x": "y"}}});
        default_on_every_write(&res, &mut changed);
        assert_eq!(
            changed["metadata"]["labels"][NAMESPACE_NAME_LABEL], "team-a",
            "not the client's to change"
        );
        assert_eq!(changed["metadata"]["labels"]["x"], "y");
        let pods = Registry::with_builtins().lookup("", "v1", "pods").unwrap();
        let mut pod = json!({"metadata": {"name": "p"}});
        default_on_every_write(&pods, &mut pod);
        assert!(pod["metadata"].get("labels").is_none());
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
    fn deployments_services_and_secrets_get_their_defaults() {
        let r = Registry::with_builtins();
        let mut d = json!({"spec": {"replicas": 0, "strategy": {"type": "Recreate"}}});
        prepare_for_create(&r.lookup("apps", "v1", "deployments").unwrap(), &mut d);
        assert_eq!(
            d["spec"],
            json!({"replicas": 0, "strategy": {"type": "Recreate"}, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600})
        );
        let mut d = json!({});
        prepare_for_create(&r.lookup("apps", "v1", "deployments").unwrap(), &mut d);
        assert_eq!(d["spec"]["replicas"], 1);
        assert_eq!(
            d["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
        );
        let mut svc =
            json!({"spec": {"ports": [{"port": 80}, {"port": 53, "protocol": "UDP", "targetPort": "dns"}]}});
        prepare_for_create(&r.lookup("", "v1", "services").unwrap(), &mut svc);
        assert_eq!(
            svc["spec"],
            json!({"type": "ClusterIP", "sessionAffinity": "None", "internalTrafficPolicy": "Cluster",
                   "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80},
                             {"port": 53, "protocol": "UDP", "targetPort": "dns"}]})
        );
        let mut secret = json!({"data": {}});
        prepare_for_create(&r.lookup("", "v1", "secrets").unwrap(), &mut secret);
        assert_eq!(secret["type"], "Opaque");
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
