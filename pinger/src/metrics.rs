//! Kube-OVN's pinger metrics (v1.16.2 `pkg/pinger/metrics.go`): the same names, types, label
//! names and histogram buckets, so that Kube-OVN's Grafana dashboard (`pinger-grafana.json`) and
//! alerts work unchanged. Counters are registered without `_total`; prometheus-client appends it,
//! which gives Kube-OVN's sample names (`pinger_pod_ping_lost_total`).
//!
//! Kube-OVN's OVS exporter series (`ovs_*`: datapaths, interfaces, file sizes) are not here.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Label pairs in Kube-OVN's order (their names are camelCase or snake_case as Kube-OVN's).
pub type Labels = Vec<(&'static str, String)>;
type Hist = Family<Labels, Histogram, fn() -> Histogram>;

const DNS_API_BUCKETS: [f64; 11] = [2.0, 5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0, 40.0, 45.0, 50.0];
const PING_BUCKETS: [f64; 7] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0];
const EXTERNAL_PING_BUCKETS: [f64; 9] = [0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 50.0, 100.0];

fn dns_api_histogram() -> Histogram {
    Histogram::new(DNS_API_BUCKETS)
}
fn ping_histogram() -> Histogram {
    Histogram::new(PING_BUCKETS)
}
fn external_ping_histogram() -> Histogram {
    Histogram::new(EXTERNAL_PING_BUCKETS)
}

/// A pair of gauges Kube-OVN keeps side by side: `_up`/`_down`, `_healthy`/`_unhealthy`.
#[derive(Clone, Default)]
struct UpDown {
    up: Family<Labels, Gauge>,
    down: Family<Labels, Gauge>,
}

impl UpDown {
    fn set(&self, node: &str, up: bool) {
        let labels = node_labels(node);
        self.up.get_or_create(&labels).set(i64::from(up));
        self.down.get_or_create(&labels).set(i64::from(!up));
    }
}

/// One ping's source and target, as the labels of the ping series.
#[derive(Debug, Clone, Default)]
pub struct PingLabels {
    pub src_node_name: String,
    pub src_node_ip: String,
    pub src_pod_ip: String,
    pub target_node_name: String,
    pub target_node_ip: String,
    /// Pods only.
    pub target_pod_ip: String,
}

impl PingLabels {
    fn pod(&self) -> Labels {
        let mut labels = self.node();
        labels.push(("target_pod_ip", self.target_pod_ip.clone()));
        labels
    }

    fn node(&self) -> Labels {
        vec![
            ("src_node_name", self.src_node_name.clone()),
            ("src_node_ip", self.src_node_ip.clone()),
            ("src_pod_ip", self.src_pod_ip.clone()),
            ("target_node_name", self.target_node_name.clone()),
            ("target_node_ip", self.target_node_ip.clone()),
        ]
    }

    fn external(&self, target: &str) -> Labels {
        vec![
            ("src_node_name", self.src_node_name.clone()),
            ("src_node_ip", self.src_node_ip.clone()),
            ("src_pod_ip", self.src_pod_ip.clone()),
            ("target_address", target.to_owned()),
        ]
    }
}

fn node_labels(node: &str) -> Labels {
    vec![("nodeName", node.to_owned())]
}

fn hist(constructor: fn() -> Histogram) -> Hist {
    Family::new_with_constructor(constructor)
}

/// The pinger's registry and series.
pub struct Metrics {
    registry: Registry,
    ovs: UpDown,
    ovn_controller: UpDown,
    inconsistent_port_binding: Family<Labels, Gauge>,
    apiserver: UpDown,
    apiserver_latency: Hist,
    internal_dns: UpDown,
    internal_dns_latency: Hist,
    external_dns: UpDown,
    external_dns_latency: Hist,
    pod_ping_latency: Hist,
    pod_ping_lost: Family<Labels, Counter>,
    pod_ping_count: Family<Labels, Counter>,
    node_ping_latency: Hist,
    node_ping_lost: Family<Labels, Counter>,
    node_ping_count: Family<Labels, Counter>,
    external_ping_latency: Hist,
    external_ping_lost: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut m = Self {
            registry: Registry::default(),
            ovs: UpDown::default(),
            ovn_controller: UpDown::default(),
            inconsistent_port_binding: Family::default(),
            apiserver: UpDown::default(),
            apiserver_latency: hist(dns_api_histogram),
            internal_dns: UpDown::default(),
            internal_dns_latency: hist(dns_api_histogram),
            external_dns: UpDown::default(),
            external_dns_latency: hist(dns_api_histogram),
            pod_ping_latency: hist(ping_histogram),
            pod_ping_lost: Family::default(),
            pod_ping_count: Family::default(),
            node_ping_latency: hist(ping_histogram),
            node_ping_lost: Family::default(),
            node_ping_count: Family::default(),
            external_ping_latency: hist(external_ping_histogram),
            external_ping_lost: Family::default(),
        };
        let r = &mut m.registry;
        // Kube-OVN's help texts, so `# HELP` reads the same.
        r.register("pinger_ovs_up", "If the ovs on the node is up", m.ovs.up.clone());
        r.register(
            "pinger_ovs_down",
            "If the ovs on the node is down",
            m.ovs.down.clone(),
        );
        r.register(
            "pinger_ovn_controller_up",
            "If the ovn_controller on the node is up",
            m.ovn_controller.up.clone(),
        );
        r.register(
            "pinger_ovn_controller_down",
            "If the ovn_controller on the node is down",
            m.ovn_controller.down.clone(),
        );
        r.register(
            "pinger_inconsistent_port_binding",
            "The number of mismatch port bindings between ovs and ovn-sb",
            m.inconsistent_port_binding.clone(),
        );
        r.register(
            "pinger_apiserver_healthy",
            "If the apiserver request is healthy on this node",
            m.apiserver.up.clone(),
        );
        r.register(
            "pinger_apiserver_unhealthy",
            "If the apiserver request is unhealthy on this node",
            m.apiserver.down.clone(),
        );
        r.register(
            "pinger_apiserver_latency_ms",
            "The latency ms histogram the node request apiserver",
            m.apiserver_latency.clone(),
        );
        r.register(
            "pinger_internal_dns_healthy",
            "If the internal dns request is healthy on this node",
            m.internal_dns.up.clone(),
        );
        r.register(
            "pinger_internal_dns_unhealthy",
            "If the internal dns request is unhealthy on this node",
            m.internal_dns.down.clone(),
        );
        r.register(
            "pinger_internal_dns_latency_ms",
            "The latency ms histogram the node request internal dns",
            m.internal_dns_latency.clone(),
        );
        r.register(
            "pinger_external_dns_healthy",
            "If the external dns request is healthy on this node",
            m.external_dns.up.clone(),
        );
        r.register(
            "pinger_external_dns_unhealthy",
            "If the external dns request is unhealthy on this node",
            m.external_dns.down.clone(),
        );
        r.register(
            "pinger_external_dns_latency_ms",
            "The latency ms histogram the node request external dns",
            m.external_dns_latency.clone(),
        );
        r.register(
            "pinger_pod_ping_latency_ms",
            "The latency ms histogram for pod peer ping",
            m.pod_ping_latency.clone(),
        );
        r.register(
            "pinger_pod_ping_lost",
            "The lost count for pod peer ping",
            m.pod_ping_lost.clone(),
        );
        r.register(
            "pinger_pod_ping_count",
            "The total count for pod peer ping",
            m.pod_ping_count.clone(),
        );
        r.register(
            "pinger_node_ping_latency_ms",
            "The latency ms histogram for pod ping node",
            m.node_ping_latency.clone(),
        );
        r.register(
            "pinger_node_ping_lost",
            "The lost count for pod ping node",
            m.node_ping_lost.clone(),
        );
        r.register(
            "pinger_node_ping_count",
            "The total count for pod ping node",
            m.node_ping_count.clone(),
        );
        r.register(
            "pinger_external_ping_latency_ms",
            "The latency ms histogram for pod ping external address",
            m.external_ping_latency.clone(),
        );
        r.register(
            "pinger_external_ping_lost",
            "The lost count for pod ping external address",
            m.external_ping_lost.clone(),
        );
        m
    }

    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    pub fn set_ovs_up(&self, node: &str, up: bool) {
        self.ovs.set(node, up);
    }

    pub fn set_ovn_controller_up(&self, node: &str, up: bool) {
        self.ovn_controller.set(node, up);
    }

    pub fn set_inconsistent_port_bindings(&self, node: &str, count: usize) {
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        self.inconsistent_port_binding
            .get_or_create(&node_labels(node))
            .set(count);
    }

    /// The API server answered in `latency_ms`, or failed (`None`): Kube-OVN observes the
    /// latency only on success.
    pub fn apiserver(&self, node: &str, latency_ms: Option<f64>) {
        self.apiserver.set(node, latency_ms.is_some());
        if let Some(ms) = latency_ms {
            self.apiserver_latency
                .get_or_create(&node_labels(node))
                .observe(ms);
        }
    }

    pub fn internal_dns(&self, node: &str, latency_ms: Option<f64>) {
        self.internal_dns.set(node, latency_ms.is_some());
        if let Some(ms) = latency_ms {
            self.internal_dns_latency
                .get_or_create(&node_labels(node))
                .observe(ms);
        }
    }

    pub fn external_dns(&self, node: &str, latency_ms: Option<f64>) {
        self.external_dns.set(node, latency_ms.is_some());
        if let Some(ms) = latency_ms {
            self.external_dns_latency
                .get_or_create(&node_labels(node))
                .observe(ms);
        }
    }

    pub fn pod_ping(&self, labels: &PingLabels, avg_ms: f64, lost: u32, sent: u32) {
        let labels = labels.pod();
        self.pod_ping_latency.get_or_create(&labels).observe(avg_ms);
        self.pod_ping_lost.get_or_create(&labels).inc_by(u64::from(lost));
        self.pod_ping_count.get_or_create(&labels).inc_by(u64::from(sent));
    }

    pub fn node_ping(&self, labels: &PingLabels, avg_ms: f64, lost: u32, sent: u32) {
        let labels = labels.node();
        self.node_ping_latency.get_or_create(&labels).observe(avg_ms);
        self.node_ping_lost.get_or_create(&labels).inc_by(u64::from(lost));
        self.node_ping_count
            .get_or_create(&labels)
            .inc_by(u64::from(sent));
    }

    /// Kube-OVN labels the external series with the pod IP as `src_pod_ip`.
    pub fn external_ping(&self, labels: &PingLabels, target: &str, avg_ms: f64, lost: u32) {
        let labels = labels.external(target);
        self.external_ping_latency.get_or_create(&labels).observe(avg_ms);
        self.external_ping_lost
            .get_or_create(&labels)
            .inc_by(u64::from(lost));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_ovn_names_labels_and_buckets() {
        let m = Metrics::new();
        m.set_ovs_up("n1", false);
        m.set_ovn_controller_up("n1", true);
        m.set_inconsistent_port_bindings("n1", 2);
        m.apiserver("n1", Some(3.0));
        m.internal_dns("n1", None);
        m.external_dns("n1", Some(12.0));
        let labels = PingLabels {
            src_node_name: "n1".into(),
            src_node_ip: "172.18.0.2".into(),
            src_pod_ip: "10.16.0.5".into(),
            target_node_name: "n2".into(),
            target_node_ip: "172.18.0.3".into(),
            target_pod_ip: "10.16.0.6".into(),
        };
        m.pod_ping(&labels, 0.4, 1, 3);
        m.node_ping(&labels, 0.3, 0, 3);
        m.external_ping(&labels, "1.1.1.1", 20.0, 0);
        let text = kube_ovn_support::endpoints::encode(m.registry());
        for line in [
            "pinger_ovs_up{nodeName=\"n1\"} 0",
            "pinger_ovs_down{nodeName=\"n1\"} 1",
            "pinger_ovn_controller_up{nodeName=\"n1\"} 1",
            "pinger_ovn_controller_down{nodeName=\"n1\"} 0",
            "pinger_inconsistent_port_binding{nodeName=\"n1\"} 2",
            "pinger_apiserver_healthy{nodeName=\"n1\"} 1",
            "pinger_apiserver_unhealthy{nodeName=\"n1\"} 0",
            "pinger_apiserver_latency_ms_bucket{le=\"5.0\",nodeName=\"n1\"} 1",
            "pinger_internal_dns_unhealthy{nodeName=\"n1\"} 1",
            "pinger_internal_dns_healthy{nodeName=\"n1\"} 0",
            "pinger_external_dns_latency_ms_count{nodeName=\"n1\"} 1",
            "pinger_pod_ping_lost_total{src_node_name=\"n1\",src_node_ip=\"172.18.0.2\",src_pod_ip=\"10.16.0.5\",target_node_name=\"n2\",target_node_ip=\"172.18.0.3\",target_pod_ip=\"10.16.0.6\"} 1",
            "pinger_pod_ping_count_total{src_node_name=\"n1\",src_node_ip=\"172.18.0.2\",src_pod_ip=\"10.16.0.5\",target_node_name=\"n2\",target_node_ip=\"172.18.0.3\",target_pod_ip=\"10.16.0.6\"} 3",
            "pinger_pod_ping_latency_ms_bucket{le=\"0.5\",src_node_name=\"n1\"",
            "pinger_node_ping_count_total{src_node_name=\"n1\",src_node_ip=\"172.18.0.2\",src_pod_ip=\"10.16.0.5\",target_node_name=\"n2\",target_node_ip=\"172.18.0.3\"} 3",
            "pinger_node_ping_lost_total{",
            "pinger_node_ping_latency_ms_bucket{le=\"30.0\"",
            "pinger_external_ping_latency_ms_bucket{le=\"50.0\",src_node_name=\"n1\",src_node_ip=\"172.18.0.2\",src_pod_ip=\"10.16.0.5\",target_address=\"1.1.1.1\"} 1",
            "pinger_external_ping_lost_total{src_node_name=\"n1\",src_node_ip=\"172.18.0.2\",src_pod_ip=\"10.16.0.5\",target_address=\"1.1.1.1\"} 0",
        ] {
            assert!(text.contains(line), "no `{line}` in\n{text}");
        }
    }
}
