//! The task that runs one peer: it owns the [`Session`], the [`AdjRibOut`], both connection
//! slots and every timer, and is the only place any of them changes. Everything else talks to
//! it by message: the handle sends [`Command`]s, connection tasks send [`ConnEvent`]s.
//!
//! ```text
//!   PeerHandle ──Command (unbounded)──┐
//!   listener ──Command::Inbound───────┤
//!   connect task ──Connected─────────┼──► PeerTask::run ──► Session::handle ──► Actions
//!   reader task ×2 ──Bytes / Closed──┤          │                                 │
//!   writer: queue below low water ───┤          └── watch<PeerStatus>            ▼
//!   timers (one sleep_until, earliest)┘            writer task ×2 ◄── encoded bytes (bounded)
//! ```
//!
//! Commands only change the Adj-RIB-Out's desired state; UPDATEs are taken from it while the
//! Established connection has room (see `conn.rs`), so under a slow peer the latest state goes
//! out, not a backlog of every change. A burst of commands is taken whole, and a full
//! replacement in it makes the route changes queued before it moot. The sockets' side (accepting,
//! installing, reading, writing a connection) is in `peer/connections.rs`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;
use std::time::SystemTime;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::bgp::fsm::{Action, ConnectionId, DownReason, Input, Session, StopReason, Timer};
use crate::bgp::rib_out::AdjRibOut;
use crate::bgp::wire::UpdateMode;

use super::command::{Command, superseded_dropped};
use super::config::PeerConfig;
use super::conn::{self, Conn, ConnEvent, MAX_IN_FLIGHT, OutQueue};
use super::status::PeerStatus;

mod connections;

const CONNECTION_LOST: &str = "connection lost";

/// Bytes from readers queued for the peer task; the bound makes a fast sender wait for us.
const EVENT_QUEUE: usize = 64;

fn slot(id: ConnectionId) -> usize {
    match id {
        ConnectionId::Outbound => 0,
        ConnectionId::Inbound => 1,
    }
}

pub(crate) struct PeerTask {
    config: Arc<PeerConfig>,
    session: Session,
    rib: AdjRibOut,
    conns: [Option<Conn>; 2],
    /// The connect in flight, with the generation its connection will get.
    connecting: Option<(u64, JoinHandle<()>)>,
    next_generation: u64,
    timers: HashMap<Timer, Instant>,
    commands: mpsc::UnboundedReceiver<Command>,
    events: mpsc::Receiver<ConnEvent>,
    events_tx: mpsc::Sender<ConnEvent>,
    status: PeerStatus,
    status_tx: watch::Sender<PeerStatus>,
    /// Shared with the connections' writers: the wake-up when there is room, the peak.
    out_queue: Arc<OutQueue>,
    /// Next hops the caller set; the connection's own address fills a family left unset.
    explicit_v4: Option<Ipv4Addr>,
    explicit_v6: Option<Ipv6Addr>,
    ready_deadline: Option<Instant>,
    finished: bool,
}

impl PeerTask {
    pub fn new(
        config: PeerConfig,
        commands: mpsc::UnboundedReceiver<Command>,
        status_tx: watch::Sender<PeerStatus>,
    ) -> Self {
        let (events_tx, events) = mpsc::channel(EVENT_QUEUE);
        let ready_deadline = config.ready_deadline.map(|d| Instant::now() + d);
        PeerTask {
            session: Session::new(config.session.clone()),
            rib: AdjRibOut::new(config.session.local_as),
            status: PeerStatus::new(config.address),
            config: Arc::new(config),
            conns: [None, None],
            connecting: None,
            next_generation: 0,
            timers: HashMap::new(),
            commands,
            events,
            events_tx,
            status_tx,
            out_queue: Arc::default(),
            explicit_v4: None,
            explicit_v6: None,
            ready_deadline,
            finished: false,
        }
    }

    pub async fn run(mut self) {
        info!(
            passive = self.config.session.passive,
            ttl = ?self.config.effective_ttl(),
            min_ttl = ?self.config.min_ttl(),
            md5 = self.config.md5_key.is_some(),
            "peer starting"
        );
        self.feed(Input::Start);
        while !self.finished {
            self.publish();
            let deadline = self.next_deadline();
            let out_queue = self.out_queue.clone();
            tokio::select! {
                command = self.commands.recv() => {
                    // Every handle is gone: nobody can ever change the routes again.
                    let command = command.unwrap_or(Command::Shutdown(StopReason::PeerDeconfigured));
                    // Take a burst of changes whole, so 100,000 announces become packed UPDATEs
                    // rather than one each.
                    let mut burst = vec![command];
                    while let Ok(command) = self.commands.try_recv() {
                        burst.push(command);
                    }
                    for command in superseded_dropped(burst) {
                        self.command(command);
                    }
                    self.flush_updates();
                }
                Some(event) = self.events.recv() => self.conn_event(event),
                () = out_queue.writable.notified() => self.flush_updates(),
                () = sleep_until(deadline) => self.fire_timers(),
            }
        }
        if let Some((_, task)) = self.connecting.take() {
            task.abort();
        }
        for conn in self.conns.iter_mut().filter_map(Option::take) {
            conn.close();
        }
        self.status.stopped = true;
        self.publish();
        info!("peer stopped");
    }

    fn publish(&mut self) {
        self.status.prefixes_sent = self.rib.sent_count();
        self.status.prefixes_desired = self.rib.desired_count();
        self.status.prefixes_pending = self.rib.pending_count();
        self.status.prefixes_unsendable = self.rib.unsendable_count();
        self.status.initial_table_sent = self.rib.initial_table_sent();
        self.status.out_queue_bytes = self.conns.iter().flatten().map(Conn::out_queue_bytes).sum();
        self.status.out_queue_peak_bytes = self.out_queue.peak();
        let status = &self.status;
        self.status_tx.send_if_modified(|current| {
            if current == status {
                return false;
            }
            current.clone_from(status);
            true
        });
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.timers.values().copied().chain(self.ready_deadline).min()
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        if self.ready_deadline.is_some_and(|at| at <= now) {
            info!("graceful restart deferral ran out: sending routes and End-of-RIB");
            self.command(Command::SetReady);
            self.flush_updates();
        }
        let expired: Vec<Timer> = self
            .timers
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(timer, _)| *timer)
            .collect();
        for timer in expired {
            self.timers.remove(&timer);
            // While BFD says the path is down the session waits for `bfd_up`, not the clock.
            if timer == Timer::IdleHold && self.status.bfd_down {
                self.status.idle_holds_waited_for_bfd += 1;
                continue;
            }
            if timer == Timer::ConnectRetry && self.connecting.is_some() {
                // The connect neither succeeded nor failed: the SYN goes unanswered (a device
                // without a route to the peer makes the kernel take it as on-link there and
                // wait for an ARP / ND answer that never comes). The session dials again.
                let via = self
                    .config
                    .bind_device
                    .as_ref()
                    .map(|d| format!(" out of {d}"))
                    .unwrap_or_default();
                self.status.last_error = Some(format!(
                    "connect: no answer from {} within {:?}{via}",
                    self.config.address, self.config.session.connect_retry
                ));
            }
            self.feed(Input::TimerExpired(timer));
        }
    }

    fn feed(&mut self, input: Input) {
        for action in self.session.handle(input) {
            self.apply(action);
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Announce(routes) => {
                for (prefix, attributes) in routes {
                    if let Err(error) = self.rib.announce(prefix, attributes) {
                        warn!(%prefix, %error, "not announced");
                    }
                }
            }
            Command::Withdraw(prefixes) => prefixes.into_iter().for_each(|p| self.rib.withdraw(p)),
            Command::ReplaceAll(routes) => {
                if let Err(error) = self.rib.replace_all(routes) {
                    warn!(%error, "replace_all: a prefix cannot be announced; the rest applied");
                }
            }
            Command::SetReady => {
                self.ready_deadline = None;
                self.status.ready = true;
                self.rib.set_ready();
            }
            Command::SetLocalAddresses(v4, v6) => {
                self.explicit_v4 = v4;
                self.explicit_v6 = v6;
                self.update_local_addresses();
            }
            Command::Inbound(stream) => self.inbound(stream),
            Command::InboundRefused(why) => {
                self.status.last_error = Some(format!("inbound connection refused: {why}"));
            }
            Command::BfdDown => {
                if !self.status.bfd_down {
                    info!("BFD down: stopping the session (Cease/BFD Down)");
                    self.status.bfd_down = true;
                    self.feed(Input::Stop(StopReason::BfdDown));
                }
            }
            Command::BfdUp => {
                if self.status.bfd_down {
                    info!("BFD up: starting the session again");
                    self.status.bfd_down = false;
                    self.timers.remove(&Timer::IdleHold);
                    self.feed(Input::Start);
                }
            }
            Command::Reset => self.feed(Input::Stop(StopReason::AdministrativeReset)),
            Command::Shutdown(reason) => {
                self.feed(Input::Stop(reason));
                self.finished = true;
            }
        }
    }

    fn apply(&mut self, action: Action) {
        match action {
            Action::Connect => {
                self.next_generation += 1;
                let generation = self.next_generation;
                let config = self.config.clone();
                let events = self.events_tx.clone();
                let task = tokio::spawn(async move {
                    let result = conn::connect(&config).await;
                    let _ = events.send(ConnEvent::Connected { generation, result }).await;
                });
                if let Some((_, old)) = self.connecting.replace((generation, task)) {
                    old.abort();
                }
            }
            Action::Send(id, message) => self.send(id, &message),
            Action::Close(id) => {
                if id == ConnectionId::Outbound
                    && let Some((_, task)) = self.connecting.take()
                {
                    task.abort();
                }
                if let Some(conn) = self.conns[slot(id)].take() {
                    conn.close();
                }
            }
            // RejectInbound is handled in `inbound`, where the offered stream is; received
            // routes are not used by a speaker that only originates.
            Action::RejectInbound(_) | Action::UpdateReceived(_) => {}
            Action::StartTimer(timer, after) => {
                self.timers.insert(timer, Instant::now() + after);
            }
            Action::StopTimer(timer) => {
                self.timers.remove(&timer);
            }
            Action::StateChanged { from, to } => {
                info!(?from, ?to, "state");
                self.status.state = to;
            }
            Action::Established(id, negotiated) => self.established(id, &negotiated),
            Action::SessionDown(reason) => {
                let why = describe(&reason);
                info!(reason = %why, "session down");
                self.status.flaps += 1;
                self.status.established_at = None;
                self.status.local_address = None;
                self.status.last_error = Some(why);
                self.rib.session_down();
            }
            Action::RouteRefreshRequested(family) => {
                let routes = self.rib.route_refresh(family);
                info!(?family, routes, "route refresh: re-sending");
                self.flush_updates();
            }
            Action::PeerRestarting => info!("the peer restarted (R bit)"),
            Action::EndOfRibReceived(family) => debug!(?family, "End-of-RIB received"),
        }
    }

    fn established(&mut self, id: ConnectionId, negotiated: &crate::bgp::fsm::Negotiated) {
        let Some(conn) = self.conns[slot(id)].as_mut() else {
            return;
        };
        conn.encode = negotiated.encode_context();
        // Received routes are never used: check UPDATEs (RFC 7606, End-of-RIB) without
        // building them.
        conn.decode = negotiated.decode_context(UpdateMode::Check);
        let local = conn.local.map(|a| conn::canonical(a.ip()));
        info!(
            ?local,
            hold = negotiated.hold_time,
            families = ?negotiated.families,
            restarting = negotiated.local_restarting,
            "established"
        );
        self.status.local_address = local;
        self.status.established_at = Some(SystemTime::now());
        self.update_local_addresses();
        self.rib.session_up(negotiated);
        self.flush_updates();
    }

    /// Next hops for [`crate::bgp::rib_out::NextHop::LocalAddress`]: the caller's, or else our
    /// address on the session of that family.
    fn update_local_addresses(&mut self) {
        let v4 = self.explicit_v4.or(match self.status.local_address {
            Some(IpAddr::V4(a)) => Some(a),
            _ => None,
        });
        let v6 = self.explicit_v6.or(match self.status.local_address {
            Some(IpAddr::V6(a)) => Some(a),
            _ => None,
        });
        self.rib.set_local_addresses(v4, v6);
        // A link-local peer shares the link with us: our link-local address on it goes with a
        // global next hop (RFC 2545 §3), or is the next hop when we have no global one.
        let link_local = match self.status.local_address {
            Some(IpAddr::V6(a)) if self.config.interface.is_some() && a.is_unicast_link_local() => Some(a),
            _ => None,
        };
        self.rib.set_link_local(link_local);
    }

    /// Takes UPDATEs from the Adj-RIB-Out while the Established connection has room; the
    /// writer's wake-up brings us back when it drains.
    fn flush_updates(&mut self) {
        let Some((id, _)) = self.session.established_connection() else {
            return;
        };
        let Some(conn) = self.conns[slot(id)].as_ref() else {
            return;
        };
        loop {
            let queued = conn.out_queue_bytes();
            if queued >= MAX_IN_FLIGHT {
                break;
            }
            let output = self.rib.take_output(MAX_IN_FLIGHT - queued);
            if output.bytes.is_empty() {
                break;
            }
            debug!(updates = output.updates, bytes = output.bytes.len(), "sending");
            self.status.messages_sent.update += output.updates;
            conn.send(output.bytes);
        }
        for failure in self.rib.take_failures() {
            let first = failure.prefixes.first().map(ToString::to_string);
            warn!(
                error = %failure.error,
                prefixes = failure.prefixes.len(),
                first,
                "cannot encode an UPDATE: these prefixes are not announced"
            );
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A line for logs and `last_error`.
fn describe(reason: &DownReason) -> String {
    match reason {
        DownReason::HoldTimerExpired => "hold timer expired".to_owned(),
        DownReason::NotificationReceived(n) => format!("NOTIFICATION received: {n}"),
        DownReason::NotificationSent(n) => format!("NOTIFICATION sent: {n}"),
        DownReason::ConnectionLost => CONNECTION_LOST.to_owned(),
        DownReason::Stopped(StopReason::AdministrativeShutdown { message }) => {
            format!("administrative shutdown: {message}")
        }
        DownReason::Stopped(StopReason::BfdDown) => "BFD down".to_owned(),
        DownReason::Stopped(reason) => format!("stopped: {reason:?}"),
    }
}
