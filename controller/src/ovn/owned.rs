//! Sets of rows an object owns inside a parent row's reference column: router policies and static
//! routes on a router, ACLs on a switch or port group. A plan makes the owned set equal the desired
//! one: extra rows unreferenced (the server drops them), missing ones inserted, changed ones updated.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use kube_ovn_ovsdb::tables::nb::{
    Acl, LogicalRouter, LogicalRouterPolicy, LogicalRouterStaticRoute, LogicalSwitch, PortGroup,
};
use kube_ovn_ovsdb::{Condition, DbCache, Operation, Table, Uuid};

use super::plan::{Plan, RowRef, is_owned_by, owned_ids};

/// A router policy: Kube-OVN's priorities are 31000 (cluster-internal allow), 30000 (node),
/// 29250 (north gateway), 29000 (gateway reroute).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicySpec {
    pub priority: i64,
    pub r#match: String,
    /// `allow`, `drop` or `reroute`.
    pub action: String,
    pub nexthops: Vec<String>,
}

/// A static route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    pub ip_prefix: String,
    pub nexthop: String,
    /// `dst-ip` (default) or `src-ip`.
    pub policy: Option<String>,
    pub route_table: String,
}

/// An ACL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclSpec {
    pub direction: String,
    pub priority: i64,
    pub r#match: String,
    pub action: String,
}

/// Where owned rows hang: a router's `policies` / `static_routes`, or a switch's / port group's
/// `acls`.
#[derive(Debug, Clone, Copy)]
pub enum Parent<'a> {
    Router(&'a str),
    Switch(&'a str),
    PortGroup(&'a str),
}

impl Parent<'_> {
    fn lookup(&self, cache: &DbCache, column: &str) -> Option<(Uuid, Vec<Uuid>, &'static str)> {
        match self {
            Parent::Router(name) => {
                let r = cache.by_name::<LogicalRouter>(name).ok()??;
                let refs = if column == "policies" {
                    r.policies
                } else {
                    r.static_routes
                };
                Some((r.uuid, refs, LogicalRouter::NAME))
            }
            Parent::Switch(name) => {
                let s = cache.by_name::<LogicalSwitch>(name).ok()??;
                Some((s.uuid, s.acls, LogicalSwitch::NAME))
            }
            Parent::PortGroup(name) => {
                let p = cache.by_name::<PortGroup>(name).ok()??;
                Some((p.uuid, p.acls, PortGroup::NAME))
            }
        }
    }
}

/// What a kind of owned row needs: its identity within the parent, and its full row.
trait Owned: Table + Sized {
    type Spec: Clone;
    const COLUMN: &'static str;
    fn key_of(&self) -> String;
    fn spec_key(spec: &Self::Spec) -> String;
    fn build(spec: &Self::Spec, ids: BTreeMap<String, String>) -> Self;
    /// The columns a plan keeps equal to the spec.
    const SYNCED: &'static [&'static str];
    fn ids(&self) -> &BTreeMap<String, String>;
}

impl Owned for LogicalRouterPolicy {
    type Spec = PolicySpec;
    const COLUMN: &'static str = "policies";
    const SYNCED: &'static [&'static str] = &["action", "nexthops", "external_ids"];
    fn key_of(&self) -> String {
        format!("{}|{}", self.priority, self.r#match)
    }
    fn spec_key(s: &PolicySpec) -> String {
        format!("{}|{}", s.priority, s.r#match)
    }
    fn build(s: &PolicySpec, ids: BTreeMap<String, String>) -> Self {
        Self {
            priority: s.priority,
            r#match: s.r#match.clone(),
            action: s.action.clone(),
            nexthops: s.nexthops.clone(),
            external_ids: ids,
            ..Self::default()
        }
    }
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

impl Owned for LogicalRouterStaticRoute {
    type Spec = RouteSpec;
    const COLUMN: &'static str = "static_routes";
    const SYNCED: &'static [&'static str] = &["external_ids"];
    fn key_of(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.ip_prefix,
            self.nexthop,
            self.policy.as_deref().unwrap_or("dst-ip"),
            self.route_table
        )
    }
    fn spec_key(s: &RouteSpec) -> String {
        format!(
            "{}|{}|{}|{}",
            s.ip_prefix,
            s.nexthop,
            s.policy.as_deref().unwrap_or("dst-ip"),
            s.route_table
        )
    }
    fn build(s: &RouteSpec, ids: BTreeMap<String, String>) -> Self {
        Self {
            ip_prefix: s.ip_prefix.clone(),
            nexthop: s.nexthop.clone(),
            policy: s.policy.clone(),
            route_table: s.route_table.clone(),
            external_ids: ids,
            ..Self::default()
        }
    }
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

impl Owned for Acl {
    type Spec = AclSpec;
    const COLUMN: &'static str = "acls";
    const SYNCED: &'static [&'static str] = &["action", "external_ids"];
    fn key_of(&self) -> String {
        format!("{}|{}|{}", self.direction, self.priority, self.r#match)
    }
    fn spec_key(s: &AclSpec) -> String {
        format!("{}|{}|{}", s.direction, s.priority, s.r#match)
    }
    fn build(s: &AclSpec, ids: BTreeMap<String, String>) -> Self {
        Self {
            direction: s.direction.clone(),
            priority: s.priority,
            r#match: s.r#match.clone(),
            action: s.action.clone(),
            external_ids: ids,
            ..Self::default()
        }
    }
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

fn sync<T: Owned>(
    plan: &mut Plan,
    cache: &DbCache,
    parent: Parent<'_>,
    parent_ref: Option<RowRef>,
    owner: &[(&str, &str)],
    desired: &[T::Spec],
) {
    let (parent_ref, refs, table) = match parent.lookup(cache, T::COLUMN) {
        Some((uuid, refs, table)) => (RowRef::Existing(uuid), refs, table),
        None => match (parent_ref, parent) {
            // A parent created earlier in the same plan has no rows yet.
            (Some(r), Parent::Router(_)) => (r, Vec::new(), LogicalRouter::NAME),
            (Some(r), Parent::Switch(_)) => (r, Vec::new(), LogicalSwitch::NAME),
            (Some(r), Parent::PortGroup(_)) => (r, Vec::new(), PortGroup::NAME),
            (None, _) => return,
        },
    };
    let ids = owned_ids(owner);
    let mut have: BTreeMap<String, T> = BTreeMap::new();
    let mut extra = Vec::new();
    for uuid in &refs {
        let Ok(Some(row)) = cache.get::<T>(uuid) else {
            continue;
        };
        if !is_owned_by(row.ids(), owner) {
            continue;
        }
        match have.entry(row.key_of()) {
            // A duplicate: keep one.
            std::collections::btree_map::Entry::Occupied(_) => extra.push(*uuid),
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(row);
            }
        }
    }
    let mut wanted: BTreeMap<String, &T::Spec> = BTreeMap::new();
    for spec in desired {
        wanted.insert(T::spec_key(spec), spec);
    }
    let mut added = Vec::new();
    for (key, spec) in &wanted {
        let want = T::build(spec, ids.clone());
        match have.get(key) {
            Some(row) => {
                let (a, b) = (row.partial_row(T::SYNCED), want.partial_row(T::SYNCED));
                if a != b {
                    plan.push(Operation::update(T::NAME, vec![Condition::uuid(row.uuid())], b));
                }
            }
            None => added.push(plan.insert(T::NAME, want.to_row())),
        }
    }
    extra.extend(
        have.iter()
            .filter(|(k, _)| !wanted.contains_key(*k))
            .map(|(_, r)| r.uuid()),
    );
    plan.remove_members(table, &parent_ref, T::COLUMN, &extra);
    plan.add_members(table, &parent_ref, T::COLUMN, &refs, &added);
}

/// Makes `owner`'s policies on `router` exactly `desired`.
pub fn sync_policies(
    plan: &mut Plan,
    cache: &DbCache,
    router: &str,
    owner: &[(&str, &str)],
    desired: &[PolicySpec],
) {
    sync::<LogicalRouterPolicy>(plan, cache, Parent::Router(router), None, owner, desired);
}

/// Makes `owner`'s static routes on `router` exactly `desired`.
pub fn sync_routes(
    plan: &mut Plan,
    cache: &DbCache,
    router: &str,
    owner: &[(&str, &str)],
    desired: &[RouteSpec],
) {
    sync::<LogicalRouterStaticRoute>(plan, cache, Parent::Router(router), None, owner, desired);
}

/// Makes `owner`'s ACLs on a switch or port group exactly `desired`; `created` is the parent's
/// reference when this plan creates it.
pub fn sync_acls(
    plan: &mut Plan,
    cache: &DbCache,
    parent: Parent<'_>,
    created: Option<RowRef>,
    owner: &[(&str, &str)],
    desired: &[AclSpec],
) {
    sync::<Acl>(plan, cache, parent, created, owner, desired);
}
