//! The client: one background task (the actor) owns the connection; [`Client`] handles send it
//! commands and read the replica it keeps.
//!
//! ```text
//!   Client::transact ──┐                      ┌── Session (socket, framing) ── writer task
//!   Client::call ──────┼─ mpsc<Command> ─▶ Actor
//!                      │                      ├── DbCache (RwLock, shared) ◀── Client::read/rows
//!   Client::subscribe ◀┴──── ChangeSet ───────┘
//!   Client::state ◀──────── watch<ConnectionState>
//! ```
//!
//! The actor connects to the remotes in turn (leader only, for a RAFT cluster), fetches the
//! schema, monitors the tables with `monitor_cond_since` (falling back to `monitor_cond`, then
//! `monitor`), and applies every update before it looks at the next message. Each step of that
//! setup is bounded by `connect_timeout`: a server that accepts and then answers nothing (stopped,
//! or a RAFT member in a long compaction) is logged with the step that stalled and the next remote
//! is tried; once a session is up, the inactivity probe (`echo`) and TCP keepalive notice a server
//! that stops answering, and the next session starts with the next remote. ovsdb-server sends a
//! transaction's updates before its reply, so when `transact` returns, the replica already holds
//! the transaction's effects. On a lost connection it reconnects with backoff and resumes from the
//! last transaction id, or resynchronises fully and reports the difference to subscribers.

mod actor;
mod complaints;
mod fit;
mod keepalive;
mod monitor;
mod session;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value as Json;
use tokio::sync::{mpsc, oneshot, watch};

pub use monitor::{MonitorTables, ServerStatus};

use crate::cache::{Change, DbCache};
use crate::error::{DecodeError, Error, Result};
use crate::ops::Operation;
use crate::remote::Remote;
use crate::reply::OperationResult;
use crate::schema::DatabaseSchema;
use crate::table::Table;

/// How to reach and use a database.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// Tried in order; a RAFT cluster lists every member.
    pub remotes: Vec<Remote>,
    pub database: String,
    pub monitor: MonitorTables,
    /// Use only the RAFT leader, as Kube-OVN's libovsdb client does: a follower forwards writes
    /// but its replica may lag.
    pub leader_only: bool,
    /// Per step of a connection attempt (Kube-OVN `--ovsdb-con-timeout`, 3 s): the connect, and
    /// the wait for each setup reply to begin (`get_schema`, the `_Server` check and monitor, the
    /// initial monitor reply; a reply still streaming in may take longer while it makes
    /// progress). Also the interval of TCP keepalive probes.
    pub connect_timeout: Duration,
    /// Per request, from the call until the reply (Kube-OVN `--ovn-timeout`, 60 s).
    pub request_timeout: Duration,
    /// After this long without a byte from the server, send `echo`; after twice this long, drop
    /// the connection (Kube-OVN `--ovsdb-inactivity-timeout`, 10 s). Zero disables the probe.
    /// Also the idle time before TCP keepalive's first probe (10 s when the probe is disabled).
    pub inactivity_probe: Duration,
    /// Reconnect backoff, doubled after each round over all remotes.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
}

impl ClientConfig {
    pub fn new(remotes: Vec<Remote>, database: impl Into<String>) -> Self {
        Self {
            remotes,
            database: database.into(),
            monitor: MonitorTables::All,
            leader_only: true,
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_mins(1),
            inactivity_probe: Duration::from_secs(10),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(4),
        }
    }

    #[must_use]
    pub fn monitor(mut self, tables: MonitorTables) -> Self {
        self.monitor = tables;
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionState {
    /// Looking for a usable server.
    Connecting,
    /// Connected, schema fetched, replica in sync.
    Ready { remote: Remote },
    /// Every [`Client`] was dropped; the actor has stopped.
    Stopped,
}

/// The rows one update changed, in the order the server sent them.
#[derive(Debug)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
    /// The result of a full resynchronisation after a reconnect: the difference between the old
    /// replica and the server's rows.
    pub resync: bool,
}

/// Counters that tell how the client has been reconnecting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Sessions that completed setup.
    pub sessions: u64,
    /// Replicas rebuilt from scratch (first connect, or no resumable transaction id).
    pub full_syncs: u64,
    /// Replicas resumed with `monitor_cond_since` from the last transaction id.
    pub resumes: u64,
}

#[derive(Default)]
struct Counters {
    sessions: AtomicU64,
    full_syncs: AtomicU64,
    resumes: AtomicU64,
}

struct Shared {
    config: ClientConfig,
    cache: RwLock<DbCache>,
    subscribers: Mutex<Vec<mpsc::UnboundedSender<Arc<ChangeSet>>>>,
    state: watch::Sender<ConnectionState>,
    counters: Counters,
    /// Why the last connection attempt failed or the last session ended, for readiness.
    last_failure: Mutex<Option<String>>,
}

impl Shared {
    fn note_failure(&self, why: String) {
        *self.last_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
    }

    fn publish(&self, set: ChangeSet) {
        if set.changes.is_empty() {
            return;
        }
        let set = Arc::new(set);
        let mut subs = self.subscribers.lock().unwrap_or_else(PoisonError::into_inner);
        subs.retain(|s| s.send(set.clone()).is_ok());
    }
}

enum Command {
    Transact {
        ops: Vec<Operation>,
        reply: oneshot::Sender<Result<Vec<OperationResult>>>,
    },
    Call {
        method: String,
        params: Json,
        reply: oneshot::Sender<Result<Json>>,
    },
}

/// A handle on one database. Cheap to clone; the connection closes when the last one drops.
#[derive(Clone)]
pub struct Client {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
}

impl Client {
    /// Starts the client in the background; it connects and reconnects on its own.
    pub fn start(config: ClientConfig) -> Self {
        let (state, _) = watch::channel(ConnectionState::Connecting);
        let shared = Arc::new(Shared {
            config,
            cache: RwLock::new(DbCache::default()),
            subscribers: Mutex::new(Vec::new()),
            state,
            counters: Counters::default(),
            last_failure: Mutex::new(None),
        });
        let (commands, rx) = mpsc::unbounded_channel();
        actor::spawn(shared.clone(), rx);
        Self { shared, commands }
    }

    /// Starts the client and waits until its replica is in sync, or `request_timeout` passes.
    pub async fn connect(config: ClientConfig) -> Result<Self> {
        let wait = config.request_timeout;
        let client = Self::start(config);
        client.wait_ready(wait).await?;
        Ok(client)
    }

    /// Waits until connected with the replica in sync.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let mut rx = self.shared.state.subscribe();
        let ready = rx.wait_for(|s| matches!(s, ConnectionState::Ready { .. } | ConnectionState::Stopped));
        match tokio::time::timeout(timeout, ready).await {
            Ok(Ok(s)) if matches!(*s, ConnectionState::Ready { .. }) => Ok(()),
            Ok(_) => Err(Error::Closed),
            Err(_) => Err(self.not_connected(timeout)),
        }
    }

    fn not_connected(&self, waited: Duration) -> Error {
        let remotes = self
            .shared
            .config
            .remotes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        Error::NotConnected {
            remotes: remotes.join(", "),
            waited,
        }
    }

    /// Runs a transaction. The operations are checked against the server's schema first; a
    /// failed operation or commit comes back as [`Error::Transact`] naming the table and row.
    /// When it returns `Ok`, the replica already reflects the transaction.
    pub async fn transact(&self, ops: Vec<Operation>) -> Result<Vec<OperationResult>> {
        let (reply, rx) = oneshot::channel();
        self.request("transact", Command::Transact { ops, reply }, rx)
            .await
    }

    /// Sends any JSON-RPC method (`list_dbs`, `get_schema`, …) and returns its result.
    pub async fn call(&self, method: &str, params: Json) -> Result<Json> {
        let (reply, rx) = oneshot::channel();
        let method_name = method.to_owned();
        self.request(
            &method_name,
            Command::Call {
                method: method.to_owned(),
                params,
                reply,
            },
            rx,
        )
        .await
    }

    async fn request<T>(
        &self,
        method: &str,
        command: Command,
        rx: oneshot::Receiver<Result<T>>,
    ) -> Result<T> {
        self.commands.send(command).map_err(|_| Error::Closed)?;
        let timeout = self.shared.config.request_timeout;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) if matches!(*self.shared.state.borrow(), ConnectionState::Ready { .. }) => {
                Err(Error::Timeout {
                    method: method.to_owned(),
                    waited: timeout,
                })
            }
            Err(_) => Err(self.not_connected(timeout)),
        }
    }

    /// Reads the replica. Keep `f` short: it runs under the replica's read lock.
    pub fn read<R>(&self, f: impl FnOnce(&DbCache) -> R) -> R {
        f(&self.shared.cache.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Every row of `T`'s table, decoded.
    pub fn rows<T: Table>(&self) -> Result<Vec<T>, DecodeError> {
        self.read(DbCache::rows::<T>)
    }

    /// The server's schema, once connected.
    pub fn schema(&self) -> Option<Arc<DatabaseSchema>> {
        self.read(|c| c.schema().cloned())
    }

    /// Receives every change to the replica from now on, in order. Unbounded: a subscriber that
    /// stops reading should drop its receiver.
    pub fn subscribe(&self) -> mpsc::UnboundedReceiver<Arc<ChangeSet>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.shared
            .subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(tx);
        rx
    }

    pub fn state(&self) -> watch::Receiver<ConnectionState> {
        self.shared.state.subscribe()
    }

    /// For a readiness probe: `Ok` while a session is up and the replica in sync; otherwise why
    /// not, with the last failure (which remote, which step).
    pub fn readiness(&self) -> Result<(), String> {
        let db = &self.shared.config.database;
        match &*self.shared.state.borrow() {
            ConnectionState::Ready { .. } => Ok(()),
            ConnectionState::Stopped => Err(format!("the {db} client has stopped")),
            ConnectionState::Connecting => {
                let last = self
                    .shared
                    .last_failure
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                Err(match last {
                    Some(why) => format!("no {db} session: {why}"),
                    None => format!("no {db} session yet"),
                })
            }
        }
    }

    pub fn stats(&self) -> ClientStats {
        let c = &self.shared.counters;
        ClientStats {
            sessions: c.sessions.load(Ordering::Relaxed),
            full_syncs: c.full_syncs.load(Ordering::Relaxed),
            resumes: c.resumes.load(Ordering::Relaxed),
        }
    }
}
