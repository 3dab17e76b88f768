//! The lab's `ovn-central` as a 3-member OVN RAFT cluster (`up --ovn-central-replicas 3`), seen
//! as an operator sees it: each member's kube-ovn-monitor (host networking, port 10661 on its
//! node's address) reports its RAFT role and term, `kubectl ko nb status` lists the members.
//! The northbound leader's pod is deleted: another member reports leadership with a higher
//! term, the pod comes back on its node and rejoins, and a new pod still gets its network.
//! Then `kubectl ko reload` restarts every component and `diagnose all` is green again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube_ovn_testkit::wait_until;

use super::observe::{find, parse_metrics};
use super::{Lab, WAIT, jsonpath, new_pod_ready, operations};

/// The RAFT lab's `up`: three nodes, each a member of the databases' RAFT clusters.
pub const UP_ARGS: [&str; 6] = [
    "--install",
    "manifests",
    "--nodes",
    "3",
    "--ovn-central-replicas",
    "3",
];

/// The members: the first three nodes, labelled kube-ovn/role=master by `up`.
const MEMBERS: [(&str, &str); 3] = [
    ("node1", "172.30.0.11"),
    ("node2", "172.30.0.12"),
    ("node3", "172.30.0.13"),
];

/// What one member's kube-ovn-monitor says about the northbound database.
#[derive(Debug)]
struct Member {
    node: &'static str,
    role: String,
    term: f64,
    /// `kube_ovn_ovn_status` of ovsdb-server-northbound: 1 leader, 2 follower, 0 down.
    status: f64,
    /// The lines the above come from, to print.
    lines: Vec<String>,
}

/// The northbound database's role, term and status in one monitor's `/metrics`.
fn parse(node: &'static str, text: &str) -> Result<Member> {
    let samples = parse_metrics(text);
    let nb = [("db_name", "OVN_Northbound")];
    let role = find(&samples, "kube_ovn_cluster_role", &nb)
        .with_context(|| format!("{node}: no kube_ovn_cluster_role of OVN_Northbound yet"))?;
    let server_role = role
        .labels
        .get("server_role")
        .with_context(|| format!("{node}: no server_role in {}", role.line))?;
    let term = find(&samples, "kube_ovn_cluster_term", &nb)
        .with_context(|| format!("{node}: no kube_ovn_cluster_term of OVN_Northbound yet"))?;
    let status = find(
        &samples,
        "kube_ovn_ovn_status",
        &[("component", "ovsdb-server-northbound")],
    )
    .with_context(|| format!("{node}: no kube_ovn_ovn_status of ovsdb-server-northbound yet"))?;
    Ok(Member {
        node,
        role: server_role.clone(),
        term: term.value,
        status: status.value,
        lines: [role, term, status].iter().map(|s| s.line.clone()).collect(),
    })
}

/// One member's metrics, scraped from its node's network namespace (the monitor listens on the
/// node's address only: ENABLE_BIND_LOCAL_IP).
fn scrape(lab: &Lab, node: &'static str, ip: &str) -> Result<Member> {
    let netns = kube_ovn_dataplane::Netns::open(lab.netns_path(node))?;
    let addr: SocketAddr = format!("{ip}:10661").parse()?;
    let answer =
        netns.run(|| kube_ovn_lab::netexec::http_get(addr, "/metrics", Duration::from_secs(2)))??;
    ensure!(
        answer.status == 200,
        "{node}: GET /metrics: HTTP {}",
        answer.status
    );
    parse(node, &answer.body)
}

/// Every member's report, once all of them answer with the database up (`kube_ovn_ovn_status`
/// 1 or 2) and exactly one of them is the leader; the leader first.
fn all_with_one_leader(lab: &Lab, what: &str) -> Result<Vec<Member>> {
    let mut found = Vec::new();
    let last = std::cell::RefCell::new(String::new());
    wait_until(what, WAIT, || {
        let mut members = Vec::new();
        for (node, ip) in MEMBERS {
            match scrape(lab, node, ip) {
                Ok(m) => members.push(m),
                Err(e) => {
                    *last.borrow_mut() = format!("{e:#}");
                    return Ok(false);
                }
            }
        }
        let leaders = members.iter().filter(|m| m.role == "leader").count();
        let up = members.iter().all(|m| m.status > 0.0);
        *last.borrow_mut() = format!("{members:?}");
        if leaders == 1 && up {
            members.sort_by_key(|m| m.role != "leader");
            found = members;
            return Ok(true);
        }
        Ok(false)
    })
    .with_context(|| last.borrow().clone())?;
    Ok(found)
}

fn print(members: &[Member]) {
    for m in members {
        for l in &m.lines {
            println!("  {}: {l}", m.node);
        }
    }
}

/// `kubectl ko nb status`: the leader's cluster/status lists the three members.
fn ko_lists_three_members(lab: &Lab) -> Result<()> {
    let out = operations::ko(lab, &["nb", "status"])?;
    let text = operations::text(&out);
    ensure!(out.status.success(), "kubectl ko nb status failed:\n{text}");
    ensure!(
        text.contains("Role: leader"),
        "kubectl ko nb status, not the leader's:\n{text}"
    );
    for (node, ip) in MEMBERS {
        ensure!(
            text.contains(&format!(" at tcp:{ip}:6643)")),
            "kubectl ko nb status does not list {node} ({ip}):\n{text}"
        );
    }
    Ok(())
}

fn ovn_central_pod(lab: &Lab, node: &str) -> Result<String> {
    jsonpath(
        lab,
        &[
            "get",
            "pods",
            "-n",
            "kube-system",
            "-l",
            "app=ovn-central",
            &format!("--field-selector=spec.nodeName={node}"),
        ],
        "{.items[*].metadata.name}",
    )
}

/// The check (see the module's comment).
pub fn the_nb_leader_moves_when_its_pod_goes(lab: &Lab) -> Result<()> {
    let began = Instant::now();
    let before = all_with_one_leader(lab, "each ovn-central member's monitor to report, one NB leader")?;
    println!("RAFT: kube-ovn-monitor on each member before:");
    print(&before);
    ko_lists_three_members(lab)?;
    let (old, old_term) = (before[0].node, before[0].term);

    let pod = ovn_central_pod(lab, old)?;
    ensure!(!pod.trim().is_empty(), "no ovn-central pod on {old}");
    lab.ok(&[
        "kubectl",
        "-n",
        "kube-system",
        "delete",
        "pod",
        pod.trim(),
        "--timeout=60s",
    ])?;
    let deleted = Instant::now();
    let mut new_leader = None;
    let last = std::cell::RefCell::new(String::new());
    wait_until(
        "another member to report NB leadership with a higher term",
        WAIT,
        || {
            for (node, ip) in MEMBERS.iter().filter(|(n, _)| *n != old) {
                match scrape(lab, node, ip) {
                    Ok(m) if m.role == "leader" && m.term > old_term => {
                        new_leader = Some(m);
                        return Ok(true);
                    }
                    Ok(m) => *last.borrow_mut() = format!("{m:?}"),
                    Err(e) => *last.borrow_mut() = format!("{e:#}"),
                }
            }
            Ok(false)
        },
    )
    .with_context(|| last.borrow().clone())?;
    let new_leader = new_leader.context("no new leader")?;
    println!(
        "RAFT: {old}'s ovn-central pod deleted (NB leader, term {old_term}); {} leads at term {} after {:.1} s:",
        new_leader.node,
        new_leader.term,
        deleted.elapsed().as_secs_f64()
    );
    print(std::slice::from_ref(&new_leader));

    // The Deployment's new pod goes to the only master without one, joins with the database
    // it kept (a hostPath) and its monitor reports again.
    wait_until("the ovn-central pod to come back on its node", WAIT, || {
        let now = ovn_central_pod(lab, old)?;
        Ok(!now.trim().is_empty() && now.trim() != pod.trim())
    })?;
    let after = all_with_one_leader(lab, "all three members to report again, one NB leader")?;
    ensure!(
        after[0].term >= new_leader.term,
        "the term went back: {after:?} after {new_leader:?}"
    );
    println!("RAFT: kube-ovn-monitor on each member after:");
    print(&after);
    ko_lists_three_members(lab)?;
    lab.ok(&["kubectl", "create", "namespace", "raft"])?;
    new_pod_ready(lab, "raft", "after-raft")?;
    println!(
        "RAFT: leader change checked in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `kubectl ko reload` as an operator runs it: every component restarted in order, ovs-ovn in
/// place node by node (a node's own address is on an OVS bridge in the lab: deleting its
/// ovs-ovn pod once cut its kubelet off the API server for good), then `diagnose all` green.
pub fn reload_restarts_everything_and_it_comes_back(lab: &Lab) -> Result<()> {
    let began = Instant::now();
    let out = operations::ko(lab, &["reload", "--timeout", "180"])?;
    let t = operations::text(&out);
    ensure!(out.status.success(), "kubectl ko reload failed:\n{t}");
    for node in ["node1", "node2", "node3"] {
        ensure!(
            t.lines()
                .any(|l| l.starts_with("ovs-ovn-") && l.contains(&format!("ready again on node {node}"))),
            "reload did not restart ovs-ovn on {node}:\n{t}"
        );
    }
    println!(
        "kubectl ko reload: done in {:.1} s",
        began.elapsed().as_secs_f64()
    );
    let last = std::cell::RefCell::new(String::new());
    wait_until(
        "kubectl ko diagnose all to be green after the reload",
        WAIT,
        || {
            let out = operations::ko(lab, &["diagnose", "all"])?;
            *last.borrow_mut() = operations::text(&out);
            Ok(out.status.success())
        },
    )
    .with_context(|| last.borrow().clone())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monitors_northbound_lines_are_read() {
        let text = "\
kube_ovn_cluster_role{hostname=\"node1\",db_name=\"OVN_Southbound\",server_id=\"a\",cluster_id=\"b\",server_role=\"follower\"} 1.0
kube_ovn_cluster_role{hostname=\"node1\",db_name=\"OVN_Northbound\",server_id=\"a\",cluster_id=\"b\",server_role=\"leader\"} 1.0
kube_ovn_cluster_term{hostname=\"node1\",db_name=\"OVN_Northbound\",server_id=\"a\",cluster_id=\"b\"} 3.0
kube_ovn_ovn_status{hostname=\"node1\",component=\"ovsdb-server-northbound\"} 1.0
";
        let m = parse("node1", text).unwrap();
        assert_eq!(m.role, "leader");
        assert!(
            (m.term - 3.0).abs() < f64::EPSILON && (m.status - 1.0).abs() < f64::EPSILON,
            "{m:?}"
        );
        assert_eq!(m.lines.len(), 3);
        assert!(
            parse("node1", "")
                .unwrap_err()
                .to_string()
                .contains("kube_ovn_cluster_role")
        );
    }
}
