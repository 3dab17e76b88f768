//! Pods: subnet choice, an address from IPAM, switch port `<pod>.<ns>`, an IP CR, and the
//! annotation handshake the CNI daemon waits for — `ip_address`, `mac_address`, `cidr`, `gateway`,
//! `logical_switch`, `allocated=true`, then `routed=true` once the port is in its node's port group.
//!
//! Writes go in an order a crash cannot make unsafe: the address is durable in the northbound port
//! (which IPAM is rebuilt from) before any annotation names it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::{IpFamily, IpPair, IpPoolAnnotation, MacAddr, get, is_true, keys};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort, PortGroup};
use serde_json::json;

use super::binding;
use super::ip_cr::{IpRecord, delete_ip, upsert_ip};
use super::subnet::{Effective, effective};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ipam::{Allocation, Family, IpamError, Request};
use crate::ovn::plan::{Plan, RowRef, owned_ids};
use crate::ovn::topology::{add_to_port_group, ensure_switch_port, remove_switch_port};

pub const KIND: &str = "Pod";
const PROVIDER: &str = "ovn";

/// The owning StatefulSet's name, when the pod belongs to one (its address survives restarts).
pub fn statefulset_of(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.kind == "StatefulSet")
        .map(|o| o.name.clone())
}

fn port_name(pod: &Pod) -> String {
    names::pod_port_name(&pod.name_any(), &pod.namespace().unwrap_or_default(), PROVIDER)
}

/// The subnet a pod goes in, in Kube-OVN's order: the pod's `logical_switch`, the subnet of a named
/// `ip_pool`, a subnet bound to the namespace (by name, label selector or VPC, see
/// [`binding`]; the first with free addresses), the VPC's or the cluster's default subnet.
fn choose_subnet(ctx: &Context, pod: &Pod) -> Result<String> {
    let ann = pod.metadata.annotations.as_ref();
    if let Some(ls) = ann
        .and_then(|a| a.get(keys::LOGICAL_SWITCH))
        .filter(|s| !s.is_empty())
    {
        return Ok(ls.clone());
    }
    if let Some(IpPoolAnnotation::Pool(pool)) = get::<IpPoolAnnotation>(ann, keys::IP_POOL)? {
        let p = ctx
            .stores
            .ippools
            .get(&ObjectRef::new(&pool))
            .ok_or_else(|| Error::NotReady(format!("IP pool {pool} does not exist")))?;
        return p
            .spec
            .subnet
            .clone()
            .ok_or_else(|| Error::Invalid(format!("IP pool {pool} has no spec.subnet")));
    }
    let ns = pod.namespace().unwrap_or_default();
    let subnets = ctx.stores.subnets.state();
    let labels = match ctx.stores.namespaces.get(&ObjectRef::new(&ns)) {
        Some(n) => n.metadata.labels.clone().unwrap_or_default(),
        // Label selectors need the namespace's labels: wait for the cache rather than guess.
        None if binding::any_selectors(&subnets) => {
            return Err(Error::NotReady(format!("namespace {ns} is not in the cache yet")));
        }
        None => BTreeMap::new(),
    };
    let vpcs = ctx.stores.vpcs.state();
    let bound = binding::bound_subnets(&ns, &labels, &subnets, &vpcs, &ctx.config.cluster_router);
    let ipam = ctx.ipam();
    let free = |s: &str| {
        ipam.subnet_usage(s)
            .is_ok_and(|u| u.v4_available + u.v6_available > 0)
    };
    if let Some(s) = bound.iter().find(|s| free(s)).or(bound.first()) {
        return Ok(s.clone());
    }
    Ok(binding::fallback_subnet(
        &ns,
        &vpcs,
        &ctx.config.default_subnet.name,
    ))
}

/// The IPAM request the pod's annotations make; an address it already holds (annotated by us
/// before) is requested again so a restart never moves it.
fn request_of(ctx: &Context, pod: &Pod, subnet: &str) -> Result<Vec<Request>> {
    let ann = pod.metadata.annotations.as_ref();
    let mac = get::<MacAddr>(ann, keys::MAC_ADDRESS)?;
    let family = get::<IpFamily>(ann, keys::IP_FAMILY)?.map(|f| match f {
        IpFamily::V4 => Family::V4,
        IpFamily::V6 => Family::V6,
    });
    let skip: Vec<IpAddr> = ctx
        .stores
        .nodes
        .state()
        .iter()
        .flat_map(|n| super::node::internal_ips(n))
        .collect();
    let base = Request {
        family,
        mac,
        skip,
        ..Request::default()
    };
    let pinned = |pair: IpPair| Request {
        v4: pair.v4,
        v6: pair.v6,
        ..base.clone()
    };
    if let Some(pair) = get::<IpPair>(ann, keys::IP_ADDRESS)? {
        return Ok(vec![pinned(pair)]);
    }
    match get::<IpPoolAnnotation>(ann, keys::IP_POOL)? {
        Some(IpPoolAnnotation::Pool(pool)) => Ok(vec![Request {
            pool: Some(pool),
            ..base
        }]),
        Some(IpPoolAnnotation::Addresses(list)) => {
            // A StatefulSet pod takes the entry of its ordinal; others the first one free.
            if statefulset_of(pod).is_some()
                && let Some(i) = pod
                    .name_any()
                    .rsplit('-')
                    .next()
                    .and_then(|o| o.parse::<usize>().ok())
            {
                return list.get(i).map(|p| vec![pinned(*p)]).ok_or_else(|| {
                    Error::Invalid(format!(
                        "pod {}: ip_pool has no entry for ordinal {i}",
                        pod.name_any()
                    ))
                });
            }
            Ok(list.into_iter().map(pinned).collect())
        }
        None => {
            let _ = subnet;
            Ok(vec![base])
        }
    }
}

fn allocate(ctx: &Context, pod: &Pod, subnet: &str, key: &str) -> Result<Allocation> {
    let requests = request_of(ctx, pod, subnet)?;
    let mut ipam = ctx.ipam();
    let mut last = None;
    for req in &requests {
        match ipam.allocate(subnet, key, req) {
            Ok(a) => return Ok(a),
            Err(e @ (IpamError::Conflict { .. } | IpamError::Exhausted { .. })) if requests.len() > 1 => {
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(|| Error::Invalid("no address candidates".into()), Error::from))
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

pub async fn reconcile(pod: Arc<Pod>, ctx: Arc<Context>) -> Result<Action> {
    let spec = pod.spec.as_ref();
    if spec.and_then(|s| s.host_network) == Some(true) {
        return Ok(Action::await_change());
    }
    let phase = pod
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default();
    if pod.meta().deletion_timestamp.is_some() || matches!(phase, "Succeeded" | "Failed") {
        release(
            &ctx,
            &pod.namespace().unwrap_or_default(),
            &pod.name_any(),
            statefulset_of(&pod).is_some(),
        )
        .await?;
        return Ok(Action::await_change());
    }
    match apply(&pod, &ctx).await {
        Err(
            e @ (Error::Annotation(_)
            | Error::Invalid(_)
            | Error::Ipam(
                IpamError::Conflict { .. }
                | IpamError::OutOfRange { .. }
                | IpamError::WrongFamily { .. }
                | IpamError::UnknownPool { .. },
            )),
        ) => {
            // Bad input: tell the user on the pod, allocate nothing, and wait for them to fix it.
            warn(&ctx, &pod, "ValidatePodNetworkFailed", e.to_string()).await;
            Err(e)
        }
        other => other,
    }
}

async fn apply(pod: &Pod, ctx: &Context) -> Result<Action> {
    let key = port_name(pod);
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let subnet_name = choose_subnet(ctx, pod)?;
    let subnet = ctx
        .stores
        .subnets
        .get(&ObjectRef::new(&subnet_name))
        .ok_or_else(|| Error::NotReady(format!("subnet {subnet_name} does not exist")))?;
    if !ctx.ipam().has_subnet(&subnet_name) {
        return Err(Error::NotReady(format!("subnet {subnet_name} is not ready")));
    }
    let eff = effective(&subnet, &ctx.config.cluster_router)?;
    let alloc = allocate(ctx, pod, &subnet_name, &key)?;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let distributed_group =
        (eff.vpc == ctx.config.cluster_router && eff.gateway_type == "distributed" && !node.is_empty())
            .then(|| names::subnet_node_port_group(&subnet_name, &node));
    let port_security = is_true(pod.metadata.annotations.as_ref(), keys::PORT_SECURITY);
    let (plan, grouped) = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let ls = cache
            .uuids_by_name(LogicalSwitch::NAME, &subnet_name)
            .first()
            .map(|u| RowRef::Existing(*u))
            .ok_or_else(|| Error::NotReady(format!("logical switch {subnet_name} does not exist yet")))?;
        let addresses = format!(
            "{} {}",
            alloc.mac,
            alloc.addrs().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
        );
        let lsp = LogicalSwitchPort {
            name: key.clone(),
            addresses: vec![addresses.clone()],
            port_security: if port_security { vec![addresses] } else { vec![] },
            external_ids: owned_ids(&[("pod", &format!("{ns}/{name}")), ("ls", subnet_name.as_str())]),
            ..Default::default()
        };
        let port = ensure_switch_port(
            &mut plan,
            cache,
            &ls,
            &subnet_name,
            &lsp,
            &["addresses", "port_security", "external_ids"],
        );
        let mut grouped = distributed_group.is_none();
        if let Some(pg) = &distributed_group
            && let Some(u) = cache.uuids_by_name(PortGroup::NAME, pg).first()
        {
            add_to_port_group(&mut plan, cache, &RowRef::Existing(*u), pg, &port);
            grouped = true;
        }
        Ok::<_, Error>((plan, grouped))
    })?;
    ctx.nb.apply(plan, "pod").await?;
    let pod_type = if statefulset_of(pod).is_some() {
        "StatefulSet"
    } else {
        ""
    };
    upsert_ip(
        ctx,
        &IpRecord {
            name: &key,
            pod: &name,
            namespace: &ns,
            subnet: &subnet_name,
            node: &node,
            alloc: &alloc,
            pod_type,
        },
    )
    .await?;
    annotate(ctx, pod, &eff, &subnet_name, &alloc, grouped).await?;
    if !grouped {
        // The subnet reconciler creates the node's port group; routed=true waits for it.
        return Err(Error::NotReady(format!(
            "port group {} does not exist yet",
            distributed_group.unwrap_or_default()
        )));
    }
    Ok(Action::await_change())
}

/// The handshake annotations: first everything but `routed`, then `routed=true` once the port
/// is in place (two patches, so a daemon never sees `routed` without an address).
async fn annotate(
    ctx: &Context,
    pod: &Pod,
    eff: &Effective,
    subnet: &str,
    alloc: &Allocation,
    routed: bool,
) -> Result<()> {
    let ips = alloc.addrs().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    let cidrs = eff
        .cidrs
        .iter()
        .filter(|c| alloc.addrs().any(|a| c.contains(&a)))
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let gws = eff
        .gateways
        .iter()
        .filter(|g| alloc.addrs().any(|a| a.is_ipv4() == g.is_ipv4()))
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let want: BTreeMap<&str, String> = BTreeMap::from([
        (keys::IP_ADDRESS, ips),
        (keys::MAC_ADDRESS, alloc.mac.to_string()),
        (keys::CIDR, cidrs),
        (keys::GATEWAY, gws),
        (keys::LOGICAL_SWITCH, subnet.to_owned()),
        (keys::LOGICAL_ROUTER, eff.vpc.clone()),
        (keys::ALLOCATED, "true".into()),
    ]);
    let have = pod.metadata.annotations.clone().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(ctx.kube.clone(), &pod.namespace().unwrap_or_default());
    if !want.iter().all(|(k, v)| have.get(*k) == Some(v)) {
        api.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": want}})),
        )
        .await?;
    }
    if routed && have.get(keys::ROUTED).map(String::as_str) != Some("true") {
        api.patch(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {keys::ROUTED: "true"}}})),
        )
        .await?;
    }
    Ok(())
}

/// A pod is gone (or finished): its port and IP CR go and IPAM releases its address — unless it
/// belongs to a StatefulSet, whose next pod of the same name keeps the address (Kube-OVN).
pub async fn release(ctx: &Context, namespace: &str, name: &str, statefulset: bool) -> Result<()> {
    let key = names::pod_port_name(name, namespace, PROVIDER);
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        remove_switch_port(&mut plan, cache, &key);
        plan
    });
    ctx.nb.apply(plan, "pod-delete").await?;
    if statefulset {
        return Ok(());
    }
    delete_ip(ctx, &key).await?;
    ctx.ipam().release_everywhere(&key);
    Ok(())
}
