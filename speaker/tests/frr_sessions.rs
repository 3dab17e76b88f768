//! Sessions that fabrics use, against FRR 8.4 (bgpd with zebra, so what bgpd accepts is also
//! installed in the ToR's kernel): RFC 8950 extended next hop (IPv4 routes over an IPv6 session,
//! beside a plain IPv4 session), BGP unnumbered (`neighbor <if> interface`: the peer learnt from
//! its Router Advertisements, re-learnt when it comes back with another link-local address),
//! and a session bound to a device (`vrf`; this kernel has no VRF driver, so a plain interface
//! stands in: `SO_BINDTODEVICE` works the same on both). Each peer is built the way the speaker
//! builds a `BgpPeer` (`run::peers::from_bgp_peer` from a validated spec and the flags).
//! Needs root; fails when FRR is missing.

mod common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use common::*;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::config::{Config, Flags};
use kube_ovn_speaker::crd::{BgpPeerSpec, ValidateSpec};
use kube_ovn_speaker::driver::unnumbered::Neighbour;
use kube_ovn_speaker::driver::{PeerConfig, Speaker, SpeakerConfig};
use kube_ovn_speaker::run::peers::from_bgp_peer;
use kube_ovn_testkit::{Daemon, Netns, run, wait_until};
use serde_json::{Value, json};

/// FRR's zebra and bgpd in one namespace, as user `frr` (FRR drops to it), with their sockets,
/// PID files and logs in a directory of the test's.
struct Frr {
    // Dropped first: bgpd before the zebra it talks to.
    bgpd: Daemon,
    zebra: Daemon,
    dir: tempfile::TempDir,
}

impl Frr {
    /// `zebra_extra` and `bgpd` are configuration text (bgpd's after the defaults line).
    fn start(ns: &Netns, zebra_extra: &str, bgpd: &str) -> anyhow::Result<Frr> {
        let dir = tempfile::Builder::new().prefix("frr-z-").tempdir()?;
        // FRR runs as user frr: it must be able to write its sockets and logs here.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        let d = dir.path().to_string_lossy().into_owned();
        std::fs::write(
            dir.path().join("zebra.conf"),
            format!("hostname tor\nlog file {d}/zebra.log informational\n!\n{zebra_extra}"),
        )?;
        std::fs::write(
            dir.path().join("bgpd.conf"),
            format!("frr defaults datacenter\nhostname tor\nlog file {d}/bgpd.log informational\n!\n{bgpd}"),
        )?;
        let zserv = format!("{d}/zserv.api");
        let launch = |daemon: &str, extra: &[&str]| -> anyhow::Result<Daemon> {
            let mut args: Vec<String> = ["netns", "exec", ns.name(), &format!("/usr/lib/frr/{daemon}")]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            for a in [
                "-f",
                &format!("{d}/{daemon}.conf"),
                "-i",
                &format!("{d}/{daemon}.pid"),
                "-z",
                &zserv,
                "--vty_socket",
                &d,
                "-P",
                "0",
            ]
            .iter()
            .chain(extra)
            {
                args.push((*a).to_owned());
            }
            Daemon::spawn(
                daemon,
                "ip",
                &args,
                &dir.path().join(format!("{daemon}.out")),
                &[],
            )
        };
        let zebra = launch("zebra", &[])?;
        wait_until("zebra's API socket", WAIT, || Ok(Path::new(&zserv).exists()))?;
        // -p 0: bgpd still listens (179) for the sessions; 0 only turns off its vty port.
        let bgpd = launch("bgpd", &[])?;
        let frr = Frr { bgpd, zebra, dir };
        wait_until("bgpd's vty socket", WAIT, || {
            Ok(frr.vtysh("bgpd", "show bgp summary").is_ok())
        })?;
        Ok(frr)
    }

    fn vtysh(&self, daemon: &str, command: &str) -> anyhow::Result<String> {
        let dir = self.dir.path().to_string_lossy();
        Ok(run(
            "vtysh",
            &["--vty_socket", &dir, "-d", daemon, "-c", command],
        )?)
    }

    fn json(&self, command: &str) -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&self.vtysh("bgpd", command)?)?)
    }

    /// (state, prefixes received) of neighbour `peer` (an address or, unnumbered, an
    /// interface) in one family.
    fn summary(&self, family: &str, peer: &str) -> anyhow::Result<(String, u64)> {
        let json = self.json(&format!("show bgp {family} unicast summary json"))?;
        let peer = &json["peers"][peer];
        Ok((
            peer["state"].as_str().unwrap_or_default().to_owned(),
            peer["pfxRcd"].as_u64().unwrap_or(0),
        ))
    }

    fn wait_received(&self, family: &str, peer: &str, n: u64) -> anyhow::Result<()> {
        wait_until(
            &format!("bgpd to hold {n} {family} prefixes from {peer}"),
            WAIT,
            || Ok(self.summary(family, peer)? == ("Established".to_owned(), n)),
        )
        .with_context(|| format!("bgpd log:\n{}", self.log_tail()))
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("bgpd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// The speaker's flags as a node would have them (AS 65001, router ID the node's address).
fn flags(extra: &[&str]) -> Config {
    let mut args = vec![
        "kube-ovn-speaker",
        "--node-name=node",
        "--cluster-as=65001",
        "--pod-ips=198.51.100.2",
        "--holdtime=30s",
    ];
    args.extend_from_slice(extra);
    Flags::try_parse_from(args).unwrap().validate().unwrap()
}

/// The driver settings the speaker makes of BgpPeer `spec` toward `address`.
fn bgp_peer(config: &Config, spec: Value, address: IpAddr) -> PeerConfig {
    let validated = serde_json::from_value::<BgpPeerSpec>(spec)
        .unwrap()
        .validate()
        .unwrap();
    let mut peer = from_bgp_peer(config, false, "tor", &validated, address, None)
        .unwrap()
        .config;
    // FRR is passive or slow to connect here: our retries decide how soon the session is up.
    peer.session.connect_retry = Duration::from_secs(1);
    peer
}

/// `n` host routes in `10.<second>.0.0/16`.
fn host_routes(second: u8, n: u8) -> Vec<(ipnet::IpNet, RouteAttributes)> {
    (0..n)
        .map(|i| {
            let net = ipnet::Ipv4Net::new(Ipv4Addr::new(10, second, 0, i), 32).unwrap();
            (net.into(), RouteAttributes::default())
        })
        .collect()
}

/// The ToR's kernel route to `dest`, once it mentions `want`.
fn wait_kernel_route(tor: &Netns, dest: &str, want: &str) -> anyhow::Result<String> {
    let mut last = String::new();
    wait_until(
        &format!("the ToR's kernel route to {dest} with {want:?}"),
        WAIT,
        || {
            let family = if dest.contains(':') { "-6" } else { "-4" };
            last = tor.ip(&[family, "route", "show", dest])?;
            Ok(last.contains(want))
        },
    )
    .with_context(|| format!("last: {last:?}"))?;
    Ok(last)
}

#[test]
fn extended_next_hop_carries_ipv4_over_an_ipv6_session_into_the_frr_kernel() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    // An address behind the node that only the IPv6 session announces, to ping through it.
    lab.node
        .ip(&["addr", "add", "10.17.0.1/32", "dev", "lo"])
        .unwrap();
    let frr = Frr::start(
        &lab.tor,
        "",
        &format!(
            "router bgp {TOR_AS}\n bgp router-id {TOR_V4}\n no bgp ebgp-requires-policy\n\
             neighbor {NODE_V6} remote-as {NODE_AS}\n neighbor {NODE_V6} passive\n\
             neighbor {NODE_V6} capability extended-nexthop\n\
             neighbor {NODE_V4} remote-as {NODE_AS}\n neighbor {NODE_V4} passive\n\
             address-family ipv4 unicast\n  neighbor {NODE_V6} activate\n  neighbor {NODE_V4} activate\n\
             exit-address-family\n address-family ipv6 unicast\n  neighbor {NODE_V6} activate\n\
             exit-address-family\n"
        ),
    )
    .unwrap();
    let config = flags(&[]);
    let over_v6 = bgp_peer(
        &config,
        json!({ "peerAddress": TOR_V6.to_string(), "peerASN": TOR_AS, "extendedNexthop": true }),
        IpAddr::V6(TOR_V6),
    );
    assert_eq!(
        over_v6.session.families.len(),
        2,
        "both families on the IPv6 session"
    );
    let plain_v4 = bgp_peer(
        &config,
        json!({ "peerAddress": TOR_V4.to_string(), "peerASN": TOR_AS }),
        IpAddr::V4(TOR_V4),
    );
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let v6 = speaker.add_peer(over_v6).unwrap();
        v6.announce_many(host_routes(17, 10)).unwrap();
        v6.announce(v6_prefix(), RouteAttributes::default()).unwrap();
        // What the next-hop task sets: the kernel's source toward the IPv6 peer.
        v6.set_local_addresses(None, Some(NODE_V6)).unwrap();
        v6.set_ready().unwrap();
        let v4 = speaker.add_peer(plain_v4).unwrap();
        v4.announce_many(host_routes(18, 5)).unwrap();
        v4.set_ready().unwrap();

        let n6 = NODE_V6.to_string();
        frr.wait_received("ipv4", &n6, 10).unwrap();
        frr.wait_received("ipv6", &n6, 1).unwrap();
        frr.wait_received("ipv4", &NODE_V4.to_string(), 5).unwrap();
        let neighbor = frr.json(&format!("show bgp neighbors {n6} json")).unwrap();
        assert_eq!(
            neighbor[&n6]["neighborCapabilities"]["extendedNexthop"], "advertisedAndReceived",
            "{neighbor}"
        );
        // bgpd's view: an IPv4 route with an IPv6 next hop.
        let route = frr.json("show bgp ipv4 unicast 10.17.0.1/32 json").unwrap();
        let hops = &route["paths"][0]["nexthops"];
        assert_eq!(hops[0]["ip"], n6, "{route}");
        assert_eq!(hops[0]["afi"], "ipv6", "{route}");
        // The kernel's: zebra installs it through the IPv6 gateway, and traffic follows it.
        let installed = wait_kernel_route(&lab.tor, "10.17.0.1", "via inet6 2001:db8:100::2").unwrap();
        assert!(installed.contains("dev eth1"), "{installed}");
        wait_kernel_route(&lab.tor, "10.18.0.1", "via 198.51.100.2").unwrap();
        lab.tor
            .wait_ping(Ipv4Addr::new(10, 17, 0, 1), WAIT)
            .expect("an IPv4 packet routed through the IPv6 next hop reaches the node");
        assert!(v6.status().is_established() && v4.status().is_established());
    });
}

/// Two namespaces joined by a veth with no addresses but the kernel's link-local ones (no DAD:
/// the address is usable at once).
fn bare_link() -> anyhow::Result<(Netns, Netns)> {
    require_root();
    let node = Netns::create("unn")?;
    let tor = Netns::create("unt")?;
    node.ip(&[
        "link",
        "add",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        "eth1",
        "netns",
        tor.name(),
    ])?;
    for (ns, dev) in [(&node, "eth0"), (&tor, "eth1")] {
        ns.exec(&["sysctl", "-qw", &format!("net.ipv6.conf.{dev}.accept_dad=0")])?;
        ns.ip(&["link", "set", dev, "up"])?;
    }
    Ok((node, tor))
}

/// The link-local address of `dev`, once the kernel has made it.
fn link_local(ns: &Netns, dev: &str) -> anyhow::Result<Ipv6Addr> {
    let mut found = None;
    wait_until(&format!("a link-local address on {dev}"), WAIT, || {
        let out = ns.ip(&["-6", "-o", "addr", "show", "dev", dev, "scope", "link"])?;
        found = out
            .split_whitespace()
            .skip_while(|w| *w != "inet6")
            .nth(1)
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok());
        Ok(found.is_some())
    })?;
    found.context("link-local address")
}

fn unnumbered_frr(tor: &Netns) -> anyhow::Result<Frr> {
    // FRR enables Router Advertisements on an unnumbered interface itself; the 1 s interval
    // only makes the re-learning below quick.
    Frr::start(
        tor,
        "interface eth1\n ipv6 nd ra-interval 1\n no ipv6 nd suppress-ra\n!\n",
        &format!(
            "router bgp {TOR_AS}\n bgp router-id 192.0.2.1\n no bgp ebgp-requires-policy\n\
             neighbor eth1 interface remote-as external\n neighbor eth1 timers connect 1\n\
             address-family ipv4 unicast\n  neighbor eth1 activate\n exit-address-family\n\
             address-family ipv6 unicast\n  neighbor eth1 activate\n exit-address-family\n"
        ),
    )
}

#[test]
fn unnumbered_session_learns_frr_from_its_router_advertisements_and_follows_a_new_address() {
    init_tracing();
    let (node, tor) = bare_link().unwrap();
    let mut frr = unnumbered_frr(&tor).unwrap();
    let tor_ll = link_local(&tor, "eth1").unwrap();
    let config = flags(&[]);
    let spec = json!({ "peerInterface": "eth0", "peerASN": TOR_AS });
    node.run(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let _enter = rt.enter();
        let neighbour = Neighbour::start("eth0", Duration::from_secs(1)).unwrap();
        let mut heard = neighbour.watch();
        let learnt = block(&rt, async {
            tokio::time::timeout(WAIT, heard.wait_for(Option::is_some))
                .await
                .map(|a| a.map(|a| *a))
        })
        .expect("FRR's Router Advertisement heard")
        .unwrap()
        .unwrap();
        assert_eq!(learnt, tor_ll, "the peer is the router whose RAs we heard");

        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer_config = bgp_peer(&config, spec.clone(), IpAddr::V6(learnt));
        assert!(peer_config.session.extended_next_hop);
        let peer = speaker.add_peer(peer_config).unwrap();
        let routes = || {
            let mut r = host_routes(17, 10);
            r.push((v6_prefix(), RouteAttributes::default()));
            r
        };
        peer.replace_all(routes()).unwrap();
        // The link has a global prefix too: that address is the next hop, with our link-local
        // one after it (RFC 2545 §3), as the speaker's next-hop task sets it from eth0.
        let global: Ipv6Addr = "2001:db8:27::2".parse().unwrap();
        node.ip(&["addr", "add", "2001:db8:27::2/64", "dev", "eth0", "nodad"])
            .unwrap();
        tor.ip(&["addr", "add", "2001:db8:27::1/64", "dev", "eth1", "nodad"])
            .unwrap();
        peer.set_local_addresses(None, Some(global)).unwrap();
        peer.set_ready().unwrap();
        frr.wait_received("ipv4", "eth1", 10).unwrap();
        frr.wait_received("ipv6", "eth1", 1).unwrap();
        let status = peer.status();
        let ours = match status.local_address {
            Some(IpAddr::V6(a)) if a.is_unicast_link_local() => a,
            other => panic!("the session runs between link-local addresses, ours is {other:?}"),
        };
        let route = frr.json("show bgp ipv4 unicast 10.17.0.1/32 json").unwrap();
        let hops: Vec<&str> = route["paths"][0]["nexthops"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["ip"].as_str())
            .collect();
        assert_eq!(hops, [global.to_string(), ours.to_string()], "{route}");
        // FRR installs our IPv4 routes through our link-local address on its interface.
        let installed = wait_kernel_route(&tor, "10.17.0.1", &format!("via inet6 {ours}")).unwrap();
        assert!(installed.contains("dev eth1"), "{installed}");
        wait_kernel_route(&tor, "fd00:10:16::/64", &format!("via {ours}")).unwrap();

        // FRR comes back on another MAC, so with another link-local address: it is re-learnt
        // from its first advertisement, and the session (re-made by the caller, as the
        // speaker's BgpPeer task does on that change) comes up to it.
        frr.bgpd.stop();
        frr.zebra.stop();
        tor.ip(&["link", "set", "eth1", "down"]).unwrap();
        tor.ip(&["link", "set", "eth1", "address", "02:00:00:00:27:04"])
            .unwrap();
        tor.ip(&["link", "set", "eth1", "up"]).unwrap();
        let new_ll = link_local(&tor, "eth1").unwrap();
        assert_ne!(new_ll, tor_ll);
        let frr = unnumbered_frr(&tor).unwrap();
        let relearnt = block(&rt, async {
            tokio::time::timeout(WAIT, heard.wait_for(|a| *a == Some(new_ll)))
                .await
                .map(|a| a.map(|a| *a))
        })
        .expect("the new link-local address heard")
        .unwrap();
        assert_eq!(relearnt, Some(new_ll));
        // This time FRR dials: a passive peer behind a listener, which takes the connection
        // from the new address because it came in on eth0 (a link-local address names a
        // router only together with its interface).
        block(&rt, speaker.remove_peer(IpAddr::V6(learnt))).unwrap();
        let listening = Speaker::new(SpeakerConfig {
            listen: vec!["[::]:179".parse().unwrap()],
            allowed_sources: None,
        })
        .unwrap();
        let mut passive = spec.clone();
        passive["passive"] = json!(true);
        let peer = listening
            .add_peer(bgp_peer(&config, passive, IpAddr::V6(new_ll)))
            .unwrap();
        peer.replace_all(routes()).unwrap();
        peer.set_ready().unwrap();
        frr.wait_received("ipv4", "eth1", 10).unwrap();
        assert_eq!(peer.status().messages_sent.open, 1, "{:?}", peer.status());
        wait_kernel_route(&tor, "10.17.0.1", &format!("via inet6 {ours}")).unwrap();
    })
    .unwrap();
}

#[test]
fn a_session_bound_to_a_device_goes_out_of_it_and_not_out_of_one_without_a_route() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    // The ToR's loopback address is reachable two ways: the main table prefers eth0; a second
    // link (alt0 ↔ alt1) also leads there. dead0 leads nowhere.
    let tor_lo = "192.0.2.1";
    lab.tor
        .ip(&["addr", "add", &format!("{tor_lo}/32"), "dev", "lo"])
        .unwrap();
    lab.node
        .ip(&[
            "link",
            "add",
            "alt0",
            "type",
            "veth",
            "peer",
            "name",
            "alt1",
            "netns",
            lab.tor.name(),
        ])
        .unwrap();
    lab.node
        .ip(&["addr", "add", "198.51.102.2/24", "dev", "alt0"])
        .unwrap();
    lab.node.ip(&["link", "set", "alt0", "up"]).unwrap();
    lab.tor
        .ip(&["addr", "add", "198.51.102.1/24", "dev", "alt1"])
        .unwrap();
    lab.tor.ip(&["link", "set", "alt1", "up"]).unwrap();
    lab.node
        .ip(&[
            "route",
            "add",
            tor_lo,
            "via",
            "198.51.100.1",
            "dev",
            "eth0",
            "metric",
            "10",
        ])
        .unwrap();
    lab.node
        .ip(&[
            "route",
            "add",
            tor_lo,
            "via",
            "198.51.102.1",
            "dev",
            "alt0",
            "metric",
            "20",
        ])
        .unwrap();
    lab.node
        .ip(&["link", "add", "dead0", "type", "veth", "peer", "name", "dead1"])
        .unwrap();
    lab.node.ip(&["link", "set", "dead0", "up"]).unwrap();
    lab.node.ip(&["link", "set", "dead1", "up"]).unwrap();
    let main = lab.node.ip(&["route", "get", tor_lo]).unwrap();
    assert!(
        main.contains("dev eth0"),
        "unbound, the session would use eth0: {main}"
    );
    // FRR knows the node only by its address on the second link.
    let frr = Frr::start(
        &lab.tor,
        "",
        &format!(
            "router bgp {TOR_AS}\n bgp router-id {TOR_V4}\n no bgp ebgp-requires-policy\n\
             neighbor 198.51.102.2 remote-as {NODE_AS}\n neighbor 198.51.102.2 timers connect 1\n\
             address-family ipv4 unicast\n  neighbor 198.51.102.2 activate\n exit-address-family\n"
        ),
    )
    .unwrap();
    let tor = IpAddr::V4(tor_lo.parse().unwrap());
    let config = flags(&[]);
    let bound = bgp_peer(
        &config,
        json!({ "peerAddress": tor_lo, "peerASN": TOR_AS, "vrf": "alt0" }),
        tor,
    );
    assert_eq!(bound.bind_device.as_deref(), Some("alt0"));
    // `--vrf` is every peer's default: a device without a route to the peer.
    let nowhere = bgp_peer(
        &flags(&["--vrf=dead0"]),
        json!({ "peerAddress": tor_lo, "peerASN": TOR_AS }),
        tor,
    );
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker.add_peer(bound).unwrap();
        peer.announce_many(host_routes(17, 3)).unwrap();
        peer.set_ready().unwrap();
        frr.wait_received("ipv4", "198.51.102.2", 3).unwrap();
        assert_eq!(
            peer.status().local_address,
            Some(IpAddr::V4(Ipv4Addr::new(198, 51, 102, 2))),
            "the session's source is alt0's address: it went out of alt0"
        );

        // Another speaker (a node whose --vrf has no route to the peer): never up, and it says why.
        let other = Speaker::new(SpeakerConfig::default()).unwrap();
        let stuck = other.add_peer(nowhere).unwrap();
        let status = block(
            rt,
            stuck.wait_for("a connect error", WAIT, |s| s.last_error.is_some()),
        )
        .unwrap();
        let error = status.last_error.clone().unwrap_or_default();
        // The kernel takes a peer with no route through the device as on-link there and
        // waits for an ARP answer that never comes: the connect times out.
        assert!(
            error.starts_with("connect: no answer from 192.0.2.1") && error.ends_with("out of dead0"),
            "{error}"
        );
        assert!(
            status.established_at.is_none() && status.messages_sent.open == 0,
            "{status:?}"
        );
        assert!(peer.status().is_established());

        // Passive: FRR dials 198.51.102.2 through alt1. A listener bound to no device cannot
        // tell where a connection came in, so the alt0-bound peer refuses it and says why ...
        block(rt, speaker.remove_peer(tor)).unwrap();
        let listen = || SpeakerConfig {
            listen: vec!["0.0.0.0:179".parse().unwrap()],
            allowed_sources: None,
        };
        let passive = || {
            bgp_peer(
                &flags(&["--vrf=alt0"]),
                json!({ "peerAddress": "198.51.102.1", "peerASN": TOR_AS, "passive": true }),
                IpAddr::V4(Ipv4Addr::new(198, 51, 102, 1)),
            )
        };
        let unbound = Speaker::new(listen()).unwrap();
        let refused = unbound.add_peer(passive()).unwrap();
        let status = block(
            rt,
            refused.wait_for("the refusal", WAIT, |s| s.last_error.is_some()),
        )
        .unwrap();
        assert_eq!(
            status.last_error.as_deref(),
            Some(
                "inbound connection refused: the peer's session is bound to alt0, and the kernel \
                 bound this connection to no device"
            )
        );
        drop(unbound);
        // ... while behind a listener bound to alt0 (`--vrf` with `--passivemode`) the
        // connection is bound to alt0 too, and is the peer's.
        let mut listening = None;
        wait_until("port 179 free again", WAIT, || {
            listening = Speaker::new_in_device(listen(), Some("alt0")).ok();
            Ok(listening.is_some())
        })
        .unwrap();
        let listening = listening.unwrap();
        let inbound = listening.add_peer(passive()).unwrap();
        inbound.announce_many(host_routes(17, 2)).unwrap();
        inbound.set_ready().unwrap();
        frr.wait_received("ipv4", "198.51.102.2", 2).unwrap();
        assert!(inbound.status().is_established());
    });
}

/// The speaker daemon with an unnumbered `BgpPeer`: `Discovering` until FRR's advertisements
/// are heard, then a session carrying the cluster's routes, and after FRR comes back with
/// another link-local address, a session to that one, without anything done on our side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unnumbered_bgp_peer_waits_for_its_router_and_follows_it() -> anyhow::Result<()> {
    use common::k8s::{Cluster, speaker_on};
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use kube::api::PostParams;
    use kube_ovn_speaker::crd::BgpPeer;

    let (node, tor) = bare_link()?;
    // A global prefix on the link besides: the next-hop task finds the address on eth0.
    node.ip(&["addr", "add", "2001:db8:27::2/64", "dev", "eth0", "nodad"])?;
    let cluster = Cluster::start().await?;
    let n1: Node = serde_json::from_value(json!({"metadata": {"name": "n1"}}))?;
    Api::<Node>::all(cluster.kube.clone())
        .create(&PostParams::default(), &n1)
        .await?;
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    let dir = tempfile::tempdir()?;
    let speaker = speaker_on(&cluster.kubeconfig, &node, "n1", NODE_V4, dir.path(), &[])?;
    let peers: Api<BgpPeer> = Api::all(cluster.kube.clone());
    let peer: BgpPeer = serde_json::from_value(json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer", "metadata": {"name": "unnumbered"},
        "spec": {"peerInterface": "eth0", "peerASN": TOR_AS}}))?;
    peers.create(&PostParams::default(), &peer).await?;
    let entry = || -> anyhow::Result<Value> {
        let object = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(peers.get_status("unnumbered"))
        })?;
        Ok(serde_json::to_value(object.status)?["nodes"]["n1"].clone())
    };
    let mut last = Value::Null;
    wait_until(
        "status.nodes.n1 Discovering: nobody advertises on eth0 yet",
        WAIT,
        || {
            last = entry()?;
            Ok(last["state"] == "Discovering"
                && last["lastError"]
                    .as_str()
                    .is_some_and(|e| e.contains("interface eth0: no IPv6 Router Advertisement heard yet")))
        },
    )
    .with_context(|| format!("last: {last}\n{}", speaker.log_tail(20)))?;

    let mut frr = unnumbered_frr(&tor)?;
    frr.wait_received("ipv4", "eth1", 1)
        .with_context(|| speaker.log_tail(30))?;
    wait_until("status.nodes.n1 Established", WAIT, || {
        last = entry()?;
        Ok(last["state"] == "Established" && last["prefixesSent"] == 1)
    })
    .with_context(|| format!("last: {last}\n{}", speaker.log_tail(20)))?;
    wait_kernel_route(&tor, "10.16.0.0/16", "via inet6 fe80::")?;
    let hops = || -> anyhow::Result<Vec<String>> {
        let route = frr.json("show bgp ipv4 unicast 10.16.0.0/16 json")?;
        Ok(route["paths"][0]["nexthops"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| Some(h["ip"].as_str()?.to_owned()))
            .collect())
    };
    let mut seen = Vec::new();
    wait_until(
        "the global next hop with our link-local one after it",
        WAIT,
        || {
            seen = hops()?;
            Ok(seen.len() == 2 && seen[0] == "2001:db8:27::2" && seen[1].starts_with("fe80::"))
        },
    )
    .with_context(|| format!("next hops: {seen:?}"))?;

    frr.bgpd.stop();
    frr.zebra.stop();
    let old_ll = link_local(&tor, "eth1")?;
    tor.ip(&["link", "set", "eth1", "down"])?;
    tor.ip(&["link", "set", "eth1", "address", "02:00:00:00:27:05"])?;
    tor.ip(&["link", "set", "eth1", "up"])?;
    assert_ne!(link_local(&tor, "eth1")?, old_ll);
    let frr = unnumbered_frr(&tor)?;
    frr.wait_received("ipv4", "eth1", 1)
        .with_context(|| speaker.log_tail(30))?;
    wait_kernel_route(&tor, "10.16.0.0/16", "via inet6 fe80::")?;
    let mut speaker = speaker;
    speaker.daemon.check_alive()?;
    Ok(())
}
