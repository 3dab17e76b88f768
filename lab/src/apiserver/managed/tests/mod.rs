//! Unit tests of field ownership, apply and strategic merge, on the module's pure functions.

mod fieldset;
mod ownership;
mod strategic;

use std::sync::Arc;

use serde_json::{Value, json};

use crate::apiserver::registry::{Registry, Resource};

/// A built-in resource by group and plural.
fn builtin(group: &str, plural: &str) -> Arc<Resource> {
    Registry::with_builtins().lookup(group, "v1", plural).unwrap()
}

/// A custom resource `widgets.example.com/v1` with list types in its schema and a status
/// subresource.
fn widget() -> Arc<Resource> {
    let mut r = Registry::with_builtins();
    let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "kind": "Widget"},
        "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {
                    "x": {"type": "string"}, "y": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["port", "protocol"],
                              "items": {"type": "object", "properties": {
                                  "port": {"type": "integer"}, "protocol": {"type": "string", "default": "TCP"},
                                  "name": {"type": "string"}}}},
                    "selector": {"type": "object", "x-kubernetes-map-type": "atomic",
                                 "additionalProperties": {"type": "string"}},
                    "params": {"type": "object", "additionalProperties": {"type": "object",
                               "properties": {"v": {"type": "string"}}}}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}});
    r.sync_crd(&crd).unwrap();
    r.lookup("example.com", "v1", "widgets").unwrap()
}

/// The fieldsV1 of `obj`'s entry for `manager` and `operation`.
fn fields_of(obj: &Value, manager: &str, operation: &str) -> Option<Value> {
    obj.pointer("/metadata/managedFields")?
        .as_array()?
        .iter()
        .find(|e| e["manager"] == manager && e["operation"] == operation)
        .map(|e| e["fieldsV1"].clone())
}

/// The (manager, operation, subresource) of every entry, in stored order.
fn owners(obj: &Value) -> Vec<(String, String, String)> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            (s("manager"), s("operation"), s("subresource"))
        })
        .collect()
}

const T1: &str = "2026-01-01T00:00:00Z";
const T2: &str = "2026-01-01T00:01:00Z";
const T3: &str = "2026-01-01T00:02:00Z";
