//! Which VPCs look again at their external gateway when something else changes:
//! - a node's `ovn.kubernetes.io/external-gw` label or `ovn.kubernetes.io/chassis` annotation,
//!   or its coming or going → every VPC with `enableExternal` (its gateway chassis);
//! - an external subnet's spec, deletion or readiness → the VPCs connected to it or asking for it;
//! - the `ovn-external-gw-config` ConfigMap's data, or (while it exists) a node's label,
//!   chassis, coming or going → the default VPC (its ConfigMap path, [`super::default_vpc`]);
//! - the southbound chassis set ([`super::active`] tells) → every VPC with `enableExternal`.

use std::collections::BTreeSet;

use futures::Stream;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{Subnet, Vpc};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::informer::Cache;
use crate::reconcile::triggers::subnet_for_pods;
use crate::stores::{Informers, Stores};

/// A node, to the VPCs' gateway chassis: its external-gw label and chassis annotation (pure).
pub fn node_for_external(a: &Node, b: &Node) -> bool {
    a.labels().get(keys::EXTERNAL_GW_LABEL) != b.labels().get(keys::EXTERNAL_GW_LABEL)
        || a.annotations().get(keys::CHASSIS) != b.annotations().get(keys::CHASSIS)
        || a.metadata.deletion_timestamp.is_some() != b.metadata.deletion_timestamp.is_some()
}

/// The ConfigMap, to the default VPC: its data (pure).
pub fn config_map_data(a: &ConfigMap, b: &ConfigMap) -> bool {
    a.data != b.data
}

/// Whether a VPC has (or had, by its status) an external gateway.
pub fn has_external(vpc: &Vpc) -> bool {
    vpc.spec.enable_external == Some(true)
        || vpc.status.as_ref().and_then(|s| s.enable_external) == Some(true)
}

/// The external subnets a VPC asks for or its status lists (pure).
pub fn external_subnets_of(vpc: &Vpc, switch: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    if !has_external(vpc) {
        return out;
    }
    let extra: Vec<String> = vpc
        .spec
        .extra_external_subnets
        .iter()
        .flatten()
        .chain(
            vpc.status
                .iter()
                .flat_map(|s| s.extra_external_subnets.iter().flatten()),
        )
        .cloned()
        .collect();
    out.extend(extra);
    out.insert(switch.to_owned());
    out
}

fn with_external(vpcs: &Cache<Vpc>) -> Vec<ObjectRef<Vpc>> {
    vpcs.state()
        .iter()
        .filter(|v| has_external(v))
        .map(|v| ObjectRef::from_obj(&**v))
        .collect()
}

/// The VPC controller with the external gateway's triggers added; `chassis_changed` is what
/// [`super::active::run`] is given.
pub fn wire(
    vpcs: Controller<Vpc>,
    config: &Config,
    informers: &Informers,
    stores: &Stores,
    chassis_changed: mpsc::UnboundedReceiver<()>,
) -> Controller<Vpc> {
    let all = {
        let cache = stores.vpcs.clone();
        move || with_external(&cache)
    };
    let switch = config.external.switch.clone();
    let by_subnet = {
        let cache = stores.vpcs.clone();
        move |c: &crate::informer::Change<Subnet>| {
            let names: BTreeSet<String> = c.old.iter().chain(c.new.iter()).map(|s| s.name_any()).collect();
            cache
                .state()
                .iter()
                .filter(|v| !external_subnets_of(v, &switch).is_disjoint(&names))
                .map(|v| ObjectRef::from_obj(&**v))
                .collect()
        }
    };
    // The default VPC's external gateway (default_vpc.rs): its ConfigMap, and the nodes while
    // there is one (a listed node appearing, a gateway node's label or chassis).
    let default = {
        let router = config.cluster_router.clone();
        move || vec![ObjectRef::<Vpc>::new(&router)]
    };
    let nodes_all = {
        let (all, default, stores) = (all.clone(), default.clone(), stores.clone());
        move || {
            let mut out = all();
            if stores.external_gw_config().is_some() {
                out.extend(default());
            }
            out.dedup();
            out
        }
    };
    vpcs.reconcile_on(informers.nodes.changes().when_all(node_for_external, nodes_all))
        .reconcile_on(
            informers
                .external_gw_config
                .changes()
                .when_all(config_map_data, default),
        )
        .reconcile_on(
            informers
                .subnets
                .changes()
                .when(subnet_for_pods, by_subnet, all.clone()),
        )
        .reconcile_on(sb_chassis(chassis_changed, all))
}

fn sb_chassis(
    rx: mpsc::UnboundedReceiver<()>,
    all: impl Fn() -> Vec<ObjectRef<Vpc>> + Send + 'static,
) -> impl Stream<Item = ObjectRef<Vpc>> + Send + 'static {
    use futures::StreamExt;
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|()| ((), rx)) })
        .flat_map(move |()| futures::stream::iter(all()))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_node_matters_by_its_label_and_chassis_only() {
        let node = |labels: serde_json::Value, ann: serde_json::Value| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels, "annotations": ann}}))
                .unwrap()
        };
        let a = node(
            json!({keys::EXTERNAL_GW_LABEL: "true"}),
            json!({keys::CHASSIS: "c1"}),
        );
        assert!(!node_for_external(&a, &a.clone()));
        assert!(node_for_external(
            &a,
            &node(json!({}), json!({keys::CHASSIS: "c1"}))
        ));
        assert!(node_for_external(
            &a,
            &node(
                json!({keys::EXTERNAL_GW_LABEL: "true"}),
                json!({keys::CHASSIS: "c2"})
            )
        ));
        assert!(!node_for_external(
            &a,
            &node(
                json!({keys::EXTERNAL_GW_LABEL: "true", "x": "y"}),
                json!({keys::CHASSIS: "c1"})
            )
        ));
    }

    #[test]
    fn a_vpcs_external_subnets_include_what_its_status_lists() {
        let vpc: Vpc = serde_json::from_value(json!({"metadata": {"name": "v"},
            "spec": {"enableExternal": true, "extraExternalSubnets": ["e2"]},
            "status": {"extraExternalSubnets": ["e1"]}}))
        .unwrap();
        assert_eq!(
            external_subnets_of(&vpc, "external")
                .into_iter()
                .collect::<Vec<_>>(),
            ["e1", "e2", "external"]
        );
        let off: Vpc = serde_json::from_value(json!({"metadata": {"name": "v"}, "spec": {}})).unwrap();
        assert!(external_subnets_of(&off, "external").is_empty());
    }
}
