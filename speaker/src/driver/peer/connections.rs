//! The peer task's connections: a connection the listener matched, a connect that succeeded,
//! what their reader and writer tasks report, and the bytes that go out on one. The session
//! decides what happens to each; this is the plumbing between its decisions and the sockets.

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{debug, warn};

use crate::bgp::fsm::{Action, ConnectionId, Input};
use crate::bgp::wire::{self, EncodeContext, Message, decode_frame};

use super::super::conn::{self, Conn, ConnEvent};
use super::{CONNECTION_LOST, PeerTask, slot};

impl PeerTask {
    /// The listener matched a connection to this peer. The session decides whether it takes it
    /// (RFC 4271 §6.8 collisions); only then does it get a slot.
    pub(super) fn inbound(&mut self, stream: TcpStream) {
        // GTSM on the accepted socket (the listener is shared with peers that may not use it),
        // before the session sees it. Segments that came before this call (the handshake,
        // perhaps the peer's OPEN) were not checked: those bytes may hold no more than the
        // start of the OPEN a peer sends on connect (`conn::unchecked_bytes_acceptable`). The
        // KEEPALIVE that makes the session Established answers our OPEN, sent only after this,
        // so it is always checked: a peer below the minimum never gets past OpenConfirm.
        let mut unchecked = Vec::new();
        if let Some(min) = self.config.min_ttl() {
            match conn::gtsm_on_accepted(&stream, min) {
                Ok(bytes) => unchecked = bytes,
                Err(reason) => {
                    warn!("GTSM: {reason}; closing the accepted connection");
                    return;
                }
            }
        }
        let actions = self.session.handle(Input::TcpConnected(ConnectionId::Inbound));
        let mut stream = Some(stream);
        let mut installed = None;
        let rejected = actions.iter().any(|a| matches!(a, Action::RejectInbound(_)));
        if !rejected && let Some(stream) = stream.take() {
            if let Some(ttl) = self.config.effective_ttl()
                && let Err(error) = conn::set_ttl(&stream, self.config.address.is_ipv4(), ttl)
            {
                warn!(%error, "cannot set the TTL of an accepted connection");
            }
            let _ = stream.set_nodelay(true);
            let generation = self.install(ConnectionId::Inbound, stream);
            installed = Some(generation);
        }
        for action in actions {
            match action {
                Action::RejectInbound(notification) => {
                    if let Some(stream) = stream.take() {
                        debug!("refusing a second connection from the peer");
                        reject(stream, notification.map(Message::Notification));
                    }
                }
                other => self.apply(other),
            }
        }
        // The peer's OPEN read while checking GTSM, handled after our OPEN went out.
        if let Some(generation) = installed
            && !unchecked.is_empty()
        {
            self.conn_event(ConnEvent::Bytes {
                id: ConnectionId::Inbound,
                generation,
                bytes: unchecked,
            });
        }
    }

    pub(super) fn install(&mut self, id: ConnectionId, stream: TcpStream) -> u64 {
        self.next_generation += 1;
        let generation = self.next_generation;
        let conn = Conn::start(
            stream,
            id,
            generation,
            self.events_tx.clone(),
            self.out_queue.clone(),
        );
        if let Some(old) = self.conns[slot(id)].replace(conn) {
            old.close();
        }
        generation
    }

    pub(super) fn conn_event(&mut self, event: ConnEvent) {
        match event {
            ConnEvent::Connected { generation, result } => {
                if self.connecting.as_ref().map(|(g, _)| *g) != Some(generation) {
                    return; // A connect we gave up on: its stream just drops.
                }
                self.connecting = None;
                match result {
                    Ok(stream) => {
                        debug!(local = ?stream.local_addr().ok(), "connected");
                        self.install(ConnectionId::Outbound, stream);
                        self.feed(Input::TcpConnected(ConnectionId::Outbound));
                    }
                    Err(error) => {
                        debug!(%error, "connect failed");
                        self.status.last_error = Some(format!("connect: {error}"));
                        self.feed(Input::TcpFailed(ConnectionId::Outbound));
                    }
                }
            }
            ConnEvent::Bytes {
                id,
                generation,
                bytes,
            } => {
                let Some(conn) = self.live(id, generation) else {
                    return;
                };
                conn.splitter.extend(&bytes);
                self.drain_frames(id, generation);
            }
            ConnEvent::Closed {
                id,
                generation,
                error,
            } => {
                let Some(conn) = self.conns[slot(id)].take_if(|c| c.generation == generation) else {
                    return;
                };
                conn.close();
                let why = error.map_or_else(|| "closed by the peer".to_owned(), |e| e.to_string());
                debug!(?id, why, "connection ended");
                self.feed(Input::TcpFailed(id));
                if self.status.last_error.as_deref() == Some(CONNECTION_LOST) {
                    self.status.last_error = Some(format!("{CONNECTION_LOST}: {why}"));
                }
            }
        }
    }

    pub(super) fn live(&mut self, id: ConnectionId, generation: u64) -> Option<&mut Conn> {
        self.conns[slot(id)]
            .as_mut()
            .filter(|c| c.generation == generation)
    }

    /// Decodes and handles one frame at a time: the decode context of the next frame may depend
    /// on what the session did with this one.
    pub(super) fn drain_frames(&mut self, id: ConnectionId, generation: u64) {
        loop {
            let Some(conn) = self.live(id, generation) else {
                return;
            };
            let decode = conn.decode;
            let decoded = match conn.splitter.next_frame() {
                Ok(None) => return,
                Ok(Some(frame)) => decode_frame(frame, decode).map(|d| (frame.message_type, d)),
                Err(error) => Err(error),
            };
            match decoded {
                Ok((message_type, decoded)) => {
                    self.status.messages_received.count(message_type);
                    if let Some(issue) = decoded.issue {
                        warn!(?issue, "received UPDATE handled by RFC 7606");
                    }
                    if let Message::Notification(n) = &decoded.message {
                        warn!(notification = %n, "NOTIFICATION received");
                    }
                    self.feed(Input::Message(id, decoded.message));
                }
                Err(error) => {
                    warn!(%error, "cannot decode a message from the peer");
                    self.status.last_error = Some(format!("received: {error}"));
                    self.feed(Input::DecodeError(id, error));
                    return;
                }
            }
        }
    }

    pub(super) fn send(&mut self, id: ConnectionId, message: &Message) {
        let Some(conn) = self.conns[slot(id)].as_ref() else {
            return;
        };
        match wire::encode(message, conn.encode) {
            Ok(bytes) => {
                if let Message::Notification(n) = message {
                    warn!(notification = %n, "sending NOTIFICATION");
                }
                self.status.messages_sent.count(message.type_code());
                conn.send(bytes);
            }
            Err(error) => warn!(%error, "cannot encode a message"),
        }
    }
}

/// Writes `message` (if any) on a connection we do not take, and closes it.
fn reject(mut stream: TcpStream, message: Option<Message>) {
    tokio::spawn(async move {
        if let Some(bytes) = message.and_then(|m| wire::encode(&m, EncodeContext::default()).ok()) {
            let _ = stream.write_all(&bytes).await;
        }
        let _ = stream.shutdown().await;
    });
}
