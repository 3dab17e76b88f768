//! What `kubectl ko trace` is asked (Kube-OVN's argument shapes), and the packet it sends: the
//! microflow for `ovn-trace` and the flow for `ovs-appctl ofproto/trace`. Pure, unit-tested.
//!
//! Kube-OVN's plugin takes `trace {namespace/pod|node//node} <dst ip> [dst mac]
//! icmp|tcp|udp [port]` and `… arp [request|reply]`; a pod named without a namespace is in
//! `default`. Its microflow is an ICMP echo request (IPv6: type 128), a TCP SYN or a UDP datagram
//! from source port 30000, TTL 255, with conntrack answering "new" (`--ct=new` per pass).

use std::net::IpAddr;

use anyhow::{Context, bail, ensure};

/// Where the packet comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A pod: its logical switch port is `<pod>.<namespace>`.
    Pod { namespace: String, name: String },
    /// A node (`node//<name>`): its port on the join switch, from the node's annotations.
    Node(String),
}

/// The protocol of the traced packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Icmp,
    Tcp(u16),
    Udp(u16),
    /// ARP request (who-has `dst`); Kube-OVN also traces replies, which need the peer's MAC.
    ArpRequest,
    ArpReply,
}

/// A parsed `kubectl ko trace` command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub source: Source,
    pub dst: IpAddr,
    /// The destination MAC when given; else found (a port of the switch, or its router's).
    pub dst_mac: Option<String>,
    pub protocol: Protocol,
}

pub const USAGE: &str = "kubectl ko trace {namespace/pod|node//node} <dst ip> [dst mac] icmp|tcp|udp [port]\n\
                         kubectl ko trace {namespace/pod|node//node} <dst ip> [dst mac] arp [request|reply]";

/// Whether `s` is a MAC address as Kube-OVN's plugin recognises one (six hex pairs).
pub fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| (1..=2).contains(&p.len()) && p.chars().all(|c| c.is_ascii_hexdigit()))
}

/// Parses the words after `trace`.
pub fn parse(args: &[String]) -> anyhow::Result<Request> {
    let mut words = args.iter().map(String::as_str);
    let Some(who) = words.next() else {
        bail!("missing the source pod\nusage:\n{USAGE}");
    };
    let source = if let Some((_, node)) = who.split_once("//") {
        ensure!(!node.is_empty(), "source {who:?}: no node name after node//");
        Source::Node(node.to_owned())
    } else {
        match who.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => Source::Pod {
                namespace: ns.to_owned(),
                name: name.to_owned(),
            },
            Some(_) => bail!("source {who:?}: expected namespace/pod or node//node"),
            None => Source::Pod {
                namespace: "default".into(),
                name: who.to_owned(),
            },
        }
    };
    let Some(dst) = words.next() else {
        bail!("missing the destination IP address\nusage:\n{USAGE}");
    };
    let dst: IpAddr = dst
        .parse()
        .with_context(|| format!("destination {dst:?} is not an IP address"))?;
    let mut next = words.next();
    let mut dst_mac = None;
    if let Some(mac) = next.filter(|w| is_mac(w)) {
        dst_mac = Some(mac.to_ascii_lowercase());
        next = words.next();
    }
    let Some(kind) = next else {
        bail!("missing the protocol (icmp, tcp, udp or arp)\nusage:\n{USAGE}");
    };
    let arg = words.next();
    let port = |proto: &str| -> anyhow::Result<u16> {
        let Some(p) = arg else {
            bail!("{proto}: missing the destination port\nusage:\n{USAGE}");
        };
        let n: u16 = p
            .parse()
            .with_context(|| format!("{proto} port {p:?} is not a number from 1 to 65535"))?;
        ensure!(n != 0, "{proto} port 0 is not a destination port");
        Ok(n)
    };
    let protocol = match kind {
        "icmp" => Protocol::Icmp,
        "tcp" => Protocol::Tcp(port("tcp")?),
        "udp" => Protocol::Udp(port("udp")?),
        "arp" => {
            ensure!(dst.is_ipv4(), "arp: {dst} is an IPv6 address (ARP is IPv4 only)");
            match arg {
                None | Some("request") => Protocol::ArpRequest,
                Some("reply") => {
                    ensure!(
                        dst_mac.is_some(),
                        "arp reply: the destination MAC address is required"
                    );
                    Protocol::ArpReply
                }
                Some(other) => bail!("arp: {other:?} is neither request nor reply"),
            }
        }
        other => bail!("invalid protocol {other:?}: icmp, tcp, udp or arp\nusage:\n{USAGE}"),
    };
    if let Some(extra) = words.next() {
        bail!("unexpected argument {extra:?}\nusage:\n{USAGE}");
    }
    if matches!(protocol, Protocol::Icmp) && arg.is_some() {
        bail!("icmp takes no port (got {:?})", arg.unwrap_or_default());
    }
    Ok(Request {
        source,
        dst,
        dst_mac,
        protocol,
    })
}

/// The source port of traced TCP/UDP packets (Kube-OVN's ovn-trace uses 30000).
pub const SOURCE_PORT: u16 = 30000;

/// The addressing of one traced packet, once the cluster has told us the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// The logical switch port it enters from.
    pub inport: String,
    pub src_mac: String,
    pub dst_mac: String,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub protocol: Protocol,
}

/// The microflow `ovn-trace` takes (OVN's expression language).
pub fn ovn_microflow(p: &Packet) -> String {
    let v = if p.dst.is_ipv4() { "4" } else { "6" };
    let head = format!(
        "inport == \"{}\" && eth.src == {} && eth.dst == {}",
        p.inport, p.src_mac, p.dst_mac
    );
    let ip = format!(
        "{head} && ip{v}.src == {} && ip{v}.dst == {} && ip.ttl == 255",
        p.src, p.dst
    );
    match p.protocol {
        Protocol::Icmp if p.dst.is_ipv4() => {
            format!("{ip} && icmp4 && icmp4.type == 8 && icmp4.code == 0")
        }
        Protocol::Icmp => format!("{ip} && icmp6 && icmp6.type == 128 && icmp6.code == 0"),
        Protocol::Tcp(port) => {
            format!("{ip} && tcp && tcp.src == {SOURCE_PORT} && tcp.dst == {port} && tcp.flags == 2")
        }
        Protocol::Udp(port) => {
            format!("{ip} && udp && udp.src == {SOURCE_PORT} && udp.dst == {port}")
        }
        Protocol::ArpRequest => format!(
            "{head} && arp.op == 1 && arp.sha == {} && arp.spa == {} && arp.tha == 00:00:00:00:00:00 && arp.tpa == {}",
            p.src_mac, p.src, p.dst
        ),
        Protocol::ArpReply => format!(
            "{head} && arp.op == 2 && arp.sha == {} && arp.spa == {} && arp.tha == {} && arp.tpa == {}",
            p.src_mac, p.src, p.dst_mac, p.dst
        ),
    }
}

/// The flow `ovs-appctl ofproto/trace br-int` takes, entering at OpenFlow port `ofport`.
pub fn ofproto_flow(p: &Packet, ofport: u32) -> String {
    let l2 = format!("in_port={ofport},dl_src={},dl_dst={}", p.src_mac, p.dst_mac);
    let (v6, nw) = if p.dst.is_ipv4() {
        ("", "nw")
    } else {
        ("6", "ipv6")
    };
    let ip = |proto: &str| {
        format!(
            "{l2},{proto}{v6},{nw}_src={},{nw}_dst={},nw_ttl=255",
            p.src, p.dst
        )
    };
    match p.protocol {
        Protocol::Icmp if p.dst.is_ipv4() => format!("{},icmp_type=8,icmp_code=0", ip("icmp")),
        // ICMPv6's fields are icmpv6_type/code (icmp_type is ICMPv4's).
        Protocol::Icmp => format!("{},icmpv6_type=128,icmpv6_code=0", ip("icmp")),
        Protocol::Tcp(port) => format!(
            "{},tcp_src={SOURCE_PORT},tcp_dst={port},tcp_flags=0x002",
            ip("tcp")
        ),
        Protocol::Udp(port) => format!("{},udp_src={SOURCE_PORT},udp_dst={port}", ip("udp")),
        Protocol::ArpRequest => format!(
            "{l2},arp,arp_op=1,arp_sha={},arp_spa={},arp_tha=00:00:00:00:00:00,arp_tpa={}",
            p.src_mac, p.src, p.dst
        ),
        Protocol::ArpReply => format!(
            "{l2},arp,arp_op=2,arp_sha={},arp_spa={},arp_tha={},arp_tpa={}",
            p.src_mac, p.src, p.dst_mac, p.dst
        ),
    }
}

/// The source address of the destination's family among the annotation's (`10.16.0.5,fd00::5`).
pub fn source_ip(annotation: &str, dst: IpAddr) -> Option<IpAddr> {
    annotation
        .split(',')
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .find(|a| a.is_ipv4() == dst.is_ipv4())
}

/// Whether `dst` is inside one of the CIDRs of the annotation (`10.16.0.0/16,fd00::/112`).
pub fn in_cidrs(cidrs: &str, dst: IpAddr) -> bool {
    cidrs
        .split(',')
        .filter_map(|c| c.trim().parse::<ipnet::IpNet>().ok())
        .any(|n| n.contains(&dst))
}

/// The MAC of the switch port whose addresses (`"MAC IP…"`, one per entry) hold `dst`.
pub fn mac_of_address<'a>(addresses: impl IntoIterator<Item = &'a str>, dst: IpAddr) -> Option<String> {
    addresses.into_iter().find_map(|entry| {
        let mut words = entry.split_whitespace();
        let mac = words.next().filter(|m| is_mac(m))?;
        words
            .any(|w| w.parse::<IpAddr>().ok() == Some(dst))
            .then(|| mac.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn kube_ovns_argument_shapes_parse() {
        let r = parse(&words("demo/a 10.16.0.11 icmp")).unwrap();
        assert_eq!(
            r.source,
            Source::Pod {
                namespace: "demo".into(),
                name: "a".into()
            }
        );
        assert_eq!(r.protocol, Protocol::Icmp);
        assert_eq!(r.dst_mac, None);

        let r = parse(&words("a 10.16.0.11 00:00:00:AA:bb:01 tcp 80")).unwrap();
        assert_eq!(
            r.source,
            Source::Pod {
                namespace: "default".into(),
                name: "a".into()
            }
        );
        assert_eq!(r.dst_mac.as_deref(), Some("00:00:00:aa:bb:01"));
        assert_eq!(r.protocol, Protocol::Tcp(80));

        let r = parse(&words("node//node1 fd00::5 udp 53")).unwrap();
        assert_eq!(r.source, Source::Node("node1".into()));
        assert_eq!(r.protocol, Protocol::Udp(53));
        assert!(r.dst.is_ipv6());

        assert_eq!(
            parse(&words("demo/a 10.16.0.11 arp")).unwrap().protocol,
            Protocol::ArpRequest
        );
        assert_eq!(
            parse(&words("demo/a 10.16.0.11 0:0:0:0:0:1 arp reply"))
                .unwrap()
                .protocol,
            Protocol::ArpReply
        );
    }

    #[test]
    fn bad_arguments_say_what_is_wrong() {
        let err = |s: &str| parse(&words(s)).unwrap_err().to_string();
        assert!(err("").contains("missing the source pod"));
        assert!(err("demo/a").contains("missing the destination IP"));
        assert!(err("demo/a 10.16.0.300 icmp").contains("\"10.16.0.300\" is not an IP address"));
        assert!(err("demo/a 10.16.0.1").contains("missing the protocol"));
        assert!(err("demo/a 10.16.0.1 tcp").contains("tcp: missing the destination port"));
        assert!(err("demo/a 10.16.0.1 udp http").contains("udp port \"http\""));
        assert!(err("demo/a 10.16.0.1 sctp 5").contains("invalid protocol \"sctp\""));
        assert!(err("demo/a fd00::1 arp").contains("IPv6"));
        assert!(err("demo/a 10.16.0.1 arp reply").contains("MAC address is required"));
        assert!(err("demo/a 10.16.0.1 icmp 80").contains("icmp takes no port"));
        assert!(err("demo/a 10.16.0.1 tcp 80 x").contains("unexpected argument \"x\""));
        assert!(err("a/b/c 10.16.0.1 icmp").contains("expected namespace/pod"));
    }

    fn packet(dst: &str, protocol: Protocol) -> Packet {
        let dst: IpAddr = dst.parse().unwrap();
        Packet {
            inport: "a.demo".into(),
            src_mac: "00:00:00:00:00:0a".into(),
            dst_mac: "00:00:00:00:00:01".into(),
            src: if dst.is_ipv4() {
                "10.16.0.10".parse().unwrap()
            } else {
                "fd00::a".parse().unwrap()
            },
            dst,
            protocol,
        }
    }

    #[test]
    fn microflows_for_ovn_trace() {
        assert_eq!(
            ovn_microflow(&packet("10.17.0.5", Protocol::Icmp)),
            "inport == \"a.demo\" && eth.src == 00:00:00:00:00:0a && eth.dst == 00:00:00:00:00:01 \
             && ip4.src == 10.16.0.10 && ip4.dst == 10.17.0.5 && ip.ttl == 255 \
             && icmp4 && icmp4.type == 8 && icmp4.code == 0"
        );
        assert!(
            ovn_microflow(&packet("fd00::5", Protocol::Icmp))
                .ends_with("ip6.src == fd00::a && ip6.dst == fd00::5 && ip.ttl == 255 && icmp6 && icmp6.type == 128 && icmp6.code == 0")
        );
        assert!(
            ovn_microflow(&packet("10.17.0.5", Protocol::Tcp(80)))
                .ends_with("&& tcp && tcp.src == 30000 && tcp.dst == 80 && tcp.flags == 2")
        );
        assert!(
            ovn_microflow(&packet("fd00::5", Protocol::Udp(53)))
                .ends_with("ip6.dst == fd00::5 && ip.ttl == 255 && udp && udp.src == 30000 && udp.dst == 53")
        );
        assert!(
            ovn_microflow(&packet("10.16.0.1", Protocol::ArpRequest))
                .ends_with("arp.op == 1 && arp.sha == 00:00:00:00:00:0a && arp.spa == 10.16.0.10 && arp.tha == 00:00:00:00:00:00 && arp.tpa == 10.16.0.1")
        );
    }

    #[test]
    fn flows_for_ofproto_trace() {
        assert_eq!(
            ofproto_flow(&packet("10.17.0.5", Protocol::Icmp), 7),
            "in_port=7,dl_src=00:00:00:00:00:0a,dl_dst=00:00:00:00:00:01,icmp,nw_src=10.16.0.10,\
             nw_dst=10.17.0.5,nw_ttl=255,icmp_type=8,icmp_code=0"
        );
        assert_eq!(
            ofproto_flow(&packet("fd00::5", Protocol::Tcp(443)), 3),
            "in_port=3,dl_src=00:00:00:00:00:0a,dl_dst=00:00:00:00:00:01,tcp6,ipv6_src=fd00::a,\
             ipv6_dst=fd00::5,nw_ttl=255,tcp_src=30000,tcp_dst=443,tcp_flags=0x002"
        );
        assert!(
            ofproto_flow(&packet("fd00::5", Protocol::Icmp), 3).ends_with(
                "icmp6,ipv6_src=fd00::a,ipv6_dst=fd00::5,nw_ttl=255,icmpv6_type=128,icmpv6_code=0"
            )
        );
        assert!(
            ofproto_flow(&packet("10.1.1.1", Protocol::Udp(53)), 3)
                .ends_with("udp,nw_src=10.16.0.10,nw_dst=10.1.1.1,nw_ttl=255,udp_src=30000,udp_dst=53")
        );
    }

    #[test]
    fn addresses_from_annotations_and_ports() {
        let v4: IpAddr = "10.16.0.11".parse().unwrap();
        let v6: IpAddr = "fd00::11".parse().unwrap();
        assert_eq!(
            source_ip("10.16.0.5,fd00::5", v6),
            Some("fd00::5".parse().unwrap())
        );
        assert_eq!(source_ip("fd00::5", v4), None);
        assert!(in_cidrs("10.16.0.0/16,fd00::/112", v4));
        assert!(!in_cidrs("10.17.0.0/16", v4));
        let ports = [
            "router",
            "00:00:00:00:00:0a 10.16.0.10",
            "00:00:00:00:00:0b 10.16.0.11 fd00::11",
        ];
        assert_eq!(mac_of_address(ports, v6).as_deref(), Some("00:00:00:00:00:0b"));
        // 10.16.0.1 is not 10.16.0.11's prefix: whole addresses only.
        assert_eq!(mac_of_address(ports, "10.16.0.1".parse().unwrap()), None);
    }
}
