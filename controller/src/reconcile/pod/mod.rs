//! Pods: subnet choice, an address from IPAM, switch port `<pod>.<ns>`, an IP CR, and the
//! annotation handshake the CNI daemon waits for — `ip_address`, `mac_address`, `cidr`, `gateway`,
//! `logical_switch`, `allocated=true`, then `routed=true` once the port is in its node's port
//! groups. Host-network pods are not ours.
//!
//! ```text
//!   Pod ─▶ validate (request::validate) ─▶ tenancy (tenancy.rs) ─▶ choose the subnet
//!       ─▶ allocate in IPAM (request::allocate) ─▶ plan::plan_pod(pod, subnet, allocation, NB)
//!       ─▶ apply: port rows + IP CR ─▶ free an old subnet's address ─▶ annotations
//! ```
//!
//! This file gathers the inputs and applies; what to write is [`plan`]'s (pure: the port, its
//! switch and port groups, the groups still missing, the annotation patch), what a pod asks IPAM
//! for is [`request`]'s, and what its object says (its key, whether it lives) [`state`]'s.
//!
//! Writes go in an order a crash cannot make unsafe: the address is made durable in the northbound
//! port and the IP CR (written at once; IPAM is rebuilt from either) before the annotations name
//! it; a release removes the port, then the IP CR, then frees the address. Every step checks
//! before it writes, so a run with nothing to do writes nothing. One pod key is handled by one
//! task at a time ([`kube_ovn_support::KeyLocks`]).

pub mod plan;
pub mod request;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{Ip, Subnet};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::IpamError;
use crate::ovn::plan::Plan;
use crate::ovn::topology::remove_switch_port;
use crate::reconcile::binding;
use crate::reconcile::ip::record::{IpRecord, delete_ip, is_reserved, upsert_ip};
use crate::reconcile::node_state::internal_ips;
use crate::reconcile::pod::plan::{PodInput, PodPlan, plan_pod};
use crate::reconcile::pod::request::{
    Cluster, allocate, namespace_pool, static_addresses, underlay_vlan, uses_namespace_pools, validate,
    validate_routes,
};
use crate::reconcile::pod_state::{grace_left, is_alive, port_name};
use crate::reconcile::statefulset;
use crate::reconcile::subnet_spec::effective;
use crate::reconcile::tenancy;

pub const KIND: &str = "Pod";
/// How a pod's subnet was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChosenBy {
    /// By the pod's own annotations (`logical_switch`, a named `ip_pool`): checked by
    /// [`tenancy::check_pod`].
    Pod,
    /// By an IP CR reserved for the pod (a platform object naming the pod): trusted.
    Reservation,
    /// By the namespace's binding.
    Namespace,
}

/// The labels of the pod's namespace, which `namespaceSelectors` match: wait for the cache
/// rather than guess when any subnet selects by label.
fn namespace_labels(ctx: &Context, ns: &str, subnets: &[Arc<Subnet>]) -> Result<BTreeMap<String, String>> {
    match ctx.stores.namespaces.get(&ObjectRef::new(ns)) {
        Some(n) => Ok(n.metadata.labels.clone().unwrap_or_default()),
        None if binding::any_selectors(subnets) => {
            Err(Error::NotReady(format!("namespace {ns} is not in the cache yet")))
        }
        None => Ok(BTreeMap::new()),
    }
}

/// Refuses a pod whose own annotations name a subnet or IP pool its namespace may not use
/// ([`tenancy`]), and checks a subnet the namespace's binding chose against the same rule.
fn admit(ctx: &Context, pod: &Pod, chosen: Option<(&Subnet, ChosenBy)>) -> Result<()> {
    let ns = pod.namespace().unwrap_or_default();
    let subnets = ctx.stores.subnets.state();
    let labels = namespace_labels(ctx, &ns, &subnets)?;
    let (vpcs, pools) = (ctx.stores.vpcs.state(), ctx.stores.ippools.state());
    let platform = tenancy::Platform {
        subnets: &subnets,
        vpcs: &vpcs,
        pools: &pools,
        cluster_router: &ctx.config.cluster_router,
        node_subnet: &ctx.config.node_subnet.name,
        default_subnet: &ctx.config.default_subnet.name,
    };
    let tenant = tenancy::Tenant {
        namespace: &ns,
        labels: &labels,
    };
    let checked = match chosen {
        None => tenancy::check_pod(&platform, &tenant, pod.annotations()),
        Some((subnet, ChosenBy::Namespace)) => tenancy::subnet_admits(&platform, subnet, &tenant)
            .map_err(|refusal| tenancy::Denied { key: None, refusal }),
        Some(_) => Ok(()),
    };
    checked.map_err(|denied| Error::Invalid(format!("pod {ns}/{}: {denied}", pod.name_any())))
}

/// The subnet a pod goes in, in Kube-OVN's order: the pod's `logical_switch`, the subnet of a named
/// `ip_pool`, the subnet of an IP CR reserved for it, then the subnets bound to its namespace (the
/// first with a namespace IP pool that has room, else the first with free addresses or holding
/// the pod's static address), then the default subnet.
fn choose_subnet(ctx: &Context, pod: &Pod) -> Result<(String, ChosenBy)> {
    let ann = pod.metadata.annotations.as_ref();
    if let Some(ls) = ann
        .and_then(|a| a.get(keys::LOGICAL_SWITCH))
        .filter(|s| !s.is_empty())
    {
        return Ok((ls.clone(), ChosenBy::Pod));
    }
    if let Some(kube_ovn_api::annotations::IpPoolAnnotation::Pool(pool)) =
        kube_ovn_api::annotations::get(ann, keys::IP_POOL)?
    {
        let p = ctx
            .stores
            .ippools
            .get(&ObjectRef::new(&pool))
            .ok_or_else(|| Error::NotReady(format!("IP pool {pool} does not exist")))?;
        return p
            .spec
            .subnet
            .clone()
            .map(|s| (s, ChosenBy::Pod))
            .ok_or_else(|| Error::Invalid(format!("IP pool {pool}: spec.subnet is required")));
    }
    if let Some(ip) = ctx.stores.ips.get(&ObjectRef::new(&port_name(pod)))
        && is_reserved(&ip)
        && let Some(s) = ip.spec.subnet.clone().filter(|s| !s.is_empty())
    {
        return Ok((s, ChosenBy::Reservation));
    }
    let ns = pod.namespace().unwrap_or_default();
    let subnets = ctx.stores.subnets.state();
    let labels = namespace_labels(ctx, &ns, &subnets)?;
    let vpcs = ctx.stores.vpcs.state();
    let mut candidates = binding::bound_subnets(&ns, &labels, &subnets, &vpcs, &ctx.config.cluster_router);
    if candidates.is_empty() {
        candidates.push(binding::fallback_subnet(
            &ns,
            &vpcs,
            &ctx.config.default_subnet.name,
        ));
    }
    let pools = ctx.stores.ippools.state();
    if uses_namespace_pools(pod)
        && let Some((subnet, _)) = namespace_pool(&ctx.ipam(), &pools, pod, &candidates)?
    {
        return Ok((subnet, ChosenBy::Namespace));
    }
    let statics = static_addresses(pod);
    let fits = |name: &str| {
        let ipam = ctx.ipam();
        if statics.is_empty() {
            ipam.subnet_has_available(name)
        } else {
            // A static address (excluded ones included) decides the subnet that holds it.
            statics.iter().any(|a| ipam.subnet_of(*a) == Some(name))
        }
    };
    let chosen = candidates.iter().find(|s| fits(s)).unwrap_or(&candidates[0]);
    Ok((chosen.clone(), ChosenBy::Namespace))
}

/// Input a user must fix (reported as a Warning event on the pod), as opposed to a wait.
fn bad_input(e: &Error) -> bool {
    matches!(
        e,
        Error::Annotation(_)
            | Error::Invalid(_)
            | Error::Ipam(
                IpamError::Conflict { .. }
                    | IpamError::OutOfRange { .. }
                    | IpamError::WrongFamily { .. }
                    | IpamError::UnknownPool { .. }
            )
    )
}

/// The annotation whose request IPAM refused: a taken MAC is `mac_address`'s, an address is
/// `ip_address`'s or `ip_pool`'s.
fn requested_by(pod: &Pod, e: &IpamError) -> Option<&'static str> {
    let ann = pod.metadata.annotations.as_ref();
    let has = |key: &str| ann.and_then(|a| a.get(key)).is_some_and(|v| !v.is_empty());
    match e {
        IpamError::Conflict { what, .. } if what.starts_with("MAC ") => Some(keys::MAC_ADDRESS),
        IpamError::Conflict { .. } | IpamError::OutOfRange { .. } | IpamError::WrongFamily { .. } => {
            [keys::IP_ADDRESS, keys::IP_POOL].into_iter().find(|k| has(k))
        }
        IpamError::Exhausted { .. } | IpamError::UnknownPool { .. } => {
            has(keys::IP_POOL).then_some(keys::IP_POOL)
        }
        _ => None,
    }
}

async fn warn(ctx: &Context, pod: &Pod, reason: &str, note: String) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: "Allocate".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// How long a patch of ours may take to come back through the watch before a run goes ahead
/// without it (an echo a relist skipped never comes).
const OWN_WRITE_WAIT: Duration = Duration::from_secs(5);
/// How soon a run that found the cache behind our own patch looks again.
const OWN_WRITE_RECHECK: Duration = Duration::from_millis(50);

pub async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action> {
    if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        return Ok(Action::await_change());
    }
    let key = port_name(&pod);
    let _lock = ctx.pod_locks.lock(&key).await;
    // The copy this run was handed may predate the pod's deletion, and that deletion's release
    // may have run while this waited (for the lock, or at start-up for IPAM): acting on it would
    // write the port, IP CR and address back for a pod that is gone, with nothing left to remove
    // them. The release runs only once the cache has dropped the pod (crate::informer), so
    // under the lock the cache says which pod, if any, is current.
    let Some(pod) = current(&ctx, &pod) else {
        tracing::debug!(pod = %key, "gone since this reconcile was queued; nothing to do");
        return Ok(Action::await_change());
    };
    if !is_alive(&pod) {
        release(&ctx, &pod).await?;
        return Ok(Action::await_change());
    }
    // Another kind's trigger (a subnet's change wakes its unrouted pods) can queue this pod while
    // our own patch of it is on its way back through the watch: the cache's copy lacks what we
    // wrote, and this run would patch the same annotations again. Look again once the echo is in
    // (it reconciles nothing by itself, hence the requeue rather than waiting for a change).
    if ctx.pod_writes.unseen_write(&pod, OWN_WRITE_WAIT) {
        tracing::debug!(pod = %key, "our last patch is not in the cache yet; looking again shortly");
        return Ok(Action::requeue(OWN_WRITE_RECHECK));
    }
    let result = apply(&pod, &ctx, &key).await;
    match &result {
        // Kube-OVN's reasons: IPAM refusing the request, or annotations that do not validate.
        Err(Error::Ipam(e)) if !matches!(e, IpamError::UnknownSubnet(_) | IpamError::InvalidCidr { .. }) => {
            tracing::warn!(pod = %key, error = %e, "pod network not allocated");
            let note = match requested_by(&pod, e) {
                Some(annotation) => format!("annotation {annotation}: {e}"),
                None => e.to_string(),
            };
            warn(&ctx, &pod, "AcquireAddressFailed", note).await;
        }
        Err(e) if bad_input(e) => {
            tracing::warn!(pod = %key, error = %e, "pod network not allocated: bad input");
            warn(&ctx, &pod, "ValidatePodNetworkFailed", e.to_string()).await;
        }
        _ => {}
    }
    let action = result?;
    // A pod being deleted still uses its address until its grace period ends; look again then.
    Ok(grace_left(&pod).map_or(action, |left| Action::requeue(left + Duration::from_millis(100))))
}

/// The cache's copy of `pod`, if the cache still holds that pod (not one of the same name created
/// since: another UID).
fn current(ctx: &Context, pod: &Pod) -> Option<Arc<Pod>> {
    ctx.stores
        .pods
        .get(&ObjectRef::from_obj(pod))
        .filter(|p| p.metadata.uid == pod.metadata.uid)
}

async fn apply(pod: &Pod, ctx: &Context, key: &str) -> Result<Action> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    validate(pod)?;
    // Tenancy first: a refused pod learns nothing about the subnet (not even whether it is
    // ready) and gets nothing.
    admit(ctx, pod, None)?;
    let (subnet_name, chosen) = choose_subnet(ctx, pod)?;
    if subnet_name == ctx.config.node_subnet.name {
        return Err(Error::Invalid(format!(
            "pod {ns}/{name}: subnet {subnet_name} is the node (join) subnet, which pods cannot use"
        )));
    }
    let subnet = ctx
        .stores
        .subnets
        .get(&ObjectRef::new(&subnet_name))
        .ok_or_else(|| Error::Invalid(format!("pod {ns}/{name}: subnet {subnet_name} does not exist")))?;
    admit(ctx, pod, Some((&subnet, chosen)))?;
    if !ctx.ipam().has_subnet(&subnet_name) {
        return Err(Error::NotReady(format!("subnet {subnet_name} is not ready")));
    }
    let eff = effective(&subnet, &ctx.config.cluster_router)?;
    let vlan = underlay_vlan(&ctx.stores.vlans, &subnet_name, &eff)?;
    validate_routes(pod, &subnet_name, &eff.cidrs)?;
    let alloc = {
        let (pools, nodes) = (ctx.stores.ippools.state(), ctx.stores.nodes.state());
        let node_ips: Vec<_> = nodes.iter().flat_map(|n| internal_ips(n)).collect();
        let cluster = Cluster {
            pools: &pools,
            node_ips: &node_ips,
        };
        allocate(&mut ctx.ipam(), &cluster, pod, &subnet_name, key)?
    };
    let input = PodInput {
        pod,
        key,
        subnet: &subnet_name,
        effective: &eff,
        alloc: &alloc,
        cluster_router: &ctx.config.cluster_router,
        vlan: vlan.as_ref().map(|(id, p)| (*id, p.as_str())),
    };
    let PodPlan {
        rows,
        missing_groups: missing,
        annotations,
        removed,
    } = ctx.nb.read(|cache| plan_pod(&input, cache))?;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let pod_type = if statefulset::owner(pod).is_some() {
        "StatefulSet"
    } else {
        ""
    };
    let record = IpRecord {
        name: key,
        pod: &name,
        namespace: &ns,
        subnet: &subnet_name,
        node: &node,
        alloc: &alloc,
        pod_type,
    };
    // The port and the IP CR are independent records of the same allocation (either one is
    // enough for a restarted controller to keep the address), so both are written at once.
    let (port_written, ip_written) = tokio::join!(ctx.nb.apply(rows, "pod"), upsert_ip(ctx, &record));
    port_written.doing(format_args!("write the port of pod {ns}/{name}"))?;
    ip_written?;
    crate::crash_point::reached(crate::crash_point::POD_PORT_WRITTEN);
    // The port no longer names an address the key held in another subnet: free it now.
    let moved = ctx.ipam().release_elsewhere(key, &subnet_name);
    if !moved.is_empty() {
        tracing::info!(pod = %key, subnet = %subnet_name, "moved from another subnet");
    }
    if !annotate(ctx, pod, &annotations, &removed).await? {
        // The pod went while we worked: what we just wrote is the deletion path's to undo, and it
        // may have run before us.
        tracing::info!(pod = %key, "pod deleted during allocation; releasing");
        release(ctx, pod).await?;
        return Ok(Action::await_change());
    }
    // A default-VPC pod's ovn.kubernetes.io/eip and ovn.kubernetes.io/snat (issue 26).
    crate::reconcile::pod_eip::sync(ctx, pod, key, &eff.vpc, &alloc).await?;
    if !missing.is_empty() {
        // The node and subnet reconcilers create these groups; routed=true waits for them.
        return Err(Error::NotReady(format!(
            "port groups {} do not exist yet",
            missing.join(", ")
        )));
    }
    Ok(Action::await_change())
}

/// Merges the plan's annotations into the pod and removes `removed` (nothing to do when there
/// are none). `false` when the pod no longer exists.
async fn annotate(
    ctx: &Context,
    pod: &Pod,
    patch: &BTreeMap<String, String>,
    removed: &[String],
) -> Result<bool> {
    if patch.is_empty() && removed.is_empty() {
        return Ok(true);
    }
    let patch: serde_json::Map<_, _> = patch
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .chain(removed.iter().map(|k| (k.clone(), serde_json::Value::Null)))
        .collect();
    // What the pod will be once the patch is in, so that its echo is told even when the watch
    // brings it before the response does.
    let mut expected = pod.clone();
    let annotations = expected.metadata.annotations.get_or_insert_default();
    for (k, v) in &patch {
        match v.as_str() {
            Some(v) => annotations.insert(k.clone(), v.to_owned()),
            None => annotations.remove(k),
        };
    }
    if annotations.is_empty() {
        // The API server leaves out an emptied map.
        expected.metadata.annotations = None;
    }
    ctx.pod_writes.expect(expected);
    let api: Api<Pod> = Api::namespaced(ctx.kube.clone(), &pod.namespace().unwrap_or_default());
    let written = merge(&api, pod, json!({"metadata": {"annotations": patch}})).await;
    match &written {
        Ok(Some(written)) => ctx.pod_writes.wrote(written),
        // Gone, or the patch failed: nothing of it will come back.
        Ok(None) | Err(_) => ctx.pod_writes.forget(pod),
    }
    written.map(|w| w.is_some())
}

/// A merge patch of the pod's annotations: the pod it made, or `None` when the pod is gone.
async fn merge(api: &Api<Pod>, pod: &Pod, body: serde_json::Value) -> Result<Option<Pod>> {
    match api
        .patch(&pod.name_any(), &PatchParams::default(), &Patch::Merge(body))
        .await
    {
        Ok(written) => Ok(Some(written)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(e).doing(format_args!(
            "patch the annotations of pod {}/{}",
            pod.namespace().unwrap_or_default(),
            pod.name_any()
        )),
    }
}

/// A pod is gone (or finished): its port goes, then its IP CR, then its address — except what is
/// kept for a successor: a StatefulSet's pod's address while the StatefulSet still wants that
/// pod, and an address reserved by a user-created IP CR. The caller holds the pod's key lock.
pub async fn release(ctx: &Context, pod: &Pod) -> Result<Released> {
    let key = port_name(pod);
    let ns = pod.namespace().unwrap_or_default();
    let keep = match statefulset::owner(pod) {
        Some(owner) => statefulset::keeps_address(&ctx.kube, &ns, &pod.name_any(), &owner).await?,
        None => false,
    } || reserved(ctx, &key).await?;
    release_key(ctx, &key, keep).await
}

/// What a release did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub port: bool,
    pub address: bool,
}

/// Releases a pod NIC key: the port always; unless `keep_address`, the IP CR and the address.
/// The caller holds the key's lock.
pub async fn release_key(ctx: &Context, key: &str, keep_address: bool) -> Result<Released> {
    // A write of this key's port that timed out may still be committed by a slow server; the
    // plan below is read from the replica, which must show it first, or the port comes back
    // after the release with nothing left to remove it.
    ctx.nb.barrier().await.doing(format_args!(
        "wait for the northbound server before releasing pod {key}"
    ))?;
    // Its EIP/SNAT rows and reservations go with the pod, whatever happens to its address.
    crate::reconcile::pod_eip::release(ctx, key).await?;
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        remove_switch_port(&mut plan, cache, key);
        plan
    });
    let port = !plan.is_empty();
    ctx.nb
        .apply(plan, "pod-delete")
        .await
        .doing(format_args!("remove the port of pod {key}"))?;
    if port {
        crate::crash_point::reached(crate::crash_point::POD_PORT_REMOVED);
    }
    if keep_address {
        return Ok(Released { port, address: false });
    }
    delete_ip(ctx, key).await?;
    let released = ctx.ipam().release_everywhere(key);
    if !released.is_empty() {
        tracing::info!(pod = %key, "address released");
    }
    Ok(Released {
        port,
        address: !released.is_empty(),
    })
}

/// Whether a user-created IP CR reserves the key's address. The cache is trusted when it holds
/// the IP CR; a miss is confirmed with the API server, since a reservation made just now may not
/// have reached the cache, and deleting it would lose it.
async fn reserved(ctx: &Context, key: &str) -> Result<bool> {
    if let Some(ip) = ctx.stores.ips.get(&ObjectRef::new(key)) {
        return Ok(is_reserved(&ip));
    }
    let api: Api<Ip> = Api::all(ctx.kube.clone());
    let ip = api.get_opt(key).await.doing(format_args!("read IP {key}"))?;
    Ok(ip.is_some_and(|ip| is_reserved(&ip)))
}

/// A pod's deletion arrived (no reconcile follows a deletion): release, unless a pod of the same
/// name exists again by now — that successor owns the key (Kube-OVN checks the same).
pub async fn deleted(ctx: &Context, pod: &Pod) -> Result<()> {
    if pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
        return Ok(());
    }
    let key = port_name(pod);
    let _lock = ctx.pod_locks.lock(&key).await;
    let api: Api<Pod> = Api::namespaced(ctx.kube.clone(), &pod.namespace().unwrap_or_default());
    let successor = api
        .get_opt(&pod.name_any())
        .await
        .doing(format_args!("read pod {key}"))?;
    if let Some(successor) = successor
        && successor.metadata.uid != pod.metadata.uid
    {
        return Ok(());
    }
    release(ctx, pod).await.map(|_| ())
}
