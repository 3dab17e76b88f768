//! `kube-ovn-daemon`, the node agent: the CNI server behind the `kube-ovn` shim (the
//! `kube-ovn-cni` crate, whose wire types it answers), and the node's own OVS and kernel plumbing.
//!
//! Tasks (all on one tokio runtime; inputs are watch events and requests):
//!
//! ```text
//!   pods on this node ──watch──▶ Watched<Pod> ──tick──▶ ADD waiters (wait_for_plan)
//!                                    └─applied──▶ qos task ──▶ Ovs::set_qos (live rate changes, retried)
//!   this Node, Subnets ──watch, once listed──▶ node task ──▶ ovn0 + routes (node.rs)
//!   Subnets, Nodes, pods, Services, IPs, BgpPeers, default/kubernetes's EndpointSlices
//!     ──tick, every --gateway-check-interval, once listed──▶ gateway task ──▶ nft tables
//!       (NAT, ingress marks), ip rules + table routes, sysctls (gateway.rs, lb_ingress.rs)
//!   every --ovn0-check-interval ──▶ ovn0 check ──ping join gateway──▶ Node NetworkUnavailable
//!   shim ──unix socket (0600)──▶ CNI server (axum) ──per-pod lock──▶ add_nic / del_nic / check_nic / gc
//!   Open_vSwitch DB ◀──▶ Ovs (replica + transactions)      kernel ◀── dataplane (netlink, ethtool)
//!   /metrics /healthz /livez /readyz ◀── metrics listener
//! ```
//!
//! The tasks above run under one `kube_ovn_support::Supervisor`: a task that panics or returns
//! is logged at error level with its name and cause, and `/livez` answers 503 naming it, so the
//! liveness probe has kubelet restart the daemon instead of it running on without, say, its
//! QoS task.

pub mod chassis;
pub mod config;
pub mod error;
pub mod gateway;
pub mod health;
pub mod install;
pub mod join;
pub mod lb_ingress;
pub mod metrics;
pub mod nft_tables;
mod nic;
pub mod node;
pub mod node_routes;
pub mod ovs;
pub mod plan;
pub mod qos;
pub mod rates;
pub mod server;
pub mod veth_name;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node as K8sNode, Pod, Service};
use kube::Api;
use kube_ovn_api::crd::Subnet;
use kube_ovn_dataplane::{Netlink, Netns};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote};
use tokio::sync::mpsc;

use self::config::Config;
use self::error::DaemonError;
use self::metrics::Metrics;
use self::ovs::Ovs;
use kube_ovn_support::{KeyGuard, KeyLocks, Watched};

/// Everything a request handler needs.
pub struct Node {
    /// Validated flags.
    pub config: Config,
    /// The API.
    pub kube: kube::Client,
    /// The local Open_vSwitch database.
    pub ovs: Ovs,
    /// Where ovs-vswitchd runs.
    pub ovs_ns: Netns,
    /// Netlink in that namespace.
    pub ovs_nl: Netlink,
    /// Pods scheduled here.
    pub pods: Watched<Pod>,
    /// Every subnet.
    pub subnets: Watched<Subnet>,
    /// Every node (this one's annotations and addresses; the others' addresses for the NAT).
    pub nodes: Watched<K8sNode>,
    /// Every Service (their LoadBalancer IPs and ClusterIPs, `lb_ingress`).
    pub services: Watched<Service>,
    /// Metrics.
    pub metrics: Metrics,
    /// Pods whose ADD finished, for the QoS task to look at again.
    qos_recheck: mpsc::UnboundedSender<String>,
    locks: KeyLocks,
}

impl Node {
    /// Serializes work per pod: ADD, DEL and CHECK of one pod never overlap.
    pub async fn lock(&self, key: &str) -> KeyGuard<'_> {
        self.locks.lock(key).await
    }

    /// Asks the QoS task to compare pod `key`'s port with its annotations again (after ADD: a
    /// rate changed while the port was being made would otherwise wait for the next change).
    pub fn recheck_qos(&self, key: String) {
        // Only fails when the task is gone, at shutdown.
        let _ = self.qos_recheck.send(key);
    }

    /// Whether the daemon can serve ADD now (CNI STATUS, `/readyz`).
    pub fn status(&self) -> Result<(), DaemonError> {
        if self.ovs.interface(self.ovs.bridge()).is_none() {
            return Err(DaemonError::BadRequest(format!(
                "bridge {} is not in the Open_vSwitch database (is ovsdb-server up?)",
                self.ovs.bridge()
            )));
        }
        Ok(())
    }
}

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting is unusable.
    #[error("{0}")]
    Config(String),
    /// A start-up step failed.
    #[error(transparent)]
    Daemon(#[from] DaemonError),
    /// A listener could not be opened.
    #[error("{what}: {source}")]
    Io {
        /// Which.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Runs the daemon until `shutdown` completes.
pub async fn run(
    config: Config,
    kube: kube::Client,
    shutdown: impl Future<Output = ()>,
) -> Result<(), StartError> {
    let flags = config.flags.clone();
    let ovs_ns = if flags.ovs_netns.is_empty() {
        Netns::current()
    } else {
        Netns::open(&flags.ovs_netns)
    }
    .map_err(|e| StartError::Config(format!("--ovs-netns: {e}")))?;
    let ovs_nl = Netlink::connect_async(&ovs_ns).await.map_err(DaemonError::from)?;
    let remotes =
        Remote::parse_list(&flags.ovs_db).map_err(|e| StartError::Config(format!("--ovs-db: {e}")))?;
    let tables = ovs::MONITORED.iter().map(|t| (*t).to_owned()).collect();
    let client =
        Client::start(ClientConfig::new(remotes, "Open_vSwitch").monitor(MonitorTables::Only(tables)));
    client
        .wait_ready(Duration::from_secs(30))
        .await
        .map_err(DaemonError::ovsdb(format!("connect to {}", flags.ovs_db)))?;

    let pod_fields = format!("spec.nodeName={}", flags.node_name);
    let (applied_tx, applied_rx) = mpsc::unbounded_channel();
    let (qos_recheck, added_rx) = mpsc::unbounded_channel();
    let node = Arc::new(Node {
        ovs: Ovs::new(client.clone(), flags.ovs_bridge.clone()),
        ovs_ns,
        ovs_nl,
        pods: Watched::start(Api::all(kube.clone()), Some(pod_fields), Some(applied_tx)),
        subnets: Watched::start(Api::all(kube.clone()), None, None),
        nodes: Watched::start(Api::all(kube.clone()), None, None),
        services: Watched::start(Api::all(kube.clone()), None, None),
        metrics: Metrics::new(),
        qos_recheck,
        locks: KeyLocks::default(),
        config,
        kube,
    });
    let system_id = chassis::init_ovs(&node.config, &node.ovs, &node.ovs_nl, &node.kube).await?;
    tracing::info!(node = %flags.node_name, %system_id, datapath = node.config.datapath.as_str(), "chassis configured");
    if flags.install_cni_config {
        install::install(&node.config).map_err(|source| StartError::Io {
            what: "install the CNI binary and conflist".into(),
            source,
        })?;
    }

    let cni_listener = server::bind_socket(&flags.bind_socket).map_err(|source| StartError::Io {
        what: format!("bind --bind-socket {}", flags.bind_socket.display()),
        source,
    })?;
    let metrics_listener = tokio::net::TcpListener::bind((flags.metrics_address, flags.pprof_port))
        .await
        .map_err(|source| StartError::Io {
            what: format!("bind --pprof-port {}", flags.pprof_port),
            source,
        })?;

    // Every long-lived task runs supervised: one that panics or returns is logged with its
    // cause and fails /livez, so kubelet restarts the daemon (support::Supervisor).
    let tasks = kube_ovn_support::Supervisor::new();
    // The watch tasks feeding the caches: a cache that stops changing is as bad as a dead task.
    let w = node.pods.clone();
    tasks.also_check("pods-watch", move || w.stopped());
    let w = node.subnets.clone();
    tasks.also_check("subnets-watch", move || w.stopped());
    let w = node.nodes.clone();
    tasks.also_check("nodes-watch", move || w.stopped());
    let w = node.services.clone();
    tasks.also_check("services-watch", move || w.stopped());
    let network = node::NodeNetwork::new(
        node::Settings::new(&node.config),
        node.ovs.clone(),
        node.ovs_nl.clone(),
        node.nodes.clone(),
        node.subnets.clone(),
    );
    tasks.spawn("node", network.run());
    tasks.spawn("qos", qos::qos_task(node.clone(), applied_rx, added_rx));
    let egress = gateway::Gateway {
        settings: gateway::Settings::new(&node.config),
        kube: node.kube.clone(),
        ovs_ns: node.ovs_ns.clone(),
        ovs_nl: node.ovs_nl.clone(),
        subnets: node.subnets.clone(),
        nodes: node.nodes.clone(),
        pods: node.pods.clone(),
        services: node.services.clone(),
    };
    tasks.spawn("gateway", egress.run());
    let ovn0_check = health::Ovn0Check {
        node_name: flags.node_name.clone(),
        interval: flags.ovn0_check_interval,
        ovs_ns: node.ovs_ns.clone(),
        ovs_nl: node.ovs_nl.clone(),
        nodes: node.nodes.clone(),
        kube: node.kube.clone(),
    };
    tasks.spawn("ovn0-check", ovn0_check.run());
    let cni = server::cni_router(node.clone());
    tasks.spawn("cni-server", async move {
        if let Err(e) = axum::serve(cni_listener, cni).await {
            tracing::error!(error = %e, "CNI server stopped");
        }
    });
    let metrics = server::metrics_endpoints(node.clone()).supervised(&tasks);
    tasks.spawn("metrics-server", async move {
        if let Err(e) = metrics.serve(metrics_listener).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    tracing::info!(socket = %flags.bind_socket.display(), "serving CNI requests");
    shutdown.await;
    tasks.shutdown().await;
    let _ = std::fs::remove_file(&flags.bind_socket);
    Ok(())
}
