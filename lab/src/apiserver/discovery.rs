//! Discovery documents: what `kubectl` and `kube::discovery` read to map kinds to URLs.
//! The legacy (non-aggregated) format; clients that ask for aggregated discovery fall back to it
//! when the response is plain `application/json`.

use serde_json::{Value, json};

use super::errors::ApiError;
use super::store::Store;

const VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub fn root_paths() -> Value {
    json!({"paths": ["/api", "/api/v1", "/apis", "/healthz", "/livez", "/openapi/v3", "/readyz", "/version"]})
}

/// `/version`: Kubernetes 1.33, the version the project targets (k8s-openapi `v1_33`).
pub fn version() -> Value {
    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0-kube-ovn-lab", "gitCommit": "", "gitTreeState": "clean",
           "buildDate": "2026-01-01T00:00:00Z", "goVersion": "none (kube-ovn-rs API emulator)", "compiler": "rustc",
           "platform": "linux/amd64"})
}

pub fn core_versions() -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
           "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let gvs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    json!({"name": name, "versions": gvs, "preferredVersion": gvs.first().cloned().unwrap_or(Value::Null)})
}

pub fn groups(store: &Store) -> Value {
    let mut by_group: std::collections::BTreeMap<String, Vec<String>> = std::collections::BTreeMap::new();
    for r in store.resources() {
        if !r.group.is_empty() {
            let v = by_group.entry(r.group.clone()).or_default();
            if !v.contains(&r.version) {
                v.push(r.version.clone());
            }
        }
    }
    let groups: Vec<Value> = by_group.iter().map(|(g, v)| group_entry(g, v)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub fn group(store: &Store, name: &str) -> Result<Value, ApiError> {
    let versions: Vec<String> = store
        .resources()
        .iter()
        .filter(|r| r.group == name)
        .map(|r| r.version.clone())
        .collect();
    if versions.is_empty() {
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource (group {name})"),
        ));
    }
    let mut v = group_entry(name, &versions);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Ok(v)
}

pub fn resources(store: &Store, group: &str, version: &str) -> Result<Value, ApiError> {
    let mut list = Vec::new();
    for r in store
        .resources()
        .iter()
        .filter(|r| r.group == group && r.version == version)
    {
        list.push(
            json!({"name": r.plural, "singularName": r.singular, "namespaced": r.namespaced, "kind": r.kind,
                         "verbs": VERBS, "shortNames": r.short_names}),
        );
        if r.status_subresource {
            list.push(
                json!({"name": format!("{}/status", r.plural), "singularName": "", "namespaced": r.namespaced,
                             "kind": r.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        // The polymorphic scale client (`kubectl scale`) finds the Scale kind here.
        if r.scale_subresource {
            list.push(
                json!({"name": format!("{}/scale", r.plural), "singularName": "", "namespaced": r.namespaced,
                       "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": ["get", "patch", "update"]}),
            );
        }
        if r.group.is_empty() && r.plural == "pods" {
            list.push(
                json!({"name": "pods/binding", "singularName": "", "namespaced": true,
                             "kind": "Binding", "verbs": ["create"]}),
            );
        }
    }
    if list.is_empty() {
        let gv = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        return Err(ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({gv})"),
        ));
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Ok(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": list}))
}
