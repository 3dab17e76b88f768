//! Where each VPC's gateway port lives, from the southbound database, into its lrp OvnEip's
//! `status.activateGateway` (ours, plan §3.0.2): the node whose `ovn.kubernetes.io/chassis`
//! annotation names the chassis that holds `cr-<lrp>`. The BGP speaker of that node announces
//! the VPC's EIPs (it reads only what the controller wrote).
//!
//! Driven by changes, never by polling: a `cr-` port binding that moved (or a chassis that came
//! or went) in the southbound replica, a node whose chassis annotation changed, an lrp EIP that
//! appeared or changed. Each is one merge patch of one field, only when it differs; the field is
//! removed while no chassis holds the port. While the southbound replica is not in sync nothing
//! is written: "unknown" is not "nobody".

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{OvnEip, OvnEipType};
use serde_json::json;
use tokio::sync::mpsc;

use crate::context::Context;
use crate::error::Result;
use crate::informer::Changes;

/// The node whose chassis annotation is `chassis` (pure).
pub fn node_of_chassis(chassis: &str, nodes: &[Arc<Node>]) -> Option<String> {
    nodes
        .iter()
        .find(|n| n.annotations().get(keys::CHASSIS).is_some_and(|c| c == chassis))
        .map(|n| n.name_any())
}

/// Whether an OvnEip is a router port's (`lrp`), by its type or its label.
pub fn is_lrp(eip: &OvnEip) -> bool {
    let lrp = OvnEipType::Lrp.as_str();
    eip.spec.type_.as_deref() == Some(lrp)
        || eip
            .labels()
            .get(keys::OVN_EIP_TYPE_LABEL)
            .is_some_and(|t| t == lrp)
}

/// Where lrp EIP `eip`'s gateway port lives, as far as the southbound replica knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// On this node (`None`: no chassis holds it, or no node names that chassis).
    Node(Option<String>),
    /// The replica is not in sync: unknown, which is not "nobody".
    Unknown,
}

/// The node that should be in lrp EIP `eip`'s `status.activateGateway` now.
pub fn active_node(ctx: &Context, eip: &str) -> Placement {
    if !ctx.sb.is_synced() {
        return Placement::Unknown;
    }
    Placement::Node(
        ctx.sb
            .gateway_chassis(eip)
            .and_then(|chassis| node_of_chassis(&chassis, &ctx.stores.nodes.state())),
    )
}

/// Brings lrp EIP `name`'s `status.activateGateway` to the node holding its port. Returns
/// whether it wrote.
pub async fn refresh(ctx: &Context, name: &str) -> Result<bool> {
    let Some(eip) = ctx.stores.ovn_eips.get(&ObjectRef::new(name)) else {
        return Ok(false);
    };
    if !is_lrp(&eip) || eip.metadata.deletion_timestamp.is_some() {
        return Ok(false);
    }
    let Placement::Node(node) = active_node(ctx, name) else {
        return Ok(false);
    };
    let old = eip.status.as_ref().and_then(|s| s.activate_gateway.clone());
    if old == node {
        return Ok(false);
    }
    crate::reconcile::merge_status::<OvnEip>(&ctx.kube, name, &json!({"activateGateway": node})).await?;
    tracing::info!(eip = name, from = ?old, to = ?node, "gateway port moved: status.activateGateway");
    Ok(true)
}

/// [`refresh`] for every lrp EIP.
async fn refresh_all(ctx: &Context) {
    let names: Vec<String> = ctx
        .stores
        .ovn_eips
        .state()
        .iter()
        .filter(|e| is_lrp(e))
        .map(|e| e.name_any())
        .collect();
    refresh_each(ctx, names).await;
}

async fn refresh_each(ctx: &Context, names: Vec<String>) {
    for name in names {
        if let Err(e) = refresh(ctx, &name).await {
            tracing::warn!(eip = %name, error = %e, "status.activateGateway not written; retried on the next change");
        }
    }
}

/// What wakes the loop.
enum Wake {
    /// `cr-` ports that moved, and whether the chassis set changed.
    Sb {
        ports: BTreeSet<String>,
        chassis: bool,
    },
    Eip(String),
    All,
}

/// Whether a node's change can move an EIP's node: its chassis annotation, or its coming/going.
fn chassis_differs(a: &Node, b: &Node) -> bool {
    a.annotations().get(keys::CHASSIS) != b.annotations().get(keys::CHASSIS)
}

/// Subscriptions taken before the watches start ([`run`] consumes them).
pub struct Subscriptions {
    pub eips: Changes<OvnEip>,
    pub nodes: Changes<Node>,
    /// Told when the southbound chassis set changes (the VPCs' gateway chassis may change).
    pub chassis_changed: mpsc::UnboundedSender<()>,
}

/// Runs until the watches end: every change that can move a gateway port's node is acted on.
pub async fn run(ctx: Arc<Context>, subs: Subscriptions) {
    let Subscriptions {
        eips,
        nodes,
        chassis_changed,
    } = subs;
    let sb = futures::stream::unfold(ctx.sb.subscribe(), |mut s| async move {
        s.recv().await.map(|c| {
            (
                Wake::Sb {
                    ports: c.ports,
                    chassis: c.chassis,
                },
                s,
            )
        })
    });
    let eips = eips.map(
        |c| {
            c.new
                .as_deref()
                .filter(|e| is_lrp(e))
                .map(|e| Wake::Eip(e.name_any()))
        },
        || Some(Wake::All),
    );
    let nodes = nodes.map(
        |c| c.matters(chassis_differs).then_some(Wake::All),
        || Some(Wake::All),
    );
    let mut wakes = futures::stream::select(sb.boxed(), futures::stream::select(eips.boxed(), nodes.boxed()));
    refresh_all(&ctx).await;
    while let Some(wake) = wakes.next().await {
        match wake {
            Wake::Sb { ports, chassis } => {
                if chassis {
                    let _ = chassis_changed.send(());
                    refresh_all(&ctx).await;
                } else {
                    let names: Vec<String> = ports
                        .iter()
                        .filter_map(|p| p.strip_prefix("cr-").map(str::to_owned))
                        .collect();
                    refresh_each(&ctx, names).await;
                }
            }
            Wake::Eip(name) => refresh_each(&ctx, vec![name]).await,
            Wake::All => refresh_all(&ctx).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_is_the_one_whose_annotation_names_the_chassis() {
        let node = |name: &str, chassis: Option<&str>| -> Arc<Node> {
            let mut ann = serde_json::Map::new();
            if let Some(c) = chassis {
                ann.insert(keys::CHASSIS.into(), c.into());
            }
            Arc::new(serde_json::from_value(json!({"metadata": {"name": name, "annotations": ann}})).unwrap())
        };
        let nodes = [node("n1", Some("c1")), node("n2", None), node("n3", Some("c3"))];
        assert_eq!(node_of_chassis("c3", &nodes).as_deref(), Some("n3"));
        assert_eq!(node_of_chassis("c2", &nodes), None);
    }

    #[test]
    fn lrp_eips_are_known_by_type_or_label() {
        let eip = |v: serde_json::Value| -> OvnEip { serde_json::from_value(v).unwrap() };
        assert!(is_lrp(&eip(
            json!({"metadata": {"name": "a"}, "spec": {"type": "lrp"}})
        )));
        assert!(is_lrp(&eip(
            json!({"metadata": {"name": "a", "labels": {keys::OVN_EIP_TYPE_LABEL: "lrp"}}, "spec": {}})
        )));
        assert!(!is_lrp(&eip(
            json!({"metadata": {"name": "a"}, "spec": {"type": "nat"}})
        )));
    }
}
