//! Who looks again when something changes, and which changes count. A reconciler reads other
//! kinds' caches, so it must run again when what it read changes — but only then: a subnet's
//! address counters change with every pod, and if every such status write re-queued every
//! namespace, the subnet's VPC and the subnet itself, the controller would spend its time
//! re-checking what nothing changed.
//!
//! Each `*_for_*` function says whether a change of one object matters to the reconciler named
//! (appearing and going always matter; see [`Change::matters`]). Pure: no I/O.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::{is_true, keys};
use kube_ovn_api::crd::condition::{READY, find_condition};
use kube_ovn_api::crd::{IPPool, ProviderNetwork, Subnet, Vlan, Vpc};

use super::node_state::{internal_ips, node_ready};
use crate::informer::Change;

fn deleting(m: &ObjectMeta) -> bool {
    m.deletion_timestamp.is_some()
}

/// What users and other controllers change in an object's metadata (not what the server sets on
/// every write: resourceVersion, managedFields, generation).
fn metadata_differs(a: &ObjectMeta, b: &ObjectMeta) -> bool {
    a.labels != b.labels
        || a.annotations != b.annotations
        || a.finalizers != b.finalizers
        || a.owner_references != b.owner_references
        || a.deletion_timestamp != b.deletion_timestamp
        || a.uid != b.uid
}

/// Any change (kinds whose reconciler reads more of the object than its spec: pods' status,
/// nodes' addresses, namespaces' labels, IP CRs' labels).
pub fn any<K>(_: &K, _: &K) -> bool {
    true
}

/// A subnet's own reconciler: anything but its status, which it writes itself (and the
/// counters loop writes every second while pods come and go).
pub fn subnet_beyond_status(a: &Subnet, b: &Subnet) -> bool {
    a.spec != b.spec || metadata_differs(&a.metadata, &b.metadata)
}

/// A VPC's own reconciler: anything but its status, which it writes itself.
pub fn vpc_beyond_status(a: &Vpc, b: &Vpc) -> bool {
    a.spec != b.spec || metadata_differs(&a.metadata, &b.metadata)
}

/// An IP pool's own reconciler: anything but its status, which it writes itself.
pub fn ippool_beyond_status(a: &IPPool, b: &IPPool) -> bool {
    a.spec != b.spec || metadata_differs(&a.metadata, &b.metadata)
}

/// A subnet, to the VPCs (their status lists their subnets; deletion waits for them) and the
/// namespaces (bound by name, selector or VPC; their annotations carry CIDRs and exclusions):
/// its spec and whether it is being deleted.
pub fn subnet_spec(a: &Subnet, b: &Subnet) -> bool {
    a.spec != b.spec || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A subnet, to the pods waiting for it: its spec, deletion, and its turning ready (its switch
/// and IPAM entry exist once the reconciler says so).
pub fn subnet_for_pods(a: &Subnet, b: &Subnet) -> bool {
    subnet_spec(a, b) || subnet_is_ready(a) != subnet_is_ready(b)
}

fn subnet_is_ready(s: &Subnet) -> bool {
    s.status
        .as_ref()
        .and_then(|st| find_condition(st.conditions.as_deref()?, READY))
        .is_some_and(|c| c.status == kube_ovn_api::crd::condition::ConditionStatus::True)
}

/// A node, to the subnets (gateways, `<subnet>.<node>` port groups, the check that no
/// default-VPC CIDR holds a node's address): its labels, readiness, join address and own
/// addresses, and its deletion. Not its heartbeats.
pub fn node_for_subnets(a: &Node, b: &Node) -> bool {
    let join = |n: &Node| {
        let ann = n.metadata.annotations.as_ref();
        (
            is_true(ann, keys::ALLOCATED),
            ann.and_then(|a| a.get(keys::IP_ADDRESS)).cloned(),
        )
    };
    let addrs = |n: &Node| internal_ips(n).into_iter().collect::<BTreeSet<IpAddr>>();
    a.metadata.labels != b.metadata.labels
        || node_ready(a) != node_ready(b)
        || join(a) != join(b)
        || addrs(a) != addrs(b)
        || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A VPC, to the subnets (their router, and which namespaces a custom VPC claims): its spec,
/// its router and its deletion.
pub fn vpc_for_subnets(a: &Vpc, b: &Vpc) -> bool {
    let router = |v: &Vpc| v.status.as_ref().and_then(|s| s.router.clone());
    a.spec != b.spec || router(a) != router(b) || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A VPC, to the namespaces (the namespaces it lists, its default subnet): its spec, its
/// `defaultLogicalSwitch` and its deletion.
pub fn vpc_for_namespaces(a: &Vpc, b: &Vpc) -> bool {
    let default = |v: &Vpc| v.status.as_ref().and_then(|s| s.default_logical_switch.clone());
    a.spec != b.spec || default(a) != default(b) || deleting(&a.metadata) != deleting(&b.metadata)
}

/// An IP pool, to the namespaces (which pools are bound to them): its spec and deletion.
pub fn ippool_spec(a: &IPPool, b: &IPPool) -> bool {
    a.spec != b.spec || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A namespace, to the pods waiting in it: its labels, which subnets' `namespaceSelectors` match
/// (they decide the subnets it may use, [`super::tenancy`]). Not its annotations, which the
/// namespace reconciler writes from the subnets.
pub fn namespace_labels(a: &Namespace, b: &Namespace) -> bool {
    a.metadata.labels != b.metadata.labels
}

/// A ProviderNetwork's own reconciler: anything but its status (its own fields, and `vlans`,
/// which the Vlans write).
pub fn provider_network_beyond_status(a: &ProviderNetwork, b: &ProviderNetwork) -> bool {
    a.spec != b.spec || metadata_differs(&a.metadata, &b.metadata)
}

/// A Vlan's own reconciler: anything but its status, which it writes itself.
pub fn vlan_beyond_status(a: &Vlan, b: &Vlan) -> bool {
    a.spec != b.spec || metadata_differs(&a.metadata, &b.metadata)
}

/// A Vlan, to the other Vlans (which of them conflict): its spec and deletion.
pub fn vlan_spec(a: &Vlan, b: &Vlan) -> bool {
    a.spec != b.spec || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A Vlan, to the subnets using it (tag, provider, refused while in conflict): its spec, its
/// conflict and its deletion.
pub fn vlan_for_subnets(a: &Vlan, b: &Vlan) -> bool {
    let conflict = |v: &Vlan| v.status.as_ref().and_then(|s| s.conflict);
    vlan_spec(a, b) || conflict(a) != conflict(b)
}

/// The Vlans a provider network lists as ready in `status.vlans`.
pub fn listed_vlans(pn: &ProviderNetwork) -> BTreeSet<String> {
    pn.status
        .as_ref()
        .and_then(|s| s.vlans.clone())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

/// A provider network, to the Vlans (they list themselves in it once it exists) and to the
/// subnets (a Vlan listed there is ready for them): its `status.vlans` and its deletion.
pub fn provider_network_vlans(a: &ProviderNetwork, b: &ProviderNetwork) -> bool {
    listed_vlans(a) != listed_vlans(b) || deleting(&a.metadata) != deleting(&b.metadata)
}

/// The Vlans a provider network's change concerns for the subnets: those that appeared in or
/// left its `status.vlans` (all of them when it appeared or went).
pub fn vlans_listed_or_unlisted(change: &Change<ProviderNetwork>) -> BTreeSet<String> {
    let old = change.old.as_deref().map(listed_vlans).unwrap_or_default();
    let new = change.new.as_deref().map(listed_vlans).unwrap_or_default();
    old.symmetric_difference(&new).cloned().collect()
}

/// A subnet, to the Vlans (their `status.subnets`): its `spec.vlan` and its deletion.
pub fn subnet_for_vlans(a: &Subnet, b: &Subnet) -> bool {
    a.spec.vlan != b.spec.vlan || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A node, to the provider networks (the daemon's `ready` label, and the labels a
/// `nodeSelector` matches): its labels and its deletion.
pub fn node_for_provider_networks(a: &Node, b: &Node) -> bool {
    a.metadata.labels != b.metadata.labels || deleting(&a.metadata) != deleting(&b.metadata)
}

/// A pod, to the provider networks (a kube-ovn-cni pod's `err_mesg` annotations, and which node
/// it is on): its annotations, labels and node. Which pods are kube-ovn-cni's is the mapper's.
pub fn pod_for_provider_networks(a: &Pod, b: &Pod) -> bool {
    let node = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    a.metadata.annotations != b.metadata.annotations
        || a.metadata.labels != b.metadata.labels
        || node(a) != node(b)
}

/// The VPC a subnet belongs to (`spec.vpc`, else the default VPC).
pub fn vpc_of_subnet(cluster_router: &str, subnet: &Subnet) -> ObjectRef<Vpc> {
    ObjectRef::new(subnet_vpc_name(cluster_router, subnet))
}

/// The name of the VPC a subnet belongs to: `spec.vpc`, or `cluster_router` (the default VPC)
/// when it is unset or empty.
pub fn subnet_vpc_name<'a>(cluster_router: &'a str, subnet: &'a Subnet) -> &'a str {
    subnet
        .spec
        .vpc
        .as_deref()
        .filter(|v| !v.is_empty())
        .unwrap_or(cluster_router)
}

/// The VPCs a subnet's change concerns: the one it was in and the one it is in.
pub fn vpcs_of(cluster_router: &str, change: &Change<Subnet>) -> Vec<ObjectRef<Vpc>> {
    let mut out: Vec<ObjectRef<Vpc>> = Vec::new();
    for s in change.old.iter().chain(change.new.iter()) {
        let vpc = vpc_of_subnet(cluster_router, s);
        if !out.contains(&vpc) {
            out.push(vpc);
        }
    }
    out
}

/// Whether a pod waits for subnet `subnet`: not yet routed, and its `logical_switch` names that
/// subnet or none is set yet.
pub fn waits_for(pod: &Pod, subnet: &str) -> bool {
    let ann = pod.annotations();
    ann.get(keys::LOGICAL_SWITCH).is_none_or(|l| l == subnet) && !ann.contains_key(keys::ROUTED)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::*;

    fn subnet(v: serde_json::Value) -> Subnet {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_subnet_status_write_matters_to_nobody_but_its_readers() {
        let a = subnet(
            json!({"metadata": {"name": "s", "resourceVersion": "1"}, "spec": {"cidrBlock": "10.0.0.0/24"},
            "status": {"v4usingIPs": 1}}),
        );
        let b = subnet(
            json!({"metadata": {"name": "s", "resourceVersion": "2"}, "spec": {"cidrBlock": "10.0.0.0/24"},
            "status": {"v4usingIPs": 2}}),
        );
        assert!(!subnet_beyond_status(&a, &b));
        assert!(!subnet_spec(&a, &b));
        assert!(!subnet_for_pods(&a, &b));
        let ready = subnet(
            json!({"metadata": {"name": "s", "resourceVersion": "3"}, "spec": {"cidrBlock": "10.0.0.0/24"},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        assert!(
            subnet_for_pods(&a, &ready),
            "turning ready wakes the waiting pods"
        );
        let moved =
            subnet(json!({"metadata": {"name": "s"}, "spec": {"cidrBlock": "10.0.0.0/24", "vpc": "v1"}}));
        assert!(subnet_spec(&a, &moved));
        assert!(subnet_beyond_status(&a, &moved));
        let labelled = subnet(
            json!({"metadata": {"name": "s", "labels": {"x": "y"}}, "spec": {"cidrBlock": "10.0.0.0/24"}}),
        );
        assert!(
            subnet_beyond_status(&a, &labelled),
            "its own reconciler looks at any edit but status"
        );
    }

    #[test]
    fn a_subnet_moving_vpc_concerns_both() {
        let a = Arc::new(subnet(json!({"metadata": {"name": "s"}, "spec": {"vpc": "v1"}})));
        let b = Arc::new(subnet(json!({"metadata": {"name": "s"}, "spec": {}})));
        let change = Change {
            old: Some(a),
            new: Some(b),
        };
        assert_eq!(
            vpcs_of("ovn-cluster", &change),
            [ObjectRef::new("v1"), ObjectRef::new("ovn-cluster")]
        );
    }

    #[test]
    fn a_node_heartbeat_matters_not_to_subnets() {
        let node = |heartbeat: &str, ready: &str, ip: &str| -> Node {
            serde_json::from_value(json!({"metadata": {"name": "n1"}, "status": {
                "addresses": [{"type": "InternalIP", "address": ip}],
                "conditions": [{"type": "Ready", "status": ready, "lastHeartbeatTime": heartbeat}]}}))
            .unwrap()
        };
        let a = node("2026-01-01T00:00:00Z", "True", "172.18.0.2");
        assert!(!node_for_subnets(
            &a,
            &node("2026-01-01T00:00:10Z", "True", "172.18.0.2")
        ));
        assert!(node_for_subnets(
            &a,
            &node("2026-01-01T00:00:10Z", "False", "172.18.0.2")
        ));
        assert!(node_for_subnets(
            &a,
            &node("2026-01-01T00:00:00Z", "True", "172.18.0.3")
        ));
    }

    #[test]
    fn a_provider_network_concerns_the_subnets_of_the_vlans_it_lists_or_unlists() {
        let pn = |vlans: &[&str]| -> Arc<ProviderNetwork> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "pn1"}, "spec": {}, "status": {
                    "vlans": vlans, "readyNodes": ["n1"]}}))
                .unwrap(),
            )
        };
        let (a, b) = (pn(&["v1", "v2"]), pn(&["v2", "v3"]));
        assert!(provider_network_vlans(&a, &b));
        assert!(
            !provider_network_vlans(&a, &pn(&["v2", "v1"])),
            "order is no change"
        );
        assert!(
            !provider_network_beyond_status(&a, &b),
            "its status is not its reconciler's input"
        );
        let change = Change {
            old: Some(a.clone()),
            new: Some(b),
        };
        assert_eq!(
            vlans_listed_or_unlisted(&change),
            BTreeSet::from(["v1".to_owned(), "v3".to_owned()])
        );
        let gone = Change {
            old: Some(a),
            new: None,
        };
        assert_eq!(vlans_listed_or_unlisted(&gone).len(), 2);
    }

    #[test]
    fn appearing_and_going_always_matter() {
        let s = Arc::new(subnet(json!({"metadata": {"name": "s"}, "spec": {}})));
        let new = Change {
            old: None,
            new: Some(s.clone()),
        };
        let gone = Change {
            old: Some(s),
            new: None,
        };
        assert!(new.matters(subnet_spec) && gone.matters(subnet_spec));
        assert!(gone.deleted().is_some() && new.deleted().is_none());
    }
}
