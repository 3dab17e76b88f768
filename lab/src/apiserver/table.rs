//! Server-side printing (`Accept: application/json;as=Table;g=meta.k8s.io;v=v1`): what
//! `kubectl get` shows.
//!
//! Pure: no I/O; the current time comes in, for ages. Custom resources print as the
//! apiextensions server prints them: Name, their `additionalPrinterColumns`, then Age unless a
//! column shows the creation time. CustomResourceDefinitions use the generic default convertor
//! (Name, "Created At" as RFC 3339). Other built-ins print the columns of the real printer that a
//! JSONPath can express (a Pod's phase, a Service's type; not a Pod's READY or RESTARTS counts).

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

/// `duration.HumanDuration` from k8s.io/apimachinery: how kubectl's AGE column reads.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let days = (hours / 24) % 365;
        return if days == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{days}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// A cell as the apiextensions table convertor makes it (`cellForJSONValue`): string columns
/// print any value (lists and maps as compact JSON, like kubectl's JSONPath printer), typed
/// columns keep values of their type and drop others, dates become ages.
fn cell(type_: &str, v: Option<&Value>, now: jiff::Timestamp) -> Value {
    let Some(v) = v.filter(|v| !v.is_null()) else {
        return Value::Null;
    };
    match (type_, v) {
        ("string", Value::String(_)) | ("boolean", Value::Bool(_)) => v.clone(),
        ("string", other) => json!(other.to_string()),
        ("integer", Value::Number(n)) => n
            .as_i64()
            .map(Value::from)
            .or_else(|| {
                #[allow(
                    clippy::cast_possible_truncation,
                    reason = "Go's int64(float64) truncates too"
                )]
                n.as_f64().map(|f| Value::from(f as i64))
            })
            .unwrap_or(Value::Null),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, Value::from),
        ("date", Value::String(s)) => match s.parse::<jiff::Timestamp>() {
            Ok(t) => json!(human_duration(now.as_second() - t.as_second())),
            Err(_) => json!("<unknown>"),
        },
        _ => Value::Null,
    }
}

struct Column {
    definition: Value,
    path: String,
    type_: String,
}

fn columns(res: &Resource) -> Vec<Column> {
    let mut out: Vec<Column> = res
        .printer_columns
        .iter()
        .map(|c| {
            let text = |k: &str| c.get(k).and_then(Value::as_str).unwrap_or_default().to_owned();
            let type_ = c.get("type").and_then(Value::as_str).unwrap_or("string");
            Column {
                definition: json!({"name": text("name"), "type": type_,
                                   "format": c.get("format").cloned().unwrap_or(json!("")),
                                   "description": c.get("description").cloned().unwrap_or(json!("")),
                                   "priority": c.get("priority").cloned().unwrap_or(json!(0))}),
                path: text("jsonPath"),
                type_: type_.to_owned(),
            }
        })
        .collect();
    if !out.iter().any(|c| c.path == ".metadata.creationTimestamp") {
        out.push(Column {
            definition: json!({"name": "Age", "type": "date", "format": "",
                               "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
                               "priority": 0}),
            path: ".metadata.creationTimestamp".into(),
            type_: "date".into(),
        });
    }
    out
}

fn row_object(obj: &Value, include: &str) -> Value {
    match include {
        "None" => Value::Null,
        "Object" => obj.clone(),
        _ => {
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata")})
        }
    }
}

pub fn table(res: &Resource, items: &[Arc<Value>], rv: u64, q: &Query, now: jiff::Timestamp) -> Value {
    let include = q.get("includeObject").map_or("Metadata", String::as_str);
    let name_column = json!({"name": "Name", "type": "string", "format": "name",
                             "description": "Name must be unique within a namespace.", "priority": 0});
    let (definitions, rows): (Vec<Value>, Vec<Value>) = if res.plural == "customresourcedefinitions" {
        // The generic default convertor: the creation time as RFC 3339, not an age.
        let rows = items
            .iter()
            .map(|obj| {
                json!({"cells": [obj.pointer("/metadata/name"), obj.pointer("/metadata/creationTimestamp")],
                       "object": row_object(obj, include)})
            })
            .collect();
        let created = json!({"name": "Created At", "type": "date", "format": "",
                             "description": "CreationTimestamp is a timestamp representing the server time when this object was created.",
                             "priority": 0});
        (vec![name_column, created], rows)
    } else {
        let columns = columns(res);
        let rows = items
            .iter()
            .map(|obj| {
                let mut cells = vec![cell("string", obj.pointer("/metadata/name"), now)];
                cells.extend(columns.iter().map(|c| cell(&c.type_, lookup(obj, &c.path), now)));
                json!({"cells": cells, "object": row_object(obj, include)})
            })
            .collect();
        let mut definitions = vec![name_column];
        definitions.extend(columns.into_iter().map(|c| c.definition));
        (definitions, rows)
    };
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv.to_string()},
           "columnDefinitions": definitions, "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (119, "119s"),
            (120, "2m"),
            (185, "3m5s"),
            (600, "10m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60 * 7, "3h7m"),
            (30 * 3600, "30h"),
            (3 * 86400 + 3600, "3d1h"),
            (40 * 86400, "40d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds} s");
        }
    }

    #[test]
    fn cells_follow_their_column_type() {
        let now: jiff::Timestamp = "2026-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(cell("string", Some(&json!(1400)), now), json!("1400"));
        assert_eq!(
            cell("string", Some(&json!(["a", "b"])), now),
            json!("[\"a\",\"b\"]")
        );
        assert_eq!(cell("integer", Some(&json!(3.7)), now), json!(3));
        assert_eq!(cell("number", Some(&json!(3)), now), json!(3.0));
        assert_eq!(cell("boolean", Some(&json!("yes")), now), Value::Null);
        assert_eq!(
            cell("date", Some(&json!("2026-01-01T00:00:00Z")), now),
            json!("10m")
        );
        assert_eq!(cell("date", Some(&json!("yesterday")), now), json!("<unknown>"));
        assert_eq!(cell("string", None, now), Value::Null);
    }

    #[test]
    fn custom_resources_get_their_columns_then_age() {
        let res = Resource {
            group: "kubeovn.io".into(),
            version: "v1".into(),
            plural: "subnets".into(),
            singular: "subnet".into(),
            kind: "Subnet".into(),
            namespaced: false,
            short_names: vec![],
            status_subresource: true,
            scale_subresource: false,
            schema: None,
            printer_columns: vec![json!({"name": "CIDR", "type": "string", "jsonPath": ".spec.cidrBlock"})],
            tracks_generation: true,
            extra_field_selectors: &[],
            from_crd: true,
        };
        let obj = Arc::new(
            json!({"metadata": {"name": "a", "creationTimestamp": "2026-01-01T00:00:00Z"},
                                  "spec": {"cidrBlock": "10.0.0.0/24"}}),
        );
        let now: jiff::Timestamp = "2026-01-01T00:00:30Z".parse().unwrap();
        let t = table(&res, &[obj], 7, &Query::new(), now);
        let names: Vec<&str> = t["columnDefinitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["Name", "CIDR", "Age"]);
        assert_eq!(t["rows"][0]["cells"], json!(["a", "10.0.0.0/24", "30s"]));
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    }
}
