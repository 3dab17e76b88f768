//! The tokio driver around the pure BGP core: sockets, timers and tasks.
//!
//! A [`Speaker`] owns the shared listener (if any) and a task per peer; [`Speaker::add_peer`]
//! returns a [`PeerHandle`], through which the caller (the Kubernetes side, a test, a
//! benchmark) changes the routes the peer should have and watches its [`PeerStatus`]. Handle
//! calls do not wait: they queue a command for the peer task, which takes a burst of commands
//! whole and sends the difference as packed UPDATEs.
//!
//! ```text
//!                 Speaker ── listener task per address ──(source → peer)──┐
//!                    │                                                      ▼
//!  caller ── PeerHandle ──commands──► peer task (Session + AdjRibOut + timers) ──► writer tasks
//!                    ▲                         ▲   ▲                                   │
//!                    └──── watch<PeerStatus> ──┘   └── reader tasks, connect task ◄────┘ TCP
//! ```
//!
//! Transport, per peer: active connect with an optional source address, TTL 1 for eBGP unless
//! a TTL is given (multihop), the RFC 2385 MD5 key on the connecting socket and on every
//! listener; passive peers never connect. With GTSM ([`PeerConfig::ttl_security`], RFC 5082)
//! the session's sockets send with TTL 255 and the kernel drops what arrives below
//! [`PeerConfig::min_ttl`] (`IP_MINTTL` / `IPV6_MINHOPCOUNT`): set before `connect()` on ours,
//! on the accepted socket for the peer's (the listener then sends its SYN-ACKs with 255).
//! A link-local peer ([`PeerConfig::interface`], BGP unnumbered, found by
//! [`unnumbered::Neighbour`]) is dialled on its interface and taken only from there; a peer
//! with [`PeerConfig::bind_device`] (a VRF) has its connecting socket bound to that device
//! (`SO_BINDTODEVICE`), and takes an inbound connection only when the kernel bound it there too.
//! Sessions restart after failures by themselves (the state machine's idle hold time doubles
//! up to a minute).
//!
//! Graceful restart as the restarting speaker (RFC 4724 §4.1): with
//! [`crate::bgp::fsm::SessionConfig::restarting`] the OPEN carries the R bit, and no UPDATE
//! goes out before [`PeerHandle::set_ready`] (or [`PeerConfig::ready_deadline`]); then the whole
//! table and an End-of-RIB per family, at which the peer drops what it kept from before.
//! Every session waits for `set_ready` the same way, restarting or not, so a peer never sees
//! a half-built table followed by withdrawals.
//!
//! Dropping the [`Speaker`] ends every task at once, as a crash would: sockets close with no
//! NOTIFICATION, so peers in graceful restart helper mode keep our routes.
//! [`PeerHandle::stop_for_restart`] does the same for one peer on purpose: the daemon stops
//! that way on SIGTERM when graceful restart is on (see `crate::run`).

mod command;
mod config;
mod conn;
mod listener;
mod peer;
mod status;
pub mod unnumbered;

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

pub use config::{BGP_PORT, PeerConfig, SpeakerConfig};
pub use conn::MAX_IN_FLIGHT;
pub use status::{MessageCounts, PeerStatus};

use crate::bgp::fsm::{ConfigError, StopReason};
use crate::bgp::rib_out::{RibOutError, RouteAttributes, check_unicast};
use command::Command;
use listener::{Entry, Registry};
use peer::PeerTask;

#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error("peer {peer}: {source}")]
    InvalidConfig { peer: IpAddr, source: ConfigError },
    #[error("peer {0} is configured already")]
    PeerExists(IpAddr),
    #[error("no peer {0}")]
    NoSuchPeer(IpAddr),
    #[error("peer {0} has stopped")]
    PeerStopped(IpAddr),
    #[error("listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TCP MD5 key for {peer} on the listener {listener}: {source}")]
    Md5 {
        peer: IpAddr,
        listener: String,
        source: Box<kube_ovn_dataplane::Error>,
    },
    #[error("peer {peer}: {source}")]
    Route { peer: IpAddr, source: RibOutError },
    #[error("peer {peer}: no {what} within {after:?}")]
    Timeout {
        peer: IpAddr,
        what: String,
        after: Duration,
    },
}

/// The speaker: listeners and peer tasks. Must be created inside a tokio runtime.
pub struct Speaker {
    listeners: Vec<Arc<TcpListener>>,
    listener_tasks: Vec<JoinHandle<()>>,
    registry: Arc<Registry>,
    peers: std::sync::Mutex<HashMap<IpAddr, (PeerHandle, JoinHandle<()>)>>,
}

impl Speaker {
    pub fn new(config: SpeakerConfig) -> Result<Self, DriverError> {
        Self::new_in_device(config, None)
    }

    /// [`Speaker::new`] with the listeners bound to `device` (`SO_BINDTODEVICE`, the speaker's
    /// `--vrf`): they take only connections that came in through it (through the VRF), and the
    /// connections they accept are bound to it, as a peer with that
    /// [`PeerConfig::bind_device`] requires.
    pub fn new_in_device(config: SpeakerConfig, device: Option<&str>) -> Result<Self, DriverError> {
        let registry = Arc::new(Registry::default());
        let mut listeners = Vec::new();
        let mut listener_tasks = Vec::new();
        for addr in config.listen {
            let listener = Arc::new(
                listener::bind(addr, device).map_err(|source| DriverError::Listen { addr, source })?,
            );
            listener_tasks.push(tokio::spawn(listener::accept_loop(
                listener.clone(),
                registry.clone(),
                config.allowed_sources.clone(),
            )));
            listeners.push(listener);
        }
        Ok(Speaker {
            listeners,
            listener_tasks,
            registry,
            peers: std::sync::Mutex::default(),
        })
    }

    /// Where the listeners are bound (with the port the kernel chose for port 0).
    pub fn listen_addresses(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Starts a peer task; its session starts at once (connecting unless passive).
    pub fn add_peer(&self, config: PeerConfig) -> Result<PeerHandle, DriverError> {
        let address = config.address;
        config.validate().map_err(|source| DriverError::InvalidConfig {
            peer: address,
            source,
        })?;
        let mut peers = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if peers.get(&address).is_some_and(|(h, _)| !h.status().stopped) {
            return Err(DriverError::PeerExists(address));
        }
        self.set_listener_keys(address, config.md5_key.as_deref().unwrap_or_default())?;
        if config.ttl_security {
            self.set_listener_gtsm_ttl(address)?;
        }
        let (commands, commands_rx) = mpsc::unbounded_channel();
        let (status_tx, status) = watch::channel(PeerStatus::new(address));
        self.registry.lock().insert(
            address,
            Entry {
                commands: commands.clone(),
                local_address: config.local_address,
                interface: config.interface.clone(),
                bind_device: config.bind_device.clone(),
            },
        );
        let span = tracing::info_span!("bgp_peer", peer = %address, peer_as = config.session.peer_as);
        let task = tokio::spawn(
            PeerTask::new(config, commands_rx, status_tx)
                .run()
                .instrument(span),
        );
        let handle = PeerHandle {
            address,
            commands,
            status,
        };
        peers.insert(address, (handle.clone(), task));
        Ok(handle)
    }

    pub fn peer(&self, address: IpAddr) -> Option<PeerHandle> {
        let peers = self
            .peers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        peers.get(&address).map(|(h, _)| h.clone())
    }

    /// Ends the session with Cease / Peer De-configured (RFC 4486), waits for the task to end,
    /// and forgets the peer (its listener key included).
    pub async fn remove_peer(&self, address: IpAddr) -> Result<(), DriverError> {
        let (handle, task) = {
            let mut peers = self
                .peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            peers.remove(&address).ok_or(DriverError::NoSuchPeer(address))?
        };
        self.registry.lock().remove(&address);
        let _ = handle
            .commands
            .send(Command::Shutdown(StopReason::PeerDeconfigured));
        let _ = task.await;
        self.set_listener_keys(address, &[])
    }

    /// Ends every session with Cease / Administrative Shutdown and `message` (RFC 9003), and
    /// waits for the peer tasks to end.
    pub async fn shutdown(self, message: &str) {
        let peers: Vec<_> = {
            let mut peers = self
                .peers
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            peers.drain().map(|(_, p)| p).collect()
        };
        for (handle, task) in peers {
            let _ = handle
                .commands
                .send(Command::Shutdown(StopReason::AdministrativeShutdown {
                    message: message.to_owned(),
                }));
            let _ = task.await;
        }
    }

    /// A GTSM peer that connects to us checks our SYN-ACK, which the kernel sends with the
    /// listener's TTL, not the accepted socket's: the listeners send with 255 from the first
    /// GTSM peer on (harmless for the others: only what a peer receives changes, and a peer
    /// without GTSM does not check it). The minimum TTL itself is per accepted socket.
    fn set_listener_gtsm_ttl(&self, peer: IpAddr) -> Result<(), DriverError> {
        for listener in &self.listeners {
            let Ok(bound) = listener.local_addr() else {
                continue;
            };
            if bound.is_ipv4() && peer.is_ipv6() {
                continue;
            }
            let mut set = conn::set_ttl(listener.as_ref(), bound.is_ipv4(), u8::MAX);
            if bound.is_ipv6() && peer.is_ipv4() {
                // A mapped IPv4 peer on a dual-stack listener gets the IPv4 TTL.
                set = set.and(conn::set_ttl(listener.as_ref(), true, u8::MAX));
            }
            set.map_err(|source| DriverError::Listen { addr: bound, source })?;
        }
        Ok(())
    }

    fn set_listener_keys(&self, peer: IpAddr, key: &[u8]) -> Result<(), DriverError> {
        for listener in &self.listeners {
            let bound = listener.local_addr().ok();
            // An IPv4 listener never sees an IPv6 peer; an IPv6 one may see an IPv4 peer as a
            // mapped address.
            if bound.is_some_and(|a| a.is_ipv4()) && peer.is_ipv6() {
                continue;
            }
            kube_ovn_dataplane::tcp_md5::set_md5_key(listener.as_fd(), peer, key).map_err(|source| {
                DriverError::Md5 {
                    peer,
                    listener: format!("{bound:?}"),
                    source: Box::new(source),
                }
            })?;
        }
        Ok(())
    }
}

impl Drop for Speaker {
    fn drop(&mut self) {
        for task in &self.listener_tasks {
            task.abort();
        }
        let peers = self
            .peers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for (_, task) in peers.values() {
            task.abort();
        }
    }
}

/// The caller's side of one peer. Cheap to clone; every call returns at once.
#[derive(Debug, Clone)]
pub struct PeerHandle {
    address: IpAddr,
    commands: mpsc::UnboundedSender<Command>,
    status: watch::Receiver<PeerStatus>,
}

impl PeerHandle {
    pub fn address(&self) -> IpAddr {
        self.address
    }

    /// Refuses routes the Adj-RIB-Out would refuse, before anything is queued.
    fn check(&self, routes: &[(IpNet, RouteAttributes)]) -> Result<(), DriverError> {
        for (prefix, _) in routes {
            check_unicast(prefix).map_err(|source| DriverError::Route {
                peer: self.address,
                source,
            })?;
        }
        Ok(())
    }

    fn send(&self, command: Command) -> Result<(), DriverError> {
        self.commands
            .send(command)
            .map_err(|_| DriverError::PeerStopped(self.address))
    }

    pub fn announce(&self, prefix: IpNet, attributes: RouteAttributes) -> Result<(), DriverError> {
        self.announce_many([(prefix, attributes)])
    }

    /// Announces many prefixes in one command; a prefix that cannot be announced (multicast,
    /// broadcast) fails the whole call before anything is sent.
    pub fn announce_many(
        &self,
        routes: impl IntoIterator<Item = (IpNet, RouteAttributes)>,
    ) -> Result<(), DriverError> {
        let routes: Vec<_> = routes.into_iter().collect();
        self.check(&routes)?;
        self.send(Command::Announce(routes))
    }

    pub fn withdraw(&self, prefix: IpNet) -> Result<(), DriverError> {
        self.withdraw_many([prefix])
    }

    pub fn withdraw_many(&self, prefixes: impl IntoIterator<Item = IpNet>) -> Result<(), DriverError> {
        self.send(Command::Withdraw(prefixes.into_iter().collect()))
    }

    /// Makes the peer's routes exactly `routes` (a full reconcile); only differences are sent.
    /// A prefix that cannot be announced (multicast, broadcast) is left out alone and named in
    /// the error; the rest of the set is handed over all the same, so one bad prefix cannot
    /// stop every later change.
    pub fn replace_all(
        &self,
        routes: impl IntoIterator<Item = (IpNet, RouteAttributes)>,
    ) -> Result<(), DriverError> {
        let (routes, refused): (Vec<_>, Vec<_>) = routes
            .into_iter()
            .partition(|(prefix, _)| check_unicast(prefix).is_ok());
        self.send(Command::ReplaceAll(routes))?;
        self.check(&refused)
    }

    /// The caller's routes are complete: the table and End-of-RIB may go (RFC 4724 §4.1).
    pub fn set_ready(&self) -> Result<(), DriverError> {
        self.send(Command::SetReady)
    }

    /// Next hops for routes using [`crate::bgp::rib_out::NextHop::LocalAddress`]. A family left
    /// `None` takes our address on the session's connection when it is of that family; routes
    /// of a family with no address are withdrawn. A change re-announces the affected routes.
    pub fn set_local_addresses(&self, v4: Option<Ipv4Addr>, v6: Option<Ipv6Addr>) -> Result<(), DriverError> {
        self.send(Command::SetLocalAddresses(v4, v6))
    }

    /// Drops the session with Cease / Administrative Reset; it comes back after the idle hold.
    pub fn reset(&self) -> Result<(), DriverError> {
        self.send(Command::Reset)
    }

    /// BFD saw the path fail: the session goes down at once with Cease / BFD Down (RFC 9384),
    /// so the peer withdraws our routes, and stays down until [`PeerHandle::bfd_up`].
    pub fn bfd_down(&self) -> Result<(), DriverError> {
        self.send(Command::BfdDown)
    }

    pub fn bfd_up(&self) -> Result<(), DriverError> {
        self.send(Command::BfdUp)
    }

    /// Closes the session without a NOTIFICATION and ends the task: for a speaker about to
    /// restart, whose peers keep its routes as stale for the restart time (RFC 4724 §4.2).
    pub async fn stop_for_restart(&self) -> Result<(), DriverError> {
        self.send(Command::Shutdown(StopReason::Restarting))?;
        self.wait_for("the task to stop", Duration::from_secs(10), |s| s.stopped)
            .await
            .map(drop)
    }

    /// Ends the session with Cease / Administrative Shutdown carrying `message` (RFC 9003)
    /// and ends the task.
    pub async fn shutdown(&self, message: &str) -> Result<(), DriverError> {
        self.send(Command::Shutdown(StopReason::AdministrativeShutdown {
            message: message.to_owned(),
        }))?;
        self.wait_for("the task to stop", Duration::from_secs(10), |s| s.stopped)
            .await
            .map(drop)
    }

    /// The latest status.
    pub fn status(&self) -> PeerStatus {
        self.status.borrow().clone()
    }

    /// A receiver that wakes on every status change (metrics, CRD status).
    pub fn watch_status(&self) -> watch::Receiver<PeerStatus> {
        self.status.clone()
    }

    /// Waits until `check` holds for the status, at most `timeout`.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        check: impl FnMut(&PeerStatus) -> bool,
    ) -> Result<PeerStatus, DriverError> {
        let mut status = self.status.clone();
        let waited =
            tokio::time::timeout(timeout, async { status.wait_for(check).await.map(|s| s.clone()) }).await;
        match waited {
            Ok(Ok(s)) => Ok(s),
            // The task ended before the condition held.
            Ok(Err(_)) => Err(DriverError::PeerStopped(self.address)),
            Err(_) => Err(DriverError::Timeout {
                peer: self.address,
                what: format!("{what} (last status: {:?})", *self.status.borrow()),
                after: timeout,
            }),
        }
    }
}
