//! `kubectl ko diagnose all|node <node>|subnet <subnet>`: checks of the cluster's network, one
//! PASS/FAIL line each, and a non-zero exit naming every failure.
//!
//! Kube-OVN's plugin checks its CRDs, Deployments and DaemonSets, the OVN databases' leaders,
//! then runs its pinger in job mode on the nodes. Ours reads instead of running jobs:
//! - `all`: the CRDs; our Deployments and DaemonSets ready; each OVN database member's RAFT view
//!   (`cluster/status`: a cluster member, a leader known, every other member connected; a
//!   standalone database must answer) and one ovn-northd active; then every node as `node`
//!   does, and every pinger's metrics;
//! - `node <n>`: the node Ready, its ovs-ovn and kube-ovn-cni pods ready, ovs-vswitchd and
//!   ovsdb-server answering their control sockets, ovn-controller connected to the southbound
//!   database, its chassis registered and a tunnel to every other chassis; its pinger's metrics;
//! - `subnet <s>`: the subnet's conditions, its logical switch and router port in the
//!   northbound database, and its gateway answering from every node (for subnets of the default
//!   VPC, which nodes reach through the join network: a TCP connection to the gateway, which the
//!   OVN router answers with a reset); the pingers' metrics.
//!
//! - `IPPorts <proto-ip-port,…>` (Kube-OVN's spelling, e.g. `tcp-10.96.0.10-53,udp-10.96.0.10-53`):
//!   every ready pinger runs one round in job mode with those targets (`kube-ovn-pinger
//!   --mode=job --exit-code=1 --target-ip-ports=…`, as Kube-OVN's plugin runs it), its output
//!   shown; a pinger whose round failed is a FAIL naming its node.
//!
//! Pingers (DaemonSet `kube-ovn-pinger`, Kube-OVN's `pinger_*` metrics) are read through the API
//! server's pod proxy; without pingers the report says "no pinger".

use std::collections::BTreeSet;
use std::process::ExitCode;

use anyhow::bail;
use serde_json::Value;

use crate::kubectl;
use crate::trace::nb;

mod checks;
mod probes;

use checks::{Finding, Level};

/// Arguments of `kubectl ko diagnose`.
#[derive(Debug, clap::Args)]
#[command(override_usage = "kubectl ko diagnose all|node <node>|subnet <subnet>|IPPorts <proto-ip-port,...>")]
pub struct DiagnoseArgs {
    /// `all` (the default), `node <node>`, `subnet <subnet>` or `IPPorts <proto-ip-port,...>`.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    All,
    Node(String),
    Subnet(String),
    /// The `--target-ip-ports` list, checked.
    IpPorts(String),
}

fn scope(args: &[String]) -> anyhow::Result<Scope> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    Ok(match words.as_slice() {
        [] | ["all"] => Scope::All,
        ["node", n] => Scope::Node((*n).to_owned()),
        ["subnet", s] => Scope::Subnet((*s).to_owned()),
        ["node"] => bail!("diagnose node: which node? (kubectl ko diagnose node <node>)"),
        ["subnet"] => bail!("diagnose subnet: which subnet? (kubectl ko diagnose subnet <subnet>)"),
        ["IPPorts", list] => {
            let targets = kube_ovn_pinger::config::parse_targets(list)
                .map_err(|e| anyhow::anyhow!("diagnose IPPorts: {e}"))?;
            if targets.is_empty() {
                bail!(
                    "diagnose IPPorts: no target in {list:?} (kubectl ko diagnose IPPorts tcp-10.96.0.10-53,udp-10.96.0.10-53)"
                );
            }
            Scope::IpPorts((*list).to_owned())
        }
        ["IPPorts"] => {
            bail!(
                "diagnose IPPorts: which targets? (kubectl ko diagnose IPPorts tcp-10.96.0.10-53,udp-10.96.0.10-53)"
            )
        }
        _ => bail!(
            "diagnose {}: expected all, node <node>, subnet <subnet> or IPPorts <proto-ip-port,...>",
            words.join(" ")
        ),
    })
}

/// The findings so far, printed as they come.
#[derive(Default)]
struct Report(Vec<Finding>);

impl Report {
    fn add(&mut self, f: Finding) {
        println!("{f}");
        self.0.push(f);
    }
    fn extend(&mut self, fs: impl IntoIterator<Item = Finding>) {
        for f in fs {
            self.add(f);
        }
    }
    /// A failed read becomes a FAIL of its subject rather than the end of the report.
    fn read<T>(&mut self, subject: &str, r: anyhow::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.add(Finding::fail(subject, format!("{e:#}")));
                None
            }
        }
    }
}

pub fn run(args: &DiagnoseArgs) -> anyhow::Result<ExitCode> {
    let scope = scope(&args.args)?;
    let mut report = Report::default();
    let silent = probes::Silent::default();
    let ns = kubectl::namespace();
    match &scope {
        Scope::All => {
            if let Some(list) = report.read("CRDs", kubectl::json(&["get", "crd"])) {
                report.add(checks::crds(&list));
            }
            if let Some(list) = report.read(
                "components",
                kubectl::json(&["get", "deployments,daemonsets", "-n", &ns]),
            ) {
                report.extend(checks::workloads(&list));
            }
            probes::ovn_central(&mut report, &silent);
            if let Some(list) = report.read("nodes", kubectl::json(&["get", "nodes"])) {
                let chassis = report.read("OVN chassis", probes::chassis(&silent));
                for (node, ready) in checks::nodes(&list) {
                    probes::node(&mut report, &silent, &node, ready, chassis.as_deref());
                }
            }
            probes::pingers(&mut report, None);
        }
        Scope::Node(node) => {
            let Some(object) = report.read(&format!("node {node}"), kubectl::json(&["get", "node", node]))
            else {
                return Ok(finish(&report));
            };
            let ready = checks::nodes(&serde_json::json!({"items": [object]}))
                .first()
                .is_some_and(|(_, r)| *r);
            let chassis = report.read("OVN chassis", probes::chassis(&silent));
            probes::node(&mut report, &silent, node, ready, chassis.as_deref());
            probes::pingers(&mut report, Some(node));
        }
        Scope::Subnet(subnet) => {
            probes::subnet(&mut report, &silent, subnet);
            probes::pingers(&mut report, None);
        }
        Scope::IpPorts(targets) => probes::ip_ports(&mut report, targets),
    }
    Ok(finish(&report))
}

fn finish(report: &Report) -> ExitCode {
    let failed: Vec<&Finding> = report.0.iter().filter(|f| f.level == Level::Fail).collect();
    if failed.is_empty() {
        let passed = report.0.iter().filter(|f| f.level == Level::Pass).count();
        println!("\ndiagnose: OK, {passed} checks passed");
        return ExitCode::SUCCESS;
    }
    println!("\ndiagnose: {} problem(s):", failed.len());
    for f in &failed {
        println!("  - {}: {}", f.subject, f.message);
    }
    ExitCode::FAILURE
}

/// The remote IPs of a node's tunnel interfaces, from `ovs-vsctl --format=json
/// --columns=type,options list Interface`.
fn tunnel_remotes(text: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(nb::rows(text)?
        .iter()
        .filter(|r| {
            nb::string(r.get("type")).is_some_and(|t| matches!(t.as_str(), "geneve" | "vxlan" | "stt"))
        })
        .filter_map(|r| nb::map(r.get("options")).remove("remote_ip"))
        .collect())
}

/// The chassis of `ovn-sbctl --format=json --columns=name,hostname list Chassis` with the IPs of
/// `--columns=chassis_name,ip list Encap`.
fn chassis_of(chassis: &str, encaps: &str) -> anyhow::Result<Vec<checks::Chassis>> {
    let encaps = nb::rows(encaps)?;
    Ok(nb::rows(chassis)?
        .iter()
        .filter_map(|r| {
            let name = nb::string(r.get("name"))?;
            let encap_ips = encaps
                .iter()
                .filter(|e| nb::string(e.get("chassis_name")).as_deref() == Some(name.as_str()))
                .filter_map(|e| nb::string(e.get("ip")))
                .collect();
            Some(checks::Chassis {
                hostname: nb::string(r.get("hostname")).unwrap_or_else(|| name.clone()),
                name,
                encap_ips,
            })
        })
        .collect())
}

/// A pod's metrics port: the container port named `metrics`, else the first, else Kube-OVN's
/// pinger default 8080.
fn metrics_port(pod: &Value) -> u64 {
    let ports: Vec<&Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|c| c["ports"].as_array().into_iter().flatten())
        .collect();
    ports
        .iter()
        .find(|p| p["name"] == "metrics")
        .or_else(|| ports.first())
        .and_then(|p| p["containerPort"].as_u64())
        .unwrap_or(8080)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn scopes() {
        assert_eq!(scope(&[]).unwrap(), Scope::All);
        assert_eq!(scope(&words("all")).unwrap(), Scope::All);
        assert_eq!(scope(&words("node n1")).unwrap(), Scope::Node("n1".into()));
        assert_eq!(scope(&words("subnet s1")).unwrap(), Scope::Subnet("s1".into()));
        assert!(
            scope(&words("node"))
                .unwrap_err()
                .to_string()
                .contains("which node")
        );
        assert!(
            scope(&words("everything"))
                .unwrap_err()
                .to_string()
                .contains("expected all")
        );
        // Kube-OVN's spelling of the targets; a bad entry is named before any pinger runs.
        assert_eq!(
            scope(&words("IPPorts tcp-10.96.0.10-53,udp-fd00::10-53")).unwrap(),
            Scope::IpPorts("tcp-10.96.0.10-53,udp-fd00::10-53".into())
        );
        let e = scope(&words("IPPorts tcp-10.96.0.10-53,icmp-1.1.1.1-0")).unwrap_err();
        assert!(e.to_string().contains("\"icmp-1.1.1.1-0\""), "{e}");
        assert!(
            scope(&words("IPPorts"))
                .unwrap_err()
                .to_string()
                .contains("which targets")
        );
    }

    #[test]
    fn tunnels_and_chassis_from_the_databases() {
        // As ovs-vsctl 3.1 and ovn-sbctl 23.03 print them.
        let ifaces = r#"{"data":[["internal",["map",[]]],["geneve",["map",[["csum","true"],["key","flow"],["remote_ip","172.30.0.12"]]]],["",["map",[]]]],"headings":["type","options"]}"#;
        assert_eq!(
            tunnel_remotes(ifaces).unwrap().into_iter().collect::<Vec<_>>(),
            vec!["172.30.0.12".to_owned()]
        );
        let ch = r#"{"data":[["ch1","node1"],["ch2","node2"]],"headings":["name","hostname"]}"#;
        let en = r#"{"data":[["ch1","172.30.0.11","geneve"],["ch2","172.30.0.12","geneve"]],"headings":["chassis_name","ip","type"]}"#;
        let c = chassis_of(ch, en).unwrap();
        assert_eq!(c[1].name, "ch2");
        assert_eq!(c[1].hostname, "node2");
        assert_eq!(c[1].encap_ips, vec!["172.30.0.12".to_owned()]);
    }

    #[test]
    fn the_metrics_port_of_a_pinger() {
        let pod = serde_json::json!({"spec": {"containers": [{"ports": [
            {"name": "probe", "containerPort": 8100}, {"name": "metrics", "containerPort": 8081}]}]}});
        assert_eq!(metrics_port(&pod), 8081);
        assert_eq!(metrics_port(&serde_json::json!({"spec": {}})), 8080);
    }
}
