//! VPCs' external gateways (issue 26): `Vpc.spec.enableExternal` and `extraExternalSubnets`
//! connect a custom VPC's router to external subnets, `enableBfd` adds OVN BFD toward the
//! physical gateway, and the southbound database says which node holds each gateway port.
//!
//! ```text
//!   Vpc reconcile ─▶ sync(): validate all (subnets, gateway nodes, lrp EIP names)
//!                    ─▶ lrp OvnEip <vpc>-<subnet> (IPAM on the subnet)       eip.rs
//!                    ─▶ one NB transaction: LRP <vpc>-<subnet>, LSP <subnet>-<vpc>,
//!                       Gateway_Chassis (order, priorities)                  port.rs, chassis.rs
//!                       BFD rows                                             bfd.rs
//!                    ─▶ lrp EIP status; disconnected subnets' EIPs deleted
//!   SB cr-<lrp> chassis, Nodes' chassis annotations, lrp EIPs
//!                    ─▶ lrp OvnEip status.activateGateway                    active.rs
//!   Nodes' external-gw label / chassis, external Subnets, SB chassis set
//!                    ─▶ the VPCs with enableExternal                         triggers.rs
//!   GC: BFD rows and switch ports of VPCs that are gone                      gc.rs
//! ```
//!
//! Kube-OVN's behaviour is kept (names, priorities, order, statuses) with these differences
//! (plan §3.0): the Gateway_Chassis rows are reconciled, not only added (a node that loses the
//! label loses its row, priorities follow the current order); the switch port has
//! `options:nat-addresses=router` (gratuitous ARPs from the chassis that takes the port over);
//! bad input (no external subnet, no gateway node) is refused whole, with a condition and a
//! Warning event naming the field, and nothing of the connection is written; no default route is
//! added (as Kube-OVN: users write `staticRoutes: 0.0.0.0/0 → <external gateway>`).
//!
//! The default VPC (`ovn-cluster`) is connected by the `ovn-external-gw-config` ConfigMap instead
//! (Kube-OVN's `external_gw.go`): [`sync`] hands it to [`default_vpc`], which builds its
//! connection with [`port::connect`] in Kube-OVN's order for that path.

pub mod active;
pub mod bfd;
pub mod chassis;
pub mod default_vpc;
pub mod eip;
pub mod gc;
pub mod port;
pub mod triggers;

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{Subnet, Vpc, VpcSpec};
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, LogicalSwitch};

use crate::config::external::ExternalSettings;
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::Allocation;
use crate::ovn::plan::{Plan, RowRef};
use crate::reconcile::subnet_spec::effective;
use chassis::GatewayNode;

/// Condition reason and Warning: an external subnet the VPC asks for does not exist.
pub const EXTERNAL_SUBNET_NOT_FOUND: &str = "ExternalSubnetNotFound";
/// Condition reason and Warning: no node can be the VPC's gateway chassis.
pub const NO_EXTERNAL_GATEWAY_NODE: &str = "NoExternalGatewayNode";
/// Condition reason and Warning: an OvnEip of the lrp EIP's name exists and is not an lrp EIP.
pub const LRP_EIP_CONFLICT: &str = "LrpEipConflict";

/// The VPC status fields this part writes (Kube-OVN: `enableExternal`, `enableBfd` mirror the
/// spec; `extraExternalSubnets` is the sorted spec list while external is on, else absent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalStatus {
    pub enable_external: bool,
    pub enable_bfd: bool,
    pub extra_external_subnets: Option<Vec<String>>,
}

/// Bad input, refused before anything was written: the condition's reason and the message
/// (`Vpc <name>: spec.<field>: …`); the OVN NAT objects' refusal, and [`warn`] their Warning.
pub use super::ovn_nat::validate::Refusal;
pub use super::ovn_nat::warn;

/// What [`sync`] concluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Nothing for this part to write: its status fields are untouched (the default VPC with no
    /// ConfigMap ever applied, or with bad ConfigMap data, which keeps the previous state).
    NotManaged,
    Done(ExternalStatus),
    Refused(Refusal),
}

/// The external subnets VPC `spec` wants (pure): none unless `enableExternal`; the
/// `extraExternalSubnets` when given (Kube-OVN: then not the default one too), else
/// `--external-gateway-switch`.
pub fn wanted_subnets(spec: &VpcSpec, settings: &ExternalSettings) -> Vec<String> {
    if spec.enable_external != Some(true) {
        return Vec::new();
    }
    let mut extra: Vec<String> = spec
        .extra_external_subnets
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect();
    extra.sort();
    extra.dedup();
    if extra.is_empty() {
        vec![settings.switch.clone()]
    } else {
        extra
    }
}

/// The status fields for `spec` (pure).
pub fn status_for(spec: &VpcSpec) -> ExternalStatus {
    let enabled = spec.enable_external == Some(true);
    let extra = spec.extra_external_subnets.clone().map(|mut v| {
        v.sort();
        v
    });
    ExternalStatus {
        enable_external: enabled,
        enable_bfd: spec.enable_bfd == Some(true),
        extra_external_subnets: extra.filter(|_| enabled),
    }
}

/// The subnets a VPC may still be connected to: our router ports in the northbound database,
/// and what its status says was connected (ports Kube-OVN made carry no subnet in their ids).
fn connected(ctx: &Context, vpc: &Vpc) -> BTreeSet<String> {
    let name = vpc.name_any();
    let mut out = ctx.nb.read(|cache| port::connected(cache, &name));
    if let Some(status) = &vpc.status {
        if status.enable_external == Some(true) {
            out.insert(ctx.config.external.switch.clone());
        }
        out.extend(status.extra_external_subnets.clone().unwrap_or_default());
    }
    out
}

/// Nodes as the choice of gateway chassis sees them.
pub(super) fn gateway_nodes(nodes: &[std::sync::Arc<Node>]) -> Vec<GatewayNode> {
    nodes
        .iter()
        .map(|n| GatewayNode {
            node: n.name_any(),
            chassis: n.annotations().get(keys::CHASSIS).cloned().unwrap_or_default(),
            labelled: n.metadata.deletion_timestamp.is_none()
                && n.labels()
                    .get(keys::EXTERNAL_GW_LABEL)
                    .is_some_and(|v| v == "true"),
        })
        .collect()
}

/// One external subnet, checked.
struct Target {
    subnet: String,
    cidrs: Vec<ipnet::IpNet>,
    /// The subnet's IPv4 gateway (the BFD peer).
    gateway_v4: Option<IpAddr>,
    chassis: Vec<(String, i64)>,
}

/// Everything checked before anything is written: each subnet exists, its switch and IPAM entry
/// are there (else not ready yet), gateway chassis exist, and no foreign OvnEip holds an lrp
/// EIP's name.
fn validate(
    ctx: &Context,
    vpc: &str,
    spec: &VpcSpec,
    wanted: &[String],
) -> Result<Result<Vec<Target>, Refusal>> {
    // Nothing asked for: nothing to check (neither the flag nor the southbound database may hold
    // up a VPC without an external gateway).
    if wanted.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let settings = &ctx.config.external;
    let field = if spec
        .extra_external_subnets
        .as_ref()
        .is_some_and(|v| v.iter().any(|s| !s.is_empty()))
    {
        "spec.extraExternalSubnets"
    } else {
        "spec.enableExternal"
    };
    let refuse = |reason, why: String| {
        Ok(Err(Refusal {
            reason,
            message: format!("Vpc {vpc}: {field}: {why}"),
        }))
    };
    if !settings.enable_eip_snat {
        return refuse(
            EXTERNAL_SUBNET_NOT_FOUND,
            "external gateways are off (--enable-eip-snat=false)".to_owned(),
        );
    }
    let sb_chassis = if ctx.sb.is_configured() {
        if !ctx.sb.is_synced() {
            return Err(Error::NotReady(
                "the southbound database is not in sync yet (gateway chassis unknown)".into(),
            ));
        }
        Some(ctx.sb.chassis_names())
    } else {
        None
    };
    let nodes = gateway_nodes(&ctx.stores.nodes.state());
    let mut targets = Vec::new();
    for subnet in wanted {
        let found = ctx
            .stores
            .subnets
            .get(&ObjectRef::<Subnet>::new(subnet))
            .filter(|s| s.metadata.deletion_timestamp.is_none());
        let Some(found) = found else {
            return refuse(
                EXTERNAL_SUBNET_NOT_FOUND,
                format!(
                    "external subnet {subnet} does not exist (Kube-OVN: failed to get external subnet for enable external vpc {vpc})"
                ),
            );
        };
        let eff = effective(&found, &ctx.config.cluster_router)
            .map_err(|e| Error::NotReady(format!("external subnet {subnet}: {e}")))?;
        let lrp = port::lrp_name(vpc, subnet);
        if let Some(existing) = ctx.stores.ovn_eips.get(&ObjectRef::new(&lrp))
            && let Err(why) = eip::check_existing(&existing)
        {
            return refuse(LRP_EIP_CONFLICT, why);
        }
        let listed = ctx.nb.read(|cache| port::listed_chassis(cache, &lrp));
        let candidates = match chassis::candidates(&nodes, sb_chassis.as_ref(), &listed) {
            Ok(c) => c,
            Err(why) => return refuse(NO_EXTERNAL_GATEWAY_NODE, why.to_string()),
        };
        if ctx
            .nb
            .read(|cache| cache.uuids_by_name(LogicalSwitch::NAME, subnet).is_empty())
        {
            return Err(Error::NotReady(format!(
                "the switch of external subnet {subnet} does not exist yet"
            )));
        }
        targets.push(Target {
            subnet: subnet.clone(),
            cidrs: eff.cidrs.clone(),
            gateway_v4: eff.gateways.iter().find(|g| g.is_ipv4()).copied(),
            chassis: chassis::order(vpc, &candidates),
        });
    }
    Ok(Ok(targets))
}

/// `<address>/<prefix>` per address of the allocation, the prefix of the subnet's CIDR of that
/// family (Kube-OVN's `GetIPAddrWithMask`).
pub fn networks(alloc: &Allocation, cidrs: &[ipnet::IpNet]) -> Vec<String> {
    alloc
        .addrs()
        .filter_map(|a| {
            cidrs
                .iter()
                .find(|c| c.addr().is_ipv4() == a.is_ipv4())
                .map(|c| format!("{a}/{}", c.prefix_len()))
        })
        .collect()
}

/// The VPC reconciler's hook: connects VPC `vpc` (whose router exists) to the external subnets
/// its spec asks for and disconnects it from the others. Refused input writes nothing.
pub async fn sync(ctx: &Context, vpc: &Vpc) -> Result<Outcome> {
    let name = vpc.name_any();
    if name == ctx.config.cluster_router {
        return default_vpc::sync(ctx, vpc).await;
    }
    let settings = &ctx.config.external;
    let wanted = wanted_subnets(&vpc.spec, settings);
    let stale: Vec<String> = connected(ctx, vpc)
        .into_iter()
        .filter(|s| !wanted.contains(s))
        .collect();
    let targets = match validate(ctx, &name, &vpc.spec, &wanted)? {
        Ok(t) => t,
        Err(refusal) => return Ok(Outcome::Refused(refusal)),
    };
    let mut connections = Vec::new();
    for t in &targets {
        let lrp = port::lrp_name(&name, &t.subnet);
        let alloc = eip::ensure(ctx, &lrp, &t.subnet).await?;
        connections.push((
            port::Connection {
                vpc: name.clone(),
                subnet: t.subnet.clone(),
                networks: networks(&alloc, &t.cidrs),
                mac: alloc.mac.to_string(),
                chassis: t.chassis.clone(),
                extra_ids: std::collections::BTreeMap::new(),
            },
            alloc,
        ));
    }
    // BFD toward the default external subnet's gateway (Kube-OVN: only that subnet's).
    let bfd_rows: Vec<_> = targets
        .iter()
        .filter(|t| vpc.spec.enable_bfd == Some(true) && t.subnet == settings.switch)
        .filter_map(|t| {
            let peer = t.gateway_v4?;
            Some(bfd::row(
                &name,
                &port::lrp_name(&name, &t.subnet),
                peer,
                settings.bfd,
            ))
        })
        .collect();
    let ports: Vec<String> = wanted
        .iter()
        .chain(&stale)
        .map(|s| port::lrp_name(&name, s))
        .collect();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let router = cache
            .uuids_by_name(LogicalRouter::NAME, &name)
            .first()
            .map(|u| RowRef::Existing(*u))
            .ok_or_else(|| Error::NotReady(format!("router {name} does not exist yet")))?;
        for (c, _) in &connections {
            let switch = cache
                .uuids_by_name(LogicalSwitch::NAME, &c.subnet)
                .first()
                .map(|u| RowRef::Existing(*u))
                .ok_or_else(|| Error::NotReady(format!("switch {} does not exist yet", c.subnet)))?;
            port::connect(&mut plan, cache, &router, &switch, c);
        }
        for subnet in &stale {
            port::disconnect(&mut plan, cache, &name, subnet);
        }
        bfd::sync(&mut plan, cache, &name, &ports, &bfd_rows);
        Ok::<_, Error>(plan)
    })?;
    ctx.nb
        .apply(plan, "vpc-external")
        .await
        .doing(format_args!("write the external gateway ports of VPC {name}"))?;
    for (c, alloc) in &connections {
        eip::mark_ready(ctx, &port::lrp_name(&name, &c.subnet), alloc).await?;
    }
    for subnet in &stale {
        eip::remove(ctx, &port::lrp_name(&name, subnet), subnet).await?;
    }
    Ok(Outcome::Done(status_for(&vpc.spec)))
}

/// VPC `vpc` is being deleted: its external ports, BFD rows and lrp EIPs go (before its router).
pub async fn disconnect_all(ctx: &Context, vpc: &Vpc) -> Result<()> {
    let name = vpc.name_any();
    if name == ctx.config.cluster_router {
        return Ok(());
    }
    let stale: Vec<String> = connected(ctx, vpc).into_iter().collect();
    let ports: Vec<String> = stale.iter().map(|s| port::lrp_name(&name, s)).collect();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for subnet in &stale {
            port::disconnect(&mut plan, cache, &name, subnet);
        }
        bfd::sync(&mut plan, cache, &name, &ports, &[]);
        plan
    });
    ctx.nb
        .apply(plan, "vpc-external-delete")
        .await
        .doing(format_args!("remove the external gateway ports of VPC {name}"))?;
    for subnet in &stale {
        eip::remove(ctx, &port::lrp_name(&name, subnet), subnet).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ExternalSettings {
        ExternalSettings {
            switch: "external".into(),
            net: "external".into(),
            vlan_id: None,
            config_ns: "kube-system".into(),
            enable_eip_snat: true,
            bfd: crate::config::external::BfdTimers {
                min_tx: 100,
                min_rx: 100,
                detect_mult: 3,
            },
        }
    }

    fn spec(v: serde_json::Value) -> VpcSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn wanted_subnets_are_kube_ovns() {
        let s = settings();
        assert!(wanted_subnets(&spec(serde_json::json!({})), &s).is_empty());
        assert_eq!(
            wanted_subnets(&spec(serde_json::json!({"enableExternal": true})), &s),
            ["external"]
        );
        assert_eq!(
            wanted_subnets(
                &spec(serde_json::json!({"enableExternal": true, "extraExternalSubnets": ["b", "a", "b"]})),
                &s
            ),
            ["a", "b"],
            "the extra subnets instead of the default one"
        );
        assert!(
            wanted_subnets(
                &spec(serde_json::json!({"enableExternal": false, "extraExternalSubnets": ["a"]})),
                &s
            )
            .is_empty()
        );
    }

    #[test]
    fn status_mirrors_the_spec_and_lists_extra_subnets_only_when_on() {
        let on = status_for(&spec(
            serde_json::json!({"enableExternal": true, "enableBfd": true, "extraExternalSubnets": ["b", "a"]}),
        ));
        assert_eq!(
            on,
            ExternalStatus {
                enable_external: true,
                enable_bfd: true,
                extra_external_subnets: Some(vec!["a".into(), "b".into()]),
            }
        );
        let off = status_for(&spec(serde_json::json!({"extraExternalSubnets": ["a"]})));
        assert_eq!(off.extra_external_subnets, None);
        assert!(!off.enable_external && !off.enable_bfd);
    }

    #[test]
    fn networks_carry_the_subnets_prefix_per_family() {
        let alloc = Allocation {
            v4: Some("10.200.0.100".parse().unwrap()),
            v6: Some("fd00:200::64".parse().unwrap()),
            mac: kube_ovn_api::annotations::MacAddr([0, 0, 0, 1, 2, 3]),
            pool: String::new(),
        };
        let cidrs = [
            "10.200.0.0/24".parse().unwrap(),
            "fd00:200::/120".parse().unwrap(),
        ];
        assert_eq!(networks(&alloc, &cidrs), ["10.200.0.100/24", "fd00:200::64/120"]);
    }
}
