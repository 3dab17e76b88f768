//! The tokio side of BFD: sockets, timers and demultiplexing around [`Session`].
//!
//! ```text
//!  per local address:  rx task ── recvmsg on <local>:3784 (TTL must be 255, RFC 5881 §5)
//!                        │  decode + stateless checks (RFC 5880 §6.8.6)
//!                        │  demux: Your Discriminator, else (local, source address) (§6.3)
//!                        ▼
//!  per session:  session task ── Session::handle(now, input) ── Send → <peer>:3784 from
//!                  ▲   ▲   ▲                                     <local>:4915x, TTL 255
//!         commands │   │   └ TX / detect deadlines (sleep_until)   StateChanged → watch<Status>
//!      (BfdHandle) ┘   └ packets (bounded queue; full → dropped and counted)
//! ```
//!
//! A [`BfdHandle`] owns its session: dropping it sends one AdminDown packet (diag 7) so the
//! peer does not report a failure, and removes the session; the last session on a local
//! address closes that address's receive socket.

mod socket;
mod task;

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, watch};

pub use socket::{CONTROL_PORT, SOURCE_PORTS, TTL};

use super::packet::{Diagnostic, State};
use super::session::{Session, Status, Timers, TimersError};

#[derive(Debug, thiserror::Error)]
pub enum BfdError {
    #[error(transparent)]
    Timers(#[from] TimersError),
    #[error("BFD peer {peer} and local address {local} are of different address families")]
    FamilyMismatch { peer: IpAddr, local: IpAddr },
    #[error("a BFD session to {peer} from {local} exists already")]
    Duplicate { peer: IpAddr, local: IpAddr },
    #[error("BFD: bind {addr}: {source}")]
    Bind { addr: SocketAddr, source: io::Error },
    #[error("BFD: the socket bound to {addr}: {source}")]
    Socket {
        addr: SocketAddr,
        source: Box<kube_ovn_dataplane::Error>,
    },
    #[error("BFD: no free UDP source port in 49152-65535 on {local}: {source}")]
    NoSourcePort { local: IpAddr, source: io::Error },
    #[error("BFD sessions need a tokio runtime; none is running on this thread")]
    NoRuntime,
    #[error("the BFD session task has ended")]
    SessionGone,
}

/// Receive-side counters of one [`Bfd`], in the spirit of Kube-OVN's
/// `kube_ovn_speaker_bfd_server_*` metrics.
#[derive(Debug, Default)]
pub struct ServerCounters {
    /// Datagrams read from a receive socket.
    pub received: AtomicU64,
    /// Dropped for a TTL / Hop Limit other than 255 (RFC 5881 §5).
    pub bad_ttl: AtomicU64,
    /// Discarded by the checks of RFC 5880 §6.8.6 that need no session.
    pub invalid: AtomicU64,
    /// Matched no session (§6.3), or came from another address than the session's peer.
    pub unknown_peer: AtomicU64,
    /// Dropped because the session's queue was full.
    pub queue_full: AtomicU64,
    /// recvmsg(2) errors.
    pub errors: AtomicU64,
}

/// Per-session counters (`kube_ovn_speaker_bfd_peer_*`).
#[derive(Debug, Default)]
pub struct SessionCounters {
    pub transmitted: AtomicU64,
    pub received: AtomicU64,
    /// Transitions out of Up that [`Status::is_failure_after`] calls failures.
    pub failures: AtomicU64,
}

struct Entry {
    peer: IpAddr,
    local: IpAddr,
    packets: mpsc::Sender<super::packet::ControlPacket>,
}

struct Receiver {
    sessions: usize,
    task: tokio::task::AbortHandle,
}

#[derive(Default)]
struct Registry {
    by_discriminator: HashMap<u32, Entry>,
    by_peer: HashMap<(IpAddr, IpAddr), u32>,
    receivers: HashMap<IpAddr, Receiver>,
}

struct Shared {
    registry: Mutex<Registry>,
    counters: ServerCounters,
    random: RandomState,
    draws: AtomicU64,
}

impl Shared {
    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn random(&self) -> u64 {
        self.random.hash_one(self.draws.fetch_add(1, Ordering::Relaxed))
    }

    /// Removes a session; closes the receive socket of its local address if it was the last.
    fn remove(&self, discriminator: u32) {
        let mut reg = self.registry();
        let Some(entry) = reg.by_discriminator.remove(&discriminator) else {
            return;
        };
        reg.by_peer.remove(&(entry.local, entry.peer));
        if let Some(rx) = reg.receivers.get_mut(&entry.local) {
            rx.sessions -= 1;
            if rx.sessions == 0 {
                rx.task.abort();
                reg.receivers.remove(&entry.local);
            }
        }
    }
}

/// The BFD service of one speaker: add a session per BGP peer with [`Bfd::add_session`].
/// Cheap to clone; sessions live as long as their [`BfdHandle`]s.
#[derive(Clone)]
pub struct Bfd {
    shared: Arc<Shared>,
}

impl Default for Bfd {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, Clone, Copy)]
enum Command {
    AdminUp,
    AdminDown,
    SetTimers(Timers),
}

/// One running session. Dropping it ends the session (see the module doc).
pub struct BfdHandle {
    peer: IpAddr,
    local: IpAddr,
    status: watch::Receiver<Status>,
    commands: mpsc::UnboundedSender<Command>,
    counters: Arc<SessionCounters>,
}

impl Bfd {
    pub fn new() -> Self {
        Bfd {
            shared: Arc::new(Shared {
                registry: Mutex::default(),
                counters: ServerCounters::default(),
                random: RandomState::new(),
                draws: AtomicU64::new(0),
            }),
        }
    }

    pub fn counters(&self) -> &ServerCounters {
        &self.shared.counters
    }

    /// Starts a single-hop session to `peer` from `local` (an address of this host on the link
    /// to the peer). The session starts Down and sends at the slow rate until the peer answers.
    /// Runs on the tokio runtime it is called from (an error outside one). IPv6 link-local
    /// addresses are not supported (no scope is kept).
    pub fn add_session(&self, peer: IpAddr, local: IpAddr, timers: Timers) -> Result<BfdHandle, BfdError> {
        timers.validate()?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BfdError::NoRuntime)?;
        if peer.is_ipv4() != local.is_ipv4() {
            return Err(BfdError::FamilyMismatch { peer, local });
        }
        let sender = socket::bind_sender(local, self.shared.random())?;
        let (packets_tx, packets_rx) = mpsc::channel(64);
        let discriminator = {
            let mut reg = self.shared.registry();
            if reg.by_peer.contains_key(&(local, peer)) {
                return Err(BfdError::Duplicate { peer, local });
            }
            if let Some(rx) = reg.receivers.get_mut(&local) {
                rx.sessions += 1;
            } else {
                let sock = socket::bind_receiver(local)?;
                let task = runtime.spawn(task::receive(Arc::downgrade(&self.shared), local, sock));
                reg.receivers.insert(
                    local,
                    Receiver {
                        sessions: 1,
                        task: task.abort_handle(),
                    },
                );
            }
            // §6.8.1: non-zero and unique on this system.
            let discriminator = loop {
                let d = u32::try_from(self.shared.random() >> 32).unwrap_or_default();
                if d != 0 && !reg.by_discriminator.contains_key(&d) {
                    break d;
                }
            };
            reg.by_discriminator.insert(
                discriminator,
                Entry {
                    peer,
                    local,
                    packets: packets_tx,
                },
            );
            reg.by_peer.insert((local, peer), discriminator);
            discriminator
        };
        let session = Session::new(discriminator, timers, self.shared.random());
        let (status_tx, status_rx) = watch::channel(session.status());
        let (commands_tx, commands_rx) = mpsc::unbounded_channel();
        let counters = Arc::new(SessionCounters::default());
        let guard = task::Registration {
            shared: Arc::clone(&self.shared),
            discriminator,
        };
        runtime.spawn(task::run_session(task::SessionTask {
            session,
            peer: SocketAddr::new(peer, CONTROL_PORT),
            sender,
            packets: packets_rx,
            commands: commands_rx,
            status: status_tx,
            counters: Arc::clone(&counters),
            _registration: guard,
        }));
        let _ = commands_tx.send(Command::AdminUp);
        Ok(BfdHandle {
            peer,
            local,
            status: status_rx,
            commands: commands_tx,
            counters,
        })
    }
}

impl BfdHandle {
    pub fn peer(&self) -> IpAddr {
        self.peer
    }

    pub fn local(&self) -> IpAddr {
        self.local
    }

    /// The status now.
    pub fn status(&self) -> Status {
        *self.status.borrow()
    }

    /// A watch of the status; it changes on every state change (with the diag of it).
    pub fn subscribe(&self) -> watch::Receiver<Status> {
        self.status.clone()
    }

    pub fn counters(&self) -> &SessionCounters {
        &self.counters
    }

    pub fn is_up(&self) -> bool {
        self.status().state == State::Up
    }

    fn command(&self, command: Command) -> Result<(), BfdError> {
        self.commands.send(command).map_err(|_| BfdError::SessionGone)
    }

    /// Take the session AdminDown (diag 7, RFC 5880 §6.8.16); the peer is told, so its client
    /// protocols stay up (RFC 5882 §3.2).
    pub fn admin_down(&self) -> Result<(), BfdError> {
        self.command(Command::AdminDown)
    }

    pub fn admin_up(&self) -> Result<(), BfdError> {
        self.command(Command::AdminUp)
    }

    /// New intervals; while Up they are negotiated with a Poll Sequence (RFC 5880 §6.5).
    pub fn set_timers(&self, timers: Timers) -> Result<(), BfdError> {
        timers.validate()?;
        self.command(Command::SetTimers(timers))
    }
}

/// Describes a status for logs: `Up`, or `Down (control detection time expired)`.
pub fn describe(status: &Status) -> String {
    if status.diag == Diagnostic::None {
        format!("{:?}", status.state)
    } else {
        format!("{:?} ({})", status.state, status.diag)
    }
}
