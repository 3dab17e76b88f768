//! Field sets: which fields of an object a manager owns, as the trie that
//! `metadata.managedFields[].fieldsV1` serializes.
//!
//! Pure: no I/O. The wire format is Kubernetes' "FieldsV1": a JSON object whose keys are path
//! elements (`f:name` a field, `k:{"name":"c"}` the element of an associative list with that key,
//! `v:"x"` the element of a set list with that value, `i:3` a list element by position) and whose
//! values are the same kind of object for the fields below. A path is a member of the set when its
//! object is empty (`"f:image": {}`) or, if it also has members below it, when it holds the key
//! `"."` (`"k:{\"name\":\"c\"}": {".": {}, "f:image": {}}`: the list element itself and its image).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// One step of a path. The derived order is the API server's: fields, then keys, then values,
/// then indices, so encoded sets come out in the order a real server writes them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PathElement {
    /// A field of an object (`f:`).
    Field(String),
    /// The element of an associative list whose key fields have these values, as canonical JSON
    /// (an object with its keys sorted, no spaces) (`k:`).
    Key(String),
    /// The element of a set list with this value, as canonical JSON (`v:`).
    Value(String),
    /// A list element by position (`i:`); used only for elements that cannot be keyed.
    Index(usize),
}

pub type Path = Vec<PathElement>;

impl PathElement {
    /// The fieldsV1 key.
    pub fn encode(&self) -> String {
        match self {
            Self::Field(name) => format!("f:{name}"),
            Self::Key(json) => format!("k:{json}"),
            Self::Value(json) => format!("v:{json}"),
            Self::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a fieldsV1 key. Key and value elements are re-encoded canonically, so a set written
    /// by another client compares equal to ours.
    pub fn decode(text: &str) -> Result<Self, String> {
        let (prefix, rest) = text
            .split_once(':')
            .ok_or_else(|| format!("invalid path element {text:?}"))?;
        let json = |kind: &str| {
            serde_json::from_str::<Value>(rest)
                .map(|v| canonical(&v))
                .map_err(|e| format!("invalid {kind} in path element {text:?}: {e}"))
        };
        match prefix {
            "f" => Ok(Self::Field(rest.to_owned())),
            "k" => {
                let key = json("key")?;
                if key.starts_with('{') {
                    Ok(Self::Key(key))
                } else {
                    Err(format!("the key in path element {text:?} is not an object"))
                }
            }
            "v" => Ok(Self::Value(json("value")?)),
            "i" => rest
                .parse()
                .map(Self::Index)
                .map_err(|_| format!("invalid index in path element {text:?}")),
            _ => Err(format!("unknown path element prefix in {text:?}")),
        }
    }

    /// How the API server prints the element in a path: `.name`, `[name="c"]`, `[="x"]`, `[3]`.
    pub fn display(&self) -> String {
        match self {
            Self::Field(name) => format!(".{name}"),
            Self::Key(json) => {
                let fields = match serde_json::from_str::<Value>(json) {
                    Ok(Value::Object(m)) => m
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(","),
                    _ => json.clone(),
                };
                format!("[{fields}]")
            }
            Self::Value(json) => format!("[={json}]"),
            Self::Index(i) => format!("[{i}]"),
        }
    }
}

/// A path as the API server prints it in conflicts: `.spec.containers[name="c"].image`.
pub fn display_path(path: &[PathElement]) -> String {
    path.iter().map(PathElement::display).collect()
}

/// JSON with object keys sorted and no whitespace: the form key and value elements are kept in,
/// so that two spellings of one key are one path element.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{}:", Value::String(k.clone()));
                write_canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, v) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

/// A set of paths, as a trie.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    children: BTreeMap<PathElement, Node>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    /// The path ending here is in the set.
    member: bool,
    below: FieldSet,
}

impl Node {
    fn is_empty(&self) -> bool {
        !self.member && self.below.is_empty()
    }
}

impl FieldSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// A set of the given paths.
    pub fn from_paths<'a>(paths: impl IntoIterator<Item = &'a [PathElement]>) -> Self {
        let mut set = Self::new();
        for p in paths {
            set.insert(p);
        }
        set
    }

    pub fn is_empty(&self) -> bool {
        self.children.is_empty()
    }

    /// Adds `path` (the empty path, the object itself, is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let node = self.children.entry(first.clone()).or_default();
        if rest.is_empty() {
            node.member = true;
        } else {
            node.below.insert(rest);
        }
    }

    pub fn contains(&self, path: &[PathElement]) -> bool {
        match path.split_first() {
            None => false,
            Some((first, [])) => self.children.get(first).is_some_and(|n| n.member),
            Some((first, rest)) => self.children.get(first).is_some_and(|n| n.below.contains(rest)),
        }
    }

    /// The members below `element` (relative to it), if any.
    pub fn below(&self, element: &PathElement) -> Option<&FieldSet> {
        self.children.get(element).map(|n| &n.below)
    }

    /// Whether `element` itself is a member.
    pub fn has_member(&self, element: &PathElement) -> bool {
        self.children.get(element).is_some_and(|n| n.member)
    }

    /// Whether `element` or anything below it is a member.
    pub fn touches(&self, element: &PathElement) -> bool {
        self.children.contains_key(element)
    }

    /// Adds every member of `other`.
    pub fn union(&mut self, other: &FieldSet) {
        for (pe, theirs) in &other.children {
            let mine = self.children.entry(pe.clone()).or_default();
            mine.member |= theirs.member;
            mine.below.union(&theirs.below);
        }
    }

    /// Removes every member of `other` (only those paths: members below them stay).
    pub fn subtract(&mut self, other: &FieldSet) {
        for (pe, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                if theirs.member {
                    mine.member = false;
                }
                mine.below.subtract(&theirs.below);
                if mine.is_empty() {
                    self.children.remove(pe);
                }
            }
        }
    }

    /// The members in both sets.
    #[must_use]
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet::new();
        for (pe, mine) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                let node = Node {
                    member: mine.member && theirs.member,
                    below: mine.below.intersection(&theirs.below),
                };
                if !node.is_empty() {
                    out.children.insert(pe.clone(), node);
                }
            }
        }
        out
    }

    /// Every member path, in set order.
    pub fn paths(&self) -> Vec<Path> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Path, out: &mut Vec<Path>) {
        for (pe, node) in &self.children {
            prefix.push(pe.clone());
            if node.member {
                out.push(prefix.clone());
            }
            node.below.collect(prefix, out);
            prefix.pop();
        }
    }

    /// The fieldsV1 form.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        for (pe, node) in &self.children {
            let mut inner = match node.below.to_fields_v1() {
                Value::Object(o) => o,
                _ => Map::new(),
            };
            if node.member && !inner.is_empty() {
                inner.insert(".".into(), Value::Object(Map::new()));
            }
            m.insert(pe.encode(), Value::Object(inner));
        }
        Value::Object(m)
    }

    /// Parses the fieldsV1 form.
    pub fn from_fields_v1(value: &Value) -> Result<Self, String> {
        let m = value.as_object().ok_or("fieldsV1 must be a JSON object")?;
        let mut set = FieldSet::new();
        for (key, sub) in m {
            if key == "." {
                continue;
            }
            let pe = PathElement::decode(key)?;
            let sub_map = sub
                .as_object()
                .ok_or_else(|| format!("fieldsV1 entry {key:?} must be a JSON object"))?;
            let below = FieldSet::from_fields_v1(sub)?;
            let member = sub_map.is_empty() || sub_map.contains_key(".");
            let node = Node { member, below };
            if !node.is_empty() {
                set.children.insert(pe, node);
            }
        }
        Ok(set)
    }
}
