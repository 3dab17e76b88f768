//! Addresses and routes of one link, recorded with every attribute that makes them what they
//! are, so that they can be moved to another link and back exactly: a provider network's NIC
//! joining its OVS bridge (Kube-OVN `transferAddrsAndRoutes` / `removeProviderNic`) and leaving
//! it again. [`Route`](crate::Route) only knows the main table's unicast routes; a NIC can carry
//! routes in other tables (policy routing), with a protocol (`dhcp`, `static`), a scope, the
//! `onlink` flag, a preferred source and per-route metrics such as `mtu`, and losing any of
//! those on the way back would not give the NIC back "as it was".
//!
//! Both records serialize (serde) because the node daemon keeps a copy in the bridge's
//! `external_ids` to undo a move interrupted by a crash.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressMessage, AddressScope};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteMetric, RouteProtocol,
    RouteScope, RouteType,
};
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::link::Netlink;
use crate::route::address;

/// Address flags a caller may set (`IFA_F_*`); the rest (`permanent`, `tentative`,
/// `deprecated`, `dadfailed`, `secondary`, `optimistic`) are states the kernel keeps.
const SETTABLE_ADDRESS_FLAGS: u32 = 0x02 | 0x10 | 0x100 | 0x200 | 0x400 | 0x800;
const IFA_F_NODAD: u32 = 0x02;

/// `RTPROT_KERNEL`: routes the kernel makes for an address (its prefix route, the local table's
/// entries); they follow the address and are never moved by hand.
const PROTO_KERNEL: u8 = 2;

/// One address of a link, with what `ip addr add` could have set on it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct AddrRecord {
    /// Address and prefix length (`IFA_LOCAL` for IPv4, `IFA_ADDRESS` for IPv6).
    pub net: IpNet,
    /// The peer of a point-to-point address (`ip addr add A peer P`), when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<IpAddr>,
    /// IPv4 broadcast address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<Ipv4Addr>,
    /// `IFA_F_*` flags the caller set (`nodad`, `noprefixroute`, `mngtmpaddr`, ...).
    #[serde(default)]
    pub flags: u32,
    /// `RT_SCOPE_*` (0 global, 253 link, 254 host).
    #[serde(default)]
    pub scope: u8,
    /// IPv4 label (`eth1:0`); a label that names the old link is rewritten on the new one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Metric of the prefix route the kernel makes for the address (`ip addr add ... metric`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_metric: Option<u32>,
}

/// Per-route metrics (`RTA_METRICS`) we carry across; the others are TCP tuning no NIC we move
/// has been seen with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RouteMetrics {
    /// `mtu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtu: Option<u32>,
    /// `advmss`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advmss: Option<u32>,
    /// `hoplimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hoplimit: Option<u32>,
    /// `lock` bits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<u32>,
}

impl RouteMetrics {
    fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// One route out of a link, in any table, without the link (it is replayed onto another).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RouteRecord {
    /// Destination.
    pub dst: IpNet,
    /// Routing table id (`RTA_TABLE`; 254 main).
    pub table: u32,
    /// `RTPROT_*` (3 boot, 4 static, 16 dhcp ...).
    pub protocol: u8,
    /// `RT_SCOPE_*`.
    pub scope: u8,
    /// `RTN_*` (1 unicast, 6 blackhole is never on a link, ...).
    pub kind: u8,
    /// TOS selector.
    #[serde(default)]
    pub tos: u8,
    /// Next hop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
    /// Preferred source (`src`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefsrc: Option<IpAddr>,
    /// `metric` (`RTA_PRIORITY`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<u32>,
    /// `onlink`: the gateway is on the link whatever the link's prefixes say.
    #[serde(default)]
    pub onlink: bool,
    /// `RTA_METRICS`.
    #[serde(default, skip_serializing_if = "RouteMetrics::is_empty")]
    pub metrics: RouteMetrics,
}

impl RouteRecord {
    /// Whether the kernel made this route for an address of the link (`proto kernel`, or a
    /// local/broadcast/multicast entry): it comes and goes with the address and is not moved.
    pub fn kernel_made(&self) -> bool {
        self.protocol == PROTO_KERNEL || self.kind != u8::from(RouteType::Unicast)
    }

    /// Scope order for replaying: host routes first, then link routes, then the ones through a
    /// gateway (which need a link route to their gateway unless `onlink`), as Kube-OVN's
    /// `routeScopeOrders`.
    pub fn replay_rank(&self) -> u8 {
        match RouteScope::from(self.scope) {
            RouteScope::Host => 0,
            RouteScope::Link => 1,
            _ => 2,
        }
    }
}

impl std::fmt::Display for RouteRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.dst)?;
        if let Some(gw) = self.gateway {
            write!(f, " via {gw}")?;
        }
        write!(
            f,
            " table {} proto {} scope {}",
            self.table, self.protocol, self.scope
        )?;
        if let Some(m) = self.metric {
            write!(f, " metric {m}")?;
        }
        if self.onlink {
            f.write_str(" onlink")?;
        }
        Ok(())
    }
}

/// Whether `ip` is link-local (169.254.0.0/16, fe80::/10): Kube-OVN leaves those on the NIC,
/// each link has its own.
pub fn is_link_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

impl Netlink {
    /// Every address of link `index`, recorded.
    pub async fn addr_records(&self, index: u32) -> Result<Vec<AddrRecord>> {
        let _turn = self.dump_turn().await;
        let messages: Vec<AddressMessage> = self
            .handle
            .address()
            .get()
            .set_link_index_filter(index)
            .execute()
            .try_collect()
            .await
            .map_err(self.fail(format!("list addresses of link #{index}")))?;
        Ok(messages
            .iter()
            .filter(|m| m.header.index == index)
            .filter_map(parse_address)
            .collect())
    }

    /// Adds `addr` to link `index` (replacing one that is there). `label` renames an IPv4 label
    /// for the new link; `nodad` adds `IFA_F_NODAD` (an address we move is already ours, and a
    /// tentative one could not be a source for the seconds DAD takes).
    pub async fn add_addr_record(
        &self,
        index: u32,
        addr: &AddrRecord,
        label: Option<&str>,
        nodad: bool,
    ) -> Result<()> {
        let mut request = self
            .handle
            .address()
            .add(index, addr.net.addr(), addr.net.prefix_len())
            .replace();
        let message = request.message_mut();
        message.header.scope = AddressScope::from(addr.scope);
        let attrs = &mut message.attributes;
        if let Some(peer) = addr.peer {
            // `add` put IFA_ADDRESS = IFA_LOCAL = the address; a peer replaces IFA_ADDRESS.
            attrs.retain(|a| !matches!(a, AddressAttribute::Address(_)));
            attrs.push(AddressAttribute::Address(peer));
        }
        attrs.retain(|a| !matches!(a, AddressAttribute::Broadcast(_)));
        if let Some(brd) = addr.broadcast {
            attrs.push(AddressAttribute::Broadcast(brd));
        }
        if let Some(label) = label {
            attrs.push(AddressAttribute::Label(label.to_owned()));
        }
        let flags = addr.flags | if nodad { IFA_F_NODAD } else { 0 };
        if flags != 0 {
            attrs.push(AddressAttribute::Flags(AddressFlags::from_bits_retain(flags)));
        }
        if let Some(metric) = addr.route_metric {
            attrs.push(AddressAttribute::RoutePriority(metric));
        }
        request
            .execute()
            .await
            .map_err(self.fail(format!("add address {} to link #{index}", addr.net)))
    }

    /// Every route out of link `index` in every table, both families, recorded. Multipath
    /// routes (no single output link) are not included.
    pub async fn route_records(&self, index: u32) -> Result<Vec<RouteRecord>> {
        let mut out = Vec::new();
        for ipv6 in [false, true] {
            out.extend(
                self.route_messages(ipv6)
                    .await?
                    .iter()
                    .filter(|m| {
                        m.attributes
                            .iter()
                            .any(|a| matches!(a, RouteAttribute::Oif(i) if *i == index))
                    })
                    .filter_map(parse_route),
            );
        }
        Ok(out)
    }

    /// Adds (or replaces) `route` out of link `index`.
    pub async fn replace_route_record(&self, route: &RouteRecord, index: u32) -> Result<()> {
        self.handle
            .route()
            .add(route_message(route, index))
            .replace()
            .execute()
            .await
            .map_err(self.fail(format!("replace route {route} dev #{index}")))
    }

    /// Deletes `route` out of link `index`; `Ok(false)` when it was not there.
    pub async fn delete_route_record(&self, route: &RouteRecord, index: u32) -> Result<bool> {
        let result = self
            .handle
            .route()
            .del(route_message(route, index))
            .execute()
            .await;
        let outcome = self.deleted(format!("delete route {route} dev #{index}"), result);
        match outcome {
            // ESRCH and ENOENT are "not there" already; so is a gateway no longer reachable.
            Err(e) if e.errno() == Some(libc::ENETUNREACH) => Ok(false),
            other => other,
        }
    }
}

impl Netlink {
    /// The neighbours learnt on link `index` (reachable, stale, delay or probe: not the
    /// permanent, no-ARP, failed or unresolved ones).
    pub async fn learnt_neighbours(&self, index: u32) -> Result<Vec<IpAddr>> {
        let _turn = self.dump_turn().await;
        let messages: Vec<NeighbourMessage> = self
            .handle
            .neighbours()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(self.fail("list neighbours"))?;
        Ok(messages
            .iter()
            .filter(|m| m.header.ifindex == index)
            .filter(|m| {
                matches!(
                    m.header.state,
                    NeighbourState::Reachable
                        | NeighbourState::Stale
                        | NeighbourState::Delay
                        | NeighbourState::Probe
                )
            })
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
                    _ => None,
                })
            })
            .collect())
    }

    /// Forgets neighbour `ip` on link `index`, so that the next packet to it asks again
    /// (a broadcast ARP request or a multicast neighbour solicitation, which also tells the
    /// neighbour our address's current MAC); `Ok(false)` when there was no entry.
    pub async fn forget_neighbour(&self, index: u32, ip: IpAddr) -> Result<bool> {
        let mut message = NeighbourMessage::default();
        message.header.family = if ip.is_ipv6() {
            AddressFamily::Inet6
        } else {
            AddressFamily::Inet
        };
        message.header.ifindex = index;
        message.attributes.push(NeighbourAttribute::Destination(match ip {
            IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
            IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
        }));
        let result = self.handle.neighbours().del(message).execute().await;
        self.deleted(format!("forget neighbour {ip} on link #{index}"), result)
    }
}

fn parse_address(message: &AddressMessage) -> Option<AddrRecord> {
    let mut local = None;
    let mut address = None;
    let mut broadcast = None;
    let mut label = None;
    let mut flags = None;
    let mut route_metric = None;
    for attribute in &message.attributes {
        match attribute {
            AddressAttribute::Local(ip) => local = Some(*ip),
            AddressAttribute::Address(ip) => address = Some(*ip),
            AddressAttribute::Broadcast(ip) => broadcast = Some(*ip),
            AddressAttribute::Label(l) => label = Some(l.clone()),
            AddressAttribute::Flags(f) => flags = Some(f.bits()),
            AddressAttribute::RoutePriority(m) => route_metric = Some(*m),
            _ => {}
        }
    }
    // IPv4 gives IFA_LOCAL (ours) and IFA_ADDRESS (the peer, or the same); IPv6 only
    // IFA_ADDRESS unless a peer is set.
    let ip = local.or(address)?;
    let peer = address.filter(|a| Some(*a) != local && local.is_some());
    let flags = flags.unwrap_or(u32::from(message.header.flags.bits())) & SETTABLE_ADDRESS_FLAGS;
    Some(AddrRecord {
        net: IpNet::new(ip, message.header.prefix_len).ok()?,
        peer,
        broadcast,
        flags,
        scope: u8::from(message.header.scope),
        label,
        route_metric,
    })
}

fn parse_route(message: &RouteMessage) -> Option<RouteRecord> {
    let header = &message.header;
    let mut dst = None;
    let mut gateway = None;
    let mut prefsrc = None;
    let mut metric = None;
    let mut table = u32::from(header.table);
    let mut metrics = RouteMetrics::default();
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Destination(a) => dst = address(a),
            RouteAttribute::Gateway(a) => gateway = address(a),
            RouteAttribute::Via(rtnetlink::packet_route::route::RouteVia::Inet6(v6)) => {
                gateway = Some(IpAddr::V6(*v6));
            }
            RouteAttribute::PrefSource(a) => prefsrc = address(a),
            RouteAttribute::Priority(m) => metric = Some(*m),
            RouteAttribute::Table(t) => table = *t,
            RouteAttribute::MultiPath(_) => return None,
            RouteAttribute::Metrics(list) => {
                for m in list {
                    match m {
                        RouteMetric::Mtu(v) => metrics.mtu = Some(*v),
                        RouteMetric::Advmss(v) => metrics.advmss = Some(*v),
                        RouteMetric::Hoplimit(v) => metrics.hoplimit = Some(*v),
                        RouteMetric::Lock(v) => metrics.lock = Some(*v),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let dst = dst.unwrap_or(match header.address_family {
        AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    });
    Some(RouteRecord {
        dst: IpNet::new(dst, header.destination_prefix_length).ok()?,
        table,
        protocol: u8::from(header.protocol),
        scope: u8::from(header.scope),
        kind: u8::from(header.kind),
        tos: header.tos,
        gateway,
        prefsrc,
        metric,
        onlink: header.flags.contains(RouteFlags::Onlink),
        metrics,
    })
}

fn route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(v4) => RouteAddress::Inet(v4),
        IpAddr::V6(v6) => RouteAddress::Inet6(v6),
    }
}

fn route_message(route: &RouteRecord, index: u32) -> RouteMessage {
    let mut message = RouteMessage::default();
    let header = &mut message.header;
    header.address_family = if route.dst.addr().is_ipv6() {
        AddressFamily::Inet6
    } else {
        AddressFamily::Inet
    };
    header.destination_prefix_length = route.dst.prefix_len();
    header.tos = route.tos;
    // Tables above 255 only fit RTA_TABLE; the header then says RT_TABLE_UNSPEC (as iproute2).
    header.table = u8::try_from(route.table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
    header.protocol = RouteProtocol::from(route.protocol);
    header.scope = RouteScope::from(route.scope);
    header.kind = RouteType::from(route.kind);
    if route.onlink {
        header.flags = RouteFlags::Onlink;
    }
    let attrs = &mut message.attributes;
    attrs.push(RouteAttribute::Table(route.table));
    if route.dst.prefix_len() > 0 {
        attrs.push(RouteAttribute::Destination(route_address(route.dst.network())));
    }
    attrs.push(RouteAttribute::Oif(index));
    if let Some(gw) = route.gateway {
        attrs.push(RouteAttribute::Gateway(route_address(gw)));
    }
    if let Some(src) = route.prefsrc {
        attrs.push(RouteAttribute::PrefSource(route_address(src)));
    }
    if let Some(metric) = route.metric {
        attrs.push(RouteAttribute::Priority(metric));
    }
    let m = &route.metrics;
    let metrics: Vec<RouteMetric> = [
        m.lock.map(RouteMetric::Lock),
        m.mtu.map(RouteMetric::Mtu),
        m.advmss.map(RouteMetric::Advmss),
        m.hoplimit.map(RouteMetric::Hoplimit),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !metrics.is_empty() {
        attrs.push(RouteAttribute::Metrics(metrics));
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_local_is_left_alone() {
        assert!(is_link_local("169.254.3.4".parse().unwrap()));
        assert!(is_link_local("fe80::1".parse().unwrap()));
        assert!(!is_link_local("172.31.0.11".parse().unwrap()));
        assert!(!is_link_local("fd00::1".parse().unwrap()));
    }

    #[test]
    fn records_round_trip_through_json() {
        let route = RouteRecord {
            dst: "0.0.0.0/0".parse().unwrap(),
            table: 1000,
            protocol: 4,
            scope: 0,
            kind: 1,
            tos: 0,
            gateway: Some("172.31.0.1".parse().unwrap()),
            prefsrc: Some("172.31.0.11".parse().unwrap()),
            metric: Some(100),
            onlink: true,
            metrics: RouteMetrics {
                mtu: Some(1400),
                ..RouteMetrics::default()
            },
        };
        let text = serde_json::to_string(&route).unwrap();
        assert_eq!(serde_json::from_str::<RouteRecord>(&text).unwrap(), route);
        let addr = AddrRecord {
            net: "172.31.0.11/24".parse().unwrap(),
            peer: None,
            broadcast: Some("172.31.0.255".parse().unwrap()),
            flags: 0x200,
            scope: 0,
            label: Some("eth1".into()),
            route_metric: None,
        };
        let text = serde_json::to_string(&addr).unwrap();
        assert_eq!(serde_json::from_str::<AddrRecord>(&text).unwrap(), addr);
    }

    #[test]
    fn scope_order_host_link_universe() {
        let mut r = RouteRecord {
            dst: "10.0.0.0/8".parse().unwrap(),
            table: 254,
            protocol: 4,
            scope: 0,
            kind: 1,
            tos: 0,
            gateway: None,
            prefsrc: None,
            metric: None,
            onlink: false,
            metrics: RouteMetrics::default(),
        };
        assert_eq!(r.replay_rank(), 2);
        r.scope = 253;
        assert_eq!(r.replay_rank(), 1);
        r.scope = 254;
        assert_eq!(r.replay_rank(), 0);
        assert!(!r.kernel_made());
        r.protocol = 2;
        assert!(r.kernel_made());
    }
}
