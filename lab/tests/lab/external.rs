//! The lab's external network (issue 26: where Kube-OVN's `external` provider network and its
//! OVN EIPs live): VLAN 200 on the ToR's `tor-vlan`, an access port to each node's `eth2`, the
//! ToR's `vlan200` its gateway `10.200.0.1`, routed to the outside host as a connected network.
//! Checked on a lab that is up, as a user sees it: the nodes, the outside host and captures on
//! the ToR's ports.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, ChildStderr, Command, Stdio};

use anyhow::{Context, Result, ensure};
use kube_ovn_lab::cluster::topology::{EXTERNAL_NIC, Topology};
use kube_ovn_testkit::wait_until;

use super::underlay::{reaches, tagged_capture};
use super::{Lab, WAIT};

/// An address of VLAN 100 nobody holds (the underlay subnet's excluded range, not the ToR's
/// `.1`): asking for it is an ARP broadcast flooded over the whole VLAN.
const UNHELD_VLAN100_ADDRESS: &str = "10.100.0.9";

/// Each node's `eth2` is in `br-external` (ProviderNetwork `external` of
/// `examples/lab/50-external.yaml`) with its `10.200.0.1x` moved there, from which the node
/// reaches the external gateway `10.200.0.1`; the outside host reaches each node's address
/// through the ToR's connected route (no BGP route for it); `tcpdump -e` on the ToR's access port
/// shows those frames untagged; and an underlay pod's ARP broadcast on VLAN 100
/// (`examples/lab/40-underlay.yaml` applied, each `eth1` in `br-net1`), which the ToR floods to
/// every VLAN 100 port (seen tagged on a trunk), reaches no access port of the external network.
pub fn the_external_network_works(lab: &Lab, nodes: &[&str]) -> Result<()> {
    let state = lab.state()?;
    let t = Topology::new(&lab.name, state.nodes, state.tor, lab.dir.path()).map_err(anyhow::Error::msg)?;
    let plans: Vec<_> = nodes
        .iter()
        .map(|n| t.node(n).with_context(|| format!("{n} in the lab's topology")))
        .collect::<Result<_>>()?;
    let gateway = Topology::external_gateway().to_string();
    for node in &plans {
        let tag = lab.ok(&["tor", "--", "ovs-vsctl", "get", "port", &node.ext_port, "tag"])?;
        ensure!(
            tag.trim() == "200",
            "{}: an access port of VLAN 200, its tag is {tag:?}",
            node.ext_port
        );
        let address = node.ext_ip.to_string();
        wait_until(
            &format!("{}'s {EXTERNAL_NIC} in br-external with {address}", node.name),
            WAIT,
            || {
                let bridge = lab.run(&["node", &node.name, "--", "ovs-vsctl", "port-to-br", EXTERNAL_NIC])?;
                let on = lab.ok(&[
                    "node",
                    &node.name,
                    "--",
                    "ip",
                    "-br",
                    "-4",
                    "addr",
                    "show",
                    "br-external",
                ])?;
                Ok(String::from_utf8_lossy(&bridge.stdout).trim() == "br-external"
                    && on.contains(&format!("{address}/24")))
            },
        )?;
        let ping = [
            "node", &node.name, "--", "ping", "-c", "1", "-W", "1", "-I", &address, &gateway,
        ];
        wait_until(
            &format!("{} to reach {gateway} from {address}", node.name),
            WAIT,
            || Ok(lab.run(&ping)?.status.success()),
        )?;
        reaches(lab, &["outside"], &node.ext_ip.to_string())?;
    }
    let route = lab.ok(&["tor", "--", "ip", "route", "show", "10.200.0.0/24"])?;
    ensure!(
        route.contains("dev vlan200 proto kernel scope link src 10.200.0.1") && route.lines().count() == 1,
        "the ToR's route to the external network is its connected one, no BGP route: {route:?}"
    );

    // The outside host's ping to node1's address, on node1's access port: untagged.
    let node = plans[0];
    let address = node.ext_ip.to_string();
    let seen = tagged_capture(lab, &node.ext_port, &format!("icmp and host {address}"), || {
        Ok(lab
            .run(&["outside", "--", "ping", "-c", "1", "-W", "1", &address])?
            .status
            .success())
    })?;
    ensure!(
        seen.contains("ethertype IPv4") && !seen.contains("802.1Q") && !seen.contains("vlan"),
        "frames on the access port {} are untagged: {seen:?}",
        node.ext_port
    );

    no_vlan100_frame_reaches_the_access_ports(lab, &t, &plans)
}

/// An underlay pod asks for [`UNHELD_VLAN100_ADDRESS`] until a trunk of another node (its own
/// with one node) has seen three of its frames, tagged 100; meanwhile no frame from its MAC, tagged
/// or not, appears on any node's access port of the external network.
fn no_vlan100_frame_reaches_the_access_ports(
    lab: &Lab,
    t: &Topology,
    plans: &[&kube_ovn_lab::cluster::topology::NodePlan],
) -> Result<()> {
    let pod = "underlay/underlay-1";
    let mac = lab
        .ok(&["exec", pod, "--", "cat", "/sys/class/net/eth0/address"])?
        .trim()
        .to_owned();
    ensure!(mac.len() == 17, "{pod}'s MAC: {mac:?}");
    let pod_node = lab.ok(&[
        "kubectl",
        "-n",
        "underlay",
        "get",
        "pod",
        "underlay-1",
        "-o",
        "jsonpath={.spec.nodeName}",
    ])?;
    let control_trunk = plans
        .iter()
        .find(|n| n.name != pod_node.trim())
        .or_else(|| plans.first())
        .map(|n| n.trunk_port.clone())
        .context("no node")?;
    // `ether src` is at the same offset whether a tag follows or not, so the filter matches the
    // pod's frames tagged or untagged.
    let filter = format!("ether src {mac}");
    let leaks = plans
        .iter()
        .map(|n| Capture::start(t, &n.ext_port, &filter, None))
        .collect::<Result<Vec<_>>>()?;
    let mut control = Capture::start(t, &control_trunk, &filter, Some(3))?;
    wait_until(
        &format!("{control_trunk} to see three frames of {pod} on VLAN 100"),
        WAIT,
        || {
            lab.run(&[
                "exec",
                pod,
                "--",
                "ping",
                "-c",
                "1",
                "-W",
                "1",
                UNHELD_VLAN100_ADDRESS,
            ])?;
            Ok(control.child.try_wait()?.is_some())
        },
    )?;
    let flooded = control.stop()?;
    ensure!(
        flooded.lines().count() == 3 && flooded.lines().all(|l| l.contains("vlan 100,")),
        "{pod}'s frames on {control_trunk}, tagged 100: {flooded:?}"
    );
    for (leak, node) in leaks.into_iter().zip(plans) {
        let seen = leak.stop()?;
        ensure!(
            seen.trim().is_empty(),
            "VLAN 100 leaked onto {}'s access port {} of the external network: {seen:?}",
            node.name,
            node.ext_port
        );
    }
    Ok(())
}

/// `tcpdump -e` on one of the ToR's interfaces, started by this test (so stopped by its PID),
/// listening before [`Capture::start`] returns.
struct Capture {
    child: Child,
    /// Kept open: tcpdump reports its counts there when it ends.
    _stderr: BufReader<ChildStderr>,
}

impl Capture {
    fn start(t: &Topology, interface: &str, filter: &str, count: Option<u32>) -> Result<Self> {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &t.tor_netns(), "tcpdump", "-e", "-nn", "-l"]);
        if let Some(count) = count {
            cmd.args(["-c", &count.to_string()]);
        }
        let mut child = cmd
            .args(["-i", interface, filter])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting tcpdump on the ToR")?;
        let mut stderr = BufReader::new(child.stderr.take().context("tcpdump's stderr")?);
        // tcpdump says so once its socket is bound and filtered: nothing after is missed. Its
        // first line is the hint about -v; an error ends its output.
        let mut said = String::new();
        loop {
            let mut line = String::new();
            if stderr.read_line(&mut line)? == 0 {
                let _ = child.kill();
                let _ = child.wait();
                anyhow::bail!("tcpdump on the ToR's {interface} ({filter}) did not start: {said}");
            }
            said.push_str(&line);
            if line.contains("listening on") {
                break;
            }
        }
        Ok(Self {
            child,
            _stderr: stderr,
        })
    }

    /// The frames it printed (one per line), once it ended or was killed.
    fn stop(mut self) -> Result<String> {
        if self.child.try_wait()?.is_none() {
            self.child.kill()?;
        }
        self.child.wait()?;
        let mut out = String::new();
        self.child
            .stdout
            .take()
            .context("tcpdump's stdout")?
            .read_to_string(&mut out)?;
        Ok(out)
    }
}

/// vpc1's way out and in through OVN's NAT (`examples/lab/50-external.yaml`, applied by `up`):
/// the matrix's rows in `up`'s report (tenant-2 leaves as the SNAT EIP, tenant-1 as its FIP; the
/// outside host reaches tenant-1 at its FIP and tenant-2 through the DNAT rule), the EIPs with
/// `bgp: "true"` in the ToR's table as /32s through the node that holds vpc1's gateway port (the
/// lrp OvnEip's `status.activateGateway`), then the port moved off that node (`kube-ovn-lab
/// failover --away-only`: its label removed) with the route following, what the move cost
/// printed, and the matrix green again with the port on the other node.
pub fn the_vpc_reaches_out_through_its_eips(lab: &Lab, report: &str) -> Result<()> {
    for row in [
        "fip tenant-1 at 10.200.0.201:8080 → vpc1/tenant-1: ok",
        "dnat tenant-2-web at 10.200.0.202:80 → vpc1/tenant-2: ok",
    ] {
        ensure!(report.contains(row), "the matrix (printed above) lacks {row:?}");
    }
    let leaves_as = |pod: &str, eip: &str| {
        report
            .lines()
            .any(|l| l.trim_start().starts_with(pod) && l.contains(&format!("(the outside saw {eip})")))
    };
    ensure!(
        leaves_as("vpc1/tenant-2", "10.200.0.200") && leaves_as("vpc1/tenant-1", "10.200.0.201"),
        "vpc1's pods leave with their EIPs (the whole matrix is printed above): {:?}",
        report.lines().filter(|l| l.contains("vpc1/")).collect::<Vec<_>>()
    );
    let holder = lab
        .ok(&[
            "kubectl",
            "get",
            "ovn-eips",
            "vpc1-external",
            "-o",
            "jsonpath={.status.activateGateway}",
        ])?
        .trim()
        .to_owned();
    let state = lab.state()?;
    let t = Topology::new(&lab.name, state.nodes, state.tor, lab.dir.path()).map_err(anyhow::Error::msg)?;
    let via = t
        .node(&holder)
        .with_context(|| format!("vpc1's gateway holder {holder:?}"))?
        .ip;
    for eip in ["10.200.0.200", "10.200.0.201", "10.200.0.202"] {
        let route = lab.ok(&["tor", "--", "ip", "route", "show", &format!("{eip}/32")])?;
        ensure!(
            route.contains(&format!("via {via} ")),
            "the ToR routes {eip} through {holder} ({via}): {route:?}"
        );
    }
    // Away only: ovs-vswitchd 3.1's userspace conntrack may abort when NATed connections return
    // to a node that held them before (docs/external.md); the benchmark moves it back and forth.
    let out = lab.ok(&["failover", "--away-only"])?;
    println!("{out}");
    let moves: Vec<&str> = out.lines().filter(|l| l.starts_with("round 1: ")).collect();
    ensure!(
        moves.len() == 1
            && moves[0].starts_with(&format!("round 1: {holder} → "))
            && out.contains("1 moves; gateway status: median"),
        "failover moved vpc1's gateway off {holder}:\n{out}"
    );
    let now = lab.ok(&[
        "kubectl",
        "get",
        "ovn-eips",
        "vpc1-external",
        "-o",
        "jsonpath={.status.activateGateway}",
    ])?;
    ensure!(
        !now.trim().is_empty() && now.trim() != holder,
        "vpc1-external is now held by {now:?}, not {holder}"
    );
    let report = lab.ok(&["matrix"])?;
    println!("the matrix after vpc1's gateway moved:\n{report}");
    crate::common::lab::matrix_is_green(&report).context("after vpc1's gateway moved")?;
    ensure!(
        report.contains("fip tenant-1 at 10.200.0.201:8080 → vpc1/tenant-1: ok")
            && report.contains("dnat tenant-2-web at 10.200.0.202:80 → vpc1/tenant-2: ok"),
        "the matrix (printed above) after vpc1's gateway moved lacks its FIP's or DNAT's row"
    );
    Ok(())
}
