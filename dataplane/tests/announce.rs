//! Announcing addresses out of a device, against the kernel of a neighbour: two namespaces
//! joined by a veth, the neighbour holding a stale entry with another MAC for each of the
//! sender's addresses (a pod re-created with its old address and a new MAC). After one
//! announcement the neighbour's entries carry the sender's MAC, though it sent nothing itself
//! (needs root and iproute2; fails, never skips, without them).

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use kube_ovn_dataplane::announce::announce;
use kube_ovn_dataplane::parse_mac;
use kube_ovn_testkit::Netns as TestNs;
use kube_ovn_testkit::netns::veth_pair;

const OLD_MAC: &str = "0a:00:00:00:de:ad";

/// The MAC `ns` caches for `addr` on `dev` (`ip neigh show`), if any.
fn cached(ns: &TestNs, addr: &str, dev: &str) -> Result<Option<String>> {
    let out = ns.ip(&["neigh", "show", addr, "dev", dev])?;
    Ok(out
        .split_whitespace()
        .skip_while(|w| *w != "lladdr")
        .nth(1)
        .map(str::to_owned))
}

#[tokio::test]
async fn a_neighbour_replaces_its_stale_mac_on_announcement() -> Result<()> {
    let pod = TestNs::create("anp")?;
    let router = TestNs::create("anr")?;
    veth_pair(pod.name(), "eth0", router.name(), "gw", 1500)?;
    let mac = "0a:00:00:64:00:0a";
    pod.ip(&["link", "set", "eth0", "address", mac])?;
    for (ns, dev, addrs) in [
        (&pod, "eth0", ["10.100.0.10/24", "fd00:100::10/64"]),
        (&router, "gw", ["10.100.0.1/24", "fd00:100::1/64"]),
    ] {
        for a in addrs {
            let mut args = vec!["addr", "add", a, "dev", dev];
            if a.contains(':') {
                // Usable at once as the NA's source and target (no DAD), as the daemon adds
                // a pod's IPv6 addresses.
                args.push("nodad");
            }
            ns.ip(&args)?;
        }
        ns.ip(&["link", "set", dev, "up"])?;
    }
    for addr in ["10.100.0.10", "fd00:100::10"] {
        router.ip(&[
            "neigh", "replace", addr, "lladdr", OLD_MAC, "dev", "gw", "nud", "stale",
        ])?;
        assert_eq!(cached(&router, addr, "gw")?.as_deref(), Some(OLD_MAC));
    }

    // A neighbour takes no NA on an interface whose own link-local address is still
    // tentative (its duplicate address detection, a second or two after link up); the
    // router's interface here has just come up, a real router's has been up for long.
    kube_ovn_testkit::wait_until(
        "the router's link-local address to leave DAD",
        Duration::from_secs(10),
        || {
            Ok(router
                .ip(&["-6", "addr", "show", "dev", "gw", "tentative"])?
                .trim()
                .is_empty())
        },
    )?;
    let addresses: Vec<IpAddr> = vec![
        "10.100.0.10".parse()?,
        "fd00:100::10".parse()?,
        "fe80::1".parse()?,
    ];
    let done = announce(
        &pod.handle()?,
        "eth0",
        parse_mac(mac).context("a MAC")?,
        &addresses,
        Duration::from_secs(2),
    )
    .await?;
    assert_eq!(done.sent, 2, "one per address, none for the link-local one");
    assert!(done.running, "sent once the link was running: {done:?}");
    // The frames are in the neighbour's kernel once the send returned; its entries change as
    // they are processed (softirq), so wait briefly.
    for addr in ["10.100.0.10", "fd00:100::10"] {
        kube_ovn_testkit::wait_until(
            &format!("the router's entry for {addr} to carry {mac}"),
            Duration::from_secs(5),
            || Ok(cached(&router, addr, "gw")?.as_deref() == Some(mac)),
        )?;
    }

    let err = announce(
        &pod.handle()?,
        "nosuch0",
        parse_mac(mac).context("a MAC")?,
        &addresses,
        Duration::ZERO,
    )
    .await
    .expect_err("no such device");
    assert!(
        err.to_string()
            .contains("announce 10.100.0.10,fd00:100::10,fe80::1 from nosuch0"),
        "{err}"
    );
    Ok(())
}
