//! The next hop each peer gets: the source address the kernel uses toward it (Kube-OVN's
//! `getNextHopAttribute`), re-read every couple of seconds so a changed node address replaces
//! the announced next hop instead of leaving a stale one forever; `--node-ips` when that
//! source is the pod's own address (a speaker without host networking).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use kube_ovn_dataplane::Netlink;

use super::PeerSet;
use crate::config::Config;

const PERIOD: Duration = Duration::from_secs(2);

/// The next hop for a peer, given the kernel's source toward it.
pub fn choose(
    source: Option<IpAddr>,
    pinned: Option<IpAddr>,
    pod_ips: &[IpAddr],
    node_ips: &[IpAddr],
) -> Option<IpAddr> {
    let chosen = pinned.or(source)?;
    if pod_ips.contains(&chosen)
        && let Some(node) = node_ips.iter().find(|n| n.is_ipv4() == chosen.is_ipv4())
    {
        return Some(*node);
    }
    Some(chosen)
}

/// Follows the kernel's choice for every peer.
pub async fn task(config: Config, peers: Arc<PeerSet>, netlink: Netlink) {
    let mut current: std::collections::BTreeMap<IpAddr, Option<IpAddr>> = std::collections::BTreeMap::new();
    loop {
        let all = peers.all();
        current.retain(|a, _| all.iter().any(|p| p.plan.config.address == *a));
        for peer in all {
            let last = current.entry(peer.plan.config.address).or_default();
            let address = peer.plan.config.address;
            let next = if let Some(interface) = &peer.plan.config.interface {
                // An unnumbered peer: a global IPv6 address on its interface, if any, with our
                // link-local one after it (the session's own); else the link-local one alone.
                // (A route lookup toward `fe80::` may answer for another interface.)
                match global_v6_on(&netlink, interface).await {
                    Ok(global) => global.map(IpAddr::V6),
                    Err(e) => {
                        tracing::warn!(peer = %address, %interface, error = %e, "reading the interface's addresses failed");
                        continue;
                    }
                }
            } else {
                let source = match netlink.source_toward(address).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::warn!(peer = %address, error = %e, "route lookup toward the peer failed");
                        continue;
                    }
                };
                choose(
                    source,
                    peer.plan.config.local_address,
                    &config.pod_ips,
                    &config.node_ips,
                )
            };
            if next != *last {
                let (v4, v6) = match next {
                    Some(IpAddr::V4(a)) => (Some(a), None),
                    Some(IpAddr::V6(a)) => (None, Some(a)),
                    None => (None, None),
                };
                tracing::info!(peer = %address, next_hop = ?next, previous = ?last, "next hop");
                if peer.handle.set_local_addresses(v4, v6).is_ok() {
                    *last = next;
                }
            }
        }
        tokio::time::sleep(PERIOD).await;
    }
}

/// The first global (not link-local) IPv6 address on `interface`.
async fn global_v6_on(
    netlink: &Netlink,
    interface: &str,
) -> Result<Option<std::net::Ipv6Addr>, kube_ovn_dataplane::Error> {
    let Some(link) = netlink.link(interface).await? else {
        return Ok(None);
    };
    Ok(netlink
        .addresses(link.index)
        .await?
        .into_iter()
        .find_map(|net| match net.addr() {
            IpAddr::V6(a) if !a.is_unicast_link_local() && !a.is_loopback() => Some(a),
            _ => None,
        }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn pinned_then_kernel_then_node_ips_for_a_pod_address() {
        assert_eq!(choose(Some(ip("10.0.0.5")), None, &[], &[]), Some(ip("10.0.0.5")));
        assert_eq!(
            choose(Some(ip("10.0.0.5")), Some(ip("10.0.0.9")), &[], &[]),
            Some(ip("10.0.0.9"))
        );
        assert_eq!(choose(None, None, &[], &[]), None);
        let pod = [ip("10.16.0.7")];
        let nodes = [ip("fd00::1"), ip("192.168.1.10")];
        assert_eq!(
            choose(Some(ip("10.16.0.7")), None, &pod, &nodes),
            Some(ip("192.168.1.10"))
        );
        assert_eq!(
            choose(Some(ip("10.16.0.7")), None, &pod, &[ip("fd00::1")]),
            Some(ip("10.16.0.7")),
            "no node IP of that family"
        );
    }
}
