//! Prometheus metrics on `/metrics`: CNI operation latency by verb and result (Kube-OVN's
//! `cni_op_latency_seconds`), and how long ADD waited for the controller's address and route
//! annotations, for ovs-vswitchd and ovn-controller's `ovn-installed`, and how long an early
//! plugged port waited for the annotations.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabels {
    method: &'static str,
    status_code: u16,
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
    ops: Family<OpLabels, Histogram>,
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
    /// A fresh registry.
    pub fn new() -> Self {
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
                ops,
                waits,
                moves,
            }),
        }
    }

    /// Records one request.
    pub fn op(&self, method: &'static str, status_code: u16, took: Duration) {
        self.inner
            .ops
            .get_or_create(&OpLabels { method, status_code })
            .observe(took.as_secs_f64());
    }

    /// Records one wait.
    pub fn wait(&self, what: &'static str, took: Duration) {
        self.inner
            .waits
            .get_or_create(&WaitLabels { what })
            .observe(took.as_secs_f64());
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
