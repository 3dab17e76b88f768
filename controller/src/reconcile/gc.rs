//! Garbage collection: switch ports, IP CRs and addresses whose pod or node is gone — deleted
//! while the controller was down (the collection at start finds those) — and reacting to
//! deletions as they happen (a deleted object is never reconciled again, so its cleanup starts
//! here): pods and nodes as they leave the reconcilers' caches ([`crate::informer`]: a watch
//! `Delete`, or missing from a relist), and StatefulSets (scaled down or deleted after their pods
//! went, so the addresses kept for them go too). Between them, a pod deleted at any moment is
//! released once: gone before the caches listed at start, the start-up collection finds it;
//! gone after, its departure does.
//!
//! Snapshots are taken owners-last: what to collect is read first, the living owners after, so an
//! object created in between is seen alive and its fresh port is never collected. Each pod key is
//! then collected under its lock, after checking once more that no pod of that name lives — a
//! successor of the same name may have taken the key meanwhile. Kube-OVN's collector keys ports
//! and IP CRs off the pod too, but misses IP CRs whose subnet still exists (its issue #5688) and
//! addresses held only in IPAM; here every record and IPAM entry is checked (reference §7.3).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube_ovn_api::crd::Ip;
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitchPort, PortGroup};
use kube_ovn_support::Watch;

use super::ip::record::{delete_ip, is_reserved};
use super::pod::{deleted, release_key};
use super::pod_state::is_alive;
use super::statefulset;
use crate::context::Context;
use crate::error::{Doing, Result};
use crate::informer::Changes;
use crate::ovn::owned::sync_policies;
use crate::ovn::plan::{Plan, is_owned_by};
use crate::ovn::topology::remove_switch_port;

/// What one collection removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Collected {
    pub ports: Vec<String>,
    pub released: Vec<String>,
    pub ip_crs: Vec<String>,
    pub nodes: Vec<String>,
    /// VPCs whose external gateway rows were left behind.
    pub vpcs: Vec<String>,
}

/// The live, non-host-network pod a NIC key `<pod>.<ns>` belongs to (namespace names have no
/// dots, so the last one splits).
fn alive(ctx: &Context, key: &str) -> bool {
    let Some((name, ns)) = key.rsplit_once('.') else {
        return false;
    };
    ctx.stores
        .pods
        .get(&ObjectRef::new(name).within(ns))
        .is_some_and(|p| is_alive(&p) && p.spec.as_ref().and_then(|s| s.host_network) != Some(true))
}

/// Whether a gone pod's address is kept: reserved by a user, or wanted by its StatefulSet.
fn kept(ip: Option<&Ip>, statefulsets: &BTreeMap<(String, String), StatefulSet>) -> bool {
    let Some(ip) = ip else {
        return false;
    };
    if is_reserved(ip) {
        return ip.metadata.deletion_timestamp.is_none();
    }
    if ip.spec.pod_type.as_deref() != Some("StatefulSet") {
        return false;
    }
    let (pod, ns) = (
        ip.spec.pod_name.clone().unwrap_or_default(),
        ip.spec.namespace.clone().unwrap_or_default(),
    );
    statefulset::owner_from_pod_name(&pod).is_some_and(|owner| {
        let sts = statefulsets.get(&(ns, owner.name.clone()));
        statefulset::wants(sts, &owner, &pod)
    })
}

/// Removes what belongs to pods and nodes that no longer exist.
pub async fn collect(ctx: &Context) -> Result<Collected> {
    let mut out = Collected::default();
    let join = ctx.config.node_subnet.name.clone();
    // 1. What might be garbage, read before the owners.
    let (pod_ports, node_ports): (Vec<String>, Vec<String>) = ctx.nb.read(|cache| {
        let ports: Vec<LogicalSwitchPort> = cache
            .table(LogicalSwitchPort::NAME)
            .filter_map(|(u, r)| LogicalSwitchPort::from_row(*u, r).ok())
            .filter(|p| is_owned_by(&p.external_ids, &[]))
            .collect();
        (
            ports
                .iter()
                .filter(|p| p.external_ids.contains_key("pod"))
                .map(|p| p.name.clone())
                .collect(),
            ports
                .iter()
                .filter_map(|p| p.external_ids.get("node").cloned())
                .collect(),
        )
    });
    let ip_crs: Vec<Arc<Ip>> = ctx.stores.ips.state();
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
    let nodes: BTreeSet<String> = ctx.stores.nodes.state().iter().map(|n| n.name_any()).collect();
    let statefulsets: BTreeMap<(String, String), StatefulSet> = Api::<StatefulSet>::all(ctx.kube.clone())
        .list(&ListParams::default())
        .await
        .doing("list StatefulSets")?
        .items
        .into_iter()
        .map(|s| ((s.namespace().unwrap_or_default(), s.name_any()), s))
        .collect();

    // 3. Pod keys: a join-subnet entry is a node's, anything else a pod NIC's.
    let is_node_ip = |ip: &Ip| {
        ip.spec.subnet.as_deref() == Some(join.as_str())
            && ip.spec.namespace.as_deref().unwrap_or_default().is_empty()
    };
    let mut candidates: BTreeSet<String> = pod_ports.into_iter().collect();
    candidates.extend(ip_crs.iter().filter(|ip| !is_node_ip(ip)).map(|ip| ip.name_any()));
    candidates.extend(
        ipam_keys
            .iter()
            .filter(|(s, _)| *s != join)
            // A pod's EIP/SNAT reservation is its pod's: released with it (pod_eip).
            .map(|(_, k)| {
                crate::reconcile::pod_eip::plan::pod_key_of(k)
                    .unwrap_or(k)
                    .to_owned()
            }),
    );
    // A subnet's U2O interconnection address belongs to the subnet, not to a pod.
    candidates.retain(|k| !alive(ctx, k) && !crate::reconcile::subnet::u2o::is_u2o_key(k));
    // An OvnEip's address is the EIP's (released when the EIP goes), not a pod's.
    candidates.retain(|k| !super::ovn_nat::gc::is_eip_key(ctx, k));
    for key in candidates {
        let _lock = ctx.pod_locks.lock(&key).await;
        if alive(ctx, &key) {
            continue;
        }
        let ip = ctx.stores.ips.get(&ObjectRef::new(&key));
        let keep = kept(ip.as_deref(), &statefulsets);
        let done = release_key(ctx, &key, keep).await?;
        if done.port {
            out.ports.push(key.clone());
        }
        if !keep && ip.is_some() {
            out.ip_crs.push(key.clone());
        }
        if done.address {
            out.released.push(key);
        }
    }

    // 4. Nodes: their IP CRs, join addresses, ports, groups and policies.
    let mut gone_nodes: BTreeSet<String> = node_ports.into_iter().filter(|n| !nodes.contains(n)).collect();
    gone_nodes.extend(ctx.nb.read(|cache| {
        cache
            .table(PortGroup::NAME)
            .filter_map(|(u, r)| PortGroup::from_row(*u, r).ok())
            .filter_map(|pg| pg.external_ids.get("node").cloned())
            .filter(|n| !nodes.contains(n))
            .collect::<Vec<_>>()
    }));
    for ip in ip_crs.iter().filter(|ip| is_node_ip(ip)) {
        let node = ip.spec.pod_name.clone().unwrap_or_default();
        if !nodes.contains(&node) && ip.name_any() == names::node_port_name(&node) {
            gone_nodes.insert(node);
        }
    }
    {
        let ipam = ctx.ipam();
        for key in ipam.keys(&join) {
            if let Some(node) = key.strip_prefix("node-")
                && !nodes.contains(node)
            {
                gone_nodes.insert(node.to_owned());
            }
        }
    }
    for node in gone_nodes {
        // Read the node again: it may have been created since the snapshot.
        if ctx.stores.nodes.get(&ObjectRef::new(&node)).is_some() {
            continue;
        }
        node_gone(ctx, &node).await?;
        out.nodes.push(node);
    }
    // VPCs' external gateway rows whose VPC is gone (their own module).
    out.vpcs = super::external::gc::collect(ctx).await?;
    // 5. OVN NAT rows and DNAT load balancers of rules that are gone.
    super::ovn_nat::gc::collect(ctx).await?;
    if out != Collected::default() {
        tracing::info!(
            vpcs = out.vpcs.len(),
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
    ctx.nb
        .apply(plan, "node-delete")
        .await
        .doing(format_args!("remove the rows of node {node}"))?;
    delete_ip(ctx, &port).await?;
    let join = ctx.config.node_subnet.name.clone();
    ctx.ipam().release(&join, &port);
    Ok(())
}

/// A StatefulSet changed or went: the addresses kept for its pods that are gone and that it no
/// longer wants (scaled below their ordinal, or deleted) are released.
async fn statefulset_changed(ctx: &Context, sts: &StatefulSet) -> Result<()> {
    let ns = sts.namespace().unwrap_or_default();
    let name = sts.name_any();
    let kept: Vec<Arc<Ip>> = ctx
        .stores
        .ips
        .state()
        .into_iter()
        .filter(|ip| {
            ip.spec.pod_type.as_deref() == Some("StatefulSet")
                && !is_reserved(ip)
                && ip.spec.namespace.as_deref() == Some(ns.as_str())
                && ip
                    .spec
                    .pod_name
                    .as_deref()
                    .and_then(statefulset::owner_from_pod_name)
                    .is_some_and(|o| o.name == name)
        })
        .collect();
    for ip in kept {
        let key = ip.name_any();
        let _lock = ctx.pod_locks.lock(&key).await;
        if alive(ctx, &key) {
            continue;
        }
        let pod = ip.spec.pod_name.clone().unwrap_or_default();
        let Some(owner) = statefulset::owner_from_pod_name(&pod) else {
            continue;
        };
        if !statefulset::keeps_address(&ctx.kube, &ns, &pod, &owner).await? {
            release_key(ctx, &key, false).await?;
        }
    }
    Ok(())
}

/// A deletion to act on.
enum Gone {
    Pod(Arc<Pod>),
    Node(Arc<Node>),
    /// Deletions were dropped (the handler fell behind): a collection finds what they left.
    Missed,
}

impl std::fmt::Display for Gone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Gone::Pod(pod) => write!(
                f,
                "pod {}/{}",
                pod.namespace().unwrap_or_default(),
                pod.name_any()
            ),
            Gone::Node(node) => write!(f, "node {}", node.name_any()),
            Gone::Missed => f.write_str("missed deletions"),
        }
    }
}

async fn clean_up(ctx: &Context, gone: &Gone) -> Result<()> {
    match gone {
        Gone::Pod(pod) => deleted(ctx, pod).await,
        Gone::Node(node) => {
            // A node of that name in the cache again (created anew, or back in a relist under
            // another UID) owns the name's join port and IP CR now: its reconciler keeps them.
            if ctx.stores.nodes.get(&ObjectRef::new(&node.name_any())).is_some() {
                return Ok(());
            }
            node_gone(ctx, &node.name_any()).await
        }
        Gone::Missed => collect(ctx).await.map(drop),
    }
}

/// Cleans up after pods, nodes and StatefulSets as their deletions (and scale-downs) arrive.
/// Pods and nodes come from the controller's shared watches, each sent once the cache no longer
/// holds it (a watch `Delete`, or missing from a relist); StatefulSets, which only this reads,
/// from a watch of its own (a [`Watch`] whose changes come the same way). Up to 16 at a time; a
/// failure is retried with backoff until it succeeds or the controller stops, so a deletion seen
/// is a deletion acted on, not one left to the next periodic collection.
pub async fn watch_deletions(ctx: Arc<Context>, pods: Changes<Pod>, nodes: Changes<Node>) {
    let pods = pods.map(|c| c.deleted().cloned().map(Gone::Pod), || Some(Gone::Missed));
    let nodes = nodes.map(|c| c.deleted().cloned().map(Gone::Node), || Some(Gone::Missed));
    let gone = futures::stream::select(pods, nodes).for_each_concurrent(16, |gone| {
        let ctx = ctx.clone();
        async move {
            let mut backoff = Duration::from_millis(100);
            while let Err(e) = clean_up(&ctx, &gone).await {
                tracing::warn!(object = %gone, error = %e, "cleanup after deletion failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    });
    // StatefulSets, which only this reads: a watch of its own (listed from etcd, as the watch it
    // replaced was), ended with this future. A relist's changes come too, so a scale-down made
    // while the watch was away is acted on here rather than at the next collection.
    let statefulsets =
        Watch::<StatefulSet>::new(Api::all(ctx.kube.clone())).config(watcher::Config::default());
    let sts_changes = statefulsets.subscribe();
    let _statefulsets = statefulsets.start();
    let sts = sts_changes
        // Dropped changes: the periodic collection finds what they left.
        .map(|c| c.new.clone().or_else(|| c.old.clone()), Vec::new)
        .for_each_concurrent(16, |s| {
            let ctx = ctx.clone();
            async move {
                if let Err(e) = statefulset_changed(&ctx, &s).await {
                    tracing::warn!(statefulset = %s.name_any(), error = %e, "releasing addresses kept for a StatefulSet failed; the collector will retry");
                }
            }
        });
    futures::join!(gone, sts);
}
