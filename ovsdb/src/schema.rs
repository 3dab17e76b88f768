//! Database schemas (RFC 7047 §3.2) as returned by `get_schema`.
//!
//! Pure: no I/O. The client fetches the schema at every connect, because the server decides what
//! exists: Debian 12 ships OVN_Northbound 7.0.0, Kube-OVN users run newer OVN with more columns.
//! Typed tables are checked against it (see [`crate::table`]), never the other way round.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::data::Value;

#[derive(Clone, Debug, Deserialize)]
pub struct DatabaseSchema {
    pub name: String,
    pub version: String,
    #[serde(default)]
    pub cksum: Option<String>,
    pub tables: BTreeMap<String, TableSchema>,
}

impl DatabaseSchema {
    pub fn table(&self, name: &str) -> Option<&TableSchema> {
        self.tables.get(name)
    }

    /// The column's schema, for the named table. `_uuid` and `_version` are implicit columns
    /// every table has.
    pub fn column(&self, table: &str, column: &str) -> Option<&ColumnSchema> {
        self.tables.get(table)?.columns.get(column)
    }
}

#[derive(Clone, Debug, Deserialize)]
pub struct TableSchema {
    pub columns: BTreeMap<String, ColumnSchema>,
    #[serde(rename = "maxRows", default)]
    pub max_rows: Option<u64>,
    #[serde(rename = "isRoot", default)]
    pub is_root: bool,
    #[serde(default)]
    pub indexes: Vec<Vec<String>>,
}

#[derive(Clone, Debug, Deserialize)]
pub struct ColumnSchema {
    #[serde(rename = "type")]
    pub ty: ColumnType,
    #[serde(default)]
    pub ephemeral: bool,
    #[serde(default = "yes")]
    pub mutable: bool,
}

fn yes() -> bool {
    true
}

/// The atomic types of RFC 7047 §3.2 `<atomic-type>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AtomicType {
    Integer,
    Real,
    Boolean,
    String,
    Uuid,
}

/// RFC 7047 §3.2 `<base-type>`; only the parts the client acts on are kept typed.
#[derive(Clone, Debug)]
pub struct BaseType {
    pub atomic: AtomicType,
    pub ref_table: Option<String>,
    /// `true` for weak references: the server drops them when the target row goes.
    pub weak: bool,
    pub enumeration: Option<Value>,
}

/// RFC 7047 §3.2 `<type>`: a key type, an optional value type (a map), and element bounds.
#[derive(Clone, Debug)]
pub struct ColumnType {
    pub key: BaseType,
    pub value: Option<BaseType>,
    pub min: u64,
    /// `None` is "unlimited".
    pub max: Option<u64>,
}

impl ColumnType {
    pub fn is_map(&self) -> bool {
        self.value.is_some()
    }

    /// Exactly one atom (`min = max = 1`, not a map).
    pub fn is_scalar(&self) -> bool {
        self.value.is_none() && self.min == 1 && self.max == Some(1)
    }

    /// Zero or one atom.
    pub fn is_optional(&self) -> bool {
        self.value.is_none() && self.min == 0 && self.max == Some(1)
    }

    /// More than one element allowed. ovsdb-server diffs only these columns in `update2`;
    /// others carry the new value (ovsdb-server(7), `<row-update2>` "modify").
    pub fn is_composite(&self) -> bool {
        self.max != Some(1)
    }

    /// The value a column has in a row that never set it: the empty set or map, or the atomic
    /// type's zero (RFC 7047 §5.2.1, "insert").
    pub fn default_value(&self) -> Value {
        if self.is_map() {
            return Value::empty_map();
        }
        if !self.is_scalar() {
            return Value::empty_set();
        }
        match self.key.atomic {
            AtomicType::Integer => Value::from(0),
            AtomicType::Real => Value::Atom(crate::data::Atom::Real(0.0)),
            AtomicType::Boolean => Value::from(false),
            AtomicType::String => Value::from(""),
            AtomicType::Uuid => Value::uuid(uuid::Uuid::nil()),
        }
    }
}

impl<'de> Deserialize<'de> for BaseType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Bare(AtomicType),
            Full {
                #[serde(rename = "type")]
                atomic: AtomicType,
                #[serde(rename = "refTable", default)]
                ref_table: Option<String>,
                #[serde(rename = "refType", default)]
                ref_type: Option<String>,
                #[serde(rename = "enum", default)]
                enumeration: Option<Value>,
            },
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Bare(atomic) => BaseType {
                atomic,
                ref_table: None,
                weak: false,
                enumeration: None,
            },
            Wire::Full {
                atomic,
                ref_table,
                ref_type,
                enumeration,
            } => BaseType {
                atomic,
                weak: ref_type.as_deref() == Some("weak"),
                ref_table,
                enumeration,
            },
        })
    }
}

impl<'de> Deserialize<'de> for ColumnType {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Max {
            Count(u64),
            Word(String),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Wire {
            Bare(AtomicType),
            Full {
                key: BaseType,
                #[serde(default)]
                value: Option<BaseType>,
                #[serde(default)]
                min: Option<u64>,
                #[serde(default)]
                max: Option<Max>,
            },
        }
        Ok(match Wire::deserialize(d)? {
            Wire::Bare(atomic) => ColumnType {
                key: BaseType {
                    atomic,
                    ref_table: None,
                    weak: false,
                    enumeration: None,
                },
                value: None,
                min: 1,
                max: Some(1),
            },
            Wire::Full { key, value, min, max } => {
                let max = match max {
                    None => Some(1),
                    Some(Max::Count(n)) => Some(n),
                    Some(Max::Word(w)) if w == "unlimited" => None,
                    Some(Max::Word(w)) => {
                        return Err(de::Error::custom(format!(
                            "column max {w:?} is neither a number nor \"unlimited\""
                        )));
                    }
                };
                ColumnType {
                    key,
                    value,
                    min: min.unwrap_or(1),
                    max,
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_types_classify() {
        let schema: DatabaseSchema = serde_json::from_str(
            r#"{"name":"T","version":"1.0.0","tables":{"t":{"columns":{
                "s":{"type":"string"},
                "o":{"type":{"key":"string","min":0,"max":1}},
                "r":{"type":{"key":{"type":"uuid","refTable":"t","refType":"weak"},"min":0,"max":"unlimited"}},
                "m":{"type":{"key":"string","value":"integer","min":0,"max":"unlimited"}}
            },"isRoot":true,"indexes":[["s"]]}}}"#,
        )
        .unwrap();
        let col = |c| &schema.column("t", c).unwrap().ty;
        assert!(col("s").is_scalar() && !col("s").is_composite());
        assert!(col("o").is_optional() && !col("o").is_composite());
        assert!(col("r").is_composite() && col("r").key.weak);
        assert_eq!(col("r").key.ref_table.as_deref(), Some("t"));
        assert!(col("m").is_map());
        assert_eq!(col("m").default_value(), Value::empty_map());
        assert_eq!(col("s").default_value(), Value::from(""));
        assert!(schema.table("t").unwrap().is_root);
    }

    #[test]
    fn bad_max_is_an_error() {
        let err = serde_json::from_str::<ColumnType>(r#"{"key":"string","max":"lots"}"#);
        assert!(err.is_err());
    }
}
