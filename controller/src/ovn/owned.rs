//! Sets of rows an object owns inside a parent row's reference column: router policies and static
//! routes on a router, ACLs on a switch or port group; and root rows an object owns by name
//! (address sets, see [`sync_address_sets`]). A plan makes the owned set equal the desired
//! one: extra rows unreferenced (the server drops them), missing ones inserted, changed ones updated.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use kube_ovn_ovsdb::tables::nb::{
    Acl, AddressSet, LogicalRouter, LogicalRouterPolicy, LogicalRouterStaticRoute, LogicalSwitch, PortGroup,
};
use kube_ovn_ovsdb::{Condition, DbCache, Operation, Table, Uuid};

use super::plan::{Plan, RowRef, is_owned_by, owned_ids};

/// A router policy: Kube-OVN's priorities are 31000 (cluster-internal allow), 30000 (node),
/// 29250 (north gateway), 29000 (gateway reroute); those we write are in [`super::priority`].
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
    /// Route options, e.g. `ecmp_symmetric_reply=true`.
    pub options: BTreeMap<String, String>,
}

/// An ACL. `name`, `log` and `severity` are what Kube-OVN sets on a private subnet's logged
/// default drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclSpec {
    pub direction: String,
    pub priority: i64,
    pub r#match: String,
    pub action: String,
    pub name: Option<String>,
    pub log: bool,
    pub severity: Option<String>,
    /// The meter that limits its log messages.
    pub meter: Option<String>,
    /// ACL options, e.g. `apply-after-lb=true` on a NetworkPolicy's egress rules.
    pub options: BTreeMap<String, String>,
}

impl AclSpec {
    /// An unnamed, unlogged ACL.
    pub fn new(direction: &str, priority: i64, r#match: impl Into<String>, action: &str) -> Self {
        Self {
            direction: direction.into(),
            priority,
            r#match: r#match.into(),
            action: action.into(),
            name: None,
            log: false,
            severity: None,
            meter: None,
            options: BTreeMap::new(),
        }
    }
}

/// The `external_ids` key naming the subnet a row belongs to.
const SUBNET_KEY: &str = "subnet";

/// Which of a parent's rows a plan manages (and so may update or remove).
#[derive(Debug, Clone, Copy)]
pub enum Claim<'a> {
    /// Rows we wrote for one owner: `vendor=kube-ovn` and all these keys in `external_ids`.
    Owner(&'a [(&'a str, &'a str)]),
    /// As `Owner`, but not rows that also carry one of these keys: another owner's mark on a row
    /// that happens to match (Kube-OVN's per-node gateway policies say `node=<node>` as well as
    /// `subnet=<subnet>`, and belong to the subnet).
    OwnerExcept(&'a [(&'a str, &'a str)], &'a [&'a str]),
    /// Every row whose `external_ids` carry none of these keys, ours or not: Kube-OVN owns a
    /// custom VPC's whole router, except the rows other objects (subnets, nodes, gateways) add.
    AllExcept(&'a [&'a str]),
}

impl Claim<'_> {
    fn claims(&self, ids: &BTreeMap<String, String>) -> bool {
        match self {
            Claim::Owner(owner) => is_owned_by(ids, owner),
            Claim::OwnerExcept(owner, foreign) => {
                is_owned_by(ids, owner) && foreign.iter().all(|k| !ids.contains_key(*k))
            }
            Claim::AllExcept(keys) => keys.iter().all(|k| !ids.contains_key(*k)),
        }
    }
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
    type Spec;
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
    const SYNCED: &'static [&'static str] = &["options", "external_ids"];
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
            options: s.options.clone(),
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
    const SYNCED: &'static [&'static str] = &[
        "action",
        "name",
        "log",
        "severity",
        "meter",
        "options",
        "external_ids",
    ];
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
            name: s.name.clone(),
            log: s.log,
            severity: s.severity.clone(),
            meter: s.meter.clone(),
            options: s.options.clone(),
            external_ids: ids,
            ..Self::default()
        }
    }
    fn ids(&self) -> &BTreeMap<String, String> {
        &self.external_ids
    }
}

/// Makes the claimed rows under `parent` exactly `desired`, each with its `external_ids`.
fn sync<T: Owned>(
    plan: &mut Plan,
    cache: &DbCache,
    parent: Parent<'_>,
    parent_ref: Option<RowRef>,
    claim: Claim<'_>,
    desired: &[(&T::Spec, BTreeMap<String, String>)],
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
    let mut have: BTreeMap<String, T> = BTreeMap::new();
    let mut extra = Vec::new();
    for uuid in &refs {
        let Ok(Some(row)) = cache.get::<T>(uuid) else {
            continue;
        };
        if !claim.claims(row.ids()) {
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
    let mut wanted: BTreeMap<String, &(&T::Spec, BTreeMap<String, String>)> = BTreeMap::new();
    for d in desired {
        wanted.insert(T::spec_key(d.0), d);
    }
    let mut added = Vec::new();
    for (key, (spec, ids)) in &wanted {
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
    plan.add_members(table, &parent_ref, T::COLUMN, |u| refs.contains(u), &added);
}

fn with_ids<'s, S>(owner: &[(&str, &str)], desired: &'s [S]) -> Vec<(&'s S, BTreeMap<String, String>)> {
    let ids = owned_ids(owner);
    desired.iter().map(|d| (d, ids.clone())).collect()
}

/// Makes `owner`'s policies on `router` exactly `desired` (all with `owner`'s ids).
pub fn sync_policies(
    plan: &mut Plan,
    cache: &DbCache,
    router: &str,
    owner: &[(&str, &str)],
    desired: &[PolicySpec],
) {
    let desired = with_ids(owner, desired);
    // A subnet's rows are its own even when they also name the caller (a node).
    let claim = if owner.iter().any(|(k, _)| *k == SUBNET_KEY) {
        Claim::Owner(owner)
    } else {
        Claim::OwnerExcept(owner, &[SUBNET_KEY])
    };
    sync::<LogicalRouterPolicy>(plan, cache, Parent::Router(router), None, claim, &desired);
}

/// Makes the `claim`ed policies on `router` exactly `desired`, each with its own `external_ids`
/// (build them with [`owned_ids`]).
/// `created` is the router's reference when this plan creates it.
pub fn sync_policies_claimed(
    plan: &mut Plan,
    cache: &DbCache,
    router: &str,
    created: Option<RowRef>,
    claim: Claim<'_>,
    desired: &[(PolicySpec, BTreeMap<String, String>)],
) {
    let desired: Vec<_> = desired.iter().map(|(s, ids)| (s, ids.clone())).collect();
    sync::<LogicalRouterPolicy>(plan, cache, Parent::Router(router), created, claim, &desired);
}

/// Makes the `claim`ed static routes on `router` exactly `desired`, with `owner`'s ids;
/// `created` is the router's reference when this plan creates it.
pub fn sync_routes(
    plan: &mut Plan,
    cache: &DbCache,
    router: &str,
    created: Option<RowRef>,
    claim: Claim<'_>,
    owner: &[(&str, &str)],
    desired: &[RouteSpec],
) {
    let desired = with_ids(owner, desired);
    sync::<LogicalRouterStaticRoute>(plan, cache, Parent::Router(router), created, claim, &desired);
}

/// Makes the `claim`ed ACLs on a switch or port group exactly `desired`, each with its own
/// `external_ids`; `created` is the parent's reference when this plan creates it.
pub fn sync_acls(
    plan: &mut Plan,
    cache: &DbCache,
    parent: Parent<'_>,
    created: Option<RowRef>,
    claim: Claim<'_>,
    desired: &[(AclSpec, BTreeMap<String, String>)],
) {
    let desired: Vec<_> = desired.iter().map(|(s, ids)| (s, ids.clone())).collect();
    sync::<Acl>(plan, cache, parent, created, claim, &desired);
}

/// Makes the address sets `owner` owns (`vendor=kube-ovn` and `owner`'s keys in `external_ids`)
/// exactly `desired` (name, addresses): missing ones created, addresses brought in line, the
/// owner's other sets deleted (address sets are root rows).
pub fn sync_address_sets(
    plan: &mut Plan,
    cache: &DbCache,
    owner: &[(&str, &str)],
    desired: &[(String, Vec<String>)],
) {
    for (name, addresses) in desired {
        let set = AddressSet {
            name: name.clone(),
            addresses: addresses.clone(),
            external_ids: owned_ids(owner),
            ..Default::default()
        };
        plan.ensure(cache, name, &set, &["addresses", "external_ids"]);
    }
    for (uuid, row) in cache.table(AddressSet::NAME) {
        let Ok(set) = AddressSet::from_row(*uuid, row) else {
            continue;
        };
        if is_owned_by(&set.external_ids, owner) && !desired.iter().any(|(n, _)| *n == set.name) {
            plan.delete(AddressSet::NAME, *uuid);
        }
    }
}
