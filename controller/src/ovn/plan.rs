//! Plans: the northbound operations that bring OVN to a desired state, computed from the replica.
//!
//! Pure: no I/O. Every reconciler builds a [`Plan`] from the client's replica and applies it in one
//! transaction, so an object's rows change together or not at all. Rows we create carry
//! `external_ids:vendor=kube-ovn` plus keys naming their owner, so later plans (and garbage
//! collection) can tell ours from anyone else's.

use std::collections::BTreeMap;

use kube_ovn_ovsdb::{Atom, Condition, DbCache, Mutation, Operation, Row, Table, Uuid, Value, WaitUntil};

pub const VENDOR_KEY: &str = "vendor";
pub const VENDOR: &str = "kube-ovn";

/// A row that exists, or one this plan creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowRef {
    Existing(Uuid),
    /// Inserted by this plan under a `uuid-name`.
    New(String),
}

impl RowRef {
    pub fn atom(&self) -> Atom {
        match self {
            Self::Existing(u) => Atom::Uuid(*u),
            Self::New(n) => Atom::NamedUuid(n.clone()),
        }
    }

    pub fn existing(&self) -> Option<Uuid> {
        match self {
            Self::Existing(u) => Some(*u),
            Self::New(_) => None,
        }
    }
}

/// Operations to run in one transaction.
#[derive(Debug, Default)]
pub struct Plan {
    ops: Vec<Operation>,
    next_name: usize,
}

impl Plan {
    pub fn new() -> Self {
        Self::default()
    }

    /// A plan of already-built operations (their named UUIDs are the plan's own).
    pub fn from_ops(ops: Vec<Operation>) -> Self {
        let next_name = ops.len();
        Self { ops, next_name }
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn push(&mut self, op: Operation) {
        self.ops.push(op);
    }

    pub fn into_ops(self) -> Vec<Operation> {
        self.ops
    }

    pub fn ops(&self) -> &[Operation] {
        &self.ops
    }

    /// Appends another plan (several objects' changes in one transaction).
    pub fn extend(&mut self, other: Plan) {
        // Named UUIDs must stay unique within the transaction.
        let offset = self.next_name;
        for op in other.ops {
            self.ops.push(rename(op, offset));
        }
        self.next_name += other.next_name;
    }

    fn fresh_name(&mut self) -> String {
        self.next_name += 1;
        format!("row{}", self.next_name)
    }

    /// Makes the row of `T` named `name` look like `desired` in `columns`: updates the columns
    /// that differ, or inserts it so that two writers cannot both create it: the server's unique
    /// index on `name` refuses the second (Logical_Switch_Port, Port_Group, Address_Set), or, for
    /// tables without one (Logical_Switch, Logical_Router), a `wait` on the name guards the insert.
    /// The `wait` is not added where the index does the job: ovsdb-server answers it by comparing
    /// the name of every row of the table, which made each pod's port cost O(ports).
    pub fn ensure<T: Table>(&mut self, cache: &DbCache, name: &str, desired: &T, columns: &[&str]) -> RowRef {
        let want = desired.partial_row(columns);
        if let Some(uuid) = cache.uuids_by_name(T::NAME, name).first() {
            let have = cache.row(T::NAME, uuid);
            let changed: Row = want
                .into_iter()
                .filter(|(col, v)| have.is_none_or(|h| !same(h.get(col), v)))
                .collect();
            if !changed.is_empty() {
                self.push(Operation::update(T::NAME, vec![Condition::uuid(*uuid)], changed));
            }
            return RowRef::Existing(*uuid);
        }
        let uuid_name = self.fresh_name();
        if !name_is_unique(cache, T::NAME) {
            self.push(Operation::Wait {
                table: T::NAME.into(),
                conditions: vec![Condition::eq("name", name)],
                columns: vec!["name".into()],
                until: WaitUntil::Equal,
                rows: Vec::new(),
                timeout_ms: Some(0),
            });
        }
        let mut row = desired.to_row();
        row.insert("name".into(), Value::from(name));
        self.push(Operation::insert_named(T::NAME, row, uuid_name.clone()));
        RowRef::New(uuid_name)
    }

    /// Inserts a row that has no name (a policy, a route, an ACL), returning its reference.
    pub fn insert(&mut self, table: &str, row: Row) -> RowRef {
        let uuid_name = self.fresh_name();
        self.push(Operation::insert_named(table, row, uuid_name.clone()));
        RowRef::New(uuid_name)
    }

    /// Adds `members` to a reference set of a row, those `is_member` does not already know.
    pub fn add_members(
        &mut self,
        table: &str,
        parent: &RowRef,
        column: &str,
        is_member: impl Fn(&Uuid) -> bool,
        members: &[RowRef],
    ) {
        let missing: Vec<Atom> = members
            .iter()
            .filter(|m| m.existing().is_none_or(|u| !is_member(&u)))
            .map(RowRef::atom)
            .collect();
        if missing.is_empty() {
            return;
        }
        self.mutate_set(
            table,
            parent,
            column,
            Mutation::insert(column, Value::Set(missing.into_iter().collect())),
        );
    }

    /// Removes `members` from a reference set (non-root rows left unreferenced are dropped by
    /// the server).
    pub fn remove_members(&mut self, table: &str, parent: &RowRef, column: &str, members: &[Uuid]) {
        if members.is_empty() {
            return;
        }
        self.mutate_set(
            table,
            parent,
            column,
            Mutation::delete(column, Value::set(members.iter().copied())),
        );
    }

    fn mutate_set(&mut self, table: &str, parent: &RowRef, column: &str, mutation: Mutation) {
        let _ = column;
        let condition = match parent {
            RowRef::Existing(u) => Condition::uuid(*u),
            // A row inserted earlier in this transaction is referred to by its named UUID.
            RowRef::New(n) => Condition::eq("_uuid", Value::named_uuid(n.clone())),
        };
        self.push(Operation::mutate(table, vec![condition], vec![mutation]));
    }

    /// Deletes a root row (switch, router, port group, address set).
    pub fn delete(&mut self, table: &str, uuid: Uuid) {
        self.push(Operation::delete(table, vec![Condition::uuid(uuid)]));
    }
}

/// Whether a stored value equals a desired one, absent meaning default.
fn same(have: Option<&Value>, want: &Value) -> bool {
    match have {
        Some(h) => h == want || normal(h) == normal(want),
        None => want.is_default(),
    }
}

/// Scalars and one-element sets compare alike.
fn normal(v: &Value) -> Value {
    match v {
        Value::Set(s) if s.len() == 1 => Value::Atom(s.iter().next().expect("one element").clone()),
        other => other.clone(),
    }
}

fn rename(op: Operation, offset: usize) -> Operation {
    fn shift(name: &str, offset: usize) -> String {
        match name.strip_prefix("row").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) => format!("row{}", n + offset),
            None => name.to_owned(),
        }
    }
    fn shift_value(v: Value, offset: usize) -> Value {
        let atom = |a: Atom| match a {
            Atom::NamedUuid(n) => Atom::NamedUuid(shift(&n, offset)),
            other => other,
        };
        match v {
            Value::Atom(a) => Value::Atom(atom(a)),
            Value::Set(s) => Value::Set(s.into_iter().map(atom).collect()),
            Value::Map(m) => Value::Map(m.into_iter().map(|(k, v)| (atom(k), atom(v))).collect()),
        }
    }
    let row = |r: Row| -> Row { r.into_iter().map(|(k, v)| (k, shift_value(v, offset))).collect() };
    let conds = |c: Vec<Condition>| -> Vec<Condition> {
        c.into_iter()
            .map(|c| Condition {
                value: shift_value(c.value, offset),
                ..c
            })
            .collect()
    };
    match op {
        Operation::Insert {
            table,
            row: r,
            uuid_name,
        } => Operation::Insert {
            table,
            row: row(r),
            uuid_name: uuid_name.map(|n| shift(&n, offset)),
        },
        Operation::Update {
            table,
            conditions,
            row: r,
        } => Operation::Update {
            table,
            conditions: conds(conditions),
            row: row(r),
        },
        Operation::Mutate {
            table,
            conditions,
            mutations,
        } => Operation::Mutate {
            table,
            conditions: conds(conditions),
            mutations: mutations
                .into_iter()
                .map(|m| Mutation {
                    value: shift_value(m.value, offset),
                    ..m
                })
                .collect(),
        },
        Operation::Delete { table, conditions } => Operation::Delete {
            table,
            conditions: conds(conditions),
        },
        other => other,
    }
}

/// Rows of one owner (router policies, routes, ACLs) with the `external_ids` that mark them.
pub type OwnedRows<T> = Vec<(T, BTreeMap<String, String>)>;

/// `external_ids` for a row we own: vendor plus the owner's keys.
pub fn owned_ids(owner: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut ids: BTreeMap<String, String> = owner
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ids.insert(VENDOR_KEY.into(), VENDOR.into());
    ids
}

/// Whether `external_ids` say the row is ours and belongs to `owner`.
pub fn is_owned_by(external_ids: &BTreeMap<String, String>, owner: &[(&str, &str)]) -> bool {
    external_ids.get(VENDOR_KEY).is_some_and(|v| v == VENDOR)
        && owner
            .iter()
            .all(|(k, v)| external_ids.get(*k).is_some_and(|x| x == v))
}

/// Whether the server's schema has a unique index on `table`'s `name` alone (unknown schema: no).
fn name_is_unique(cache: &DbCache, table: &str) -> bool {
    cache
        .schema()
        .and_then(|s| s.table(table))
        .is_some_and(|t| t.indexes.iter().any(|i| i.len() == 1 && i[0] == "name"))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube_ovn_ovsdb::DatabaseSchema;
    use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort};

    use super::*;

    fn cache() -> DbCache {
        // The two tables as OVN's NB schema has them: ports unique by name, switches not.
        let schema: DatabaseSchema = serde_json::from_str(
            r#"{"name": "OVN_Northbound", "version": "7.0.0", "tables": {
                "Logical_Switch_Port": {"columns": {"name": {"type": "string"}}, "isRoot": false, "indexes": [["name"]]},
                "Logical_Switch": {"columns": {"name": {"type": "string"}}, "isRoot": true}}}"#,
        )
        .unwrap();
        DbCache::new(Some(Arc::new(schema)))
    }

    fn op_names(plan: &Plan) -> Vec<&'static str> {
        plan.ops().iter().map(Operation::name).collect()
    }

    #[test]
    fn a_named_insert_is_guarded_by_the_index_or_by_a_wait() {
        let cache = cache();
        let mut plan = Plan::new();
        plan.ensure(&cache, "p.ns", &LogicalSwitchPort::default(), &["name"]);
        assert_eq!(
            op_names(&plan),
            ["insert"],
            "the unique index refuses a second port of that name"
        );
        let mut plan = Plan::new();
        plan.ensure(&cache, "s1", &LogicalSwitch::default(), &["name"]);
        assert_eq!(
            op_names(&plan),
            ["wait", "insert"],
            "switch names are not unique in the schema"
        );
    }
}
