//! Typed `transact` operations (RFC 7047 §5.2) and their results.
//!
//! Pure: no I/O. [`Operation`]s serialize to the wire form; [`parse_transact_reply`] turns the
//! reply array into per-operation results or a [`TransactError`] that names the operation, its
//! table and row, and the server's error and details.

use std::fmt;

use serde::Serialize;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use uuid::Uuid;

use crate::data::{Row, Value};

/// RFC 7047 §5.1 `<function>` of a condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    Lt,
    Le,
    Eq,
    Ne,
    Ge,
    Gt,
    Includes,
    Excludes,
}

impl Function {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Lt => "<",
            Self::Le => "<=",
            Self::Eq => "==",
            Self::Ne => "!=",
            Self::Ge => ">=",
            Self::Gt => ">",
            Self::Includes => "includes",
            Self::Excludes => "excludes",
        }
    }
}

/// `[column, function, value]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Condition {
    pub column: String,
    pub function: Function,
    pub value: Value,
}

impl Condition {
    pub fn new(column: impl Into<String>, function: Function, value: impl Into<Value>) -> Self {
        Self {
            column: column.into(),
            function,
            value: value.into(),
        }
    }

    pub fn eq(column: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(column, Function::Eq, value)
    }

    pub fn ne(column: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(column, Function::Ne, value)
    }

    pub fn includes(column: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(column, Function::Includes, value)
    }

    /// Matches the row with this UUID.
    pub fn uuid(uuid: Uuid) -> Self {
        Self::eq("_uuid", Value::uuid(uuid))
    }
}

impl Serialize for Condition {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(3))?;
        seq.serialize_element(&self.column)?;
        seq.serialize_element(self.function.as_str())?;
        seq.serialize_element(&self.value)?;
        seq.end()
    }
}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = serde_json::to_string(&self.value).unwrap_or_default();
        write!(f, "{} {} {value}", self.column, self.function.as_str())
    }
}

/// RFC 7047 §5.1 `<mutator>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutator {
    Add,
    Sub,
    Mul,
    Div,
    Mod,
    Insert,
    Delete,
}

impl Mutator {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "+=",
            Self::Sub => "-=",
            Self::Mul => "*=",
            Self::Div => "/=",
            Self::Mod => "%=",
            Self::Insert => "insert",
            Self::Delete => "delete",
        }
    }
}

/// `[column, mutator, value]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Mutation {
    pub column: String,
    pub mutator: Mutator,
    pub value: Value,
}

impl Mutation {
    pub fn new(column: impl Into<String>, mutator: Mutator, value: impl Into<Value>) -> Self {
        Self {
            column: column.into(),
            mutator,
            value: value.into(),
        }
    }

    /// Adds elements to a set or pairs to a map.
    pub fn insert(column: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(column, Mutator::Insert, value)
    }

    /// Removes elements from a set, or keys (a set) or pairs (a map) from a map.
    pub fn delete(column: impl Into<String>, value: impl Into<Value>) -> Self {
        Self::new(column, Mutator::Delete, value)
    }
}

impl Serialize for Mutation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(3))?;
        seq.serialize_element(&self.column)?;
        seq.serialize_element(self.mutator.as_str())?;
        seq.serialize_element(&self.value)?;
        seq.end()
    }
}

/// RFC 7047 §5.2 `until` of a `wait`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitUntil {
    Equal,
    NotEqual,
}

/// One database operation of a `transact`.
#[derive(Clone, Debug, PartialEq)]
pub enum Operation {
    Insert {
        table: String,
        row: Row,
        uuid_name: Option<String>,
    },
    Select {
        table: String,
        conditions: Vec<Condition>,
        columns: Option<Vec<String>>,
    },
    Update {
        table: String,
        conditions: Vec<Condition>,
        row: Row,
    },
    Mutate {
        table: String,
        conditions: Vec<Condition>,
        mutations: Vec<Mutation>,
    },
    Delete {
        table: String,
        conditions: Vec<Condition>,
    },
    Wait {
        table: String,
        conditions: Vec<Condition>,
        columns: Vec<String>,
        until: WaitUntil,
        rows: Vec<Row>,
        timeout_ms: Option<u64>,
    },
    Commit {
        durable: bool,
    },
    Abort,
    Comment(String),
    Assert {
        lock: String,
    },
}

impl Operation {
    pub fn insert(table: impl Into<String>, row: Row) -> Self {
        Self::Insert {
            table: table.into(),
            row,
            uuid_name: None,
        }
    }

    /// An insert whose new row other operations of the same transaction refer to as
    /// `["named-uuid", name]` ([`Value::named_uuid`]).
    pub fn insert_named(table: impl Into<String>, row: Row, name: impl Into<String>) -> Self {
        Self::Insert {
            table: table.into(),
            row,
            uuid_name: Some(name.into()),
        }
    }

    pub fn select(table: impl Into<String>, conditions: Vec<Condition>) -> Self {
        Self::Select {
            table: table.into(),
            conditions,
            columns: None,
        }
    }

    pub fn update(table: impl Into<String>, conditions: Vec<Condition>, row: Row) -> Self {
        Self::Update {
            table: table.into(),
            conditions,
            row,
        }
    }

    pub fn mutate(table: impl Into<String>, conditions: Vec<Condition>, mutations: Vec<Mutation>) -> Self {
        Self::Mutate {
            table: table.into(),
            conditions,
            mutations,
        }
    }

    pub fn delete(table: impl Into<String>, conditions: Vec<Condition>) -> Self {
        Self::Delete {
            table: table.into(),
            conditions,
        }
    }

    pub fn comment(text: impl Into<String>) -> Self {
        Self::Comment(text.into())
    }

    /// The wire name of the operation.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Insert { .. } => "insert",
            Self::Select { .. } => "select",
            Self::Update { .. } => "update",
            Self::Mutate { .. } => "mutate",
            Self::Delete { .. } => "delete",
            Self::Wait { .. } => "wait",
            Self::Commit { .. } => "commit",
            Self::Abort => "abort",
            Self::Comment(_) => "comment",
            Self::Assert { .. } => "assert",
        }
    }

    pub fn table(&self) -> Option<&str> {
        match self {
            Self::Insert { table, .. }
            | Self::Select { table, .. }
            | Self::Update { table, .. }
            | Self::Mutate { table, .. }
            | Self::Delete { table, .. }
            | Self::Wait { table, .. } => Some(table),
            _ => None,
        }
    }

    /// Which row(s) the operation is about, for error messages: the insert's name, or the
    /// `where` clause.
    pub fn target(&self) -> String {
        let conds = |c: &[Condition]| {
            if c.is_empty() {
                "all rows".to_owned()
            } else {
                c.iter().map(ToString::to_string).collect::<Vec<_>>().join(" && ")
            }
        };
        match self {
            Self::Insert {
                uuid_name: Some(n), ..
            } => format!("new row @{n}"),
            Self::Insert { .. } => "new row".to_owned(),
            Self::Select { conditions, .. }
            | Self::Update { conditions, .. }
            | Self::Mutate { conditions, .. }
            | Self::Delete { conditions, .. }
            | Self::Wait { conditions, .. } => conds(conditions),
            _ => String::new(),
        }
    }
}

impl Serialize for Operation {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("op", self.name())?;
        if let Some(table) = self.table() {
            m.serialize_entry("table", table)?;
        }
        match self {
            Self::Insert { row, uuid_name, .. } => {
                m.serialize_entry("row", row)?;
                if let Some(name) = uuid_name {
                    m.serialize_entry("uuid-name", name)?;
                }
            }
            Self::Select {
                conditions, columns, ..
            } => {
                m.serialize_entry("where", conditions)?;
                if let Some(columns) = columns {
                    m.serialize_entry("columns", columns)?;
                }
            }
            Self::Update { conditions, row, .. } => {
                m.serialize_entry("where", conditions)?;
                m.serialize_entry("row", row)?;
            }
            Self::Mutate {
                conditions,
                mutations,
                ..
            } => {
                m.serialize_entry("where", conditions)?;
                m.serialize_entry("mutations", mutations)?;
            }
            Self::Delete { conditions, .. } => m.serialize_entry("where", conditions)?,
            Self::Wait {
                conditions,
                columns,
                until,
                rows,
                timeout_ms,
                ..
            } => {
                m.serialize_entry("where", conditions)?;
                m.serialize_entry("columns", columns)?;
                m.serialize_entry("until", if *until == WaitUntil::Equal { "==" } else { "!=" })?;
                m.serialize_entry("rows", rows)?;
                if let Some(t) = timeout_ms {
                    m.serialize_entry("timeout", t)?;
                }
            }
            Self::Commit { durable } => m.serialize_entry("durable", durable)?,
            Self::Comment(text) => m.serialize_entry("comment", text)?,
            Self::Assert { lock } => m.serialize_entry("lock", lock)?,
            Self::Abort => {}
        }
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Atom;
    use serde_json::json;

    #[test]
    fn operations_serialize_to_rfc7047() {
        let op = Operation::insert_named(
            "Logical_Switch",
            Row::from([("name".into(), Value::from("ls1"))]),
            "ls",
        );
        assert_eq!(
            serde_json::to_value(&op).unwrap(),
            json!({"op":"insert","table":"Logical_Switch","row":{"name":"ls1"},"uuid-name":"ls"})
        );
        let op = Operation::mutate(
            "Logical_Switch",
            vec![Condition::eq("name", "ls1")],
            vec![Mutation::insert("ports", Value::set([Atom::named("p")]))],
        );
        assert_eq!(
            serde_json::to_value(&op).unwrap(),
            json!({"op":"mutate","table":"Logical_Switch","where":[["name","==","ls1"]],
                   "mutations":[["ports","insert",["set",[["named-uuid","p"]]]]]})
        );
    }
}
