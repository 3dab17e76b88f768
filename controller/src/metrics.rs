//! Prometheus metrics (OpenMetrics text on `/metrics`): reconciles, errors and their latency per
//! kind, IPAM usage per subnet (Kube-OVN's `subnet_available_ip_count` / `subnet_used_ip_count`),
//! and northbound transaction latency.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TxnLabels {
    what: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SubnetLabels {
    subnet_name: String,
    protocol: &'static str,
    subnet_cidr: String,
}

struct Inner {
    registry: Registry,
    reconciles: Family<KindLabels, Counter>,
    errors: Family<KindLabels, Counter>,
    latency: Family<KindLabels, Histogram>,
    ovsdb: Family<TxnLabels, Histogram>,
    available: Family<SubnetLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    used: Family<SubnetLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// The label sets written per subnet, so a deleted subnet's series can be removed.
    subnet_series: std::sync::Mutex<std::collections::BTreeMap<String, Vec<SubnetLabels>>>,
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
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<KindLabels, Counter>::default();
        let errors = Family::<KindLabels, Counter>::default();
        let latency = Family::<KindLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0005, 2.0, 16))
        });
        let ovsdb = Family::<TxnLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.0002, 2.0, 16))
        });
        let available = Family::default();
        let used = Family::default();
        let sub = registry.sub_registry_with_prefix("kube_ovn_controller");
        sub.register("reconcile", "Reconciles by kind", reconciles.clone());
        sub.register("reconcile_errors", "Failed reconciles by kind", errors.clone());
        sub.register(
            "reconcile_duration_seconds",
            "Reconcile latency by kind",
            latency.clone(),
        );
        sub.register(
            "ovsdb_transaction_duration_seconds",
            "Northbound transaction latency",
            ovsdb.clone(),
        );
        registry.register(
            "subnet_available_ip_count",
            "Addresses still available in a subnet",
            available.clone(),
        );
        registry.register(
            "subnet_used_ip_count",
            "Addresses in use in a subnet",
            used.clone(),
        );
        Self {
            inner: Arc::new(Inner {
                registry,
                reconciles,
                errors,
                latency,
                ovsdb,
                available,
                used,
                subnet_series: std::sync::Mutex::default(),
            }),
        }
    }

    pub fn reconciled(&self, kind: &'static str, ok: bool, elapsed: Duration) {
        let labels = KindLabels { kind };
        self.inner.reconciles.get_or_create(&labels).inc();
        if !ok {
            self.inner.errors.get_or_create(&labels).inc();
        }
        self.inner
            .latency
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    pub fn ovsdb_transaction(&self, what: &'static str, ok: bool, elapsed: Duration) {
        let labels = TxnLabels {
            what,
            result: if ok { "ok" } else { "error" },
        };
        self.inner
            .ovsdb
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    #[allow(
        clippy::cast_precision_loss,
        reason = "a gauge; IPv6 counts beyond 2^53 need not be exact"
    )]
    pub fn subnet_usage(
        &self,
        subnet: &str,
        protocol: &'static str,
        cidr: &str,
        available: u128,
        used: u128,
    ) {
        let labels = SubnetLabels {
            subnet_name: subnet.to_owned(),
            protocol,
            subnet_cidr: cidr.to_owned(),
        };
        self.inner.available.get_or_create(&labels).set(available as f64);
        self.inner.used.get_or_create(&labels).set(used as f64);
        let mut series = self
            .inner
            .subnet_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = series.entry(subnet.to_owned()).or_default();
        if !known.contains(&labels) {
            known.push(labels);
        }
    }

    /// Removes a deleted subnet's series (stale series would report addresses that no longer exist).
    pub fn forget_subnet(&self, subnet: &str) {
        let mut series = self
            .inner
            .subnet_series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for labels in series.remove(subnet).unwrap_or_default() {
            self.inner.available.remove(&labels);
            self.inner.used.remove(&labels);
        }
    }

    /// The OpenMetrics text.
    pub fn encode(&self) -> String {
        kube_ovn_support::endpoints::encode(&self.inner.registry)
    }
}
