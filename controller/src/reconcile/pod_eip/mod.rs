//! A default-VPC pod's `ovn.kubernetes.io/eip` and `ovn.kubernetes.io/snat` annotations
//! (Kube-OVN's `pod.go`, with `--enable-eip-snat` and the `ovn-external-gw-config` gateway):
//!
//! ```text
//!   pod reconcile (its port written) ─▶ sync(): annotations ─▶ checks (plan::check, tenancy)
//!       ─▶ IPAM: the address reserved on the external subnet under `<eip|snat>:<pod key>`
//!       ─▶ one NB transaction on ovn-cluster: NAT dnat_and_snat (eip) / snat (snat) rows and
//!          the 29250 policy `ip4.src == <pod>` reroute → the external gateway
//!   annotation removed / pod gone (release) ─▶ rows removed, addresses released
//! ```
//!
//! TRUST (DESIGN.md "Trust"): the annotation is tenant input. Kube-OVN writes whatever address
//! it holds. Here it is refused — a Warning event on the pod naming the annotation, a log line,
//! and nothing written (an earlier accepted state stays) — when it is not an IPv4 address of the
//! external subnet (`--external-gateway-switch`), is its network, broadcast, gateway, an excluded
//! address or `external-gw-addr`, is a node's address or held in IPAM by anything else (an
//! OvnEip, another pod's annotation, …), or when that subnet does not admit the pod's namespace
//! (its `namespaces` / `namespaceSelectors`, the rule the pod tenancy code applies,
//! [`crate::reconcile::tenancy`]). The Warning does not name who holds an address.
//!
//! A restart keeps the reservations: the IPAM rebuild reads our NAT rows
//! ([`reserved_in_nb`]). The NAT rows carry `external_ids:pod_eip=<pod key>` (Kube-OVN's carry
//! none); they are written by the OVN NAT rules' builder (`ovn_nat::plan::sync_nat`).

pub mod plan;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use k8s_openapi::api::core::v1::Pod;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::Subnet;
use kube_ovn_api::external_gw::{ExternalGwConfig, GatewayType};
use kube_ovn_ovsdb::DbCache;
use kube_ovn_ovsdb::tables::nb::LogicalRouterPort;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::{Allocation, Request};
use crate::ovn::owned::sync_policies;
use crate::ovn::plan::Plan;
use crate::reconcile::binding;
use crate::reconcile::node_state::internal_ips;
use crate::reconcile::ovn_nat::plan::sync_nat;
use crate::reconcile::subnet_spec::effective;
use crate::reconcile::tenancy;
use plan::{External, Kind, Refusal};

/// Reason of the Warning event on a pod whose annotation is refused.
pub const REFUSED: &str = "EipSnatRefused";

/// The owner of our rows for pod `key`.
fn owner(key: &str) -> [(&'static str, &str); 1] {
    [(plan::OWNER_KEY, key)]
}

/// Whether anything of ours exists for `key` (NB rows, IPAM reservations).
fn has_state(ctx: &Context, key: &str) -> bool {
    let router = &ctx.config.cluster_router;
    let sw = &ctx.config.external.switch;
    let in_nb = ctx
        .nb
        .read(|cache| !plan::owned_nats(cache, router, Some(key)).is_empty());
    in_nb || {
        let ipam = ctx.ipam();
        Kind::ALL
            .iter()
            .any(|k| ipam.allocation(sw, &k.ipam_key(key)).is_some())
    }
}

/// The pods with an `eip` or `snat` annotation (what a change of the ConfigMap concerns).
pub fn with_annotations(pods: &crate::informer::Cache<Pod>) -> Vec<ObjectRef<Pod>> {
    pods.state()
        .iter()
        .filter(|p| {
            Kind::ALL
                .iter()
                .any(|k| p.annotations().contains_key(k.annotation()))
        })
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// The pod reconciler's hook, once the pod's port is written: brings the pod's NAT rows, policy
/// and reservations to what its annotations ask. `vpc` is the pod's VPC; `alloc` its addresses.
pub async fn sync(ctx: &Context, pod: &Pod, key: &str, vpc: &str, alloc: &Allocation) -> Result<()> {
    if !ctx.config.external.enable_eip_snat {
        return Ok(());
    }
    let wanted = match plan::wanted(pod.annotations()) {
        Ok(w) => w,
        Err(refusal) => return refuse(ctx, pod, &refusal).await,
    };
    if wanted.is_empty() {
        if has_state(ctx, key) {
            release(ctx, key).await?;
        }
        return Ok(());
    }
    let first = wanted[0].0;
    // A refusal of the first annotation the pod carries.
    let about_first = |why: String| Refusal {
        annotation: first.annotation(),
        why,
    };
    if vpc != ctx.config.cluster_router {
        let why = format!(
            "honoured only for pods of the default VPC {} (this pod is in VPC {vpc}; use an OvnFip or OvnSnatRule)",
            ctx.config.cluster_router
        );
        return refuse(ctx, pod, &about_first(why)).await;
    }
    let Some(pod_ip) = alloc.v4 else {
        let why = "the pod has no IPv4 address".to_owned();
        return refuse(ctx, pod, &about_first(why)).await;
    };
    // The default VPC's external gateway must be configured (Kube-OVN: an error until it is).
    let cfg = ctx
        .stores
        .external_gw_config()
        .and_then(|cm| ExternalGwConfig::parse(&cm.data.clone().unwrap_or_default()).ok())
        .filter(|c| c.enabled)
        .ok_or_else(|| {
            Error::NotReady(format!(
                "pod {key}: {} asks for the default VPC's external gateway, which ConfigMap {} does not enable",
                first.annotation(),
                kube_ovn_api::external_gw::CONFIG_MAP
            ))
        })?;
    let sw = ctx.config.external.switch.clone();
    let Some(subnet) = ctx
        .stores
        .subnets
        .get(&ObjectRef::<Subnet>::new(&sw))
        .filter(|s| s.metadata.deletion_timestamp.is_none())
    else {
        let why = format!("there is no external Subnet {sw} to take the address from");
        return refuse(ctx, pod, &about_first(why)).await;
    };
    if let Err(r) = admits(ctx, pod, &subnet)? {
        let why = r.to_string();
        return refuse(ctx, pod, &about_first(why)).await;
    }
    let eff = effective(&subnet, &ctx.config.cluster_router)?;
    let nexthop = cfg
        .addr
        .map(|a| a.ip)
        .or_else(|| eff.gateways.iter().find(|g| g.is_ipv4()).copied())
        .ok_or_else(|| {
            Error::NotReady(format!(
                "no available gateway address (external-gw-addr, Subnet {sw})"
            ))
        })?;
    let in_use = in_use(ctx);
    let ext = External {
        subnet: &sw,
        cidrs: &eff.cidrs,
        gateways: &eff.gateways,
        exclude: &eff.exclude_ips,
        gateway_addr: cfg.addr.map(|a| a.ip),
        in_use: &in_use,
    };
    if let Err(r) = reserve(ctx, key, &ext, &wanted)? {
        return refuse(ctx, pod, &r).await;
    }
    let distributed = cfg.gateway_type == GatewayType::Distributed;
    let rows = plan::nat_rows(key, pod_ip, &alloc.mac.to_string(), distributed, &wanted);
    let router = ctx.config.cluster_router.clone();
    let nb_plan = ctx.nb.read(|cache| {
        let mut p = Plan::new();
        sync_nat(&mut p, cache, (plan::OWNER_KEY, key), Some(&router), &rows, false);
        sync_policies(
            &mut p,
            cache,
            &router,
            &owner(key),
            &[plan::policy(pod_ip, nexthop)],
        );
        p
    });
    if nb_plan.is_empty() {
        return Ok(());
    }
    ctx.nb
        .apply(nb_plan, "pod-eip")
        .await
        .doing(format_args!("write the EIP/SNAT rows of pod {key}"))?;
    let wanted_s: Vec<String> = wanted
        .iter()
        .map(|(k, ip)| format!("{}={ip}", k.as_str()))
        .collect();
    tracing::info!(pod = %key, nat = ?wanted_s, nexthop = %nexthop, "pod EIP/SNAT written");
    Ok(())
}

/// Addresses held outside IPAM (or not yet in it after a restart): the nodes', the OvnEips'
/// (`spec`/`status` `v4Ip`), the router ports' (`networks`).
fn in_use(ctx: &Context) -> Vec<IpAddr> {
    let mut out: Vec<IpAddr> = ctx
        .stores
        .nodes
        .state()
        .iter()
        .flat_map(|n| internal_ips(n))
        .collect();
    for e in ctx.stores.ovn_eips.state() {
        let status = e.status.as_ref().and_then(|s| s.v4_ip.as_deref());
        out.extend(
            [e.spec.v4_ip.as_deref(), status]
                .into_iter()
                .flatten()
                .filter_map(|a| a.parse::<IpAddr>().ok()),
        );
    }
    ctx.nb.read(|cache| {
        for p in cache.rows::<LogicalRouterPort>().unwrap_or_default() {
            out.extend(
                p.networks
                    .iter()
                    .filter_map(|n| n.parse::<ipnet::IpNet>().ok())
                    .map(|n| n.addr()),
            );
        }
    });
    out
}

/// Checks the addresses and reserves them under one hold of IPAM (nothing can take an address in
/// between); a changed address releases the old one. `Ok(Err(_))`: refused, nothing reserved.
fn reserve(
    ctx: &Context,
    key: &str,
    ext: &External<'_>,
    wanted: &[(Kind, Ipv4Addr)],
) -> Result<Result<(), Refusal>> {
    let sw = ext.subnet;
    let mut ipam = ctx.ipam();
    if !ipam.has_subnet(sw) {
        return Err(Error::NotReady(format!(
            "external subnet {sw} is not in IPAM yet"
        )));
    }
    for (kind, ip) in wanted {
        let own = kind.ipam_key(key);
        if let Err(r) = plan::check(*kind, *ip, ext, &own, ipam.holder(sw, IpAddr::V4(*ip))) {
            return Ok(Err(r));
        }
    }
    for kind in Kind::ALL {
        let own = kind.ipam_key(key);
        let want = wanted.iter().find(|(k, _)| *k == kind).map(|(_, ip)| *ip);
        let held = ipam.allocation(sw, &own).and_then(|a| a.v4);
        if held != want && held.is_some() {
            ipam.release(sw, &own);
        }
        if let Some(ip) = want
            && held != Some(ip)
        {
            ipam.allocate(sw, &own, &Request::pinned([IpAddr::V4(ip)], None))?;
        }
    }
    Ok(Ok(()))
}

/// Whether the external subnet admits the pod's namespace (`Ok(Err(_))`: it does not).
fn admits(ctx: &Context, pod: &Pod, subnet: &Subnet) -> Result<Result<(), tenancy::Refusal>> {
    let ns = pod.namespace().unwrap_or_default();
    let subnets = ctx.stores.subnets.state();
    let labels: BTreeMap<String, String> = match ctx.stores.namespaces.get(&ObjectRef::new(&ns)) {
        Some(n) => n.metadata.labels.clone().unwrap_or_default(),
        None if binding::any_selectors(&subnets) => {
            return Err(Error::NotReady(format!("namespace {ns} is not in the cache yet")));
        }
        None => BTreeMap::new(),
    };
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
    Ok(tenancy::subnet_admits(&platform, subnet, &tenant))
}

/// Pod `key`'s NAT rows and policy go, its reservations are released (the annotation removed,
/// the pod gone). Nothing to do writes nothing.
pub async fn release(ctx: &Context, key: &str) -> Result<()> {
    let router = ctx.config.cluster_router.clone();
    let nb_plan = ctx.nb.read(|cache| {
        let mut p = Plan::new();
        sync_nat(&mut p, cache, (plan::OWNER_KEY, key), None, &[], false);
        sync_policies(&mut p, cache, &router, &owner(key), &[]);
        p
    });
    if !nb_plan.is_empty() {
        ctx.nb
            .apply(nb_plan, "pod-eip-delete")
            .await
            .doing(format_args!("remove the EIP/SNAT rows of pod {key}"))?;
        tracing::info!(pod = %key, "pod EIP/SNAT removed");
    }
    let sw = &ctx.config.external.switch;
    let mut ipam = ctx.ipam();
    for k in Kind::ALL {
        ipam.release(sw, &k.ipam_key(key));
    }
    Ok(())
}

/// The reservations our NAT rows on `router` record, for the IPAM rebuild: `(subnet, IPAM key,
/// address)`, all on the external subnet `subnet` (`--external-gateway-switch`).
pub fn reserved_in_nb(cache: &DbCache, router: &str, subnet: &str) -> Vec<(String, String, Ipv4Addr)> {
    plan::owned_nats(cache, router, None)
        .into_iter()
        .filter_map(|n| {
            let key = n.external_ids.get(plan::OWNER_KEY)?;
            let kind = Kind::of_nat_type(&n.r#type)?;
            Some((subnet.to_owned(), kind.ipam_key(key), n.external_ip.parse().ok()?))
        })
        .collect()
}

/// A Warning event on the pod naming the annotation, and a log line; nothing is written.
async fn refuse(ctx: &Context, pod: &Pod, r: &Refusal) -> Result<()> {
    let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
    let note = format!("pod {key}: annotation {}: {}", r.annotation, r.why);
    tracing::warn!(pod = %key, reason = REFUSED, "{note}");
    let event = Event {
        type_: EventType::Warning,
        reason: REFUSED.into(),
        note: Some(note),
        // One series per annotation (the recorder keeps a series' first note).
        action: format!("Validate {}", r.annotation),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &pod.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
    Ok(())
}
