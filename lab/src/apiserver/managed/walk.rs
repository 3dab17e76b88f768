//! Walks over objects that field ownership is computed from: the fields an applied
//! configuration sets, the fields a write added, changed or removed, the merge of an applied
//! configuration into the live object, and the removal of fields an applier gave up.
//!
//! Pure: no I/O. List elements are identified as [`ListRules`] says (by key, by value, or not at
//! all for atomic lists). Applied configurations are checked strictly (an element without its key
//! is an error the client sees); stored objects were written by other verbs that do not check
//! this, so their unkeyable elements fall back to positions instead of failing the write.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, Path, PathElement, canonical, display_path};
use super::rules::{ListRules, ListType};

/// The path element of element `index` of a list, or why it cannot have one.
pub fn item_element(list: &ListType, index: usize, item: &Value) -> Result<PathElement, String> {
    match list {
        ListType::Atomic => Ok(PathElement::Index(index)),
        ListType::Set => {
            if item.is_object() || item.is_array() {
                Err(format!(
                    "element {index}: a set list can only hold scalars, got {}",
                    canonical(item)
                ))
            } else {
                Ok(PathElement::Value(canonical(item)))
            }
        }
        ListType::Map(keys) => {
            let obj = item
                .as_object()
                .ok_or_else(|| format!("element {index}: an associative list can only hold objects"))?;
            let mut key = Map::new();
            for k in keys {
                let v = obj
                    .get(&k.name)
                    .filter(|v| !v.is_null())
                    .or(k.default.as_ref())
                    .ok_or_else(|| {
                        format!(
                            "element {index}: associative list with keys has an element that omits key field {:?} (and doesn't have default value)",
                            k.name
                        )
                    })?;
                key.insert(k.name.clone(), v.clone());
            }
            Ok(PathElement::Key(canonical(&Value::Object(key))))
        }
    }
}

/// The elements of a stored list: keyed where possible, else by position; repeats are ignored as
/// the API server ignores them.
fn live_elements<'v>(list: &ListType, items: &'v [Value]) -> Vec<(PathElement, &'v Value)> {
    let mut seen = HashSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, v)| (item_element(list, i, v).unwrap_or(PathElement::Index(i)), v))
        .filter(|(pe, _)| seen.insert(pe.clone()))
        .collect()
}

/// The fields an applied configuration sets (what the applier will own): every scalar, every
/// atomic list or map, every element of a set or associative list, and every key of a map
/// (not the fields of a struct, which are owned through what is inside them). Errors name the
/// path of each element that cannot be identified, or that is repeated.
pub fn applied_set(
    rules: &ListRules,
    value: &Value,
    path: &mut Path,
    out: &mut FieldSet,
    errors: &mut Vec<String>,
) {
    match value {
        Value::Object(m) => {
            if rules.atomic_map() {
                out.insert(path);
                return;
            }
            for (k, v) in m {
                path.push(PathElement::Field(k.clone()));
                if rules.undeclared(k) {
                    errors.push(format!("{}: field not declared in schema", display_path(path)));
                    path.pop();
                    continue;
                }
                applied_set(&rules.field(k), v, path, out, errors);
                if !rules.declared(k) {
                    out.insert(path);
                }
                path.pop();
            }
        }
        Value::Array(items) => {
            let list = rules.list_type();
            if list == ListType::Atomic {
                out.insert(path);
                return;
            }
            let item_rules = rules.item();
            let mut seen = HashSet::new();
            for (i, item) in items.iter().enumerate() {
                match item_element(&list, i, item) {
                    Ok(pe) => {
                        if !seen.insert(pe.clone()) {
                            errors.push(format!(
                                "{}: duplicate entries for key {}",
                                display_path(path),
                                pe.display()
                            ));
                            continue;
                        }
                        path.push(pe);
                        applied_set(&item_rules, item, path, out, errors);
                        out.insert(path);
                        path.pop();
                    }
                    Err(e) => errors.push(format!("{}: {e}", display_path(path))),
                }
            }
        }
        _ => out.insert(path),
    }
}

/// What a write did, field by field.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.modified.is_empty() && self.removed.is_empty()
    }

    /// Removes paths nobody may own (server-set metadata).
    pub fn subtract(&mut self, set: &FieldSet) {
        self.added.subtract(set);
        self.modified.subtract(set);
        self.removed.subtract(set);
    }

    /// Added or modified: what the writer takes.
    pub fn changed(&self) -> FieldSet {
        let mut c = self.added.clone();
        c.union(&self.modified);
        c
    }
}

enum Node<'v> {
    Map(Option<&'v Map<String, Value>>),
    List(Option<&'v Vec<Value>>),
}

/// Which kind of node `old`/`new` are, when both are containers of one kind (a missing value or
/// `null` fits either).
fn container<'v>(old: Option<&'v Value>, new: Option<&'v Value>) -> Option<(Node<'v>, Node<'v>)> {
    let absent = |v: Option<&Value>| v.is_none_or(Value::is_null);
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => Some((Node::Map(Some(a)), Node::Map(Some(b)))),
        (Some(Value::Object(a)), n) if absent(n) => Some((Node::Map(Some(a)), Node::Map(None))),
        (o, Some(Value::Object(b))) if absent(o) => Some((Node::Map(None), Node::Map(Some(b)))),
        (Some(Value::Array(a)), Some(Value::Array(b))) => Some((Node::List(Some(a)), Node::List(Some(b)))),
        (Some(Value::Array(a)), n) if absent(n) => Some((Node::List(Some(a)), Node::List(None))),
        (o, Some(Value::Array(b))) if absent(o) => Some((Node::List(None), Node::List(Some(b)))),
        _ => None,
    }
}

/// Compares `old` and `new` (either may be missing) at `path`, as the API server does to find
/// what an update did: a scalar, an atomic list or map, or a container empty on both sides is one
/// field (added, removed or modified); a container is added or removed with all it holds, and is
/// itself a path too (which is why an update that creates `labels` owns `f:labels` with a `.`).
pub fn compare(
    rules: &ListRules,
    old: Option<&Value>,
    new: Option<&Value>,
    path: &mut Path,
    out: &mut Comparison,
) {
    if old.is_none() && new.is_none() {
        return;
    }
    let leaf = |out: &mut Comparison, path: &Path| match (old, new) {
        (None, Some(_)) => out.added.insert(path),
        (Some(_), None) => out.removed.insert(path),
        (Some(a), Some(b)) if a != b => out.modified.insert(path),
        _ => {}
    };
    match container(old, new) {
        Some((Node::Map(a), Node::Map(b))) => {
            let empty = |m: Option<&Map<String, Value>>| m.is_none_or(Map::is_empty);
            if rules.atomic_map() || (empty(a) && empty(b)) {
                leaf(out, path);
                return;
            }
            let mut keys: Vec<&String> = a.into_iter().chain(b).flat_map(Map::keys).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                path.push(PathElement::Field(k.clone()));
                compare(
                    &rules.field(k),
                    a.and_then(|m| m.get(k)),
                    b.and_then(|m| m.get(k)),
                    path,
                    out,
                );
                path.pop();
            }
        }
        Some((Node::List(a), Node::List(b))) => {
            let list = rules.list_type();
            let empty = |l: Option<&Vec<Value>>| l.is_none_or(Vec::is_empty);
            if list == ListType::Atomic || (empty(a) && empty(b)) {
                leaf(out, path);
                return;
            }
            let a: HashMap<PathElement, &Value> = live_elements(&list, a.map_or(&[], Vec::as_slice))
                .into_iter()
                .collect();
            let b = live_elements(&list, b.map_or(&[], Vec::as_slice));
            let item_rules = rules.item();
            let mut done = HashSet::new();
            for (pe, new_item) in &b {
                path.push(pe.clone());
                compare(&item_rules, a.get(pe).copied(), Some(new_item), path, out);
                path.pop();
                done.insert(pe.clone());
            }
            for (pe, old_item) in &a {
                if !done.contains(pe) {
                    path.push(pe.clone());
                    compare(&item_rules, Some(old_item), None, path, out);
                    path.pop();
                }
            }
        }
        _ => {
            leaf(out, path);
            return;
        }
    }
    match (old, new) {
        (None, _) => out.added.insert(path),
        (_, None) => out.removed.insert(path),
        _ => {}
    }
}

/// Merges an applied configuration into the live object: the configuration's scalars and atomic
/// values win, maps merge key by key, and set and associative lists merge element by element.
/// Elements only in the configuration go where the configuration puts them relative to elements
/// both have; elements only in the live object keep their place.
pub fn merge(rules: &ListRules, live: Option<&Value>, config: &Value) -> Value {
    match (live, config) {
        (None | Some(Value::Object(_)), Value::Object(c)) if !rules.atomic_map() => {
            let l = live.and_then(Value::as_object);
            let mut out = l.cloned().unwrap_or_default();
            for (k, v) in c {
                let field_rules = rules.field(k);
                // An applied null unsets the field (the applier still owns it), so that applying
                // it again finds nothing to change.
                if v.is_null() && !field_rules.nullable() {
                    out.remove(k);
                    continue;
                }
                let merged = merge(&field_rules, l.and_then(|l| l.get(k)), v);
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Some(Value::Array(l)), Value::Array(c)) => match rules.list_type() {
            ListType::Atomic => config.clone(),
            list => Value::Array(merge_list(rules, &list, l, c)),
        },
        _ => config.clone(),
    }
}

fn merge_list(rules: &ListRules, list: &ListType, live: &[Value], config: &[Value]) -> Vec<Value> {
    let live_pe: Vec<PathElement> = live
        .iter()
        .enumerate()
        .map(|(i, v)| item_element(list, i, v).unwrap_or(PathElement::Index(i)))
        .collect();
    let config_pe: Vec<PathElement> = config
        .iter()
        .enumerate()
        .map(|(i, v)| item_element(list, i, v).unwrap_or(PathElement::Index(usize::MAX - i)))
        .collect();
    let mut live_at: HashMap<&PathElement, usize> = HashMap::new();
    for (i, pe) in live_pe.iter().enumerate() {
        live_at.entry(pe).or_insert(i);
    }
    let in_config: HashSet<&PathElement> = config_pe.iter().collect();
    let item_rules = rules.item();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let mut next = 0;
    for (ci, pe) in config_pe.iter().enumerate() {
        if let Some(&li) = live_at.get(pe) {
            // Live-only elements before this shared one come first, in their order.
            while next <= li {
                if !in_config.contains(&live_pe[next]) {
                    out.push(live[next].clone());
                }
                next += 1;
            }
            out.push(merge(&item_rules, Some(&live[li]), &config[ci]));
        } else {
            // A new element goes after the live-only elements that lead up to the next shared one.
            while next < live.len() && !in_config.contains(&live_pe[next]) {
                out.push(live[next].clone());
                next += 1;
            }
            out.push(config[ci].clone());
        }
    }
    out.extend(
        live[next.min(live.len())..]
            .iter()
            .zip(&live_pe[next.min(live.len())..])
            .filter(|(_, pe)| !in_config.contains(pe))
            .map(|(v, _)| v.clone()),
    );
    out
}

/// Removes from `value` the fields in `remove`, except where `keep` (what anyone still owns)
/// holds the path or something below it. A container that this leaves empty goes too, unless
/// someone owns it as such. Returns whether `value` was emptied.
pub fn prune(rules: &ListRules, value: &mut Value, remove: &FieldSet, keep: Option<&FieldSet>) -> bool {
    if remove.is_empty() {
        return false;
    }
    let kept = |pe: &PathElement| keep.is_some_and(|k| k.touches(pe));
    let owned = |pe: &PathElement| keep.is_some_and(|k| k.has_member(pe));
    match value {
        Value::Object(m) => {
            if m.is_empty() {
                return false;
            }
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                let pe = PathElement::Field(k.clone());
                if !remove.touches(&pe) {
                    continue;
                }
                if remove.has_member(&pe) && !kept(&pe) {
                    m.remove(&k);
                    continue;
                }
                let Some(below) = remove.below(&pe) else {
                    continue;
                };
                let child = m.get_mut(&k).expect("listed above");
                if prune(&rules.field(&k), child, below, keep.and_then(|s| s.below(&pe))) && !owned(&pe) {
                    m.remove(&k);
                }
            }
            m.is_empty()
        }
        Value::Array(items) => {
            let list = rules.list_type();
            if list == ListType::Atomic || items.is_empty() {
                return false;
            }
            let item_rules = rules.item();
            let mut drop = vec![false; items.len()];
            for (i, item) in items.iter_mut().enumerate() {
                let pe = item_element(&list, i, item).unwrap_or(PathElement::Index(i));
                if !remove.touches(&pe) {
                    continue;
                }
                if remove.has_member(&pe) && !kept(&pe) {
                    drop[i] = true;
                    continue;
                }
                if let Some(below) = remove.below(&pe) {
                    let original = item.clone();
                    let emptied = prune(&item_rules, item, below, keep.and_then(|s| s.below(&pe)));
                    // An element that stays keeps its key fields, whoever owned them.
                    if let (ListType::Map(keys), Value::Object(now), Value::Object(was)) =
                        (&list, &mut *item, &original)
                    {
                        for k in keys {
                            if let Some(v) = was.get(&k.name) {
                                now.entry(k.name.clone()).or_insert_with(|| v.clone());
                            }
                        }
                    }
                    drop[i] = emptied && !owned(&pe);
                }
            }
            let mut i = 0;
            items.retain(|_| {
                i += 1;
                !drop[i - 1]
            });
            items.is_empty()
        }
        _ => false,
    }
}
