//! A value for every field of a CRD's structural schema: each property set, each array with one
//! item, each map with one entry, down to the leaves, with a leaf value of the declared type
//! that the schema's own constraints accept (its first enum value, its minimum, a timestamp for
//! `date-time`, a string its pattern matches). The server must accept such an object, and our
//! types must read it: every field the CRD allows, not only those the examples use.

use regex::Regex;
use serde_json::{Map, Value, json};

/// Strings tried, in order, against a `pattern`: the first it matches is used.
const PATTERNED: &[&str] = &["x", "65000:1", "1:2:3"];

/// Fields whose schema is a plain string but whose values our types read as one of a few
/// (path suffix, value): a condition's `status` is `True`, `False` or `Unknown`, and reads as
/// `Unknown` when it is anything else (api/src/crd/condition.rs), a lossy read by design.
const MEANINGFUL: &[(&str, &str)] = &[(".conditions[0].status", "True")];

/// The sample of `schema` at `path` (for errors: `spec.bfd.minRX`).
pub fn sample(schema: &Value, path: &str) -> Result<Value, String> {
    if let Some((_, value)) = MEANINGFUL.iter().find(|(suffix, _)| path.ends_with(suffix)) {
        return Ok(json!(value));
    }
    if let Some(first) = schema["enum"].as_array().and_then(|e| e.first()) {
        return Ok(first.clone());
    }
    match schema["type"].as_str() {
        Some("object") => {
            let mut out = Map::new();
            if let Some(props) = schema["properties"].as_object() {
                for (name, prop) in props {
                    out.insert(name.clone(), sample(prop, &format!("{path}.{name}"))?);
                }
            } else if schema["additionalProperties"].is_object() {
                let value = sample(&schema["additionalProperties"], &format!("{path}[k]"))?;
                out.insert("k".to_owned(), value);
            }
            Ok(Value::Object(out))
        }
        Some("array") => Ok(json!([sample(&schema["items"], &format!("{path}[0]"))?])),
        Some("string") => string(schema, path),
        Some("integer") => {
            let min = schema["minimum"].as_f64().unwrap_or(1.0);
            let max = schema["maximum"].as_f64().unwrap_or(f64::MAX);
            #[allow(clippy::cast_possible_truncation, reason = "schema bounds are small integers")]
            let n = min.max(1.0).min(max) as i64;
            Ok(json!(n))
        }
        Some("number") => Ok(json!(1)),
        Some("boolean") => Ok(json!(true)),
        other => Err(format!("{path}: no sample for type {other:?}")),
    }
}

fn string(schema: &Value, path: &str) -> Result<Value, String> {
    if schema["format"] == "date-time" {
        return Ok(json!("2026-01-02T03:04:05Z"));
    }
    let Some(pattern) = schema["pattern"].as_str() else {
        return Ok(json!("x"));
    };
    let re = Regex::new(pattern).map_err(|e| format!("{path}: pattern {pattern}: {e}"))?;
    PATTERNED
        .iter()
        .find(|s| re.is_match(s))
        .map(|s| json!(s))
        .ok_or_else(|| format!("{path}: no sample string matches {pattern}; add one to PATTERNED"))
}

#[test]
fn every_field_gets_a_value_its_schema_accepts() {
    let schema = json!({"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "string", "enum": ["e1", "e2"]}},
        "m": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 5.0}},
        "t": {"type": "string", "format": "date-time"},
        "c": {"type": "string", "pattern": "^[0-9]+:[0-9]+$"},
        "v": {"type": "integer", "minimum": 0.0, "maximum": 0.0}
    }});
    assert_eq!(
        sample(&schema, "spec").unwrap(),
        json!({"a": ["e1"], "m": {"k": 5}, "t": "2026-01-02T03:04:05Z", "c": "65000:1", "v": 0})
    );
    let e = sample(&json!({"type": "string", "pattern": "^z$"}), "spec.z").unwrap_err();
    assert!(e.contains("spec.z"), "{e}");
}
