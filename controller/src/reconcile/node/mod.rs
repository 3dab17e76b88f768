//! Nodes: a join-subnet address and switch port `node-<node>` for the node's `ovn0`, the
//! priority-30000 policy that sends traffic for the node's own address to it, the node port group
//! `node.<node>`, an IP CR, and the annotations the node daemon waits for.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube_ovn_api::annotations::{IpPair, MacAddr, get, is_true, keys};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::{Allocation, Request};
use crate::ovn::owned::{Claim, Parent, PolicySpec, sync_acls, sync_policies};
use crate::ovn::plan::{Plan, RowRef, owned_ids};
use crate::ovn::priority::POLICY_NODE;
use crate::ovn::topology::{add_to_port_group, ensure_port_group, ensure_switch_port};
use crate::reconcile::ip::record::{IpRecord, upsert_ip};
use crate::reconcile::node_state::internal_ips;

pub const KIND: &str = "Node";

/// What the node asked for before (its annotations), so a restart keeps its join address.
fn request_of(node: &Node) -> Request {
    let ann = node.metadata.annotations.as_ref();
    if !is_true(ann, keys::ALLOCATED) {
        return Request::default();
    }
    let ips = get::<IpPair>(ann, keys::IP_ADDRESS).ok().flatten();
    let mac = get::<MacAddr>(ann, keys::MAC_ADDRESS).ok().flatten();
    Request::pinned(ips.iter().flat_map(IpPair::addrs), mac)
}

pub async fn reconcile(node: Arc<Node>, ctx: Arc<Context>) -> Result<Action> {
    let name = node.name_any();
    let join = ctx.config.node_subnet.name.clone();
    let port = names::node_port_name(&name);
    let join_ready = ctx
        .nb
        .read(|c| !c.uuids_by_name(LogicalSwitch::NAME, &join).is_empty());
    if !ctx.ipam().has_subnet(&join) || !join_ready {
        return Err(Error::NotReady(format!("join subnet {join} is not ready")));
    }
    let alloc = {
        let mut ipam = ctx.ipam();
        match ipam.allocate(&join, &port, &request_of(&node)) {
            Ok(a) => a,
            // The annotated address is taken (or outside a changed CIDR): take a fresh one.
            Err(_) => ipam.allocate(&join, &port, &Request::default())?,
        }
    };
    let router = ctx.config.cluster_router.clone();
    let node_ips = internal_ips(&node);
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let ls = cache
            .uuids_by_name(LogicalSwitch::NAME, &join)
            .first()
            .map(|u| RowRef::Existing(*u))
            .ok_or_else(|| Error::NotReady(format!("logical switch {join} does not exist yet")))?;
        let addresses = format!(
            "{} {}",
            alloc.mac,
            alloc.addrs().map(|a| a.to_string()).collect::<Vec<_>>().join(" ")
        );
        let lsp = LogicalSwitchPort {
            name: port.clone(),
            addresses: vec![addresses],
            external_ids: owned_ids(&[("node", name.as_str())]),
            ..Default::default()
        };
        let lsp_ref = ensure_switch_port(&mut plan, cache, &ls, &join, &lsp, &["addresses", "external_ids"]);
        let pg_name = names::node_port_group(&name);
        let pg = ensure_port_group(
            &mut plan,
            cache,
            &pg_name,
            &[("node", name.as_str()), ("np", &format!("node/{name}"))],
        );
        add_to_port_group(&mut plan, cache, &pg, &pg_name, &lsp_ref);
        // The node's own addresses always reach its pods, whatever the policies (priority 3000).
        let node_ids = owned_ids(&[("node", name.as_str())]);
        let acls: Vec<_> = crate::reconcile::network_policy::plan::node_acls(&name, &node_ips)
            .into_iter()
            .map(|a| (a, node_ids.clone()))
            .collect();
        let created = pg.existing().is_none().then(|| pg.clone());
        sync_acls(
            &mut plan,
            cache,
            Parent::PortGroup(&pg_name),
            created,
            Claim::Owner(&[("node", name.as_str())]),
            &acls,
        );
        let mut policies = Vec::new();
        for node_ip in &node_ips {
            let Some(join_ip) = alloc.addrs().find(|a| a.is_ipv4() == node_ip.is_ipv4()) else {
                continue;
            };
            let v = if node_ip.is_ipv4() { "ip4" } else { "ip6" };
            policies.push(PolicySpec {
                priority: POLICY_NODE,
                r#match: format!("{v}.dst == {node_ip}"),
                action: "reroute".into(),
                nexthops: vec![join_ip.to_string()],
            });
        }
        sync_policies(&mut plan, cache, &router, &[("node", name.as_str())], &policies);
        Ok::<_, Error>(plan)
    })?;
    ctx.nb
        .apply(plan, "node")
        .await
        .doing(format_args!("write the port and policies of node {name}"))?;
    upsert_ip(
        &ctx,
        &IpRecord {
            name: &port,
            pod: &name,
            namespace: "",
            subnet: &join,
            node: &name,
            alloc: &alloc,
            pod_type: "",
        },
    )
    .await?;
    annotate(&ctx, &node, &alloc).await?;
    Ok(Action::await_change())
}

async fn annotate(ctx: &Context, node: &Node, alloc: &Allocation) -> Result<()> {
    let join = &ctx.config.node_subnet;
    let eff_gw = ctx
        .stores
        .subnets
        .get(&kube::runtime::reflector::ObjectRef::new(&join.name))
        .and_then(|s| s.spec.gateway.clone())
        .unwrap_or_else(|| join.gateway());
    let ips = alloc.addrs().map(|a| a.to_string()).collect::<Vec<_>>().join(",");
    let want: BTreeMap<&str, String> = BTreeMap::from([
        (keys::IP_ADDRESS, ips),
        (keys::MAC_ADDRESS, alloc.mac.to_string()),
        (keys::CIDR, join.cidr_block()),
        (keys::GATEWAY, eff_gw),
        (keys::LOGICAL_SWITCH, join.name.clone()),
        (keys::ALLOCATED, "true".into()),
        (keys::PORT_NAME, names::node_port_name(&node.name_any())),
    ]);
    let have = node.metadata.annotations.clone().unwrap_or_default();
    if want.iter().all(|(k, v)| have.get(*k) == Some(v)) {
        return Ok(());
    }
    let api: Api<Node> = Api::all(ctx.kube.clone());
    api.patch(
        &node.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": want}})),
    )
    .await
    .doing(format_args!("patch the annotations of node {}", node.name_any()))?;
    Ok(())
}
