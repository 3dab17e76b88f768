//! BGP unnumbered against FRR 8.4 with zebra (`neighbor eth1 interface remote-as external`): the
//! peer learnt from its IPv6 Router Advertisements (and FRR learning us from ours), IPv4 and IPv6
//! routes with extended next hop installed via our link-local address, the peer re-learnt when
//! it returns with another link-local address; through the daemon, an unnumbered `BgpPeer` that
//! waits for its router. Needs root; fails when FRR is missing.

mod common;

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use anyhow::Context;
use common::frr_zebra::{Frr, bgp_peer, flags, host_routes, wait_kernel_route};
use common::*;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::driver::unnumbered::Neighbour;
use kube_ovn_speaker::driver::{Speaker, SpeakerConfig};
use kube_ovn_testkit::{Netns, wait_until};
use serde_json::{Value, json};

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
