//! Rows by their `name` column, so a controller with 10,000 ports finds one in constant time
//! instead of scanning the table. Maintained from the changes each update makes.
//!
//! Pure: no I/O.

use std::collections::HashMap;
use std::sync::Arc;

use uuid::Uuid;

use crate::change::Change;
use crate::data::Row;

#[derive(Clone, Debug, Default)]
pub struct NameIndex {
    /// Table → name → rows with that name (names are unique in most tables, but not all:
    /// `Logical_Switch` and `Logical_Router` names are not enforced unique by OVN).
    tables: HashMap<Arc<str>, HashMap<String, Vec<Uuid>>>,
}

/// The row's name: the string in its `name` column (a scalar, or an optional name set).
pub fn row_name(row: &Row) -> Option<&str> {
    row.get("name")?.set_elements()?.first()?.as_str()
}

impl NameIndex {
    fn add(&mut self, table: &Arc<str>, name: &str, uuid: Uuid) {
        let uuids = self
            .tables
            .entry(table.clone())
            .or_default()
            .entry(name.to_owned())
            .or_default();
        if !uuids.contains(&uuid) {
            uuids.push(uuid);
        }
    }

    fn remove(&mut self, table: &str, name: &str, uuid: Uuid) {
        if let Some(names) = self.tables.get_mut(table)
            && let Some(uuids) = names.get_mut(name)
        {
            uuids.retain(|u| *u != uuid);
            if uuids.is_empty() {
                names.remove(name);
            }
        }
    }

    /// Follows what an update changed.
    pub fn update(&mut self, changes: &[Change]) {
        for ch in changes {
            let old = ch.old.as_deref().and_then(row_name);
            let new = ch.new.as_deref().and_then(row_name);
            if old == new {
                continue;
            }
            if let Some(n) = old {
                self.remove(&ch.table, n, ch.uuid);
            }
            if let Some(n) = new {
                self.add(&ch.table, n, ch.uuid);
            }
        }
    }

    pub fn clear(&mut self) {
        self.tables.clear();
    }

    /// Rows of `table` named `name`.
    pub fn get(&self, table: &str, name: &str) -> &[Uuid] {
        self.tables
            .get(table)
            .and_then(|t| t.get(name))
            .map_or(&[], Vec::as_slice)
    }
}
