//! The task that owns the connection: find a usable server, set the session up, then serve
//! commands and apply updates until the connection ends; repeat with backoff.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use serde_json::value::RawValue;
use serde_json::{Value as Json, json};
use tokio::sync::mpsc;
use tokio::time::{Instant, MissedTickBehavior};
use tracing::{Instrument, debug, info, info_span, warn};

use super::complaints::Complaints;
use super::fit::fit_to_schema;
use super::keepalive::Keepalive;
use super::monitor::{
    ServerStatus, monitor_requests, server_monitor_request, server_statuses, without_conditions,
};
use super::session::Session;
use super::{ChangeSet, Command, ConnectionState, MonitorTables, Shared};
use crate::cache::{DbCache, MonitorUpdate, TableUpdates, TableUpdates2};
use crate::data::Row;
use crate::error::{Error, ProtocolError, Result};
use crate::ops::Operation;
use crate::remote::Remote;
use crate::reply::{OperationResult, parse_transact_reply};
use crate::rpc::{Message, RpcError};
use crate::schema::DatabaseSchema;

/// Our monitor ids; the server echoes them in every notification.
const MONITOR_ID: &str = "kube-ovn-rs";
const SERVER_MONITOR_ID: &str = "kube-ovn-rs-server";
/// `monitor_cond_since` with this id asks for everything.
const ZERO_TXN_ID: &str = "00000000-0000-0000-0000-000000000000";
pub(super) fn spawn(shared: Arc<Shared>, commands: mpsc::UnboundedReceiver<Command>) {
    let span = info_span!("ovsdb", db = %shared.config.database);
    let actor = Actor {
        shared,
        commands,
        queued: VecDeque::new(),
        last_txn_id: None,
        have_replica: false,
        highest_index: 0,
        next_remote: 0,
        complaints: Complaints::default(),
    };
    tokio::spawn(actor.run().instrument(span));
}

struct Actor {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedReceiver<Command>,
    /// Commands that arrived while no session was usable.
    queued: VecDeque<Command>,
    /// The transaction the replica is current with, for `monitor_cond_since`.
    last_txn_id: Option<String>,
    /// The replica is a faithful copy as of `last_txn_id` (false before the first sync and after
    /// any inconsistency).
    have_replica: bool,
    /// The highest RAFT log index any server has reported; servers behind it are stale.
    highest_index: i64,
    next_remote: usize,
    complaints: Complaints,
}

/// Why a session ended.
enum End {
    /// Every client handle is gone.
    Shutdown,
    Lost(Error),
}

enum Pending {
    Transact {
        ops: Vec<Operation>,
        reply: tokio::sync::oneshot::Sender<Result<Vec<OperationResult>>>,
    },
    Call {
        method: String,
        reply: tokio::sync::oneshot::Sender<Result<Json>>,
    },
    Echo,
}

impl Actor {
    async fn run(mut self) {
        let config = self.shared.config.clone();
        let mut backoff = config.backoff_min;
        loop {
            let mut served = false;
            // Remotes that could not serve in this round, reported before a session starts or
            // once the round is over.
            let mut failures: Vec<(&Remote, Error)> = Vec::new();
            for k in 0..config.remotes.len() {
                let idx = (self.next_remote + k) % config.remotes.len();
                let remote = &config.remotes[idx];
                let setup = self
                    .setup(remote)
                    .instrument(info_span!("session", %remote))
                    .await;
                match setup {
                    Ok((session, server)) => {
                        self.complaints
                            .report(std::mem::take(&mut failures), true, config.remotes.len() > 1);
                        if self.complaints.recovered(&remote.to_string()) {
                            info!(%remote, "OVSDB remote usable again");
                        }
                        backoff = config.backoff_min;
                        served = true;
                        let end = self
                            .serve(session, server)
                            .instrument(info_span!("session", %remote))
                            .await;
                        self.shared.state.send_replace(ConnectionState::Connecting);
                        match end {
                            End::Shutdown => return self.stop(),
                            End::Lost(e) => {
                                warn!(%remote, error = %e, "OVSDB connection lost; reconnecting");
                                self.shared.note_failure(format!("connection lost: {e}"));
                            }
                        }
                        // Start the next round with the following remote, as OVS's own clients
                        // do: a server that stalled (and left a session to the inactivity probe)
                        // would accept the reconnect and then stall its setup too.
                        self.next_remote = (idx + 1) % config.remotes.len();
                        break;
                    }
                    Err(e) => {
                        self.shared.note_failure(e.to_string());
                        failures.push((remote, e));
                    }
                }
                if self.commands.is_closed() && self.queued.is_empty() {
                    return self.stop();
                }
            }
            self.complaints.report(failures, served, config.remotes.len() > 1);
            if served {
                continue;
            }
            if self.wait(backoff).await.is_err() {
                return self.stop();
            }
            backoff = (backoff * 2).min(config.backoff_max);
        }
    }

    fn stop(&self) {
        self.shared.state.send_replace(ConnectionState::Stopped);
    }

    /// Sleeps for the backoff while accepting commands; `Err` when every client is gone.
    async fn wait(&mut self, backoff: std::time::Duration) -> std::result::Result<(), ()> {
        let until = Instant::now() + backoff;
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(until) => return Ok(()),
                cmd = self.commands.recv() => match cmd {
                    Some(cmd) => self.queued.push_back(cmd),
                    None => return Err(()),
                },
            }
        }
    }

    fn cache_write(&self) -> std::sync::RwLockWriteGuard<'_, DbCache> {
        self.shared.cache.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Connects, fetches the schema, checks leadership and syncs the replica.
    async fn setup(&mut self, remote: &Remote) -> Result<(Session, DbCache)> {
        let config = self.shared.config.clone();
        let db = config.database.as_str();
        let keepalive = Keepalive::new(config.connect_timeout, config.inactivity_probe);
        let mut session = Session::connect(remote, config.connect_timeout, &keepalive).await?;
        let mut deferred = Vec::new();

        let schema_json = rpc_result(
            session.call("get_schema", &json!([db]), &mut deferred).await?,
            "get_schema",
        )?;
        let schema: Arc<DatabaseSchema> =
            Arc::new(
                serde_json::from_str(schema_json.get()).map_err(|e| Error::Protocol {
                    remote: remote.to_string(),
                    source: ProtocolError::Json(format!("schema of {db}: {e}")),
                })?,
            );

        // Leadership and freshness, from the server's own `_Server` database. Servers without it
        // (very old ones) are standalone for our purposes.
        let mut server = DbCache::new(None);
        let select = json!(["_Server", {"op": "select", "table": "Database",
                             "where": [["name", "==", db]], "columns": ["name", "model", "connected", "leader", "index"]}]);
        if let Ok(reply) = session.call("transact", &select, &mut deferred).await? {
            let rows: Vec<Json> = serde_json::from_str(reply.get()).unwrap_or_default();
            let rows: Vec<Row> = rows
                .first()
                .and_then(|r| r.get("rows"))
                .and_then(|r| serde_json::from_value(r.clone()).ok())
                .unwrap_or_default();
            let status = server_statuses(&rows).remove(db).ok_or_else(|| Error::Rpc {
                method: "transact".into(),
                error: RpcError {
                    error: "unknown database".into(),
                    details: Some(format!("{db} is not served here")),
                },
            })?;
            status
                .usable(config.leader_only, self.highest_index)
                .map_err(|reason| Error::NotUsable {
                    remote: remote.to_string(),
                    reason,
                })?;
            self.highest_index = self.highest_index.max(status.index);
            let params = json!(["_Server", SERVER_MONITOR_ID, server_monitor_request(db)]);
            match session.call("monitor_cond", &params, &mut deferred).await? {
                Ok(initial) => {
                    let updates: TableUpdates2 = decode(remote, initial.get(), "_Server monitor reply")?;
                    server.apply_update2(updates).map_err(|source| Error::Protocol {
                        remote: remote.to_string(),
                        source,
                    })?;
                }
                Err(e) => {
                    debug!(error = %e, "no _Server monitor; leadership changes are noticed on reconnect");
                }
            }
        }

        let (changes, resync) = if config.monitor == MonitorTables::None {
            self.cache_write().set_schema(schema.clone());
            (Vec::new(), false)
        } else {
            self.sync_replica(&mut session, &schema, &mut deferred).await?
        };
        self.have_replica = true;
        let counters = &self.shared.counters;
        counters.sessions.fetch_add(1, Ordering::Relaxed);
        if resync {
            counters.full_syncs.fetch_add(1, Ordering::Relaxed);
        } else if config.monitor != MonitorTables::None {
            counters.resumes.fetch_add(1, Ordering::Relaxed);
        }
        self.shared.publish(ChangeSet { changes, resync });
        for message in deferred {
            self.handle_message(&mut session, &mut server, &mut HashMap::new(), message)?;
        }
        info!(%remote, schema_version = %schema.version, resumed = !resync, "OVSDB session ready");
        self.shared.state.send_replace(ConnectionState::Ready {
            remote: remote.clone(),
        });
        Ok((session, server))
    }

    /// Monitors the database, preferring `monitor_cond_since` so a reconnect resumes from the
    /// last transaction instead of reloading everything.
    async fn sync_replica(
        &mut self,
        session: &mut Session,
        schema: &Arc<DatabaseSchema>,
        deferred: &mut Vec<Message>,
    ) -> Result<(Vec<crate::cache::Change>, bool)> {
        let remote = session.remote.clone();
        let db = self.shared.config.database.clone();
        let (body, missing) = monitor_requests(schema, &self.shared.config.monitor);
        if !missing.is_empty() {
            warn!(tables = ?missing, "tables to monitor are not in the server's schema; skipped");
        }
        let since = self
            .last_txn_id
            .clone()
            .filter(|_| self.have_replica)
            .unwrap_or_else(|| ZERO_TXN_ID.into());
        let protocol = |source| Error::Protocol {
            remote: remote.to_string(),
            source,
        };

        let params = json!([db, MONITOR_ID, body, since]);
        if let Ok(reply) = session.call("monitor_cond_since", &params, deferred).await? {
            let (found, txn_id, updates): (bool, String, TableUpdates2) =
                decode(&remote, reply.get(), "monitor_cond_since reply")?;
            debug!(%since, %txn_id, found, "monitor_cond_since");
            self.last_txn_id = Some(txn_id);
            if found && self.have_replica {
                let mut cache = self.cache_write();
                cache.set_schema(schema.clone());
                return Ok((cache.apply_update2(updates).map_err(protocol)?, false));
            }
            let mut fresh = DbCache::new(Some(schema.clone()));
            fresh.apply_update2(updates).map_err(protocol)?;
            return Ok((self.cache_write().replace_with(fresh), true));
        }
        self.last_txn_id = None;
        let params = json!([db, MONITOR_ID, body]);
        let mut fresh = DbCache::new(Some(schema.clone()));
        if let Ok(reply) = session.call("monitor_cond", &params, deferred).await? {
            let updates: TableUpdates2 = decode(&remote, reply.get(), "monitor_cond reply")?;
            fresh.apply_update2(updates).map_err(protocol)?;
        } else {
            let params = json!([db, MONITOR_ID, without_conditions(&body)]);
            let reply = rpc_result(session.call("monitor", &params, deferred).await?, "monitor")?;
            let updates: TableUpdates = decode(&remote, reply.get(), "monitor reply")?;
            fresh.apply_update(updates);
        }
        Ok((self.cache_write().replace_with(fresh), true))
    }

    /// Serves commands and applies notifications until the connection ends.
    async fn serve(&mut self, mut session: Session, mut server: DbCache) -> End {
        let mut pending: HashMap<u64, Pending> = HashMap::new();
        while let Some(cmd) = self.queued.pop_front() {
            if let Err(e) = self.send_command(&mut session, &mut pending, cmd) {
                return Self::lose(pending, e);
            }
        }
        let probe = self.shared.config.inactivity_probe;
        let mut tick = tokio::time::interval(if probe.is_zero() {
            std::time::Duration::from_hours(1)
        } else {
            probe / 2
        });
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut echo_out = false;
        loop {
            tokio::select! {
                message = session.next_message() => {
                    let message = match message {
                        Ok(m) => m,
                        Err(e) => return Self::lose(pending, e),
                    };
                    if let Message::Response { id, .. } = &message
                        && id.as_u64().is_some_and(|id| matches!(pending.get(&id), Some(Pending::Echo)))
                    {
                        echo_out = false;
                    }
                    if let Err(e) = self.handle_message(&mut session, &mut server, &mut pending, message) {
                        return Self::lose(pending, e);
                    }
                }
                cmd = self.commands.recv() => {
                    let Some(cmd) = cmd else { return End::Shutdown };
                    if let Err(e) = self.send_command(&mut session, &mut pending, cmd) {
                        return Self::lose(pending, e);
                    }
                }
                _ = tick.tick(), if !probe.is_zero() => {
                    let idle = session.last_rx.elapsed();
                    if idle >= probe * 2 {
                        let e = Error::Io {
                            remote: session.remote.to_string(),
                            source: std::io::Error::new(std::io::ErrorKind::TimedOut,
                                format!("inactivity probe: nothing received for {idle:?}")),
                        };
                        return Self::lose(pending, e);
                    }
                    if idle >= probe && !echo_out {
                        match session.send("echo", &json!([])) {
                            Ok(id) => { pending.insert(id, Pending::Echo); echo_out = true; }
                            Err(e) => return Self::lose(pending, e),
                        }
                    }
                }
            }
        }
    }

    /// Fails every in-flight request: whether a transaction committed is unknown to us.
    fn lose(pending: HashMap<u64, Pending>, error: Error) -> End {
        let remote = match &error {
            Error::Io { remote, .. } | Error::Protocol { remote, .. } | Error::NotUsable { remote, .. } => {
                remote.clone()
            }
            _ => String::new(),
        };
        for (_, p) in pending {
            match p {
                Pending::Transact { reply, .. } => {
                    let _ = reply.send(Err(Error::ConnectionLost {
                        remote: remote.clone(),
                        method: "transact".into(),
                    }));
                }
                Pending::Call { method, reply } => {
                    let _ = reply.send(Err(Error::ConnectionLost {
                        remote: remote.clone(),
                        method,
                    }));
                }
                Pending::Echo => {}
            }
        }
        End::Lost(error)
    }

    fn send_command(
        &mut self,
        session: &mut Session,
        pending: &mut HashMap<u64, Pending>,
        cmd: Command,
    ) -> Result<()> {
        match cmd {
            Command::Transact { ops, reply } => {
                if reply.is_closed() {
                    return Ok(());
                }
                let schema = self
                    .shared
                    .cache
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
                    .schema()
                    .cloned();
                let fitted = match schema {
                    Some(schema) => fit_to_schema(&schema, ops),
                    None => Ok(ops),
                };
                match fitted {
                    Ok(ops) => {
                        let mut params = vec![Json::from(self.shared.config.database.clone())];
                        params.extend(
                            ops.iter()
                                .map(|op| serde_json::to_value(op).expect("operation serializes")),
                        );
                        let id = session.send("transact", &params)?;
                        pending.insert(id, Pending::Transact { ops, reply });
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                }
            }
            Command::Call {
                method,
                params,
                reply,
            } => {
                if reply.is_closed() {
                    return Ok(());
                }
                let id = session.send(&method, &params)?;
                pending.insert(id, Pending::Call { method, reply });
            }
        }
        Ok(())
    }

    /// Handles one message; an error means the connection must be dropped.
    fn handle_message(
        &mut self,
        session: &mut Session,
        server: &mut DbCache,
        pending: &mut HashMap<u64, Pending>,
        message: Message,
    ) -> Result<()> {
        let remote = session.remote.clone();
        match message {
            Message::Response { id, result } => match id.as_u64().and_then(|id| pending.remove(&id)) {
                Some(Pending::Transact { ops, reply }) => {
                    let outcome = result
                        .map_err(|error| Error::Rpc {
                            method: "transact".into(),
                            error,
                        })
                        .and_then(|raw| decode::<Vec<Json>>(&remote, raw.get(), "transact reply"))
                        .and_then(|items| parse_transact_reply(&ops, &items).map_err(Error::from));
                    let _ = reply.send(outcome);
                }
                Some(Pending::Call { method, reply }) => {
                    let outcome = result
                        .map_err(|error| Error::Rpc { method, error })
                        .and_then(|raw| decode::<Json>(&remote, raw.get(), "reply"));
                    let _ = reply.send(outcome);
                }
                Some(Pending::Echo) | None => {}
            },
            Message::Request { id, method, params } => {
                // ovsdb-server's inactivity probe; nothing else it sends is meant for clients.
                if method == "echo" {
                    session.reply(&id, &params)?;
                }
            }
            Message::Notification { method, params } => {
                let applied = self.apply_notification(&remote, server, &method, &params);
                if let Err(Error::Protocol { .. }) = &applied {
                    // The replica can no longer be trusted: resync from scratch next time.
                    self.have_replica = false;
                    self.last_txn_id = None;
                }
                applied?;
            }
        }
        Ok(())
    }

    fn apply_notification(
        &mut self,
        remote: &Remote,
        server: &mut DbCache,
        method: &str,
        params: &RawValue,
    ) -> Result<()> {
        let protocol = |source| Error::Protocol {
            remote: remote.to_string(),
            source,
        };
        if method == "monitor_canceled" {
            // The server dropped our monitor (its database was replaced or converted).
            self.have_replica = false;
            self.last_txn_id = None;
            return Err(Error::Io {
                remote: remote.to_string(),
                source: std::io::Error::other("the server canceled the monitor"),
            });
        }
        let Some(update) = MonitorUpdate::decode(method, params.get()).map_err(protocol)? else {
            debug!(method, "ignoring notification");
            return Ok(());
        };
        match update.monitor() {
            MONITOR_ID => {
                let txn_id = match &update {
                    MonitorUpdate::Update3 { txn_id, .. } => Some(txn_id.clone()),
                    _ => None,
                };
                let changes = self.cache_write().apply(update).map_err(protocol)?;
                if txn_id.is_some() {
                    self.last_txn_id = txn_id;
                }
                self.shared.publish(ChangeSet {
                    changes,
                    resync: false,
                });
            }
            SERVER_MONITOR_ID => {
                server.apply(update).map_err(protocol)?;
                self.check_server(remote, server)?;
            }
            other => debug!(monitor = other, "update for a monitor we did not start"),
        }
        Ok(())
    }

    /// After a `_Server` update: a leader that stepped down, or a member that lost its cluster,
    /// is left for another.
    fn check_server(&mut self, remote: &Remote, server: &DbCache) -> Result<()> {
        let Some(status) = server
            .table("Database")
            .map(|(_, r)| ServerStatus::from_row(r))
            .next()
        else {
            return Ok(());
        };
        self.highest_index = self.highest_index.max(status.index);
        status
            .usable(self.shared.config.leader_only, 0)
            .map_err(|reason| Error::NotUsable {
                remote: remote.to_string(),
                reason: format!("{}: {reason}", self.shared.config.database),
            })
    }
}

fn rpc_result<T>(result: std::result::Result<T, RpcError>, method: &str) -> Result<T> {
    result.map_err(|error| Error::Rpc {
        method: method.to_owned(),
        error,
    })
}

fn decode<T: serde::de::DeserializeOwned>(remote: &Remote, text: &str, what: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| Error::Protocol {
        remote: remote.to_string(),
        source: ProtocolError::Json(format!("{what}: {e}")),
    })
}
