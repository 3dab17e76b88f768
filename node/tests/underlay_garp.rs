//! A pod's addresses announced when its NIC comes up (Kube-OVN `configureNic`: a gratuitous ARP
//! per IPv4 address, an unsolicited Neighbor Advertisement per IPv6 address), on an underlay
//! subnet with the fabric of `underlay_pods.rs`: real OVS on the userspace datapath, real OVN,
//! the real daemon and shim, the fabric's router as the physical gateway.
//!
//! The case it is for: a pod re-created with its fixed address and a new MAC (a StatefulSet
//! pod, a VM). The router and the VLAN's other hosts still cache the old MAC; without the
//! announcement they send to it until their entry expires (minutes). Here the router holds
//! such stale entries (the MAC of the pod's previous incarnation) on its gateway port and on
//! another host's port of VLAN 100, for both families; after ADD both carry the new MAC.
//! The other host's port is the one only the announcement fixes: the gateway check's ARP and
//! neighbour solicitation go to the gateway (which learns from them too), and that host sends
//! nothing itself (no ARP request, no solicitation for the pod's address on the trunk).
//!
//! Every pod announces, overlay too, as in Kube-OVN: the second test is Kube-OVN's e2e case
//! "should immediately reach a recreated static IPv6 pod after its MAC changes"
//! (`test/e2e/kube-ovn/pod/fixed_ip_recreation.go`) on a dual-stack overlay subnet, both
//! families: OVN's logical switch floods the announcements to the other pods, whose caches
//! then hold the new MAC.

mod common;

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use common::underlay::{PATH_WAIT, Underlay, UnderlaySubnet};
use common::{Cluster, Options, TestPod};
use kube_ovn_testkit::{VlanRouter, wait_until};
use serde_json::json;

/// How long after ADD the router's entries may take to change: under the daemon's repeat (2 s),
/// with room for a loaded CI machine. ovn-controller sends gratuitous ARPs of its own for a VIF
/// on a localnet switch about a second after binding, so within this bound only the IPv6
/// entries single out our announcement (ovn-controller sends no NA); the overlay test below
/// singles out the IPv4 one (no localnet there).
const SETTLE: Duration = Duration::from_millis(1800);

/// The MAC the pod's previous incarnation had.
const OLD_MAC: &str = "0a:00:00:00:de:ad";

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP literal")
}

/// The pod's MAC from its CNI result.
fn mac(pod: &TestPod) -> String {
    pod.result["interfaces"][0]["mac"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `(MAC, state)` the router caches for `addr` on its port `port`.
fn cached(router: &VlanRouter, addr: &str, port: &str) -> Result<Option<(String, String)>> {
    let out = router.netns().ip(&["neigh", "show", addr, "dev", port])?;
    let words: Vec<&str> = out.split_whitespace().collect();
    let mac = words
        .iter()
        .position(|w| *w == "lladdr")
        .and_then(|i| words.get(i + 1));
    Ok(mac.map(|m| {
        (
            (*m).to_owned(),
            words.last().copied().unwrap_or_default().to_owned(),
        )
    }))
}

/// The time of day of a tcpdump line (`12:00:01.500000 …`), in seconds.
fn seconds(line: &str) -> f64 {
    line.split_whitespace()
        .next()
        .unwrap_or_default()
        .split(':')
        .fold(0.0, |acc, part| acc * 60.0 + part.parse::<f64>().unwrap_or(0.0))
}

/// Waits until no address of the router's `port` is tentative: a Linux neighbour takes no NA on
/// an interface whose own link-local address is still in duplicate address detection (the
/// first second or two after link up; a real router's port has been up for long).
fn wait_dad(router: &VlanRouter, port: &str) -> Result<()> {
    wait_until(
        &format!("router port {port} to finish DAD"),
        Duration::from_secs(10),
        || {
            Ok(router
                .netns()
                .ip(&["-6", "addr", "show", "dev", port, "tentative"])?
                .trim()
                .is_empty())
        },
    )
}

/// A dual-stack underlay subnet on VLAN 100; the router caches `OLD_MAC` for the pod's two
/// addresses on its gateway port and on another host's port. A pod with those addresses and a
/// new MAC: the trunk carries its gratuitous ARP and its unsolicited NA, tagged 100, from its
/// MAC; once ADD returned, every one of the router's entries has the new MAC (STALE: learnt
/// from what the pod sent, not confirmed by a request of the router's own, and none went out).
/// Both are sent again two seconds later, except for a pod deleted before that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_pod_announces_its_addresses_and_the_vlan_replaces_the_stale_mac() -> Result<()> {
    let ul = Underlay::start(Options::default(), 1500).await?;
    ul.map(0)?;
    ul.map(1)?;
    let gw = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    ul.router.add_address(&gw, "fd00:100::1/64")?;
    let host = ul.router.add_vlan_gateway(100, "10.100.0.99/24")?;
    ul.router.add_address(&host, "fd00:100::99/64")?;
    let dual = UnderlaySubnet::new(
        "uldual",
        "10.100.0.0/24,fd00:100::/64",
        "10.100.0.1,fd00:100::1",
        100,
    );
    ul.subnet(&dual, json!({})).await?;
    let addrs = ["10.100.0.10", "fd00:100::10"];
    for port in [&gw, &host] {
        wait_dad(&ul.router, port)?;
        for addr in addrs {
            ul.router.netns().ip(&[
                "neigh", "replace", addr, "lladdr", OLD_MAC, "dev", port, "nud", "stale",
            ])?;
        }
    }

    let trunk = ul.router.capture(&ul.trunks[1])?;
    let pod = ul
        .pod(&dual, "sts-0", 1, [ip(addrs[0]), ip(addrs[1])], &[])
        .await?;
    let new_mac = mac(&pod);
    assert_ne!(new_mac, OLD_MAC);

    // Right after ADD: the new MAC everywhere on VLAN 100, though the router asked nobody.
    // Allowed [`SETTLE`] for the frames to cross both userspace datapaths on a loaded machine.
    for port in [&gw, &host] {
        for addr in addrs {
            let waited = wait_until(
                &format!("router port {port}'s entry for {addr} to carry {new_mac}"),
                SETTLE,
                || Ok(cached(&ul.router, addr, port)?.is_some_and(|e| e.0 == new_mac)),
            );
            if let Err(e) = waited {
                panic!(
                    "{e}: {:?}\n{}",
                    cached(&ul.router, addr, port)?,
                    trunk.raw_tail(20)
                );
            }
        }
    }
    for addr in addrs {
        let entry = cached(&ul.router, addr, &host)?.context("host entry")?;
        assert_eq!(entry.1, "STALE", "{addr} on {host}: {entry:?}");
    }

    // On the trunk: the announcements, tagged with the VLAN, from the pod's MAC.
    let garp = trunk.wait_frame("the pod's gratuitous ARP", PATH_WAIT, |f| {
        f.ethertype == "ARP" && f.line.contains("who-has 10.100.0.10 tell 10.100.0.10")
    })?;
    assert_eq!(garp.vlan, Some(100), "{}", garp.line);
    assert_eq!(garp.src_mac, new_mac, "{}", garp.line);
    assert_eq!(garp.dst_mac, "ff:ff:ff:ff:ff:ff", "{}", garp.line);
    let na = trunk.wait_frame("the pod's unsolicited NA", PATH_WAIT, |f| {
        f.line.contains("neighbor advertisement") && f.line.contains("tgt is fd00:100::10")
    })?;
    assert_eq!(na.vlan, Some(100), "{}", na.line);
    assert_eq!(na.src_mac, new_mac, "{}", na.line);
    assert_eq!(na.dst_mac, "33:33:00:00:00:01", "{}", na.line);
    assert_eq!(na.src_ip.as_deref(), Some("fd00:100::10"), "{}", na.line);
    assert_eq!(na.dst_ip.as_deref(), Some("ff02::1"), "{}", na.line);
    // The router sent no request for the pod's addresses: what it has, it was told.
    let asked: Vec<String> = trunk
        .frames()
        .into_iter()
        .filter(|f| {
            f.src_mac != new_mac
                && (f.line.contains("who-has 10.100.0.10")
                    || f.line.contains("neighbor solicitation, who has fd00:100::10"))
        })
        .map(|f| f.line)
        .collect();
    assert!(asked.is_empty(), "the router asked: {asked:?}");

    // Once more two seconds later (RFC 5227's ANNOUNCE_INTERVAL), ADD long answered. Counted
    // on the unsolicited NAs (to ff02::1; a solicited one answers the router): ovn-controller
    // itself sends gratuitous ARPs for a VIF on a switch with a localnet port (about 1 s after
    // binding, then backing off), never NAs. ADD's own announcement may go out before OVN
    // forwards the new port's frames (then it is not captured, which is why the repeat
    // exists), so the repeat is told by its time: at least 1.5 s after the pod's first frame.
    let nas = |addr: &str, mac: &str| {
        let target = format!("tgt is {addr},");
        trunk
            .frames()
            .into_iter()
            .filter(|f| {
                f.src_mac == mac
                    && f.dst_ip.as_deref() == Some("ff02::1")
                    && f.line.contains("neighbor advertisement")
                    && f.line.contains(&target)
            })
            .collect::<Vec<_>>()
    };
    let first_frame = trunk
        .frames()
        .iter()
        .filter(|f| f.src_mac == new_mac)
        .map(|f| seconds(&f.line))
        .fold(f64::MAX, f64::min);
    let repeated = || {
        nas("fd00:100::10", &new_mac)
            .into_iter()
            .find(|f| seconds(&f.line) >= first_frame + 1.5)
    };
    wait_until("the repeated unsolicited NA", PATH_WAIT, || {
        Ok(repeated().is_some())
    })?;
    let repeat = repeated().context("the repeated NA")?;
    assert!(
        trunk.frames().iter().any(|f| f.src_mac == new_mac
            && f.line.contains("who-has 10.100.0.10 tell 10.100.0.10")
            && (seconds(&f.line) - seconds(&repeat.line)).abs() < 0.1),
        "a gratuitous ARP with the repeated NA: {}",
        trunk.raw_tail(30)
    );

    // A pod deleted before its repeat is due is not announced again (its address may already
    // be another pod's, with another MAC).
    let gone = ul
        .pod(&dual, "gone", 1, [ip("10.100.0.20"), ip("fd00:100::20")], &[])
        .await?;
    ul.cluster.nodes[1].runtime.del(&gone.sandbox, None)?;
    let node1 = &ul.cluster.nodes[1].daemon;
    wait_until("the daemon to skip gone's repeat", PATH_WAIT, || {
        Ok(node1
            .log()
            .lines()
            .any(|l| l.contains("not announcing the addresses again") && l.contains("ul/gone")))
    })?;
    // ADD's own NA at most (it may precede OVN's forwarding, see above), never a repeat.
    let gone_nas = nas("fd00:100::20", &mac(&gone)).len();
    assert!(gone_nas <= 1, "{gone_nas} NAs of gone:\n{}", trunk.raw_tail(20));

    // The pod is reachable at once from the other host, through its new MAC.
    assert!(
        pod.netns.ping(ip("10.100.0.99")),
        "the host reaches the pod over IPv4"
    );
    assert!(
        pod.netns.ping(ip("fd00:100::99")),
        "the host reaches the pod over IPv6"
    );

    // Announcing costs ADD next to nothing (the daemon logs how long it took).
    let log = ul.cluster.nodes[1].daemon.log();
    let line = log
        .lines()
        .find(|l| l.contains("announced the pod's addresses"))
        .context("the daemon logs the announcement")?;
    let entry: serde_json::Value = serde_json::from_str(line)?;
    let took_us = entry["took_us"]
        .as_u64()
        .with_context(|| format!("took_us in {line}"))?;
    eprintln!(
        "announcing took {took_us} µs, {} µs of it waiting for the link to run",
        entry["waited_us"]
    );
    assert_eq!(entry["running"], true, "{line}");
    assert!(took_us < 500_000, "announcing took {took_us} µs: {line}");
    Ok(())
}

/// Kube-OVN's `fixed_ip_recreation.go`, with the real controller on a dual-stack overlay: a
/// client on node 0 reaches a backend with fixed addresses and MAC on node 1 (its neighbour
/// cache primed); the backend is deleted and a new one made with the same addresses and another
/// MAC on node 1. Right after ADD the client caches the new MAC for both addresses, and its
/// first ping of each reaches the new backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recreated_overlay_pod_with_fixed_addresses_is_reached_at_once() -> Result<()> {
    let cluster = Cluster::start_with(Options {
        nodes: 2,
        controller_flags: vec![
            "--default-cidr=10.16.0.0/16,fd00:10:16::/112".into(),
            "--node-switch-cidr=100.64.0.0/16,fd00:100:64::/112".into(),
        ],
        dual_stack: true,
        ..Options::default()
    })
    .await?;
    let addrs = ["10.16.0.50", "fd00:10:16::50"];
    let fixed = addrs.join(",");
    let backend = |name: &'static str, mac: &'static str| {
        let fixed = fixed.clone();
        let cluster = &cluster;
        async move {
            cluster
                .pod(
                    "default",
                    name,
                    1,
                    &[
                        ("ovn.kubernetes.io/ip_address", fixed.as_str()),
                        ("ovn.kubernetes.io/mac_address", mac),
                    ],
                )
                .await
        }
    };
    let client = cluster.pod("default", "client", 0, &[]).await?;
    let first = backend("backend-1", OLD_MAC).await?;
    for addr in addrs {
        client
            .netns
            .wait_ping(ip(addr), common::WAIT)
            .with_context(|| format!("the client to reach the first backend at {addr}"))?;
    }
    let cache = |addr: &str| -> Result<Option<String>> {
        let out = client.netns.ip(&["neigh", "show", addr, "dev", "eth0"])?;
        Ok(out
            .split_whitespace()
            .skip_while(|w| *w != "lladdr")
            .nth(1)
            .map(str::to_owned))
    };
    for addr in addrs {
        assert_eq!(cache(addr)?.as_deref(), Some(OLD_MAC), "primed for {addr}");
    }

    // The first backend goes (DEL, then the object); the controller frees its addresses.
    cluster.nodes[1].runtime.del(&first.sandbox, None)?;
    cluster.delete_pod_object("default", "backend-1").await?;
    let new_mac = "0a:00:00:00:be:ef";
    let second = backend("backend-2", new_mac).await?;
    assert_eq!(mac(&second), new_mac);

    for addr in addrs {
        assert_eq!(
            cache(addr)?.as_deref(),
            Some(new_mac),
            "the client's entry for {addr} right after the new backend's ADD"
        );
        assert!(
            client.netns.ping(ip(addr)),
            "the client's first ping of {addr} after the backend was re-created"
        );
    }
    Ok(())
}
