//! BGP unnumbered: the peer on an interface is whoever sends IPv6 Router Advertisements there
//! (RFC 4861 §4.2), as FRR's `neighbor <interface> interface` has it; the speaker sends its own
//! on the interface so the peer learns our link-local address the same way (FRR's zebra makes
//! an unnumbered neighbour only of a link-local address it heard an RA from). The session is
//! then an ordinary one to `fe80::…%interface` with extended next hop (RFC 8950) for IPv4.
//!
//! Pure here: building a Router Solicitation / Advertisement, checking a received one
//! ([`router_advertisement_source`]). The I/O ([`Neighbour::start`]) is a raw ICMPv6 socket
//! bound to the interface: a solicitation at start (a router answers at once, RFC 4861 §6.2.6)
//! and until a router is heard, our advertisement every period and in answer to a
//! solicitation, and each received advertisement's source published as the neighbour. An
//! unnumbered link has one router at the other end: the last one heard is the peer, so a
//! peer that restarts with another link-local address (another MAC) is re-learnt from its
//! first advertisement.

use std::net::{Ipv6Addr, SocketAddrV6};
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

/// ICMPv6 types (RFC 4861 §4.1, §4.2).
const ROUTER_SOLICITATION: u8 = 133;
const ROUTER_ADVERTISEMENT: u8 = 134;
/// The fixed part of a Router Advertisement: type, code, checksum, hop limit, flags, router
/// lifetime, reachable time, retransmission timer.
const RA_LEN: usize = 16;
const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
const ALL_ROUTERS: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 2);
/// How often our advertisement goes out: FRR's interval on an unnumbered interface.
pub const ADVERTISEMENT_PERIOD: Duration = Duration::from_secs(10);

/// Our Router Advertisement: router lifetime 0, so a host on the link never takes us as its
/// default router (RFC 4861 §4.2: "not a default router"), no prefixes, no flags; it exists only
/// to say "a BGP speaker is at this link-local address". Checksum 0: the kernel computes it.
pub fn router_advertisement() -> [u8; RA_LEN] {
    let mut ra = [0u8; RA_LEN];
    ra[0] = ROUTER_ADVERTISEMENT;
    // Cur Hop Limit 0: unspecified (we give hosts no advice).
    ra
}

/// A Router Solicitation (RFC 4861 §4.1): type, code, checksum, reserved.
pub fn router_solicitation() -> [u8; 8] {
    let mut rs = [0u8; 8];
    rs[0] = ROUTER_SOLICITATION;
    rs
}

/// What a received ICMPv6 message means to us.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A valid Router Advertisement from this link-local router.
    Router(Ipv6Addr),
    /// A Router Solicitation: answer with our advertisement.
    Solicitation,
    Other,
}

/// Classifies a received ICMPv6 message, with RFC 4861's validity checks (§6.1.2 for an RA,
/// §6.1.1 for an RS): hop limit 255 (it cannot have been forwarded, so it is from the link),
/// code 0, long enough; an advertisement's source must be link-local. A message that fails
/// them is [`Heard::Other`].
pub fn classify(message: &[u8], source: Ipv6Addr, hop_limit: Option<u8>) -> Heard {
    if hop_limit != Some(255) || message.get(1) != Some(&0) {
        return Heard::Other;
    }
    match message.first() {
        Some(&ROUTER_ADVERTISEMENT) if message.len() >= RA_LEN && source.is_unicast_link_local() => {
            Heard::Router(source)
        }
        Some(&ROUTER_SOLICITATION) if message.len() >= 8 => Heard::Solicitation,
        _ => Heard::Other,
    }
}

/// The router on one interface, as its advertisements say. Dropping it stops the task.
pub struct Neighbour {
    address: watch::Receiver<Option<Ipv6Addr>>,
    task: JoinHandle<()>,
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Neighbour {
    /// Starts soliciting and advertising on `interface` (in the calling thread's network
    /// namespace; must run inside a tokio runtime). Fails when the interface does not exist or
    /// the socket cannot be made.
    pub fn start(interface: &str, period: Duration) -> std::io::Result<Neighbour> {
        let index = super::conn::interface_index(interface)?;
        let fd = kube_ovn_dataplane::socket::icmpv6_on_device(interface).map_err(std::io::Error::other)?;
        // tokio has no raw socket type; its UDP one only registers the descriptor and calls
        // sendto / recvmsg, which is all a raw ICMPv6 socket needs.
        let socket = UdpSocket::from_std(std::net::UdpSocket::from(fd))?;
        let (tx, address) = watch::channel(None);
        let span = tracing::info_span!("unnumbered", interface = %interface);
        let task = tokio::spawn(tracing::Instrument::instrument(
            run(socket, index, period, tx),
            span,
        ));
        Ok(Neighbour { address, task })
    }

    /// The router's link-local address, `None` until one is heard.
    pub fn address(&self) -> Option<Ipv6Addr> {
        *self.address.borrow()
    }

    /// Wakes on every change of the router's address.
    pub fn watch(&self) -> watch::Receiver<Option<Ipv6Addr>> {
        self.address.clone()
    }
}

async fn send(socket: &UdpSocket, bytes: &[u8], to: Ipv6Addr, index: u32) {
    let to = SocketAddrV6::new(to, 0, 0, index);
    let sent = socket.send_to(bytes, to).await;
    if let Err(error) = sent {
        // The link may be down for a moment; the next period tries again.
        debug!(%error, %to, "ICMPv6 not sent");
    }
}

async fn run(socket: UdpSocket, index: u32, period: Duration, tx: watch::Sender<Option<Ipv6Addr>>) {
    let mut ticker = tokio::time::interval(period);
    let mut buf = [0u8; 1500];
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                send(&socket, &router_advertisement(), ALL_NODES, index).await;
                if tx.borrow().is_none() {
                    send(&socket, &router_solicitation(), ALL_ROUTERS, index).await;
                }
            }
            received = socket.async_io(tokio::io::Interest::READABLE, || {
                kube_ovn_dataplane::socket::recv_with_ttl(&socket, &mut buf)
            }) => {
                let datagram = match received {
                    Ok(d) => d,
                    Err(error) => {
                        warn!(%error, "reading ICMPv6");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let std::net::SocketAddr::V6(source) = datagram.source else { continue };
                match classify(&buf[..datagram.len], *source.ip(), datagram.ttl) {
                    Heard::Router(router) => {
                        let changed = tx.send_if_modified(|current| {
                            let changed = *current != Some(router);
                            *current = Some(router);
                            changed
                        });
                        if changed {
                            info!(%router, "unnumbered peer heard");
                            // Tell the new router about us now rather than a period later.
                            send(&socket, &router_advertisement(), ALL_NODES, index).await;
                        }
                    }
                    Heard::Solicitation => {
                        send(&socket, &router_advertisement(), ALL_NODES, index).await;
                    }
                    Heard::Other => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_link_local_advertisement_with_hop_limit_255_names_the_peer() {
        let ll: Ipv6Addr = "fe80::1:2".parse().unwrap();
        let ra = router_advertisement();
        assert_eq!(classify(&ra, ll, Some(255)), Heard::Router(ll));
        assert_eq!(classify(&ra, ll, Some(64)), Heard::Other, "forwarded");
        assert_eq!(classify(&ra, ll, None), Heard::Other, "hop limit unknown");
        assert_eq!(
            classify(&ra, "2001:db8::1".parse().unwrap(), Some(255)),
            Heard::Other,
            "global source (RFC 4861 §6.1.2)"
        );
        assert_eq!(classify(&ra[..8], ll, Some(255)), Heard::Other, "truncated");
        let mut bad_code = ra;
        bad_code[1] = 1;
        assert_eq!(classify(&bad_code, ll, Some(255)), Heard::Other);
        assert_eq!(
            classify(&router_solicitation(), ll, Some(255)),
            Heard::Solicitation
        );
        assert_eq!(classify(&[128, 0, 0, 0], ll, Some(255)), Heard::Other, "echo");
        assert_eq!(&ra[6..8], &[0, 0], "router lifetime 0: never a default router");
    }
}
