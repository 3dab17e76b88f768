//! Prometheus metrics on `/metrics`: CNI operation latency by verb and result (Kube-OVN's
//! `cni_op_latency_seconds{node_name,method,status_code}`), and how long ADD waited for the
//! controller's address and route annotations, for ovs-vswitchd and ovn-controller's
//! `ovn-installed`, and how long an early plugged port waited for the annotations.
//!
//! Waits Kube-OVN measures too also go into its counters of seconds waited, by `node_name`
//! (Kube-OVN v1.16.2's `pkg/daemon/metrics.go`): `cni_wait_address_seconds_total`,
//! `cni_wait_route_seconds_total` and `cni_wait_connectivity_seconds_total` (the gateway check).
//! Kube-OVN adds one per second of polling (or per ping); we add the time waited, which is what
//! the name says. Our histogram `cni_wait_seconds{what}` keeps every wait (Kube-OVN has no
//! distribution, nor the OVS and OVN waits).

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    node_name: Arc<str>,
    method: &'static str,
    status_code: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node_name: Arc<str>,
}

/// Kube-OVN's counter of seconds waited that a wait of ours (`what`) also goes into.
fn kube_ovn_wait(what: &str) -> Option<usize> {
    match what {
        "address" => Some(0),
        "route" => Some(1),
        "gateway_check" => Some(2),
        _ => None,
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MoveLabels {
    result: &'static str,
}

struct Inner {
    registry: Registry,
    node_name: Arc<str>,
    ops: Family<OpLabels, Histogram>,
    /// `cni_wait_{address,route,connectivity}_seconds_total`, in [`kube_ovn_wait`]'s order.
    kube_ovn_waits: [Family<NodeLabels, Counter<f64, AtomicU64>>; 3],
    waits: Family<WaitLabels, Histogram>,
    moves: Family<MoveLabels, Counter>,
}

/// Cheap to clone; every clone records into the same registry.
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry, without a node name (the label is empty).
    pub fn new() -> Self {
        Self::for_node("")
    }

    /// A fresh registry whose series carry `node_name` (Kube-OVN's label).
    pub fn for_node(node_name: &str) -> Self {
        let mut registry = Registry::default();
        let buckets = || Histogram::new(exponential_buckets(0.0005, 2.0, 18));
        let ops = Family::<OpLabels, Histogram>::new_with_constructor(buckets);
        let waits = Family::<WaitLabels, Histogram>::new_with_constructor(buckets);
        registry.register(
            "cni_op_latency_seconds",
            "CNI request latency by method (add, del, check, status, gc) and HTTP status",
            ops.clone(),
        );
        registry.register(
            "cni_wait_seconds",
            "Time ADD waited, by what for: address and route (controller annotations), ovs_port (ovs-vswitchd opened the port), ovn_installed (ovn-controller bound it, after ovs_port and the annotations), plugged_early (a port plugged before the annotations, until they came), localnet_patch_port, announce (sending the gratuitous ARPs and unsolicited NAs), gateway_check",
            waits.clone(),
        );
        let kube_ovn_waits: [Family<NodeLabels, Counter<f64, AtomicU64>>; 3] = Default::default();
        for (family, (name, help)) in kube_ovn_waits.iter().zip([
            // Encoded with `_total`, as Kube-OVN names them.
            (
                "cni_wait_address_seconds",
                "Seconds ADD waited for the controller to assign an address (Kube-OVN's name)",
            ),
            (
                "cni_wait_route_seconds",
                "Seconds ADD waited for the controller's routed annotation (Kube-OVN's name)",
            ),
            (
                "cni_wait_connectivity_seconds",
                "Seconds ADD waited for the pod's gateway to answer (Kube-OVN's name)",
            ),
        ]) {
            registry.register(name, help, family.clone());
        }
        let moves = Family::<MoveLabels, Counter>::default();
        registry.register(
            // Encoded as provider_network_moves_total.
            "provider_network_moves",
            "Provider NIC moves into a ProviderNetwork's bridge and give-backs, by result: moved (into the bridge, a move a crash cut short finished, or trunks changed), given_back, rolled_back (failed and undone), failed (failed and the undo incomplete or not attempted)",
            moves.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                node_name: node_name.into(),
                ops,
                kube_ovn_waits,
                waits,
                moves,
            }),
        }
    }

    /// Records one request.
    pub fn op(&self, method: &'static str, status_code: u16, took: Duration) {
        self.inner
            .ops
            .get_or_create(&OpLabels {
                node_name: Arc::clone(&self.inner.node_name),
                method,
                status_code,
            })
            .observe(took.as_secs_f64());
    }

    /// Records one wait (and adds it to Kube-OVN's counter of the same wait, if any).
    pub fn wait(&self, what: &'static str, took: Duration) {
        self.inner
            .waits
            .get_or_create(&WaitLabels { what })
            .observe(took.as_secs_f64());
        if let Some(i) = kube_ovn_wait(what) {
            self.inner.kube_ovn_waits[i]
                .get_or_create(&NodeLabels {
                    node_name: Arc::clone(&self.inner.node_name),
                })
                .inc_by(took.as_secs_f64());
        }
    }

    /// Counts one provider NIC move or give-back by `result` (`moved`, `given_back`,
    /// `rolled_back`, `failed`).
    pub fn provider_network_move(&self, result: &'static str) {
        self.inner.moves.get_or_create(&MoveLabels { result }).inc();
    }

    /// OpenMetrics text.
    pub fn encode(&self) -> String {
        kube_ovn_support::endpoints::encode(&self.inner.registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_ovns_names_and_labels_are_exposed_beside_ours() {
        let metrics = Metrics::for_node("node1");
        metrics.op("add", 200, Duration::from_millis(3));
        metrics.wait("address", Duration::from_millis(1500));
        metrics.wait("address", Duration::from_millis(500));
        metrics.wait("route", Duration::from_millis(250));
        metrics.wait("gateway_check", Duration::from_millis(125));
        metrics.wait("ovn_installed", Duration::from_millis(10));
        let text = metrics.encode();
        for line in [
            r#"cni_op_latency_seconds_count{node_name="node1",method="add",status_code="200"} 1"#,
            r#"cni_wait_address_seconds_total{node_name="node1"} 2.0"#,
            r#"cni_wait_route_seconds_total{node_name="node1"} 0.25"#,
            r#"cni_wait_connectivity_seconds_total{node_name="node1"} 0.125"#,
            r#"cni_wait_seconds_count{what="address"} 2"#,
            r#"cni_wait_seconds_count{what="ovn_installed"} 1"#,
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        // A wait Kube-OVN does not measure goes into no counter of its.
        assert_eq!(text.matches("_seconds_total{").count(), 3, "{text}");
    }
}
