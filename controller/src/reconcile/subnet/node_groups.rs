//! A default-VPC subnet's per-node port groups `<subnet>.<node>` (the distributed gateway's
//! policies match them) and the gateway policies kept while no gateway is fit.
//!
//! Pure: reads the pod cache and the northbound replica, writes into a plan.

use std::collections::BTreeMap;

use kube::Resource;
use kube_ovn_api::annotations::{is_true, keys};
use kube_ovn_api::names;
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, LogicalRouterPolicy, LogicalSwitchPort, PortGroup};
use kube_ovn_ovsdb::{DbCache, Table};

use crate::context::Context;
use crate::ovn::owned::PolicySpec;
use crate::ovn::plan::{Plan, RowRef};
use crate::ovn::priority::POLICY_GATEWAY;
use crate::ovn::topology::{add_to_port_group, ensure_port_group};
use crate::reconcile::pod_state::port_name;

/// The subnet's current gateway policies (priority 29000), to keep while no gateway is fit.
pub fn gateway_policies(
    cache: &DbCache,
    router: &str,
    subnet: &str,
) -> Vec<(PolicySpec, BTreeMap<String, String>)> {
    let Ok(Some(lr)) = cache.by_name::<LogicalRouter>(router) else {
        return Vec::new();
    };
    lr.policies
        .iter()
        .filter_map(|u| cache.get::<LogicalRouterPolicy>(u).ok().flatten())
        .filter(|p| p.priority == POLICY_GATEWAY && p.external_ids.get("subnet").is_some_and(|s| s == subnet))
        .map(|p| {
            let spec = PolicySpec {
                priority: p.priority,
                r#match: p.r#match,
                action: p.action,
                nexthops: p.nexthops,
            };
            (spec, p.external_ids)
        })
        .collect()
}

/// The subnet's pods that have a port, by node (`<pod>.<ns>` port names), from the pod cache.
pub fn pod_ports_by_node(ctx: &Context, subnet: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for pod in ctx.stores.pods.state() {
        let ann = pod.metadata.annotations.as_ref();
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if node.is_empty()
            || pod.meta().deletion_timestamp.is_some()
            || !is_true(ann, keys::ALLOCATED)
            || ann
                .and_then(|a| a.get(keys::LOGICAL_SWITCH))
                .is_none_or(|ls| ls != subnet)
        {
            continue;
        }
        let port = port_name(&pod);
        out.entry(node).or_default().push(port);
    }
    out
}

/// Port groups `<subnet>.<node>` (Kube-OVN's `external_ids`: `subnet`, `node`, `np`): one per
/// node in `nodes`, holding the subnet's pods on that node — pods the subnet had before it became
/// distributed, or that sit in another node's group, are put right; the pod reconciler adds new
/// ones. Groups of other nodes (or all, for a centralized subnet) are removed.
pub fn sync_node_groups(
    plan: &mut Plan,
    cache: &DbCache,
    subnet: &str,
    nodes: &[String],
    members: &BTreeMap<String, Vec<String>>,
) {
    let mut groups: BTreeMap<String, (RowRef, Vec<uuid::Uuid>)> = BTreeMap::new();
    for node in nodes {
        let pg = names::subnet_node_port_group(subnet, node);
        let np = format!("{subnet}/{node}");
        let r = ensure_port_group(
            plan,
            cache,
            &pg,
            &[("subnet", subnet), ("node", node.as_str()), ("np", np.as_str())],
        );
        let ports = cache
            .by_name::<PortGroup>(&pg)
            .ok()
            .flatten()
            .map(|p| p.ports)
            .unwrap_or_default();
        groups.insert(node.clone(), (r, ports));
    }
    for (node, ports) in members {
        let Some((group, _)) = groups.get(node) else {
            continue;
        };
        for port in ports {
            let Some(uuid) = cache
                .uuids_by_name(LogicalSwitchPort::NAME, port)
                .first()
                .copied()
            else {
                continue;
            };
            let pg = names::subnet_node_port_group(subnet, node);
            add_to_port_group(plan, cache, group, &pg, &RowRef::Existing(uuid));
            // Out of the groups of other nodes (a pod that moved keeps its port name).
            for (other, (other_ref, other_ports)) in &groups {
                if other != node && other_ports.contains(&uuid) {
                    plan.remove_members(PortGroup::NAME, other_ref, "ports", &[uuid]);
                }
            }
        }
    }
    remove_stale_node_groups(plan, cache, subnet, nodes);
}

/// Port groups `<subnet>.<node>` of nodes not in `keep`.
pub fn remove_stale_node_groups(plan: &mut Plan, cache: &DbCache, subnet: &str, keep: &[String]) {
    for (uuid, row) in cache.table(PortGroup::NAME) {
        let Ok(pg) = PortGroup::from_row(*uuid, row) else {
            continue;
        };
        let ours = pg.external_ids.get("subnet").is_some_and(|s| s == subnet);
        if ours && pg.external_ids.get("node").is_some_and(|n| !keep.contains(n)) {
            plan.delete(PortGroup::NAME, *uuid);
        }
    }
}
