//! One round of probes (Kube-OVN's `StartPinger` loop body): OVS, ovn-controller and port
//! bindings (`--network-mode=kube-ovn`), then the API server, the other pingers' pods, the nodes,
//! internal and external DNS, `--target-ip-ports` and `--external-address`. Every probe runs;
//! each failure is kept in the [`Report`], which decides the job's exit code.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;

use crate::config::{Config, TargetProto};
use crate::icmp;
use crate::metrics::{Metrics, PingLabels};

/// Where a name's resolution is recorded ([`Metrics::internal_dns`], [`Metrics::external_dns`]).
type RecordDns = fn(&Metrics, &str, Option<f64>);
use crate::ovs::{self, Databases};
use crate::probes;

/// Kube-OVN's ping runs: 3 requests 100 ms apart, with an overall timeout per kind.
const PING_COUNT: u16 = 3;
const PING_INTERVAL: Duration = Duration::from_millis(100);
const POD_PING_TIMEOUT: Duration = Duration::from_secs(1);
const NODE_PING_TIMEOUT: Duration = Duration::from_secs(30);
const EXTERNAL_PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The failures of one round (empty: all passed).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub failures: Vec<String>,
}

impl Report {
    fn fail(&mut self, what: impl Into<String>) {
        let what = what.into();
        tracing::error!(failure = %what, "probe failed");
        self.failures.push(what);
    }

    /// Kube-OVN's job semantics: exit with `--exit-code` when anything failed and it is non-zero,
    /// else 0.
    pub fn exit_code(&self, exit_code: u8) -> u8 {
        if self.failures.is_empty() { 0 } else { exit_code }
    }
}

/// A pod or node to ping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PingTarget {
    pub name: String,
    pub ip: IpAddr,
    /// Pods: the node it runs on and that node's address.
    pub node_name: String,
    pub node_ip: String,
}

/// `k=v,k=v` in key order: the DaemonSet's `matchLabels` as a label selector (Kube-OVN's
/// `labels.Set(...).String()`).
pub fn selector(match_labels: &BTreeMap<String, String>) -> String {
    match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

fn family_ok(families: &[bool], ip: IpAddr) -> bool {
    families.is_empty() || families.contains(&ip.is_ipv6())
}

/// Every address of the pods in the pod's families (`families`: `is_ipv6` of the pinger's own
/// pod addresses; empty: every family), as Kube-OVN filters by its `PodProtocols`.
pub fn pod_targets(pods: &[Pod], families: &[bool]) -> Vec<PingTarget> {
    let mut out = Vec::new();
    for pod in pods {
        let Some(status) = &pod.status else { continue };
        let node_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let node_ip = status.host_ip.clone().unwrap_or_default();
        let ips = status.pod_ips.iter().flatten().map(|p| p.ip.as_str());
        for ip in ips.filter_map(|ip| ip.parse::<IpAddr>().ok()) {
            if family_ok(families, ip) {
                out.push(PingTarget {
                    name: pod.metadata.name.clone().unwrap_or_default(),
                    ip,
                    node_name: node_name.clone(),
                    node_ip: node_ip.clone(),
                });
            }
        }
    }
    out
}

/// Every node's `InternalIP` in the pod's families.
pub fn node_targets(nodes: &[Node], families: &[bool]) -> Vec<PingTarget> {
    let mut out = Vec::new();
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let addresses = node.status.as_ref().and_then(|s| s.addresses.as_ref());
        for addr in addresses
            .into_iter()
            .flatten()
            .filter(|a| a.type_ == "InternalIP")
        {
            if let Ok(ip) = addr.address.parse::<IpAddr>()
                && family_ok(families, ip)
            {
                out.push(PingTarget {
                    name: name.clone(),
                    ip,
                    node_name: name.clone(),
                    node_ip: addr.address.clone(),
                });
            }
        }
    }
    out
}

/// Who the pinger is and whom it pings, found at start as Kube-OVN's `ParseFlags` does: the
/// label selector of the DaemonSet owning this pod, and the families of this pod's addresses.
#[derive(Debug, Clone)]
pub struct Peers {
    pub namespace: String,
    pub selector: String,
    pub families: Vec<bool>,
}

/// The selector when the pod is unknown (`POD_NAME` unset): Kube-OVN's DaemonSet label.
pub const DEFAULT_SELECTOR: &str = "app=kube-ovn-pinger";

impl Peers {
    pub async fn discover(kube: &kube::Client, config: &Config) -> Result<Self, String> {
        let flags = &config.flags;
        let namespace = flags.pod_namespace.clone();
        let fallback_families = || -> Vec<bool> {
            flags
                .pod_ip
                .parse::<IpAddr>()
                .map(|ip| vec![ip.is_ipv6()])
                .unwrap_or_default()
        };
        if flags.pod_name.is_empty() {
            return Ok(Self {
                namespace,
                selector: DEFAULT_SELECTOR.into(),
                families: fallback_families(),
            });
        }
        let pod = Api::<Pod>::namespaced(kube.clone(), &namespace)
            .get(&flags.pod_name)
            .await
            .map_err(|e| format!("pod {namespace}/{}: {e}", flags.pod_name))?;
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.api_version == "apps/v1" && o.kind == "DaemonSet");
        let selector = match owner {
            Some(owner) => {
                let ds = Api::<DaemonSet>::namespaced(kube.clone(), &namespace)
                    .get(&owner.name)
                    .await
                    .map_err(|e| format!("daemonset {namespace}/{}: {e}", owner.name))?;
                let labels = ds.spec.and_then(|s| s.selector.match_labels).unwrap_or_default();
                selector(&labels)
            }
            None => DEFAULT_SELECTOR.into(),
        };
        let families: Vec<bool> = pod
            .status
            .iter()
            .flat_map(|s| s.pod_ips.iter().flatten())
            .filter_map(|p| p.ip.parse::<IpAddr>().ok())
            .map(|ip| ip.is_ipv6())
            .collect();
        Ok(Self {
            namespace,
            selector,
            families: if families.is_empty() {
                fallback_families()
            } else {
                families
            },
        })
    }
}

/// What a round needs.
pub struct Prober<'a> {
    pub config: &'a Config,
    pub kube: &'a kube::Client,
    pub peers: &'a Peers,
    pub databases: Option<&'a Databases>,
    pub metrics: &'a Metrics,
}

impl Prober<'_> {
    fn node(&self) -> &str {
        &self.config.flags.node_name
    }

    fn labels(&self) -> PingLabels {
        PingLabels {
            src_node_name: self.config.flags.node_name.clone(),
            src_node_ip: self.config.flags.host_ip.clone(),
            src_pod_ip: self.config.flags.pod_ip.clone(),
            ..PingLabels::default()
        }
    }

    pub async fn round(&self) -> Report {
        let mut report = Report::default();
        if self.config.kube_ovn_mode() {
            self.check_ovs(&mut report).await;
            self.check_port_bindings(&mut report).await;
        }
        match probes::apiserver(self.kube).await {
            Ok(ms) => self.metrics.apiserver(self.node(), Some(ms)),
            Err(e) => {
                self.metrics.apiserver(self.node(), None);
                report.fail(e);
            }
        }
        self.ping_peers(&mut report).await;
        self.check_dns(&mut report).await;
        for target in &self.config.targets {
            if !family_ok(&self.peers.families, target.addr.ip()) {
                continue;
            }
            let result = match target.proto {
                TargetProto::Tcp => probes::tcp_check(target.addr).await,
                TargetProto::Udp => probes::udp_check(target.addr).await,
            };
            match result {
                Ok(()) => tracing::info!(target = %target.addr, proto = ?target.proto, "reachable"),
                Err(e) => report.fail(e),
            }
        }
        self.ping_external(&mut report).await;
        tracing::info!(failures = report.failures.len(), "round done");
        report
    }

    async fn check_ovs(&self, report: &mut Report) {
        let flags = &self.config.flags;
        let timeout = self.config.ovs_timeout;
        let (db, vswitchd, controller) = tokio::join!(
            ovs::daemon_version(&flags.database_vswitch_file_pid_path, "ovsdb-server", timeout),
            ovs::daemon_version(&flags.service_vswitchd_file_pid_path, "ovs-vswitchd", timeout),
            ovs::daemon_version(
                &flags.service_ovncontroller_file_pid_path,
                "ovn-controller",
                timeout
            ),
        );
        let mut ovs_up = true;
        for result in [db, vswitchd] {
            if let Err(e) = result {
                ovs_up = false;
                report.fail(format!("ovs is down: {e}"));
            }
        }
        self.metrics.set_ovs_up(self.node(), ovs_up);
        if let Err(e) = &controller {
            report.fail(format!("ovn-controller is down: {e}"));
        }
        self.metrics
            .set_ovn_controller_up(self.node(), controller.is_ok());
    }

    async fn check_port_bindings(&self, report: &mut Report) {
        let Some(databases) = self.databases else { return };
        match databases.unbound_ports(self.node()).await {
            Ok(unbound) => {
                self.metrics
                    .set_inconsistent_port_bindings(self.node(), unbound.len());
                if !unbound.is_empty() {
                    report.fail(format!(
                        "{} ports not exist in ovn-sb-bindings: {}",
                        unbound.len(),
                        unbound.join(", ")
                    ));
                }
            }
            // Kube-OVN leaves the gauge as it was when the comparison cannot be made.
            Err(e) => report.fail(format!("port bindings: {e}")),
        }
    }

    async fn ping_peers(&self, report: &mut Report) {
        let pods = Api::<Pod>::namespaced(self.kube.clone(), &self.peers.namespace)
            .list(&ListParams::default().labels(&self.peers.selector))
            .await;
        let nodes = Api::<Node>::all(self.kube.clone())
            .list(&ListParams::default())
            .await;
        let pods = match pods {
            Ok(list) => pod_targets(&list.items, &self.peers.families),
            Err(e) => {
                report.fail(format!("listing pingers ({}): {e}", self.peers.selector));
                Vec::new()
            }
        };
        let nodes = match nodes {
            Ok(list) => node_targets(&list.items, &self.peers.families),
            Err(e) => {
                report.fail(format!("listing nodes: {e}"));
                Vec::new()
            }
        };
        let verbose = self.config.flags.enable_verbose_conn_check;
        let pings = pods
            .iter()
            .map(|t| (t, true, POD_PING_TIMEOUT))
            .chain(nodes.iter().map(|t| (t, false, NODE_PING_TIMEOUT)))
            .map(|(target, is_pod, timeout)| async move {
                let mut failures = Vec::new();
                if verbose {
                    let flags = &self.config.flags;
                    let tcp = std::net::SocketAddr::new(target.ip, flags.tcp_conn_check_port);
                    let udp = std::net::SocketAddr::new(target.ip, flags.udp_conn_check_port);
                    failures.extend(probes::tcp_check(tcp).await.err());
                    failures.extend(probes::udp_check(udp).await.err());
                }
                let kind = if is_pod { "pod" } else { "node" };
                match icmp::ping(target.ip, PING_COUNT, PING_INTERVAL, timeout).await {
                    Ok(stats) => {
                        tracing::info!(kind, target = %target.name, ip = %target.ip, sent = stats.sent, lost = stats.lost(), avg_rtt_ms = stats.avg_rtt_ms(), "ping");
                        let mut labels = self.labels();
                        labels.target_node_name.clone_from(&target.node_name);
                        labels.target_node_ip.clone_from(&target.node_ip);
                        if is_pod {
                            labels.target_pod_ip = target.ip.to_string();
                            self.metrics.pod_ping(&labels, stats.avg_rtt_ms(), stats.lost(), stats.sent);
                        } else {
                            self.metrics.node_ping(&labels, stats.avg_rtt_ms(), stats.lost(), stats.sent);
                        }
                        if stats.lost() > 0 {
                            failures.push(format!("ping {kind} {} {}: {} of {} lost", target.name, target.ip, stats.lost(), stats.sent));
                        }
                    }
                    Err(e) => failures.push(format!("ping {kind} {} {}: {e}", target.name, target.ip)),
                }
                failures
            });
        for failure in join_all(pings).await.into_iter().flatten() {
            report.fail(failure);
        }
    }

    async fn check_dns(&self, report: &mut Report) {
        let flags = &self.config.flags;
        // Empty: a cluster without cluster DNS (the lab) is not failed on it every round.
        let names: [(&str, RecordDns); 2] = [
            (&flags.internal_dns, Metrics::internal_dns),
            (&flags.external_dns, Metrics::external_dns),
        ];
        for (name, record) in names.into_iter().filter(|(name, _)| !name.is_empty()) {
            match probes::resolve(name).await {
                Ok((_, ms)) => record(self.metrics, self.node(), Some(ms)),
                Err(e) => {
                    record(self.metrics, self.node(), None);
                    report.fail(e);
                }
            }
        }
    }

    async fn ping_external(&self, report: &mut Report) {
        for &addr in &self.config.external_addresses {
            if !family_ok(&self.peers.families, addr) {
                continue;
            }
            match icmp::ping(addr, PING_COUNT, PING_INTERVAL, EXTERNAL_PING_TIMEOUT).await {
                Ok(stats) => {
                    let target = addr.to_string();
                    self.metrics
                        .external_ping(&self.labels(), &target, stats.avg_rtt_ms(), stats.lost());
                    if stats.lost() > 0 {
                        report.fail(format!(
                            "ping external {addr}: {} of {} lost",
                            stats.lost(),
                            stats.sent
                        ));
                    }
                }
                Err(e) => report.fail(format!("ping external {addr}: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests;
