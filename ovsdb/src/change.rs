//! One row that changed in the replica: what applying a monitor update returns
//! ([`crate::cache`]) and what the name index and subscribers consume ([`crate::index`], the
//! client). Its own module so the cache and the index both depend on it and not on each other.
//!
//! Pure: no I/O.

use std::sync::Arc;

use uuid::Uuid;

use crate::data::Row;

/// One row that changed. `old` is absent for an insert, `new` for a delete.
#[derive(Clone, Debug)]
pub struct Change {
    pub table: Arc<str>,
    pub uuid: Uuid,
    pub old: Option<Arc<Row>>,
    pub new: Option<Arc<Row>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ChangeKind {
    Insert,
    Update,
    Delete,
}

impl Change {
    pub fn kind(&self) -> ChangeKind {
        match (&self.old, &self.new) {
            (None, _) => ChangeKind::Insert,
            (Some(_), None) => ChangeKind::Delete,
            (Some(_), Some(_)) => ChangeKind::Update,
        }
    }
}
