//! What a session asks for at setup, and how the answers are judged. Pure: no I/O.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use crate::data::{Row, Value};
use crate::ops::Condition;
use crate::schema::DatabaseSchema;

/// Which tables the client keeps a replica of.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum MonitorTables {
    /// Every table in the server's schema.
    #[default]
    All,
    /// These tables; names the server does not have are skipped with a warning.
    Only(Vec<String>),
    /// These tables, each with only the rows that satisfy all its conditions (`monitor_cond`'s
    /// `where`, ovsdb-server(7)); no condition is every row. A server that knows only the old
    /// `monitor` method sends every row (the conditions are dropped for it), so a reader still
    /// filters what it reads.
    Where(Vec<(String, Vec<Condition>)>),
    /// No replica: transactions only.
    None,
}

/// The monitor request body for `monitor`, `monitor_cond` and `monitor_cond_since`: every column
/// the server has for each chosen table. Returns the body and the requested tables the server
/// lacks.
pub fn monitor_requests(schema: &DatabaseSchema, tables: &MonitorTables) -> (Json, Vec<String>) {
    let names: Vec<(String, &[Condition])> = match tables {
        MonitorTables::All => schema.tables.keys().map(|t| (t.clone(), &[][..])).collect(),
        MonitorTables::Only(t) => t.iter().map(|t| (t.clone(), &[][..])).collect(),
        MonitorTables::Where(t) => t.iter().map(|(t, c)| (t.clone(), c.as_slice())).collect(),
        MonitorTables::None => Vec::new(),
    };
    let mut body = serde_json::Map::new();
    let mut missing = Vec::new();
    for (name, conditions) in names {
        match schema.table(&name) {
            Some(ts) => {
                let columns: Vec<&String> = ts.columns.keys().collect();
                let request = if conditions.is_empty() {
                    json!({ "columns": columns })
                } else {
                    json!({ "columns": columns, "where": conditions })
                };
                body.insert(name, json!([request]));
            }
            None => missing.push(name),
        }
    }
    (Json::Object(body), missing)
}

/// A monitor body for the old `monitor` method, which has no `where`: every row.
pub fn without_conditions(body: &Json) -> Json {
    let mut body = body.clone();
    for requests in body.as_object_mut().into_iter().flat_map(|m| m.values_mut()) {
        for request in requests.as_array_mut().into_iter().flatten() {
            if let Some(r) = request.as_object_mut() {
                r.remove("where");
            }
        }
    }
    body
}

/// The database's row in `_Server.Database` (ovsdb-server(5)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerStatus {
    /// `standalone`, `active-backup`, `clustered` or `relay`.
    pub model: String,
    pub connected: bool,
    pub leader: bool,
    /// The RAFT log index the server has applied; 0 outside clusters.
    pub index: i64,
}

impl ServerStatus {
    pub fn from_row(row: &Row) -> Self {
        // Optional columns arrive as sets of zero or one atom, or as bare atoms.
        let first = |c: &str| {
            row.get(c)
                .and_then(Value::set_elements)
                .and_then(|e| e.first().copied().cloned())
        };
        let text = |c: &str| first(c).and_then(|a| a.as_str().map(str::to_owned));
        let flag = |c: &str| first(c).and_then(|a| a.as_bool());
        let index = first("index").and_then(|a| a.as_i64()).unwrap_or(0);
        Self {
            model: text("model").unwrap_or_default(),
            connected: flag("connected").unwrap_or(true),
            leader: flag("leader").unwrap_or(true),
            index,
        }
    }

    /// Whether a leader-only client may use this server, given the highest RAFT index seen so far
    /// (a server behind it has lost data we already saw, like `ovsdb-idl`'s stale check).
    pub fn usable(&self, leader_only: bool, highest_index: i64) -> Result<(), String> {
        if self.model != "clustered" {
            return Ok(());
        }
        if !self.connected {
            return Err("the server is not connected to its cluster".into());
        }
        if leader_only && !self.leader {
            return Err("the server is not the cluster leader".into());
        }
        if self.index < highest_index {
            return Err(format!(
                "the server's log index {} is behind {highest_index}, already seen",
                self.index
            ));
        }
        Ok(())
    }
}

/// The `_Server` monitor body: the one `Database` row of our database.
pub fn server_monitor_request(database: &str) -> Json {
    json!({"Database": [{"columns": ["name", "model", "connected", "leader", "index"],
                         "where": [["name", "==", database]]}]})
}

/// Parses a `select` on `_Server.Database` into the rows' statuses by database name.
pub fn server_statuses(rows: &[Row]) -> BTreeMap<String, ServerStatus> {
    rows.iter()
        .filter_map(|r| {
            let name = r.get("name")?.set_elements()?.first()?.as_str()?.to_owned();
            Some((name, ServerStatus::from_row(r)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Value;

    fn status(model: &str, connected: bool, leader: bool, index: i64) -> ServerStatus {
        ServerStatus::from_row(&Row::from([
            ("name".into(), Value::from("OVN_Northbound")),
            ("model".into(), Value::from(model)),
            ("connected".into(), Value::from(connected)),
            ("leader".into(), Value::from(leader)),
            ("index".into(), Value::set([index])),
        ]))
    }

    #[test]
    fn leader_rules() {
        assert!(status("standalone", true, true, 0).usable(true, 10).is_ok());
        assert!(status("clustered", true, true, 5).usable(true, 5).is_ok());
        assert!(status("clustered", true, false, 5).usable(true, 0).is_err());
        assert!(status("clustered", true, false, 5).usable(false, 0).is_ok());
        assert!(status("clustered", false, true, 5).usable(false, 0).is_err());
        assert!(status("clustered", true, true, 4).usable(true, 5).is_err());
    }

    /// The old `monitor` method (RFC 7047) has no `where`: the same body without it.
    #[test]
    fn conditions_become_where_and_can_be_dropped_for_the_old_method() {
        let schema: DatabaseSchema = serde_json::from_value(json!({"name":"T","version":"1","tables":{
            "a":{"columns":{"x":{"type":"string"}}}, "b":{"columns":{"y":{"type":"string"}}}}}))
        .unwrap();
        let tables = MonitorTables::Where(vec![
            ("a".into(), vec![Condition::eq("x", "v")]),
            ("b".into(), vec![]),
        ]);
        let (body, missing) = monitor_requests(&schema, &tables);
        assert!(missing.is_empty());
        assert_eq!(
            body,
            json!({"a": [{"columns": ["x"], "where": [["x", "==", "v"]]}], "b": [{"columns": ["y"]}]})
        );
        assert_eq!(
            without_conditions(&body),
            json!({"a": [{"columns": ["x"]}], "b": [{"columns": ["y"]}]})
        );
    }

    #[test]
    fn monitor_body_lists_server_columns_and_reports_missing_tables() {
        let schema: DatabaseSchema = serde_json::from_value(json!({"name":"T","version":"1","tables":{
            "a":{"columns":{"x":{"type":"string"}}}}}))
        .unwrap();
        let (body, missing) = monitor_requests(&schema, &MonitorTables::Only(vec!["a".into(), "zz".into()]));
        assert_eq!(body, json!({"a": [{"columns": ["x"]}]}));
        assert_eq!(missing, vec!["zz".to_owned()]);
    }
}
