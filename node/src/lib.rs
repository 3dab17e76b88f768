//! `kube-ovn-daemon`, the node agent: the CNI server behind the `kube-ovn` shim (the
//! `kube-ovn-cni` crate, whose wire types it answers), and the node's own OVS and kernel plumbing.
//!
//! Tasks (all on one tokio runtime), each given what it reads in a small struct of its own and
//! owning the state it keeps between passes; their inputs are the watched caches' changes, typed
//! channels, timers and the shim's requests. The diagram, with each task's inputs, outputs and
//! file, is in [`run`], where they are spawned:
//!
//! - the CNI server (`server`, `nic`, `pod_plans`): ADD/DEL/CHECK/GC/STATUS from the shim;
//! - the QoS task (`qos`): live rate changes on the pods' ports;
//! - the node task (`node`, `node_routes`): `ovn0` and the routes to the pods' subnets;
//! - the gateway task (`gateway`, `lb_ingress`, `nft_tables`): egress NAT, policy routing,
//!   ingress to LoadBalancer IPs;
//! - the ovn0 check (`health`): the Node's `NetworkUnavailable` condition;
//! - the provider-network task (`provider_network`): a ProviderNetwork's NIC into `br-<pn>`
//!   and back, `ovn-bridge-mappings`, the Node's provider-network labels;
//! - the mirror task (`mirror`, `ovs::mirror`): `mirror0` and the OVS mirror onto it;
//! - the metrics listener (`server`): `/metrics /healthz /livez /readyz`.
//!
//! Start-up (`chassis`) configures `br-int` and the chassis before any task runs.
//!
//! The tasks run under one `kube_ovn_support::Supervisor`: a task that panics or returns
//! is logged at error level with its name and cause, and `/livez` answers 503 naming it, so the
//! liveness probe has kubelet restart the daemon instead of it running on without, say, its
//! QoS task.

pub mod announce;
pub mod chassis;
pub mod config;
pub mod error;
pub mod gateway;
pub mod gateway_probe;
pub mod health;
pub mod install;
pub mod join;
pub mod lb_ingress;
pub mod metrics;
pub mod mirror;
pub mod nft_tables;
pub mod nic;
pub mod node;
pub mod node_routes;
pub mod ovs;
pub mod plan;
pub mod pod_network;
pub mod pod_plans;
pub mod provider_network;
pub mod qos;
pub mod rates;
pub mod server;
pub mod veth_name;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node as K8sNode, Pod, Service};
use kube::Api;
use kube_ovn_api::crd::{ProviderNetwork, Subnet, Vlan};
use kube_ovn_dataplane::{Netlink, Netns};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote};
use kube_ovn_support::Watched;
use tokio::sync::mpsc;

use self::config::Config;
use self::error::DaemonError;
use self::metrics::Metrics;
use self::ovs::Ovs;

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
///
/// The tasks it spawns, each given what it reads and owning what it keeps between passes (the
/// caches are `Watched` clones of one watch each; `Ovs` is a handle on one replica):
///
/// ```text
///   shim ──unix socket 0600: ADD / DEL / CHECK / GC / STATUS──▶ CNI server (server.rs)
///     owns: the per-pod locks; Nic (nic.rs: Ovs, the OVS netns and netlink), which reads
///     PodPlans (pod_plans.rs: Watched<Pod> of this node, Watched<Subnet>, waits on pod changes)
///     ──▶ veths, OVS ports, the pod's addresses and routes
///     ──finished ADD: pod key (mpsc)──▶ qos task
///     ──announced addresses: Repeat (mpsc)──▶ announce task (announce.rs): 2 s later the
///         gratuitous ARPs and unsolicited NAs again, while the OVS port is still the pod's
///   pod watch ──applied Arc<Pod> (mpsc)──▶ qos task (qos.rs)
///     owns: pending retries with backoff, refusals reported
///     ──▶ the ports' OVS QoS, Warning events on pods
///   Watched<Node>, Watched<Subnet>, OVS replica changes, every 30 s
///     ──▶ node task (node.rs; plan in node_routes.rs, join annotations in join.rs)
///     owns: the Subnets as last validated
///     ──▶ ovn0 (OVS port, MAC, MTU, addresses), routes into ovn0
///   Watched<Subnet>, <Node>, <Pod>, <Service>, and its own IP, BgpPeer and default/
///   EndpointSlice watches; every --gateway-check-interval
///     ──▶ gateway task (gateway.rs; plans in lb_ingress.rs, gateway/pods.rs; nft_tables.rs)
///     owns: NftTables (what is in the kernel), the last good plan, refusals reported
///     ──▶ nft tables (NAT, ingress marks), ip rules + table routes, sysctls, Warning events
///   every --ovn0-check-interval, Watched<Node>
///     ──▶ ovn0 check (health.rs) ──ping join gateway──▶ Node NetworkUnavailable
///   Watched<ProviderNetwork>, <Vlan>, <Node>, OVS replica changes, every 30 s, backoff
///     ──▶ provider-network task (provider_network/mod.rs; plan.rs pure, mover.rs the only
///         code that changes the NIC, with an undo journal)
///     owns: per-PN backoff, failures reported
///     ──▶ br-<pn> with the NIC (snapshot in its external_ids), the NIC's addresses and routes
///         onto br-<pn>, ovn-bridge-mappings, Node labels, own pod err_mesg, Warning events
///   Watched<Pod>, OVS replica changes, every 30 s
///     ──▶ mirror task (mirror.rs; ovs/mirror.rs) ──▶ mirror0 and the Mirror row on br-int
///         (--enable-mirror: every packet; else the pods annotated ovn.kubernetes.io/mirror)
///     owns: refusals reported ──▶ Warning events on pods
///   Metrics, Ovs ──▶ metrics listener (server.rs): /metrics /healthz /livez /readyz
///
///   Open_vSwitch DB ◀──▶ Ovs (ovs.rs: replica + transactions)
///   kernel ◀── kube_ovn_dataplane (netlink, nft, ethtool, ping)
/// ```
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

    // What several tasks read: the Open_vSwitch replica and the watched caches (each a cheap
    // clone of one watch), and the metrics registry. Each task is given what it needs below.
    let ovs = Ovs::new(client.clone(), flags.ovs_bridge.clone());
    let pod_fields = format!("spec.nodeName={}", flags.node_name);
    let (applied_tx, applied_rx) = mpsc::unbounded_channel();
    let (qos_recheck, added_rx) = mpsc::unbounded_channel();
    let pods: Watched<Pod> = Watched::start(Api::all(kube.clone()), Some(pod_fields), Some(applied_tx));
    let subnets: Watched<Subnet> = Watched::start(Api::all(kube.clone()), None, None);
    let nodes: Watched<K8sNode> = Watched::start(Api::all(kube.clone()), None, None);
    let services: Watched<Service> = Watched::start(Api::all(kube.clone()), None, None);
    let pns: Watched<ProviderNetwork> = Watched::start(Api::all(kube.clone()), None, None);
    let vlans: Watched<Vlan> = Watched::start(Api::all(kube.clone()), None, None);
    let metrics = Metrics::for_node(&flags.node_name);

    let system_id = chassis::init_ovs(&config, &ovs, &ovs_nl, &kube).await?;
    tracing::info!(node = %flags.node_name, %system_id, datapath = config.datapath.as_str(), "chassis configured");
    if flags.install_cni_config {
        install::install(&config).map_err(|source| StartError::Io {
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

    // The tasks of the diagram above, each given what it reads.
    // Every long-lived task runs supervised: one that panics or returns is logged with its
    // cause and fails /livez, so kubelet restarts the daemon (support::Supervisor).
    let tasks = kube_ovn_support::Supervisor::new();
    // The watch tasks feeding the caches: a cache that stops changing is as bad as a dead task.
    let w = pods.clone();
    tasks.also_check("pods-watch", move || w.stopped());
    let w = subnets.clone();
    tasks.also_check("subnets-watch", move || w.stopped());
    let w = nodes.clone();
    tasks.also_check("nodes-watch", move || w.stopped());
    let w = services.clone();
    tasks.also_check("services-watch", move || w.stopped());
    let w = pns.clone();
    tasks.also_check("provider-networks-watch", move || w.stopped());
    let w = vlans.clone();
    tasks.also_check("vlans-watch", move || w.stopped());

    // After init_ovs (br-int and the chassis exist): the NIC moves into br-<pn>, which
    // ovn-controller patches to br-int once the mapping is written.
    let provider_networks = provider_network::ProviderNetworks {
        settings: provider_network::Settings::new(&config),
        kube: kube.clone(),
        ovs: ovs.clone(),
        ovs_ns: ovs_ns.clone(),
        ovs_nl: ovs_nl.clone(),
        pns,
        vlans: vlans.clone(),
        nodes: nodes.clone(),
        fail_at: None,
        metrics: metrics.clone(),
    };
    tasks.spawn("provider-network", provider_networks.run());

    let network = node::NodeNetwork::new(
        node::Settings::new(&config),
        ovs.clone(),
        ovs_nl.clone(),
        nodes.clone(),
        subnets.clone(),
    );
    tasks.spawn("node", network.run());

    let qos = qos::Qos {
        node_name: flags.node_name.clone(),
        kube: kube.clone(),
        ovs: ovs.clone(),
        pods: pods.clone(),
    };
    tasks.spawn("qos", qos::qos_task(qos, applied_rx, added_rx));

    let egress = gateway::Gateway {
        settings: gateway::Settings::new(&config),
        kube: kube.clone(),
        ovs_ns: ovs_ns.clone(),
        ovs_nl: ovs_nl.clone(),
        subnets: subnets.clone(),
        nodes: nodes.clone(),
        pods: pods.clone(),
        services,
    };
    tasks.spawn("gateway", egress.run());

    let ovn0_check = health::Ovn0Check {
        node_name: flags.node_name.clone(),
        interval: flags.ovn0_check_interval,
        ovs_ns: ovs_ns.clone(),
        ovs_nl: ovs_nl.clone(),
        nodes: nodes.clone(),
        kube: kube.clone(),
    };
    tasks.spawn("ovn0-check", ovn0_check.run());

    let mirror = mirror::MirrorTask {
        settings: mirror::Settings::new(&config),
        kube,
        ovs: ovs.clone(),
        ovs_nl: ovs_nl.clone(),
        pods: pods.clone(),
    };
    tasks.spawn("mirror", mirror.run());

    let (announcer, repeats) = announce::channel();
    tasks.spawn("announce", announce::repeat_task(ovs.clone(), repeats));

    let nic = nic::Nic {
        settings: nic::Settings::new(&config),
        ovs: ovs.clone(),
        ovs_ns,
        ovs_nl,
        plans: pod_plans::PodPlans {
            pods,
            subnets,
            vlans,
            nodes,
            default_mtu: config.default_mtu,
            node_name: flags.node_name.clone(),
            wait_address_timeout: flags.wait_address_timeout,
            metrics: metrics.clone(),
        },
        metrics: metrics.clone(),
        announcer,
    };
    let cni = server::cni_router(Arc::new(server::CniServer::new(
        nic,
        qos_recheck,
        metrics.clone(),
    )));
    tasks.spawn("cni-server", async move {
        if let Err(e) = axum::serve(cni_listener, cni).await {
            tracing::error!(error = %e, "CNI server stopped");
        }
    });
    let endpoints = server::metrics_endpoints(metrics, ovs).supervised(&tasks);
    tasks.spawn("metrics-server", async move {
        if let Err(e) = endpoints.serve(metrics_listener).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    tracing::info!(socket = %flags.bind_socket.display(), "serving CNI requests");
    shutdown.await;
    tasks.shutdown().await;
    let _ = std::fs::remove_file(&flags.bind_socket);
    Ok(())
}
