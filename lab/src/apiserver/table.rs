//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): what
//! `kubectl get` shows, with a custom resource's `additionalPrinterColumns`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::http::Query;
use super::registry::Resource;

/// Reads a printer column's simple JSONPath (`.spec.cidrBlock`, `.status.conditions[0].type`).
fn lookup<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = obj;
    for part in path.trim_start_matches('.').split('.').filter(|p| !p.is_empty()) {
        let (field, index) = match part.split_once('[') {
            Some((f, rest)) => (f, rest.trim_end_matches(']').parse::<usize>().ok()),
            None => (part, None),
        };
        if !field.is_empty() {
            cur = cur.get(field)?;
        }
        if let Some(i) = index {
            cur = cur.get(i)?;
        }
    }
    Some(cur)
}

fn cell(v: Option<&Value>) -> Value {
    match v {
        None | Some(Value::Null) => Value::Null,
        Some(Value::Array(_) | Value::Object(_)) => json!(v.map(ToString::to_string)),
        Some(other) => other.clone(),
    }
}

pub fn table(res: &Resource, items: &[Arc<Value>], rv: u64, q: &Query) -> Value {
    let mut columns = vec![
        json!({"name": "Name", "type": "string", "format": "name", "description": "Name must be unique within a namespace.", "priority": 0}),
    ];
    let mut paths: Vec<String> = Vec::new();
    for c in &res.printer_columns {
        let name = c.get("name").and_then(Value::as_str).unwrap_or_default();
        let path = c.get("jsonPath").and_then(Value::as_str).unwrap_or_default();
        columns.push(
            json!({"name": name, "type": c.get("type").cloned().unwrap_or(json!("string")),
                            "format": c.get("format").cloned().unwrap_or(json!("")),
                            "description": c.get("description").cloned().unwrap_or(json!("")),
                            "priority": c.get("priority").cloned().unwrap_or(json!(0))}),
        );
        paths.push(path.to_owned());
    }
    if !paths.iter().any(|p| p == ".metadata.creationTimestamp") {
        columns.push(json!({"name": "Age", "type": "date", "format": "", "description": "CreationTimestamp", "priority": 0}));
        paths.push(".metadata.creationTimestamp".into());
    }
    let include = q.get("includeObject").map_or("Metadata", String::as_str);
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let mut cells = vec![cell(obj.pointer("/metadata/name"))];
            cells.extend(paths.iter().map(|p| cell(lookup(obj, p))));
            let object = match include {
                "None" => Value::Null,
                "Object" => (**obj).clone(),
                _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata")}),
            };
            json!({"cells": cells, "object": object})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()},
           "columnDefinitions": columns, "rows": rows})
}
