//! Pods on underlay subnets (Kube-OVN's `vlan` subnets), with real OVS on the userspace
//! datapath, real OVN, the real daemon and shim, and a VLAN fabric in a network namespace whose
//! router is the physical gateway ([`kube_ovn_testkit::VlanRouter`]). The controller's rows are
//! written by the test (common/underlay.rs), so what is asserted here is the daemon's and the
//! datapath's part: tagged frames on the wire with the pod's own MAC and address, VLAN
//! isolation, pod MTU from the provider network's node label, Kube-OVN's gateway check, and the
//! wait for the localnet patch port.

mod common;

use std::net::Ipv4Addr;

use anyhow::Result;
use common::underlay::{PATH_WAIT, PN, Underlay, UnderlaySubnet, ping_sized, wait_ping};
use common::{Options, WAIT};
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

/// The provider NIC's MTU, unlike the daemons' --mtu (1400).
const NIC_MTU: u32 = 1450;

fn ip(s: &str) -> Ipv4Addr {
    s.parse().expect("an IPv4 literal")
}

/// The pods' ports on `br-int` of node `node` (not ovn-controller's patch ports).
fn pod_ports(ul: &Underlay, node: usize) -> Result<Vec<String>> {
    let mut ports = ul.cluster.nodes[node].pod_ports()?;
    ports.retain(|p| !p.starts_with("patch-"));
    Ok(ports)
}

/// §4.2 tests 7 and 8, one fabric: pods on both nodes reach the tagged gateway; the trunk
/// carries `vlan 100` with the pod's MAC and address (no NAT); pod to pod across nodes goes over
/// the fabric, tagged; VLAN 200 does not reach VLAN 100; VLAN 0 is untagged. The provider NIC's
/// MTU (1450, the node label) is the pod's, unless the subnet sets its own; a bad label fails
/// ADD naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underlay_pods_are_tagged_on_the_wire_reach_the_physical_gateway_and_take_the_nic_mtu() -> Result<()>
{
    let ul = Underlay::start(Options::default(), NIC_MTU).await?;
    let label = format!("{PN}.provider-network.kubernetes.io/mtu");
    for node in 0..2 {
        ul.map(node)?;
        ul.label_node(node, &label, Some("1450")).await?;
    }
    let gw100 = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    ul.router.add_vlan_gateway(200, "10.200.0.1/24")?;
    ul.router.add_vlan_gateway(0, "10.50.0.1/24")?;
    let v100 = UnderlaySubnet::new("ul100", "10.100.0.0/24", "10.100.0.1", 100);
    // VLAN 200 with VLAN 100's addresses: only L2 isolation keeps it from 10.100.0.1.
    let wrong = UnderlaySubnet::new("ulwrong", "10.100.0.0/24", "10.100.0.1", 200);
    let v0 = UnderlaySubnet::new("ul0", "10.50.0.0/24", "10.50.0.1", 0);
    ul.subnet(&v100, json!({})).await?;
    ul.subnet(&wrong, json!({"disableGatewayCheck": true})).await?;
    ul.subnet(&v0, json!({"mtu": 1300})).await?;

    let trunk0 = ul.router.capture(&ul.trunks[0])?;
    let a = ul.pod(&v100, "a", 0, ip("10.100.0.10"), &[]).await?;
    let b = ul.pod(&v100, "b", 1, ip("10.100.0.11"), &[]).await?;
    // ADD returned after the gateway answered ARP, so the first ping needs no wait.
    assert!(a.netns.ping(ip("10.100.0.1")), "a pings its physical gateway");
    assert!(b.netns.ping(ip("10.100.0.1")), "b pings its physical gateway");
    let mac_a = a.result["interfaces"][0]["mac"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let to_gw = trunk0.wait_frame("a's echo to the gateway, tagged 100", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("10.100.0.10") && f.dst_ip.as_deref() == Some("10.100.0.1")
    })?;
    assert_eq!(to_gw.vlan, Some(100), "{}", to_gw.line);
    assert_eq!(
        to_gw.src_mac, mac_a,
        "the pod's own MAC on the wire: {}",
        to_gw.line
    );
    assert_eq!(to_gw.dst_mac, ul.router.mac(&gw100)?, "{}", to_gw.line);

    // The MTU is the provider NIC's (the label), not --mtu (1400): 1450 - 28 bytes of
    // headers go out unfragmented, one more does not.
    assert!(a.netns.ip(&["link", "show", "eth0"])?.contains("mtu 1450"));
    assert_eq!(a.result["interfaces"].as_array().map(Vec::len), Some(1));
    assert!(
        ping_sized(&a, ip("10.100.0.1"), Some(1422)),
        "1450-byte packets reach the gateway"
    );
    assert!(
        !ping_sized(&a, ip("10.100.0.1"), Some(1423)),
        "1451-byte packets do not fit"
    );

    // Pod to pod across nodes: through node 0's trunk, tagged, not through geneve.
    wait_ping(&a, b.ip())?;
    let across = trunk0.wait_frame("a's echo to b on the trunk", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("10.100.0.10") && f.dst_ip.as_deref() == Some("10.100.0.11")
    })?;
    assert_eq!(across.vlan, Some(100), "{}", across.line);

    // VLAN 200 does not reach VLAN 100's gateway, and its ARP is tagged 200 (ADD succeeded
    // only because the subnet disables the gateway check).
    let isolated = ul.pod(&wrong, "w", 0, ip("10.100.0.20"), &[]).await?;
    assert!(
        !isolated.netns.ping(ip("10.100.0.1")),
        "VLAN 200 reached VLAN 100's gateway"
    );
    let arp = trunk0.wait_frame("w's ARP on the trunk", PATH_WAIT, |f| {
        f.ethertype == "ARP" && f.line.contains("tell 10.100.0.20")
    })?;
    assert_eq!(arp.vlan, Some(200), "{}", arp.line);

    // VLAN 0: no 802.1Q header; the subnet's own MTU wins over the label.
    let untagged = ul.pod(&v0, "z", 0, ip("10.50.0.10"), &[]).await?;
    assert!(untagged.netns.ip(&["link", "show", "eth0"])?.contains("mtu 1300"));
    assert!(untagged.netns.ping(ip("10.50.0.1")));
    let plain = trunk0.wait_frame("z's echo on the trunk", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("10.50.0.10") && f.dst_ip.as_deref() == Some("10.50.0.1")
    })?;
    assert_eq!(plain.vlan, None, "{}", plain.line);

    // A label that is not a positive number fails ADD and names the label (the node cache
    // may still hold the good one for a moment: a pod that got through is removed, and tried
    // again).
    ul.label_node(1, &label, Some("jumbo")).await?;
    let deadline = std::time::Instant::now() + PATH_WAIT;
    let mut n = 0;
    let last = loop {
        n += 1;
        let address = ip(&format!("10.100.0.{}", 100 + n));
        let (pod, run) = ul.try_pod(&v100, &format!("m{n}"), 1, address, &[]).await?;
        if !run.success {
            break run.stdout;
        }
        ul.cluster.nodes[1].runtime.del(&pod.sandbox, None)?;
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "ADD kept succeeding with a bad MTU label"
        );
    };
    assert!(
        last.contains("pn1.provider-network.kubernetes.io/mtu") && last.contains("jumbo"),
        "{last}"
    );
    Ok(())
}

/// §4.2 tests 9 and 10: ADD of a pod on an underlay subnet waits (bounded) for ovn-controller's
/// localnet patch port, so a node whose provider network is not ready fails ADD naming the port,
/// and an ADD under way completes once the bridge mapping appears; the physical gateway must
/// answer ARP before ADD succeeds, unless the subnet has `disableGatewayCheck`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_waits_for_the_localnet_patch_port_and_for_the_gateway_to_answer() -> Result<()> {
    let ul = Underlay::start(
        Options {
            daemon_flags: vec!["--gateway-check-max-retry=3".into()],
            node_flags: vec![vec!["--wait-ovn-installed-timeout=6s".into()]],
            ..Options::default()
        },
        1500,
    )
    .await?;
    ul.map(1)?;
    let gw = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    let v100 = UnderlaySubnet::new("ul100", "10.100.0.0/24", "10.100.0.1", 100);
    ul.subnet(&v100, json!({})).await?;

    // Node 0 has no bridge mapping: no patch port, ADD fails after the bound and leaves nothing.
    let (_, run) = ul.try_pod(&v100, "early", 0, ip("10.100.0.40"), &[]).await?;
    assert!(!run.success, "ADD without the patch port succeeded");
    assert!(
        run.stdout
            .contains("waiting for localnet patch port patch-localnet.ul100-to-br-int"),
        "{}",
        run.stdout
    );
    assert_eq!(pod_ports(&ul, 0)?, Vec::<String>::new());

    // An ADD under way when the mapping appears completes, and the pod reaches its gateway.
    let node0 = &ul.cluster.nodes[0];
    let waits = || {
        node0
            .daemon
            .log()
            .matches("waiting for localnet patch port")
            .count()
    };
    let add = ul.try_pod(&v100, "late", 0, ip("10.100.0.41"), &[]);
    let map_when_waiting = async {
        wait_until_async("the daemon to wait for the patch port again", WAIT, || async {
            Ok(waits() >= 2)
        })
        .await?;
        ul.map(0)
    };
    let ((late, run), ()) = tokio::try_join!(add, map_when_waiting)?;
    assert!(run.success, "{}\n{}", run.stdout, node0.daemon.log_tail(20));
    assert!(late.netns.ping(ip("10.100.0.1")));

    // The gateway does not answer: ADD fails with Kube-OVN's message after the retries, and
    // leaves nothing on the node.
    ul.router.set_up(&gw, false)?;
    let (_, run) = ul.try_pod(&v100, "nogw", 1, ip("10.100.0.50"), &[]).await?;
    assert!(!run.success, "ADD succeeded with the gateway down");
    assert!(
        run.stdout.contains(
            "network 10.100.0.50/24 with gateway 10.100.0.1 is not ready for interface eth0 after 3 checks"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(pod_ports(&ul, 1)?, Vec::<String>::new());

    // disableGatewayCheck: the same pod is made (the daemon's subnet cache may lag the patch
    // for a moment: a refused ADD is tried again, bounded).
    ul.patch_subnet("ul100", json!({"disableGatewayCheck": true}))
        .await?;
    let deadline = std::time::Instant::now() + PATH_WAIT;
    let mut n = 0;
    let blind = loop {
        n += 1;
        let (pod, run) = ul
            .try_pod(
                &v100,
                &format!("blind{n}"),
                1,
                ip(&format!("10.100.0.{}", 50 + n)),
                &[],
            )
            .await?;
        if run.success {
            break pod;
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "ADD still refused with disableGatewayCheck: {}",
            run.stdout
        );
    };
    assert!(!blind.netns.ping(ip("10.100.0.1")), "the gateway is down");
    ul.router.set_up(&gw, true)?;
    wait_ping(&blind, ip("10.100.0.1"))?;
    Ok(())
}
