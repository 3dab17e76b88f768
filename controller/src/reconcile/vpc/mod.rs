//! VPCs: one logical router each (`ovn-cluster` for the default VPC) with the VPC's static routes,
//! policy routes and peerings, and the status subnets and users read (`router`, `default`,
//! `standby`, `defaultLogicalSwitch`, `subnets`, `vpcPeerings`, conditions). A custom VPC's
//! external gateway (`enableExternal`, `extraExternalSubnets`, `enableBfd` and their status
//! fields) is [`crate::reconcile::external`]'s, called once the router is written.
//!
//! What the VPC owns on its router follows Kube-OVN:
//! - static routes: every route with `vendor=kube-ovn` (on `ovn-cluster` that includes the
//!   catch-all routes to the join gateway);
//! - policies: on a custom VPC every policy except those a subnet, node or gateway added (Kube-OVN
//!   owns a custom VPC's whole router); on `ovn-cluster`, which also carries the subnets' and
//!   nodes' policies, only the rows written for `spec.policyRoutes` (marked `vpc=<name>`; Kube-OVN
//!   remembers them in memory, which a restart forgets);
//! - peering ports `<vpc>-<remote>`: those in the spec; ports of peerings removed from the spec
//!   go (found in the northbound database, so a restart does not leak them).

pub mod lb;
pub mod spec;

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, ERROR, READY, VALIDATED, set_condition};
use kube_ovn_api::crd::{FINALIZER, Vpc};
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, LogicalSwitch};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ovn::owned::{Claim, sync_policies_claimed, sync_routes};
use crate::ovn::plan::{Plan, owned_ids};
use crate::ovn::topology::{ensure_peer_port, ensure_vpc_router, remove_stale_peer_ports};
use crate::reconcile::external;
use crate::reconcile::subnet_spec::effective;
use crate::reconcile::vpc::spec::{VpcRows, join_default_routes, vpc_rows};

pub const KIND: &str = "Vpc";

/// `external_ids` keys of policies other objects add to a router: a custom VPC's reconciler
/// leaves these alone (Kube-OVN: subnets, VPC egress gateways, underlay-to-overlay routes; and
/// our nodes).
const OTHER_POLICY_OWNERS: &[&str] = &["subnet", "node", "vpc-egress-gateway", "isU2ORoutePolicy"];

pub async fn reconcile(vpc: Arc<Vpc>, ctx: Arc<Context>) -> Result<Action> {
    let name = vpc.name_any();
    let api: Api<Vpc> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, vpc, |event| async move {
        match event {
            Finalizer::Apply(v) => apply(&v, &c).await,
            Finalizer::Cleanup(v) => cleanup(&v, &c).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<Vpc>(&name))
}

/// The subnets of a VPC (by `spec.vpc`, defaulting to the default VPC), sorted; subnets being
/// deleted only when `deleting` (they still hold router ports until their cleanup ran).
pub fn subnets_of(ctx: &Context, vpc: &str, deleting: bool) -> Vec<String> {
    let mut names: Vec<String> = ctx
        .stores
        .subnets
        .state()
        .iter()
        .filter(|s| deleting || s.meta().deletion_timestamp.is_none())
        .filter(|s| crate::reconcile::triggers::subnet_vpc_name(&ctx.config.cluster_router, s) == vpc)
        .map(|s| s.name_any())
        .collect();
    names.sort();
    names
}

/// Whether one of the VPC's subnets is an underlay subnet with U2O interconnection.
fn has_u2o_subnet(ctx: &Context, vpc: &str) -> bool {
    ctx.stores.subnets.state().iter().any(|s| {
        s.meta().deletion_timestamp.is_none()
            && crate::reconcile::triggers::subnet_vpc_name(&ctx.config.cluster_router, s) == vpc
            && effective(s, &ctx.config.cluster_router).is_ok_and(|e| e.u2o())
    })
}

/// The join subnet's gateways, the default VPC's next hop for traffic leaving the cluster.
fn join_gateways(ctx: &Context) -> Vec<IpAddr> {
    let join = &ctx.config.node_subnet;
    ctx.stores
        .subnets
        .get(&ObjectRef::new(&join.name))
        .and_then(|s| effective(&s, &ctx.config.cluster_router).ok())
        .map_or_else(|| join.gateways.clone(), |e| e.gateways)
}

async fn apply(vpc: &Vpc, ctx: &Context) -> Result<Action> {
    let name = vpc.name_any();
    let is_default = name == ctx.config.cluster_router;
    let rows = match vpc_rows(&name, &vpc.spec) {
        Ok(r) => r,
        Err(e) => {
            let why = format!("vpc {name}: {e}");
            set_status(ctx, vpc, &Outcome::Invalid(&why)).await?;
            return Err(Error::Invalid(why));
        }
    };
    let VpcRows {
        mut routes,
        policies,
        peerings,
    } = rows;
    if is_default {
        // Kube-OVN waits for the join switch: a route to an address no router port reaches yet
        // only makes northd complain.
        let join = &ctx.config.node_subnet.name;
        if ctx
            .nb
            .read(|c| c.uuids_by_name(LogicalSwitch::NAME, join).is_empty())
        {
            return Err(Error::NotReady(format!("join switch {join} does not exist yet")));
        }
        let extra = join_default_routes(&join_gateways(ctx), &routes);
        routes.extend(extra);
    }
    // Kube-OVN leaves `always_learn_from_arp_request` on for a VPC with a U2O underlay subnet: its
    // router must learn the underlay's hosts, which it does not address first (vpc.go).
    let learn_from_arp =
        !peerings.is_empty() || vpc.spec.enable_external == Some(true) || has_u2o_subnet(ctx, &name);
    let lb_switches = lb::vpc_switches(ctx, &name);
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let owner = [("vpc", name.as_str())];
        let lr = ensure_vpc_router(&mut plan, cache, &name, &owner, learn_from_arp);
        for (remote, networks) in &peerings {
            ensure_peer_port(&mut plan, cache, &name, &lr, remote, networks.clone());
        }
        let remotes: Vec<String> = peerings.iter().map(|(r, _)| r.clone()).collect();
        remove_stale_peer_ports(&mut plan, cache, &name, &remotes);
        // Not the source routes an underlay U2O subnet adds (`subnet=<name>`).
        sync_routes(
            &mut plan,
            cache,
            &name,
            Some(lr.clone()),
            Claim::OwnerExcept(&[], &["subnet"]),
            &[],
            &routes,
        );
        let ids = owned_ids(&owner);
        let tagged: Vec<_> = policies.iter().map(|p| (p.clone(), ids.clone())).collect();
        let claim = if is_default {
            Claim::Owner(&owner)
        } else {
            Claim::AllExcept(OTHER_POLICY_OWNERS)
        };
        sync_policies_claimed(&mut plan, cache, &name, Some(lr), claim, &tagged);
        lb::vpc_lbs(&mut plan, cache, &ctx.config, &name, &lb_switches);
        plan
    });
    ctx.nb.apply(plan, "vpc").await.doing(format_args!(
        "write the router, routes, policies and peerings of VPC {name}"
    ))?;
    let remotes: Vec<String> = peerings.into_iter().map(|(r, _)| r).collect();
    // The external gateway (issue 26): after the router exists; refused input writes nothing.
    // The router, routes and peerings stand (subnets wait for the router in the status); only the
    // external part is refused.
    let external = match external::sync(ctx, vpc).await? {
        external::Outcome::NotManaged => None,
        external::Outcome::Done(status) => Some(status),
        external::Outcome::Refused(refusal) => {
            external::warn(ctx, vpc, &refusal).await;
            set_status(ctx, vpc, &Outcome::External(remotes, &refusal)).await?;
            return Err(Error::Invalid(refusal.message));
        }
    };
    set_status(ctx, vpc, &Outcome::Ready(remotes, external)).await?;
    Ok(Action::await_change())
}

/// What a reconcile concluded, for the status.
enum Outcome<'a> {
    /// The peerings, and the external gateway's status fields (`None`: not this VPC's to write).
    Ready(Vec<String>, Option<external::ExternalStatus>),
    /// The VPC's own rows are written (its peerings), its external gateway refused (nothing of
    /// it written).
    External(Vec<String>, &'a external::Refusal),
    Invalid(&'a str),
    /// Deletion waits for the VPC's subnets to go.
    Blocked(&'a str),
}

async fn set_status(ctx: &Context, vpc: &Vpc, outcome: &Outcome<'_>) -> Result<()> {
    let name = vpc.name_any();
    let is_default = name == ctx.config.cluster_router;
    let old = vpc.status.clone().unwrap_or_default();
    let subnets = subnets_of(ctx, &name, false);
    let default_ls = if is_default {
        ctx.config.default_subnet.name.clone()
    } else {
        // Kube-OVN shows `defaultSubnet` only once that subnet exists in the VPC.
        vpc.spec
            .default_subnet
            .clone()
            .filter(|d| subnets.contains(d))
            .unwrap_or_default()
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let (yes, no) = (ConditionStatus::True, ConditionStatus::False);
    let (validated, ready, reason, message) = match outcome {
        Outcome::Ready(..) => (yes, yes, "ReconcileVpcSuccess", ""),
        Outcome::External(_, r) => (yes, no, r.reason, r.message.as_str()),
        Outcome::Invalid(why) => (no, no, "ValidateVpcFailed", *why),
        Outcome::Blocked(why) => (yes, no, "DeleteVpcBlocked", *why),
    };
    let mut changed = false;
    for (type_, status) in [
        (VALIDATED, validated),
        (READY, ready),
        (ERROR, if message.is_empty() { no } else { yes }),
    ] {
        changed |= set_condition(
            &mut conditions,
            Condition::new(type_, status, reason, message),
            &now,
        );
    }
    let mut status = serde_json::Map::new();
    status.insert("conditions".into(), json!(conditions));
    let written = match outcome {
        Outcome::Ready(peers, ext) => Some((peers, ext.as_ref())),
        Outcome::External(peers, _) => Some((peers, None)),
        _ => None,
    };
    if let Some((peers, ext)) = written {
        if let Some(ext) = ext {
            let fields = [
                (
                    "enableExternal",
                    json!(ext.enable_external),
                    old.enable_external.unwrap_or_default() == ext.enable_external,
                ),
                (
                    "enableBfd",
                    json!(ext.enable_bfd),
                    old.enable_bfd.unwrap_or_default() == ext.enable_bfd,
                ),
                (
                    "extraExternalSubnets",
                    json!(ext.extra_external_subnets),
                    old.extra_external_subnets == ext.extra_external_subnets,
                ),
            ];
            for (key, value, same) in fields {
                changed |= !same;
                status.insert(key.into(), value);
            }
        }
        let fields = [
            (
                "router",
                json!(name),
                old.router.as_deref() == Some(name.as_str()),
            ),
            ("default", json!(is_default), old.default == Some(is_default)),
            ("standby", json!(true), old.standby == Some(true)),
            (
                "defaultLogicalSwitch",
                json!(default_ls),
                old.default_logical_switch.as_deref().unwrap_or_default() == default_ls,
            ),
            (
                "subnets",
                json!(subnets),
                old.subnets.clone().unwrap_or_default() == subnets,
            ),
            (
                "vpcPeerings",
                json!(peers),
                old.vpc_peerings.clone().unwrap_or_default() == *peers,
            ),
        ];
        for (key, value, same) in fields {
            changed |= !same;
            status.insert(key.into(), value);
        }
        let old_json = serde_json::to_value(&old).unwrap_or_default();
        for (key, value) in lb::lb_status(&ctx.config, &name, &old_json) {
            changed = true;
            status.insert(key.into(), json!(value));
        }
    }
    if !changed {
        return Ok(());
    }
    crate::reconcile::merge_status::<Vpc>(&ctx.kube, &name, &status).await
}

/// Deletion: refused (the finalizer stays, the status says why) while the VPC has subnets, as
/// Kube-OVN's webhook refuses it; then the router goes, and with it its ports, routes and policies.
async fn cleanup(vpc: &Vpc, ctx: &Context) -> Result<Action> {
    let name = vpc.name_any();
    if name == ctx.config.cluster_router {
        return Err(Error::Invalid(format!(
            "the default VPC {name} cannot be deleted"
        )));
    }
    let subnets = subnets_of(ctx, &name, true);
    if !subnets.is_empty() {
        let why = format!(
            "vpc {name} still has subnets {}; delete them first",
            subnets.join(", ")
        );
        set_status(ctx, vpc, &Outcome::Blocked(&why)).await?;
        // Retried when a subnet goes (the VPC controller watches subnets), else now and then.
        return Err(Error::Invalid(why));
    }
    external::disconnect_all(ctx, vpc).await?;
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for uuid in cache.uuids_by_name(LogicalRouter::NAME, &name) {
            plan.delete(LogicalRouter::NAME, *uuid);
        }
        // Its load balancers too (no switch holds them: its subnets are gone).
        for uuid in crate::ovn::lb::existing_lbs(cache, &lb::lb_names(&ctx.config, &name)) {
            plan.delete(kube_ovn_ovsdb::tables::nb::LoadBalancer::NAME, uuid);
        }
        plan
    });
    ctx.nb
        .apply(plan, "vpc-delete")
        .await
        .doing(format_args!("remove the router and load balancers of VPC {name}"))?;
    Ok(Action::await_change())
}
