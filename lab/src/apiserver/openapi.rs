//! OpenAPI v3 (`/openapi/v3`, `/openapi/v3/apis/{group}/{version}`): enough for `kubectl` to
//! validate on the server.
//!
//! Pure: no I/O. kubectl ≥ 1.27 asks the OpenAPI v3 document of an object's group-version whether
//! the PATCH of its kind takes the `fieldValidation` parameter; when it does, kubectl sends
//! `fieldValidation=Strict` and leaves validation to the server instead of downloading schemas to
//! validate itself (which without OpenAPI fails with "failed to download openapi"). So every
//! served kind gets its paths with that parameter. Custom resources carry their CRD's
//! `openAPIV3Schema` (so `kubectl explain` works for them); built-in kinds have no schema here
//! (the emulator stores them as given) and an open object stands in. The PATCH request bodies do
//! not offer strategic merge, so kubectl computes strategic patches for built-ins from its own
//! compiled-in types rather than from a schema we do not have.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::registry::Resource;

/// `api/v1`, `apis/kubeovn.io/v1`: how the index names a group-version.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The schema name the real server uses: `io.kubeovn.v1.Subnet` for a custom resource (the
/// group reversed), `io.k8s.api.core.v1.Pod`-like for built-ins.
fn schema_name(res: &Resource) -> String {
    if res.from_crd {
        let reversed: Vec<&str> = res.group.split('.').rev().collect();
        format!("{}.{}.{}", reversed.join("."), res.version, res.kind)
    } else {
        let group = if res.group.is_empty() {
            "core"
        } else {
            res.group.split('.').next().unwrap_or_default()
        };
        format!("io.k8s.api.{group}.{}.{}", res.version, res.kind)
    }
}

/// FNV-1a, hex: the index's cache-busting hash (any value that changes with the document does).
fn hash(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

fn group_versions(resources: &[Arc<Resource>]) -> BTreeMap<(String, String), Vec<Arc<Resource>>> {
    let mut out: BTreeMap<(String, String), Vec<Arc<Resource>>> = BTreeMap::new();
    for r in resources {
        out.entry((r.group.clone(), r.version.clone()))
            .or_default()
            .push(r.clone());
    }
    out
}

/// `/openapi/v3`: every group-version with the URL of its document.
pub fn index(resources: &[Arc<Resource>]) -> Value {
    let paths: serde_json::Map<String, Value> = group_versions(resources)
        .into_iter()
        .map(|((g, v), rs)| {
            let path = gv_path(&g, &v);
            let url = format!(
                "/openapi/v3/{path}?hash={}",
                hash(&document(&g, &v, &rs).to_string())
            );
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// The document of `group`/`version` (its path below `/openapi/v3/`), if served.
pub fn for_path(resources: &[Arc<Resource>], path: &str) -> Option<Value> {
    group_versions(resources)
        .into_iter()
        .find(|((g, v), _)| gv_path(g, v) == path)
        .map(|((g, v), rs)| document(&g, &v, &rs))
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description, "schema": {"type": "string", "uniqueItems": true}})
}

fn operation(res: &Resource, action: &str, schema: &Value, body_types: &[&str], params: &[Value]) -> Value {
    let gvk = json!({"group": res.group, "version": res.version, "kind": res.kind});
    let mut op = json!({
        "operationId": format!("{action}{}", res.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": gvk,
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": schema}}}},
    });
    if !body_types.is_empty() {
        let content: serde_json::Map<String, Value> = body_types
            .iter()
            .map(|t| ((*t).to_owned(), json!({"schema": schema})))
            .collect();
        op["requestBody"] = json!({"required": true, "content": content});
    }
    op
}

fn document(group: &str, version: &str, resources: &[Arc<Resource>]) -> Value {
    let write_params = [
        query_param(
            "dryRun",
            "When present, indicates that modifications should not be persisted.",
        ),
        query_param(
            "fieldManager",
            "A name associated with the actor or entity that is making these changes.",
        ),
        query_param(
            "fieldValidation",
            "Ignore, Warn or Strict: what to do with unknown or duplicate fields in the object.",
        ),
    ];
    let mut patch_params = write_params.to_vec();
    patch_params
        .push(json!({"name": "force", "in": "query", "schema": {"type": "boolean", "uniqueItems": true}}));
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for res in resources {
        let name = schema_name(res);
        let gvk = json!([{"group": res.group, "version": res.version, "kind": res.kind}]);
        let mut schema = res
            .schema
            .clone()
            .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
        schema["x-kubernetes-group-version-kind"] = gvk;
        schemas.insert(name.clone(), schema);
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let prefix = if res.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                res.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), res.plural)
        };
        let mut path_params =
            vec![json!({"name": "name", "in": "path", "required": true, "schema": {"type": "string"}})];
        if res.namespaced {
            path_params.push(
                json!({"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}}),
            );
        }
        let patch_types = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ];
        paths.insert(
            format!("{prefix}/{{name}}"),
            json!({
                "get": operation(res, "get", &reference, &[], &[]),
                "put": operation(res, "put", &reference, &["application/json", "application/yaml"], &write_params),
                "patch": operation(res, "patch", &reference, &patch_types, &patch_params),
                "delete": operation(res, "delete", &reference, &[], &[]),
                "parameters": path_params,
            }),
        );
        let collection_params: Vec<Value> = path_params.into_iter().skip(1).collect();
        paths.insert(
            prefix,
            json!({
                "get": operation(res, "list", &reference, &[], &[]),
                "post": operation(res, "post", &reference, &["application/json", "application/yaml"], &write_params),
                "parameters": collection_params,
            }),
        );
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes (kube-ovn-lab emulator)", "version": "v1.33.0"},
           "paths": paths, "components": {"schemas": schemas}})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::registry::Registry;

    #[test]
    fn every_kind_patches_with_field_validation() {
        let mut registry = Registry::with_builtins();
        registry
            .sync_crd(&json!({"metadata": {"name": "subnets.kubeovn.io"}, "spec": {"group": "kubeovn.io",
                "scope": "Cluster", "names": {"plural": "subnets", "kind": "Subnet"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}}]}}))
            .unwrap();
        let resources: Vec<Arc<Resource>> = registry.all().cloned().collect();
        let index = index(&resources);
        let url = index["paths"]["apis/kubeovn.io/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap();
        assert!(url.starts_with("/openapi/v3/apis/kubeovn.io/v1?hash="), "{url}");
        assert!(index["paths"].get("api/v1").is_some());

        let doc = for_path(&resources, "apis/kubeovn.io/v1").unwrap();
        let patch = &doc["paths"]["/apis/kubeovn.io/v1/subnets/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Subnet");
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert!(
            patch["requestBody"]["content"]
                .get("application/strategic-merge-patch+json")
                .is_none()
        );
        let schema = &doc["components"]["schemas"]["io.kubeovn.v1.Subnet"];
        assert_eq!(schema["properties"]["spec"]["type"], "object");

        let core = for_path(&resources, "api/v1").unwrap();
        assert!(
            core["paths"]
                .get("/api/v1/namespaces/{namespace}/pods/{name}")
                .is_some()
        );
        assert!(
            for_path(&resources, "apis/apps/v1").is_some(),
            "StatefulSets are served"
        );
        assert!(for_path(&resources, "apis/batch/v1").is_none());
    }
}
