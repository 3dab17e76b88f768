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

mod garbage {
    //! Random documents full of the keys and shapes the code branches on: every input gets an
    //! answer (a value or an error), never a panic.

    use serde_json::{Map, Value, json};

    use super::{T1, T2, builtin, widget};
    use crate::apiserver::managed::{apply, record_update, strategic_merge};

    /// xorshift64*: deterministic, no dependency.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            usize::try_from(self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33).unwrap_or(0) % n
        }
    }

    const KEYS: &[&str] = &[
        "spec",
        "status",
        "metadata",
        "containers",
        "ports",
        "env",
        "name",
        "containerPort",
        "protocol",
        "finalizers",
        "labels",
        "tags",
        "args",
        "selector",
        "params",
        "x",
        "$patch",
        "$retainKeys",
        "$setElementOrder/containers",
        "$deleteFromPrimitiveList/finalizers",
        "managedFields",
        "apiVersion",
        "kind",
        "ownerReferences",
        "uid",
        "conditions",
        "type",
        "port",
    ];

    fn value(rng: &mut Rng, depth: u32) -> Value {
        match rng.below(if depth == 0 { 5 } else { 8 }) {
            0 => Value::Null,
            1 => json!(rng.below(3)),
            2 => json!(["a", "b", "replace", "delete", "merge", "TCP"][rng.below(6)]),
            3 => json!(rng.below(2) == 0),
            4 => json!(KEYS[rng.below(KEYS.len())]),
            5 | 6 => {
                let mut m = Map::new();
                for _ in 0..rng.below(4) {
                    m.insert(KEYS[rng.below(KEYS.len())].to_owned(), value(rng, depth - 1));
                }
                Value::Object(m)
            }
            _ => Value::Array((0..rng.below(4)).map(|_| value(rng, depth - 1)).collect()),
        }
    }

    #[test]
    fn random_documents_never_panic() {
        let resources = [builtin("", "pods"), builtin("", "configmaps"), widget()];
        let mut rng = Rng(0x5eed_1234_abcd_ef01);
        for i in 0..3000 {
            let res = &resources[i % resources.len()];
            let mut live = value(&mut rng, 4);
            let mut patch = value(&mut rng, 4);
            if i % 2 == 0 {
                // Often well-typed enough to get past the first checks.
                for doc in [&mut live, &mut patch] {
                    if let Value::Object(m) = doc {
                        m.insert("apiVersion".into(), json!(res.api_version()));
                        m.insert("kind".into(), json!(res.kind));
                        m.remove("managedFields");
                    }
                }
            }
            let _ = strategic_merge(res, &live, &patch);
            let _ = apply(res, Some(&live), &patch, "m", i % 3 == 0, None, T1);
            let _ = apply(res, None, &patch, "m", false, None, T1);
            let _ = apply(res, Some(&live), &patch, "m", true, Some("status"), T1);
            let mut new = patch.clone();
            record_update(res, Some(&live), &mut new, "u", None, T2);
            let mut created = patch;
            record_update(res, None, &mut created, "u", (i % 2 == 0).then_some("status"), T2);
        }
    }
}
