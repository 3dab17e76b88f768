//! Garbage collection: switch ports, IP CRs and addresses whose pod or node is gone — deleted
//! while the controller was down, or missed — and reacting to pod and node deletions as they
//! happen (a deleted object is never reconciled again, so its cleanup starts here).
//!
//! Snapshots are taken owners-last: what to collect is read first, the living owners after, so an
//! object created in between is seen alive and its fresh port is never collected.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitchPort, PortGroup};

use super::ip_cr::delete_ip;
use super::pod::{release, statefulset_of};
use crate::context::Context;
use crate::error::Result;
use crate::ovn::owned::sync_policies;
use crate::ovn::plan::{Plan, is_owned_by};
use crate::ovn::topology::remove_switch_port;

/// What one collection removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    pub ports: Vec<String>,
    pub ip_crs: Vec<String>,
    pub released: Vec<String>,
    pub nodes: Vec<String>,
}

/// Removes what belongs to pods and nodes that no longer exist.
pub async fn collect(ctx: &Context) -> Result<Collected> {
    let mut out = Collected::default();
    // 1. What might be garbage, read before the owners.
    let ports: Vec<(String, String)> = ctx.nb.read(|cache| {
        cache
            .table(LogicalSwitchPort::NAME)
            .filter_map(|(u, r)| LogicalSwitchPort::from_row(*u, r).ok())
            .filter(|p| is_owned_by(&p.external_ids, &[]))
            .filter_map(|p| Some((p.name.clone(), p.external_ids.get("pod")?.clone())))
            .collect()
    });
    let ip_crs: Vec<(String, String, String, String)> = ctx
        .stores
        .ips
        .state()
        .iter()
        .map(|ip| {
            let s = &ip.spec;
            (
                ip.name_any(),
                s.namespace.clone().unwrap_or_default(),
                s.pod_name.clone().unwrap_or_default(),
                s.pod_type.clone().unwrap_or_default(),
            )
        })
        .collect();
    let ipam_keys: Vec<(String, String)> = {
        let ipam = ctx.ipam();
        ctx.stores
            .subnets
            .state()
            .iter()
            .flat_map(|s| {
                ipam.keys(&s.name_any())
                    .into_iter()
                    .map(move |k| (s.name_any(), k))
            })
            .collect()
    };
    // 2. The owners.
    let pods: BTreeSet<String> = ctx
        .stores
        .pods
        .state()
        .iter()
        .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
        .collect();
    let sts_pods: BTreeSet<String> = ctx
        .stores
        .ips
        .state()
        .iter()
        .filter(|ip| ip.spec.pod_type.as_deref() == Some("StatefulSet"))
        .map(|ip| ip.name_any())
        .collect();
    let nodes: BTreeSet<String> = ctx.stores.nodes.state().iter().map(|n| n.name_any()).collect();
    let live_pod_keys: BTreeSet<String> = ctx
        .stores
        .pods
        .state()
        .iter()
        .map(|p| names::pod_port_name(&p.name_any(), &p.namespace().unwrap_or_default(), "ovn"))
        .collect();

    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for (port, pod) in &ports {
            if !pods.contains(pod) {
                remove_switch_port(&mut plan, cache, port);
                out.ports.push(port.clone());
            }
        }
        plan
    });
    ctx.nb.apply(plan, "gc-ports").await?;
    for (name, ns, pod, pod_type) in &ip_crs {
        if let Some(node) = name.strip_prefix("node-") {
            if ns.is_empty() && !nodes.contains(node) {
                delete_ip(ctx, name).await?;
                out.ip_crs.push(name.clone());
            }
            continue;
        }
        // A StatefulSet pod's address is kept for its successor of the same name.
        if pod_type == "StatefulSet" || pod.is_empty() || pods.contains(&format!("{ns}/{pod}")) {
            continue;
        }
        delete_ip(ctx, name).await?;
        out.ip_crs.push(name.clone());
    }
    {
        let mut ipam = ctx.ipam();
        for (subnet, key) in &ipam_keys {
            let alive = match key.strip_prefix("node-") {
                Some(node) => nodes.contains(node),
                None => live_pod_keys.contains(key) || sts_pods.contains(key),
            };
            if !alive && ipam.release(subnet, key).is_some() {
                out.released.push(key.clone());
            }
        }
    }
    let gone_nodes: Vec<String> = ctx.nb.read(|cache| {
        cache
            .table(PortGroup::NAME)
            .filter_map(|(u, r)| PortGroup::from_row(*u, r).ok())
            .filter_map(|pg| pg.external_ids.get("node").cloned())
            .filter(|n| !nodes.contains(n))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect()
    });
    for node in gone_nodes {
        node_gone(ctx, &node).await?;
        out.nodes.push(node);
    }
    if out != Collected::default() {
        tracing::info!(
            ports = out.ports.len(),
            ip_crs = out.ip_crs.len(),
            released = out.released.len(),
            nodes = out.nodes.len(),
            "garbage collected"
        );
    }
    Ok(out)
}

/// A node is gone: its join address, port, policies, port groups and IP CR.
pub async fn node_gone(ctx: &Context, node: &str) -> Result<()> {
    let port = names::node_port_name(node);
    let router = ctx.config.cluster_router.clone();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        remove_switch_port(&mut plan, cache, &port);
        sync_policies(&mut plan, cache, &router, &[("node", node)], &[]);
        for (u, r) in cache.table(PortGroup::NAME) {
            if PortGroup::from_row(*u, r)
                .is_ok_and(|pg| pg.external_ids.get("node").is_some_and(|n| n == node))
            {
                plan.delete(PortGroup::NAME, *u);
            }
        }
        plan
    });
    ctx.nb.apply(plan, "node-delete").await?;
    delete_ip(ctx, &port).await?;
    ctx.ipam().release_everywhere(&port);
    Ok(())
}

/// Cleans up after pods and nodes as their deletions arrive.
pub async fn watch_deletions(ctx: Arc<Context>) {
    let pods = watcher::watcher(Api::<Pod>::all(ctx.kube.clone()), watcher::Config::default()).boxed();
    let nodes = watcher::watcher(Api::<Node>::all(ctx.kube.clone()), watcher::Config::default()).boxed();
    let c1 = ctx.clone();
    let pods = pods.try_for_each(move |event| {
        let ctx = c1.clone();
        async move {
            if let Event::Delete(pod) = event
                && pod.spec.as_ref().and_then(|s| s.host_network) != Some(true)
                && let Err(e) = release(&ctx, &pod.namespace().unwrap_or_default(), &pod.name_any(), statefulset_of(&pod).is_some()).await
            {
                tracing::warn!(pod = %pod.name_any(), error = %e, "cleanup after pod deletion failed; the collector will retry");
            }
            Ok(())
        }
    });
    let c2 = ctx.clone();
    let nodes = nodes.try_for_each(move |event| {
        let ctx = c2.clone();
        async move {
            if let Event::Delete(node) = event
                && let Err(e) = node_gone(&ctx, &node.name_any()).await
            {
                tracing::warn!(node = %node.name_any(), error = %e, "cleanup after node deletion failed; the collector will retry");
            }
            Ok(())
        }
    });
    let (a, b) = futures::join!(pods, nodes);
    for r in [a, b] {
        if let Err(e) = r {
            tracing::warn!(error = %e, "deletion watch ended");
        }
    }
}
