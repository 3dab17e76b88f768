//! Ingress to a Service port with `externalTrafficPolicy: Local`: the client's address kept,
//! only this node's endpoints.
//!
//! The `Cluster` path ([`crate::ingress`]) masquerades to the join address so that the reply of
//! whichever backend the join switch's load balancer picks comes back through this node; the
//! backend sees the join address. For `Local`, as kube-proxy does it, the node itself chooses
//! among its own ready endpoints and sends the packet straight to the pod:
//!
//! - `OVN-LB-INGRESS` (filter prerouting, `mangle - 1`): packets from outside `ovn0` to a
//!   `Local` port are marked with Kube-OVN's `externalTrafficPolicy: Local` mark 0x80000
//!   ([`LOCAL_MARK`]) when the node has a ready local endpoint, and dropped when it has none (a
//!   node without an endpoint is not announced, but a stale route or a static one may still
//!   bring traffic: it must not be delivered elsewhere nor routed back out);
//! - `OVN-LB-LOCAL` (nat prerouting, `dstnat - 1`): DNAT to one endpoint, `numgen random mod n`
//!   over a map of `address . port` when there are several. The packet, now to a pod address,
//!   takes the node's route to the pod's subnet through `ovn0`, with the client's source;
//! - `OVN-POSTROUTING`'s rules for the mark (Kube-OVN's, [`crate::plan`] rules 4 and 5): to a
//!   subnet with a distributed gateway, no NAT, so the pod sees the client; its reply leaves
//!   OVN through its own node's `ovn0` (the distributed gateway's reroute policy), which is this
//!   node, where conntrack undoes the DNAT (a reply never goes through the nat chains, so no
//!   masquerade rewrites it). To any other subnet (a centralized gateway, whose replies would
//!   leave through the gateway node, where no conntrack entry knows them), masquerade to the
//!   join address instead: the endpoint is still local but sees the join address, as Kube-OVN
//!   does for NodePort `Local` traffic to such subnets.
//!
//! The node's own connections to the address take the `Cluster` path (marked on output, through
//! the join switch's load balancer to any backend, as kube-proxy treats traffic from the node).
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use crate::ingress::{IngressPort, Protocol};
use crate::ruleset::Family;

/// Kube-OVN's mark of traffic to an `externalTrafficPolicy: Local` Service entering this node
/// (`OVN-POSTROUTING` keeps its source toward distributed subnets, masquerades it otherwise).
pub const LOCAL_MARK: u32 = 0x80000;

/// One Service port on one ingress address of a `Local` Service, with this node's ready
/// endpoints for it (`address:targetPort`); none: the port is dropped here.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LocalIngress {
    pub port: IngressPort,
    /// Sorted, each once.
    pub endpoints: Vec<SocketAddr>,
}

fn of_family(family: Family, local: &[LocalIngress]) -> impl Iterator<Item = &LocalIngress> {
    local
        .iter()
        .filter(move |l| Family::of(&l.port.address) == family)
}

/// The filter rules of `family`: per (address, protocol), the ports with local endpoints
/// marked, those without dropped.
pub(crate) fn filter_rules(family: Family, local: &[LocalIngress]) -> Vec<String> {
    let mut grouped: BTreeMap<(IpAddr, Protocol, bool), Vec<u16>> = BTreeMap::new();
    for l in of_family(family, local) {
        let key = (l.port.address, l.port.protocol, !l.endpoints.is_empty());
        grouped.entry(key).or_default().push(l.port.port);
    }
    let mark = format!("0x{LOCAL_MARK:08x}");
    grouped
        .into_iter()
        .map(|((address, protocol, served), mut ports)| {
            ports.sort_unstable();
            ports.dedup();
            let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
            let verdict = if served {
                format!("meta mark set meta mark | {mark}")
            } else {
                "drop".to_owned()
            };
            format!(
                "iifname != \"ovn0\" {} daddr {address} {protocol} dport {{ {} }} {verdict}",
                family.nft(),
                ports.join(", ")
            )
        })
        .collect()
}

/// The DNAT rules of `family`: one per port with local endpoints.
pub(crate) fn dnat_rules(family: Family, local: &[LocalIngress]) -> Vec<String> {
    let mut ports: Vec<&LocalIngress> = of_family(family, local)
        .filter(|l| !l.endpoints.is_empty())
        .collect();
    ports.sort();
    ports.dedup_by(|a, b| a.port == b.port);
    ports
        .into_iter()
        .map(|l| {
            let target = match l.endpoints.as_slice() {
                [one] => format!("to {one}"),
                many => {
                    let entries: Vec<String> = many
                        .iter()
                        .enumerate()
                        .map(|(i, e)| format!("{i} : {} . {}", e.ip(), e.port()))
                        .collect();
                    format!(
                        "{} to numgen random mod {} map {{ {} }}",
                        family.nft(),
                        many.len(),
                        entries.join(", ")
                    )
                }
            };
            format!(
                "iifname != \"ovn0\" {} daddr {} {} dport {} dnat {target}",
                family.nft(),
                l.port.address,
                l.port.protocol,
                l.port.port
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(address: &str, protocol: Protocol, port: u16, endpoints: &[&str]) -> LocalIngress {
        LocalIngress {
            port: IngressPort {
                address: address.parse().unwrap(),
                protocol,
                port,
            },
            endpoints: endpoints.iter().map(|e| e.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn ports_with_endpoints_are_marked_and_dnated_those_without_dropped() {
        let ports = [
            local(
                "203.0.113.10",
                Protocol::Tcp,
                80,
                &["10.16.0.5:8080", "10.16.0.6:8081"],
            ),
            local("203.0.113.10", Protocol::Tcp, 443, &["10.16.0.5:8443"]),
            local("203.0.113.10", Protocol::Udp, 53, &[]),
            local("2001:db8::10", Protocol::Tcp, 80, &["[fd00::5]:8080"]),
        ];
        assert_eq!(
            filter_rules(Family::V4, &ports),
            [
                "iifname != \"ovn0\" ip daddr 203.0.113.10 tcp dport { 80, 443 } meta mark set meta mark | 0x00080000",
                "iifname != \"ovn0\" ip daddr 203.0.113.10 udp dport { 53 } drop",
            ]
        );
        assert_eq!(
            dnat_rules(Family::V4, &ports),
            [
                "iifname != \"ovn0\" ip daddr 203.0.113.10 tcp dport 80 dnat ip to numgen random mod 2 map { 0 : 10.16.0.5 . 8080, 1 : 10.16.0.6 . 8081 }",
                "iifname != \"ovn0\" ip daddr 203.0.113.10 tcp dport 443 dnat to 10.16.0.5:8443",
            ]
        );
        assert_eq!(
            dnat_rules(Family::V6, &ports),
            ["iifname != \"ovn0\" ip6 daddr 2001:db8::10 tcp dport 80 dnat to [fd00::5]:8080"]
        );
        assert!(filter_rules(Family::V6, &ports[..3]).is_empty());
    }
}
