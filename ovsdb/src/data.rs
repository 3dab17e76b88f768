//! The OVSDB data model of RFC 7047 §5.1: atoms, sets, maps and rows, with their JSON wire forms.
//!
//! Pure: no I/O. The JSON wire form is in [`crate::wire`]: serde visitors straight from the byte
//! stream, so a 100,000-row monitor reply is not first materialised as a `serde_json::Value` tree.
//!
//! On the wire a set or map column with exactly one element may arrive as a bare atom
//! (`"ports": ["uuid", "…"]` instead of `["set", [["uuid", "…"]]]`); a [`Value`] keeps what came
//! and [`Value::normalize`] fixes it up once the column's type is known from the schema.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use uuid::Uuid;

use crate::schema::{AtomicType, ColumnType};

/// One row: column name to value. `_uuid` and `_version` are not stored in rows; the cache keys
/// rows by UUID.
pub type Row = BTreeMap<String, Value>;

/// An OVSDB atom (RFC 7047 §5.1 `<atom>`).
#[derive(Clone, Debug)]
pub enum Atom {
    Integer(i64),
    Real(f64),
    Boolean(bool),
    String(String),
    Uuid(Uuid),
    /// `["named-uuid", name]`: a row inserted earlier in the same transaction.
    NamedUuid(String),
}

impl Atom {
    pub fn string(s: impl Into<String>) -> Self {
        Self::String(s.into())
    }

    pub fn named(name: impl Into<String>) -> Self {
        Self::NamedUuid(name.into())
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_uuid(&self) -> Option<Uuid> {
        match self {
            Self::Uuid(u) => Some(*u),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Self::Integer(i) => Some(*i),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Self::Boolean(b) => Some(*b),
            _ => None,
        }
    }

    /// A short name of the atom's kind for error messages.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Integer(_) => "integer",
            Self::Real(_) => "real",
            Self::Boolean(_) => "boolean",
            Self::String(_) => "string",
            Self::Uuid(_) => "uuid",
            Self::NamedUuid(_) => "named-uuid",
        }
    }

    fn rank(&self) -> u8 {
        match self {
            Self::Integer(_) => 0,
            Self::Real(_) => 1,
            Self::Boolean(_) => 2,
            Self::String(_) => 3,
            Self::Uuid(_) => 4,
            Self::NamedUuid(_) => 5,
        }
    }

    /// Coerces a decoded atom to the column's atomic type where JSON cannot tell them apart
    /// (an integral JSON number in a `real` column).
    fn coerce(self, ty: AtomicType) -> Self {
        match (self, ty) {
            #[allow(clippy::cast_precision_loss)] // OVSDB reals are doubles; the server sent this number
            (Self::Integer(i), AtomicType::Real) => Self::Real(i as f64),
            (atom, _) => atom,
        }
    }
}

// Atoms are ordered so sets and maps can be kept canonical (sorted, deduplicated) and compared.
// Reals use IEEE total order; OVSDB never stores NaN, and total order keeps `Ord` lawful anyway.
impl Ord for Atom {
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (Self::Integer(a), Self::Integer(b)) => a.cmp(b),
            (Self::Real(a), Self::Real(b)) => a.total_cmp(b),
            (Self::Boolean(a), Self::Boolean(b)) => a.cmp(b),
            (Self::String(a), Self::String(b)) | (Self::NamedUuid(a), Self::NamedUuid(b)) => a.cmp(b),
            (Self::Uuid(a), Self::Uuid(b)) => a.cmp(b),
            _ => self.rank().cmp(&other.rank()),
        }
    }
}

impl PartialOrd for Atom {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Atom {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Atom {}

impl From<&str> for Atom {
    fn from(s: &str) -> Self {
        Self::String(s.to_owned())
    }
}

impl From<String> for Atom {
    fn from(s: String) -> Self {
        Self::String(s)
    }
}

impl From<i64> for Atom {
    fn from(i: i64) -> Self {
        Self::Integer(i)
    }
}

impl From<bool> for Atom {
    fn from(b: bool) -> Self {
        Self::Boolean(b)
    }
}

impl From<f64> for Atom {
    fn from(r: f64) -> Self {
        Self::Real(r)
    }
}

impl From<Uuid> for Atom {
    fn from(u: Uuid) -> Self {
        Self::Uuid(u)
    }
}

impl fmt::Display for Atom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Integer(i) => write!(f, "{i}"),
            Self::Real(r) => write!(f, "{r}"),
            Self::Boolean(b) => write!(f, "{b}"),
            Self::String(s) => write!(f, "{s:?}"),
            Self::Uuid(u) => write!(f, "{u}"),
            Self::NamedUuid(n) => write!(f, "@{n}"),
        }
    }
}

/// A column value (RFC 7047 §5.1 `<value>`): an atom, a set or a map.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Value {
    Atom(Atom),
    Set(BTreeSet<Atom>),
    Map(BTreeMap<Atom, Atom>),
}

impl Value {
    pub fn empty_set() -> Self {
        Self::Set(BTreeSet::new())
    }

    pub fn empty_map() -> Self {
        Self::Map(BTreeMap::new())
    }

    pub fn set<I: IntoIterator<Item = A>, A: Into<Atom>>(items: I) -> Self {
        Self::Set(items.into_iter().map(Into::into).collect())
    }

    pub fn map<I, K, V>(items: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<Atom>,
        V: Into<Atom>,
    {
        Self::Map(items.into_iter().map(|(k, v)| (k.into(), v.into())).collect())
    }

    pub fn uuid(u: Uuid) -> Self {
        Self::Atom(Atom::Uuid(u))
    }

    pub fn named_uuid(name: impl Into<String>) -> Self {
        Self::Atom(Atom::NamedUuid(name.into()))
    }

    /// The elements of a set-valued column; a bare atom is a one-element set.
    pub fn set_elements(&self) -> Option<Vec<&Atom>> {
        match self {
            Self::Atom(a) => Some(vec![a]),
            Self::Set(s) => Some(s.iter().collect()),
            Self::Map(_) => None,
        }
    }

    /// True for the zero value of its kind: `""`, `0`, `false`, an empty set or map. A column a
    /// server lacks may be dropped from a write only when our value for it is one of these.
    pub fn is_default(&self) -> bool {
        match self {
            Self::Atom(Atom::String(s)) => s.is_empty(),
            Self::Atom(Atom::Integer(i)) => *i == 0,
            Self::Atom(Atom::Real(r)) => *r == 0.0,
            Self::Atom(Atom::Boolean(b)) => !*b,
            Self::Atom(Atom::Uuid(_) | Atom::NamedUuid(_)) => false,
            Self::Set(s) => s.is_empty(),
            Self::Map(m) => m.is_empty(),
        }
    }

    /// Brings a decoded value into the canonical shape for its column type: sets are always
    /// `Set` (a bare atom becomes a one-element set), scalars always `Atom`, and integral
    /// numbers in `real` columns become reals.
    #[must_use]
    pub fn normalize(self, ty: &ColumnType) -> Self {
        let key_ty = ty.key.atomic;
        if let Some(value_ty) = ty.value.as_ref().map(|v| v.atomic) {
            return match self {
                Self::Map(m) => Self::Map(
                    m.into_iter()
                        .map(|(k, v)| (k.coerce(key_ty), v.coerce(value_ty)))
                        .collect(),
                ),
                other => other,
            };
        }
        if ty.is_scalar() {
            match self {
                Self::Atom(a) => Self::Atom(a.coerce(key_ty)),
                Self::Set(s) if s.len() == 1 => Self::Atom(s.into_iter().next().unwrap().coerce(key_ty)),
                other => other,
            }
        } else {
            match self {
                Self::Atom(a) => Self::Set(BTreeSet::from([a.coerce(key_ty)])),
                Self::Set(s) => Self::Set(s.into_iter().map(|a| a.coerce(key_ty)).collect()),
                map @ Self::Map(_) => map,
            }
        }
    }

    /// Applies an `update2` `modify` diff for a column (ovsdb-server(7), "<diff>"): for sets
    /// the diff's elements are toggled (present ones removed, absent ones added); for maps a key
    /// absent from the old value is added, a key present with the same value is removed, and a
    /// key present with another value takes the new value. Columns holding at most one element
    /// are not diffed by the server: the diff is the new value.
    #[must_use]
    pub fn apply_diff(&self, diff: Value, ty: &ColumnType) -> Value {
        let diff = diff.normalize(ty);
        if !ty.is_composite() {
            return diff;
        }
        match (self, diff) {
            (Self::Set(old), Self::Set(toggles)) => {
                let mut out = old.clone();
                for atom in toggles {
                    if !out.remove(&atom) {
                        out.insert(atom);
                    }
                }
                Self::Set(out)
            }
            (Self::Map(old), Self::Map(changes)) => {
                let mut out = old.clone();
                for (k, v) in changes {
                    match out.get(&k) {
                        Some(existing) if *existing == v => {
                            out.remove(&k);
                        }
                        _ => {
                            out.insert(k, v);
                        }
                    }
                }
                Self::Map(out)
            }
            // A diff whose shape does not match the old value (the old value was decoded before
            // the schema was known, say): the diff alone is the best information we have.
            (_, diff) => diff,
        }
    }
}

impl From<Atom> for Value {
    fn from(a: Atom) -> Self {
        Self::Atom(a)
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Self::Atom(Atom::from(s))
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Self::Atom(Atom::String(s))
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Self::Atom(Atom::Integer(i))
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Self::Atom(Atom::Boolean(b))
    }
}

impl From<Uuid> for Value {
    fn from(u: Uuid) -> Self {
        Self::Atom(Atom::Uuid(u))
    }
}
