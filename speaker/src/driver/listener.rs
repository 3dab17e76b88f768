//! The shared BGP listener: accepts connections and hands each to the peer task configured for
//! its source address. A connection from an address that is not a peer, or outside the allowed
//! sources, or to a local address other than the one the peer is pinned to, is closed at once
//! without a word (there is no session yet to send a NOTIFICATION on).

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use ipnet::IpNet;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::command::Command;
use super::conn::canonical;

/// How many connections the kernel queues before we accept them.
const BACKLOG: u32 = 128;

/// The peers a connection can be handed to, by address.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    peers: Mutex<HashMap<IpAddr, Entry>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub commands: mpsc::UnboundedSender<Command>,
    pub local_address: Option<IpAddr>,
    /// A link-local peer's interface: its connections must come in there.
    pub interface: Option<String>,
    /// The device the peer's session is bound to: an accepted connection must be bound to it.
    pub bind_device: Option<String>,
}

impl Registry {
    pub fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Entry>> {
        self.peers.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Binds `addr` for BGP, inside `device` when given. `[::]` also takes IPv4 (as mapped
/// addresses), so one listener serves both families unless a specific address is given.
pub(crate) fn bind(addr: SocketAddr, device: Option<&str>) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        let socket = TcpSocket::new_v6()?;
        kube_ovn_dataplane::socket::set_v6_only(&socket, !addr.ip().is_unspecified())
            .map_err(io::Error::other)?;
        socket
    };
    if let Some(device) = device {
        kube_ovn_dataplane::socket::bind_to_device(&socket, device).map_err(io::Error::other)?;
    }
    // A restarted speaker must get its port back while the old connections sit in TIME_WAIT.
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

pub(crate) async fn accept_loop(
    listener: Arc<TcpListener>,
    registry: Arc<Registry>,
    allowed: Option<Vec<IpNet>>,
) {
    let local = listener.local_addr().ok();
    info!(?local, "BGP listener up");
    loop {
        match listener.accept().await {
            Ok((stream, remote)) => dispatch(stream, remote, &registry, allowed.as_deref()),
            Err(error) => {
                // Out of file descriptors and the like: back off instead of spinning.
                warn!(%error, ?local, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn dispatch(stream: TcpStream, remote: SocketAddr, registry: &Registry, allowed: Option<&[IpNet]>) {
    let source = canonical(remote.ip());
    if let Some(allowed) = allowed
        && !allowed.iter().any(|net| net.contains(&source))
    {
        info!(%source, "connection refused: source not in the allowed source addresses");
        return;
    }
    let Some(entry) = registry.lock().get(&source).cloned() else {
        info!(%source, "connection refused: not a configured peer");
        return;
    };
    let local = stream.local_addr().ok().map(|a| canonical(a.ip()));
    if let Some(pinned) = entry.local_address
        && local != Some(pinned)
    {
        info!(%source, ?local, %pinned, "connection refused: arrived on another local address than the peer's");
        return;
    }
    if let Err(why) = arrived_where_expected(&stream, remote, &entry) {
        info!(%source, "connection refused: {why}");
        // The peer's status says so: a session that never comes up should say why.
        let _ = entry.commands.send(Command::InboundRefused(why));
        return;
    }
    debug!(%source, "connection handed to its peer");
    if entry.commands.send(Command::Inbound(stream)).is_err() {
        debug!(%source, "the peer has stopped; connection closed");
    }
}

/// A link-local peer's connection must come from its interface (the same `fe80::` address on
/// another link is another router), and a device-bound peer's must be bound to that device:
/// the kernel binds an accepted socket to its VRF (with `net.ipv4.tcp_l3mdev_accept=1`) and to
/// a link-local peer's interface, and to nothing else, so a connection that came in through a
/// plain device cannot be told apart and is refused.
fn arrived_where_expected(stream: &TcpStream, remote: SocketAddr, entry: &Entry) -> Result<(), String> {
    if let (Some(interface), SocketAddr::V6(v6)) = (&entry.interface, remote) {
        let expected = super::conn::interface_index(interface).map_err(|e| e.to_string())?;
        if v6.scope_id() != expected {
            return Err(format!(
                "came in on interface index {}, not on {interface} ({expected})",
                v6.scope_id()
            ));
        }
    }
    if let Some(device) = &entry.bind_device {
        let bound = kube_ovn_dataplane::socket::bound_device(stream).map_err(|e| e.to_string())?;
        if bound.as_deref() != Some(device.as_str()) {
            return Err(format!(
                "the peer's session is bound to {device}, and the kernel bound this connection to {}",
                bound.as_deref().unwrap_or("no device")
            ));
        }
    }
    Ok(())
}
