//! A VPC's six load balancers and the switches they are attached to, for the VPC and subnet
//! reconcilers (which call these in their own plans); the VIPs are [`crate::reconcile::service`]'s.
//!
//! The VPC reconciler creates the load balancers and attaches them to the switches of its
//! subnets that exist; a subnet reconciled before they exist waits for them (as it waits for its
//! router), so whichever runs first, every switch that wants them ends with them.

use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::SubnetSpec;
use kube_ovn_ovsdb::tables::nb::LogicalSwitch;
use kube_ovn_ovsdb::{DbCache, Table};

use crate::config::Config;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::ovn::lb::{self, LbNames};
use crate::ovn::plan::{Plan, RowRef};

/// The load balancers of a VPC: the flags' names for the default VPC, Kube-OVN's pattern for
/// the others.
pub fn lb_names(config: &Config, vpc: &str) -> LbNames {
    if vpc == config.cluster_router {
        config.cluster_lbs.clone()
    } else {
        LbNames::custom(vpc)
    }
}

/// Whether a subnet's switch carries its VPC's load balancers: `enableLb`, else `--enable-lb`.
/// The join switch too, where Kube-OVN attaches nothing: a LoadBalancer IP announced over BGP
/// arrives at a node, which routes it into `ovn0` (masqueraded to its join address, see the
/// daemon's `lb_ingress`), so the join switch is where OVN must balance it; the reply comes
/// back to the same node's port, whose conntrack undoes the DNAT (docs/architecture.md,
/// "Services"). Nodes route nothing else of the Service CIDR there, so host → ClusterIP stays
/// kube-proxy's as in Kube-OVN.
pub fn subnet_enables_lb(config: &Config, _name: &str, spec: &SubnetSpec) -> bool {
    spec.enable_lb.unwrap_or(config.enable_lb)
}

/// The VPC reconciler's part: its six load balancers exist, and are attached to (or detached
/// from) its subnets' switches that exist. `switches` are the VPC's subnets with their choice.
pub fn vpc_lbs(plan: &mut Plan, cache: &DbCache, config: &Config, vpc: &str, switches: &[(String, bool)]) {
    let names = lb_names(config, vpc);
    let refs = lb::ensure_lbs(plan, cache, &names, vpc);
    let ours = lb::existing_lbs(cache, &names);
    for (switch, enable) in switches {
        let Some(ls) = cache.uuids_by_name(LogicalSwitch::NAME, switch).first() else {
            continue;
        };
        lb::attach_to_switch(plan, cache, &RowRef::Existing(*ls), &refs, &ours, *enable);
    }
}

/// The VPC's subnets (not being deleted) and whether each wants the load balancers.
pub fn vpc_switches(ctx: &Context, vpc: &str) -> Vec<(String, bool)> {
    ctx.stores
        .subnets
        .state()
        .iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .filter(|s| crate::reconcile::triggers::subnet_vpc_name(&ctx.config.cluster_router, s) == vpc)
        .map(|s| {
            let name = s.name_any();
            let enable = subnet_enables_lb(&ctx.config, &name, &s.spec);
            (name, enable)
        })
        .collect()
}

/// The subnet reconciler's part: attach the VPC's load balancers, or detach them. The VPC
/// reconciler creates them; until it has, a subnet that wants them is not ready (as it waits for
/// its router), so it comes back once they exist.
pub fn attach_subnet(
    plan: &mut Plan,
    cache: &DbCache,
    config: &Config,
    vpc: &str,
    ls: &RowRef,
    enable: bool,
) -> Result<()> {
    let ours = lb::existing_lbs(cache, &lb_names(config, vpc));
    if enable && ours.len() < 6 {
        return Err(Error::NotReady(format!(
            "the load balancers of VPC {vpc} do not exist yet"
        )));
    }
    let refs: Vec<RowRef> = ours.iter().map(|u| RowRef::Existing(*u)).collect();
    lb::attach_to_switch(plan, cache, ls, &refs, &ours, enable);
    Ok(())
}

/// The VPC status fields naming its load balancers, those `old` (the status as JSON) lacks.
pub fn lb_status(config: &Config, vpc: &str, old: &serde_json::Value) -> Vec<(&'static str, String)> {
    lb_names(config, vpc)
        .status_fields()
        .into_iter()
        .filter(|(k, v)| old.get(*k).and_then(|o| o.as_str()) != Some(*v))
        .map(|(k, v)| (k, v.to_owned()))
        .collect()
}
