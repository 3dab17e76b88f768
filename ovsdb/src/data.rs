//! The OVSDB data model of RFC 7047 §5.1: atoms, sets, maps and rows, with their JSON wire forms.
//!
//! Pure: no I/O. Wire decoding is done with serde visitors straight from the byte stream, so a
//! 100,000-row monitor reply is not first materialised as a `serde_json::Value` tree.
//!
//! On the wire a set or map column with exactly one element may arrive as a bare atom
//! (`"ports": ["uuid", "…"]` instead of `["set", [["uuid", "…"]]]`); a [`Value`] keeps what came
//! and [`Value::normalize`] fixes it up once the column's type is known from the schema.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
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

// ===== wire format =====

impl Serialize for Atom {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Integer(i) => s.serialize_i64(*i),
            Self::Real(r) => s.serialize_f64(*r),
            Self::Boolean(b) => s.serialize_bool(*b),
            Self::String(v) => s.serialize_str(v),
            Self::Uuid(u) => {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element("uuid")?;
                seq.serialize_element(&u.hyphenated().to_string())?;
                seq.end()
            }
            Self::NamedUuid(n) => {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element("named-uuid")?;
                seq.serialize_element(n)?;
                seq.end()
            }
        }
    }
}

impl Serialize for Value {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Pairs<'a>(&'a BTreeMap<Atom, Atom>);
        impl Serialize for Pairs<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for pair in self.0 {
                    seq.serialize_element(&pair)?;
                }
                seq.end()
            }
        }
        struct Elems<'a>(&'a BTreeSet<Atom>);
        impl Serialize for Elems<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.0.len()))?;
                for atom in self.0 {
                    seq.serialize_element(atom)?;
                }
                seq.end()
            }
        }
        match self {
            Self::Atom(a) => a.serialize(s),
            Self::Set(set) => {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element("set")?;
                seq.serialize_element(&Elems(set))?;
                seq.end()
            }
            Self::Map(map) => {
                let mut seq = s.serialize_seq(Some(2))?;
                seq.serialize_element("map")?;
                seq.serialize_element(&Pairs(map))?;
                seq.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Atom {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match d.deserialize_any(ValueVisitor {
            allow_composite: false,
        })? {
            Value::Atom(a) => Ok(a),
            _ => Err(de::Error::custom("expected an atom, found a set or map")),
        }
    }
}

impl<'de> Deserialize<'de> for Value {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ValueVisitor {
            allow_composite: true,
        })
    }
}

struct ValueVisitor {
    allow_composite: bool,
}

impl<'de> Visitor<'de> for ValueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an OVSDB atom, [\"uuid\", …], [\"named-uuid\", …], [\"set\", […]] or [\"map\", […]]")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Atom(Atom::Boolean(v)))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Atom(Atom::Integer(v)))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        i64::try_from(v)
            .map(|i| Value::Atom(Atom::Integer(i)))
            .map_err(|_| E::custom(format!("integer {v} does not fit in 64 signed bits")))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::Atom(Atom::Real(v)))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::Atom(Atom::String(v.to_owned())))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::Atom(Atom::String(v)))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let tag: TagStr = seq
            .next_element()?
            .ok_or_else(|| de::Error::custom("empty array is not an OVSDB value"))?;
        let value = match tag.0.as_str() {
            "uuid" => {
                let text: TagStr = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::custom("[\"uuid\"] without a UUID"))?;
                let uuid = Uuid::parse_str(&text.0)
                    .map_err(|e| de::Error::custom(format!("invalid uuid {:?}: {e}", text.0)))?;
                Value::Atom(Atom::Uuid(uuid))
            }
            "named-uuid" => {
                let name: TagStr = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::custom("[\"named-uuid\"] without a name"))?;
                Value::Atom(Atom::NamedUuid(name.0))
            }
            "set" if self.allow_composite => {
                let SetElems(items) = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::custom("[\"set\"] without elements"))?;
                Value::Set(items)
            }
            "map" if self.allow_composite => {
                let MapPairs(items) = seq
                    .next_element()?
                    .ok_or_else(|| de::Error::custom("[\"map\"] without pairs"))?;
                Value::Map(items)
            }
            other => return Err(de::Error::custom(format!("unknown OVSDB value tag {other:?}"))),
        };
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::custom("OVSDB tagged value has more than two elements"));
        }
        Ok(value)
    }
}

/// A JSON string, owned (tags and UUIDs are short; borrowing fails on escaped strings).
struct TagStr(String);

impl<'de> Deserialize<'de> for TagStr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(TagStr)
    }
}

struct SetElems(BTreeSet<Atom>);

impl<'de> Deserialize<'de> for SetElems {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = SetElems;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of atoms")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<SetElems, A::Error> {
                let mut out = BTreeSet::new();
                while let Some(atom) = seq.next_element::<Atom>()? {
                    out.insert(atom);
                }
                Ok(SetElems(out))
            }
        }
        d.deserialize_seq(V)
    }
}

struct MapPairs(BTreeMap<Atom, Atom>);

impl<'de> Deserialize<'de> for MapPairs {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = MapPairs;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an array of [key, value] pairs")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<MapPairs, A::Error> {
                let mut out = BTreeMap::new();
                while let Some((k, v)) = seq.next_element::<(Atom, Atom)>()? {
                    out.insert(k, v);
                }
                Ok(MapPairs(out))
            }
        }
        d.deserialize_seq(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(v: serde_json::Value) -> Value {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn atoms_and_tagged_values_decode() {
        assert_eq!(decode(json!(5)), Value::from(5));
        assert_eq!(decode(json!("x")), Value::from("x"));
        assert_eq!(decode(json!(true)), Value::from(true));
        let u = Uuid::new_v4();
        assert_eq!(decode(json!(["uuid", u.to_string()])), Value::uuid(u));
        assert_eq!(decode(json!(["named-uuid", "row1"])), Value::named_uuid("row1"));
        assert_eq!(decode(json!(["set", ["a", "b", "a"]])), Value::set(["a", "b"]));
        assert_eq!(decode(json!(["map", [["k", "v"]]])), Value::map([("k", "v")]));
    }

    #[test]
    fn malformed_values_are_errors_not_panics() {
        for bad in [
            json!([]),
            json!(["uuid"]),
            json!(["uuid", "not-a-uuid"]),
            json!(["set", "x"]),
            json!(["map", [["k"]]]),
            json!(["frob", 1]),
            json!(["set", [["set", []]]]),
            json!({"a": 1}),
            json!(null),
            json!(["uuid", "0f1e2d3c-0000-0000-0000-000000000000", 3]),
        ] {
            assert!(
                serde_json::from_value::<Value>(bad.clone()).is_err(),
                "{bad} decoded"
            );
        }
    }

    #[test]
    fn wire_round_trip() {
        let v = Value::map([("a", Atom::from(1)), ("b", Atom::from(2))]);
        let text = serde_json::to_string(&v).unwrap();
        assert_eq!(text, r#"["map",[["a",1],["b",2]]]"#);
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
        let s = Value::set([Uuid::nil()]);
        assert_eq!(
            serde_json::to_string(&s).unwrap(),
            r#"["set",[["uuid","00000000-0000-0000-0000-000000000000"]]]"#
        );
    }
}
