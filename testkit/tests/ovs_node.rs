//! Nodes as network namespaces: the netns helpers, an OVS node on the userspace datapath, and two
//! nodes registered as OVN chassis with a geneve tunnel over a veth underlay. These need root
//! and the OVS/OVN packages; without them they fail (scripts/install-deps.sh), never skip.

use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use kube_ovn_testkit::{Netns, OvnCentral, OvsNode, netns, tcp_transfer, wait_until};

/// PIDs of the processes inside a netns (`ip netns pids`).
fn pids_in(ns: &Netns) -> Vec<u32> {
    kube_ovn_testkit::run("ip", &["netns", "pids", ns.name()])
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect()
}

/// Appends every node's log tail to an error, so a timeout says what the daemons were doing.
fn with_logs<T>(r: anyhow::Result<T>, nodes: &[&OvsNode]) -> anyhow::Result<T> {
    r.map_err(|e| {
        let logs: String = nodes.iter().map(|n| n.logs_tail(15)).collect();
        anyhow::anyhow!("{e:#}\n{logs}")
    })
}

#[test]
fn node_runs_netdev_bridges_in_its_netns_and_cleans_up() {
    let mut node = OvsNode::start("kt-n").unwrap();
    node.check_alive().unwrap();
    let ns = node.netns().name().to_owned();
    // Creating br-int is the CNI daemon's job, not the fixture's.
    let bridges = node.vsctl(&["list-br"]).unwrap();
    assert!(bridges.trim().is_empty(), "fresh node has bridges: {bridges}");

    node.vsctl(&[
        "add-br",
        "br-test",
        "--",
        "set",
        "Bridge",
        "br-test",
        "datapath_type=netdev",
        "--",
        "add-port",
        "br-test",
        "p0",
        "--",
        "set",
        "Interface",
        "p0",
        "type=internal",
    ])
    .unwrap();
    node.check_interface("br-test").unwrap();
    node.check_interface("p0").unwrap();
    // vsctl waited for ovs-vswitchd, so the internal ports are tap devices in the node's netns
    // right now, and not in the host's.
    for dev in ["br-test", "p0"] {
        let link = kube_ovn_testkit::run("ip", &["-n", &ns, "link", "show", dev]).unwrap();
        assert!(link.contains(dev), "{link}");
        assert!(
            kube_ovn_testkit::run("ip", &["link", "show", dev]).is_err(),
            "{dev} leaked into the host netns"
        );
    }
    let dpif = node.appctl(&["dpif/show"]).unwrap();
    assert!(dpif.contains("netdev@ovs-netdev"), "{dpif}");
    // ovs-vswitchd aborting (OVS 3.1's userspace conntrack can) is survived as ovs-ctl makes a
    // production node survive it: the monitor starts a new one, which rebuilds the bridges and
    // their ports from the database.
    let crashed = node.vswitchd_pid().unwrap();
    kube_ovn_testkit::run("kill", &["-ABRT", &crashed.to_string()]).unwrap();
    wait_until(
        "a new ovs-vswitchd serving br-test after the crash",
        Duration::from_secs(20),
        || {
            Ok(node.vswitchd_pid().is_some_and(|pid| pid != crashed)
                && node
                    .appctl(&["dpif/show"])
                    .is_ok_and(|dpif| dpif.contains("br-test")))
        },
    )
    .map_err(|e| anyhow::anyhow!("{e:#}\n{}", node.logs_tail(15)))
    .unwrap();
    node.check_alive().unwrap();
    node.check_interface("p0").unwrap();
    // A port that cannot be opened is reported, although ovs-vsctl exits 0 for it.
    node.vsctl(&["add-port", "br-test", "no-such-dev"]).unwrap();
    assert!(node.check_interface("no-such-dev").is_err());

    let pids = pids_in(node.netns());
    assert_eq!(
        pids.len(),
        3,
        "ovsdb-server, ovs-vswitchd and its monitor expected in {ns}: {pids:?}"
    );
    let dir = node.dir().to_owned();
    let path = node.netns().path();
    drop(node);
    for pid in pids {
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "daemon {pid} outlived the node"
        );
    }
    assert!(!path.exists(), "netns {ns} outlived the node");
    assert!(!dir.exists(), "{} outlived the node", dir.display());
}

#[test]
fn two_nodes_become_chassis_with_a_geneve_tunnel() {
    let central = OvnCentral::start().unwrap();
    let mut a = OvsNode::start("kt-a").unwrap();
    let mut b = OvsNode::start("kt-b").unwrap();
    // The underlay addresses exist only inside the two namespaces, so tests running side by side
    // can all use them.
    let (ip_a, ip_b) = (Ipv4Addr::new(172, 30, 0, 1), Ipv4Addr::new(172, 30, 0, 2));
    OvsNode::connect_underlay(&a, ip_a, &b, ip_b, 24).unwrap();
    with_logs(a.netns().wait_ping(ip_b, Duration::from_secs(10)), &[&a, &b]).unwrap();
    let link = a.netns().ip(&["link", "show", "br-ul"]).unwrap();
    assert!(link.contains("mtu 1500"), "{link}");
    // TCP between the node addresses crosses both OVS bridges (tap, veth, veth, tap).
    let tcp = tcp_transfer(
        b.netns(),
        ip_b.into(),
        5001,
        a.netns(),
        1 << 20,
        Duration::from_secs(20),
    );
    with_logs(tcp, &[&a, &b]).unwrap();

    for (node, ip) in [(&a, ip_a), (&b, ip_b)] {
        node.configure_chassis(&central.sb_remote(), ip).unwrap();
        let ids = node.vsctl(&["get", "Open_vSwitch", ".", "external_ids"]).unwrap();
        for want in [
            format!("system-id={}", node.name()),
            format!("ovn-encap-ip=\"{ip}\""),
            "ovn-encap-type=geneve".into(),
            "ovn-bridge=br-int".into(),
            "ovn-bridge-datapath-type=netdev".into(),
        ] {
            assert!(
                ids.contains(&want) || ids.contains(&want.replace('=', "=\"")),
                "{want} not in {ids}"
            );
        }
    }
    let started = Instant::now();
    a.start_ovn_controller().unwrap();
    b.start_ovn_controller().unwrap();

    let registered = wait_until("both chassis in ovn-sbctl show", Duration::from_secs(30), || {
        let show = central.sbctl(&["show"])?;
        Ok(show.contains(a.name()) && show.contains(b.name()))
    });
    with_logs(registered, &[&a, &b]).unwrap();
    for (node, peer_ip) in [(&a, ip_b), (&b, ip_a)] {
        let tunnel = wait_until(
            &format!("a geneve port to {peer_ip} on br-int of {}", node.name()),
            Duration::from_secs(30),
            || {
                let ports = node.vsctl(&["list-ports", "br-int"])?;
                for port in ports.lines() {
                    let kind = node.vsctl(&["get", "Interface", port, "type"])?;
                    let options = node.vsctl(&["get", "Interface", port, "options"])?;
                    if kind.trim() == "geneve" && options.contains(&format!("remote_ip=\"{peer_ip}\"")) {
                        return Ok(true);
                    }
                }
                Ok(false)
            },
        );
        with_logs(tunnel, &[&a, &b]).unwrap();
        // ovn-controller made br-int itself, on the datapath the node can run.
        let dp = node.vsctl(&["get", "Bridge", "br-int", "datapath_type"]).unwrap();
        assert_eq!(dp.trim(), "netdev");
    }
    eprintln!(
        "chassis and tunnels up {:?} after starting ovn-controller",
        started.elapsed()
    );
    let status = a.ovn_appctl(&["connection-status"]).unwrap();
    assert_eq!(status.trim(), "connected");

    // A crash leaves the node running, and ovn-controller comes back with the same chassis.
    a.kill_ovn_controller();
    assert!(a.ovn_appctl(&["version"]).is_err());
    a.check_alive().unwrap();
    a.start_ovn_controller().unwrap();
    let reconnected = wait_until(
        "ovn-controller to reconnect to SB",
        Duration::from_secs(30),
        || Ok(a.ovn_appctl(&["connection-status"])?.trim() == "connected"),
    );
    with_logs(reconnected, &[&a]).unwrap();
    b.stop_ovn_controller();
    b.check_alive().unwrap();
}

/// Two plain namespaces joined by a veth, 10.99.0.1/24 and .2: no OVS on the path, so no TX
/// checksum offload problem either.
fn veth_pair() -> (Netns, Netns) {
    let a = Netns::create("kt-ta").unwrap();
    let b = Netns::create("kt-tb").unwrap();
    // Both ends are created inside their namespaces, so the names cannot clash with another test.
    netns::veth_pair(a.name(), "eth0", b.name(), "eth0", 1500).unwrap();
    for (ns, ip) in [(&a, "10.99.0.1/24"), (&b, "10.99.0.2/24")] {
        ns.ip(&["addr", "add", ip, "dev", "eth0"]).unwrap();
        ns.ip(&["link", "set", "eth0", "up"]).unwrap();
    }
    (a, b)
}

#[test]
fn run_enters_the_netns_on_its_own_thread() {
    let ns = Netns::create("kt-r").unwrap();
    let inode = |p: &str| std::fs::metadata(p).unwrap().ino();
    let netns_inode = std::fs::metadata(ns.path()).unwrap().ino();
    let inside = ns.run(|| inode("/proc/thread-self/ns/net")).unwrap();
    assert_eq!(inside, netns_inode);
    // The caller's thread never moved.
    assert_ne!(inode("/proc/thread-self/ns/net"), netns_inode);
    let err = ns.run(|| panic!("boom")).unwrap_err();
    assert!(err.to_string().contains("boom"), "{err}");
    assert!(ns.exec(&["false"]).unwrap_err().to_string().contains("false"));

    let path = ns.path();
    ns.delete().unwrap();
    assert!(!path.exists());
}

/// The underlay bridge, as the lab's nodes and the tests' nodes make it: the NIC is its only
/// port, the bridge's internal port has MTU 1500, and making it again changes nothing (a node
/// brought up again).
#[test]
fn the_underlay_bridge_takes_the_nic_and_a_second_run_changes_nothing() {
    let node = OvsNode::start("kt-ul").unwrap();
    node.netns()
        .ip(&["link", "add", "nic0", "type", "veth", "peer", "name", "nic0p"])
        .unwrap();
    for _ in 0..2 {
        kube_ovn_testkit::add_underlay_bridge(&node.db_remote(), Duration::from_secs(20), "nic0").unwrap();
    }
    node.check_interface(kube_ovn_testkit::UNDERLAY_BRIDGE).unwrap();
    node.check_interface("nic0").unwrap();
    let ports = node.vsctl(&["list-ports", "br-ul"]).unwrap();
    assert_eq!(ports.trim(), "nic0");
    let datapath = node.vsctl(&["get", "Bridge", "br-ul", "datapath_type"]).unwrap();
    assert_eq!(datapath.trim(), "netdev");
    let link = node.netns().ip(&["link", "show", "br-ul"]).unwrap();
    assert!(link.contains("mtu 1500"), "{link}");
}

/// The lab's namespaces are made and deleted by name: `lo` is up in a new one, a command runs
/// inside it, and deleting it twice is fine (`down` after a half-made `up`).
#[test]
fn a_namespace_by_name_is_made_with_lo_up_and_deleted_once_or_twice() {
    let name = format!("kt-byname-{}", std::process::id());
    netns::add_netns(&name).unwrap();
    assert!(netns::netns_exists(&name));
    let lo = netns::ip(&name, &["link", "show", "lo"]).unwrap();
    assert!(lo.contains(",UP"), "{lo}");
    let inside = netns::exec(&name, "readlink", &["/proc/self/ns/net"]).unwrap();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    assert_ne!(
        inside.trim(),
        host.to_string_lossy(),
        "exec ran outside the namespace"
    );
    let err = netns::exec(&name, "false", &[]).unwrap_err();
    assert!(err.command.contains(&name), "{err}");
    netns::del_netns(&name).unwrap();
    assert!(!netns::netns_exists(&name));
    netns::del_netns(&name).unwrap();
}

#[test]
fn tcp_transfer_moves_1mb_over_a_veth() {
    let (a, b) = veth_pair();
    let server_ip = IpAddr::V4(Ipv4Addr::new(10, 99, 0, 2));
    b.wait_ping(Ipv4Addr::new(10, 99, 0, 1), Duration::from_secs(10))
        .unwrap();
    assert!(a.ping(server_ip));
    let started = Instant::now();
    tcp_transfer(&b, server_ip, 5001, &a, 1 << 20, Duration::from_secs(20)).unwrap();
    eprintln!("1 MiB in {:?}", started.elapsed());
    // The port is free again for the next connection: nothing is left listening.
    tcp_transfer(&b, server_ip, 5001, &a, 1, Duration::from_secs(20)).unwrap();
}

#[test]
fn tcp_transfer_fails_fast_and_says_why() {
    let (a, b) = veth_pair();
    // The server netns has no such address: binding fails at once.
    let err = tcp_transfer(
        &b,
        "10.99.0.9".parse().unwrap(),
        5001,
        &a,
        10,
        Duration::from_secs(10),
    )
    .unwrap_err();
    assert!(format!("{err:#}").contains("bind 10.99.0.9:5001"), "{err:#}");
    // The client has no route to the server: connecting fails at once, and the server gives up
    // at the deadline instead of waiting for a client forever.
    b.ip(&["addr", "add", "10.98.0.2/32", "dev", "lo"]).unwrap();
    let started = Instant::now();
    let err = tcp_transfer(
        &b,
        "10.98.0.2".parse().unwrap(),
        5001,
        &a,
        10,
        Duration::from_secs(2),
    )
    .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(
        format!("{err:#}").contains("connect to 10.98.0.2:5001"),
        "{err:#}"
    );
}
