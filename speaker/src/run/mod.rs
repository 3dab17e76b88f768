//! The speaker as a daemon: Kubernetes watches in, BGP out, event-driven.
//!
//! ```text
//!  Pods, Subnets, Services, IptablesEIPs ──watch──▶ Watched<_> ──tick──┐
//!                                                                        ▼
//!                                      routes task: announce::desired ─▶ PeerHandle::replace_all
//!                                      (first pass after every cache synced ─▶ set_ready: GR EoR)
//!  kernel (route get toward each peer) ─▶ next-hop task (2 s) ─▶ PeerHandle::set_local_addresses
//!  BFD session per peer ─watch─▶ bfd task ─▶ PeerHandle::bfd_down / bfd_up
//!  state file heartbeat (graceful restart: "did we restart within the restart time?")
//!  side tasks: the seam for the centralized-gateway NAT task (a later issue) beside the BGP one
//! ```
//!
//! BGP sockets, BFD sockets and netlink live in the namespace given as `bgp_ns` and are made on
//! the `bgp` runtime, whose threads are in it; the Kubernetes client stays on the caller's. In a
//! cluster both are the host's (hostNetwork DaemonSet); in tests and the lab a node is a network
//! namespace and the API emulator is on the host's loopback.

pub mod nexthop;
pub mod peers;
mod state;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::Api;
use kube_ovn_api::crd::{IptablesEIP, Subnet};
use kube_ovn_dataplane::{Netlink, Netns};
use kube_ovn_support::Watched;
use tokio::runtime::Handle;

use crate::announce::{self, Objects, Scope};
use crate::bfd::Bfd;
use crate::config::Config;
use crate::driver::{PeerHandle, Speaker, SpeakerConfig};
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

/// A running peer as the run loop keeps it.
pub struct RunningPeer {
    /// The driver handle.
    pub handle: PeerHandle,
    /// What it was built from.
    pub plan: PeerPlan,
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

/// Runs the speaker until `shutdown` completes; `side_tasks` run beside it (the NAT seam).
pub async fn run(
    config: Config,
    kube: kube::Client,
    place: BgpPlace,
    shutdown: impl Future<Output = ()>,
    side_tasks: Vec<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
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
            let source = netlink.source_toward(peer).await?;
            match source {
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
    let speaker = on_bgp(&place, move || Speaker::new(speaker_config)).await?;
    let speaker = Arc::new(speaker);
    let bfd = Arc::new(Bfd::new());
    let mut running: Vec<Arc<RunningPeer>> = Vec::new();
    for plan in plans {
        let s = speaker.clone();
        let peer_config = plan.config.clone();
        let handle = on_bgp(&place, move || s.add_peer(peer_config)).await?;
        tracing::info!(peer = %plan.config.address, source = %plan.source, "peer added");
        running.push(Arc::new(RunningPeer { handle, plan }));
    }

    let pods: Watched<Pod> = Watched::start(
        Api::all(kube.clone()),
        Some("spec.hostNetwork=false".into()),
        None,
    );
    let subnets: Watched<Subnet> = Watched::start(Api::all(kube.clone()), None, None);
    let services: Watched<Service> = Watched::start(Api::all(kube.clone()), None, None);
    let eips: Watched<IptablesEIP> = Watched::start(Api::all(kube.clone()), None, None);

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(routes_task(
        config.clone(),
        running.clone(),
        pods,
        subnets,
        services,
        eips,
    ));
    tasks.spawn(nexthop::task(config.clone(), running.clone(), netlink.clone()));
    for peer in &running {
        if let Some(timers) = peer.plan.bfd {
            let local = match peer.plan.config.local_address {
                Some(l) => Some(l),
                None => netlink.source_toward(peer.plan.config.address).await?,
            };
            let Some(local) = local else {
                return Err(RunError::Config(format!(
                    "--enable-bfd: no route toward peer {}",
                    peer.plan.config.address
                )));
            };
            let (b, address) = (bfd.clone(), peer.plan.config.address);
            let session = place
                .runtime
                .spawn(async move { b.add_session(address, local, timers) })
                .await
                .expect("BFD setup task")
                .map_err(|source| RunError::Bfd {
                    peer: address,
                    source,
                })?;
            tasks.spawn(bfd_task(peer.clone(), session));
        }
    }
    tasks.spawn(state::heartbeat(flags.state_dir.clone()));
    for side in side_tasks {
        tasks.spawn(side);
    }
    tasks.spawn(metrics_server(config.clone(), running.clone(), place.clone()));
    shutdown.await;
    tracing::info!("stopping: peers get Cease/administrative shutdown");
    tasks.shutdown().await;
    for peer in &running {
        let _ = peer.handle.shutdown("kube-ovn-speaker stopping").await;
    }
    state::clean_stop(&flags.state_dir);
    Ok(())
}

/// Recomputes the desired prefixes on every change of a watched kind and hands each peer the
/// whole set (the Adj-RIB-Out sends only the difference). A burst of events is one pass: the
/// tick receivers only say "changed since you last looked".
async fn routes_task(
    config: Config,
    peers: Vec<Arc<RunningPeer>>,
    pods: Watched<Pod>,
    subnets: Watched<Subnet>,
    services: Watched<Service>,
    eips: Watched<IptablesEIP>,
) {
    let (mut p, mut s, mut v, mut e) = (
        pods.changes(),
        subnets.changes(),
        services.changes(),
        eips.changes(),
    );
    let wait = Duration::from_hours(1);
    for (watched_ok, what) in [
        (pods.synced(wait).await, "pods"),
        (subnets.synced(wait).await, "subnets"),
        (services.synced(wait).await, "services"),
        (eips.synced(wait).await, "iptables-eips"),
    ] {
        if !watched_ok {
            tracing::warn!(what, "cache not filled within an hour; announcing what is there");
        }
    }
    let mut ready_sent = false;
    let resync = config.flags.resync_period;
    loop {
        let (pods_now, subnets_now, services_now, eips_now) =
            (pods.all(), subnets.all(), services.all(), eips.all());
        let objects = Objects {
            pods: &pods_now,
            subnets: &subnets_now,
            services: &services_now,
            eips: &eips_now,
        };
        let scope = Scope {
            node_name: &config.flags.node_name,
            announce_cluster_ip: config.flags.announce_cluster_ip,
        };
        let desired = announce::desired(&objects, &scope);
        for skipped in &desired.skipped {
            tracing::warn!(object = %skipped.object, error = %skipped.error, "not announced");
        }
        for peer in &peers {
            let families = &peer.plan.config.session.families;
            let routes = desired
                .prefixes
                .keys()
                .filter(|p| {
                    families.contains(&if p.addr().is_ipv4() {
                        crate::bgp::wire::Family::Ipv4Unicast
                    } else {
                        crate::bgp::wire::Family::Ipv6Unicast
                    })
                })
                .map(|p| (*p, peer.plan.attributes.clone()));
            if let Err(e) = peer.handle.replace_all(routes) {
                tracing::warn!(peer = %peer.plan.config.address, error = %e, "routes not handed to the peer");
            }
            if !ready_sent && let Err(e) = peer.handle.set_ready() {
                tracing::warn!(peer = %peer.plan.config.address, error = %e, "set_ready failed");
            }
        }
        if !ready_sent {
            tracing::info!(
                prefixes = desired.prefixes.len(),
                "caches synced; initial table handed to every peer"
            );
            ready_sent = true;
        }
        tokio::select! {
            _ = p.changed() => {}
            _ = s.changed() => {}
            _ = v.changed() => {}
            _ = e.changed() => {}
            () = tokio::time::sleep(resync) => {}
        }
    }
}

/// Ties a peer's BGP session to its BFD session: BFD failing brings the session down (Cease,
/// routes withdrawn by the peer); BFD Up again lets it reconnect.
async fn bfd_task(peer: Arc<RunningPeer>, session: crate::bfd::BfdHandle) {
    let mut status = session.subscribe();
    let mut last = *status.borrow();
    while status.changed().await.is_ok() {
        let now = *status.borrow();
        if now.is_failure_after(&last) {
            tracing::warn!(peer = %peer.plan.config.address, diag = ?now.diag, "BFD down: bringing the BGP session down");
            let _ = peer.handle.bfd_down();
        } else if now.state == crate::bfd::State::Up && last.state != crate::bfd::State::Up {
            tracing::info!(peer = %peer.plan.config.address, "BFD up");
            let _ = peer.handle.bfd_up();
        }
        last = now;
    }
    drop(session);
}

async fn metrics_server(config: Config, peers: Vec<Arc<RunningPeer>>, place: BgpPlace) {
    let _ = (&config, &peers, &place);
    std::future::pending::<()>().await;
}
