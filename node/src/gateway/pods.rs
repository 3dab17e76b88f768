//! This node's pods as the egress plan needs them (a distributed `externalEgressGateway` has an
//! `ip rule from <pod ip>` per pod), from what only the controller writes.
//!
//! A pod's annotations prove nothing: its author may write `ovn.kubernetes.io/ip_address` (and
//! `allocated`, `logical_switch`) when creating it, and a pod annotated with the node's own
//! address would get an `ip rule` that sends the node's own traffic to the egress gateway. The
//! record of an allocation is the controller's IP CR (`ips.kubeovn.io`, cluster-scoped, named
//! like the pod's switch port `<pod>.<ns>`, spec.podName/namespace/subnet/v4IpAddress/
//! v6IpAddress, `controller/src/reconcile/ip_record.rs`), which tenants cannot write. So the
//! plan takes a pod's subnet and addresses from its IP CR, and even then never a node's
//! address. An annotated address the record does not hold, or a node's, is a [`Forged`].
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube_ovn_api::annotations::provider::PRIMARY_PROVIDER;
use kube_ovn_api::annotations::{IpPair, get, keys};
use kube_ovn_api::crd::Ip;
use kube_ovn_api::names::pod_port_name;
use kube_ovn_gateway::LocalPod;

/// An address of a pod the plan does not use, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Forged {
    pub namespace: String,
    pub name: String,
    /// `metadata.annotations[ovn.kubernetes.io/ip_address]`, or the IP CR's field.
    pub field: String,
    pub value: String,
    pub reason: String,
}

impl std::fmt::Display for Forged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "pod {}/{}: {} {:?} {}; no egress rule is built from it",
            self.namespace, self.name, self.field, self.value, self.reason
        )
    }
}

/// The egress view of `pods` (this node's), from their IP CRs in `ips`; `node_addresses` maps
/// every Node's InternalIP and ExternalIP to the Node's name.
pub fn local_pods(
    pods: &[Arc<Pod>],
    ips: &[Arc<Ip>],
    node_addresses: &BTreeMap<IpAddr, String>,
) -> (Vec<LocalPod>, Vec<Forged>) {
    let records: BTreeMap<&str, &Ip> = ips
        .iter()
        .filter_map(|ip| Some((ip.metadata.name.as_deref()?, ip.as_ref())))
        .collect();
    let annotation = format!("metadata.annotations[{}]", keys::IP_ADDRESS);
    let mut out = Vec::new();
    let mut forged = Vec::new();
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.spec.as_ref().and_then(|s| s.host_network) != Some(true))
    {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let refuse = |field: &str, value: String, reason: String| Forged {
            namespace: namespace.clone(),
            name: name.clone(),
            field: field.to_owned(),
            value,
            reason,
        };
        let record_name = pod_port_name(&name, &namespace, PRIMARY_PROVIDER);
        // The controller's record of this pod (the same pod: a reservation for another name
        // does not count).
        let record = records.get(record_name.as_str()).filter(|r| {
            r.spec.pod_name.as_deref() == Some(name.as_str())
                && r.spec.namespace.as_deref() == Some(namespace.as_str())
        });
        let allocated = record.map(|r| r.spec.addresses()).unwrap_or_default();
        let annotated: Vec<IpAddr> = get::<IpPair>(pod.metadata.annotations.as_ref(), keys::IP_ADDRESS)
            .ok()
            .flatten()
            .map(|pair| pair.addrs().collect())
            .unwrap_or_default();
        for ip in &annotated {
            if let Some(owner) = node_addresses.get(ip) {
                forged.push(refuse(
                    &annotation,
                    ip.to_string(),
                    format!("is an address of node {owner}"),
                ));
            } else if record.is_some() && !allocated.contains(ip) {
                // Before the controller has allocated, a requested static address is not yet
                // in any record: only a record that says otherwise proves the annotation wrong.
                forged.push(refuse(
                    &annotation,
                    ip.to_string(),
                    format!("is not the address the controller allocated (IP {record_name})"),
                ));
            }
        }
        let Some(record) = record else { continue };
        let subnet = record.spec.subnet.clone().unwrap_or_default();
        let mut addresses = Vec::new();
        for ip in allocated {
            match node_addresses.get(&ip) {
                Some(owner) => forged.push(refuse(
                    &format!("IP {record_name} spec.v4IpAddress/v6IpAddress"),
                    ip.to_string(),
                    format!("is an address of node {owner}"),
                )),
                None => addresses.push(ip),
            }
        }
        if subnet.is_empty() || addresses.is_empty() {
            continue;
        }
        out.push(LocalPod {
            key: format!("{namespace}/{name}"),
            subnet,
            ips: addresses,
        });
    }
    forged.sort();
    forged.dedup();
    (out, forged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[allow(clippy::needless_pass_by_value, reason = "called with json! literals")]
    fn pod(name: &str, annotations: serde_json::Value) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "t",
                "annotations": annotations}, "spec": {"containers": []}}))
            .unwrap(),
        )
    }

    fn record(name: &str, pod: &str, subnet: &str, v4: &str) -> Arc<Ip> {
        Arc::new(
            serde_json::from_value(json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
                "metadata": {"name": name}, "spec": {"podName": pod, "namespace": "t",
                "subnet": subnet, "v4IpAddress": v4, "ipAddress": v4}}))
            .unwrap(),
        )
    }

    #[test]
    fn addresses_and_subnet_come_from_the_controllers_record_never_a_nodes() {
        let nodes = BTreeMap::from([("172.30.0.1".parse().unwrap(), "n1".to_owned())]);
        let pods = [
            // Allocated as annotated.
            pod(
                "good",
                json!({keys::IP_ADDRESS: "10.22.0.5", keys::LOGICAL_SWITCH: "egress"}),
            ),
            // The author wrote the node's address (and a subnet): no record, no rule, a refusal.
            pod(
                "forged",
                json!({keys::IP_ADDRESS: "172.30.0.1", keys::LOGICAL_SWITCH: "egress", keys::ALLOCATED: "true"}),
            ),
            // The record says otherwise: the record wins, the annotation is refused.
            pod(
                "lies",
                json!({keys::IP_ADDRESS: "10.22.0.99", keys::LOGICAL_SWITCH: "egress"}),
            ),
            // Asked for a static address, not allocated yet: nothing, quietly.
            pod("waiting", json!({keys::IP_ADDRESS: "10.22.0.7"})),
            // A record of another pod's under this pod's name does not count.
            pod("borrowed", json!({})),
        ];
        let ips = [
            record("good.t", "good", "egress", "10.22.0.5"),
            record("lies.t", "lies", "egress", "10.22.0.6"),
            record("borrowed.t", "someone-else", "egress", "10.22.0.8"),
        ];
        let (local, forged) = local_pods(&pods, &ips, &nodes);
        assert_eq!(
            local,
            vec![
                LocalPod {
                    key: "t/good".into(),
                    subnet: "egress".into(),
                    ips: vec!["10.22.0.5".parse().unwrap()]
                },
                LocalPod {
                    key: "t/lies".into(),
                    subnet: "egress".into(),
                    ips: vec!["10.22.0.6".parse().unwrap()]
                },
            ]
        );
        let messages: Vec<String> = forged.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "pod t/forged: metadata.annotations[ovn.kubernetes.io/ip_address] \"172.30.0.1\" is an address of node n1; no egress rule is built from it",
                "pod t/lies: metadata.annotations[ovn.kubernetes.io/ip_address] \"10.22.0.99\" is not the address the controller allocated (IP lies.t); no egress rule is built from it",
            ]
        );
        // A record that holds a node's address (a reservation gone wrong) is not used either.
        let (local, forged) = local_pods(
            &[pod("odd", json!({}))],
            &[record("odd.t", "odd", "egress", "172.30.0.1")],
            &nodes,
        );
        assert!(local.is_empty());
        assert_eq!(forged.len(), 1, "{forged:?}");
    }
}
