//! The speaker as a daemon: Kubernetes watches in, BGP out, event-driven.
//!
//! ```text
//!  Pods, Subnets, Services, IptablesEIPs, IPs, OvnEips,
//!  EndpointSlices (externalTrafficPolicy Local)       ──watch──▶ Watched<_> ──tick──┐
//!  BgpAdvertisements, Namespaces, BgpPeers (labels) ──watch──▶ Watched<_> ──tick──────┤
//!                                                                                      ▼
//!              routes task: policy::evaluate (per peer) ─▶ PeerHandle::replace_all (each its own)
//!                                      (first pass after every cache synced ─▶ set_ready: GR EoR)
//!                                      refusals ─▶ Warning events (once each) and the log
//!                                      the evaluation ─▶ /bgp/routes, BgpPeer status `advertised`
//!                                      verdicts, conflicts ─▶ BgpAdvertisement status task
//!  kernel (route get toward each peer) ─▶ next-hop task (2 s) ─▶ PeerHandle::set_local_addresses
//!  BFD session per peer ─watch─▶ bfd task ─▶ PeerHandle::bfd_down / bfd_up
//!  state file heartbeat (graceful restart: "did we restart within the restart time?")
//!  SIGTERM ─▶ sessions with graceful restart closed without NOTIFICATION (the peer keeps our
//!             routes stale, the state file stays fresh: the next start sets the R bit), the
//!             others get Cease / Administrative Shutdown (see [`StopKind`]); every session
//!             gets Cease when the node lost its BGP label (`--bgp-node-label`: it leaves BGP)
//! ```
//!
//! BGP sockets, BFD sockets and netlink live in the namespace given as `bgp_ns` and are made on
//! the `bgp` runtime, whose threads are in it; the Kubernetes client stays on the caller's. In a
//! cluster both are the host's (hostNetwork DaemonSet); in tests and the lab a node is a network
//! namespace and the API server is on the host's loopback.

mod advertisements;
mod crd_peers;
mod exports;
mod http;
pub mod nexthop;
pub mod peers;
pub mod routes_command;
pub mod routes_view;
mod state;
mod tasks;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, PoisonError, RwLock};

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube_ovn_api::bgp_advertisement::BgpAdvertisement;
use kube_ovn_api::crd::{Ip, IptablesEIP, OvnEip, Subnet};
use kube_ovn_dataplane::{Netlink, Netns};
use kube_ovn_support::{AbortOnDrop, Watched};
use tokio::runtime::Handle;
use tokio::sync::watch;

use crate::bfd::{Bfd, BfdHandle};
use crate::config::Config;
use crate::crd::{AdvertisedCounts, BgpPeer};
use crate::driver::{PeerHandle, Speaker, SpeakerConfig};
use crate::metrics::Metrics;
use peers::PeerPlan;

/// Why the speaker stopped or could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A setting is unusable (the message names the flag).
    #[error("{0}")]
    Config(String),
    /// The driver refused a peer or a listener.
    #[error(transparent)]
    Driver(#[from] crate::driver::DriverError),
    /// Kernel access failed.
    #[error(transparent)]
    Dataplane(#[from] kube_ovn_dataplane::Error),
    /// A BFD session could not be made.
    #[error("BFD for {peer}: {source}")]
    Bfd {
        /// The peer.
        peer: IpAddr,
        /// Why.
        source: crate::bfd::BfdError,
    },
    /// A listener could not be opened.
    #[error("{what}: {source}")]
    Io {
        /// Which.
        what: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Where BGP sockets live.
#[derive(Clone)]
pub struct BgpPlace {
    /// A runtime whose threads are in `netns`.
    pub runtime: Handle,
    /// The namespace.
    pub netns: Netns,
}

async fn on_bgp<T: Send + 'static>(place: &BgpPlace, f: impl FnOnce() -> T + Send + 'static) -> T {
    place
        .runtime
        .spawn(async move { f() })
        .await
        .expect("a BGP-side task panicked")
}

/// What every task needs.
pub struct Runtime {
    /// Validated flags.
    pub config: Config,
    /// The API.
    pub kube: kube::Client,
    /// Where BGP sockets live.
    pub place: BgpPlace,
    /// The BGP driver.
    pub speaker: Arc<Speaker>,
    /// BFD sessions.
    pub bfd: Arc<Bfd>,
    /// Route lookups in the BGP namespace.
    pub netlink: Netlink,
    /// This process restarted within the graceful-restart time.
    pub restarting: bool,
    /// Prometheus metrics.
    pub metrics: Metrics,
    /// Runs the long-lived tasks; one that stops fails `/livez`.
    pub supervisor: kube_ovn_support::Supervisor,
}

/// A running peer as the run loop keeps it.
pub struct RunningPeer {
    /// The driver handle.
    pub handle: PeerHandle,
    /// What it was built from.
    pub plan: PeerPlan,
    /// Its BFD session, when BFD is on for it (dropping it tells the peer AdminDown).
    pub bfd: Option<BfdHandle>,
    /// The BgpPeer it comes from; `None` for a flag peer.
    pub name: Option<String>,
    /// Its routes counted by kind, set by the routes task, written to the BgpPeer's status.
    pub advertised: watch::Sender<AdvertisedCounts>,
    /// Its helpers (BFD follower, status writer), aborted with it, so a removed peer takes them
    /// along.
    _tasks: Vec<AbortOnDrop<()>>,
}

/// The peers now configured, from flags and from BgpPeers; tasks iterate it on every pass and
/// its counter wakes the routes task when a peer comes or goes.
#[derive(Default)]
pub struct PeerSet {
    peers: RwLock<BTreeMap<IpAddr, Arc<RunningPeer>>>,
    changed: watch::Sender<u64>,
}

impl PeerSet {
    /// Every running peer.
    pub fn all(&self) -> Vec<Arc<RunningPeer>> {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Whether a peer with this address runs.
    pub fn contains(&self, address: IpAddr) -> bool {
        self.peers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&address)
    }

    /// Marked changed when a peer is added or removed.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Starts a peer (and its BFD session and, for a BgpPeer, its status writer).
    pub async fn add(&self, rt: &Runtime, plan: PeerPlan, crd_name: Option<String>) -> Result<(), RunError> {
        let address = plan.config.address;
        let speaker = rt.speaker.clone();
        let peer_config = plan.config.clone();
        let handle = on_bgp(&rt.place, move || speaker.add_peer(peer_config)).await?;
        let mut tasks = Vec::new();
        let mut bfd = None;
        let (advertised, counts) = watch::channel(AdvertisedCounts::new());
        if let Some(timers) = plan.bfd {
            let local = match plan.config.local_address {
                Some(l) => Some(l),
                None => rt.netlink.source_toward(address).await?,
            };
            let local =
                local.ok_or_else(|| RunError::Config(format!("BFD: no route toward peer {address}")))?;
            let b = rt.bfd.clone();
            let session = on_bgp(&rt.place, move || b.add_session(address, local, timers))
                .await
                .map_err(|source| RunError::Bfd {
                    peer: address,
                    source,
                })?;
            tasks.push(rt.supervisor.spawn_owned(
                format!("bfd-follower {address}"),
                tasks::bfd(handle.clone(), address, session.subscribe()),
            ));
            bfd = Some(session);
        }
        if let Some(name) = &crd_name {
            let status = handle.watch_status();
            let (kube, node) = (rt.kube.clone(), rt.config.flags.node_name.clone());
            tasks.push(rt.supervisor.spawn_owned(
                format!("bgppeer-status {name}"),
                crd_peers::status_task(kube, name.clone(), node, status, counts),
            ));
        }
        tracing::info!(peer = %address, source = %plan.source, "peer added");
        let peer = Arc::new(RunningPeer {
            handle,
            plan,
            bfd,
            name: crd_name,
            advertised,
            _tasks: tasks,
        });
        self.peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(address, peer);
        self.changed.send_modify(|g| *g += 1);
        Ok(())
    }

    /// Stops a peer with Cease "peer de-configured" (RFC 4486 6/3).
    pub async fn remove(&self, rt: &Runtime, address: IpAddr) {
        let removed = self
            .peers
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&address);
        if removed.is_some() {
            let speaker = rt.speaker.clone();
            let done = rt
                .place
                .runtime
                .spawn(async move { speaker.remove_peer(address).await })
                .await;
            if let Ok(Err(e)) = done {
                tracing::warn!(peer = %address, error = %e, "peer removal");
            }
            self.changed.send_modify(|g| *g += 1);
        }
    }
}

/// Runs the speaker until `shutdown` completes.
pub async fn run(
    config: Config,
    kube: kube::Client,
    place: BgpPlace,
    shutdown: impl Future<Output = ()>,
) -> Result<(), RunError> {
    let flags = config.flags.clone();
    let netlink = Netlink::connect(&place.netns)?;
    let restarting = state::restarted_recently(&flags.state_dir, flags.graceful_restart_time);
    if restarting {
        tracing::info!("restarted within the graceful-restart time: the first sessions carry the R bit");
    }
    // Kube-OVN's --allowed-source-addresses: the kernel's source toward each peer must be one of
    // them, and it is then pinned as the session's local address (and so the next hop).
    let mut pinned = BTreeMap::new();
    if !config.allowed_sources.is_empty() {
        for &peer in &config.neighbors {
            match netlink.source_toward(peer).await? {
                Some(src) if config.allowed_sources.contains(&src) => {
                    pinned.insert(peer, src);
                }
                other => {
                    return Err(RunError::Config(format!(
                        "--allowed-source-addresses: the route to {peer} uses source {other:?}, which is not in the list"
                    )));
                }
            }
        }
    }
    let plans = peers::from_flags(&config, restarting, |p| pinned.get(&p).copied());
    let listen: Vec<SocketAddr> = if flags.passivemode {
        vec![SocketAddr::new(flags.listen_address, flags.bgp_port)]
    } else {
        Vec::new()
    };
    let speaker_config = SpeakerConfig {
        listen,
        allowed_sources: None,
    };
    let speaker = Arc::new(on_bgp(&place, move || Speaker::new(speaker_config)).await?);
    let rt = Arc::new(Runtime {
        config: config.clone(),
        kube: kube.clone(),
        place: place.clone(),
        speaker,
        bfd: Arc::new(Bfd::new()),
        netlink: netlink.clone(),
        restarting,
        metrics: Metrics::new(),
        supervisor: kube_ovn_support::Supervisor::new(),
    });
    let peers = Arc::new(PeerSet::default());
    for plan in plans {
        peers.add(&rt, plan, None).await?;
    }

    let watched = tasks::Objects {
        pods: Watched::<Pod>::start(
            Api::all(kube.clone()),
            Some("spec.hostNetwork=false".into()),
            None,
        ),
        subnets: Watched::<Subnet>::start(Api::all(kube.clone()), None, None),
        services: Watched::<Service>::start(Api::all(kube.clone()), None, None),
        eips: Watched::<IptablesEIP>::start(Api::all(kube.clone()), None, None),
        ips: Watched::<Ip>::start(Api::all(kube.clone()), None, None),
        ovn_eips: Watched::<OvnEip>::start(Api::all(kube.clone()), None, None),
        endpoint_slices: Watched::<EndpointSlice>::start(Api::all(kube.clone()), None, None),
    };
    let bgp_peers: Watched<BgpPeer> = Watched::start(Api::all(kube.clone()), None, None);
    let policy = exports::PolicyObjects {
        advertisements: Watched::<BgpAdvertisement>::start(Api::all(kube.clone()), None, None),
        namespaces: Watched::<Namespace>::start(Api::all(kube.clone()), None, None),
        bgp_peers: bgp_peers.clone(),
    };
    let nodes: Watched<Node> = Watched::start(
        Api::all(kube.clone()),
        Some(format!("metadata.name={}", flags.node_name)),
        None,
    );
    let node_cache = nodes.clone();
    let metrics_listener = tokio::net::TcpListener::bind((flags.metrics_address, flags.pprof_port))
        .await
        .map_err(|source| RunError::Io {
            what: format!("bind --pprof-port {}", flags.pprof_port),
            source,
        })?;

    // Every long-lived task runs supervised: one that panics or returns is logged with its
    // cause and fails /livez, so kubelet restarts the speaker (support::Supervisor).
    let tasks = rt.supervisor.clone();
    // The watch tasks feeding the caches: a cache that stops changing is as bad as a dead task.
    let w = watched.pods.clone();
    tasks.also_check("pods-watch", move || w.stopped());
    let w = watched.subnets.clone();
    tasks.also_check("subnets-watch", move || w.stopped());
    let w = watched.services.clone();
    tasks.also_check("services-watch", move || w.stopped());
    let w = watched.eips.clone();
    tasks.also_check("iptables-eips-watch", move || w.stopped());
    let w = watched.ips.clone();
    tasks.also_check("ips-watch", move || w.stopped());
    let w = watched.ovn_eips.clone();
    tasks.also_check("ovn-eips-watch", move || w.stopped());
    let w = watched.endpoint_slices.clone();
    tasks.also_check("endpointslices-watch", move || w.stopped());
    let w = bgp_peers.clone();
    tasks.also_check("bgppeers-watch", move || w.stopped());
    let w = nodes.clone();
    tasks.also_check("node-watch", move || w.stopped());
    let w = policy.advertisements.clone();
    tasks.also_check("bgpadvertisements-watch", move || w.stopped());
    let w = policy.namespaces.clone();
    tasks.also_check("namespaces-watch", move || w.stopped());
    let (published, evaluations) = watch::channel(Arc::default());
    let (reports, report_changes) = watch::channel(Arc::default());
    tasks.spawn(
        "bgpadvertisements-status",
        advertisements::status_task(
            kube.clone(),
            flags.node_name.clone(),
            policy.advertisements.clone(),
            report_changes,
        ),
    );
    let tables_handed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tasks.spawn(
        "routes",
        tasks::routes(
            config.clone(),
            kube.clone(),
            peers.clone(),
            watched,
            policy,
            exports::Exports::new(published, reports),
            tables_handed.clone(),
        ),
    );
    tasks.spawn(
        "nexthop",
        nexthop::task(config.clone(), peers.clone(), netlink.clone()),
    );
    tasks.spawn(
        "bgppeers",
        crd_peers::task(rt.clone(), peers.clone(), bgp_peers, nodes),
    );
    let state_dir = flags.state_dir.clone();
    tasks.spawn("heartbeat", async move {
        state::heartbeat(state_dir).await;
        // It returns only without a state dir (logged there): the speaker runs on without
        // graceful restart's memory, so that end is not a failure of the process.
        std::future::pending::<()>().await;
    });
    let endpoints = tasks::metrics_endpoints(rt.clone(), peers.clone(), tables_handed).supervised(&tasks);
    let bgp_routes = http::router(peers.clone(), evaluations);
    tasks.spawn("metrics-server", async move {
        if let Err(e) = endpoints.serve_with(metrics_listener, bgp_routes).await {
            tracing::error!(error = %e, "metrics server stopped");
        }
    });
    shutdown.await;
    tasks.shutdown().await;
    let leaving = leaving_bgp(&flags, &node_cache);
    if leaving {
        tracing::info!(label = %flags.bgp_node_label, "this node no longer has the BGP label: every session gets Cease");
    }
    // A BgpPeer may turn graceful restart on while the flag is off: any session closed for a
    // restart makes the next start a restart.
    let for_restart = stop_peers(&peers.all(), leaving).await;
    state::stopped(&flags.state_dir, for_restart);
    Ok(())
}

/// How a peer's session ends when the speaker stops (SIGTERM: every rolling update and drain).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopKind {
    /// Graceful restart is on for it: the TCP connection is closed with no NOTIFICATION, so the
    /// peer, as GR helper, keeps our routes marked stale for the restart time and forwarding
    /// goes on (RFC 4724 §4.2), exactly as after a crash; the next start sets the R bit.
    ///
    /// RFC 8538's N bit is not used for this: with it, a NOTIFICATION would keep our routes too,
    /// but §5 makes Cease / Administrative Shutdown (and Peer De-configured) a Hard Reset, which
    /// flushes them, so a restart would have to be announced under a subcode that does not say
    /// what happens; and a peer that does not negotiate the N bit would flush on any Cease.
    /// Closing TCP means "restarting" to every GR helper.
    ForRestart,
    /// No graceful restart: Cease / Administrative Shutdown (RFC 4486 6/2, RFC 9003 message),
    /// and the peer withdraws our routes at once.
    Shutdown,
}

impl StopKind {
    /// The stop for a peer whose session has (or lacks) graceful restart.
    pub fn for_peer(plan: &PeerPlan) -> StopKind {
        if plan.config.session.graceful_restart.is_some() {
            StopKind::ForRestart
        } else {
            StopKind::Shutdown
        }
    }
}

/// Whether `node` lacks `label` (`key=value`; empty: never): its speaker is stopping because the
/// node leaves BGP (the DaemonSet no longer selects it), not for a restart. A Node that cannot
/// be read decides nothing: graceful restart stays the default.
pub fn node_leaves_bgp(node: Option<&Node>, label: &str) -> bool {
    let Some((key, value)) = label.split_once('=') else {
        return false;
    };
    let Some(node) = node else {
        return false;
    };
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .is_none_or(|v| v != value)
}

/// The node as the watch last saw it (the speaker may list and watch Nodes, not get them; the
/// label's removal reaches the watch before the DaemonSet controller deletes the pod for it),
/// judged by [`node_leaves_bgp`].
fn leaving_bgp(flags: &crate::config::Flags, nodes: &Watched<Node>) -> bool {
    if flags.bgp_node_label.is_empty() || flags.node_name.is_empty() {
        return false;
    }
    let node = nodes.get(&flags.node_name, None);
    node_leaves_bgp(node.as_deref(), &flags.bgp_node_label)
}

/// Ends every session as its [`StopKind`] says (every one with Cease when the node `leaving`
/// BGP), each waited for (the driver bounds it); true when one was closed for a restart.
async fn stop_peers(peers: &[Arc<RunningPeer>], leaving: bool) -> bool {
    let mut for_restart = false;
    for peer in peers {
        let kind = if leaving {
            StopKind::Shutdown
        } else {
            StopKind::for_peer(&peer.plan)
        };
        for_restart |= kind == StopKind::ForRestart;
        let address = peer.handle.address();
        tracing::info!(peer = %address, ?kind, "stopping the session");
        let stopped = match kind {
            StopKind::ForRestart => peer.handle.stop_for_restart().await,
            StopKind::Shutdown => peer.handle.shutdown("kube-ovn-speaker stopping").await,
        };
        if let Err(e) = stopped {
            tracing::warn!(peer = %address, error = %e, "session stop");
        }
    }
    for_restart
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        n
    }

    #[test]
    fn a_node_without_the_bgp_label_leaves_bgp_and_a_restart_does_not() {
        let label = "ovn.kubernetes.io/bgp=true";
        assert!(!node_leaves_bgp(
            Some(&node(&[("ovn.kubernetes.io/bgp", "true")])),
            label
        ));
        assert!(node_leaves_bgp(
            Some(&node(&[("ovn.kubernetes.io/bgp", "false")])),
            label
        ));
        assert!(node_leaves_bgp(Some(&node(&[])), label));
        assert!(!node_leaves_bgp(None, label), "a Node that cannot be read");
        assert!(!node_leaves_bgp(Some(&node(&[])), ""), "the check off");
    }
}
