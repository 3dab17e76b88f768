//! Connection collision resolution (RFC 4271 §6.8): when we and the peer connect to each other
//! at the same time, both sides must keep the same one of the two TCP connections, so both
//! decide from the same two numbers.

use std::net::Ipv4Addr;

/// Which side opened a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConnectionId {
    /// We connected to the peer.
    Outbound,
    /// The peer connected to us.
    Inbound,
}

impl ConnectionId {
    #[must_use]
    pub fn other(self) -> ConnectionId {
        match self {
            ConnectionId::Outbound => ConnectionId::Inbound,
            ConnectionId::Inbound => ConnectionId::Outbound,
        }
    }
}

/// The connection to keep when both are open: the one opened by the speaker with the higher BGP
/// identifier (compared as 4-octet unsigned integers, RFC 4271 §6.8). With equal identifiers,
/// possible between ASes (RFC 6286 §2.3), the one opened by the speaker with the larger AS.
pub fn collision_winner(local_id: Ipv4Addr, local_as: u32, peer_id: Ipv4Addr, peer_as: u32) -> ConnectionId {
    let local_wins = match u32::from(local_id).cmp(&u32::from(peer_id)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => local_as > peer_as,
    };
    if local_wins {
        ConnectionId::Outbound
    } else {
        ConnectionId::Inbound
    }
}
