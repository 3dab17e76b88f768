//! The parts of U2O interconnection beyond its three policies (Kube-OVN
//! `pkg/controller/subnet.go`):
//!
//! - **Without load balancing** (`--enable-lb=false`, or the subnet's `enableLb` not true;
//!   `addPolicyRouteForU2ONoLoadBalancer`): no OVN load balancer turns a Service address into a
//!   backend on the subnet's switch, so the router sends an underlay pod's Service traffic to the
//!   join address of the pod's node, where kube-proxy does. One port group `<subnet>.<node>` per
//!   node (`external_ids` `lr`, `ls`, `u2o=true`, and ours, `node`) holds the subnet's pods on that
//!   node, and per node, family and Service CIDR a 29400 policy `ipX.src == $<group>_ipX &&
//!   ipX.dst == <service CIDR>` reroutes to the node's join address (`external_ids`
//!   `isU2ORoutePolicy`, `isU2ONoLBRoutePolicy`, `node`, `svcCidr`). Default VPC only, as
//!   Kube-OVN's (it writes them from its default-VPC route reconciler). The node keeps its route
//!   to the subnet through `ovn0` for the replies (the daemon's `node_routes`).
//! - **Overlay-only routing** (`u2oFeatures.overlayOnlyRouting`): the policies are in
//!   [`super::underlay`]; here the address sets `<vpc>.u2o_overlay_cidrs.ip4`/`.ip6` (`-` → `.`;
//!   `external_ids` `isU2OOverlayCIDRs=true`, `vpc`) of the VPC's overlay subnets' CIDRs, which
//!   they match. Kube-OVN keeps these sets for every VPC with an overlay subnet, used or not; we
//!   keep them while a subnet of the VPC uses them.
//!
//! The planners are pure; [`vpc_overlay_cidrs`] and [`lb_off`] read the caches and flags.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use kube::Resource;
use kube_ovn_api::crd::SubnetSpec;
use kube_ovn_api::names;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitchPort, PortGroup};
use kube_ovn_ovsdb::{DbCache, Table};

use crate::config::Config;
use crate::context::Context;
use crate::ovn::owned::PolicySpec;
use crate::ovn::plan::{OwnedRows, Plan, RowRef, owned_ids};
use crate::ovn::priority::POLICY_U2O_SUBNET;
use crate::ovn::topology::add_to_port_group;
use crate::reconcile::subnet::node_join_addresses;
use crate::reconcile::subnet_spec::{Effective, effective};

/// `<vpc>.u2o_overlay_cidrs.<ip4|ip6>` with `-` → `.` (Kube-OVN's `U2OOverlayCIDRs`).
pub fn overlay_cidrs_set(vpc: &str, family: &str) -> String {
    format!("{vpc}.u2o_overlay_cidrs.{family}").replace('-', ".")
}

/// The owner keys of a VPC's overlay CIDR sets (Kube-OVN's
/// `u2oOverlayCIDRsAddressSetExternalIDs`, with `vendor`).
pub fn overlay_cidrs_owner(vpc: &str) -> [(&'static str, &str); 2] {
    [("isU2OOverlayCIDRs", "true"), ("vpc", vpc)]
}

/// A subnet as the overlay CIDR sets see it.
#[derive(Debug, Clone)]
pub struct VpcSubnet {
    pub cidrs: Vec<IpNet>,
    /// An underlay subnet (`vlan`): not an overlay CIDR.
    pub underlay: bool,
    /// An underlay subnet with U2O and overlay-only routing: the sets are needed.
    pub overlay_only: bool,
}

/// A VPC's overlay CIDR sets (both families, as Kube-OVN's, one possibly empty), or none when no
/// subnet of the VPC routes overlay-only. Kube-OVN's `buildU2OOverlayCIDRs`: every subnet of the
/// VPC without a `vlan`, the join subnet included.
pub fn overlay_cidrs_sets(vpc: &str, subnets: &[VpcSubnet]) -> Vec<(String, Vec<String>)> {
    if !subnets.iter().any(|s| s.overlay_only) {
        return Vec::new();
    }
    ["ip4", "ip6"]
        .into_iter()
        .map(|v| {
            let mut cidrs: Vec<String> = subnets
                .iter()
                .filter(|s| !s.underlay)
                .flat_map(|s| &s.cidrs)
                .filter(|c| c.addr().is_ipv4() == (v == "ip4"))
                .map(ToString::to_string)
                .collect();
            cidrs.sort();
            cidrs.dedup();
            (overlay_cidrs_set(vpc, v), cidrs)
        })
        .collect()
}

/// The subnets of `vpc` in the cache, without `leaving` (a subnet being deleted) and those
/// being deleted.
pub fn vpc_overlay_cidrs(ctx: &Context, vpc: &str, leaving: Option<&str>) -> Vec<(String, Vec<String>)> {
    let router = &ctx.config.cluster_router;
    let all = ctx.stores.subnets.state();
    // The common case, no subnet asks for it, without defaulting every subnet.
    if !all
        .iter()
        .any(|s| s.spec.u2o_features.as_ref().and_then(|f| f.overlay_only_routing) == Some(true))
    {
        return Vec::new();
    }
    let subnets: Vec<VpcSubnet> = all
        .iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .filter(|s| leaving.is_none_or(|l| s.meta().name.as_deref() != Some(l)))
        .filter_map(|s| effective(s, router).ok())
        .filter(|e| e.vpc == vpc)
        .map(|e| VpcSubnet {
            underlay: e.underlay.is_some(),
            overlay_only: e.underlay.as_ref().is_some_and(|u| u.u2o && u.overlay_only),
            cidrs: e.cidrs,
        })
        .collect();
    overlay_cidrs_sets(vpc, &subnets)
}

/// Whether a subnet's load balancing is off as Kube-OVN's U2O reads it: `!--enable-lb ||
/// enableLb != true`, where an unset `enableLb` is the flag (Kube-OVN's `formatSubnet` writes it).
/// So with `--enable-lb=false` a subnet's `enableLb: true` does not turn the reroutes off.
pub fn lb_off(config: &Config, spec: &SubnetSpec) -> bool {
    !config.enable_lb || !spec.enable_lb.unwrap_or(config.enable_lb)
}

/// The no-load-balancer rows of a default-VPC U2O subnet that has its U2O address, from the
/// caches: none while its load balancing is on (or U2O is off).
pub fn no_lb_rows(ctx: &Context, subnet: &str, eff: &Effective, spec: &SubnetSpec) -> NoLbPlan {
    if !eff.u2o() || !lb_off(&ctx.config, spec) {
        return NoLbPlan::default();
    }
    let mut nodes: Vec<String> = ctx
        .stores
        .nodes
        .state()
        .iter()
        .filter(|n| n.meta().deletion_timestamp.is_none())
        .filter_map(|n| n.meta().name.clone())
        .collect();
    nodes.sort();
    no_lb_plan(&NoLbInputs {
        subnet,
        vpc: &eff.vpc,
        cidrs: &eff.cidrs,
        nodes: &nodes,
        joins: &node_join_addresses(ctx),
        service_cidrs: &ctx.config.service_cidrs,
    })
}

/// What the no-load-balancer plan reads.
#[derive(Debug, Clone, Copy)]
pub struct NoLbInputs<'a> {
    pub subnet: &'a str,
    /// The subnet's VPC (the groups' `lr`).
    pub vpc: &'a str,
    pub cidrs: &'a [IpNet],
    /// Every node (not being deleted): one group each.
    pub nodes: &'a [String],
    /// The nodes' join addresses, for the nodes that have them (the reroutes' next hops).
    pub joins: &'a BTreeMap<String, Vec<IpAddr>>,
    /// `--service-cluster-ip-range`.
    pub service_cidrs: &'a [IpNet],
}

/// The port groups (name, node) and policies of a U2O subnet without load balancing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NoLbPlan {
    pub groups: Vec<(String, String)>,
    pub policies: OwnedRows<PolicySpec>,
}

/// Kube-OVN's `addPolicyRouteForU2ONoLoadBalancer`: per node a group; per node, family of the
/// subnet and Service CIDR of that family, a reroute to the node's join address of that family.
pub fn no_lb_plan(i: &NoLbInputs<'_>) -> NoLbPlan {
    let mut plan = NoLbPlan::default();
    for node in i.nodes {
        let group = names::subnet_node_port_group(i.subnet, node);
        let joins = i.joins.get(node).map(Vec::as_slice).unwrap_or_default();
        for c in i.cidrs {
            let v4 = c.addr().is_ipv4();
            let v = if v4 { "ip4" } else { "ip6" };
            let Some(join) = joins.iter().find(|a| a.is_ipv4() == v4) else {
                continue;
            };
            for svc in i.service_cidrs.iter().filter(|s| s.addr().is_ipv4() == v4) {
                let svc = svc.to_string();
                let spec = PolicySpec {
                    priority: POLICY_U2O_SUBNET,
                    r#match: format!("{v}.src == ${group}_{v} && {v}.dst == {svc}"),
                    action: "reroute".into(),
                    nexthops: vec![join.to_string()],
                };
                let ids = owned_ids(&[
                    ("subnet", i.subnet),
                    ("isU2ORoutePolicy", "true"),
                    ("isU2ONoLBRoutePolicy", "true"),
                    ("node", node.as_str()),
                    ("svcCidr", svc.as_str()),
                ]);
                plan.policies.push((spec, ids));
            }
        }
        plan.groups.push((group, node.clone()));
    }
    plan
}

/// Whether a port group's `external_ids` make it a U2O group of `subnet`.
fn is_u2o_group(ids: &BTreeMap<String, String>, subnet: &str) -> bool {
    ids.get("u2o").is_some_and(|v| v == "true") && ids.get("ls").is_some_and(|s| s == subnet)
}

/// Makes `subnet`'s U2O port groups exactly `groups`, each holding the subnet's pods on its node
/// (`members`, port names by node; a pod that moved leaves the other groups); the pod reconciler
/// adds new pods (`pod::plan`). Call after the subnet's distributed-gateway groups are synced: a
/// subnet that was one keeps the group names, and the old rows are deleted in the same plan.
pub fn sync_u2o_groups(
    plan: &mut Plan,
    cache: &DbCache,
    subnet: &str,
    vpc: &str,
    groups: &[(String, String)],
    members: &BTreeMap<String, Vec<String>>,
) {
    let mut refs: BTreeMap<&str, (RowRef, &str, Vec<uuid::Uuid>)> = BTreeMap::new();
    for (name, node) in groups {
        let ids = owned_ids(&[("lr", vpc), ("ls", subnet), ("u2o", "true"), ("node", node)]);
        let existing = cache.by_name::<PortGroup>(name).ok().flatten();
        let (r, ports) = match existing {
            Some(pg) if is_u2o_group(&pg.external_ids, subnet) => {
                let want = PortGroup {
                    name: name.clone(),
                    external_ids: ids,
                    ..Default::default()
                };
                (plan.ensure(cache, name, &want, &["external_ids"]), pg.ports)
            }
            // None, or the subnet's distributed-gateway group, deleted in this plan.
            _ => {
                let pg = PortGroup {
                    name: name.clone(),
                    external_ids: ids,
                    ..Default::default()
                };
                (plan.insert(PortGroup::NAME, pg.to_row()), Vec::new())
            }
        };
        refs.insert(node.as_str(), (r, name.as_str(), ports));
    }
    for (node, ports) in members {
        let Some((group, name, _)) = refs.get(node.as_str()) else {
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
            let port = RowRef::Existing(uuid);
            if matches!(group, RowRef::Existing(_)) {
                add_to_port_group(plan, cache, group, name, &port);
            } else {
                plan.add_members(PortGroup::NAME, group, "ports", |_| false, &[port]);
            }
            for (other, (other_ref, _, other_ports)) in &refs {
                if *other != node.as_str() && other_ports.contains(&uuid) {
                    plan.remove_members(PortGroup::NAME, other_ref, "ports", &[uuid]);
                }
            }
        }
    }
    remove_u2o_groups(plan, cache, subnet, groups);
}

/// Deletes `subnet`'s U2O port groups not in `keep`.
pub fn remove_u2o_groups(plan: &mut Plan, cache: &DbCache, subnet: &str, keep: &[(String, String)]) {
    for (uuid, row) in cache.table(PortGroup::NAME) {
        let Ok(pg) = PortGroup::from_row(*uuid, row) else {
            continue;
        };
        if is_u2o_group(&pg.external_ids, subnet) && !keep.iter().any(|(n, _)| *n == pg.name) {
            plan.delete(PortGroup::NAME, *uuid);
        }
    }
}

#[cfg(test)]
mod tests;
