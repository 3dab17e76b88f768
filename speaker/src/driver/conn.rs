//! One TCP connection of a peer task: the socket set up before `connect()` (source address, TTL,
//! GTSM's minimum received TTL, MD5 key), a reader task that forwards raw bytes to the peer task, and a writer task that
//! drains a queue of encoded messages.
//!
//! The queue is bounded by its user, not by the channel: the peer task takes UPDATEs from the
//! Adj-RIB-Out only while fewer than [`MAX_IN_FLIGHT`] bytes wait here, and the writer wakes it
//! when the queue falls below [`LOW_WATER`]. A peer that stops reading therefore holds at most
//! that much of our memory, and changes made meanwhile wait in the Adj-RIB-Out, where a newer
//! one replaces an older one instead of queueing behind it.
//!
//! The reader does not decode: the peer task splits and decodes frames one at a time, each
//! handled before the next, because the KEEPALIVE that makes a session Established changes how
//! the UPDATEs behind it in the same read are decoded (see [`crate::bgp::fsm`]).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use kube_ovn_dataplane::socket::{IpVersion, set_ttl as set_socket_ttl};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Notify, mpsc};
use tokio::task::JoinHandle;

use crate::bgp::fsm::ConnectionId;
use crate::bgp::wire::{DecodeContext, EncodeContext, FrameSplitter};

use super::config::PeerConfig;

/// How long a closed connection keeps reading so our last NOTIFICATION is not lost to a reset
/// (closing a socket with unread data sends RST, and a peer that gets RST may drop what it had
/// not read yet).
const LINGER_AFTER_CLOSE: Duration = Duration::from_secs(3);
/// Read buffer size: 64 KiB takes a burst of UPDATEs in one call.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes queued for the socket beyond which the peer task takes no more UPDATEs from the
/// Adj-RIB-Out (control messages still go). 1 MiB per connection is little for a speaker with a
/// few peers, and enough that the peer still has a backlog to read while the next refill is
/// being built: with 256 KiB, a million routes reached BIRD in about twice the time (BIRD sat
/// idle between refills; see docs/benchmarks.md).
pub const MAX_IN_FLIGHT: usize = 1024 * 1024;
/// The writer wakes the peer task when its queue falls below this.
pub(crate) const LOW_WATER: usize = MAX_IN_FLIGHT / 4;

/// What connection tasks tell the peer task. `generation` tells a live connection from an
/// earlier one in the same slot whose task had not stopped yet.
#[derive(Debug)]
pub(crate) enum ConnEvent {
    Connected {
        generation: u64,
        result: io::Result<TcpStream>,
    },
    Bytes {
        id: ConnectionId,
        generation: u64,
        bytes: Vec<u8>,
    },
    Closed {
        id: ConnectionId,
        generation: u64,
        error: Option<io::Error>,
    },
}

/// Sets the TTL (IPv6: unicast hop limit) on a socket of either family.
pub(crate) fn set_ttl(socket: &impl AsFd, is_v4: bool, ttl: u8) -> io::Result<()> {
    let version = if is_v4 { IpVersion::V4 } else { IpVersion::V6 };
    set_socket_ttl(socket, version, ttl).map_err(io::Error::other)
}

/// The least TTL (IPv6: hop limit) a segment may arrive with on this socket (GTSM, RFC 5082).
pub(crate) fn set_min_ttl(socket: &impl AsFd, is_v4: bool, min: u8) -> io::Result<()> {
    let version = if is_v4 { IpVersion::V4 } else { IpVersion::V6 };
    kube_ovn_dataplane::socket::set_min_ttl(socket, version, min).map_err(io::Error::other)
}

/// Takes what an accepted socket received before GTSM's minimum TTL was set on it: bytes the
/// kernel did not check. `None` when the peer already closed.
fn take_unchecked(stream: &TcpStream) -> io::Result<Option<Vec<u8>>> {
    let mut unchecked = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.try_read(&mut buf) {
            Ok(0) => return Ok(None),
            Ok(n) => unchecked.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Some(unchecked)),
            Err(e) => return Err(e),
        }
    }
}

/// Whether bytes the kernel did not check against GTSM's minimum TTL may be taken: at most the
/// start of one OPEN, which a peer sends as soon as it is connected. Anything after it (the
/// KEEPALIVE that would make the session Established, an UPDATE) answers our OPEN, which goes
/// out only once the minimum is in force; so a peer that sent more did not wait for us and the
/// connection is refused (RFC 5082 §3: nothing from outside the radius may drive the session).
pub(crate) fn unchecked_bytes_acceptable(bytes: &[u8]) -> bool {
    const HEADER_LEN: usize = 19;
    if bytes.len() < HEADER_LEN {
        return true;
    }
    let length = usize::from(u16::from_be_bytes([bytes[16], bytes[17]]));
    bytes[18] == crate::bgp::wire::message_type::OPEN && bytes.len() <= length
}

/// GTSM on a socket the listener accepted: sets the minimum TTL, then takes what came before it
/// (unchecked), which may be no more than the start of the peer's OPEN. Returns those bytes, to
/// be handled after our OPEN went out; or why the connection must be closed.
pub(crate) fn gtsm_on_accepted(stream: &TcpStream, min: u8) -> Result<Vec<u8>, String> {
    // An IPv4 peer on a dual-stack listener is IPv6 with a mapped address: it gets the IPv6
    // option and, by `set_min_ttl`, the IPv4 one too.
    let is_v4 = stream.local_addr().is_ok_and(|a| a.is_ipv4());
    set_min_ttl(stream, is_v4, min).map_err(|e| format!("cannot set the minimum TTL: {e}"))?;
    match take_unchecked(stream) {
        Ok(Some(bytes)) if unchecked_bytes_acceptable(&bytes) => Ok(bytes),
        Ok(Some(_)) => Err("the peer sent more than its OPEN before its TTL could be checked".into()),
        Ok(None) => Err("the peer closed it at once".into()),
        Err(e) => Err(format!("reading it: {e}")),
    }
}

/// Opens our connection to the peer: the source address, TTL, minimum received TTL and MD5 key are set before
/// `connect()`, since the SYN must already carry them (RFC 2385 §2: every segment is signed).
pub(crate) async fn connect(config: &PeerConfig) -> io::Result<TcpStream> {
    let mut remote = SocketAddr::new(config.address, config.port);
    // A link-local peer is reached through its interface, named by the zone (RFC 4007 §11).
    if let (SocketAddr::V6(v6), Some(interface)) = (&mut remote, &config.interface) {
        v6.set_scope_id(interface_index(interface)?);
    }
    let socket = if remote.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    // The VRF (or device) first: the source address and route are chosen within it.
    if let Some(device) = &config.bind_device {
        kube_ovn_dataplane::socket::bind_to_device(&socket, device).map_err(io::Error::other)?;
    }
    if let Some(ttl) = config.effective_ttl() {
        set_ttl(&socket, remote.is_ipv4(), ttl)?;
    }
    // GTSM before connect(): a SYN-ACK from farther away is dropped too (RFC 5082 §3).
    if let Some(min) = config.min_ttl() {
        set_min_ttl(&socket, remote.is_ipv4(), min)?;
    }
    if let Some(local) = config.local_address {
        socket.bind(SocketAddr::new(local, 0))?;
    }
    if let Some(key) = &config.md5_key {
        kube_ovn_dataplane::tcp_md5::set_md5_key(socket.as_fd(), remote.ip(), key)
            .map_err(io::Error::other)?;
    }
    let stream = socket.connect(remote).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// The index of `interface`, as an I/O error naming it when there is none.
pub(crate) fn interface_index(interface: &str) -> io::Result<u32> {
    kube_ovn_dataplane::socket::interface_index(interface)
        .map_err(|e| io::Error::new(io::ErrorKind::NotFound, e.to_string()))
}

/// Normalises an IPv4-mapped IPv6 address (a v4 peer on a dual-stack listener) to IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// What the writer task shares with the peer task.
#[derive(Debug, Default)]
pub(crate) struct OutQueue {
    /// The most that was ever queued on any connection of the peer.
    peak: AtomicUsize,
    /// Signalled when a connection's queue falls below [`LOW_WATER`], and when it empties.
    pub writable: Notify,
}

impl OutQueue {
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

/// A live connection held in one of the peer task's two slots.
pub(crate) struct Conn {
    pub generation: u64,
    pub local: Option<SocketAddr>,
    pub splitter: FrameSplitter,
    pub decode: DecodeContext,
    pub encode: EncodeContext,
    queue: Option<mpsc::UnboundedSender<Vec<u8>>>,
    /// This connection's queued bytes.
    queued: Arc<AtomicUsize>,
    shared: Arc<OutQueue>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
}

impl Conn {
    pub fn start(
        stream: TcpStream,
        id: ConnectionId,
        generation: u64,
        events: mpsc::Sender<ConnEvent>,
        shared: Arc<OutQueue>,
    ) -> Conn {
        let local = stream.local_addr().ok();
        let (read, write) = stream.into_split();
        let (queue, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let reader = tokio::spawn(read_loop(read, id, generation, events));
        let writer = tokio::spawn(write_loop(write, rx, queued.clone(), shared.clone()));
        Conn {
            generation,
            local,
            splitter: FrameSplitter::new(),
            decode: DecodeContext::default(),
            encode: EncodeContext::default(),
            queue: Some(queue),
            queued,
            shared,
            reader: Some(reader),
            writer: Some(writer),
        }
    }

    /// Queues bytes for the writer task.
    pub fn send(&self, bytes: Vec<u8>) {
        if let Some(queue) = &self.queue {
            let now = self.queued.fetch_add(bytes.len(), Ordering::Relaxed) + bytes.len();
            self.shared.peak.fetch_max(now, Ordering::Relaxed);
            // The writer is gone only after a write error; the reader reports the close.
            let _ = queue.send(bytes);
        }
    }

    pub fn out_queue_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Flushes what is queued, then sends FIN; the reader drains for a moment so the close
    /// is a FIN and not a reset. After that moment both tasks end, the writer too if the peer
    /// still takes nothing (a stopped peer would otherwise hold the socket and its queue).
    pub fn close(mut self) {
        self.queue = None;
        let tasks: Vec<JoinHandle<()>> = [self.reader.take(), self.writer.take()]
            .into_iter()
            .flatten()
            .collect();
        tokio::spawn(async move {
            tokio::time::sleep(LINGER_AFTER_CLOSE).await;
            for task in tasks {
                task.abort();
            }
        });
    }
}

impl Drop for Conn {
    /// A connection dropped without [`Conn::close`] (the peer task itself was dropped, as in a
    /// crash) ends its tasks at once; the kernel closes the socket.
    fn drop(&mut self) {
        for task in [self.reader.take(), self.writer.take()].into_iter().flatten() {
            task.abort();
        }
    }
}

async fn read_loop(
    mut read: OwnedReadHalf,
    id: ConnectionId,
    generation: u64,
    events: mpsc::Sender<ConnEvent>,
) {
    let error = loop {
        let mut buf = vec![0u8; READ_CHUNK];
        match read.read(&mut buf).await {
            Ok(0) => break None,
            Ok(n) => {
                buf.truncate(n);
                let event = ConnEvent::Bytes {
                    id,
                    generation,
                    bytes: buf,
                };
                if events.send(event).await.is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => break Some(e),
        }
    };
    let _ = events
        .send(ConnEvent::Closed {
            id,
            generation,
            error,
        })
        .await;
}

/// Writes the queue out, counting bytes as the kernel takes them (so a half-written buffer
/// counts only its rest), and signals the peer task each time the queue falls below
/// [`LOW_WATER`] and when it is empty.
async fn write_loop(
    mut write: OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    shared: Arc<OutQueue>,
) {
    while let Some(bytes) = queue.recv().await {
        let mut rest = &bytes[..];
        while !rest.is_empty() {
            let n = match write.write(rest).await {
                Ok(0) => return,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The reader sees the broken connection too and reports it.
                Err(_) => return,
            };
            rest = &rest[n..];
            let before = queued.fetch_sub(n, Ordering::Relaxed);
            // Below the low water there is room for more; at zero the status says so.
            if (before >= LOW_WATER && before - n < LOW_WATER) || before == n {
                shared.writable.notify_one();
            }
        }
    }
    let _ = write.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_start_of_one_open_may_come_before_gtsm() {
        use crate::bgp::wire::{Message, encode};
        let open = encode(
            &Message::Open(crate::bgp::wire::Open {
                my_as: 65000,
                hold_time: 90,
                bgp_id: std::net::Ipv4Addr::new(10, 0, 0, 1),
                capabilities: crate::bgp::wire::Capabilities::default(),
            }),
            EncodeContext::default(),
        )
        .unwrap();
        let keepalive = encode(&Message::Keepalive, EncodeContext::default()).unwrap();
        assert!(unchecked_bytes_acceptable(&[]));
        assert!(unchecked_bytes_acceptable(&open[..10]), "a partial header");
        assert!(unchecked_bytes_acceptable(&open[..20]), "a partial OPEN");
        assert!(unchecked_bytes_acceptable(&open));
        let pipelined = [open.as_slice(), keepalive.as_slice()].concat();
        assert!(
            !unchecked_bytes_acceptable(&pipelined),
            "OPEN and KEEPALIVE at once"
        );
        assert!(!unchecked_bytes_acceptable(&keepalive), "a KEEPALIVE first");
    }
}
