//! The default VPC's external gateway, from the `ovn-external-gw-config` ConfigMap (Kube-OVN's
//! `pkg/controller/external_gw.go`), run by the default VPC's reconcile whenever the ConfigMap,
//! a node's `ovn.kubernetes.io/external-gw` label or chassis, or the VPC changes (Kube-OVN polls
//! every second).
//!
//! Enabled (`enable-external-gw` not `"false"`):
//! - the gateway nodes: the nodes labelled `ovn.kubernetes.io/external-gw=true` (by name), then
//!   each `external-gw-nodes` entry not among them (not with `type: distributed`); the listed
//!   nodes are labelled `true`;
//! - router port `ovn-cluster-<switch>` with the `lrp` OvnEip `ovn-cluster-<switch>` (IPAM on
//!   Subnet `<switch>`) or `nic-ip`/`nic-mac`, patched to `<switch>-ovn-cluster`, with one
//!   Gateway_Chassis per gateway node in that order, priorities `100 - i`;
//! - the switch `<switch>` with `localnet.<switch>` (`network_name=--external-gateway-net`, `tag`
//!   when `--external-gateway-vlanid` > 0), unless Subnet `<switch>` exists: then that subnet owns
//!   the switch (Kube-OVN's underlay `external` network) and only the patch ports are ours;
//! - Vpc `ovn-cluster` `status.enableExternal: true`.
//!
//! Disabled or absent: the nodes this path labelled are labelled `false`, the patch ports go, the
//! switch too when this path made it, the lrp OvnEip is deleted; `status.enableExternal: false`.
//!
//! Bad data (a key that does not parse, a listed node that does not exist, `nic-ip` outside the
//! external subnet, no subnet to take an address from) is a Warning event on the ConfigMap naming
//! the key, and nothing is changed: the previous state stays.
//!
//! Differences from Kube-OVN (plan §3.0):
//! - the state is reconciled from what the northbound database holds, not from the last
//!   ConfigMap kept in memory: a restart writes nothing, and a changed `nic-ip` moves the port;
//! - the node list applied is recorded on the router port (`external_ids:external-gw-nodes`);
//!   a node dropped from the list, or all of them on disable, is labelled `false` — only those:
//!   Kube-OVN labels every labelled node `false`, which here would also take their gateway
//!   ports from custom VPCs (whose Gateway_Chassis follow the label, see [`super::chassis`]);
//! - Kube-OVN also writes `spec.enableExternal` of the default VPC; we write only the status
//!   (nothing here reads the spec of `ovn-cluster`, and the controller does not edit users' specs);
//! - the lrp OvnEip is deleted on disable (Kube-OVN keeps it and its address).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, Patch, PatchParams, Resource};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{Subnet, Vpc};
use kube_ovn_api::external_gw::{self as gw, ExternalGwConfig, GatewayType};
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, LogicalRouterPort, LogicalSwitch, LogicalSwitchPort};
use kube_ovn_ovsdb::{DbCache, Table};
use serde_json::json;

use super::chassis::{GatewayNode, MAX_PRIORITY};
use super::{ExternalStatus, Outcome, eip, port};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ovn::plan::{Plan, RowRef, is_owned_by, owned_ids};
use crate::ovn::topology::{ensure_localnet_port, ensure_switch, remove_router_attachment, router_port_mac};
use crate::reconcile::subnet_spec::effective;

/// Reason of the Warning events on the ConfigMap.
pub const INVALID_CONFIG: &str = "InvalidExternalGwConfig";
/// `external_ids` key on the default VPC's router port: the `external-gw-nodes` applied.
pub const NODES_ID: &str = "external-gw-nodes";
/// `external_ids` key on a switch this path made: `external-gw=<default VPC>`.
pub const SWITCH_OWNER_ID: &str = "external-gw";

/// The gateway nodes worked out (pure): the label writes and the Gateway_Chassis order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Gateways {
    /// Nodes to label `true` (listed, not labelled yet).
    pub label_true: Vec<String>,
    /// Nodes to label `false` (listed before, not now, still labelled).
    pub label_false: Vec<String>,
    /// `(chassis, priority)` in Kube-OVN's order.
    pub chassis: Vec<(String, i64)>,
    /// The list applied, recorded on the router port.
    pub applied: Vec<String>,
}

/// Why no gateway can be worked out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// Bad ConfigMap data: a listed node that does not exist.
    #[error("node {0} does not exist")]
    UnknownNode(String),
    /// Not ready (retried): no gateway node has a usable chassis yet.
    #[error("no available external gw chassis (Kube-OVN's words): {0}")]
    NoChassis(String),
}

/// The gateway nodes for `cfg` (pure). `previous` is the list applied last time; `chassis_ok`
/// says whether a chassis may host the port (known to the southbound database).
pub fn gateways(
    cfg: &ExternalGwConfig,
    nodes: &[GatewayNode],
    previous: &[String],
    chassis_ok: impl Fn(&str) -> bool,
) -> Result<Gateways, GatewayError> {
    let find = |n: &str| nodes.iter().find(|v| v.node == n);
    // Kube-OVN's `type: distributed` reads no list: the labelled nodes alone, labels untouched.
    let applied: Vec<String> = match cfg.gateway_type {
        GatewayType::Centralized => cfg.nodes.clone(),
        GatewayType::Distributed => previous.to_vec(),
    };
    for n in &cfg.nodes {
        if cfg.gateway_type == GatewayType::Centralized && find(n).is_none() {
            return Err(GatewayError::UnknownNode(n.clone()));
        }
    }
    let label_false: Vec<String> = previous
        .iter()
        .filter(|p| !applied.contains(p))
        .filter(|p| find(p).is_some_and(|v| v.labelled))
        .cloned()
        .collect();
    let label_true: Vec<String> = applied
        .iter()
        .filter(|n| find(n).is_some_and(|v| !v.labelled))
        .cloned()
        .collect();
    let mut labelled: Vec<&GatewayNode> = nodes
        .iter()
        .filter(|v| v.labelled && !label_false.contains(&v.node))
        .collect();
    labelled.sort_by(|a, b| a.node.cmp(&b.node));
    let mut order: Vec<&GatewayNode> = labelled;
    for n in &applied {
        if let Some(v) = find(n)
            && !order.iter().any(|o| o.node == *n)
        {
            order.push(v);
        }
    }
    let mut chassis: Vec<String> = Vec::new();
    let mut why = Vec::new();
    for v in &order {
        if v.chassis.is_empty() {
            why.push(format!(
                "node {} has no chassis annotation, kube-ovn-cni not ready",
                v.node
            ));
        } else if !chassis_ok(&v.chassis) {
            why.push(format!(
                "node {}'s chassis {} is not in the southbound database",
                v.node, v.chassis
            ));
        } else if !chassis.contains(&v.chassis) {
            chassis.push(v.chassis.clone());
        }
    }
    if chassis.is_empty() {
        if why.is_empty() {
            why.push(format!(
                "no node is labelled {}=true and {} lists none",
                keys::EXTERNAL_GW_LABEL,
                gw::KEY_NODES
            ));
        }
        return Err(GatewayError::NoChassis(why.join("; ")));
    }
    Ok(Gateways {
        label_true,
        label_false,
        chassis: chassis
            .into_iter()
            .zip(0i64..)
            .map(|(c, i)| (c, MAX_PRIORITY - i))
            .collect(),
        applied,
    })
}

/// The router port as it is now: its MAC, networks and the list recorded on it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Current {
    mac: String,
    nodes: Vec<String>,
}

fn current(cache: &DbCache, lrp: &str) -> Option<Current> {
    let uuid = *cache.uuids_by_name(LogicalRouterPort::NAME, lrp).first()?;
    let row = cache.get::<LogicalRouterPort>(&uuid).ok().flatten()?;
    Some(Current {
        mac: row.mac,
        nodes: row
            .external_ids
            .get(NODES_ID)
            .map(|l| {
                l.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Whether switch `name` is one this path made.
fn switch_is_ours(cache: &DbCache, name: &str, router: &str) -> bool {
    cache
        .uuids_by_name(LogicalSwitch::NAME, name)
        .first()
        .and_then(|u| cache.get::<LogicalSwitch>(u).ok().flatten())
        .is_some_and(|s| is_owned_by(&s.external_ids, &[(SWITCH_OWNER_ID, router)]))
}

/// Bad ConfigMap data: the key and why.
struct Bad {
    key: &'static str,
    why: String,
}

/// The status this path writes.
fn status(on: bool) -> Outcome {
    Outcome::Done(ExternalStatus {
        enable_external: on,
        enable_bfd: false,
        extra_external_subnets: None,
    })
}

/// The default VPC's reconcile hook (from [`super::sync`]).
pub async fn sync(ctx: &Context, vpc: &Vpc) -> Result<Outcome> {
    let settings = &ctx.config.external;
    // Kube-OVN runs this path only with --enable-eip-snat, and leaves a default VPC with
    // extraExternalSubnets to the VPC path (not built for the default VPC here).
    let extra = vpc.spec.extra_external_subnets.is_some()
        || vpc
            .status
            .as_ref()
            .is_some_and(|s| s.extra_external_subnets.is_some());
    if !settings.enable_eip_snat || extra {
        return Ok(Outcome::NotManaged);
    }
    let cm = ctx.stores.external_gw_config();
    let cfg = match &cm {
        None => None,
        Some(cm) => match ExternalGwConfig::parse(&cm.data.clone().unwrap_or_default()) {
            Ok(c) => Some(c),
            Err(e) => {
                warn_config(ctx, cm, e.key, &e.to_string()).await;
                return Ok(Outcome::NotManaged);
            }
        },
    };
    let router = ctx.config.cluster_router.clone();
    let lrp = port::lrp_name(&router, &settings.switch);
    let now = ctx.nb.read(|c| current(c, &lrp));
    match (cfg, cm) {
        (Some(cfg), Some(cm)) if cfg.enabled => match establish(ctx, &cfg, now).await? {
            Ok(()) => Ok(status(true)),
            Err(bad) => {
                warn_config(
                    ctx,
                    &cm,
                    bad.key,
                    &format!("ConfigMap {}: {}: {}", gw::CONFIG_MAP, bad.key, bad.why),
                )
                .await;
                Ok(Outcome::NotManaged)
            }
        },
        _ => {
            let was_on = vpc.status.as_ref().and_then(|s| s.enable_external) == Some(true);
            if now.is_none() && !was_on {
                // Never enabled: nothing to undo, and nothing written (a restart writes nothing).
                return Ok(Outcome::NotManaged);
            }
            remove(ctx, now).await?;
            Ok(status(false))
        }
    }
}

/// The default VPC's gateway port as `cfg` says. `Ok(Err(_))`: bad data, nothing written.
async fn establish(ctx: &Context, cfg: &ExternalGwConfig, now: Option<Current>) -> Result<Result<(), Bad>> {
    let settings = &ctx.config.external;
    let router = ctx.config.cluster_router.clone();
    let sw = settings.switch.clone();
    let lrp = port::lrp_name(&router, &sw);
    let bad = |key, why: String| Ok(Err(Bad { key, why }));

    // Validate everything first.
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
    let listed = ctx.nb.read(|cache| port::listed_chassis(cache, &lrp));
    let previous = now.as_ref().map(|c| c.nodes.clone()).unwrap_or_default();
    let gws = match gateways(
        cfg,
        &super::gateway_nodes(&ctx.stores.nodes.state()),
        &previous,
        |c| sb_chassis.as_ref().is_none_or(|sb| sb.contains(c)) || listed.contains(c),
    ) {
        Ok(g) => g,
        Err(GatewayError::UnknownNode(n)) => return bad(gw::KEY_NODES, format!("node {n} does not exist")),
        Err(e @ GatewayError::NoChassis(_)) => return Err(Error::NotReady(e.to_string())),
    };
    let subnet = ctx
        .stores
        .subnets
        .get(&ObjectRef::<Subnet>::new(&sw))
        .filter(|s| s.metadata.deletion_timestamp.is_none());
    let eff = match &subnet {
        Some(s) => {
            Some(effective(s, &router).map_err(|e| Error::NotReady(format!("external subnet {sw}: {e}")))?)
        }
        None => None,
    };
    if let Some(e) = &eff
        && e.underlay.is_none()
    {
        return bad(
            gw::KEY_ENABLE,
            format!(
                "Subnet {sw} (--external-gateway-switch) exists without spec.vlan: an overlay subnet cannot be the external network"
            ),
        );
    }
    let eip_exists = ctx.stores.ovn_eips.get(&ObjectRef::new(&lrp));
    if let Some(existing) = &eip_exists
        && let Err(why) = eip::check_existing(existing)
    {
        return bad(gw::KEY_NIC_IP, format!("empty, and {why}"));
    }
    if !cfg.nic_ip.is_empty() {
        if let Some(e) = &eff {
            for ip in &cfg.nic_ip {
                if !e
                    .cidrs
                    .iter()
                    .any(|c| c.contains(&ip.addr()) && c.prefix_len() == ip.prefix_len())
                {
                    let cidrs: Vec<String> = e.cidrs.iter().map(ToString::to_string).collect();
                    return bad(
                        gw::KEY_NIC_IP,
                        format!("{ip} is not an address of Subnet {sw} ({})", cidrs.join(",")),
                    );
                }
            }
        }
    } else if eff.is_none() {
        return bad(
            gw::KEY_NIC_IP,
            format!("empty, and there is no Subnet {sw} (--external-gateway-switch) to take an address from"),
        );
    }
    if subnet.is_some()
        && ctx
            .nb
            .read(|cache| cache.uuids_by_name(LogicalSwitch::NAME, &sw).is_empty())
    {
        return Err(Error::NotReady(format!(
            "the switch of external subnet {sw} does not exist yet"
        )));
    }

    // The address: nic-ip/nic-mac, else the lrp OvnEip.
    let (networks, mac, alloc) = if cfg.nic_ip.is_empty() {
        let eff = eff.as_ref().expect("checked above");
        let alloc = eip::ensure(ctx, &lrp, &sw).await?;
        (
            super::networks(&alloc, &eff.cidrs),
            alloc.mac.to_string(),
            Some(alloc),
        )
    } else {
        let mac = cfg
            .nic_mac
            .map(|m| m.to_string())
            .or_else(|| now.as_ref().map(|c| c.mac.clone()).filter(|m| !m.is_empty()))
            .unwrap_or_else(|| router_port_mac(&lrp).to_string());
        (cfg.nic_ip.iter().map(ToString::to_string).collect(), mac, None)
    };

    // Labels (Kube-OVN labels before it writes the port).
    label(ctx, &gws.label_true, "true").await?;
    label(ctx, &gws.label_false, "false").await?;

    let conn = port::Connection {
        vpc: router.clone(),
        subnet: sw.clone(),
        networks,
        mac,
        chassis: gws.chassis.clone(),
        extra_ids: BTreeMap::from([(NODES_ID.to_owned(), gws.applied.join(","))]),
    };
    let ours = subnet.is_none();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let lr = cache
            .uuids_by_name(LogicalRouter::NAME, &router)
            .first()
            .map(|u| RowRef::Existing(*u))
            .ok_or_else(|| Error::NotReady(format!("router {router} does not exist yet")))?;
        let ls = if ours {
            let ls = ensure_switch(
                &mut plan,
                cache,
                &sw,
                BTreeMap::new(),
                &[(SWITCH_OWNER_ID, &router)],
            );
            let localnet = LogicalSwitchPort {
                name: keys::localnet_port(&sw),
                r#type: "localnet".into(),
                addresses: vec!["unknown".into()],
                options: BTreeMap::from([("network_name".to_owned(), settings.net.clone())]),
                tag: settings.vlan_id.map(i64::from),
                external_ids: owned_ids(&[(SWITCH_OWNER_ID, &router)]),
                ..Default::default()
            };
            ensure_localnet_port(&mut plan, cache, &ls, &sw, &localnet);
            ls
        } else {
            cache
                .uuids_by_name(LogicalSwitch::NAME, &sw)
                .first()
                .map(|u| RowRef::Existing(*u))
                .ok_or_else(|| Error::NotReady(format!("switch {sw} does not exist yet")))?
        };
        port::connect(&mut plan, cache, &lr, &ls, &conn);
        Ok::<_, Error>(plan)
    })?;
    ctx.nb
        .apply(plan, "default-vpc-external")
        .await
        .doing(format_args!(
            "write the default VPC's external gateway port {lrp}"
        ))?;
    if let Some(alloc) = &alloc {
        eip::mark_ready(ctx, &lrp, alloc).await?;
    }
    tracing::info!(
        port = %lrp,
        chassis = ?gws.chassis,
        "the default VPC's external gateway is as ovn-external-gw-config says"
    );
    Ok(Ok(()))
}

/// Undoes [`establish`]: labels `false` on the nodes it listed, the patch ports, our switch, the
/// lrp OvnEip.
async fn remove(ctx: &Context, now: Option<Current>) -> Result<()> {
    let router = ctx.config.cluster_router.clone();
    let sw = ctx.config.external.switch.clone();
    let lrp = port::lrp_name(&router, &sw);
    let views = super::gateway_nodes(&ctx.stores.nodes.state());
    let unlabel: Vec<String> = now
        .as_ref()
        .map(|c| c.nodes.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| views.iter().any(|v| v.node == *n && v.labelled))
        .collect();
    label(ctx, &unlabel, "false").await?;
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        remove_router_attachment(&mut plan, cache, &router, &sw);
        if switch_is_ours(cache, &sw, &router)
            && let Some(u) = cache.uuids_by_name(LogicalSwitch::NAME, &sw).first()
        {
            plan.delete(LogicalSwitch::NAME, *u);
        }
        plan
    });
    ctx.nb
        .apply(plan, "default-vpc-external-remove")
        .await
        .doing(format_args!(
            "remove the default VPC's external gateway port {lrp}"
        ))?;
    if ctx
        .stores
        .ovn_eips
        .get(&ObjectRef::new(&lrp))
        .is_some_and(|e| super::active::is_lrp(&e))
    {
        eip::remove(ctx, &lrp, &sw).await?;
    }
    tracing::info!(port = %lrp, "the default VPC's external gateway is removed");
    Ok(())
}

/// Sets label `ovn.kubernetes.io/external-gw=<value>` on `nodes` (merge patches).
async fn label(ctx: &Context, nodes: &[String], value: &str) -> Result<()> {
    let api: Api<Node> = Api::all(ctx.kube.clone());
    for n in nodes {
        let patch = json!({"metadata": {"labels": {keys::EXTERNAL_GW_LABEL: value}}});
        match api.patch(n, &PatchParams::default(), &Patch::Merge(&patch)).await {
            Ok(_) => tracing::info!(node = %n, value, "labelled {}", keys::EXTERNAL_GW_LABEL),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                return Err(e).doing(format_args!("label node {n} {}={value}", keys::EXTERNAL_GW_LABEL));
            }
        }
    }
    Ok(())
}

/// A Warning event on the ConfigMap naming the key, and a log line.
async fn warn_config(ctx: &Context, cm: &ConfigMap, key: &str, message: &str) {
    tracing::warn!(reason = INVALID_CONFIG, key, "{message}");
    let event = Event {
        type_: EventType::Warning,
        reason: INVALID_CONFIG.into(),
        note: Some(message.to_owned()),
        // The recorder folds events of one (reason, action, object) into a series that keeps
        // the first note: per key, so a problem with another key is an event of its own.
        action: format!("Validate {key}"),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cm.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

#[cfg(test)]
mod tests;
