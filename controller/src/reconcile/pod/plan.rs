//! A pod's plan: from the pod, its effective subnet, its allocation and the northbound replica,
//! what the reconciler writes — the switch port `<pod>.<ns>` and its memberships, the port groups
//! it waits for, and the annotations it merges into the pod.
//!
//! Pure: no I/O, no clock, no context. [`crate::reconcile::pod`] gathers the inputs, calls [`plan_pod`] and
//! applies the result in a crash-safe order.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube_ovn_api::annotations::{is_true, keys};
use kube_ovn_api::names;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort, PortGroup};
use kube_ovn_ovsdb::{Atom, DbCache, Table, Uuid, Value};

use super::request::{handshake, with_underlay};
use crate::error::{Error, Result};
use crate::ipam::Allocation;
use crate::ovn::plan::{Plan, RowRef, owned_ids};
use crate::ovn::topology::{add_to_port_group, ensure_switch_port};
use crate::reconcile::subnet_spec::Effective;

/// What a pod's plan reads besides the northbound replica.
#[derive(Debug, Clone, Copy)]
pub struct PodInput<'a> {
    pub pod: &'a Pod,
    /// The pod's NIC key `<pod>.<ns>`: its switch port's name.
    pub key: &'a str,
    /// The subnet chosen for the pod, whose switch the port joins.
    pub subnet: &'a str,
    pub effective: &'a Effective,
    /// The addresses and MAC IPAM gave the pod.
    pub alloc: &'a Allocation,
    /// The default VPC's router (`--cluster-router`): only its pods join the node port groups.
    pub cluster_router: &'a str,
    /// An underlay subnet's Vlan ID and ProviderNetwork.
    pub vlan: Option<(u16, &'a str)>,
}

/// What the reconciler writes for a pod.
#[derive(Debug, Default)]
pub struct PodPlan {
    /// The northbound operations: the port as wanted, a member of its switch and port groups, out
    /// of other switches and other nodes' groups. Empty when the replica already matches.
    pub rows: Plan,
    /// The port groups the port belongs in that do not exist yet (the node and subnet
    /// reconcilers create them); `routed=true` waits for them.
    pub missing_groups: Vec<String>,
    /// The annotations to merge into the pod, in one patch; empty when it carries them already.
    pub annotations: BTreeMap<String, String>,
    /// Handshake annotations the pod carries that its subnet does not give it (see
    /// [`stale_annotations`]): removed in the same patch.
    pub removed: Vec<String>,
}

/// The underlay handshake keys the controller writes only for some subnets: `logical_router`
/// (not for a subnet whose gateway is the physical router), `vlan_id` and `provider_network`
/// (only for an underlay subnet). A pod that carries one its subnet does not give — written by
/// its tenant, or left from before the subnet changed — has it removed: other components read
/// them (a Service's VPC comes from its pods' `logical_router`), and before the underlay every
/// pod's `logical_router` was rewritten by the handshake, so a forged one did not last.
pub fn stale_annotations(pod: &Pod, want: &BTreeMap<String, String>) -> Vec<String> {
    let have = pod.metadata.annotations.as_ref();
    [keys::LOGICAL_ROUTER, keys::VLAN_ID, keys::PROVIDER_NETWORK]
        .into_iter()
        .filter(|k| !want.contains_key(*k) && have.is_some_and(|h| h.contains_key(*k)))
        .map(str::to_owned)
        .collect()
}

/// The plan for `input`'s pod against `cache`. Not ready while the subnet's switch is missing.
pub fn plan_pod(input: &PodInput<'_>, cache: &DbCache) -> Result<PodPlan> {
    let PodInput {
        pod,
        key,
        subnet,
        effective: eff,
        alloc,
        cluster_router,
        vlan,
    } = *input;
    let node = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    let groups = port_groups(eff, subnet, &node, cluster_router);
    let ls = cache
        .uuids_by_name(LogicalSwitch::NAME, subnet)
        .first()
        .map(|u| RowRef::Existing(*u))
        .ok_or_else(|| Error::NotReady(format!("logical switch {subnet} does not exist yet")))?;
    let mut rows = Plan::new();
    let port = ensure_switch_port(
        &mut rows,
        cache,
        &ls,
        subnet,
        &switch_port(pod, key, subnet, alloc),
        &["addresses", "port_security", "external_ids"],
    );
    if let Some(existing) = port.existing() {
        // Moved to another subnet (as Kube-OVN, in the same transaction) or another node (a
        // StatefulSet pod's successor): out of the old switch and the old node's groups.
        leave_others(&mut rows, cache, existing, subnet, &node);
    }
    let mut missing_groups = Vec::new();
    for pg in &groups {
        match cache.uuids_by_name(PortGroup::NAME, pg).first() {
            Some(u) => add_to_port_group(&mut rows, cache, &RowRef::Existing(*u), pg, &port),
            None => missing_groups.push(pg.clone()),
        }
    }
    // A U2O subnet without load balancing: the node's group `<subnet>.<node>` the subnet
    // reconciler keeps (`u2o=true`), whose reroutes send the pod's Service traffic to its node.
    // Not waited for: the subnet reconciler puts the pods in when it creates it.
    if eff.u2o() && !node.is_empty() {
        let pg = names::subnet_node_port_group(subnet, &node);
        let u2o_group = cache
            .by_name::<PortGroup>(&pg)
            .ok()
            .flatten()
            .filter(|g| g.external_ids.get("u2o").is_some_and(|v| v == "true"));
        if let Some(g) = u2o_group {
            add_to_port_group(&mut rows, cache, &RowRef::Existing(g.uuid), &pg, &port);
        }
    }
    let want = with_underlay(
        handshake(subnet, &eff.vpc, &eff.cidrs, &eff.gateways, alloc),
        eff,
        vlan,
    );
    let routed = missing_groups.is_empty() && !node.is_empty();
    Ok(PodPlan {
        rows,
        missing_groups,
        annotations: annotation_patch(pod, &want, routed),
        removed: stale_annotations(pod, &want),
    })
}

/// Kube-OVN's routing step: a default-VPC pod joins its node's port group `node.<node>` (the
/// node-to-pod allow ACLs) and, on a distributed subnet, `<subnet>.<node>` (the gateway policy;
/// none for an underlay subnet whose gateway is the physical router).
fn port_groups(eff: &Effective, subnet: &str, node: &str, cluster_router: &str) -> Vec<String> {
    let mut groups = Vec::new();
    if eff.vpc == cluster_router && !node.is_empty() {
        groups.push(names::node_port_group(node));
        if eff.gateway_type == "distributed" && !eff.physical_gateway() {
            groups.push(names::subnet_node_port_group(subnet, node));
        }
    }
    groups
}

/// The pod's switch port: its MAC and addresses, the same as port security when the pod asks for
/// it (`port_security=true`), and the pod and switch it belongs to.
fn switch_port(pod: &Pod, key: &str, subnet: &str, alloc: &Allocation) -> LogicalSwitchPort {
    let port_security = is_true(pod.metadata.annotations.as_ref(), keys::PORT_SECURITY);
    let addresses = format!(
        "{} {}",
        alloc.mac,
        alloc.addrs().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
    );
    let owner = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    LogicalSwitchPort {
        name: key.to_owned(),
        addresses: vec![addresses.clone()],
        port_security: if port_security { vec![addresses] } else { vec![] },
        external_ids: owned_ids(&[("pod", &owner), ("ls", subnet)]),
        ..Default::default()
    }
}

/// Removes the port from switches other than `subnet`'s and from other nodes' port groups.
fn leave_others(plan: &mut Plan, cache: &DbCache, port: Uuid, subnet: &str, node: &str) {
    let holds = |row: &kube_ovn_ovsdb::Row| matches!(row.get("ports"), Some(Value::Set(s)) if s.contains(&Atom::Uuid(port)));
    for (uuid, row) in cache.table(LogicalSwitch::NAME) {
        let other = kube_ovn_ovsdb::index::row_name(row).is_some_and(|n| n != subnet);
        if other && holds(row) {
            plan.remove_members(LogicalSwitch::NAME, &RowRef::Existing(*uuid), "ports", &[port]);
        }
    }
    for (uuid, row) in cache.table(PortGroup::NAME) {
        if !holds(row) {
            continue;
        }
        // Read from the row as it is: decoding the group would copy all its ports.
        let other_node = match row.get("external_ids") {
            Some(Value::Map(ids)) => ids
                .get(&Atom::from("node"))
                .is_some_and(|n| *n != Atom::from(node)),
            _ => false,
        };
        if other_node {
            plan.remove_members(PortGroup::NAME, &RowRef::Existing(*uuid), "ports", &[port]);
        }
    }
}

/// The handshake patch: everything but `routed` (`want`), and `routed=true` once the port is in
/// its groups — in one patch when both are due (a daemon then sees the address and `routed`
/// together), else in order, so a daemon never sees `routed` without an address. Only what the
/// pod does not carry yet: empty when it has it all.
fn annotation_patch(pod: &Pod, want: &BTreeMap<String, String>, routed: bool) -> BTreeMap<String, String> {
    let have = pod.metadata.annotations.as_ref();
    let addressed = want.iter().all(|(k, v)| have.and_then(|h| h.get(k)) == Some(v));
    let route = routed && !is_true(have, keys::ROUTED);
    let mut patch = if addressed { BTreeMap::new() } else { want.clone() };
    if route {
        patch.insert(keys::ROUTED.to_owned(), "true".to_owned());
    }
    patch
}

#[cfg(test)]
mod tests;
