//! The receive task of a local address and the task of one session.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Instant;

use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::time::sleep_until;

use super::socket::{TTL, recv_with_ttl};
use super::{Command, SessionCounters, Shared};
use crate::bfd::packet::ControlPacket;
use crate::bfd::session::{Action, Input, Session, Status};

/// Removes the session from the registry when its task ends, however it ends.
pub struct Registration {
    pub shared: Arc<Shared>,
    pub discriminator: u32,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.shared.remove(self.discriminator);
    }
}

fn bump(counter: &std::sync::atomic::AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Reads `local`:3784 until aborted (when its last session goes) or the [`super::Bfd`] is gone.
pub async fn receive(shared: Weak<Shared>, local: IpAddr, sock: UdpSocket) {
    let mut buf = [0u8; 512];
    loop {
        let read = sock
            .async_io(Interest::READABLE, || recv_with_ttl(&sock, &mut buf))
            .await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let counters = &shared.counters;
        bump(&counters.received);
        let datagram = match read {
            Ok(d) => d,
            Err(e) => {
                bump(&counters.errors);
                tracing::debug!(%local, error = %e, "BFD: recvmsg failed");
                continue;
            }
        };
        // RFC 5881 §5: single-hop packets must arrive with the TTL they were sent with, 255.
        if datagram.ttl != Some(TTL) {
            bump(&counters.bad_ttl);
            tracing::debug!(%local, source = %datagram.source, ttl = ?datagram.ttl, "BFD: dropped, TTL is not 255");
            continue;
        }
        let packet = match ControlPacket::decode(&buf[..datagram.len.min(buf.len())]) {
            Ok(p) => p,
            Err(e) => {
                bump(&counters.invalid);
                tracing::debug!(%local, source = %datagram.source, error = %e, "BFD: packet discarded");
                continue;
            }
        };
        demultiplex(&shared, local, datagram.source, packet);
    }
}

/// RFC 5880 §6.3: by Your Discriminator when the peer has learnt ours, else by the addresses.
/// Packets whose source is not the session's peer are dropped either way.
fn demultiplex(shared: &Shared, local: IpAddr, source: SocketAddr, packet: ControlPacket) {
    let reg = shared.registry();
    let discriminator = if packet.your_discriminator == 0 {
        reg.by_peer.get(&(local, source.ip())).copied()
    } else {
        Some(packet.your_discriminator)
    };
    let entry = discriminator
        .and_then(|d| reg.by_discriminator.get(&d))
        .filter(|e| e.peer == source.ip() && e.local == local);
    let Some(entry) = entry else {
        bump(&shared.counters.unknown_peer);
        tracing::debug!(%local, %source, your = packet.your_discriminator, "BFD: packet for no session");
        return;
    };
    if entry.packets.try_send(packet).is_err() {
        bump(&shared.counters.queue_full);
    }
}

pub struct SessionTask {
    pub session: Session,
    pub peer: SocketAddr,
    pub sender: UdpSocket,
    pub packets: mpsc::Receiver<ControlPacket>,
    pub commands: mpsc::UnboundedReceiver<Command>,
    pub status: watch::Sender<Status>,
    pub counters: Arc<SessionCounters>,
    pub _registration: Registration,
}

/// The deadlines the session armed.
#[derive(Default)]
struct Deadlines {
    tx: Option<Instant>,
    detect: Option<Instant>,
}

async fn at(deadline: Option<Instant>) {
    match deadline {
        Some(at) => sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

pub async fn run_session(mut t: SessionTask) {
    let mut deadlines = Deadlines::default();
    loop {
        let input = tokio::select! {
            Some(packet) = t.packets.recv() => {
                bump(&t.counters.received);
                Input::Received(packet)
            }
            command = t.commands.recv() => match command {
                Some(Command::AdminUp) => Input::AdminUp,
                Some(Command::AdminDown) => Input::AdminDown,
                Some(Command::SetTimers(timers)) => Input::SetTimers(timers),
                None => break,
            },
            () = at(deadlines.tx) => {
                deadlines.tx = None;
                Input::TxTimer
            }
            () = at(deadlines.detect) => {
                deadlines.detect = None;
                Input::DetectTimer
            }
        };
        let actions = t.session.handle(Instant::now(), input);
        apply(&mut t, &mut deadlines, actions).await;
    }
    // The handle is gone: tell the peer we are going AdminDown (one packet), so it does not
    // take its client protocols down for a failure (RFC 5882 §3.2), then end.
    let actions = t.session.handle(Instant::now(), Input::AdminDown);
    let mut ignored = Deadlines::default();
    apply(&mut t, &mut ignored, actions).await;
}

async fn apply(t: &mut SessionTask, deadlines: &mut Deadlines, actions: Vec<Action>) {
    for action in actions {
        match action {
            Action::Send(packet) => match t.sender.send_to(&packet.encode(), t.peer).await {
                Ok(_) => bump(&t.counters.transmitted),
                // The peer's host may not be there yet (ICMP unreachable comes back as an
                // error on a later send); the detection timer is what reports it.
                Err(e) => tracing::debug!(peer = %t.peer, error = %e, "BFD: send failed"),
            },
            Action::ArmTx { at, .. } => deadlines.tx = Some(at),
            Action::StopTx => deadlines.tx = None,
            Action::ArmDetect(at) => deadlines.detect = Some(at),
            Action::StopDetect => deadlines.detect = None,
            Action::StateChanged { from, to, diag } => {
                let before = *t.status.borrow();
                let now = t.session.status();
                if now.is_failure_after(&before) {
                    bump(&t.counters.failures);
                }
                tracing::info!(peer = %t.peer.ip(), ?from, ?to, %diag, "BFD session state changed");
                t.status.send_replace(now);
            }
        }
    }
    // Intervals and the Poll Sequence change without a state change; watchers see them too.
    let now = t.session.status();
    t.status.send_if_modified(|published| {
        let changed = *published != now;
        *published = now;
        changed
    });
}
