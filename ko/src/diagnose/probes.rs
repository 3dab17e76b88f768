//! The reads behind `diagnose`: commands in the ovn-central and ovs-ovn pods, the API server's
//! pod proxy for the pingers. Each turns its outputs into findings with [`super::checks`].

use std::time::Duration;

use serde_json::Value;

use super::checks::{self, Finding, Level, last_line};
use super::{Report, chassis_of, metrics_port, tunnel_remotes};
use crate::kubectl;
use crate::trace::{access, nb};

/// Bounds every control-socket call, so a hung (e.g. stopped) daemon is a FAIL, not a hang.
const TIMEOUT: &str = "--timeout=3";
/// How long a command in a pod may take, its node's kubelet reached through the API server
/// included (~30 s of the API server's dial when that node's network is down).
const NODE_LIMIT: Duration = Duration::from_secs(8);

fn text(r: anyhow::Result<String>) -> Result<String, String> {
    r.map_err(|e| format!("{e:#}"))
}

/// The nodes that gave no answer within [`NODE_LIMIT`] in this run. A node's network is down
/// as a whole (its uplink on an OVS bridge whose ovs-vswitchd is stopped), so a command in any
/// other pod on it fails at once, naming the earlier silence, instead of waiting out the limit
/// again: `diagnose` stays prompt when the node of ovn-central is the one cut off.
#[derive(Default)]
pub struct Silent(std::cell::RefCell<std::collections::HashMap<String, String>>);

impl Silent {
    /// How `node` gave no answer, when it did.
    fn earlier(&self, node: &str) -> Option<String> {
        self.0.borrow().get(node).cloned()
    }

    /// `command` in `container` of `pod`, bounded by [`NODE_LIMIT`].
    fn exec(&self, pod: &kubectl::ComponentPod, container: &str, command: &[&str]) -> Result<String, String> {
        if let Some(earlier) = self.earlier(&pod.node) {
            return Err(format!(
                "{} (not asked: node {} gave {earlier} earlier in this run)",
                access::NO_ANSWER,
                pod.node
            ));
        }
        let r = text(access::exec_within(&pod.name, container, command, NODE_LIMIT));
        if let Err(e) = &r
            && e.contains(access::NO_ANSWER)
        {
            let from = format!(
                "{} within {} s (pod {})",
                access::NO_ANSWER,
                NODE_LIMIT.as_secs(),
                pod.name
            );
            self.0.borrow_mut().insert(pod.node.clone(), from);
        }
        r
    }
}

/// Each ovn-central member's view of the NB and SB RAFT clusters, and ovn-northd.
pub fn ovn_central(report: &mut Report, silent: &Silent) {
    let Some(pods) = report.read("ovn-central", kubectl::component_pods("ovn-central")) else {
        return;
    };
    if pods.is_empty() {
        report.add(Finding::fail("ovn-central", "no pod with app=ovn-central"));
        return;
    }
    let mut northd = Vec::new();
    for pod in &pods {
        let exec = |cmd: &[&str]| silent.exec(pod, access::CENTRAL_CONTAINER, cmd);
        for (db, ctl, schema) in [
            ("NB", "/var/run/ovn/ovnnb_db.ctl", "OVN_Northbound"),
            ("SB", "/var/run/ovn/ovnsb_db.ctl", "OVN_Southbound"),
        ] {
            let status = exec(&["ovn-appctl", TIMEOUT, "-t", ctl, "cluster/status", schema]);
            let standalone = status.is_err().then(|| {
                exec(&["ovn-appctl", TIMEOUT, "-t", ctl, "ovsdb-server/list-dbs"])
                    .is_ok_and(|dbs| dbs.lines().any(|l| l.trim() == schema))
            });
            report.add(checks::raft(
                db,
                &pod.name,
                status.as_deref().map_err(String::as_str),
                standalone,
            ));
        }
        northd.push((
            pod.name.clone(),
            exec(&[
                "ovn-appctl",
                TIMEOUT,
                "-t",
                "/var/run/ovn/ovn-northd.ctl",
                "status",
            ]),
        ));
    }
    report.add(checks::northd(&northd));
}

/// The southbound database's chassis with their tunnel endpoints.
pub fn chassis(silent: &Silent) -> anyhow::Result<Vec<checks::Chassis>> {
    let pod = kubectl::ready_pod("ovn-central", None)?;
    let sbctl = |args: &[&str]| {
        let mut all = vec!["ovn-sbctl", "--no-leader-only", "--format=json"];
        all.extend_from_slice(args);
        silent
            .exec(&pod, access::CENTRAL_CONTAINER, &all)
            .map_err(anyhow::Error::msg)
    };
    chassis_of(
        &sbctl(&["--columns=name,hostname", "list", "Chassis"])?,
        &sbctl(&["--columns=chassis_name,ip", "list", "Encap"])?,
    )
}

/// One node: Ready, its pods, OVS and ovn-controller answering, tunnels to the other chassis.
pub fn node(
    report: &mut Report,
    silent: &Silent,
    node: &str,
    ready: bool,
    chassis: Option<&[checks::Chassis]>,
) {
    let subject = format!("node {node}");
    report.add(Finding::either(
        ready,
        &subject,
        if ready { "Ready" } else { "not Ready" },
    ));
    for (app, what) in [("kube-ovn-cni", "kube-ovn-cni"), ("ovs", "ovs-ovn")] {
        let Some(pods) = report.read(&subject, kubectl::component_pods(app)) else {
            continue;
        };
        match pods.iter().find(|p| p.node == node) {
            None => report.add(Finding::fail(&subject, format!("no {what} pod"))),
            Some(p) => report.add(Finding::either(
                p.ready,
                &subject,
                format!(
                    "{what} pod {} {}",
                    p.name,
                    if p.ready { "ready" } else { "not ready" }
                ),
            )),
        }
    }
    let Some(pod) = kubectl::component_pods("ovs")
        .ok()
        .and_then(|pods| pods.into_iter().find(|p| p.node == node))
    else {
        return;
    };
    if let Some(earlier) = silent.earlier(node) {
        report.add(Finding::fail(
            &subject,
            format!(
                "its pods are not reached: it gave {earlier} earlier in this run; its other checks skipped"
            ),
        ));
        return;
    }
    let exec = |cmd: &[&str]| silent.exec(&pod, access::OVS_CONTAINER, cmd);
    for (daemon, ctl) in [
        ("ovs-vswitchd", access::VSWITCHD_CTL),
        ("ovsdb-server", access::OVSDB_CTL),
    ] {
        match exec(&["ovs-appctl", TIMEOUT, "-t", ctl, "version"]) {
            Ok(v) => report.add(Finding::pass(
                &subject,
                format!(
                    "{daemon} answers ({})",
                    v.lines().next().unwrap_or_default().trim()
                ),
            )),
            Err(e) => {
                report.add(Finding::fail(
                    &subject,
                    format!("{daemon} does not answer on {ctl}: {}", last_line(&e)),
                ));
                // A node that does not answer at all (where the uplink is a port of OVS, its
                // network is down with ovs-vswitchd): its other checks would only wait too.
                if e.contains(access::NO_ANSWER) {
                    report.add(Finding::new(
                        Level::Info,
                        &subject,
                        "its other checks skipped: the node does not answer",
                    ));
                    return;
                }
            }
        }
    }
    report.add(
        match exec(&["ovn-appctl", TIMEOUT, "-t", "ovn-controller", "connection-status"]) {
            Ok(s) if s.trim() == "connected" => {
                Finding::pass(&subject, "ovn-controller connected to the southbound database")
            }
            Ok(s) => Finding::fail(
                &subject,
                format!("ovn-controller is {} from the southbound database", s.trim()),
            ),
            Err(e) => Finding::fail(
                &subject,
                format!("ovn-controller does not answer: {}", last_line(&e)),
            ),
        },
    );
    let Some(chassis) = chassis else { return };
    let system_id = exec(&[
        "ovs-vsctl",
        TIMEOUT,
        "get",
        "Open_vSwitch",
        ".",
        "external_ids:system-id",
    ]);
    let ifaces = exec(&[
        "ovs-vsctl",
        TIMEOUT,
        "--format=json",
        "--columns=type,options",
        "list",
        "Interface",
    ]);
    report.add(
        match (
            system_id,
            ifaces.map(|t| tunnel_remotes(&t).map_err(|e| format!("{e:#}"))),
        ) {
            (Ok(id), Ok(Ok(remotes))) => {
                checks::tunnels(node, id.trim().trim_matches('"'), chassis, &remotes)
            }
            (Err(e), _) | (_, Err(e) | Ok(Err(e))) => {
                Finding::fail(&subject, format!("reading its tunnels: {}", last_line(&e)))
            }
        },
    );
}

/// A subnet: its conditions, its switch and router port in OVN, its gateway from every node.
pub fn subnet(report: &mut Report, silent: &Silent, name: &str) {
    let subject = format!("subnet {name}");
    let Some(subnet) = report.read(&subject, kubectl::json(&["get", "subnet", name])) else {
        return;
    };
    report.extend(checks::subnet_conditions(&subject, &subnet));
    let find = |table: &str, row: &str| {
        access::nbctl_json(&["--columns=name", "find", table, &format!("name={row}")])
            .and_then(|t| nb::rows(&t))
            .map(|rows| !rows.is_empty())
    };
    if let Some(found) = report.read(&subject, find("Logical_Switch", name)) {
        report.add(Finding::either(
            found,
            &subject,
            format!(
                "logical switch {name} {}",
                if found { "exists" } else { "is missing" }
            ),
        ));
    }
    let spec = &subnet["spec"];
    let vpc = spec["vpc"]
        .as_str()
        .filter(|v| !v.is_empty())
        .unwrap_or("ovn-cluster");
    let underlay = spec["vlan"].as_str().is_some_and(|v| !v.is_empty()) && spec["logicalGateway"] != true;
    if !underlay {
        let lrp = format!("{vpc}-{name}");
        if let Some(found) = report.read(&subject, find("Logical_Router_Port", &lrp)) {
            report.add(Finding::either(
                found,
                &subject,
                format!(
                    "router port {lrp} {}",
                    if found { "exists" } else { "is missing" }
                ),
            ));
        }
    }
    let gateways: Vec<&str> = spec["gateway"]
        .as_str()
        .unwrap_or_default()
        .split(',')
        .filter(|g| !g.is_empty())
        .collect();
    if vpc != "ovn-cluster" || underlay {
        report.add(Finding::new(
            Level::Info,
            &subject,
            format!(
                "gateway {} not probed from the nodes (nodes reach only the default VPC's overlay subnets)",
                gateways.join(",")
            ),
        ));
        return;
    }
    let Some(pods) = report.read(&subject, kubectl::component_pods("ovs")) else {
        return;
    };
    for pod in pods.iter().filter(|p| p.ready) {
        for gw in &gateways {
            // bash's /dev/tcp: a connection to port 9 (discard); the OVN router answers a SYN to
            // its own address with a reset ("Connection refused"): it is reachable.
            let script = format!("exec 3<>/dev/tcp/{gw}/9");
            let r = silent.exec(
                pod,
                access::OVS_CONTAINER,
                &["timeout", "3", "bash", "-c", &script],
            );
            report.add(checks::gateway_answer(
                name,
                gw,
                &pod.node,
                r.as_ref().map(|_| ()).map_err(String::as_str),
            ));
        }
    }
}

/// Every pinger's (or `node`'s) metrics, through the API server's pod proxy.
/// The pinger's container in the DaemonSet (deploy/base/pinger.yaml, Kube-OVN's name too).
const PINGER_CONTAINER: &str = "pinger";

/// `diagnose IPPorts`: one job-mode round of every ready pinger with `targets`.
pub fn ip_ports(report: &mut Report, targets: &str) {
    let Some(pods) = report.read("pinger", kubectl::component_pods("kube-ovn-pinger")) else {
        return;
    };
    if pods.is_empty() {
        report.add(Finding::fail(
            "pinger",
            "no pinger (no pod with app=kube-ovn-pinger): IPPorts is checked from the pingers",
        ));
    }
    let ns = kubectl::namespace();
    let Some(daemonset) = report.read(
        "pinger",
        kubectl::json(&["get", "daemonset", "-n", &ns, "kube-ovn-pinger"]),
    ) else {
        return;
    };
    let args: Vec<String> = daemonset["spec"]["template"]["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == PINGER_CONTAINER)
        .and_then(|c| c["args"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    let job = checks::ip_ports_job(&args, targets);
    let command: Vec<&str> = job.iter().map(String::as_str).collect();
    for pod in pods {
        let subject = format!("IPPorts from node {}", pod.node);
        if !pod.ready {
            report.add(Finding::fail(
                &subject,
                format!("pinger {} is not ready", pod.name),
            ));
            continue;
        }
        println!("Diagnosing node {} (pinger {})", pod.node, pod.name);
        match kubectl::exec_attached(&pod.name, PINGER_CONTAINER, &command) {
            Ok(status) if status.success() => {
                report.add(Finding::pass(
                    &subject,
                    format!("every probe answered, {targets} included"),
                ));
            }
            Ok(status) => report.add(Finding::fail(
                &subject,
                format!("the pinger's round failed ({status}; its failures are printed above)"),
            )),
            Err(e) => report.add(Finding::fail(&subject, format!("{e:#}"))),
        }
    }
}

pub fn pingers(report: &mut Report, node: Option<&str>) {
    let ns = kubectl::namespace();
    let Some(list) = report.read(
        "pinger",
        kubectl::json(&["get", "pods", "-n", &ns, "-l", "app=kube-ovn-pinger"]),
    ) else {
        return;
    };
    let pods: Vec<Value> = list["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|p| node.is_none_or(|n| p["spec"]["nodeName"] == n))
        .collect();
    if pods.is_empty() {
        let whose = node.map_or_else(String::new, |n| format!(" on node {n}"));
        report.add(Finding::new(
            Level::Info,
            "pinger",
            format!("no pinger{whose} (no pod with app=kube-ovn-pinger)"),
        ));
        return;
    }
    for pod in &pods {
        let name = pod["metadata"]["name"].as_str().unwrap_or_default();
        let on = pod["spec"]["nodeName"].as_str().unwrap_or_default();
        let path = format!(
            "/api/v1/namespaces/{ns}/pods/{name}:{}/proxy/metrics",
            metrics_port(pod)
        );
        match kubectl::output(&["get", "--raw", &path]) {
            Ok(body) => report.extend(checks::pinger(on, &checks::parse_metrics(&body))),
            // Unread is not unhealthy: the API server reaches pod addresses only where the
            // control plane routes to the pod network (the lab's does not); the nodes' own
            // checks above judge the network, the pinger's verdicts are shown when readable.
            Err(e) => report.add(Finding::new(
                Level::Warn,
                format!("pinger on {on}"),
                format!(
                    "its metrics could not be read through the API server ({path}): {}",
                    last_line(&format!("{e:#}"))
                ),
            )),
        }
    }
}
