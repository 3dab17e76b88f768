//! Strategic merge patch (`application/strategic-merge-patch+json`), for the built-in kinds.
//!
//! Pure: no I/O. Maps merge key by key and `null` deletes, as in a JSON merge patch. Lists follow
//! [`ListRules::patch_strategy`]: atomic lists are replaced; lists of objects with a merge key
//! merge element by element (elements with a new key are appended); lists of scalars with the
//! merge strategy (finalizers) gain the patch's values. The directives:
//!
//! - `$patch: replace` in a map replaces the map; as an element of a list, replaces the list;
//! - `$patch: delete` in a map deletes it; in a list element with the merge key, deletes the
//!   element with that key; `$patch: merge` is the default;
//! - `$deleteFromPrimitiveList/<field>: [..]` removes values from a list of scalars;
//! - `$setElementOrder/<field>: [..]` orders the resulting list: the elements it names in its
//!   order, the others (present only in the object) slotted back by their order in the object;
//! - `$retainKeys: [..]` clears every key of the object's map that it does not name.
//!
//! The API server refuses strategic merge patches for custom resources (415): they have no Go
//! struct tags to take merge keys from.

use serde_json::{Map, Value};

use super::rules::{ListRules, PatchStrategy};
use crate::apiserver::errors::ApiError;
use crate::apiserver::registry::Resource;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StrategicMergeError {
    /// The resource takes no strategic merge patches (custom resources).
    #[error(
        "the body of the request was in an unknown format - accepted media types include: \
         application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml"
    )]
    Unsupported,
    /// A malformed patch (400, as the API server answers malformed directives).
    #[error("{0}")]
    BadRequest(String),
    /// A well-formed patch that cannot apply (422).
    #[error("{0}")]
    Invalid(String),
}

impl StrategicMergeError {
    pub fn into_api_error(self) -> ApiError {
        match self {
            Self::Unsupported => ApiError::new(415, "UnsupportedMediaType", self.to_string()),
            Self::BadRequest(m) => ApiError::bad_request(m),
            Self::Invalid(m) => ApiError::new(422, "Invalid", m),
        }
    }
}

type Result<T, E = StrategicMergeError> = std::result::Result<T, E>;

fn bad(message: impl Into<String>) -> StrategicMergeError {
    StrategicMergeError::BadRequest(message.into())
}

/// Whether `res` takes strategic merge patches at all.
pub fn supported(res: &Resource) -> bool {
    !res.from_crd
}

/// Applies a strategic merge patch to `old`.
pub fn strategic_merge(res: &Resource, old: &Value, patch: &Value) -> Result<Value> {
    if !supported(res) {
        return Err(StrategicMergeError::Unsupported);
    }
    let patch = patch
        .as_object()
        .ok_or_else(|| bad("invalid JSON document: a strategic merge patch must be an object"))?;
    match merge_map(&ListRules::for_resource(res), old.as_object(), patch)? {
        Some(m) => Ok(Value::Object(m)),
        None => Err(bad("a strategic merge patch cannot delete the whole object")),
    }
}

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";
const ORDER: &str = "$setElementOrder/";

/// What a `$patch` directive asks of a map.
#[derive(Debug, PartialEq, Eq)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

fn directive(m: &Map<String, Value>) -> Result<Directive> {
    match m.get(PATCH) {
        None => Ok(Directive::Merge),
        Some(Value::String(s)) => match s.as_str() {
            "merge" => Ok(Directive::Merge),
            "replace" => Ok(Directive::Replace),
            "delete" => Ok(Directive::Delete),
            other => Err(bad(format!("unknown patch type: {other:?}"))),
        },
        Some(other) => Err(bad(format!("unknown patch type: {other}"))),
    }
}

fn string_list<'p>(value: &'p Value, what: &str) -> Result<&'p Vec<Value>> {
    value
        .as_array()
        .ok_or_else(|| bad(format!("invalid patch format of {what}")))
}

/// Merges `patch` into `original`; `None` when the patch deletes the map.
fn merge_map(
    rules: &ListRules,
    original: Option<&Map<String, Value>>,
    patch: &Map<String, Value>,
) -> Result<Option<Map<String, Value>>> {
    let mut out = match directive(patch)? {
        Directive::Delete => return Ok(None),
        Directive::Replace => Map::new(),
        Directive::Merge => original.cloned().unwrap_or_default(),
    };
    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keep: Vec<&str> = string_list(retain, "retainKeys")?
            .iter()
            .map(|k| {
                k.as_str()
                    .ok_or_else(|| bad("invalid patch format of retainKeys"))
            })
            .collect::<Result<_>>()?;
        if let Some(k) = patch
            .keys()
            .find(|k| !k.starts_with('$') && !keep.contains(&k.as_str()))
        {
            return Err(StrategicMergeError::Invalid(format!(
                "patch content doesn't match retainKeys list: {k:?} is not retained"
            )));
        }
        out.retain(|k, _| keep.contains(&k.as_str()));
    }
    // Directives first: values to delete apply to the object's list before the patch's values
    // are added; orders apply to the result.
    let mut orders = Vec::new();
    for (k, v) in patch {
        if let Some(field) = k.strip_prefix(DELETE_FROM) {
            let gone = string_list(v, "primitive list")?;
            if let Some(Value::Array(list)) = out.get_mut(field) {
                list.retain(|x| !gone.contains(x));
            }
        } else if let Some(field) = k.strip_prefix(ORDER) {
            orders.push((field, string_list(v, "setElementOrder list")?));
        } else if k.starts_with('$') && k != PATCH && k != RETAIN_KEYS {
            return Err(bad(format!("unknown patch directive {k:?}")));
        }
    }
    let before = out.clone();
    for (k, v) in patch {
        if k.starts_with('$') {
            continue;
        }
        let field_rules = rules.field(k);
        match v {
            Value::Null => {
                out.remove(k);
            }
            Value::Object(p) => match merge_map(&field_rules, out.get(k).and_then(Value::as_object), p)? {
                Some(m) => {
                    out.insert(k.clone(), Value::Object(m));
                }
                None => {
                    out.remove(k);
                }
            },
            Value::Array(p) => {
                let merged = merge_list(&field_rules, out.get(k).and_then(Value::as_array), p)?;
                out.insert(k.clone(), Value::Array(merged));
            }
            scalar => {
                out.insert(k.clone(), scalar.clone());
            }
        }
    }
    for (field, order) in orders {
        let key = match rules.field(field).patch_strategy() {
            PatchStrategy::Replace => continue,
            PatchStrategy::MergeValues => None,
            PatchStrategy::MergeByKey(key) => Some(key),
        };
        let original_list = before
            .get(field)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        if let Some(Value::Array(list)) = out.get_mut(field) {
            *list = reorder(std::mem::take(list), order, key, &original_list)?;
        }
    }
    Ok(Some(out))
}

fn is_replace_marker(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.len() == 1 && m.get(PATCH).and_then(Value::as_str) == Some("replace"))
}

fn merge_list(rules: &ListRules, original: Option<&Vec<Value>>, patch: &[Value]) -> Result<Vec<Value>> {
    let strategy = rules.patch_strategy();
    if strategy == PatchStrategy::Replace {
        return Ok(patch.to_vec());
    }
    let item_rules = rules.item();
    // `{"$patch": "replace"}` among the elements: the other elements are the whole list.
    let replace = patch.iter().any(is_replace_marker);
    let mut out = if replace {
        Vec::new()
    } else {
        original.cloned().unwrap_or_default()
    };
    for element in patch.iter().filter(|e| !is_replace_marker(e)) {
        if let PatchStrategy::MergeByKey(key) = strategy {
            let m = element.as_object().ok_or_else(|| {
                bad(format!(
                    "the list merged by {key:?} can only hold objects, got {element}"
                ))
            })?;
            let id = m.get(key).ok_or_else(|| {
                bad(format!(
                    "map: {element} does not contain declared merge key: {key}"
                ))
            })?;
            let at = out.iter().position(|o| o.get(key) == Some(id));
            if directive(m)? == Directive::Delete {
                out.retain(|o| o.get(key) != Some(id));
                continue;
            }
            let current = at.and_then(|i| out[i].as_object());
            match (merge_map(&item_rules, current, m)?, at) {
                (Some(merged), Some(i)) => out[i] = Value::Object(merged),
                (Some(merged), None) => out.push(Value::Object(merged)),
                (None, Some(i)) => {
                    out.remove(i);
                }
                (None, None) => {}
            }
        } else {
            if element.is_object() || element.is_array() {
                return Err(bad(format!(
                    "the list merged as a set can only hold scalars, got {element}"
                )));
            }
            if !out.contains(element) {
                out.push(element.clone());
            }
        }
    }
    Ok(out)
}

/// Orders `list` by `order` (elements, or objects carrying the merge key `key`). Elements the
/// order does not name keep their relative order and go back in before the first ordered element
/// that follows them in the object's list `original`.
fn reorder(list: Vec<Value>, order: &[Value], key: Option<&str>, original: &[Value]) -> Result<Vec<Value>> {
    let id = |v: &Value| -> Option<Value> {
        match key {
            Some(k) => v.get(k).cloned(),
            None => Some(v.clone()),
        }
    };
    let mut wanted = Vec::with_capacity(order.len());
    for o in order {
        wanted.push(id(o).ok_or_else(|| bad("invalid patch format of setElementOrder list"))?);
    }
    let mut slots: Vec<Option<Value>> = list.into_iter().map(Some).collect();
    let mut ordered = Vec::new();
    for w in &wanted {
        if let Some(slot) = slots
            .iter_mut()
            .find(|s| s.as_ref().is_some_and(|v| id(v).as_ref() == Some(w)))
        {
            ordered.extend(slot.take());
        }
    }
    let position = |v: &Value| {
        let want = id(v);
        original.iter().position(|o| id(o) == want)
    };
    let mut j = 0;
    for rest in slots.into_iter().flatten() {
        let at = position(&rest);
        while j < ordered.len() && !matches!((position(&ordered[j]), at), (Some(a), Some(b)) if a > b) {
            j += 1;
        }
        ordered.insert(j, rest);
        j += 1;
    }
    Ok(ordered)
}
