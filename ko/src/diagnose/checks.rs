//! What `kubectl ko diagnose` concludes from what it read: pure functions from kubectl's JSON and
//! the OVN/OVS tools' outputs to findings (PASS, FAIL with the reason, WARN, INFO). Unit-tested
//! with outputs recorded from the real tools.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Pass,
    Info,
    Warn,
    Fail,
}

/// One line of the report: what was checked (`subject`) and what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub level: Level,
    pub subject: String,
    pub message: String,
}

impl Finding {
    pub fn new(level: Level, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            level,
            subject: subject.into(),
            message: message.into(),
        }
    }
    pub fn pass(subject: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Level::Pass, subject, message)
    }
    pub fn fail(subject: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Level::Fail, subject, message)
    }
    /// PASS when `ok`, else FAIL, with the same message.
    pub fn either(ok: bool, subject: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(if ok { Level::Pass } else { Level::Fail }, subject, message)
    }
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.level {
            Level::Pass => "PASS",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        write!(f, "{tag}  {}: {}", self.subject, self.message)
    }
}

/// The workloads of `deploy/` (Kube-OVN's names); `required` ones must exist.
pub const WORKLOADS: [(&str, &str, bool); 7] = [
    ("Deployment", "ovn-central", true),
    ("Deployment", "kube-ovn-controller", true),
    ("DaemonSet", "ovs-ovn", true),
    ("DaemonSet", "kube-ovn-cni", true),
    ("DaemonSet", "kube-ovn-speaker", false),
    ("DaemonSet", "kube-ovn-pinger", false),
    ("Deployment", "kube-ovn-monitor", false),
];

fn number(v: &Value) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// Whether each of our Deployments and DaemonSets has all its pods ready, from
/// `kubectl get deployments,daemonsets -o json`'s items.
pub fn workloads(list: &Value) -> Vec<Finding> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    WORKLOADS
        .iter()
        .filter_map(|(kind, name, required)| {
            let subject = format!("{} {name}", kind.to_lowercase());
            let Some(w) = items
                .iter()
                .find(|i| i["kind"] == *kind && i["metadata"]["name"] == *name)
            else {
                return required.then(|| Finding::fail(subject, "not found"));
            };
            let s = &w["status"];
            let (ready, want) = if *kind == "Deployment" {
                (number(&s["readyReplicas"]), number(&w["spec"]["replicas"]))
            } else {
                (number(&s["numberReady"]), number(&s["desiredNumberScheduled"]))
            };
            Some(Finding::either(
                ready == want && (want > 0 || !required),
                subject,
                format!("{ready}/{want} pods ready"),
            ))
        })
        .collect()
}

/// The CRDs `deploy/crds` installs that every Kube-OVN client needs.
pub const CRDS: [&str; 8] = [
    "subnets.kubeovn.io",
    "ips.kubeovn.io",
    "vpcs.kubeovn.io",
    "vlans.kubeovn.io",
    "provider-networks.kubeovn.io",
    "vips.kubeovn.io",
    "ippools.kubeovn.io",
    "vpc-nat-gateways.kubeovn.io",
];

/// Whether our CRDs are installed, from `kubectl get crd -o json`.
pub fn crds(list: &Value) -> Finding {
    let have: BTreeSet<&str> = list["items"]
        .as_array()
        .map(|i| i.iter().filter_map(|c| c["metadata"]["name"].as_str()).collect())
        .unwrap_or_default();
    let missing: Vec<&str> = CRDS.iter().copied().filter(|c| !have.contains(c)).collect();
    if missing.is_empty() {
        Finding::pass("CRDs", format!("{} Kube-OVN CRDs installed", CRDS.len()))
    } else {
        Finding::fail("CRDs", format!("missing: {}", missing.join(", ")))
    }
}

/// The nodes' names and whether each is Ready, from `kubectl get nodes -o json`.
pub fn nodes(list: &Value) -> Vec<(String, bool)> {
    list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|n| {
            let ready = n["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
            (
                n["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                ready,
            )
        })
        .collect()
}

/// One member's view of a clustered OVN database, from `cluster/status <DB>`; a database not
/// clustered (one ovn-central, as `deploy/` installs by default) has no such command:
/// `standalone` is then its `ovsdb-server/list-dbs` answer.
pub fn raft(db: &str, pod: &str, status: Result<&str, &str>, standalone: Option<bool>) -> Finding {
    let subject = format!("OVN {db} on {pod}");
    let text = match status {
        Ok(t) => t,
        Err(e) if e.contains("is not a valid command") => {
            return match standalone {
                Some(true) => Finding::pass(subject, "standalone database (not clustered), serving"),
                _ => Finding::fail(subject, "standalone database does not answer"),
            };
        }
        Err(e) => return Finding::fail(subject, format!("cluster/status failed: {e}")),
    };
    let field = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_owned()))
            .unwrap_or_default()
    };
    let (status, role, leader) = (field("Status:"), field("Role:"), field("Leader:"));
    if status != "cluster member" {
        return Finding::fail(subject, format!("not a cluster member: {status}"));
    }
    if leader.is_empty() || leader == "unknown" {
        return Finding::fail(subject, format!("no leader known (role {role})"));
    }
    // Servers: "    3121 (3121 at tcp:…) (self) …"; each other member must be connected.
    let connections = field("Connections:");
    let servers: Vec<(String, bool)> = text
        .lines()
        .skip_while(|l| !l.starts_with("Servers:"))
        .skip(1)
        .filter_map(|l| {
            let sid = l.split_whitespace().next()?.to_owned();
            Some((sid, l.contains("(self)")))
        })
        .collect();
    let unconnected: Vec<&str> = servers
        .iter()
        .filter(|(sid, me)| {
            !me && !connections.contains(&format!("->{sid}")) && !connections.contains(&format!("<-{sid}"))
        })
        .map(|(sid, _)| sid.as_str())
        .collect();
    if !unconnected.is_empty() {
        return Finding::fail(
            subject,
            format!("no connection to member(s) {}", unconnected.join(", ")),
        );
    }
    Finding::pass(
        subject,
        format!("{role}, leader {leader}, {} member(s) connected", servers.len()),
    )
}

/// ovn-northd: one member active (`ovn-appctl -t ovn-northd status` → `Status: active`).
pub fn northd(statuses: &[(String, Result<String, String>)]) -> Finding {
    let active: Vec<&str> = statuses
        .iter()
        .filter(|(_, s)| s.as_ref().is_ok_and(|s| s.contains("Status: active")))
        .map(|(p, _)| p.as_str())
        .collect();
    match active.as_slice() {
        [one] => Finding::pass("ovn-northd", format!("active on {one}")),
        [] => Finding::fail(
            "ovn-northd",
            format!(
                "none active: {}",
                statuses
                    .iter()
                    .map(|(p, s)| format!(
                        "{p}: {}",
                        s.as_ref()
                            .map_or_else(|e| e.trim().to_owned(), |s| s.trim().to_owned())
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
        ),
        many => Finding::fail("ovn-northd", format!("active on several: {}", many.join(", "))),
    }
}

/// A chassis of the southbound database with its tunnel endpoints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chassis {
    pub name: String,
    pub hostname: String,
    pub encap_ips: Vec<String>,
}

/// The tunnels a node's br-int should have (one to every other chassis' encap IP) against those
/// it has (`options:remote_ip` of its tunnel interfaces).
pub fn tunnels(node: &str, system_id: &str, chassis: &[Chassis], remote_ips: &BTreeSet<String>) -> Finding {
    let subject = format!("node {node}");
    if !chassis.iter().any(|c| c.name == system_id) {
        return Finding::fail(
            subject,
            format!(
                "its chassis {system_id} is not in the southbound database (ovn-controller has not registered it)"
            ),
        );
    }
    let others: Vec<&Chassis> = chassis.iter().filter(|c| c.name != system_id).collect();
    let missing: Vec<String> = others
        .iter()
        .filter(|c| !c.encap_ips.iter().any(|ip| remote_ips.contains(ip)))
        .map(|c| format!("{} ({})", c.hostname, c.encap_ips.join(",")))
        .collect();
    if missing.is_empty() {
        Finding::pass(subject, format!("tunnels to all {} other chassis", others.len()))
    } else {
        Finding::fail(subject, format!("no tunnel to chassis {}", missing.join(", ")))
    }
}

/// One sample of a Prometheus text exposition: name, labels, value.
pub type Sample = (String, BTreeMap<String, String>, f64);

/// Parses Prometheus' text format (what the pinger serves on `/metrics`).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (head, value) = l.rsplit_once(' ')?;
            let value: f64 = value.trim().parse().ok()?;
            let (name, labels) = match head.split_once('{') {
                Some((n, rest)) => {
                    let inner = rest.trim_end_matches('}');
                    let labels = inner
                        .split("\",")
                        .filter_map(|kv| {
                            let (k, v) = kv.split_once("=\"")?;
                            Some((k.trim().to_owned(), v.trim_end_matches('"').to_owned()))
                        })
                        .collect();
                    (n.to_owned(), labels)
                }
                None => (head.trim().to_owned(), BTreeMap::new()),
            };
            Some((name, labels, value))
        })
        .collect()
}

/// A pinger's metrics (Kube-OVN's `pinger_*`) as findings: its gauges of OVS, ovn-controller,
/// port bindings and the API server must be healthy; ping losses are cumulative counters, so
/// they are reported (WARN when any), not failed on.
pub fn pinger(node: &str, samples: &[Sample]) -> Vec<Finding> {
    let subject = format!("pinger on {node}");
    let sum = |name: &str| -> Option<f64> {
        let v: Vec<f64> = samples.iter().filter(|s| s.0 == name).map(|s| s.2).collect();
        (!v.is_empty()).then(|| v.iter().sum())
    };
    let mut out = Vec::new();
    for (up, down, what) in [
        ("pinger_ovs_up", "pinger_ovs_down", "OVS"),
        (
            "pinger_ovn_controller_up",
            "pinger_ovn_controller_down",
            "ovn-controller",
        ),
        (
            "pinger_apiserver_healthy",
            "pinger_apiserver_unhealthy",
            "the API server",
        ),
    ] {
        match (sum(up), sum(down)) {
            (_, Some(d)) if d > 0.0 => {
                out.push(Finding::fail(&subject, format!("{what} is down ({down} {d})")));
            }
            (Some(u), _) if u > 0.0 => out.push(Finding::pass(&subject, format!("{what} up"))),
            _ => {}
        }
    }
    if let Some(n) = sum("pinger_inconsistent_port_binding").filter(|n| *n > 0.0) {
        out.push(Finding::fail(
            &subject,
            format!("{n} port bindings inconsistent between OVS and OVN"),
        ));
    }
    for (lost, count, what) in [
        ("pinger_pod_ping_lost_total", "pinger_pod_ping_count_total", "pod"),
        (
            "pinger_node_ping_lost_total",
            "pinger_node_ping_count_total",
            "node",
        ),
    ] {
        if let (Some(l), Some(c)) = (sum(lost), sum(count)) {
            out.push(Finding::new(
                if l > 0.0 { Level::Warn } else { Level::Info },
                &subject,
                format!("{what} pings lost {l} of {c} since it started"),
            ));
        }
    }
    if out.is_empty() {
        out.push(Finding::new(Level::Warn, subject, "no pinger_* metrics served"));
    }
    out
}

/// A subnet's `status.conditions` as Kube-OVN writes them (`Ready`, `Validated`, `Error`): a
/// `Ready`/`Validated` that is not True, or an `Error` that is, fails with its reason.
pub fn subnet_conditions(subject: &str, subnet: &Value) -> Vec<Finding> {
    let conditions = subnet["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut out: Vec<Finding> = conditions
        .iter()
        .filter_map(|c| {
            let kind = c["type"].as_str()?;
            let status = c["status"].as_str().unwrap_or_default();
            let why = [c["reason"].as_str(), c["message"].as_str()]
                .into_iter()
                .flatten()
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join(": ");
            let bad = match kind {
                "Ready" | "Validated" => status != "True",
                "Error" => status == "True",
                _ => return None,
            };
            Some(if bad {
                Finding::fail(
                    subject,
                    format!(
                        "condition {kind}={status}{}",
                        if why.is_empty() {
                            String::new()
                        } else {
                            format!(" ({why})")
                        }
                    ),
                )
            } else {
                Finding::pass(subject, format!("condition {kind}={status}"))
            })
        })
        .collect();
    if out.is_empty() {
        out.push(Finding::new(Level::Info, subject, "no status conditions"));
    }
    out
}

/// The gateway probe from a node: connected, or refused (the router's TCP reset), is an answer;
/// a timeout or anything else is not.
pub fn gateway_answer(subnet: &str, gateway: &str, node: &str, result: Result<(), &str>) -> Finding {
    let subject = format!("subnet {subnet}");
    match result {
        Ok(()) => Finding::pass(subject, format!("gateway {gateway} answers from node {node}")),
        Err(e) if e.contains("Connection refused") => Finding::pass(
            subject,
            format!("gateway {gateway} answers from node {node} (TCP reset)"),
        ),
        Err(e) if e.contains("exit code 124") || e.contains("status 124") || e.contains("timed out") => {
            Finding::fail(
                subject,
                format!("gateway {gateway} does not answer from node {node} within 3 s"),
            )
        }
        Err(e) => Finding::fail(
            subject,
            format!("gateway {gateway} from node {node}: {}", last_line(e)),
        ),
    }
}

/// The last line of an error that says something (kubectl's stderr carries the tool's message,
/// then kubectl's own "command terminated with exit code N").
pub fn last_line(e: &str) -> String {
    e.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("command terminated with exit code"))
        .map_or(e, |l| {
            // `kubectl … failed (exit status: N): <stderr>` when stderr was one line.
            l.split_once(" failed (exit status: ")
                .and_then(|(_, rest)| rest.split_once("): "))
                .map_or(l, |(_, msg)| msg)
        })
        .to_owned()
}

/// The command `diagnose IPPorts` runs in a pinger's container: the pinger with the args its
/// DaemonSet gives it (where its OVS sockets are, which names it resolves: a job with the
/// binary's defaults would probe other paths than the pinger itself does), minus the serving and
/// log-file ones, in job mode with `targets`.
pub fn ip_ports_job(daemonset_args: &[String], targets: &str) -> Vec<String> {
    const REPLACED: [&str; 8] = [
        "--mode",
        "--exit-code",
        "--target-ip-ports",
        "--enable-metrics",
        "--logtostderr",
        "--alsologtostderr",
        "--log_file",
        "--log_file_max_size",
    ];
    let kept = daemonset_args.iter().filter(|a| {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        !REPLACED.contains(&name)
    });
    ["/kube-ovn/kube-ovn-pinger", "--mode=job", "--exit-code=1"]
        .into_iter()
        .map(str::to_owned)
        .chain(kept.cloned())
        .chain([format!("--target-ip-ports={targets}")])
        .collect()
}

#[cfg(test)]
mod tests;
