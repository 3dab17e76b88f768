//! What a [`super::PeerHandle`] (or the listener) asks of the peer task, and how a burst of
//! such commands is thinned before it is applied.

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use tokio::net::TcpStream;

use crate::bgp::fsm::StopReason;
use crate::bgp::rib_out::RouteAttributes;

/// What a [`super::PeerHandle`] (or the listener) asks of the peer task.
#[derive(Debug)]
pub(crate) enum Command {
    Announce(Vec<(IpNet, RouteAttributes)>),
    Withdraw(Vec<IpNet>),
    ReplaceAll(Vec<(IpNet, RouteAttributes)>),
    SetReady,
    SetLocalAddresses(Option<Ipv4Addr>, Option<Ipv6Addr>),
    Inbound(TcpStream),
    /// The listener closed a connection from the peer's address: why, for its `last_error`.
    InboundRefused(String),
    BfdDown,
    BfdUp,
    Reset,
    Shutdown(StopReason),
}

/// The commands of a burst in order, without the route changes a later full replacement makes
/// moot.
pub(crate) fn superseded_dropped(burst: Vec<Command>) -> impl Iterator<Item = Command> {
    let last_replace = burst
        .iter()
        .rposition(|c| matches!(c, Command::ReplaceAll(_)))
        .unwrap_or(0);
    burst.into_iter().enumerate().filter_map(move |(index, command)| {
        let route_change = matches!(
            command,
            Command::Announce(_) | Command::Withdraw(_) | Command::ReplaceAll(_)
        );
        (index >= last_replace || !route_change).then_some(command)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(burst: Vec<Command>) -> Vec<&'static str> {
        superseded_dropped(burst)
            .map(|c| match c {
                Command::Announce(_) => "announce",
                Command::Withdraw(_) => "withdraw",
                Command::ReplaceAll(_) => "replace",
                Command::SetReady => "ready",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn a_full_replacement_makes_earlier_route_changes_moot() {
        let burst = vec![
            Command::Announce(vec![]),
            Command::ReplaceAll(vec![]),
            Command::SetReady,
            Command::Withdraw(vec![]),
            Command::ReplaceAll(vec![]),
            Command::Announce(vec![]),
        ];
        assert_eq!(kinds(burst), ["ready", "replace", "announce"]);
        let no_replacement = vec![Command::Announce(vec![]), Command::Withdraw(vec![])];
        assert_eq!(kinds(no_replacement), ["announce", "withdraw"]);
    }
}
