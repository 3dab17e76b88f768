//! Addresses and routes over rtnetlink (main table only: that is all the node and pods use).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use futures::TryStreamExt;
use ipnet::IpNet;
use rtnetlink::RouteMessageBuilder;
use rtnetlink::packet_route::AddressFamily;
use rtnetlink::packet_route::address::{AddressAttribute, AddressFlags, AddressMessage};
use rtnetlink::packet_route::route::{
    RouteAddress, RouteAttribute, RouteMessage, RouteProtocol, RouteScope, RouteType, RouteVia,
};

use crate::error::{Error, Result};
use crate::link::Netlink;

/// A unicast route in the main table.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Route {
    /// Destination (`0.0.0.0/0` for a default route).
    pub dst: IpNet,
    /// Next hop; `None` for a link route.
    pub gateway: Option<IpAddr>,
    /// Output interface index.
    pub dev: u32,
    /// Preferred source address (`src`): what the node's own packets on this route leave
    /// from. It must be an address of the namespace, or the kernel refuses the route.
    pub src: Option<IpAddr>,
    /// Metric (`RTA_PRIORITY`); `None` leaves the kernel's default (0 for IPv4, 1024 for
    /// IPv6), and reads back as `None` only for IPv4 routes with metric 0.
    pub metric: Option<u32>,
}

const MAIN_TABLE: u8 = 254;

impl Netlink {
    /// Every route of one family, in all tables (the kernel has no per-table dump filter
    /// that rtnetlink exposes; callers filter).
    pub(crate) async fn route_messages(&self, ipv6: bool) -> Result<Vec<RouteMessage>> {
        let _turn = self.dump_turn().await;
        let filter = if ipv6 {
            RouteMessageBuilder::<Ipv6Addr>::new().build()
        } else {
            RouteMessageBuilder::<Ipv4Addr>::new().build()
        };
        self.handle
            .route()
            .get(filter)
            .execute()
            .try_collect()
            .await
            .map_err(self.fail("list routes"))
    }

    /// Addresses on link `index`, with their prefix lengths.
    pub async fn addresses(&self, index: u32) -> Result<Vec<IpNet>> {
        Ok(self
            .address_list(Some(index))
            .await?
            .into_iter()
            .filter(|(link, _)| *link == index)
            .map(|(_, net)| net)
            .collect())
    }

    /// Every address of the namespace, on any link (what a route's `src` may name).
    pub async fn local_addresses(&self) -> Result<Vec<IpAddr>> {
        Ok(self
            .address_list(None)
            .await?
            .into_iter()
            .map(|(_, net)| net.addr())
            .collect())
    }

    /// `(link index, address)` for every address, or those of one link.
    async fn address_list(&self, index: Option<u32>) -> Result<Vec<(u32, IpNet)>> {
        let _turn = self.dump_turn().await;
        let mut request = self.handle.address().get();
        if let Some(index) = index {
            request = request.set_link_index_filter(index);
        }
        let what = index.map_or_else(
            || "list addresses".to_owned(),
            |i| format!("list addresses of link #{i}"),
        );
        let messages: Vec<AddressMessage> = request.execute().try_collect().await.map_err(self.fail(what))?;
        Ok(messages
            .iter()
            .filter_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    AddressAttribute::Address(ip) => IpNet::new(*ip, m.header.prefix_len)
                        .ok()
                        .map(|net| (m.header.index, net)),
                    _ => None,
                })
            })
            .collect())
    }

    /// Adds (or replaces) `net` on link `index`. IPv6 addresses skip duplicate address
    /// detection: OVN's IPAM already made them unique, and DAD would hold them tentative.
    pub async fn add_address(&self, index: u32, net: IpNet) -> Result<()> {
        let mut request = self
            .handle
            .address()
            .add(index, net.addr(), net.prefix_len())
            .replace();
        if net.addr().is_ipv6() {
            request
                .message_mut()
                .attributes
                .push(AddressAttribute::Flags(AddressFlags::Nodad));
        }
        request
            .execute()
            .await
            .map_err(self.fail(format!("add address {net} to link #{index}")))
    }

    /// Removes `net` from link `index`; `Ok(false)` when it was not there.
    pub async fn delete_address(&self, index: u32, net: IpNet) -> Result<bool> {
        let found: Vec<AddressMessage> = {
            let _turn = self.dump_turn().await;
            self.handle
                .address()
                .get()
                .set_link_index_filter(index)
                .set_address_filter(net.addr())
                .execute()
                .try_collect()
                .await
                .map_err(self.fail(format!("find address {net} on link #{index}")))?
        };
        let Some(message) = found.into_iter().find(|m| m.header.index == index) else {
            return Ok(false);
        };
        match self.handle.address().del(message).execute().await {
            Ok(()) => Ok(true),
            Err(source) => {
                let err = Error::Netlink {
                    op: format!("delete address {net} from link #{index}"),
                    ns: self.ns.clone(),
                    source,
                };
                if err.is_not_found() { Ok(false) } else { Err(err) }
            }
        }
    }

    /// Unicast routes of the main table for one family, optionally only those out of `dev`.
    pub async fn routes(&self, ipv6: bool, dev: Option<u32>) -> Result<Vec<Route>> {
        let messages = self.route_messages(ipv6).await?;
        Ok(messages
            .iter()
            .filter(|m| m.header.table == MAIN_TABLE && m.header.kind == RouteType::Unicast)
            .filter_map(parse_route)
            .filter(|r| dev.is_none_or(|d| r.dev == d))
            .collect())
    }

    /// The source address the kernel picks for packets to `dst` (`ip route get DST`), or `None`
    /// when no route leads there or the route names no source.
    pub async fn source_toward(&self, dst: IpAddr) -> Result<Option<IpAddr>> {
        let query = match dst {
            IpAddr::V4(a) => RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(a, 32)
                .build(),
            IpAddr::V6(a) => RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(a, 128)
                .build(),
        };
        let answer: Result<Vec<RouteMessage>, _> = {
            let _turn = self.dump_turn().await;
            self.handle.route().get(query).execute().try_collect().await
        };
        match answer {
            Ok(messages) => Ok(messages.iter().find_map(|m| {
                m.attributes.iter().find_map(|a| match a {
                    RouteAttribute::PrefSource(src) => address(src),
                    _ => None,
                })
            })),
            Err(source) => {
                let err = Error::Netlink {
                    op: format!("route get {dst}"),
                    ns: self.ns.clone(),
                    source,
                };
                // No route (ENETUNREACH, EHOSTUNREACH) is an answer, not a failure.
                if matches!(err.errno(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH)) {
                    Ok(None)
                } else {
                    Err(err)
                }
            }
        }
    }

    /// Adds (or replaces) a route in the main table.
    pub async fn add_route(&self, route: &Route) -> Result<()> {
        self.handle
            .route()
            .add(route_message(route))
            .replace()
            .execute()
            .await
            .map_err(self.fail(format!("add route {}", describe(route))))
    }

    /// Deletes a route; `Ok(false)` when it was not there. Any protocol and scope match, as
    /// with `ip route del` (a route someone added by hand has protocol `boot`, ours `static`).
    pub async fn delete_route(&self, route: &Route) -> Result<bool> {
        let mut message = route_message(route);
        message.header.protocol = RouteProtocol::Unspec;
        message.header.scope = RouteScope::NoWhere;
        let result = self.handle.route().del(message).execute().await;
        self.deleted(format!("delete route {}", describe(route)), result)
    }
}

fn describe(route: &Route) -> String {
    let via = route.gateway.map(|gw| format!(" via {gw}")).unwrap_or_default();
    let src = route.src.map(|ip| format!(" src {ip}")).unwrap_or_default();
    let metric = route.metric.map(|m| format!(" metric {m}")).unwrap_or_default();
    format!("{}{via} dev #{}{src}{metric}", route.dst, route.dev)
}

fn route_message(route: &Route) -> RouteMessage {
    let mut message = match route.dst {
        IpNet::V4(dst) => {
            let mut b = RouteMessageBuilder::<Ipv4Addr>::new()
                .destination_prefix(dst.network(), dst.prefix_len())
                .output_interface(route.dev);
            if let Some(IpAddr::V4(gw)) = route.gateway {
                b = b.gateway(gw);
            }
            if let Some(IpAddr::V4(src)) = route.src {
                b = b.pref_source(src);
            }
            if let Some(metric) = route.metric {
                b = b.priority(metric);
            }
            b.build()
        }
        IpNet::V6(dst) => {
            let mut b = RouteMessageBuilder::<Ipv6Addr>::new()
                .destination_prefix(dst.network(), dst.prefix_len())
                .output_interface(route.dev);
            if let Some(IpAddr::V6(gw)) = route.gateway {
                b = b.gateway(gw);
            }
            if let Some(IpAddr::V6(src)) = route.src {
                b = b.pref_source(src);
            }
            if let Some(metric) = route.metric {
                b = b.priority(metric);
            }
            b.build()
        }
    };
    if route.gateway.is_none() {
        // A link route: the destination is on the wire, as `ip route add X dev Y` makes it.
        message.header.scope = RouteScope::Link;
    }
    message
}

fn parse_route(message: &RouteMessage) -> Option<Route> {
    let mut dst = None;
    let mut gateway = None;
    let mut dev = None;
    let mut src = None;
    let mut metric = None;
    for attribute in &message.attributes {
        match attribute {
            RouteAttribute::Destination(a) => dst = address(a),
            RouteAttribute::Gateway(a) => gateway = address(a),
            RouteAttribute::Via(RouteVia::Inet6(v6)) => gateway = Some(IpAddr::V6(*v6)),
            RouteAttribute::Oif(index) => dev = Some(*index),
            RouteAttribute::PrefSource(a) => src = address(a),
            RouteAttribute::Priority(m) => metric = Some(*m),
            _ => {}
        }
    }
    let dst = dst.unwrap_or(match message.header.address_family {
        AddressFamily::Inet6 => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        _ => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
    });
    Some(Route {
        dst: IpNet::new(dst, message.header.destination_prefix_length).ok()?,
        gateway,
        dev: dev?,
        src,
        metric,
    })
}

pub(crate) fn address(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(v4) => Some(IpAddr::V4(*v4)),
        RouteAddress::Inet6(v6) => Some(IpAddr::V6(*v6)),
        _ => None,
    }
}
