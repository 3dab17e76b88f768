//! Subnets: a logical switch per subnet attached to its VPC's router, IPAM, the router policies
//! (priority 31000 allow for traffic to the subnet, in every VPC; the default VPC's gateway
//! policies, see [`gateway`]), the switch's ACLs (see [`acl`]) and
//! status (see [`status`]). Defaulting is in [`spec`].
//!
//! An underlay subnet (`vlan`) gets a localnet port instead of the gateway policies, and a router
//! port only with `logicalGateway` or U2O (see [`underlay`] for the rows, [`u2o`] for the Vlan
//! checks and the U2O address, [`u2o_features`] for U2O without load balancing and the overlay
//! CIDR sets of overlay-only routing).
//!
//! `natOutgoing` needs nothing in the northbound database: the node daemon masquerades traffic of
//! such subnets as it leaves through `ovn0`; it reads the spec, and the IDs of
//! `natOutgoingPolicyRules` from the status (see [`nat_policy`]).

pub mod acl;
pub mod gateway;
pub mod nat_policy;
pub mod node_groups;
pub mod status;
pub mod u2o;
pub mod u2o_features;
pub mod underlay;
pub mod validate;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::{is_true, keys};
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, LogicalSwitch, LogicalSwitchPort};

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::Allocation;
use crate::ovn::owned::{
    Claim, Parent, PolicySpec, sync_acls, sync_address_sets, sync_policies, sync_policies_claimed,
    sync_routes,
};
use crate::ovn::plan::{Plan, RowRef, owned_ids};
use crate::ovn::priority::POLICY_SUBNET_ALLOW;
use crate::ovn::topology::{
    Attachment, ensure_localnet_port, ensure_router_attachment, ensure_switch, remove_router_attachment,
    remove_switch_port,
};
use crate::reconcile::node_state::{internal_ips, node_ready};
use crate::reconcile::subnet::acl::{localnet_arp_drop, subnet_acls};
use crate::reconcile::subnet::gateway::{GatewayPlan, NodeView, gateway_plan};
use crate::reconcile::subnet::nat_policy::status_rules;
use crate::reconcile::subnet::node_groups::{
    gateway_policies, pod_ports_by_node, remove_stale_node_groups, sync_node_groups,
};
use crate::reconcile::subnet::status::{Outcome, U2oStatus, set_status, warn};
use crate::reconcile::subnet::underlay::{UnderlayInputs, VlanCheck, underlay_plan};
use crate::reconcile::subnet::validate::validate;
use crate::reconcile::subnet_spec::spec_patch;
use crate::reconcile::subnet_spec::{Effective, effective};
use kube_ovn_api::annotations::keys::localnet_port;
use kube_ovn_api::crd::NatOutgoingPolicyRuleStatus;

pub const KIND: &str = "Subnet";

pub async fn reconcile(subnet: Arc<Subnet>, ctx: Arc<Context>) -> Result<Action> {
    let name = subnet.name_any();
    let api: Api<Subnet> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, kube_ovn_api::crd::FINALIZER, subnet, |event| async move {
        match event {
            Finalizer::Apply(s) => apply(&s, &c).await,
            Finalizer::Cleanup(s) => cleanup(&s, &c).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<Subnet>(&name))
}

/// Reports bad input on the subnet's status and as a Warning event, and returns the error
/// (nothing has been applied).
async fn refuse(ctx: &Context, subnet: &Subnet, why: String) -> Result<Action> {
    let outcome = Outcome::invalid(&why);
    warn(ctx, subnet, outcome.reason, &why).await;
    set_status(ctx, subnet, None, outcome).await?;
    Err(Error::Invalid(why))
}

async fn apply(subnet: &Subnet, ctx: &Context) -> Result<Action> {
    let name = subnet.name_any();
    let eff = match effective(subnet, &ctx.config.cluster_router) {
        Ok(e) => e,
        Err(e) => return refuse(ctx, subnet, e.to_string()).await,
    };
    let is_join = name == ctx.config.node_subnet.name;
    if let Some(patch) = spec_patch(subnet, &eff, (!is_join).then_some(ctx.config.enable_lb)) {
        let api: Api<Subnet> = Api::all(ctx.kube.clone());
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .doing(format_args!("write the defaults into subnet {name}'s spec"))?;
        return Ok(Action::await_change());
    }
    if let Err(why) = validate(ctx, subnet, &eff) {
        return refuse(ctx, subnet, format!("subnet {name}: {why}")).await;
    }
    let vlan = match &eff.underlay {
        None => None,
        Some(u) => match u2o::vlan_of(ctx, &name, &u.vlan) {
            VlanCheck::Ready { id, provider } => Some((id, provider)),
            VlanCheck::Conflict(why) => return refuse(ctx, subnet, why).await,
            VlanCheck::Missing(why) => {
                warn(ctx, subnet, "VlanNotFound", &why).await;
                let outcome = Outcome {
                    ready: false,
                    message: &why,
                    ..Outcome::ok("VlanNotFound")
                };
                set_status(ctx, subnet, None, outcome).await?;
                return Err(Error::NotReady(why));
            }
            VlanCheck::NotReady(why) => {
                tracing::info!(subnet = %name, "{why}");
                let outcome = Outcome {
                    ready: false,
                    ..Outcome::ok("VlanNotReady")
                };
                set_status(ctx, subnet, None, outcome).await?;
                return Ok(Action::requeue(Duration::from_secs(10)));
            }
        },
    };
    let router = router_of(ctx, &eff.vpc)?;
    let default_vpc = router == ctx.config.cluster_router;
    let field_error = |(field, why): (String, String)| format!("subnet {name}: {field}: {why}");
    let nat_rules = match status_rules(&name, &subnet.spec) {
        Ok(r) => r,
        Err(e) => return refuse(ctx, subnet, field_error(e)).await,
    };
    let mut acls = match subnet_acls(&name, &eff, &subnet.spec, &ctx.config.node_subnet.cidrs) {
        Ok(a) => a,
        Err(e) => return refuse(ctx, subnet, field_error(e)).await,
    };
    // An underlay subnet whose gateway is the physical router has no gateway policies and no
    // node reroutes (Kube-OVN's reconcileOvnDefaultVpcRoute).
    let gateway = if default_vpc && !is_join && !eff.physical_gateway() {
        let previous = subnet
            .status
            .as_ref()
            .and_then(|s| s.activate_gateway.clone())
            .unwrap_or_default();
        match gateway_plan(&name, &eff, &subnet.spec, &previous, &node_views(ctx)) {
            Ok(g) => Some(g),
            Err(e) => return refuse(ctx, subnet, field_error(e)).await,
        }
    } else {
        None
    };
    ctx.ipam().add_or_update_subnet(&name, &eff.ipam_config()?)?;
    let status_u2o_ip = subnet
        .status
        .as_ref()
        .and_then(|s| s.u2o_interconnection_ip.clone())
        .unwrap_or_default();
    let u2o_alloc = match u2o::u2o_address(ctx, &name, &eff, &status_u2o_ip) {
        Ok(a) => a,
        Err(why) => return refuse(ctx, subnet, format!("subnet {name}: {why}")).await,
    };
    // Recorded before the router port uses it: IPAM is rebuilt from IP CRs.
    if u2o_alloc.is_some() {
        u2o::sync_u2o_record(ctx, &name, &eff.vpc, u2o_alloc.as_ref()).await?;
    }
    let u2o_ips: Vec<IpAddr> = u2o_alloc.iter().flat_map(Allocation::addrs).collect();
    let node_ips: Vec<IpAddr> = ctx
        .stores
        .nodes
        .state()
        .iter()
        .flat_map(|n| internal_ips(n))
        .collect();
    let underlay = vlan.as_ref().map(|(id, provider)| {
        underlay_plan(&UnderlayInputs {
            subnet: &name,
            eff: &eff,
            vlan_id: *id,
            provider,
            default_vpc,
            u2o_ips: &u2o_ips,
            node_ips: &node_ips,
        })
    });
    if let Some(networks) = underlay.as_ref().and_then(|u| u.router_networks.as_ref()) {
        acls.extend(localnet_arp_drop(&name, networks));
    }
    let no_lb = if underlay.is_some() && default_vpc && !u2o_ips.is_empty() {
        u2o_features::no_lb_rows(ctx, &name, &eff, &subnet.spec)
    } else {
        u2o_features::NoLbPlan::default()
    };
    let u2o_members = if no_lb.groups.is_empty() {
        BTreeMap::new()
    } else {
        pod_ports_by_node(ctx, &name)
    };
    let overlay_sets = u2o_features::vpc_overlay_cidrs(ctx, &eff.vpc, None);
    let members = gateway
        .as_ref()
        .filter(|g| !g.port_group_nodes.is_empty())
        .map(|_| pod_ports_by_node(ctx, &name))
        .unwrap_or_default();
    let (plan, mac) = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let owner = [("logical_switch", name.as_str()), ("vpc", eff.vpc.as_str())];
        let other_config = BTreeMap::from([
            ("subnet".to_owned(), eff.cidr_block()),
            ("gateway".to_owned(), eff.gateway()),
            ("exclude_ips".to_owned(), eff.exclude_ips.join(" ")),
        ]);
        let ls = ensure_switch(&mut plan, cache, &name, other_config, &owner);
        let lr = cache
            .uuids_by_name(LogicalRouter::NAME, &router)
            .first()
            .map(|u| RowRef::Existing(*u))
            .ok_or_else(|| {
                Error::NotReady(format!("router {router} of VPC {} does not exist yet", eff.vpc))
            })?;
        let networks = match &underlay {
            Some(u) => u.router_networks.clone(),
            None => Some(eff.router_networks()),
        };
        let mac = if let Some(networks) = networks {
            let attach = Attachment {
                router: &router,
                router_ref: &lr,
                switch: &name,
                switch_ref: &ls,
                networks,
                mac: u2o_alloc.as_ref().map(|a| a.mac),
            };
            Some(ensure_router_attachment(&mut plan, cache, attach, &owner))
        } else {
            // The default VPC's port on the external switch is the external gateway's
            // (`ovn-external-gw-config`, external/default_vpc.rs), not this subnet's: Kube-OVN
            // leaves it too (`subnet.Name != ExternalGatewaySwitch`, reconcileVlan).
            if !(router == ctx.config.cluster_router && name == ctx.config.external.switch) {
                remove_router_attachment(&mut plan, cache, &router, &name);
            }
            None
        };
        let mut policies = match &underlay {
            Some(u) => u.policies.clone(),
            None => allow_policies(&name, &eff),
        };
        let mut group_nodes: Vec<String> = Vec::new();
        if let Some(g) = &gateway {
            if g.no_gateway.is_some() {
                // No gateway to move to: keep the last one, as Kube-OVN does.
                policies.extend(gateway_policies(cache, &router, &name));
            } else {
                policies.extend(g.policies.iter().cloned());
            }
            group_nodes.clone_from(&g.port_group_nodes);
        }
        sync_node_groups(&mut plan, cache, &name, &group_nodes, &members);
        u2o_features::sync_u2o_groups(&mut plan, cache, &name, &eff.vpc, &no_lb.groups, &u2o_members);
        policies.extend(no_lb.policies.iter().cloned());
        sync_address_sets(
            &mut plan,
            cache,
            &u2o_features::overlay_cidrs_owner(&eff.vpc),
            &overlay_sets,
        );
        sync_policies_claimed(
            &mut plan,
            cache,
            &router,
            None,
            Claim::Owner(&[("subnet", name.as_str())]),
            &policies,
        );
        let subnet_owner = [("subnet", name.as_str())];
        let (sets, routes) = underlay
            .as_ref()
            .map(|u| (u.exclude_sets.clone(), u.routes.clone()))
            .unwrap_or_default();
        sync_address_sets(&mut plan, cache, &subnet_owner, &sets);
        sync_routes(
            &mut plan,
            cache,
            &router,
            None,
            Claim::Owner(&subnet_owner),
            &subnet_owner,
            &routes,
        );
        match &underlay {
            Some(u) => {
                ensure_localnet_port(&mut plan, cache, &ls, &name, &u.localnet);
                // Kube-OVN's old name for it, deleted on upgrade as Kube-OVN does.
                let legacy = format!("ln-{name}");
                if cache
                    .by_name::<LogicalSwitchPort>(&legacy)
                    .ok()
                    .flatten()
                    .is_some_and(|p| p.r#type == "localnet")
                {
                    remove_switch_port(&mut plan, cache, &legacy);
                }
            }
            None => remove_switch_port(&mut plan, cache, &localnet_port(&name)),
        }
        let created = matches!(ls, RowRef::New(_)).then(|| ls.clone());
        sync_acls(
            &mut plan,
            cache,
            Parent::Switch(&name),
            created,
            Claim::Owner(&[("parent", name.as_str())]),
            &acls,
        );
        let lb = crate::reconcile::vpc::lb::subnet_enables_lb(&ctx.config, &name, &subnet.spec);
        crate::reconcile::vpc::lb::attach_subnet(&mut plan, cache, &ctx.config, &eff.vpc, &ls, lb)?;
        Ok::<_, Error>((plan, mac))
    })?;
    if let Some(mac) = mac {
        ctx.ipam().set_gateway_mac(&name, mac)?;
    }
    ctx.nb.apply(plan, "subnet").await.doing(format_args!(
        "write the switch, router port, policies and ACLs of subnet {name}"
    ))?;
    if u2o_alloc.is_none() {
        u2o::sync_u2o_record(ctx, &name, &eff.vpc, None).await?;
    }
    let u2o_status = U2oStatus {
        ip: u2o_alloc
            .as_ref()
            .map(|a| crate::reconcile::ip::record::addresses(a).0)
            .unwrap_or_default(),
        mac: u2o_alloc.as_ref().map(|a| a.mac.to_string()).unwrap_or_default(),
        vpc: if u2o_alloc.is_some() {
            router.clone()
        } else {
            String::new()
        },
    };
    finish(ctx, subnet, &eff, gateway.as_ref(), &nat_rules, u2o_status).await
}

/// Priority 31000: traffic to the subnet is never rerouted (Kube-OVN's `addCommonRoutesForSubnet`).
fn allow_policies(name: &str, eff: &Effective) -> Vec<(PolicySpec, BTreeMap<String, String>)> {
    let policy_ids = owned_ids(&[("subnet", name)]);
    eff.cidrs
        .iter()
        .map(|c| {
            let v = if c.addr().is_ipv4() { "ip4" } else { "ip6" };
            let allow = PolicySpec {
                priority: POLICY_SUBNET_ALLOW,
                r#match: format!("{v}.dst == {c}"),
                action: "allow".into(),
                nexthops: vec![],
            };
            (allow, policy_ids.clone())
        })
        .collect()
}

/// The status after a successful apply, with Kube-OVN's reasons.
async fn finish(
    ctx: &Context,
    subnet: &Subnet,
    eff: &Effective,
    gateway: Option<&GatewayPlan>,
    nat_rules: &[NatOutgoingPolicyRuleStatus],
    u2o: U2oStatus,
) -> Result<Action> {
    // A periodic look, besides the watches: cheap when nothing changed.
    let resync = Action::requeue(Duration::from_mins(1));
    if let Some(GatewayPlan {
        no_gateway: Some(why),
        ..
    }) = gateway
    {
        let outcome = Outcome {
            validated: true,
            ready: false,
            reason: "NoActiveGatewayFound",
            message: why,
            active_gateway: Some(""),
            nat_rules: Some(nat_rules),
            u2o: Some(u2o),
        };
        set_status(ctx, subnet, Some(eff), outcome).await?;
        return Ok(resync);
    }
    let reason = if subnet.spec.private == Some(true) {
        "SetPrivateLogicalSwitchSuccess"
    } else {
        "ResetLogicalSwitchAclSuccess"
    };
    let outcome = Outcome {
        active_gateway: gateway.map(|g| g.active.as_str()),
        nat_rules: Some(nat_rules),
        u2o: Some(u2o),
        ..Outcome::ok(reason)
    };
    set_status(ctx, subnet, Some(eff), outcome).await?;
    Ok(resync)
}

/// Every node the gateway logic may use, with its readiness, labels and join addresses.
fn node_views(ctx: &Context) -> Vec<NodeView> {
    let joins = node_join_addresses(ctx);
    let mut nodes: Vec<NodeView> = ctx
        .stores
        .nodes
        .state()
        .iter()
        .filter(|n| n.meta().deletion_timestamp.is_none())
        .map(|n: &Arc<Node>| NodeView {
            name: n.name_any(),
            labels: n.labels().clone(),
            ready: node_ready(n),
            joins: joins.get(&n.name_any()).cloned().unwrap_or_default(),
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    nodes
}

/// Nodes and their join addresses, for nodes the node reconciler has finished (annotated
/// `allocated=true` after their port and policy exist), so a pod is never routed through a node
/// whose join port is not there yet — the ordering Kube-OVN gets by waiting for every node.
pub fn node_join_addresses(ctx: &Context) -> BTreeMap<String, Vec<IpAddr>> {
    use kube_ovn_api::annotations::{IpPair, get};
    ctx.stores
        .nodes
        .state()
        .iter()
        .filter(|n| {
            n.meta().deletion_timestamp.is_none() && is_true(n.metadata.annotations.as_ref(), keys::ALLOCATED)
        })
        .filter_map(|n| {
            let ips = get::<IpPair>(n.metadata.annotations.as_ref(), keys::IP_ADDRESS)
                .ok()
                .flatten()?;
            Some((n.name_any(), ips.addrs().collect()))
        })
        .collect()
}

/// The router of a VPC, once the VPC is ready.
fn router_of(ctx: &Context, vpc: &str) -> Result<String> {
    if vpc == ctx.config.cluster_router {
        return Ok(ctx.config.cluster_router.clone());
    }
    let v = ctx
        .stores
        .vpcs
        .get(&ObjectRef::new(vpc))
        .ok_or_else(|| Error::NotReady(format!("VPC {vpc} does not exist")))?;
    v.status
        .as_ref()
        .and_then(|s| s.router.clone())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Error::NotReady(format!("VPC {vpc} has no router yet")))
}

/// Deletion: the switch (and its localnet port), its router port, its policies, routes, address
/// sets and port groups, the U2O IP CR, and IPAM. Kube-OVN keeps the finalizer while addresses
/// are in use, so a subnet with pods is not pulled from under them; the U2O address is the
/// subnet's own and does not count (its `readyToRemoveFinalizer`).
async fn cleanup(subnet: &Subnet, ctx: &Context) -> Result<Action> {
    let name = subnet.name_any();
    let using = ctx
        .ipam()
        .subnet_usage(&name)
        .map_or(0, |u| u.v4_using + u.v6_using);
    let held_by_pods = ctx
        .ipam()
        .keys(&name)
        .iter()
        .any(|k| !k.starts_with("node-") && !u2o::is_u2o_key(k));
    if using > 0 && held_by_pods {
        return Err(Error::NotReady(format!(
            "subnet {name} still has {using} addresses in use"
        )));
    }
    let router = subnet.spec.vpc.clone().filter(|v| !v.is_empty()).map_or_else(
        || ctx.config.cluster_router.clone(),
        |vpc| router_of(ctx, &vpc).unwrap_or(vpc),
    );
    let vpc = subnet
        .spec
        .vpc
        .clone()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| ctx.config.cluster_router.clone());
    let overlay_sets = u2o_features::vpc_overlay_cidrs(ctx, &vpc, Some(&name));
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let subnet_owner = [("subnet", name.as_str())];
        sync_policies(&mut plan, cache, &router, &subnet_owner, &[]);
        sync_routes(
            &mut plan,
            cache,
            &router,
            None,
            Claim::Owner(&subnet_owner),
            &subnet_owner,
            &[],
        );
        sync_address_sets(&mut plan, cache, &subnet_owner, &[]);
        let lrp = names::router_port_name(&router, &name);
        if let (Some(r), Some(p)) = (
            cache.uuids_by_name(LogicalRouter::NAME, &router).first(),
            cache
                .uuids_by_name(kube_ovn_ovsdb::tables::nb::LogicalRouterPort::NAME, &lrp)
                .first(),
        ) {
            plan.remove_members(LogicalRouter::NAME, &RowRef::Existing(*r), "ports", &[*p]);
        }
        remove_stale_node_groups(&mut plan, cache, &name, &[]);
        u2o_features::remove_u2o_groups(&mut plan, cache, &name, &[]);
        sync_address_sets(
            &mut plan,
            cache,
            &u2o_features::overlay_cidrs_owner(&vpc),
            &overlay_sets,
        );
        if let Some(ls) = cache.uuids_by_name(LogicalSwitch::NAME, &name).first() {
            plan.delete(LogicalSwitch::NAME, *ls);
        }
        plan
    });
    ctx.nb
        .apply(plan, "subnet-delete")
        .await
        .doing(format_args!("remove the rows of subnet {name}"))?;
    if let Ok(eff) = effective(subnet, &ctx.config.cluster_router) {
        let key = keys::u2o_interconnection_name(&eff.vpc, &name);
        crate::reconcile::ip::record::delete_ip(ctx, &key).await?;
    }
    u2o::sync_u2o_record(ctx, &name, "", None).await?;
    ctx.ipam().delete_subnet(&name);
    ctx.metrics.forget_subnet(&name);
    Ok(Action::await_change())
}
