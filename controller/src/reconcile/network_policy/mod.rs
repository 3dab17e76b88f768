//! NetworkPolicies: each policy's port group, address sets and ACLs in the northbound DB, planned
//! by [`plan`] from the policy and the pod and namespace caches, then
//! written in one transaction.
//!
//! ```text
//!   NetworkPolicy ◀─ its own changes; a pod's labels, addresses, port or phase → the policies
//!                    of its namespace and those selecting namespaces; a namespace's labels →
//!                    those selecting namespaces; a policy coming or going → the others of its
//!                    Kube-OVN port group name (names.rs)
//!   deletion      ─▶ its port group (with its ACLs) and address sets go (watch_deletions)
//!   start         ─▶ rows of policies that no longer exist go (collect_orphans)
//! ```
//!
//! A policy the planner refuses (a malformed `ipBlock`, a bad selector) gets a Warning event
//! naming the field, and its rows stay as they were: validate, then apply.
//!
//! A row is a policy's only when its `external_ids:np` says so: a policy never writes into a
//! port group or address set of another's (it waits, see [`names`]), and deleting
//! it deletes only its own. Pods' addresses come from their switch ports (what the controller
//! allocated), not from their annotations.

pub mod names;
pub mod plan;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::Controller;
use kube::runtime::controller::{self, Action};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use kube_ovn_ovsdb::tables::nb::{AddressSet, LogicalSwitchPort, Meter, MeterBand, PortGroup};
use kube_ovn_ovsdb::{Condition, DbCache, Operation, Table, Uuid, Value};

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::informer::Changes;
use crate::ovn::owned::{Claim, Parent, sync_acls};
use crate::ovn::plan::{Plan, RowRef, owned_ids};
use crate::reconcile::all_refs;
use crate::reconcile::network_policy::plan::{Families, PolicyRows, World, plan_policy, port_ips};
use crate::stores::{Informers, Stores};

pub const KIND: &str = "NetworkPolicy";

/// The `external_ids` key marking a policy's rows: `<ns>/<np>` (port group, ACLs) and
/// `<ns>/<np>/<direction>` (address sets), as Kube-OVN writes them.
const NP_KEY: &str = "np";

fn families(ctx: &Context) -> Families {
    let cidrs = &ctx.config.default_subnet.cidrs;
    Families {
        v4: cidrs.iter().any(|c| c.addr().is_ipv4()),
        v6: cidrs.iter().any(|c| c.addr().is_ipv6()),
    }
}

/// Kube-OVN's per-policy `network_policy_enforcement: lax` annotation. (Kube-OVN's cluster-wide
/// default, `--np-enforcement`, is not implemented here: every other policy is `standard`.)
fn lax(np: &NetworkPolicy) -> bool {
    np.annotations()
        .get(keys::NETWORK_POLICY_ENFORCEMENT)
        .is_some_and(|v| v == "lax")
}

pub async fn reconcile(np: Arc<NetworkPolicy>, ctx: Arc<Context>) -> Result<Action> {
    if !ctx.config.enable_np || np.metadata.deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let pods = ctx.stores.pods.state();
    let namespaces = ctx.stores.namespaces.state();
    let policies = ctx.stores.network_policies.state();
    // Planned against the northbound cache: the pods' addresses are their ports'.
    let planned = ctx.nb.read(|cache| {
        let addresses = |p: &Pod| allocated(cache, p);
        let world = World {
            pods: &pods,
            namespaces: &namespaces,
            policies: &policies,
            addresses: &addresses,
            families: families(&ctx),
        };
        plan_policy(&np, &world, lax(&np)).map(|rows| {
            let plan = write_plan(cache, &rows);
            (rows, plan)
        })
    });
    let (rows, plan) = match planned {
        Ok(planned) => planned,
        Err(e) => {
            let note = format!(
                "networkpolicy {}/{}: {e}",
                np.namespace().unwrap_or_default(),
                np.name_any()
            );
            warn(&ctx, &np, note.clone()).await;
            return Err(Error::Invalid(note));
        }
    };
    let plan = plan.map_err(Error::NotReady)?;
    if plan.is_empty() {
        return Ok(Action::await_change());
    }
    ctx.nb
        .apply(plan, "network policy")
        .await
        .doing(format_args!("write the rows of networkpolicy {}", rows.key))?;
    Ok(Action::await_change())
}

async fn warn(ctx: &Context, np: &NetworkPolicy, note: String) {
    let event = Event {
        type_: EventType::Warning,
        reason: "InvalidNetworkPolicy".into(),
        note: Some(note),
        action: "Plan".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &np.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// The addresses the controller allocated to a pod: those of its switch port, when the port is
/// the pod's (`external_ids:pod`; a port of an earlier pod of the same name is not).
fn allocated(cache: &DbCache, pod: &Pod) -> Vec<std::net::IpAddr> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let port = kube_ovn_api::names::pod_port_name(&name, &ns, "ovn");
    let Some(lsp) = cache.by_name::<LogicalSwitchPort>(&port).ok().flatten() else {
        return Vec::new();
    };
    if lsp.external_ids.get("pod").map(String::as_str) != Some(&format!("{ns}/{name}")) {
        return Vec::new();
    }
    port_ips(lsp.addresses.iter().map(String::as_str))
}

/// Which policy a row belongs to, when it is a policy's (`external_ids:np`, vendor kube-ovn).
fn np_owner(ids: &std::collections::BTreeMap<String, String>) -> Option<&str> {
    (ids.get("vendor").map(String::as_str) == Some("kube-ovn") && !ids.contains_key("node"))
        .then(|| ids.get(NP_KEY).map(String::as_str))
        .flatten()
}

/// Refuses to write when a row of `rows`' names belongs to another policy: that one's until it
/// moves to its own name or goes ([`names`]); `Err` says whose.
fn check_names(cache: &DbCache, rows: &PolicyRows) -> std::result::Result<(), String> {
    let key = rows.key.as_str();
    if let Some(pg) = cache.by_name::<PortGroup>(&rows.port_group).ok().flatten()
        && let Some(owner) = np_owner(&pg.external_ids)
        && owner != key
    {
        return Err(format!(
            "port group {} belongs to networkpolicy {owner}; networkpolicy {key} waits for it to go",
            rows.port_group
        ));
    }
    for set in &rows.address_sets {
        if let Some(s) = cache.by_name::<AddressSet>(&set.name).ok().flatten()
            && let Some(owner) = np_owner(&s.external_ids)
            && owner.rsplit_once('/').map(|(k, _)| k) != Some(key)
        {
            return Err(format!(
                "address set {} belongs to networkpolicy {owner}; networkpolicy {key} waits for it to go",
                set.name
            ));
        }
    }
    Ok(())
}

/// The operations that make the northbound rows of one policy equal `rows`, or `Err` when a
/// row of its names is another policy's. Pure: reads the cache.
pub fn write_plan(cache: &DbCache, rows: &PolicyRows) -> std::result::Result<Plan, String> {
    check_names(cache, rows)?;
    let mut plan = Plan::new();
    let key = rows.key.as_str();
    // Its groups of another name (it was renamed, `names`) go, with their ACLs.
    for (uuid, _) in cache.table(PortGroup::NAME) {
        if let Some(pg) = cache.get::<PortGroup>(uuid).ok().flatten()
            && np_owner(&pg.external_ids) == Some(key)
            && pg.name != rows.port_group
        {
            plan.delete(PortGroup::NAME, pg.uuid);
        }
    }
    let pg = PortGroup {
        name: rows.port_group.clone(),
        external_ids: owned_ids(&[(NP_KEY, key)]),
        ..Default::default()
    };
    let existing = cache.by_name::<PortGroup>(&rows.port_group).ok().flatten();
    let pg_ref = plan.ensure(cache, &rows.port_group, &pg, &["external_ids"]);
    // Ports: exactly the selected pods' ports that exist (a pod whose port is not written yet
    // comes in when its addresses are, which triggers the policy again).
    let want: BTreeSet<Uuid> = rows
        .ports
        .iter()
        .filter_map(|p| cache.uuids_by_name(LogicalSwitchPort::NAME, p).first().copied())
        .collect();
    let have: BTreeSet<Uuid> = existing
        .as_ref()
        .map(|p| p.ports.iter().copied().collect())
        .unwrap_or_default();
    let gone: Vec<Uuid> = have.difference(&want).copied().collect();
    let new: Vec<RowRef> = want.difference(&have).map(|u| RowRef::Existing(*u)).collect();
    plan.remove_members(PortGroup::NAME, &pg_ref, "ports", &gone);
    plan.add_members(PortGroup::NAME, &pg_ref, "ports", |u| have.contains(u), &new);

    let mut wanted_sets = BTreeSet::new();
    for set in &rows.address_sets {
        wanted_sets.insert(set.name.clone());
        let row = AddressSet {
            name: set.name.clone(),
            addresses: set.addresses.iter().cloned().collect(),
            external_ids: owned_ids(&[(NP_KEY, &format!("{key}/{}", set.direction))]),
            ..Default::default()
        };
        plan.ensure(cache, &set.name, &row, &["addresses", "external_ids"]);
    }
    for (uuid, name) in owned_sets(cache, key) {
        if !wanted_sets.contains(&name) {
            plan.delete(AddressSet::NAME, uuid);
        }
    }
    meters(&mut plan, cache, rows);
    let ids = owned_ids(&[(NP_KEY, key)]);
    let acls: Vec<_> = rows.acls.iter().map(|a| (a.clone(), ids.clone())).collect();
    let created = existing.is_none().then_some(pg_ref);
    sync_acls(
        &mut plan,
        cache,
        Parent::PortGroup(&rows.port_group),
        created,
        Claim::Owner(&[(NP_KEY, key)]),
        &acls,
    );
    Ok(plan)
}

/// The policy's log meters (one `drop` band each, in packets per second), and none of its others.
fn meters(plan: &mut Plan, cache: &DbCache, rows: &PolicyRows) {
    for (name, rate) in &rows.meters {
        if let Some(meter) = cache.by_name::<Meter>(name).ok().flatten() {
            for band in &meter.bands {
                let Some(b) = cache.get::<MeterBand>(band).ok().flatten() else {
                    continue;
                };
                if b.rate != *rate {
                    let want = MeterBand {
                        rate: *rate,
                        ..Default::default()
                    };
                    plan.push(Operation::update(
                        MeterBand::NAME,
                        vec![Condition::uuid(*band)],
                        want.partial_row(&["rate"]),
                    ));
                }
            }
        } else {
            let band = MeterBand {
                action: "drop".into(),
                rate: *rate,
                ..Default::default()
            };
            let band = plan.insert(MeterBand::NAME, band.to_row());
            let meter = Meter {
                name: name.clone(),
                unit: "pktps".into(),
                external_ids: owned_ids(&[(NP_KEY, &rows.key)]),
                ..Default::default()
            };
            let mut row = meter.to_row();
            row.insert("bands".into(), Value::Set(std::iter::once(band.atom()).collect()));
            plan.insert(Meter::NAME, row);
        }
    }
    for uuid in owned_meters(cache, &rows.key) {
        let name = cache.get::<Meter>(&uuid).ok().flatten().map(|m| m.name);
        if !rows.meters.iter().any(|(n, _)| Some(n) == name.as_ref()) {
            plan.delete(Meter::NAME, uuid);
        }
    }
}

fn owned_meters(cache: &DbCache, key: &str) -> Vec<Uuid> {
    cache
        .table(Meter::NAME)
        .filter_map(|(uuid, _)| cache.get::<Meter>(uuid).ok().flatten())
        .filter(|m| {
            m.external_ids.get("vendor").map(String::as_str) == Some("kube-ovn")
                && m.external_ids.get(NP_KEY).map(String::as_str) == Some(key)
        })
        .map(|m| m.uuid)
        .collect()
}

/// The address sets a policy (`<ns>/<np>`) owns: `np=<ns>/<np>/<direction>`.
fn owned_sets(cache: &DbCache, key: &str) -> Vec<(Uuid, String)> {
    let prefix = format!("{key}/");
    cache
        .table(AddressSet::NAME)
        .filter_map(|(uuid, _)| cache.get::<AddressSet>(uuid).ok().flatten())
        .filter(|s| {
            s.external_ids.get("vendor").map(String::as_str) == Some("kube-ovn")
                && s.external_ids.get(NP_KEY).is_some_and(|v| v.starts_with(&prefix))
        })
        .map(|s| (s.uuid, s.name))
        .collect()
}

/// Removes everything policy `<ns>/<np>` wrote (its port group takes its ACLs with it), and
/// nothing else: a row is the policy's only when its `external_ids` say so.
pub fn delete_plan(cache: &DbCache, key: &str) -> Plan {
    let mut plan = Plan::new();
    for (uuid, _) in cache.table(PortGroup::NAME) {
        let Some(pg) = cache.get::<PortGroup>(uuid).ok().flatten() else {
            continue;
        };
        if pg.external_ids.get(NP_KEY).map(String::as_str) == Some(key)
            && pg.external_ids.get("vendor").map(String::as_str) == Some("kube-ovn")
            && !pg.external_ids.contains_key("node")
        {
            plan.delete(PortGroup::NAME, pg.uuid);
        }
    }
    for (uuid, _) in owned_sets(cache, key) {
        plan.delete(AddressSet::NAME, uuid);
    }
    for uuid in owned_meters(cache, key) {
        plan.delete(Meter::NAME, uuid);
    }
    plan
}

/// The policies (`<ns>/<np>`) that have rows in the northbound DB.
fn policies_with_rows(cache: &DbCache) -> BTreeSet<String> {
    cache
        .table(PortGroup::NAME)
        .filter_map(|(uuid, _)| cache.get::<PortGroup>(uuid).ok().flatten())
        .filter(|pg| {
            pg.external_ids.get("vendor").map(String::as_str) == Some("kube-ovn")
                && !pg.external_ids.contains_key("node")
        })
        .filter_map(|pg| pg.external_ids.get(NP_KEY).cloned())
        .collect()
}

async fn remove(ctx: &Context, key: &str) -> Result<()> {
    let plan = ctx.nb.read(|cache| delete_plan(cache, key));
    if plan.is_empty() {
        return Ok(());
    }
    ctx.nb
        .apply(plan, "network policy")
        .await
        .doing(format_args!("remove the rows of networkpolicy {key}"))?;
    Ok(())
}

/// Rows of policies deleted while no controller watched (or all of them with `--enable-np=false`).
pub async fn collect_orphans(ctx: &Context) -> Result<()> {
    let live: BTreeSet<String> = if ctx.config.enable_np {
        ctx.stores
            .network_policies
            .state()
            .iter()
            .map(|np| format!("{}/{}", np.namespace().unwrap_or_default(), np.name_any()))
            .collect()
    } else {
        BTreeSet::new()
    };
    let orphans: Vec<String> = ctx
        .nb
        .read(policies_with_rows)
        .into_iter()
        .filter(|k| !live.contains(k))
        .collect();
    for key in orphans {
        tracing::info!(policy = %key, "removing the rows of a networkpolicy that is gone");
        remove(ctx, &key).await?;
    }
    Ok(())
}

/// Removes a policy's rows when it is deleted; after a lag, every orphan.
pub async fn watch_deletions(ctx: Arc<Context>, changes: Changes<NetworkPolicy>) {
    let gone = changes.map(
        |c| {
            c.deleted().map(|np| {
                Some(format!(
                    "{}/{}",
                    np.namespace().unwrap_or_default(),
                    np.name_any()
                ))
            })
        },
        || Some(None),
    );
    let mut backoff = Duration::from_millis(100);
    while let Err(e) = collect_orphans(&ctx).await {
        tracing::warn!(error = %e, "removing the rows of deleted networkpolicies failed; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
    gone.for_each_concurrent(16, |key| {
        let ctx = ctx.clone();
        async move {
            let mut backoff = Duration::from_millis(100);
            loop {
                let r = match &key {
                    Some(k) => remove(&ctx, k).await,
                    None => collect_orphans(&ctx).await,
                };
                match r {
                    Ok(()) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "removing the rows of a deleted networkpolicy failed; retrying");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                    }
                }
            }
        }
    })
    .await;
}

/// The policies a pod's change concerns: those of its namespace, and those selecting namespaces.
pub fn policies_for_pod(policies: &[Arc<NetworkPolicy>], namespace: &str) -> Vec<ObjectRef<NetworkPolicy>> {
    policies
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace) || plan::selects_namespaces(p))
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// The policies a namespace's label change concerns.
pub fn policies_for_namespace(policies: &[Arc<NetworkPolicy>]) -> Vec<ObjectRef<NetworkPolicy>> {
    policies
        .iter()
        .filter(|p| plan::selects_namespaces(p))
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// What of a pod the planner reads: labels, addresses, phase, deletion; and `routed`, which the
/// controller writes once the pod's port (whose addresses the planner reads) is there.
fn pod_differs(a: &Pod, b: &Pod) -> bool {
    let ann = |p: &Pod, k: &str| p.annotations().get(k).cloned();
    a.labels() != b.labels()
        || ann(a, keys::IP_ADDRESS) != ann(b, keys::IP_ADDRESS)
        || ann(a, keys::ROUTED) != ann(b, keys::ROUTED)
        || a.status.as_ref().and_then(|s| s.phase.clone()) != b.status.as_ref().and_then(|s| s.phase.clone())
        || a.metadata.deletion_timestamp != b.metadata.deletion_timestamp
}

fn namespace_differs(a: &Namespace, b: &Namespace) -> bool {
    a.labels() != b.labels()
}

fn policy_differs(a: &NetworkPolicy, b: &NetworkPolicy) -> bool {
    a.spec != b.spec || a.annotations() != b.annotations() || a.metadata.uid != b.metadata.uid
}

/// The policy controller over the shared watches, re-run by the pod and namespace changes that
/// concern a policy.
pub fn controller(informers: &Informers, stores: &Stores, workers: u16) -> Controller<NetworkPolicy> {
    let (by_pod, all_pod) = (stores.network_policies.clone(), stores.network_policies.clone());
    let (by_ns, all_ns) = (stores.network_policies.clone(), stores.network_policies.clone());
    let by_name = stores.network_policies.clone();
    Controller::for_shared_stream(
        informers.network_policies.changes().objects(policy_differs),
        informers.network_policies.cache().store(),
    )
    .with_config(controller::Config::default().concurrency(workers))
    .reconcile_on(informers.pods.changes().when(
        pod_differs,
        move |c| {
            let ns = c
                .new
                .as_ref()
                .or(c.old.as_ref())
                .and_then(|p| p.namespace())
                .unwrap_or_default();
            policies_for_pod(&by_pod.state(), &ns)
        },
        move || all_refs(&all_pod),
    ))
    .reconcile_on(informers.namespaces.changes().when(
        namespace_differs,
        move |_| policies_for_namespace(&by_ns.state()),
        move || all_refs(&all_ns),
    ))
    .reconcile_on(informers.network_policies.changes().when(
        // Only a policy coming or going changes who has a name.
        |_, _| false,
        move |c| {
            let Some(np) = c.new.as_ref().or(c.old.as_ref()) else {
                return Vec::new();
            };
            names::twins_of(np, &by_name.state())
                .iter()
                .map(|p| ObjectRef::from_obj(&**p))
                .collect()
        },
        Vec::new,
    ))
}
