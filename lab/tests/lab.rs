//! The lab end to end, driven as a user drives it: the `kube-ovn-lab` binary's verbs, and what
//! they leave on the machine. Each test brings up a lab of its own (its own name, so its
//! namespaces are its own, and its own labs directory), on the real components: OVN, OVS with
//! the userspace datapath, our controller, daemons and speakers, BIRD or FRR as the ToR.
//!
//! The other binaries must be beside `kube-ovn-lab` (`cargo test --workspace` builds them all;
//! alone, `cargo build --workspace --bins` first). Needs root and the packages of
//! `scripts/install-deps.sh`; fails, never skips.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::lab::Lab;
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::cluster::state::LabState;
use kube_ovn_testkit::wait_until;

#[path = "lab/bgp_policy.rs"]
mod bgp_policy;
#[path = "lab/dual_stack.rs"]
mod dual_stack;
#[path = "lab/external.rs"]
mod external;
#[path = "lab/underlay.rs"]
mod underlay;

const WAIT: Duration = Duration::from_mins(1);

/// Whether `ip` is in the lab's IPv4 service CIDR (the default family).
fn in_service_range(ip: &str) -> bool {
    let range: ipnet::IpNet = "10.96.0.0/12".parse().expect("a CIDR");
    ip.trim()
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| range.contains(&ip))
}

fn not_up(lab: &Lab, args: &[&str]) -> Result<()> {
    let out = lab.run(args)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "{args:?} succeeded on a lab that is not up"
    );
    ensure!(err.contains("is not up"), "{args:?} says: {err}");
    Ok(())
}

#[test]
fn the_lab_comes_up_green_is_usable_and_goes_down_clean() -> Result<()> {
    let lab = Lab::new("b");
    for verb in [
        &["status"][..],
        &["down"],
        &["kubectl", "get", "pods"],
        &["tor", "--", "true"],
        &["exec", "demo/web-1", "--", "true"],
        &["logs"],
    ] {
        not_up(&lab, verb)?;
    }
    let out = lab.up(&[])?;
    println!("{out}");
    common::lab::matrix_is_green(&out)?;
    for want in [
        "outside → pod: ok",
        "blocked",
        "10.17.0.100/32",
        "svc demo/hello ",
        // The LoadBalancer IP the lab gave demo/hello, reached from the outside host over BGP.
        "svc demo/hello at 203.0.113.1:80: ok",
        "node1 (Ready)",
        "node2 (Ready)",
    ] {
        ensure!(out.contains(want), "up's report (printed above) lacks {want:?}");
    }
    // kube-apiserver's allocator picks ClusterIPs at random from the lab's range.
    let hello = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("[s0] svc demo/hello "))
        .and_then(|rest| rest.split(':').next())
        .context("demo/hello's ClusterIP in up's report")?;
    ensure!(
        in_service_range(hello),
        "demo/hello's ClusterIP {hello} is not from 10.96.0.0/12"
    );
    // The dual-stack fabric: IPv6 sessions, routes and matrix rows, and node2's extended next
    // hop (its IPv4 routes over its IPv6 session).
    let started = std::time::Instant::now();
    dual_stack::the_fabric_is_dual_stack(&lab, &out, &["node1", "node2"])?;
    println!(
        "the dual-stack checks (node2's IPv4 session down and up again) took {:?}",
        started.elapsed()
    );
    // BGP advertisement policy: the community-tagged Local Service, its route following its
    // endpoint.
    let started = std::time::Instant::now();
    bgp_policy::the_tagged_local_service_works(&lab, &out, &["node1", "node2"])?;
    println!(
        "the Local Service's checks (its endpoint moved once) took {:?}",
        started.elapsed()
    );
    // Kube-OVN's underlay guide, which `up` applied with the other examples; then the
    // ProviderNetwork deleted (each node's eth1 back, the fabric under it checked with a port of
    // our own), and applied again (the pods, which stayed, work again).
    let nodes = ["node1", "node2"];
    underlay::the_underlay_works(&lab, &out, &nodes)?;
    underlay::the_nic_goes_back(&lab, &nodes)?;
    underlay::the_vlan_fabric_works(&lab, &nodes)?;
    let (took, _) = underlay::the_underlay_comes_back(&lab, &nodes)?;
    println!("the underlay came back green {took:?} after the ProviderNetwork was applied again");
    // The external network (VLAN 200 on each node's eth2), beside the underlay's VLAN 100.
    ensure!(
        out.contains(
            "the external network: VLAN 200, an access port to each node's eth2, gateway 10.200.0.1/24"
        ),
        "up's report (printed above) does not describe the external network"
    );
    external::the_external_network_works(&lab, &nodes)?;
    external::the_vpc_reaches_out_through_its_eips(&lab, &out)?;
    let again = lab.run(&["up", "--no-install"])?;
    ensure!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("already up"),
        "a second up must be refused"
    );

    let status = lab.ok(&["status"])?;
    ensure!(!status.contains("FAIL"), "{status}");
    ensure!(
        status.lines().any(|l| l.contains("external network")
            && l.contains("gateway 10.200.0.1 on the ToR's vlan200")
            && l.contains("node1 10.200.0.11 on br-external")
            && l.contains("node2 10.200.0.12 on br-external")),
        "status describes the external network:\n{status}"
    );
    let svc = lab.ok(&["kubectl", "-n", "demo", "get", "svc", "hello"])?;
    ensure!(
        svc.contains("LoadBalancer") && svc.contains("203.0.113.1"),
        "kubectl shows the LoadBalancer IP:\n{svc}"
    );

    // A NetworkPolicy applied with kubectl: the matrix's expectations follow it (only `bgp`'s
    // pods reach `demo`'s, by the namespace's name label) and real traffic agrees; a leak or a
    // connection the policy should let through would be a failure. Deleted, all answer again.
    let policy = lab.dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: only-bgp, namespace: demo}\n\
         spec:\n  podSelector: {}\n  policyTypes: [Ingress]\n  ingress:\n  - from:\n    - namespaceSelector:\n\
         \x20       matchLabels: {kubernetes.io/metadata.name: bgp}\n",
    )?;
    let policy = policy.to_string_lossy().into_owned();
    lab.ok(&["kubectl", "apply", "-f", &policy])?;
    let web1 = lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "get",
        "pod",
        "web-1",
        "-o",
        "jsonpath={.metadata.annotations.ovn\\.kubernetes\\.io/ip_address}",
    ])?;
    // A TCP connect with bash's /dev/tcp (no curl needed), given one second.
    let connect = format!("echo > /dev/tcp/{}/8080", web1.trim());
    wait_until(
        "the policy to keep egress/egress-1 out of demo/web-1",
        WAIT,
        || {
            Ok(!lab
                .run(&[
                    "exec",
                    "egress/egress-1",
                    "--",
                    "timeout",
                    "1",
                    "bash",
                    "-c",
                    &connect,
                ])?
                .status
                .success())
        },
    )?;
    let matrix = lab.ok(&["matrix"])?;
    ensure!(
        matrix.contains("1 NetworkPolicies in force") && matrix.contains("checks as expected"),
        "the matrix under a policy:\n{matrix}"
    );
    lab.ok(&["kubectl", "delete", "-f", &policy])?;

    // The verbs, as the README shows them.
    let pods = lab.ok(&["kubectl", "get", "pods", "-A", "-o", "wide"])?;
    ensure!(pods.contains("fixed") && pods.contains("10.17.0.100"), "{pods}");
    let addr = lab.ok(&["exec", "bgp/fixed", "--", "ip", "-br", "addr", "show", "eth0"])?;
    ensure!(addr.contains("10.17.0.100/16"), "{addr}");
    let routes = lab.ok(&["tor", "--", "birdc", "show", "route"])?;
    ensure!(routes.contains("10.17.0.100/32"), "{routes}");
    let ports = lab.ok(&["node", "node1", "--", "ovs-vsctl", "list-ports", "br-int"])?;
    ensure!(ports.contains("ovn0"), "{ports}");
    let switches = lab.ok(&["cp", "--", "ovn-nbctl", "ls-list"])?;
    ensure!(
        switches.contains("(bgp-local)") && switches.contains("(vpc1-net)"),
        "{switches}"
    );
    let logs = lab.ok(&["logs"])?;
    ensure!(
        logs.contains("controller") && logs.contains("node2-speaker"),
        "{logs}"
    );

    // A Deployment and a LoadBalancer Service made with plain kubectl (no containerPort: netexec
    // serves 8080 as agnhost's does) get pods, a ClusterIP, endpoints and an address the outside
    // host reaches once the Service is announced.
    lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "create",
        "deployment",
        "web",
        "--image=kube-ovn-lab/netexec",
        "--replicas=2",
    ])?;
    lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=8080",
        "--type=LoadBalancer",
    ])?;
    lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "annotate",
        "service",
        "web",
        "ovn.kubernetes.io/bgp=true",
    ])?;
    wait_until("the Deployment's 2 pods to be ready", WAIT, || {
        let ready = lab.ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ])?;
        Ok(ready.trim() == "2")
    })?;
    wait_until("the Service's EndpointSlice to list both pods", WAIT, || {
        let eps = lab.ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[0]}",
        ])?;
        Ok(eps.split_whitespace().count() == 2)
    })?;
    let web_service = |jsonpath: &str| {
        lab.ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "service",
            "web",
            "-o",
            &format!("jsonpath={jsonpath}"),
        ])
    };
    let cluster_ip = web_service("{.spec.clusterIP}")?;
    ensure!(
        in_service_range(&cluster_ip),
        "ClusterIP {cluster_ip:?} is not from 10.96.0.0/12"
    );
    let lb_ip = web_service("{.status.loadBalancer.ingress[0].ip}")?;
    ensure!(lb_ip.starts_with("203.0.113."), "LoadBalancer IP {lb_ip:?}");
    let url = format!("http://{}/hostname", lb_ip.trim());
    wait_until(
        "the outside host to be answered at the LoadBalancer IP",
        WAIT,
        || {
            let out = lab.run(&["outside", "--", "curl", "-s", "-m", "2", &url])?;
            Ok(out.status.success() && String::from_utf8_lossy(&out.stdout).starts_with("web-"))
        },
    )?;

    // A deleted pod's sandbox goes, and so does its route at the ToR.
    let ip = lab.ok(&[
        "kubectl",
        "-n",
        "bgp",
        "get",
        "pod",
        "announced-1",
        "-o",
        "jsonpath={.status.podIP}",
    ])?;
    lab.ok(&["kubectl", "-n", "bgp", "delete", "pod", "announced-1"])?;
    wait_until("the deleted pod's route to leave the ToR", WAIT, || {
        Ok(!lab
            .ok(&["tor", "--", "birdc", "show", "route"])?
            .contains(&format!("{ip}/32")))
    })?;
    // The API server keeps the pod (graceful deletion) until the kubelet stand-in tore its
    // sandbox down and deleted it with grace 0.
    wait_until("exec into the deleted pod to fail", WAIT, || {
        Ok(!lab
            .run(&["exec", "bgp/announced-1", "--", "true"])?
            .status
            .success())
    })?;

    // `status` names a component that died, and why; and a request a component's role does not
    // allow (the speaker's identity listing Secrets cluster-wide) is refused and reported.
    let speaker = lab.dir.path().join(&lab.name).join("kubeconfig/speaker");
    let kubectl = kube_ovn_lab::kubernetes::binary("kubectl")?;
    let refused = lab.run(&[
        "cp",
        "--",
        &kubectl.to_string_lossy(),
        "--kubeconfig",
        &speaker.to_string_lossy(),
        "get",
        "secrets",
        "-A",
    ])?;
    ensure!(!refused.status.success(), "the speaker may not list every Secret");
    let state = lab.state()?;
    let (pid, start) = state
        .process("node1-daemon")
        .context("node1-daemon in the state")?;
    ensure!(process::stop(pid, start, Duration::from_secs(5)) || !process::alive(pid, start));
    // And a node that lost its address on the external network (on br-external since the
    // ProviderNetwork `external` took eth2): node1's, whose daemon was just stopped, since a
    // running daemon puts the NIC's address back on its next pass (every 30 s or on an event),
    // which may come before `status` looks.
    lab.ok(&[
        "node",
        "node1",
        "--",
        "ip",
        "addr",
        "del",
        "10.200.0.11/24",
        "dev",
        "br-external",
    ])?;
    let broken = lab.run(&["status"])?;
    let text = String::from_utf8_lossy(&broken.stdout);
    ensure!(
        !broken.status.success(),
        "status must fail when a daemon is down:\n{text}"
    );
    ensure!(
        text.lines()
            .any(|l| l.contains("node1-daemon") && l.contains("FAIL") && l.contains("not running")),
        "{text}"
    );
    ensure!(
        text.lines().any(|l| l.contains("RBAC")
            && l.contains("FAIL")
            && l.contains("system:serviceaccount:kube-system:kube-ovn-speaker list /secrets: 403")),
        "status must report the speaker's refused request (from the audit log):\n{text}"
    );
    ensure!(
        text.lines().any(|l| l.contains("external network")
            && l.contains("FAIL")
            && l.contains("node1 has no 10.200.0.11")),
        "status must report node1's missing address on the external network:\n{text}"
    );

    lab.down_and_check_clean(&state)?;
    not_up(&lab, &["status"])?;
    Ok(())
}

#[test]
fn an_frr_tor_learns_the_routes() -> Result<()> {
    let lab = Lab::new("f");
    let out = lab.up(&["--tor", "frr", "--nodes", "1"])?;
    println!("{out}");
    common::lab::matrix_is_green(&out)?;
    let routes = lab.ok(&["tor", "--", "vtysh", "-c", "show ip route bgp"])?;
    ensure!(routes.contains("10.17.0.100/32"), "{routes}");
    // The dual-stack fabric on FRR: IPv6 routes from the IPv6 session, the matrix's IPv6 rows.
    let routes6 = lab.ok(&["tor", "--", "vtysh", "-c", "show ipv6 route bgp"])?;
    ensure!(
        routes6.contains("fd00:10:66::/64") && routes6.contains("via fd00:172:30::11"),
        "{routes6}"
    );
    ensure!(
        out.lines()
            .filter(|l| l.contains("outside → pod (IPv6): ok ") && l.contains("pod → outside (IPv6): ok "))
            .count()
            == 2,
        "the matrix's IPv6 rows (up's report is printed above): {:?}",
        out.lines().filter(|l| l.contains("IPv6")).collect::<Vec<_>>()
    );
    // RFC 8950 against FRR: node1 (the only node, so the last, with `--extended-nexthop`) sends
    // its IPv4 routes over its IPv6 session too, with its IPv6 address as next hop; FRR keeps
    // them at LOCAL_PREF 50 behind the IPv4 session's.
    let paths: serde_json::Value = serde_json::from_str(&lab.ok(&[
        "tor",
        "--",
        "vtysh",
        "-c",
        "show bgp ipv4 unicast 10.66.0.0/16 json",
    ])?)?;
    let over_ipv6 = paths["paths"].as_array().into_iter().flatten().find(|p| {
        p["peer"]["peerId"] == "fd00:172:30::11"
            && p["nexthops"][0]["ip"] == "fd00:172:30::11"
            && p["nexthops"][0]["afi"] == "ipv6"
    });
    ensure!(
        over_ipv6.is_some_and(|p| p["locPrf"] == 50 && p["valid"] == true),
        "10.66.0.0/16 over node1's IPv6 session, IPv6 next hop, LOCAL_PREF 50: {paths:#}"
    );
    underlay::the_underlay_works(&lab, &out, &["node1"])?;
    let state = lab.state()?;
    lab.down_and_check_clean(&state)
}

#[test]
fn down_undoes_an_up_that_was_killed_halfway() -> Result<()> {
    let lab = Lab::new("k");
    let bins = Path::new(Lab::bin())
        .parent()
        .context("the binary's directory")?
        .to_string_lossy()
        .into_owned();
    let mut up = lab
        .command(&["up", "--no-install", "--install", "processes", "--bin-dir", &bins])
        .stdout(std::process::Stdio::null())
        .spawn()?;
    // Killed once the control plane runs and the nodes are being made.
    let state_file = lab.dir.path().join(&lab.name).join("state.json");
    wait_until("up to start the controller", WAIT, || {
        Ok(LabState::load(&state_file)
            .ok()
            .flatten()
            .is_some_and(|s| s.process("controller").is_some()))
    })?;
    up.kill()?;
    up.wait()?;
    let state = lab.state()?;
    ensure!(!state.up_finished);
    ensure!(!lab.namespaces()?.is_empty(), "the killed up had made namespaces");
    lab.down_and_check_clean(&state)
}
