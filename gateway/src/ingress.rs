//! Ingress to the default VPC's LoadBalancer (and allowed external) IPs, matched by the
//! Service's ports, not the whole address.
//!
//! A plain route (`<lb ip>/32 via <join gateway> dev ovn0`) takes every packet to the address
//! into OVN, whatever its port: were the address the API server's or a BGP peer's, the node
//! would lose it (the kube-proxy form of this is CVE-2020-8554, which matches the Service's
//! ports only). So the node matches `(address, protocol, port)` of each Service port in
//! nftables and marks what matches with [`LB_INGRESS_MARK`] (prerouting for forwarded traffic,
//! a `route` chain on output for the node's own, which re-routes when the mark changes); an
//! `ip rule fwmark` sends marked packets to table [`LB_INGRESS_TABLE`], whose one route is the
//! join gateway of the family through `ovn0`. Everything else to that address takes the node's
//! normal routing. In postrouting, marked packets leaving by `ovn0` are masqueraded to the
//! join address, so the backend's reply comes back through the node the client entered by
//! (the conntrack entry there undoes the NAT). Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::ruleset::Family;

/// The mark of packets bound for a Service port through `ovn0`: one bit no one else uses
/// (kube-proxy has 0x4000 and 0x8000, Kube-OVN 0x80000 and 0x90001/0x90002, Calico and Cilium
/// the high bits and 0xf00), matched and set under its own mask so other marks stay.
pub const LB_INGRESS_MARK: u32 = 0x0040_0000;
/// The routing table of marked packets (`ip route show table 4000150`): far above the small
/// numbers operators give `policyRoutingTableID`, and refused there ([`crate::plan`]).
pub const LB_INGRESS_TABLE: u32 = 4_000_150;
/// The rule's priority: after the local table (0), so the node's own addresses stay local,
/// and before `main` (32766).
pub const LB_INGRESS_PRIORITY: u32 = 150;

/// A transport protocol of a Service port (api's, shared with the controller's load balancers).
pub use kube_ovn_api::service_protocol::ServiceProtocol as Protocol;

/// One Service port on one ingress address: what reaches `ovn0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IngressPort {
    pub address: IpAddr,
    pub protocol: Protocol,
    pub port: u16,
}

pub(crate) fn mark_text() -> String {
    format!("0x{LB_INGRESS_MARK:08x}")
}

/// The marking rules of `family`: one per (address, protocol), with its ports as an anonymous
/// set, in address order. Packets that came out of `ovn0` are never marked (they are the
/// replies and the pods' own traffic).
pub(crate) fn marking_rules(family: Family, ports: &[IngressPort]) -> Vec<String> {
    let mut grouped: BTreeMap<(IpAddr, Protocol), Vec<u16>> = BTreeMap::new();
    for p in ports.iter().filter(|p| Family::of(&p.address) == family) {
        grouped.entry((p.address, p.protocol)).or_default().push(p.port);
    }
    let mark = mark_text();
    grouped
        .into_iter()
        .map(|((address, protocol), mut list)| {
            list.sort_unstable();
            list.dedup();
            let list: Vec<String> = list.iter().map(u16::to_string).collect();
            format!(
                "iifname != \"ovn0\" {} daddr {address} {protocol} dport {{ {} }} meta mark set meta mark | {mark}",
                family.nft(),
                list.join(", ")
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(address: &str, protocol: Protocol, port: u16) -> IngressPort {
        IngressPort {
            address: address.parse().unwrap(),
            protocol,
            port,
        }
    }

    #[test]
    fn one_rule_per_address_and_protocol_with_only_the_services_ports() {
        let ports = [
            port("203.0.113.10", Protocol::Tcp, 443),
            port("203.0.113.10", Protocol::Tcp, 80),
            port("203.0.113.10", Protocol::Udp, 53),
            port("203.0.113.10", Protocol::Tcp, 80),
            port("198.51.100.1", Protocol::Sctp, 9),
            port("2001:db8::10", Protocol::Tcp, 80),
        ];
        assert_eq!(
            marking_rules(Family::V4, &ports),
            [
                "iifname != \"ovn0\" ip daddr 198.51.100.1 sctp dport { 9 } meta mark set meta mark | 0x00400000",
                "iifname != \"ovn0\" ip daddr 203.0.113.10 tcp dport { 80, 443 } meta mark set meta mark | 0x00400000",
                "iifname != \"ovn0\" ip daddr 203.0.113.10 udp dport { 53 } meta mark set meta mark | 0x00400000",
            ]
        );
        assert_eq!(
            marking_rules(Family::V6, &ports),
            [
                "iifname != \"ovn0\" ip6 daddr 2001:db8::10 tcp dport { 80 } meta mark set meta mark | 0x00400000"
            ]
        );
        assert!(marking_rules(Family::V6, &ports[..5]).is_empty());
    }
}
