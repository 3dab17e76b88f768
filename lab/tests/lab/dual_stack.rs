//! The lab's dual-stack fabric, checked on a lab that is up, as a user sees it: the matrix's IPv6
//! rows, the ToR's IPv6 sessions and IPv6 routes (BIRD's table and the kernel's ECMP route), and
//! the one speaker with extended next hop (RFC 8950, `NodePlan::extended_nexthop`: the last
//! node's) whose IPv4 routes reach the ToR over its IPv6 session too, kept as backups, and used
//! when its IPv4 session goes.

use anyhow::{Context, Result, ensure};
use kube_ovn_testkit::wait_until;

use super::{Lab, WAIT};

/// `kubectl get pod -n dual <pod> -o jsonpath=<path>`.
fn dual_pod(lab: &Lab, pod: &str, path: &str) -> Result<String> {
    Ok(lab
        .ok(&[
            "kubectl",
            "-n",
            "dual",
            "get",
            "pod",
            pod,
            "-o",
            &format!("jsonpath={path}"),
        ])?
        .trim()
        .to_owned())
}

/// `examples/lab/35-dual-stack.yaml` as `up` applied it (`report`: up's output), on a BIRD ToR
/// with `nodes` (the last one with extended next hop).
pub fn the_fabric_is_dual_stack(lab: &Lab, report: &str, nodes: &[&str]) -> Result<()> {
    // The matrix's IPv6 rows: both ways, each side seeing the other's own IPv6 address.
    for pod in ["dual-1", "dual-2"] {
        let ip6 = dual_pod(lab, pod, "{.status.podIPs[1].ip}")?;
        ensure!(ip6.starts_with("fd00:10:66::"), "{pod}'s IPv6 address: {ip6:?}");
        ensure!(
            report
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("dual/{pod} "))
                    && l.contains("outside → pod (IPv6): ok ")
                    && l.contains("pod → outside (IPv6): ok ")
                    && l.ends_with(&format!("(the outside saw {ip6})"))),
            "the matrix's IPv6 rows of dual/{pod} (the whole matrix is printed above): {:?}",
            report
                .lines()
                .filter(|l| l.contains(&format!("dual/{pod} ")))
                .collect::<Vec<_>>()
        );
        let routes = lab.ok(&["tor", "--", "birdc", "show", "route", "table", "master6"])?;
        ensure!(
            routes.contains(&format!("{ip6}/128")) && routes.contains("fd00:10:66::/64"),
            "the ToR's IPv6 table has {ip6}/128 and the subnet's fd00:10:66::/64:\n{routes}"
        );
    }
    let sessions = super::underlay::sessions(lab)?;
    for node in nodes {
        let v6 = format!("{node}_v6");
        ensure!(
            sessions.iter().any(|(s, up)| *s == v6 && *up),
            "{v6} Established at the ToR: {sessions:?}"
        );
    }
    // The subnet's IPv6 CIDR, announced from every node: ECMP in the ToR's kernel.
    let ecmp = lab.ok(&["tor", "--", "ip", "-6", "route", "show", "fd00:10:66::/64"])?;
    for (i, _) in nodes.iter().enumerate() {
        ensure!(
            ecmp.contains(&format!("nexthop via fd00:172:30::{} dev fabric", 11 + i)),
            "the ToR's kernel routes fd00:10:66::/64 through every node: {ecmp:?}"
        );
    }

    // Extended next hop: the last node's IPv4 routes, learnt over its IPv6 session too, with its
    // IPv6 address as next hop, as the backups of its IPv4 session's.
    let (ext, ext_ip6, ext_ip4) = (
        nodes[nodes.len() - 1],
        format!("fd00:172:30::{}", 10 + nodes.len()),
        format!("172.30.0.{}", 10 + nodes.len()),
    );
    let all = lab.ok(&["tor", "--", "birdc", "show", "route", "10.66.0.0/16", "all"])?;
    ensure!(
        all.contains(&format!("[{ext}_v6 ")) && all.contains(&format!("BGP.next_hop: {ext_ip6}")),
        "the ToR learnt 10.66.0.0/16 over {ext}'s IPv6 session with next hop {ext_ip6}:\n{all}"
    );
    let kernel = lab.ok(&["tor", "--", "ip", "route", "show", "10.66.0.0/16"])?;
    ensure!(
        !kernel.contains("inet6") && kernel.contains(&format!("via {ext_ip4} ")),
        "while the IPv4 session is up, the kernel's IPv4 route uses IPv4 next hops: {kernel:?}"
    );
    // The pod on that node, reached over IPv4 through the IPv6 next hop once the IPv4 session
    // is down, and back on IPv4 once it is up again.
    let pod = ["dual-1", "dual-2"]
        .into_iter()
        .find(|p| dual_pod(lab, p, "{.spec.nodeName}").is_ok_and(|n| n == ext))
        .with_context(|| format!("a dual-stack pod on {ext}"))?;
    let ip4 = dual_pod(lab, pod, "{.status.podIPs[0].ip}")?;
    lab.ok(&["tor", "--", "birdc", "disable", ext])?;
    let via6 = format!("via inet6 {ext_ip6} ");
    wait_until(
        &format!("the ToR to route {ip4} via {ext}'s IPv6 address"),
        WAIT,
        || {
            Ok(lab
                .ok(&["tor", "--", "ip", "route", "show", &ip4])?
                .contains(&via6))
        },
    )?;
    let url = format!("http://{ip4}:8080/clientip");
    let seen = lab.ok(&["outside", "--", "curl", "-s", "-m", "3", &url])?;
    ensure!(
        seen.starts_with("198.51.100.10:"),
        "the outside host reaches {pod} at {ip4} over the IPv6 next hop and is seen as itself: {seen:?}"
    );
    lab.ok(&["tor", "--", "birdc", "enable", ext])?;
    wait_until(
        &format!("the ToR to route {ip4} via {ext_ip4} again"),
        WAIT,
        || {
            Ok(lab
                .ok(&["tor", "--", "ip", "route", "show", &ip4])?
                .contains(&format!("via {ext_ip4} ")))
        },
    )?;
    Ok(())
}
