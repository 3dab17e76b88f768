//! One TCP connection of a peer task: the socket set up before `connect()` (source address, TTL,
//! MD5 key), a reader task that forwards raw bytes to the peer task, and a writer task that
//! drains a queue of encoded messages.
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

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;
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
pub(crate) fn set_ttl(socket: &SockRef<'_>, is_v4: bool, ttl: u8) -> io::Result<()> {
    if is_v4 {
        socket.set_ttl_v4(u32::from(ttl))
    } else {
        socket.set_unicast_hops_v6(u32::from(ttl))
    }
}

/// Opens our connection to the peer: the source address, TTL and MD5 key are set before
/// `connect()`, since the SYN must already carry them (RFC 2385 §2: every segment is signed).
pub(crate) async fn connect(config: &PeerConfig) -> io::Result<TcpStream> {
    let remote = SocketAddr::new(config.address, config.port);
    let domain = if remote.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
    socket.set_nonblocking(true)?;
    if let Some(ttl) = config.effective_ttl() {
        set_ttl(&SockRef::from(&socket), remote.is_ipv4(), ttl)?;
    }
    if let Some(local) = config.local_address {
        socket.bind(&SocketAddr::new(local, 0).into())?;
    }
    if let Some(key) = &config.md5_key {
        kube_ovn_dataplane::tcp_md5::set_md5_key(socket.as_fd(), remote.ip(), key)
            .map_err(io::Error::other)?;
    }
    let socket = tokio::net::TcpSocket::from_std_stream(socket.into());
    let stream = socket.connect(remote).await?;
    stream.set_nodelay(true)?;
    Ok(stream)
}

/// Normalises an IPv4-mapped IPv6 address (a v4 peer on a dual-stack listener) to IPv4.
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
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
    out_queue: Arc<AtomicUsize>,
    reader: Option<JoinHandle<()>>,
    writer: Option<JoinHandle<()>>,
}

impl Conn {
    pub fn start(
        stream: TcpStream,
        id: ConnectionId,
        generation: u64,
        events: mpsc::Sender<ConnEvent>,
    ) -> Conn {
        let local = stream.local_addr().ok();
        let (read, write) = stream.into_split();
        let (queue, rx) = mpsc::unbounded_channel();
        let out_queue = Arc::new(AtomicUsize::new(0));
        let reader = tokio::spawn(read_loop(read, id, generation, events));
        let writer = tokio::spawn(write_loop(write, rx, out_queue.clone()));
        Conn {
            generation,
            local,
            splitter: FrameSplitter::new(),
            decode: DecodeContext::default(),
            encode: EncodeContext::default(),
            queue: Some(queue),
            out_queue,
            reader: Some(reader),
            writer: Some(writer),
        }
    }

    /// Queues bytes for the writer task.
    pub fn send(&self, bytes: Vec<u8>) {
        if let Some(queue) = &self.queue {
            self.out_queue.fetch_add(bytes.len(), Ordering::Relaxed);
            // The writer is gone only after a write error; the reader reports the close.
            let _ = queue.send(bytes);
        }
    }

    pub fn out_queue_bytes(&self) -> usize {
        self.out_queue.load(Ordering::Relaxed)
    }

    /// Flushes what is queued, then sends FIN; the reader drains for a moment so the close
    /// is a FIN and not a reset, then both tasks end.
    pub fn close(mut self) {
        self.queue = None;
        if let Some(reader) = self.reader.take() {
            tokio::spawn(async move {
                tokio::time::sleep(LINGER_AFTER_CLOSE).await;
                reader.abort();
            });
        }
        // The writer ends by itself once the queue is drained.
        self.writer = None;
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

async fn write_loop(
    mut write: OwnedWriteHalf,
    mut queue: mpsc::UnboundedReceiver<Vec<u8>>,
    out_queue: Arc<AtomicUsize>,
) {
    while let Some(bytes) = queue.recv().await {
        let len = bytes.len();
        let result = write.write_all(&bytes).await;
        out_queue.fetch_sub(len, Ordering::Relaxed);
        if result.is_err() {
            // The reader sees the broken connection too and reports it.
            return;
        }
    }
    let _ = write.shutdown().await;
}
