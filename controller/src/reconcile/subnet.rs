//! Subnets: a logical switch per subnet, attached to its VPC's router, IPAM, the default VPC's
//! router policies, and status.
//!
//! Kube-OVN normalises a subnet's spec in the controller (its `formatSubnet`), not with CRD
//! defaults: protocol from the CIDR, gateway = first usable address, the gateway added to
//! `excludeIps`, `provider: ovn`, `vpc: ovn-cluster`, `gatewayType: distributed`. We do the same
//! and write the result back, so `kubectl get subnet` shows what is in effect.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::{IpRange, parse};
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, ERROR, READY, VALIDATED, set_condition};
use kube_ovn_api::crd::{FINALIZER, IpCount, Subnet, SubnetStatus};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, LogicalSwitch, PortGroup};
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ipam::{Family, SubnetConfig};
use crate::ovn::owned::{PolicySpec, sync_policies};
use crate::ovn::plan::{Plan, RowRef};
use crate::ovn::topology::{Attachment, ensure_port_group, ensure_router_attachment, ensure_switch};

pub const KIND: &str = "Subnet";
/// Router policy priorities (Kube-OVN `pkg/util/const.go`).
pub const PRIORITY_SUBNET_ALLOW: i64 = 31000;
pub const PRIORITY_NODE: i64 = 30000;
pub const PRIORITY_GATEWAY: i64 = 29000;

/// A subnet's spec after Kube-OVN's defaulting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub cidrs: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    pub exclude_ips: Vec<String>,
    pub protocol: &'static str,
    pub provider: String,
    pub vpc: String,
    pub gateway_type: String,
}

impl Effective {
    pub fn cidr_block(&self) -> String {
        self.cidrs
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn gateway(&self) -> String {
        self.gateways
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn ipam_config(&self) -> Result<SubnetConfig> {
        let exclude_ips = self
            .exclude_ips
            .iter()
            .map(|e| parse::<IpRange>("spec.excludeIps", e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SubnetConfig {
            cidrs: self.cidrs.clone(),
            gateways: self.gateways.clone(),
            exclude_ips,
        })
    }

    /// `gateway/prefix` per family: the router port's networks.
    pub fn router_networks(&self) -> Vec<String> {
        self.cidrs
            .iter()
            .zip(&self.gateways)
            .map(|(c, g)| format!("{g}/{}", c.prefix_len()))
            .collect()
    }
}

fn family(ip: &IpAddr) -> Family {
    Family::of(ip)
}

/// Applies Kube-OVN's defaulting to a subnet; errors name the field.
pub fn effective(subnet: &Subnet, cluster_router: &str) -> Result<Effective> {
    let spec = &subnet.spec;
    let name = subnet.name_any();
    let bad = |field: &str, why: String| Error::Invalid(format!("subnet {name}: spec.{field}: {why}"));
    let block = spec
        .cidr_block
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| bad("cidrBlock", "is required".into()))?;
    let mut cidrs: Vec<IpNet> = Vec::new();
    for part in block.split(',') {
        let net: IpNet = part
            .trim()
            .parse()
            .map_err(|e| bad("cidrBlock", format!("{part:?} is not a CIDR: {e}")))?;
        if cidrs
            .iter()
            .any(|c| c.network().is_ipv4() == net.network().is_ipv4())
        {
            return Err(bad("cidrBlock", format!("{block:?} has two CIDRs of one family")));
        }
        cidrs.push(net.trunc());
    }
    // IPv4 first, as Kube-OVN writes dual-stack values.
    cidrs.sort_by_key(|c| !c.network().is_ipv4());
    let mut gateways: Vec<IpAddr> = Vec::new();
    for g in spec
        .gateway
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
    {
        let ip: IpAddr = g
            .parse()
            .map_err(|_| bad("gateway", format!("{g:?} is not an IP address")))?;
        if !cidrs.iter().any(|c| c.contains(&ip)) {
            return Err(bad("gateway", format!("{ip} is outside {block}")));
        }
        gateways.push(ip);
    }
    let mut ordered = Vec::new();
    for c in &cidrs {
        let g = match gateways.iter().find(|g| family(g) == family(&c.network())) {
            Some(g) => *g,
            None => first_usable(c).ok_or_else(|| bad("cidrBlock", format!("{c} has no usable address")))?,
        };
        ordered.push(g);
    }
    let mut exclude_ips = spec.exclude_ips.clone().unwrap_or_default();
    for e in &exclude_ips {
        parse::<IpRange>("spec.excludeIps", e).map_err(|err| bad("excludeIps", err.to_string()))?;
    }
    for g in &ordered {
        let covered = exclude_ips
            .iter()
            .filter_map(|e| parse::<IpRange>("x", e).ok())
            .any(|r| r.contains(g));
        if !covered {
            exclude_ips.push(g.to_string());
        }
    }
    let protocol = match (
        cidrs.iter().any(|c| c.network().is_ipv4()),
        cidrs.iter().any(|c| !c.network().is_ipv4()),
    ) {
        (true, true) => "Dual",
        (false, true) => "IPv6",
        _ => "IPv4",
    };
    let gateway_type = spec
        .gateway_type
        .clone()
        .filter(|g| !g.is_empty())
        .unwrap_or_else(|| "distributed".into());
    if !matches!(gateway_type.as_str(), "distributed" | "centralized") {
        return Err(bad(
            "gatewayType",
            format!("{gateway_type:?} is neither distributed nor centralized"),
        ));
    }
    Ok(Effective {
        cidrs,
        gateways: ordered,
        exclude_ips,
        protocol,
        provider: spec
            .provider
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "ovn".into()),
        vpc: spec
            .vpc
            .clone()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| cluster_router.to_owned()),
        gateway_type,
    })
}

fn first_usable(c: &IpNet) -> Option<IpAddr> {
    c.hosts().next()
}

/// The spec fields defaulting changed, as a merge patch; `None` when the spec is already normal.
fn spec_patch(subnet: &Subnet, eff: &Effective) -> Option<serde_json::Value> {
    let s = &subnet.spec;
    let mut patch = serde_json::Map::new();
    let mut set = |k: &str, v: serde_json::Value| {
        patch.insert(k.to_owned(), v);
    };
    if s.cidr_block.as_deref() != Some(eff.cidr_block().as_str()) {
        set("cidrBlock", json!(eff.cidr_block()));
    }
    if s.gateway.as_deref() != Some(eff.gateway().as_str()) {
        set("gateway", json!(eff.gateway()));
    }
    if s.exclude_ips.as_ref() != Some(&eff.exclude_ips) {
        set("excludeIps", json!(eff.exclude_ips));
    }
    if s.protocol.as_deref() != Some(eff.protocol) {
        set("protocol", json!(eff.protocol));
    }
    if s.provider.as_deref() != Some(eff.provider.as_str()) {
        set("provider", json!(eff.provider));
    }
    if s.vpc.as_deref() != Some(eff.vpc.as_str()) {
        set("vpc", json!(eff.vpc));
    }
    if s.gateway_type.as_deref() != Some(eff.gateway_type.as_str()) {
        set("gatewayType", json!(eff.gateway_type));
    }
    (!patch.is_empty()).then(|| json!({"spec": patch}))
}

pub async fn reconcile(subnet: Arc<Subnet>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<Subnet> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, subnet, |event| async move {
        match event {
            Finalizer::Apply(s) => apply(&s, &c).await,
            Finalizer::Cleanup(s) => cleanup(&s, &c).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Invalid(format!("finalizer: {other}")),
    })
}

async fn apply(subnet: &Subnet, ctx: &Context) -> Result<Action> {
    let name = subnet.name_any();
    let eff = match effective(subnet, &ctx.config.cluster_router) {
        Ok(e) => e,
        Err(e) => {
            set_status(ctx, subnet, None, false, "ValidationFailed", &e.to_string()).await?;
            return Err(e);
        }
    };
    if let Some(patch) = spec_patch(subnet, &eff) {
        let api: Api<Subnet> = Api::all(ctx.kube.clone());
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        return Ok(Action::await_change());
    }
    if let Some(other) = overlapping(ctx, subnet, &eff) {
        let why = format!("{} overlaps subnet {other} in VPC {}", eff.cidr_block(), eff.vpc);
        set_status(ctx, subnet, Some(&eff), false, "CIDROverlap", &why).await?;
        return Err(Error::Invalid(format!("subnet {name}: {why}")));
    }
    let router = router_of(ctx, &eff.vpc)?;
    ctx.ipam().add_or_update_subnet(&name, &eff.ipam_config()?)?;

    let is_join = name == ctx.config.node_subnet.name;
    let default_vpc = router == ctx.config.cluster_router;
    let nodes = node_join_addresses(ctx);
    let plan = ctx.nb.read(|cache| {
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
        let attach = Attachment {
            router: &router,
            router_ref: &lr,
            switch: &name,
            switch_ref: &ls,
            networks: eff.router_networks(),
        };
        let mac = ensure_router_attachment(&mut plan, cache, attach, &owner);
        let policy_owner = [("subnet", name.as_str())];
        let mut policies = Vec::new();
        if default_vpc {
            for c in &eff.cidrs {
                let v = if c.network().is_ipv4() { "ip4" } else { "ip6" };
                policies.push(PolicySpec {
                    priority: PRIORITY_SUBNET_ALLOW,
                    r#match: format!("{v}.dst == {c}"),
                    action: "allow".into(),
                    nexthops: vec![],
                });
            }
            if !is_join && eff.gateway_type == "distributed" {
                for (node, joins) in &nodes {
                    let pg = names::subnet_node_port_group(&name, node);
                    ensure_port_group(
                        &mut plan,
                        cache,
                        &pg,
                        &[("logical_switch", name.as_str()), ("node", node.as_str())],
                    );
                    for join in joins {
                        let v = if join.is_ipv4() { "ip4" } else { "ip6" };
                        if eff.cidrs.iter().any(|c| c.network().is_ipv4() == join.is_ipv4()) {
                            policies.push(PolicySpec {
                                priority: PRIORITY_GATEWAY,
                                // OVN gives every port group address sets `$<pg>_ip4` / `$<pg>_ip6`.
                                r#match: format!("{v}.src == ${pg}_{v}"),
                                action: "reroute".into(),
                                nexthops: vec![join.to_string()],
                            });
                        }
                    }
                }
                remove_stale_node_groups(&mut plan, cache, &name, &nodes);
            }
        }
        sync_policies(&mut plan, cache, &router, &policy_owner, &policies);
        Ok::<_, Error>((plan, mac))
    });
    let (plan, mac) = plan?;
    ctx.ipam().set_gateway_mac(&name, mac)?;
    ctx.nb.apply(plan, "subnet").await?;
    set_status(ctx, subnet, Some(&eff), true, "ResourceCreated", "").await?;
    // Address counters change as pods come and go; refresh them now and then.
    Ok(Action::requeue(Duration::from_secs(10)))
}

/// Port groups `<subnet>.<node>` of nodes that no longer exist.
fn remove_stale_node_groups(
    plan: &mut Plan,
    cache: &kube_ovn_ovsdb::DbCache,
    subnet: &str,
    nodes: &BTreeMap<String, Vec<IpAddr>>,
) {
    for (uuid, row) in cache.table(PortGroup::NAME) {
        let Ok(pg) = PortGroup::from_row(*uuid, row) else {
            continue;
        };
        let ours = pg.external_ids.get("logical_switch").is_some_and(|s| s == subnet);
        if ours
            && pg
                .external_ids
                .get("node")
                .is_some_and(|n| !nodes.contains_key(n))
        {
            plan.delete(PortGroup::NAME, *uuid);
        }
    }
}

/// Nodes and their join addresses, for nodes the node reconciler has finished (annotated
/// `allocated=true` after their port and policy exist), so a pod is never routed through a node
/// whose join port is not there yet — the ordering Kube-OVN gets by waiting for every node.
pub fn node_join_addresses(ctx: &Context) -> BTreeMap<String, Vec<IpAddr>> {
    use kube_ovn_api::annotations::{IpPair, get, is_true, keys};
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
        .get(&kube::runtime::reflector::ObjectRef::new(vpc))
        .ok_or_else(|| Error::NotReady(format!("VPC {vpc} does not exist")))?;
    v.status
        .as_ref()
        .and_then(|s| s.router.clone())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| Error::NotReady(format!("VPC {vpc} has no router yet")))
}

/// Another subnet of the same VPC whose CIDR overlaps this one.
fn overlapping(ctx: &Context, subnet: &Subnet, eff: &Effective) -> Option<String> {
    let name = subnet.name_any();
    ctx.stores.subnets.state().iter().find_map(|other| {
        let other_name = other.name_any();
        if other_name == name || other.meta().deletion_timestamp.is_some() {
            return None;
        }
        let o = effective(other, &ctx.config.cluster_router).ok()?;
        let overlap = o.vpc == eff.vpc
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

async fn set_status(
    ctx: &Context,
    subnet: &Subnet,
    eff: Option<&Effective>,
    ok: bool,
    reason: &str,
    message: &str,
) -> Result<()> {
    let name = subnet.name_any();
    let old = subnet.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut conditions = status.conditions.take().unwrap_or_default();
    let (yes, no) = (ConditionStatus::True, ConditionStatus::False);
    let status_of = |ok: bool| if ok { yes } else { no };
    let mut changed = set_condition(
        &mut conditions,
        Condition::new(VALIDATED, status_of(ok), reason, message),
        &now,
    );
    changed |= set_condition(
        &mut conditions,
        Condition::new(READY, status_of(ok), reason, message),
        &now,
    );
    changed |= set_condition(
        &mut conditions,
        Condition::new(ERROR, status_of(!ok), reason, message),
        &now,
    );
    status.conditions = Some(conditions);
    if let Some(eff) = eff
        && let Ok(u) = ctx.ipam().subnet_usage(&name)
    {
        let v4 = eff.cidrs.iter().any(|c| c.network().is_ipv4());
        let v6 = eff.cidrs.iter().any(|c| !c.network().is_ipv4());
        let count = |has: bool, n: u128| has.then_some(IpCount(n));
        let range = |has: bool, r: &str| has.then(|| r.to_owned());
        status.v4_available_ips = count(v4, u.v4_available);
        status.v4_using_ips = count(v4, u.v4_using);
        status.v6_available_ips = count(v6, u.v6_available);
        status.v6_using_ips = count(v6, u.v6_using);
        status.v4_available_ip_range = range(v4, &u.v4_available_range);
        status.v4_using_ip_range = range(v4, &u.v4_using_range);
        status.v6_available_ip_range = range(v6, &u.v6_available_range);
        status.v6_using_ip_range = range(v6, &u.v6_using_range);
        for (has, proto, cidr, a, used) in [
            (
                v4,
                "IPv4",
                eff.cidrs.iter().find(|c| c.network().is_ipv4()),
                u.v4_available,
                u.v4_using,
            ),
            (
                v6,
                "IPv6",
                eff.cidrs.iter().find(|c| !c.network().is_ipv4()),
                u.v6_available,
                u.v6_using,
            ),
        ] {
            if has {
                ctx.metrics.subnet_usage(
                    &name,
                    proto,
                    &cidr.map(ToString::to_string).unwrap_or_default(),
                    a,
                    used,
                );
            }
        }
    }
    let counters_changed = !same_counters(&old, &status);
    if !changed && !counters_changed {
        return Ok(());
    }
    let api: Api<Subnet> = Api::all(ctx.kube.clone());
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": status})),
    )
    .await?;
    Ok(())
}

fn same_counters(a: &SubnetStatus, b: &SubnetStatus) -> bool {
    a.v4_available_ips == b.v4_available_ips
        && a.v4_using_ips == b.v4_using_ips
        && a.v6_available_ips == b.v6_available_ips
        && a.v6_using_ips == b.v6_using_ips
        && a.v4_available_ip_range == b.v4_available_ip_range
        && a.v4_using_ip_range == b.v4_using_ip_range
        && a.v6_available_ip_range == b.v6_available_ip_range
        && a.v6_using_ip_range == b.v6_using_ip_range
}

/// Deletion: the switch, its router port, its policies and port groups, and IPAM. Kube-OVN keeps
/// the finalizer while addresses are in use, so a subnet with pods is not pulled from under them.
async fn cleanup(subnet: &Subnet, ctx: &Context) -> Result<Action> {
    let name = subnet.name_any();
    let using = ctx
        .ipam()
        .subnet_usage(&name)
        .map_or(0, |u| u.v4_using + u.v6_using);
    let held_by_pods = ctx.ipam().keys(&name).iter().any(|k| !k.starts_with("node-"));
    if using > 0 && held_by_pods {
        return Err(Error::NotReady(format!(
            "subnet {name} still has {using} addresses in use"
        )));
    }
    let router = subnet.spec.vpc.clone().filter(|v| !v.is_empty()).map_or_else(
        || ctx.config.cluster_router.clone(),
        |vpc| router_of(ctx, &vpc).unwrap_or(vpc),
    );
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        sync_policies(&mut plan, cache, &router, &[("subnet", name.as_str())], &[]);
        let lrp = names::router_port_name(&router, &name);
        if let (Some(r), Some(p)) = (
            cache.uuids_by_name(LogicalRouter::NAME, &router).first(),
            cache
                .uuids_by_name(kube_ovn_ovsdb::tables::nb::LogicalRouterPort::NAME, &lrp)
                .first(),
        ) {
            plan.remove_members(LogicalRouter::NAME, &RowRef::Existing(*r), "ports", &[*p]);
        }
        remove_stale_node_groups(&mut plan, cache, &name, &BTreeMap::new());
        if let Some(ls) = cache.uuids_by_name(LogicalSwitch::NAME, &name).first() {
            plan.delete(LogicalSwitch::NAME, *ls);
        }
        plan
    });
    ctx.nb.apply(plan, "subnet-delete").await?;
    ctx.ipam().delete_subnet(&name);
    ctx.metrics.forget_subnet(&name);
    Ok(Action::await_change())
}
