//! Checks of a subnet against other objects: the VPC's namespaces, overlapping CIDRs, node
//! addresses.

use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::selector::Selector;

use crate::context::Context;
use crate::reconcile::node_state::internal_ips;
use crate::reconcile::subnet_spec::{Effective, effective};

/// Checks that need other objects, as Kube-OVN's `validateVpcBySubnet` and `checkSubnetConflict`:
/// a custom VPC's subnet binds only namespaces the VPC lists, a default-VPC subnet none a custom
/// VPC lists; no CIDR overlaps another subnet of the VPC on the same Vlan; a default-VPC overlay
/// CIDR holds no node's address. The message names the field.
pub fn validate(ctx: &Context, subnet: &Subnet, eff: &Effective) -> Result<(), String> {
    let namespaces = subnet.spec.namespaces.clone().unwrap_or_default();
    if eff.vpc == ctx.config.cluster_router {
        for vpc in ctx.stores.vpcs.state() {
            let listed = vpc.spec.namespaces.clone().unwrap_or_default();
            if vpc.name_any() != eff.vpc
                && let Some(ns) = namespaces.iter().find(|n| listed.contains(n))
            {
                return Err(format!(
                    "spec.namespaces: namespace {ns} belongs to custom VPC {}",
                    vpc.name_any()
                ));
            }
        }
    } else if let Some(vpc) = ctx.stores.vpcs.get(&ObjectRef::new(&eff.vpc)) {
        let listed = vpc.spec.namespaces.clone().unwrap_or_default();
        if let Some(ns) = namespaces.iter().find(|n| !listed.contains(n)) {
            return Err(format!(
                "spec.namespaces: namespace {ns} is not one of custom VPC {}'s spec.namespaces",
                eff.vpc
            ));
        }
    }
    for (i, sel) in subnet.spec.namespace_selectors.iter().flatten().enumerate() {
        Selector::parse(Some(sel), &format!("spec.namespaceSelectors[{i}]")).map_err(|e| e.to_string())?;
    }
    if let Some(other) = overlapping(ctx, subnet, eff) {
        return Err(format!(
            "spec.cidrBlock: {} overlaps subnet {other} in VPC {}",
            eff.cidr_block(),
            eff.vpc
        ));
    }
    // An underlay subnet may hold the nodes' addresses: they can sit on the same VLAN (Kube-OVN
    // checks overlay subnets only).
    if eff.vpc == ctx.config.cluster_router && eff.underlay.is_none() {
        for node in ctx.stores.nodes.state() {
            let inside = internal_ips(&node)
                .into_iter()
                .find(|ip| eff.cidrs.iter().any(|c| c.contains(ip)));
            if let Some(ip) = inside {
                return Err(format!(
                    "spec.cidrBlock: {} holds the address {ip} of node {}",
                    eff.cidr_block(),
                    node.name_any()
                ));
            }
        }
    }
    Ok(())
}

/// Another subnet of the same VPC and on the same Vlan (or both overlay) whose CIDR overlaps this
/// one, as Kube-OVN's `checkSubnetConflict` compares them.
fn overlapping(ctx: &Context, subnet: &Subnet, eff: &Effective) -> Option<String> {
    let name = subnet.name_any();
    ctx.stores.subnets.state().iter().find_map(|other| {
        let other_name = other.name_any();
        if other_name == name || other.meta().deletion_timestamp.is_some() {
            return None;
        }
        let o = effective(other, &ctx.config.cluster_router).ok()?;
        let vlan = |e: &Effective| e.underlay.as_ref().map(|u| u.vlan.clone());
        let overlap = o.vpc == eff.vpc
            && vlan(&o) == vlan(eff)
            && o.cidrs.iter().any(|a| {
                eff.cidrs
                    .iter()
                    .any(|b| a.contains(&b.network()) || b.contains(&a.network()))
            });
        // The older subnet keeps its CIDR; the newer one is refused.
        let older = other.meta().creation_timestamp < subnet.meta().creation_timestamp
            || (other.meta().creation_timestamp == subnet.meta().creation_timestamp && other_name < name);
        (overlap && older).then_some(other_name)
    })
}
