//! The OVSDB data model of RFC 7047 §5.1: atoms, sets, maps and rows, with their JSON wire forms.
//!
//! Pure: no I/O. The JSON wire form is in [`crate::wire`]: serde visitors straight from the byte
//! stream, so a 100,000-row monitor reply is not first materialised as a `serde_json::Value` tree.
//!
//! On the wire a set or map column with exactly one element may arrive as a bare atom
//! (`"ports": ["uuid", "…"]` instead of `["set", [["uuid", "…"]]]`); a [`Value`] keeps what came
//! and [`Value::normalize`] fixes it up once the column's type is known from the schema (in
//! [`crate::typed_value`]: this module knows values only, so the schema can hold values).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use uuid::Uuid;

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
