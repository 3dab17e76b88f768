//! The in-memory replica of monitored tables, and the monitor update formats that feed it:
//! `update` (RFC 7047 §4.1.6), `update2` and `update3` (ovsdb-server(7)).
//!
//! Pure: no I/O, no async. Applying an update returns the [`Change`]s it made, so a caller can
//! notify subscribers after the cache is consistent again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{Deserializer, IgnoredAny};
use uuid::Uuid;

pub use crate::change::{Change, ChangeKind};
use crate::data::Row;
use crate::error::{DecodeError, ProtocolError};
use crate::index::NameIndex;
use crate::schema::DatabaseSchema;
use crate::table::Table;

/// `update` notification body: table → uuid → old/new.
pub type TableUpdates = HashMap<String, HashMap<Uuid, RowUpdate>>;

/// `update2`/`update3` body: table → uuid → one of initial/insert/modify/delete.
pub type TableUpdates2 = HashMap<String, HashMap<Uuid, RowUpdate2>>;

#[derive(Debug, Deserialize)]
pub struct RowUpdate {
    #[serde(default)]
    pub old: Option<Row>,
    #[serde(default)]
    pub new: Option<Row>,
}

#[derive(Debug)]
pub enum RowUpdate2 {
    Initial(Row),
    Insert(Row),
    /// Per column: the new value for single-element columns, a diff for the others.
    Modify(Row),
    Delete,
}

impl<'de> Deserialize<'de> for RowUpdate2 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        fn present<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
            IgnoredAny::deserialize(d).map(|_| true)
        }
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Wire {
            #[serde(default)]
            initial: Option<Row>,
            #[serde(default)]
            insert: Option<Row>,
            #[serde(default)]
            modify: Option<Row>,
            #[serde(default, deserialize_with = "present")]
            delete: bool,
        }
        let w = Wire::deserialize(d)?;
        let n = usize::from(w.initial.is_some())
            + usize::from(w.insert.is_some())
            + usize::from(w.modify.is_some())
            + usize::from(w.delete);
        if n != 1 {
            return Err(serde::de::Error::custom(format!(
                "a row update needs exactly one of initial/insert/modify/delete, found {n}"
            )));
        }
        Ok(match (w.initial, w.insert, w.modify) {
            (Some(r), _, _) => Self::Initial(r),
            (_, Some(r), _) => Self::Insert(r),
            (_, _, Some(r)) => Self::Modify(r),
            _ => Self::Delete,
        })
    }
}

/// A monitor notification, decoded by its method.
#[derive(Debug)]
pub enum MonitorUpdate {
    /// RFC 7047 `update`: `[monitor id, table-updates]`.
    Update { monitor: String, updates: TableUpdates },
    /// `update2`: `[monitor id, table-updates2]`.
    Update2 { monitor: String, updates: TableUpdates2 },
    /// `update3`: `[monitor id, last transaction id, table-updates2]`.
    Update3 {
        monitor: String,
        txn_id: String,
        updates: TableUpdates2,
    },
}

impl MonitorUpdate {
    /// Decodes a notification's params; `Ok(None)` for methods that are not monitor updates.
    pub fn decode(method: &str, params: &str) -> Result<Option<Self>, ProtocolError> {
        let json = |e: serde_json::Error| ProtocolError::Json(format!("{method}: {e}"));
        Ok(Some(match method {
            "update" => {
                let (monitor, updates) = serde_json::from_str(params).map_err(json)?;
                Self::Update { monitor, updates }
            }
            "update2" => {
                let (monitor, updates) = serde_json::from_str(params).map_err(json)?;
                Self::Update2 { monitor, updates }
            }
            "update3" => {
                let (monitor, txn_id, updates) = serde_json::from_str(params).map_err(json)?;
                Self::Update3 {
                    monitor,
                    txn_id,
                    updates,
                }
            }
            _ => return Ok(None),
        }))
    }

    pub fn monitor(&self) -> &str {
        match self {
            Self::Update { monitor, .. } | Self::Update2 { monitor, .. } | Self::Update3 { monitor, .. } => {
                monitor
            }
        }
    }
}

/// Rows of every monitored table, keyed by UUID. Rows are canonical: values have their column's
/// shape, and a column at its default value is absent (read it as the default).
#[derive(Clone, Debug, Default)]
pub struct DbCache {
    schema: Option<Arc<DatabaseSchema>>,
    tables: BTreeMap<Arc<str>, HashMap<Uuid, Arc<Row>>>,
    names: NameIndex,
}

impl DbCache {
    pub fn new(schema: Option<Arc<DatabaseSchema>>) -> Self {
        Self {
            schema,
            tables: BTreeMap::new(),
            names: NameIndex::default(),
        }
    }

    pub fn schema(&self) -> Option<&Arc<DatabaseSchema>> {
        self.schema.as_ref()
    }

    pub fn set_schema(&mut self, schema: Arc<DatabaseSchema>) {
        self.schema = Some(schema);
    }

    /// One row.
    pub fn row(&self, table: &str, uuid: &Uuid) -> Option<&Arc<Row>> {
        self.tables.get(table)?.get(uuid)
    }

    /// All rows of a table.
    pub fn table(&self, table: &str) -> impl Iterator<Item = (&Uuid, &Arc<Row>)> {
        self.tables.get(table).into_iter().flat_map(|t| t.iter())
    }

    pub fn len(&self, table: &str) -> usize {
        self.tables.get(table).map_or(0, HashMap::len)
    }

    pub fn is_empty(&self) -> bool {
        self.tables.values().all(HashMap::is_empty)
    }

    pub fn table_names(&self) -> impl Iterator<Item = &str> {
        self.tables.keys().map(AsRef::as_ref)
    }

    /// Every row of `T`'s table, decoded.
    pub fn rows<T: Table>(&self) -> Result<Vec<T>, DecodeError> {
        self.table(T::NAME).map(|(u, r)| T::from_row(*u, r)).collect()
    }

    /// One row of `T`'s table, decoded.
    pub fn get<T: Table>(&self, uuid: &Uuid) -> Result<Option<T>, DecodeError> {
        self.row(T::NAME, uuid).map(|r| T::from_row(*uuid, r)).transpose()
    }

    /// Rows of `table` whose `name` column is `name`, by index.
    pub fn uuids_by_name(&self, table: &str, name: &str) -> &[Uuid] {
        self.names.get(table, name)
    }

    /// The row of `T`'s table named `name` (the first, if OVN allowed duplicates), by index.
    pub fn by_name<T: Table>(&self, name: &str) -> Result<Option<T>, DecodeError> {
        match self.names.get(T::NAME, name).first() {
            Some(uuid) => self.get::<T>(uuid),
            None => Ok(None),
        }
    }

    /// The first row of `T`'s table that `pred` accepts.
    pub fn find<T: Table>(&self, mut pred: impl FnMut(&T) -> bool) -> Result<Option<T>, DecodeError> {
        for (u, r) in self.table(T::NAME) {
            let t = T::from_row(*u, r)?;
            if pred(&t) {
                return Ok(Some(t));
            }
        }
        Ok(None)
    }

    fn table_key(&mut self, table: &str) -> Arc<str> {
        if let Some((k, _)) = self.tables.get_key_value(table) {
            return k.clone();
        }
        let k: Arc<str> = Arc::from(table);
        self.tables.insert(k.clone(), HashMap::new());
        k
    }

    /// Canonical form: values in their column's shape, and columns at their default left out.
    /// `update2` leaves default-valued columns out of inserts while `update` and `select` include
    /// them; keeping rows sparse makes both agree and saves memory on large tables.
    fn normalize(&self, table: &str, row: Row) -> Row {
        let Some(ts) = self.schema.as_ref().and_then(|s| s.table(table)) else {
            return row;
        };
        row.into_iter()
            .filter_map(|(col, value)| match ts.columns.get(&col) {
                Some(cs) => {
                    let value = value.normalize(&cs.ty);
                    (value != cs.ty.default_value()).then_some((col, value))
                }
                None => Some((col, value)),
            })
            .collect()
    }

    /// Applies a monitor notification of any format.
    pub fn apply(&mut self, update: MonitorUpdate) -> Result<Vec<Change>, ProtocolError> {
        match update {
            MonitorUpdate::Update { updates, .. } => Ok(self.apply_update(updates)),
            MonitorUpdate::Update2 { updates, .. } | MonitorUpdate::Update3 { updates, .. } => {
                self.apply_update2(updates)
            }
        }
    }

    /// Applies an RFC 7047 `update`: `new` is the whole row (all monitored columns).
    pub fn apply_update(&mut self, updates: TableUpdates) -> Vec<Change> {
        let mut changes = Vec::new();
        for (table, rows) in updates {
            let key = self.table_key(&table);
            for (uuid, update) in rows {
                let new = update.new.map(|r| Arc::new(self.normalize(&table, r)));
                let rows = self.tables.get_mut(&key).expect("table key just ensured");
                let old = match &new {
                    Some(n) => rows.insert(uuid, n.clone()),
                    None => rows.remove(&uuid),
                };
                if old.is_some() || new.is_some() {
                    changes.push(Change {
                        table: key.clone(),
                        uuid,
                        old,
                        new,
                    });
                }
            }
        }
        self.names.update(&changes);
        changes
    }

    /// Applies an `update2`/`update3` body. A `modify` of a row we do not hold means the replica
    /// has diverged from the server: the caller must resynchronise from scratch.
    pub fn apply_update2(&mut self, updates: TableUpdates2) -> Result<Vec<Change>, ProtocolError> {
        let mut changes = Vec::new();
        for (table, rows) in updates {
            let key = self.table_key(&table);
            for (uuid, update) in rows {
                let change = match update {
                    RowUpdate2::Initial(row) | RowUpdate2::Insert(row) => {
                        let new = Arc::new(self.normalize(&table, row));
                        let old = self.rows_mut(&key).insert(uuid, new.clone());
                        Change {
                            table: key.clone(),
                            uuid,
                            old,
                            new: Some(new),
                        }
                    }
                    RowUpdate2::Modify(diff) => {
                        let schema = self.schema.clone();
                        let rows = self.rows_mut(&key);
                        let Some(old) = rows.get(&uuid).cloned() else {
                            return Err(ProtocolError::Invalid(format!(
                                "modify for row {uuid} of table {table}, which the replica does not hold"
                            )));
                        };
                        let mut row = (*old).clone();
                        for (col, d) in diff {
                            let ty = schema
                                .as_ref()
                                .and_then(|s| s.column(&table, &col))
                                .map(|c| &c.ty);
                            match ty {
                                Some(ty) => {
                                    let default = ty.default_value();
                                    let value = row.get(&col).unwrap_or(&default).apply_diff(d, ty);
                                    if value == default {
                                        row.remove(&col);
                                    } else {
                                        row.insert(col, value);
                                    }
                                }
                                None => {
                                    row.insert(col, d);
                                }
                            }
                        }
                        let new = Arc::new(row);
                        rows.insert(uuid, new.clone());
                        Change {
                            table: key.clone(),
                            uuid,
                            old: Some(old),
                            new: Some(new),
                        }
                    }
                    RowUpdate2::Delete => match self.rows_mut(&key).remove(&uuid) {
                        Some(old) => Change {
                            table: key.clone(),
                            uuid,
                            old: Some(old),
                            new: None,
                        },
                        None => continue,
                    },
                };
                changes.push(change);
            }
        }
        self.names.update(&changes);
        Ok(changes)
    }

    fn rows_mut(&mut self, key: &Arc<str>) -> &mut HashMap<Uuid, Arc<Row>> {
        self.tables.entry(key.clone()).or_default()
    }

    /// Replaces the whole replica with `fresh` (a full resync) and returns the difference, so
    /// subscribers learn of rows that appeared, changed or vanished while we were away.
    pub fn replace_with(&mut self, fresh: DbCache) -> Vec<Change> {
        let mut changes = Vec::new();
        let old_tables = std::mem::take(&mut self.tables);
        for (table, old_rows) in &old_tables {
            let new_rows = fresh.tables.get(table);
            for (uuid, old) in old_rows {
                match new_rows.and_then(|n| n.get(uuid)) {
                    Some(new) if new == old => {}
                    Some(new) => changes.push(Change {
                        table: table.clone(),
                        uuid: *uuid,
                        old: Some(old.clone()),
                        new: Some(new.clone()),
                    }),
                    None => {
                        changes.push(Change {
                            table: table.clone(),
                            uuid: *uuid,
                            old: Some(old.clone()),
                            new: None,
                        });
                    }
                }
            }
        }
        for (table, new_rows) in &fresh.tables {
            let old_rows = old_tables.get(table);
            for (uuid, new) in new_rows {
                if old_rows.is_none_or(|o| !o.contains_key(uuid)) {
                    changes.push(Change {
                        table: table.clone(),
                        uuid: *uuid,
                        old: None,
                        new: Some(new.clone()),
                    });
                }
            }
        }
        self.tables = fresh.tables;
        self.names = fresh.names;
        if fresh.schema.is_some() {
            self.schema = fresh.schema;
        }
        changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::Value;
    use serde_json::json;

    fn schema() -> Arc<DatabaseSchema> {
        Arc::new(
            serde_json::from_value(json!({"name":"T","version":"1","tables":{"t":{"columns":{
                "name":{"type":"string"},
                "opt":{"type":{"key":"string","min":0,"max":1}},
                "tags":{"type":{"key":"string","min":0,"max":"unlimited"}},
                "ext":{"type":{"key":"string","value":"string","min":0,"max":"unlimited"}}
            }}}}))
            .unwrap(),
        )
    }

    fn u2(v: serde_json::Value) -> TableUpdates2 {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn update2_insert_modify_delete() {
        let mut c = DbCache::new(Some(schema()));
        let id = Uuid::new_v4();
        let ch = c
            .apply_update2(u2(json!({"t": {id.to_string(): {"insert": {
                "name": "a", "tags": "x", "ext": ["map", [["k", "v"], ["j", "1"]]]}}}})))
            .unwrap();
        assert_eq!(ch[0].kind(), ChangeKind::Insert);
        let row = c.row("t", &id).unwrap();
        assert_eq!(row["tags"], Value::set(["x"]), "bare atom normalised to a set");
        c.apply_update2(u2(json!({"t": {id.to_string(): {"modify": {
            "tags": ["set", ["x", "y"]],
            "ext": ["map", [["k", "v"], ["j", "2"], ["n", "3"]]],
            "opt": "o"}}}})))
            .unwrap();
        let row = c.row("t", &id).unwrap();
        assert_eq!(row["tags"], Value::set(["y"]));
        assert_eq!(row["ext"], Value::map([("j", "2"), ("n", "3")]));
        assert_eq!(row["opt"], Value::set(["o"]));
        let ch = c
            .apply_update2(u2(json!({"t": {id.to_string(): {"delete": null}}})))
            .unwrap();
        assert_eq!(ch[0].kind(), ChangeKind::Delete);
        assert!(c.row("t", &id).is_none());
    }

    #[test]
    fn name_index_follows_inserts_renames_deletes_and_resyncs() {
        let mut c = DbCache::new(Some(schema()));
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        c.apply_update2(u2(json!({"t": {a.to_string(): {"insert": {"name": "x"}}, b.to_string(): {"insert": {"name": "y"}}}})))
            .unwrap();
        assert_eq!(c.uuids_by_name("t", "x"), &[a]);
        c.apply_update2(u2(json!({"t": {a.to_string(): {"modify": {"name": "z"}}}})))
            .unwrap();
        assert!(c.uuids_by_name("t", "x").is_empty());
        assert_eq!(c.uuids_by_name("t", "z"), &[a]);
        c.apply_update2(u2(json!({"t": {b.to_string(): {"delete": null}}})))
            .unwrap();
        assert!(c.uuids_by_name("t", "y").is_empty());
        let mut fresh = DbCache::new(Some(schema()));
        fresh
            .apply_update2(u2(json!({"t": {b.to_string(): {"initial": {"name": "w"}}}})))
            .unwrap();
        c.replace_with(fresh);
        assert!(c.uuids_by_name("t", "z").is_empty());
        assert_eq!(c.uuids_by_name("t", "w"), &[b]);
    }

    #[test]
    fn modify_of_unknown_row_asks_for_resync() {
        let mut c = DbCache::new(Some(schema()));
        let err = c.apply_update2(u2(
            json!({"t": {Uuid::new_v4().to_string(): {"modify": {"name": "b"}}}}),
        ));
        assert!(err.is_err());
    }

    #[test]
    fn row_update2_needs_exactly_one_kind() {
        assert!(serde_json::from_value::<RowUpdate2>(json!({})).is_err());
        assert!(serde_json::from_value::<RowUpdate2>(json!({"insert": {}, "delete": null})).is_err());
        assert!(serde_json::from_value::<RowUpdate2>(json!({"frob": {}})).is_err());
    }

    #[test]
    fn full_resync_reports_the_difference() {
        let (a, b, c) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
        let mut cache = DbCache::new(Some(schema()));
        cache
            .apply_update2(u2(json!({"t": {
                a.to_string(): {"initial": {"name": "a"}},
                b.to_string(): {"initial": {"name": "b"}}}})))
            .unwrap();
        let mut fresh = DbCache::new(Some(schema()));
        fresh
            .apply_update2(u2(json!({"t": {
                b.to_string(): {"initial": {"name": "b2"}},
                c.to_string(): {"initial": {"name": "c"}}}})))
            .unwrap();
        let mut kinds: Vec<_> = cache
            .replace_with(fresh)
            .iter()
            .map(|ch| (ch.uuid, ch.kind()))
            .collect();
        kinds.sort();
        let mut want = vec![
            (a, ChangeKind::Delete),
            (b, ChangeKind::Update),
            (c, ChangeKind::Insert),
        ];
        want.sort();
        assert_eq!(kinds, want);
        assert_eq!(cache.len("t"), 2);
    }
}
