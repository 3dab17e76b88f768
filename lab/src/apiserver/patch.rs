//! JSON patch (RFC 6902) and JSON merge patch (RFC 7386), as the API server applies them.
//!
//! Pure: no I/O. One quirk matters to clients: the API server's JSON patch treats a `test` of a
//! path that does not exist as a test against `null` (kube's finalizer helper sends
//! `test /metadata/finalizers null` before adding the first finalizer).

use serde_json::{Map, Value};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    #[error("the patch is not a JSON array of operations")]
    NotAnArray,
    #[error("operation {index}: {reason}")]
    Operation { index: usize, reason: String },
    #[error("test operation {index} failed: {path} is not {expected}")]
    TestFailed {
        index: usize,
        path: String,
        expected: String,
    },
    #[error("{0}")]
    Invalid(String),
}

/// RFC 6901 pointer segments, unescaped.
fn segments(pointer: &str) -> Result<Vec<String>, String> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let rest = pointer
        .strip_prefix('/')
        .ok_or_else(|| format!("path {pointer:?} does not start with '/'"))?;
    Ok(rest
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn get<'a>(doc: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(doc, |v, seg| match v {
        Value::Object(m) => m.get(seg),
        Value::Array(a) => seg.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn parent_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<(&'a mut Value, String), String> {
    let (last, parents) = path
        .split_last()
        .ok_or("the path must not be the whole document")?;
    let mut cur = doc;
    for seg in parents {
        cur = match cur {
            Value::Object(m) => m.get_mut(seg).ok_or_else(|| format!("{seg:?} does not exist"))?,
            Value::Array(a) => {
                let i: usize = seg
                    .parse()
                    .map_err(|_| format!("{seg:?} is not an array index"))?;
                a.get_mut(i).ok_or_else(|| format!("index {i} is out of range"))?
            }
            _ => return Err(format!("{seg:?} is inside a scalar")),
        };
    }
    Ok((cur, last.clone()))
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_mut(doc, path)?;
    match parent {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = if last == "-" {
                a.len()
            } else {
                last.parse()
                    .map_err(|_| format!("{last:?} is not an array index"))?
            };
            if i > a.len() {
                return Err(format!("index {i} is out of range"));
            }
            a.insert(i, value);
            Ok(())
        }
        _ => Err("cannot add inside a scalar".into()),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let (parent, last) = parent_mut(doc, path)?;
    match parent {
        Value::Object(m) => m.remove(&last).ok_or_else(|| format!("{last:?} does not exist")),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| format!("{last:?} is not an array index"))?;
            if i >= a.len() {
                return Err(format!("index {i} is out of range"));
            }
            Ok(a.remove(i))
        }
        _ => Err("cannot remove inside a scalar".into()),
    }
}

/// Applies an RFC 6902 patch; all or nothing.
pub fn json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let ops = patch.as_array().ok_or(PatchError::NotAnArray)?;
    let mut out = doc.clone();
    for (index, op) in ops.iter().enumerate() {
        let fail = |reason: String| PatchError::Operation { index, reason };
        let name = op
            .get("op")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("missing \"op\"".into()))?;
        let path_text = op
            .get("path")
            .and_then(Value::as_str)
            .ok_or_else(|| fail("missing \"path\"".into()))?;
        let path = segments(path_text).map_err(fail)?;
        let value = || {
            op.get("value")
                .cloned()
                .ok_or_else(|| fail("missing \"value\"".into()))
        };
        let from = || {
            op.get("from")
                .and_then(Value::as_str)
                .ok_or_else(|| fail("missing \"from\"".into()))
                .and_then(|f| segments(f).map_err(fail))
        };
        match name {
            "add" => add(&mut out, &path, value()?).map_err(fail)?,
            "remove" => {
                remove(&mut out, &path).map_err(fail)?;
            }
            "replace" => {
                if get(&out, &path).is_none() {
                    return Err(fail(format!("{path_text} does not exist")));
                }
                remove(&mut out, &path).map_err(fail)?;
                add(&mut out, &path, value()?).map_err(fail)?;
            }
            "move" => {
                let from = from()?;
                let v = remove(&mut out, &from).map_err(fail)?;
                add(&mut out, &path, v).map_err(fail)?;
            }
            "copy" => {
                let v = get(&out, &from()?)
                    .cloned()
                    .ok_or_else(|| fail("\"from\" does not exist".into()))?;
                add(&mut out, &path, v).map_err(fail)?;
            }
            "test" => {
                let expected = value()?;
                // The API server's quirk: a missing path tests equal to null.
                let actual = get(&out, &path).cloned().unwrap_or(Value::Null);
                if actual != expected {
                    return Err(PatchError::TestFailed {
                        index,
                        path: path_text.into(),
                        expected: expected.to_string(),
                    });
                }
            }
            other => return Err(fail(format!("unknown op {other:?}"))),
        }
    }
    Ok(out)
}

/// Applies an RFC 7386 merge patch: objects merge, `null` deletes, everything else replaces.
pub fn merge_patch(doc: &Value, patch: &Value) -> Value {
    match patch {
        Value::Object(p) => {
            let mut out = match doc {
                Value::Object(d) => d.clone(),
                _ => Map::new(),
            };
            for (k, v) in p {
                if v.is_null() {
                    out.remove(k);
                } else {
                    let merged = merge_patch(out.get(k).unwrap_or(&Value::Null), v);
                    out.insert(k.clone(), merged);
                }
            }
            Value::Object(out)
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finalizer_patch_as_kube_sends_it() {
        let obj = json!({"metadata": {"name": "a"}});
        let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                           {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]);
        assert_eq!(
            json_patch(&obj, &patch).unwrap()["metadata"]["finalizers"],
            json!(["f"])
        );
        let patch = json!([{"op": "test", "path": "/metadata/finalizers", "value": ["f"]},
                           {"op": "remove", "path": "/metadata/finalizers/0"}]);
        let out = json_patch(
            &json_patch(
                &obj,
                &json!([{"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]),
            )
            .unwrap(),
            &patch,
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!([]));
    }

    #[test]
    fn json_patch_ops_and_failures() {
        let doc = json!({"a": {"b": [1, 2]}, "c~d": 1, "e/f": 2});
        let p = json!([{"op": "add", "path": "/a/b/-", "value": 3}, {"op": "replace", "path": "/c~0d", "value": 5},
                       {"op": "move", "from": "/e~1f", "path": "/g"}, {"op": "copy", "from": "/g", "path": "/h"},
                       {"op": "remove", "path": "/a/b/0"}]);
        assert_eq!(
            json_patch(&doc, &p).unwrap(),
            json!({"a": {"b": [2, 3]}, "c~d": 5, "g": 2, "h": 2})
        );
        assert!(matches!(
            json_patch(&doc, &json!([{"op": "test", "path": "/a/b/0", "value": 9}])),
            Err(PatchError::TestFailed { .. })
        ));
        assert!(json_patch(&doc, &json!([{"op": "remove", "path": "/nope"}])).is_err());
        assert!(json_patch(&doc, &json!([{"op": "replace", "path": "/nope", "value": 1}])).is_err());
        assert!(json_patch(&doc, &json!({"op": "add"})).is_err());
        assert!(json_patch(&doc, &json!([{"op": "frob", "path": "/a"}])).is_err());
    }

    #[test]
    fn merge_patch_rfc7386() {
        let doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        let patch = json!({"a": "z", "c": {"f": null}, "l": [3], "n": {"x": 1}});
        assert_eq!(
            merge_patch(&doc, &patch),
            json!({"a": "z", "c": {"d": "e"}, "l": [3], "n": {"x": 1}})
        );
    }
}
