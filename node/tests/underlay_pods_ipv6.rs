//! Pods on dual-stack and IPv6 underlay subnets (Kube-OVN runs its underlay e2e on IPv4, IPv6
//! and dual-stack clusters), with the fabric of `underlay_pods.rs`: real OVS on the userspace
//! datapath, real OVN, the real daemon and shim, and the fabric's router as the physical
//! gateway of each family. The controller's rows are written by the test (common/underlay.rs).
//!
//! What is asserted is what a pod sees: both addresses and both default routes, the CNI ADD's
//! gateway check waiting for the IPv6 gateway too (Kube-OVN pings an IPv6 gateway where it
//! arpings an IPv4 one), IPv6 frames tagged on the wire with the pod's own MAC and address, and
//! Kube-OVN's "should support IPv6 connectivity to node IPs when pod start immediately": the
//! pod's first ping to an IPv6 address on its network, sent as ADD returns, is answered. The
//! daemon adds the pod's IPv6 addresses with `nodad` (`dataplane::route::add_address`): OVN's
//! IPAM made them unique, and duplicate address detection would keep them tentative, unusable
//! as a source, for a second or more after ADD.

mod common;

use std::net::IpAddr;

use anyhow::{Context, Result};
use common::underlay::{PATH_WAIT, PodAddrs, Underlay, UnderlaySubnet, wait_ping};
use common::{Options, TestPod};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_api::crd::Subnet;
use kube_ovn_testkit::wait_until_async;
use serde_json::json;

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP literal")
}

/// The pods' ports on `br-int` of node `node` (not ovn-controller's patch ports).
fn pod_ports(ul: &Underlay, node: usize) -> Result<Vec<String>> {
    let mut ports = ul.cluster.nodes[node].pod_ports()?;
    ports.retain(|p| !p.starts_with("patch-"));
    Ok(ports)
}

/// The pod's MAC from its CNI result.
fn mac(pod: &TestPod) -> String {
    pod.result["interfaces"][0]["mac"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `ip -6 addr show dev eth0` in the pod, with the address `addr` on its line.
fn ipv6_line(pod: &TestPod, addr: &str) -> Result<String> {
    let out = pod.netns.ip(&["-6", "addr", "show", "dev", "eth0"])?;
    out.lines()
        .find(|l| l.contains(&format!("inet6 {addr}/")))
        .map(str::to_owned)
        .with_context(|| format!("{addr} on {}'s eth0: {out}", pod.name))
}

/// A dual-stack underlay subnet on VLAN 100 and an IPv6-only one on VLAN 300, the router the
/// gateway of each family. A pod gets both addresses and a default route per family, its ADD
/// returns once both gateways answered, and its first ping to an IPv6 host of its VLAN (one
/// that never heard of it) is answered; the echo is on the trunk tagged 100 with the pod's MAC
/// and address. Pod to pod across nodes over IPv6 goes over the fabric, tagged. The
/// IPv6-only pod has no IPv4 address, reaches its gateway at once, tagged 300.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dual_stack_underlay_pods_reach_both_gateways_tagged_and_answer_ipv6_at_once() -> Result<()> {
    let ul = Underlay::start(Options::default(), 1500).await?;
    ul.map(0)?;
    ul.map(1)?;
    let gw100 = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    ul.router.add_address(&gw100, "fd00:100::1/64")?;
    // Another host of VLAN 100, with an IPv6 address only: the pods' first packets to it need
    // neighbour discovery both ways (Kube-OVN's case pings a node's address on the network).
    let host = ul.router.add_vlan_gateway(100, "fd00:100::99/64")?;
    let gw300 = ul.router.add_vlan_gateway(300, "fd00:300::1/64")?;
    let dual = UnderlaySubnet::new(
        "uldual",
        "10.100.0.0/24,fd00:100::/64",
        "10.100.0.1,fd00:100::1",
        100,
    );
    let v6only = UnderlaySubnet::new("ulsix", "fd00:300::/64", "fd00:300::1", 300);
    ul.subnet(&dual, json!({})).await?;
    ul.subnet(&v6only, json!({})).await?;

    let trunk0 = ul.router.capture(&ul.trunks[0])?;
    let a = ul
        .pod(&dual, "a", 0, [ip("10.100.0.10"), ip("fd00:100::10")], &[])
        .await?;
    // Kube-OVN's case: `ping6 -c 1 -w 1 <address>` as the pod starts, one try.
    assert!(
        a.netns.ping(ip("fd00:100::99")),
        "a's first ping to an IPv6 host of its VLAN, right after ADD, went unanswered"
    );
    assert!(a.netns.ping(ip("fd00:100::1")), "a pings its IPv6 gateway");
    assert!(a.netns.ping(ip("10.100.0.1")), "a pings its IPv4 gateway");

    // Both families in the CNI result and on eth0; the IPv6 address usable at once.
    let ips: Vec<&str> = a.result["ips"]
        .as_array()
        .context("ips in the result")?
        .iter()
        .filter_map(|i| i["address"].as_str())
        .collect();
    assert_eq!(ips, ["10.100.0.10/24", "fd00:100::10/64"], "{}", a.result);
    let line = ipv6_line(&a, "fd00:100::10")?;
    assert!(!line.contains("tentative"), "{line}");
    let v4_default = a.netns.ip(&["-4", "route", "show", "default"])?;
    assert!(v4_default.contains("via 10.100.0.1 dev eth0"), "{v4_default}");
    let v6_default = a.netns.ip(&["-6", "route", "show", "default"])?;
    assert!(v6_default.contains("via fd00:100::1 dev eth0"), "{v6_default}");

    // On the trunk: tagged 100, the pod's own MAC and address, to the router's MAC.
    let echo = trunk0.wait_frame("a's IPv6 echo to the host, tagged 100", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("fd00:100::10") && f.dst_ip.as_deref() == Some("fd00:100::99")
    })?;
    assert_eq!(echo.ethertype, "IPv6", "{}", echo.line);
    assert_eq!(echo.vlan, Some(100), "{}", echo.line);
    assert_eq!(echo.src_mac, mac(&a), "the pod's own MAC: {}", echo.line);
    assert_eq!(echo.dst_mac, ul.router.mac(&host)?, "{}", echo.line);
    let to_gw = trunk0.wait_frame("a's IPv6 echo to its gateway", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("fd00:100::10") && f.dst_ip.as_deref() == Some("fd00:100::1")
    })?;
    assert_eq!(to_gw.vlan, Some(100), "{}", to_gw.line);
    assert_eq!(to_gw.dst_mac, ul.router.mac(&gw100)?, "{}", to_gw.line);

    // Pod to pod across nodes over IPv6: through node 0's trunk, tagged.
    let b = ul
        .pod(&dual, "b", 1, [ip("10.100.0.11"), ip("fd00:100::11")], &[])
        .await?;
    wait_ping(&a, ip("fd00:100::11"))?;
    let across = trunk0.wait_frame("a's IPv6 echo to b on the trunk", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("fd00:100::10") && f.dst_ip.as_deref() == Some("fd00:100::11")
    })?;
    assert_eq!(across.vlan, Some(100), "{}", across.line);
    assert!(b.netns.ping(ip("10.100.0.10")), "b reaches a over IPv4 too");

    // IPv6 only: one address, one default route, no IPv4; tagged 300.
    let z = ul.pod(&v6only, "z", 0, [ip("fd00:300::10")], &[]).await?;
    assert!(z.netns.ping(ip("fd00:300::1")), "z's first ping to its gateway");
    assert_eq!(z.result["ips"].as_array().map(Vec::len), Some(1), "{}", z.result);
    assert_eq!(z.netns.ip(&["-4", "addr", "show", "dev", "eth0"])?.trim(), "");
    let v6_default = z.netns.ip(&["-6", "route", "show", "default"])?;
    assert!(v6_default.contains("via fd00:300::1 dev eth0"), "{v6_default}");
    let tagged = trunk0.wait_frame("z's echo to its gateway", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("fd00:300::10") && f.dst_ip.as_deref() == Some("fd00:300::1")
    })?;
    assert_eq!(tagged.vlan, Some(300), "{}", tagged.line);
    assert_eq!(tagged.dst_mac, ul.router.mac(&gw300)?, "{}", tagged.line);
    Ok(())
}

/// The gateway check of a dual-stack underlay pod covers the IPv6 gateway: with the router
/// answering ARP for 10.100.0.1 but not owning fd00:100::1, ADD fails after
/// `--gateway-check-max-retry` pings naming the IPv6 gateway and leaves nothing on the node;
/// with `disableGatewayCheck` the same pod is made, and its IPv6 address is usable at once
/// (nothing waited for it). An ADD checking the IPv6 gateway completes when the router takes
/// the address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_ipv6_gateway_fails_add_unless_the_check_is_disabled() -> Result<()> {
    let ul = Underlay::start(
        Options {
            daemon_flags: vec!["--gateway-check-max-retry=5".into()],
            ..Options::default()
        },
        1500,
    )
    .await?;
    ul.map(0)?;
    let gw = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    ul.router.add_vlan_gateway(100, "fd00:100::99/64")?;
    let checked = UnderlaySubnet::new(
        "ulcheck",
        "10.100.0.0/24,fd00:100::/64",
        "10.100.0.1,fd00:100::1",
        100,
    );
    let blind = UnderlaySubnet::new(
        "ulblind",
        "10.100.0.0/24,fd00:100::/64",
        "10.100.0.1,fd00:100::1",
        100,
    );
    ul.subnet(&checked, json!({})).await?;
    ul.subnet(&blind, json!({"disableGatewayCheck": true})).await?;

    let (_, run) = ul
        .try_pod(&checked, "nogw", 0, [ip("10.100.0.20"), ip("fd00:100::20")], &[])
        .await?;
    assert!(!run.success, "ADD succeeded without an IPv6 gateway");
    assert!(
        run.stdout.contains(
            "network fd00:100::20/64 with gateway fd00:100::1 is not ready for interface eth0 after 5 checks"
        ),
        "{}",
        run.stdout
    );
    assert_eq!(pod_ports(&ul, 0)?, Vec::<String>::new());

    // disableGatewayCheck: made all the same; its IPv6 address is a source at once.
    let c = ul
        .pod(&blind, "c", 0, [ip("10.100.0.21"), ip("fd00:100::21")], &[])
        .await?;
    assert!(
        c.netns.ping(ip("fd00:100::99")),
        "c's first ping to an IPv6 host of its VLAN, right after ADD, went unanswered"
    );
    assert!(!c.netns.ping(ip("fd00:100::1")), "nobody owns the IPv6 gateway");
    assert!(c.netns.ping(ip("10.100.0.1")));

    // An ADD whose check is pinging the IPv6 gateway (its IPv4 one has answered) completes
    // once the router takes the address.
    let node0 = &ul.cluster.nodes[0];
    let v4_ready = || {
        node0
            .daemon
            .log()
            .lines()
            .filter(|l| l.contains("ul/d") && l.contains("gateway is ready"))
            .any(|l| l.contains("\"gateway\":\"10.100.0.1\""))
    };
    let add = ul.try_pod(&checked, "d", 0, [ip("10.100.0.22"), ip("fd00:100::22")], &[]);
    let answer_when_checking = async {
        wait_until_async("d's check to reach the IPv6 gateway", PATH_WAIT, || async {
            Ok(v4_ready())
        })
        .await?;
        ul.router.add_address(&gw, "fd00:100::1/64")
    };
    let ((d, run), ()) = tokio::try_join!(add, answer_when_checking)?;
    assert!(run.success, "{}\n{}", run.stdout, node0.daemon.log_tail(20));
    let log = node0.daemon.log();
    let v6_ready = log
        .lines()
        .filter(|l| l.contains("ul/d") && l.contains("gateway is ready"))
        .find(|l| l.contains("\"gateway\":\"fd00:100::1\""))
        .context("d's IPv6 gateway check in the daemon's log")?;
    assert!(
        !v6_ready.contains("\"checks\":1,"),
        "answered at the first ping: {v6_ready}"
    );
    assert!(
        d.netns.ping(ip("fd00:100::1")),
        "d's first ping to its IPv6 gateway"
    );
    Ok(())
}

/// ADD of a new pod, tried again (bounded) while the daemon's subnet cache does not have the
/// subnet's `status.u2oInterconnectionIP` yet (the test writes it just before); the last run.
async fn try_u2o_pod(
    ul: &Underlay,
    subnet: &UnderlaySubnet,
    name: &str,
    ips: impl PodAddrs + Copy,
) -> Result<(TestPod, common::runtime::PluginRun)> {
    let deadline = std::time::Instant::now() + PATH_WAIT;
    let mut n = 0;
    loop {
        n += 1;
        let pod_name = format!("{name}{n}");
        let (pod, run) = ul.try_pod(subnet, &pod_name, 0, ips, &[]).await?;
        if run.success || !run.stdout.contains("failed to generate u2o ip") {
            return Ok((pod, run));
        }
        // The logical port of the refused try goes, so the next one can take the addresses.
        ul.cluster.ovn.nbctl(&["lsp-del", &format!("{pod_name}.ul")])?;
        ul.cluster.delete_pod_object("ul", &pod_name).await?;
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the daemon never saw the U2O addresses: {}",
            run.stdout
        );
    }
}

/// U2O on a dual-stack underlay subnet, as the daemon sees it (Kube-OVN's
/// `configureContainerNic`): the default route of each family goes through that family's U2O
/// address (the subnet's port on the VPC router), and the gateway check probes the U2O
/// addresses before the physical gateways — a router port without the IPv6 U2O address fails
/// ADD naming it. With the port on both, the pod reaches an address beyond the physical router
/// through OVN's router (the routed echo leaves on the trunk, tagged, from the router port's
/// MAC), with the rows the controller writes (the router port, its switch port, policies 1
/// and 3 per family) written here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u2o_pods_route_each_family_through_the_router_port_checked_first() -> Result<()> {
    let ul = Underlay::start(
        Options {
            daemon_flags: vec!["--gateway-check-max-retry=3".into()],
            ..Options::default()
        },
        1500,
    )
    .await?;
    ul.map(0)?;
    let gw = ul.router.add_vlan_gateway(100, "10.100.0.1/24")?;
    ul.router.add_address(&gw, "fd00:100::1/64")?;
    // Beyond the physical router: what only a default route reaches.
    ul.router.add_address(&gw, "192.0.2.1/24")?;
    ul.router.add_address(&gw, "2001:db8:1::1/64")?;
    let u2o = UnderlaySubnet::new(
        "ulu2o",
        "10.100.0.0/24,fd00:100::/64",
        "10.100.0.1,fd00:100::1",
        100,
    );
    ul.subnet(&u2o, json!({"u2oInterconnection": true})).await?;
    Api::<Subnet>::all(ul.cluster.kube.clone())
        .patch_status(
            "ulu2o",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"u2oInterconnectionIP": "10.100.0.2,fd00:100::2"}})),
        )
        .await?;
    // The VPC router's port on the subnet, on the IPv4 U2O address only for now.
    let router_mac = "0a:00:00:00:aa:01";
    let ovn = &ul.cluster.ovn;
    ovn.nbctl(&["lr-add", "vpc-r"])?;
    ovn.nbctl(&["lrp-add", "vpc-r", "vpc-r-ulu2o", router_mac, "10.100.0.2/24"])?;
    ovn.nbctl(&[
        "lsp-add",
        "ulu2o",
        "ulu2o-vpc-r",
        "--",
        "lsp-set-type",
        "ulu2o-vpc-r",
        "router",
        "--",
        "lsp-set-addresses",
        "ulu2o-vpc-r",
        "router",
        "--",
        "lsp-set-options",
        "ulu2o-vpc-r",
        "router-port=vpc-r-ulu2o",
    ])?;
    // As on Kube-OVN's ovn-cluster, the router's default routes go to the join network (a
    // port with nothing behind it here): off-subnet traffic leaves for the physical gateway only
    // because policy3 (29000: from the subnet, reroute) says so; policy1 (29400: to the subnet,
    // allow) keeps the router's own replies to the pods on the subnet.
    ovn.nbctl(&[
        "lrp-add",
        "vpc-r",
        "vpc-r-join",
        "0a:00:00:00:aa:02",
        "100.64.0.1/16",
        "fd00:100:64::1/112",
    ])?;
    ovn.nbctl(&["lr-route-add", "vpc-r", "0.0.0.0/0", "100.64.0.254"])?;
    ovn.nbctl(&["lr-route-add", "vpc-r", "::/0", "fd00:100:64::254"])?;
    for (priority, m, action) in [
        ("29400", "ip4.dst == 10.100.0.0/24", vec!["allow"]),
        ("29400", "ip6.dst == fd00:100::/64", vec!["allow"]),
        ("29000", "ip4.src == 10.100.0.0/24", vec!["reroute", "10.100.0.1"]),
        (
            "29000",
            "ip6.src == fd00:100::/64",
            vec!["reroute", "fd00:100::1"],
        ),
    ] {
        let mut args = vec!["lr-policy-add", "vpc-r", priority, m];
        args.extend(action);
        ovn.nbctl(&args)?;
    }

    let (_, run) = try_u2o_pod(&ul, &u2o, "nou2o", [ip("10.100.0.20"), ip("fd00:100::20")]).await?;
    assert!(!run.success, "ADD succeeded without the IPv6 U2O address");
    assert!(
        run.stdout.contains(
            "network fd00:100::20/64 with gateway fd00:100::2 is not ready for interface eth0 after 3 checks"
        ),
        "{}",
        run.stdout
    );

    ovn.nbctl(&[
        "set",
        "Logical_Router_Port",
        "vpc-r-ulu2o",
        "networks=[\"10.100.0.2/24\",\"fd00:100::2/64\"]",
    ])?;
    let trunk0 = ul.router.capture(&ul.trunks[0])?;
    let (a, run) = try_u2o_pod(&ul, &u2o, "a", [ip("10.100.0.10"), ip("fd00:100::10")]).await?;
    anyhow::ensure!(
        run.success,
        "ADD with both U2O addresses failed: {}\n{}",
        run.stdout,
        ul.cluster.nodes[0].daemon.log_tail(30)
    );
    let v4_default = a.netns.ip(&["-4", "route", "show", "default"])?;
    assert!(v4_default.contains("via 10.100.0.2 dev eth0"), "{v4_default}");
    let v6_default = a.netns.ip(&["-6", "route", "show", "default"])?;
    assert!(v6_default.contains("via fd00:100::2 dev eth0"), "{v6_default}");
    assert!(
        a.netns.ping(ip("fd00:100::2")),
        "a's first ping to its IPv6 U2O address"
    );
    // The CNI result reports the default routes as installed (Kube-OVN's `finalRoutes`), the
    // addresses' gateways staying the physical ones.
    let routes = &a.result["routes"];
    for (dst, gw) in [("0.0.0.0/0", "10.100.0.2"), ("::/0", "fd00:100::2")] {
        assert!(
            routes
                .as_array()
                .is_some_and(|r| r.contains(&json!({"dst": dst, "gw": gw}))),
            "{dst} via {gw} in {}",
            a.result
        );
    }
    assert_eq!(a.result["ips"][1]["gateway"], "fd00:100::1", "{}", a.result);

    // Off the subnet: through OVN's router (policy3 to the physical gateway), out tagged.
    wait_ping(&a, ip("2001:db8:1::1"))?;
    let routed = trunk0.wait_frame("a's routed IPv6 echo on the trunk", PATH_WAIT, |f| {
        f.src_ip.as_deref() == Some("fd00:100::10") && f.dst_ip.as_deref() == Some("2001:db8:1::1")
    })?;
    assert_eq!(routed.vlan, Some(100), "{}", routed.line);
    assert_eq!(routed.src_mac, router_mac, "routed by OVN: {}", routed.line);
    assert_eq!(routed.dst_mac, ul.router.mac(&gw)?, "{}", routed.line);
    wait_ping(&a, ip("192.0.2.1"))?;
    Ok(())
}
