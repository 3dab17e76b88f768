//! What a session asks for at setup, and how the answers are judged. Pure: no I/O.

use std::collections::BTreeMap;

use serde_json::{Value as Json, json};

use crate::data::{Row, Value};
use crate::schema::DatabaseSchema;

/// Which tables the client keeps a replica of.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum MonitorTables {
    /// Every table in the server's schema.
    #[default]
    All,
    /// These tables; names the server does not have are skipped with a warning.
    Only(Vec<String>),
    /// No replica: transactions only.
    None,
}

/// The monitor request body for `monitor`, `monitor_cond` and `monitor_cond_since`: every column
/// the server has for each chosen table. Returns the body and the requested tables the server
/// lacks.
pub fn monitor_requests(schema: &DatabaseSchema, tables: &MonitorTables) -> (Json, Vec<String>) {
    let names: Vec<String> = match tables {
        MonitorTables::All => schema.tables.keys().cloned().collect(),
        MonitorTables::Only(t) => t.clone(),
        MonitorTables::None => Vec::new(),
    };
    let mut body = serde_json::Map::new();
    let mut missing = Vec::new();
    for name in names {
        match schema.table(&name) {
            Some(ts) => {
                let columns: Vec<&String> = ts.columns.keys().collect();
                body.insert(name, json!([{ "columns": columns }]));
            }
            None => missing.push(name),
        }
    }
    (Json::Object(body), missing)
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
