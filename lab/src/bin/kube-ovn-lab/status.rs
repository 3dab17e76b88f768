//! `kube-ovn-lab status`: every component, whether it runs and whether it says it is ready,
//! and why not; the requests of our components the API server refused (its audit log); the
//! nodes and their pods; the ToR's sessions and routes; the external network (its gateway on the
//! ToR, each node's address there and the interface holding it).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use kube_ovn_lab::cluster::net;
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::cluster::state::LabState;
use kube_ovn_lab::cluster::topology::{
    CONTROLLER_METRICS_PORT, DAEMON_METRICS_PORT, EXTERNAL_VLAN, MONITOR_METRICS_PORT, SPEAKER_METRICS_PORT,
    TOR_EXTERNAL_PORT, Topology,
};
use kube_ovn_lab::cluster::{tor, tor_vlan};

const HEALTH_TIMEOUT: Duration = Duration::from_secs(2);

/// One line of the component table.
struct Line {
    component: String,
    pid: u32,
    healthy: bool,
    detail: String,
}

/// The newest record of each component, in start order.
fn latest(state: &LabState) -> Vec<(String, u32, u64)> {
    let mut order: Vec<String> = Vec::new();
    let mut newest: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    for (c, pid, start) in state.processes() {
        if !order.iter().any(|o| o == c) {
            order.push(c.to_owned());
        }
        newest.insert(c.to_owned(), (pid, start));
    }
    order
        .into_iter()
        .map(|c| {
            let (p, s) = newest[&c];
            (c, p, s)
        })
        .collect()
}

/// Where a component answers `/readyz`, if it has one.
fn readyz(t: &Topology, component: &str) -> Option<SocketAddr> {
    let at = |ip: IpAddr, port| Some(SocketAddr::new(ip, port));
    if component == "controller" {
        return at(Topology::cp_ip().into(), CONTROLLER_METRICS_PORT);
    }
    if component == "monitor" {
        return at(Topology::cp_ip().into(), MONITOR_METRICS_PORT);
    }
    // The API server speaks HTTPS; whether it answers is the cluster view's first request.
    let (node, role) = component.split_once('-')?;
    let plan = t.node(node)?;
    match role {
        "daemon" => at(plan.ip.into(), DAEMON_METRICS_PORT),
        "speaker" => at(plan.ip.into(), SPEAKER_METRICS_PORT),
        _ => None,
    }
}

async fn check(t: &Topology, state: &LabState) -> Vec<Line> {
    let mut lines = Vec::new();
    for (component, pid, start) in latest(state) {
        let running = process::alive(pid, start);
        let mut line = Line {
            component: component.clone(),
            pid,
            healthy: running,
            detail: String::new(),
        };
        if !running {
            let tail = process::log_tail(&t.log(&component), 3);
            line.detail = format!("not running; its log ends: {}", tail.replace('\n', " | "));
        } else if let Some(health) = super::containerd::health(t, &component).await {
            line.healthy = health.is_ok();
            line.detail = health.unwrap_or_else(|e| e);
        } else if let Some(addr) = readyz(t, &component) {
            let answer =
                tokio::task::spawn_blocking(move || super::probe::get(addr, "/readyz", HEALTH_TIMEOUT)).await;
            match answer {
                Ok(Ok(_)) => line.detail = format!("ready ({addr}/readyz)"),
                Ok(Err(e)) => {
                    line.healthy = false;
                    line.detail = format!("not ready: {addr}/readyz: {e}");
                }
                Err(e) => {
                    line.healthy = false;
                    line.detail = e.to_string();
                }
            }
        } else {
            line.detail = "running".into();
        }
        lines.push(line);
    }
    lines
}

/// The ToR's sessions: `(node, established)`, or why they could not be read.
fn tor_sessions(t: &Topology) -> Result<Vec<(String, bool)>, String> {
    let out = super::verbs::tor_output(t, &tor::sessions_command(t.tor_kind)).map_err(|e| e.to_string())?;
    Ok(tor::sessions(t.tor_kind, t, &out))
}

/// The external network (`cluster::tor_vlan`): whether the ToR holds its gateway on
/// [`TOR_EXTERNAL_PORT`] and every node its address (on `eth2`, or on the bridge a
/// ProviderNetwork moved it to); the sentence saying so.
fn external_network(t: &Topology) -> (bool, String) {
    let holder = |ns: &str, address| {
        let args = tor_vlan::holder_args(address);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        net::ip(ns, &args)
            .map(|out| tor_vlan::holder(&out).map(str::to_owned))
            .map_err(|e| e.to_string())
    };
    let gateway = Topology::external_gateway();
    let mut healthy = true;
    let mut parts = vec![format!("VLAN {EXTERNAL_VLAN}")];
    match holder(&t.tor_netns(), gateway) {
        Ok(Some(dev)) if dev == TOR_EXTERNAL_PORT => {
            parts.push(format!("gateway {gateway} on the ToR's {dev}"));
        }
        Ok(Some(dev)) => {
            healthy = false;
            parts.push(format!(
                "the ToR holds {gateway} on {dev}, not {TOR_EXTERNAL_PORT}"
            ));
        }
        Ok(None) => {
            healthy = false;
            parts.push(format!("the ToR has no {gateway}"));
        }
        Err(e) => {
            healthy = false;
            parts.push(format!("the ToR: {e}"));
        }
    }
    for node in &t.nodes {
        match holder(&node.netns, node.ext_ip) {
            Ok(Some(dev)) => parts.push(format!("{} {} on {dev}", node.name, node.ext_ip)),
            Ok(None) => {
                healthy = false;
                parts.push(format!("{} has no {}", node.name, node.ext_ip));
            }
            Err(e) => {
                healthy = false;
                parts.push(format!("{}: {e}", node.name));
            }
        }
    }
    (healthy, parts.join(", "))
}

/// Components, nodes with their pods, and the ToR's routes, as `up` prints them at the end.
pub async fn overview(t: &Topology, client: &kube::Client) -> anyhow::Result<String> {
    let (_, state) = super::verbs::lab(&t.name, t.dir.parent().unwrap_or(Path::new("/")))?;
    let mut out = String::new();
    let _ = writeln!(out, "components:");
    for l in check(t, &state).await {
        let _ = writeln!(out, "  {:24} pid {:7}  {}", l.component, l.pid, l.detail);
    }
    out.push_str(&cluster_view(t, client).await?);
    Ok(out)
}

/// The requests of the components and the agent that kube-apiserver refused (403), from its
/// audit log: each is a permission `deploy/base/rbac.yaml` lacks (or a request a component
/// should not make), so any is a failure.
pub fn denials(t: &Topology) -> Vec<String> {
    let users = super::verbs::watched_users();
    kube_ovn_lab::kubernetes::audit::read(&t.control_plane().audit_log)
        .into_iter()
        .filter(|r| r.is_denial() && users.contains(&r.user))
        .map(|r| r.to_string())
        .collect()
}

/// The nodes with their pods, and the routes the ToR learnt.
pub async fn cluster_view(t: &Topology, client: &kube::Client) -> anyhow::Result<String> {
    let mut out = String::new();
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let pods = Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?;
    let _ = writeln!(out, "nodes and their pods:");
    for node in &nodes.items {
        let name = node.metadata.name.clone().unwrap_or_default();
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
            .is_some_and(|c| c.status == "True");
        let _ = writeln!(out, "  {name} ({}):", if ready { "Ready" } else { "NotReady" });
        for pod in pods
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str()))
        {
            let status = pod.status.clone().unwrap_or_default();
            let label = format!(
                "{}/{}",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            );
            // Containers ready and restarts: a crashed component the kubelet brought back
            // shows here (`up --install manifests`).
            let containers = status.container_statuses.clone().unwrap_or_default();
            let ready = containers.iter().filter(|c| c.ready).count();
            let restarts: i32 = containers.iter().map(|c| c.restart_count).sum();
            let _ = writeln!(
                out,
                "    {label:44} {:15} {:8} {ready}/{} ready{}",
                status.pod_ip.unwrap_or_default(),
                status.phase.unwrap_or_default(),
                containers.len(),
                match restarts {
                    0 => String::new(),
                    1 => ", 1 restart".into(),
                    n => format!(", {n} restarts"),
                }
            );
        }
    }
    let _ = writeln!(
        out,
        "routes the ToR learnt ({}):",
        tor::shell_words(&tor::routes_command(t.tor_kind))
    );
    match super::verbs::tor_output(t, &tor::routes_command(t.tor_kind)) {
        Ok(text) => {
            for line in text.lines().filter(|l| !l.trim().is_empty()) {
                let _ = writeln!(out, "  {line}");
            }
        }
        Err(e) => {
            let _ = writeln!(out, "  (could not read: {e})");
        }
    }
    Ok(out)
}

/// The cluster as the API shows it (nodes, pods, routes) and the refused requests, or why the API
/// could not be asked.
type ApiView = Result<(String, Vec<String>), String>;

pub fn status(name: &str, run_dir: &Path) -> anyhow::Result<ExitCode> {
    let (t, state) = super::verbs::lab(name, run_dir)?;
    let cp = kube_ovn_dataplane::Netns::open(Path::new("/run/netns").join(t.cp_netns())).map_err(|e| {
        anyhow::anyhow!("lab {name}: its control-plane namespace is gone ({e}); run `down` and `up` again")
    })?;
    let (lines, api) = cp.run(|| -> anyhow::Result<(Vec<Line>, ApiView)> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let lines = check(&t, &state).await;
            let api = async {
                let client = kube_ovn_support::kube_client(Some(&t.admin_kubeconfig())).await?;
                anyhow::Ok((cluster_view(&t, &client).await?, denials(&t)))
            }
            .await
            .map_err(|e| format!("{e:#}"));
            Ok((lines, api))
        })
    })??;
    let mut healthy = true;
    println!(
        "lab {name}: {} nodes, ToR {}{}",
        state.nodes,
        state.tor,
        if state.up_finished {
            ""
        } else {
            " (up did not finish)"
        }
    );
    for l in &lines {
        healthy &= l.healthy;
        println!(
            "  {:24} pid {:7}  {}  {}",
            l.component,
            l.pid,
            if l.healthy { "ok  " } else { "FAIL" },
            l.detail
        );
    }
    match tor_sessions(&t) {
        Ok(sessions) => {
            for (node, up) in sessions {
                healthy &= up;
                println!(
                    "  BGP {node:<20}          {}  session with the ToR {}",
                    if up { "ok  " } else { "FAIL" },
                    if up { "Established" } else { "not Established" }
                );
            }
        }
        Err(e) => {
            healthy = false;
            println!("  BGP sessions: cannot ask the ToR: {e}");
        }
    }
    let (external, detail) = external_network(&t);
    healthy &= external;
    println!(
        "  {:38}{}  {detail}",
        "external network",
        if external { "ok  " } else { "FAIL" }
    );
    match api {
        Ok((text, refused)) => {
            if refused.is_empty() {
                println!("  RBAC                                 ok    no request of any component refused");
            } else {
                healthy = false;
                for d in refused {
                    println!("  RBAC                                 FAIL  {d}");
                }
            }
            print!("{text}");
        }
        Err(e) => {
            healthy = false;
            println!("  the API does not answer: {e}");
        }
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
