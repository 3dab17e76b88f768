//! The lab's underlay (Kube-OVN's underlay guide, `examples/lab/40-underlay.yaml`) and the VLAN
//! fabric under it, checked on a lab that is up, as a user sees them: `kubectl`, the matrix,
//! the nodes' links and the ToR.

use anyhow::{Context, Result, ensure};
use kube_ovn_testkit::wait_until;

use kube_ovn_lab::cluster::tor;

use super::{Lab, WAIT};

/// The ToR's BGP sessions, `(node, established)`, as `status` reads them.
pub fn sessions(lab: &Lab) -> Result<Vec<(String, bool)>> {
    let state = lab.state()?;
    let t = kube_ovn_lab::cluster::topology::Topology::new(&lab.name, state.nodes, state.tor, lab.dir.path())
        .map_err(anyhow::Error::msg)?;
    let command = tor::sessions_command(state.tor);
    let mut args = vec!["tor", "--"];
    args.extend(command.iter().map(String::as_str));
    Ok(tor::sessions(state.tor, &t, &lab.ok(&args)?))
}

/// Pings `to` from a verb's namespace (`node node1`, `outside`, …) until it answers.
pub fn reaches(lab: &Lab, from: &[&str], to: &str) -> Result<()> {
    let mut args = from.to_vec();
    args.extend(["--", "ping", "-c", "1", "-W", "1", to]);
    wait_until(&format!("{} to reach {to}", from.join(" ")), WAIT, || {
        Ok(lab.run(&args)?.status.success())
    })
}

/// The VLAN fabric under the underlay, checked while no ProviderNetwork holds the nodes' `eth1`
/// (after [`the_nic_goes_back`]), which also shows the freed NIC works: every node's `eth1` reaches the
/// ToR's untagged 172.31.0.1; a port tagged 100 behind `eth1` (made here on the node's OVS, as
/// the daemon makes `br-<provider>`) reaches VLAN 100's gateway 10.100.0.1 with 802.1Q tag 100
/// on the wire, and the outside host reaches it through the ToR's connected route (no BGP);
/// an untagged port does not reach 10.100.0.1 on the wire; the BGP sessions stay up.
pub fn the_vlan_fabric_works(lab: &Lab, nodes: &[&str]) -> Result<()> {
    let before = sessions(lab)?;
    ensure!(
        before.iter().all(|(_, up)| *up),
        "BGP sessions before: {before:?}"
    );
    let ports = lab.ok(&["tor", "--", "ovs-vsctl", "list-ports", "tor-vlan"])?;
    for node in nodes {
        reaches(lab, &["node", node], "172.31.0.1")?;
        let trunk = format!("n{}-trunk", node.trim_start_matches("node"));
        ensure!(ports.lines().any(|p| p == trunk), "{trunk} in {ports:?}");
    }
    reaches(lab, &["outside"], "10.100.0.1")?;
    let route = lab.ok(&["tor", "--", "ip", "route", "show", "10.100.0.0/24"])?;
    ensure!(
        route.contains("dev vlan100 proto kernel scope link src 10.100.0.1") && route.lines().count() == 1,
        "the ToR's route to VLAN 100 is its connected one, no BGP route: {route:?}"
    );

    let node = nodes[0];
    // The ToR's end of the node's eth1 (`Topology`'s names: node<i> ↔ n<i>-trunk).
    let trunk = format!("n{}-trunk", node.trim_start_matches("node"));
    lab.ok(&[
        "node",
        node,
        "--",
        "ovs-vsctl",
        "add-br",
        "br-vt",
        "--",
        "set",
        "bridge",
        "br-vt",
        "datapath_type=netdev",
        "--",
        "add-port",
        "br-vt",
        "eth1",
        "--",
        "add-port",
        "br-vt",
        "vt100",
        "tag=100",
        "--",
        "set",
        "interface",
        "vt100",
        "type=internal",
        "--",
        "add-port",
        "br-vt",
        "vt0",
        "tag=0",
        "--",
        "set",
        "interface",
        "vt0",
        "type=internal",
    ])?;
    for (dev, addr) in [("vt100", "10.100.0.250/24"), ("vt0", "10.100.0.251/24")] {
        lab.ok(&["node", node, "--", "ip", "addr", "add", addr, "dev", dev])?;
        lab.ok(&["node", node, "--", "ip", "link", "set", dev, "up"])?;
    }
    // The ToR sees the node's frames to the gateway tagged 100 on the node's trunk.
    let seen = tagged_capture(lab, &trunk, "vlan 100 and icmp and src host 10.100.0.250", || {
        let ping = [
            "node",
            node,
            "--",
            "ping",
            "-c",
            "1",
            "-W",
            "1",
            "-I",
            "vt100",
            "10.100.0.1",
        ];
        Ok(lab.run(&ping)?.status.success())
    })?;
    ensure!(
        seen.contains("ethertype 802.1Q (0x8100)") && seen.contains("vlan 100,"),
        "a tagged port behind eth1 reaches 10.100.0.1 with tag 100 on the wire: {seen:?}"
    );
    reaches(lab, &["outside"], "10.100.0.250")?;
    let untagged = lab.run(&[
        "node",
        node,
        "--",
        "ping",
        "-c",
        "2",
        "-W",
        "1",
        "-I",
        "vt0",
        "10.100.0.1",
    ])?;
    let neighbour = lab.ok(&[
        "node",
        node,
        "--",
        "ip",
        "neigh",
        "show",
        "10.100.0.1",
        "dev",
        "vt0",
    ])?;
    ensure!(
        !untagged.status.success() && !neighbour.contains("lladdr"),
        "an untagged port must not reach VLAN 100's gateway on the wire, nor get an ARP answer for it: {neighbour:?}"
    );
    lab.ok(&["node", node, "--", "ovs-vsctl", "del-br", "br-vt"])?;
    reaches(lab, &["node", node], "172.31.0.1")?;
    let after = sessions(lab)?;
    ensure!(after.iter().all(|(_, up)| *up), "BGP sessions after: {after:?}");
    Ok(())
}

/// `kubectl get -o jsonpath=…` of one object; its output.
fn jsonpath(lab: &Lab, object: &[&str], path: &str) -> Result<String> {
    let path = format!("jsonpath={path}");
    let mut args = vec!["kubectl", "get"];
    args.extend(object);
    args.extend(["-o", &path]);
    lab.ok(&args)
}

/// Whether every BGP session of the ToR is Established; fails naming the ones that are not.
fn sessions_established(lab: &Lab, when: &str) -> Result<()> {
    let sessions = sessions(lab)?;
    ensure!(
        !sessions.is_empty() && sessions.iter().all(|(_, up)| *up),
        "BGP sessions {when}: {sessions:?}"
    );
    Ok(())
}

/// Kube-OVN's underlay guide as `up` applied it (`examples/lab/40-underlay.yaml`), seen with
/// `kubectl`, the matrix (`report`: up's or `matrix`'s output), the nodes and the ToR: the
/// ProviderNetwork ready on every node, the Vlan with its subnet, the subnet's U2O address; each
/// node's `eth1` address on `br-net1`; the matrix's underlay rows green (the outside host sees
/// each underlay pod's own address; underlay ↔ overlay both ways through U2O); an underlay pod's
/// ping to its gateway 10.100.0.1 tagged 100 on the node's trunk; and the ToR, on VLAN 100, gets
/// no ARP answer for the U2O address (Kube-OVN's "should drop ARP/ND request from localnet port
/// to LRP": every chassis would answer).
pub fn the_underlay_works(lab: &Lab, report: &str, nodes: &[&str]) -> Result<()> {
    let ready = jsonpath(lab, &["provider-network", "net1"], "{.status.readyNodes}")?;
    ensure!(
        nodes.iter().all(|n| ready.contains(&format!("\"{n}\""))),
        "net1's status.readyNodes: {ready:?}"
    );
    let vlan = jsonpath(lab, &["vlan", "v100"], "{.status.subnets}")?;
    ensure!(vlan == r#"["underlay"]"#, "v100's status.subnets: {vlan:?}");
    let u2o = jsonpath(lab, &["subnet", "underlay"], "{.status.u2oInterconnectionIP}")?;
    let net: ipnet::IpNet = "10.100.0.0/24".parse()?;
    ensure!(
        u2o.parse::<std::net::IpAddr>().is_ok_and(|ip| net.contains(&ip)),
        "the underlay subnet's u2oInterconnectionIP: {u2o:?}"
    );
    crate::common::lab::matrix_is_green(report).context("with the underlay")?;
    for pod in ["underlay-1", "underlay-2"] {
        let ip = jsonpath(lab, &["-n", "underlay", "pod", pod], "{.status.podIP}")?;
        ensure!(
            report.lines().any(|l| l.contains(&format!("underlay/{pod} "))
                && l.contains("outside → pod: ok")
                && l.contains(&format!("(the outside saw {ip})"))),
            "the matrix (printed above) lacks underlay/{pod}'s outside rows with its own address {ip}"
        );
        ensure!(
            report
                .lines()
                .any(|l| l.contains(&format!("underlay/{pod} ")) && l.contains("underlay (u2o)")),
            "the matrix (printed above) lacks underlay/{pod} as an underlay (u2o) target"
        );
    }
    for node in nodes {
        let eth1 = lab.ok(&["node", node, "--", "ip", "-4", "-br", "addr", "show", "eth1"])?;
        ensure!(
            !eth1.contains("172.31.0."),
            "{node}'s eth1 still has its address: {eth1:?}"
        );
        nic_address_on_the_bridge(lab, node)?;
        reaches(lab, &["node", node], "172.31.0.1")?;
    }

    // An underlay pod's frames to its gateway leave its node tagged 100.
    let ip = jsonpath(lab, &["-n", "underlay", "pod", "underlay-1"], "{.status.podIP}")?;
    let node = jsonpath(lab, &["-n", "underlay", "pod", "underlay-1"], "{.spec.nodeName}")?;
    let trunk = format!("n{}-trunk", node.trim_start_matches("node"));
    let filter = format!("vlan 100 and icmp and src host {ip}");
    let seen = tagged_capture(lab, &trunk, &filter, || {
        Ok(lab
            .run(&[
                "exec",
                "underlay/underlay-1",
                "--",
                "ping",
                "-c",
                "1",
                "-W",
                "1",
                "10.100.0.1",
            ])?
            .status
            .success())
    })?;
    ensure!(
        seen.contains("ethertype 802.1Q (0x8100)") && seen.contains("vlan 100,"),
        "underlay/underlay-1's ping to 10.100.0.1 on {node}'s trunk: {seen:?}"
    );

    // The physical gateway asking for the U2O address: no answer (a stale entry is forgotten
    // first; `del` fails when there is none).
    let _ = lab.run(&["tor", "--", "ip", "neigh", "del", &u2o, "dev", "vlan100"])?;
    let ping = lab.run(&["tor", "--", "ping", "-c", "2", "-W", "1", &u2o])?;
    let neighbour = lab.ok(&["tor", "--", "ip", "neigh", "show", &u2o, "dev", "vlan100"])?;
    ensure!(
        !ping.status.success() && !neighbour.contains("lladdr"),
        "the ToR must get no ARP answer for the U2O address {u2o} through the VLAN: {neighbour:?}"
    );
    Ok(())
}

/// `node`'s `br-net1` holds the address `eth1` had (172.31.0.x); returns it.
fn nic_address_on_the_bridge(lab: &Lab, node: &str) -> Result<String> {
    let bridge = lab.ok(&["node", node, "--", "ip", "-4", "-br", "addr", "show", "br-net1"])?;
    Ok(bridge
        .split_whitespace()
        .find(|w| w.starts_with("172.31.0."))
        .with_context(|| format!("{node}'s br-net1 has eth1's address: {bridge:?}"))?
        .to_owned())
}

/// Runs `tcpdump -e` on the ToR's `interface` for the first frame matching `filter` while
/// `poke` is called (until the capture ends); the frame as tcpdump printed it. Fails when `poke`
/// never succeeded.
pub fn tagged_capture(
    lab: &Lab,
    interface: &str,
    filter: &str,
    mut poke: impl FnMut() -> Result<bool>,
) -> Result<String> {
    let mut capture = lab
        .command(&[
            "tor", "--", "timeout", "30", "tcpdump", "-e", "-nn", "-l", "-c", "1", "-i", interface, filter,
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut poked = false;
    wait_until(
        &format!("tcpdump on the ToR's {interface} to see {filter}"),
        WAIT,
        || {
            poked |= poke()?;
            Ok(capture.try_wait()?.is_some())
        },
    )?;
    let seen = capture.wait_with_output()?;
    ensure!(poked, "nothing answered while tcpdump ran on {interface}");
    Ok(String::from_utf8_lossy(&seen.stdout).into_owned())
}

/// Deleting the ProviderNetwork gives each node's `eth1` its address and connected route back
/// and removes `br-net1`, with the ToR's BGP sessions Established throughout (the underlay pods
/// stay, cut off).
pub fn the_nic_goes_back(lab: &Lab, nodes: &[&str]) -> Result<()> {
    sessions_established(lab, "before")?;
    let mut addresses = Vec::new();
    for node in nodes {
        addresses.push(nic_address_on_the_bridge(lab, node)?);
    }
    lab.ok(&["kubectl", "delete", "provider-network", "net1"])?;
    for (node, address) in nodes.iter().zip(&addresses) {
        wait_until(
            &format!("{node}'s eth1 to get {address} and its route back"),
            WAIT,
            || {
                sessions_established(lab, "while the NIC goes back")?;
                let eth1 = lab.ok(&["node", node, "--", "ip", "-4", "-br", "addr", "show", "eth1"])?;
                let route = lab.ok(&["node", node, "--", "ip", "route", "show", "172.31.0.0/24"])?;
                let bridge = lab.run(&["node", node, "--", "ovs-vsctl", "br-exists", "br-net1"])?;
                Ok(eth1.split_whitespace().any(|w| w == address)
                    && route.contains("dev eth1 proto kernel scope link")
                    && bridge.status.code() == Some(2))
            },
        )?;
        reaches(lab, &["node", node], "172.31.0.1")?;
    }
    // The daemon takes its labels off the Node after it gave the NIC back: awaited, not raced.
    wait_until("the nodes to lose net1's labels", WAIT, || {
        let labels = lab.ok(&["kubectl", "get", "nodes", "--show-labels"])?;
        Ok(!labels.contains("net1.provider-network.kubernetes.io/"))
    })?;
    sessions_established(lab, "after")
}

/// The example applied again, after [`the_nic_goes_back`] or a drain that deleted an underlay
/// pod (they are bare pods): the ProviderNetwork takes each node's `eth1` again, both underlay
/// pods run and work (the matrix green); returns how long that took from the apply, and the
/// matrix.
pub fn the_underlay_comes_back(lab: &Lab, nodes: &[&str]) -> Result<(std::time::Duration, String)> {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/lab/40-underlay.yaml");
    let start = std::time::Instant::now();
    lab.apply(&file)?;
    wait_until("net1's status.readyNodes to list every node again", WAIT, || {
        let ready = jsonpath(lab, &["provider-network", "net1"], "{.status.readyNodes}")?;
        Ok(nodes.iter().all(|n| ready.contains(&format!("\"{n}\""))))
    })?;
    wait_until("both underlay pods to run", WAIT, || {
        let phases = jsonpath(lab, &["-n", "underlay", "pods"], "{.items[*].status.phase}")?;
        Ok(phases.split_whitespace().filter(|p| *p == "Running").count() == 2)
    })?;
    let (mut last, mut failed) = (String::new(), String::new());
    wait_until("the matrix to be green with the underlay back", WAIT, || {
        last = lab.ok(&["matrix"])?;
        failed = crate::common::lab::matrix_is_green(&last)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        Ok(failed.is_empty())
    })
    .with_context(|| failed.clone())?;
    let took = start.elapsed();
    for node in nodes {
        nic_address_on_the_bridge(lab, node)?;
    }
    sessions_established(lab, "with the underlay back")?;
    Ok((took, last))
}
