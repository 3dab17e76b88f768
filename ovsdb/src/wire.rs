//! The JSON wire form of OVSDB values (RFC 7047 §5.1): `["uuid", …]`, `["named-uuid", …]`,
//! `["set", […]]`, `["map", [[k, v], …]]` and bare atoms, decoded with serde visitors straight
//! from the byte stream.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::data::{Atom, Value};

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
    use crate::data::{Atom, Value};
    use serde_json::json;
    use uuid::Uuid;

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
