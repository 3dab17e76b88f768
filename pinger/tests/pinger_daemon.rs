//! `kube-ovn-pinger` as a process against the real things: a kube-apiserver (the lab's fixture)
//! holding the pinger DaemonSet, a pinger pod and a node; a node's ovsdb-server, ovs-vswitchd
//! and ovn-controller registered in a real OVN Southbound database. Pod and node addresses are
//! 127.0.0.1 so every ping stays on loopback.
//!
//! Checks: the pinger finds its DaemonSet's pods and the nodes and pings them, reports the API
//! server, DNS, OVS, ovn-controller and a port-binding mismatch under Kube-OVN's metric names;
//! stopping ovs-vswitchd turns `pinger_ovs_up` to 0 within two intervals; `--mode=job` exits
//! with `--exit-code` when a target is unreachable and 0 when all pass. A second test starts it
//! with the exact argv of Kube-OVN v1.16.2's release manifest. Needs root; fails without.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use kube_ovn_testkit::{Daemon, Netns, OvnCentral, OvsNode, free_port, wait_until};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_kube-ovn-pinger");
const NS: &str = "kube-system";
const POD: &str = "kube-ovn-pinger-t1";
const WAIT: Duration = Duration::from_secs(20);

/// The container args of Kube-OVN's release manifest (`dist/images/install.sh`), recorded once
/// for every test in testkit with the release named.
use kube_ovn_testkit::kube_ovn_argv::{PINGER as KUBE_OVN_V1_16_2_ARGS, with_log_dir};

/// GET `path` on 127.0.0.1:`port`: status code and body.
fn http_get(port: u16, path: &str) -> Result<(u16, String)> {
    kube_ovn_testkit::kube_ovn_argv::http_get(([127, 0, 0, 1], port).into(), path)
}

/// The value of the sample that starts with `series` (name and labels, or a prefix of them).
fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

async fn kubernetes_objects(kube: &kube::Client) -> Result<()> {
    let pp = PostParams::default();
    let labels = json!({"app": "kube-ovn-pinger", "component": "network"});
    let container = json!([{"name": "pinger", "image": "kube-ovn-rs:dev"}]);
    let ds: DaemonSet = serde_json::from_value(json!({
        "metadata": {"name": "kube-ovn-pinger", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "kube-ovn-pinger"}},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": container}}},
    }))?;
    let ds = Api::<DaemonSet>::namespaced(kube.clone(), NS)
        .create(&pp, &ds)
        .await?;
    let pods = Api::<Pod>::namespaced(kube.clone(), NS);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": POD, "namespace": NS, "labels": labels, "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "kube-ovn-pinger",
            "uid": ds.metadata.uid, "controller": true}]},
        "spec": {"nodeName": "node-t1", "containers": container},
    }))?;
    pods.create(&pp, &pod).await?;
    // A pod of another app in the namespace: not a pinger, never pinged.
    let other: Pod = serde_json::from_value(json!({
        "metadata": {"name": "not-a-pinger", "namespace": NS, "labels": {"app": "other"}},
        "spec": {"nodeName": "node-t1", "containers": container},
    }))?;
    pods.create(&pp, &other).await?;
    let status =
        json!({"status": {"hostIP": "127.0.0.1", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}});
    for name in [POD, "not-a-pinger"] {
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
    }
    let nodes = Api::<Node>::all(kube.clone());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node-t1"}}))?;
    nodes.create(&pp, &node).await?;
    let status = json!({"status": {"addresses": [
        {"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": "node-t1"}]}});
    nodes
        .patch_status("node-t1", &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// A node with OVS and ovn-controller registered as a chassis in `central`'s Southbound.
fn ovs_node(central: &OvnCentral) -> Result<OvsNode> {
    let mut node = OvsNode::start("pinger-ovs")?;
    node.configure_chassis(&central.sb_remote(), Ipv4Addr::LOCALHOST)?;
    node.start_ovn_controller()?;
    let name = node.name().to_owned();
    wait_until("the chassis in the Southbound database", WAIT, || {
        Ok(central
            .sbctl(&["--bare", "--columns=hostname", "list", "Chassis"])?
            .contains(&name))
    })?;
    // An OVS interface claiming a logical port no chassis binds: one inconsistent binding.
    node.vsctl(&[
        "--no-wait",
        "add-br",
        "br-test",
        "--",
        "set",
        "bridge",
        "br-test",
        "datapath_type=netdev",
        "--",
        "add-port",
        "br-test",
        "ghost",
        "--",
        "set",
        "interface",
        "ghost",
        "type=internal",
        "external_ids:iface-id=ghost.default",
    ])?;
    Ok(node)
}

fn pinger_args(node: &OvsNode, central: &OvnCentral, kubeconfig: &Path, extra: &[String]) -> Vec<String> {
    let dir = node.dir().display().to_string();
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--interval=1".into(),
        // Resolved from /etc/hosts: no DNS query leaves the machine.
        "--internal-dns=localhost".into(),
        format!("--database.vswitch.socket.remote={}", node.db_remote()),
        format!("--database.vswitch.file.pid.path={dir}/ovsdb-server.pid"),
        format!("--service.vswitchd.file.pid.path={dir}/ovs-vswitchd.pid"),
        format!("--service.ovncontroller.file.pid.path={dir}/ovn-controller.pid"),
        format!("--ovn-sb-address={}", central.sb_remote()),
        format!("--pod-namespace={NS}"),
        format!("--node-name={}", node.name()),
        "--pod-ip=127.0.0.1".into(),
        "--host-ip=127.0.0.1".into(),
    ];
    args.extend_from_slice(extra);
    args
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinger_probes_real_daemons_and_reports_kube_ovn_metrics() -> Result<()> {
    let server = ApiServer::start_with(ApiServerOptions::default()).await?;
    let kube = server.client().await?;
    kubernetes_objects(&kube).await?;
    let kubeconfig = server.admin_kubeconfig();
    let central = OvnCentral::start()?;
    let node = ovs_node(&central)?;
    let node_name = node.name().to_owned();

    let port = free_port()?;
    let dir = tempfile::tempdir()?;
    let args = pinger_args(
        &node,
        &central,
        &kubeconfig,
        &[format!("--port={port}"), format!("--pod-name={POD}")],
    );
    let mut pinger = Daemon::spawn("kube-ovn-pinger", BIN, &args, &dir.path().join("pinger.log"), &[])?;

    let nn = format!("{{nodeName=\"{node_name}\"}}");
    let pod_series = format!(
        "pinger_pod_ping_count_total{{src_node_name=\"{node_name}\",src_node_ip=\"127.0.0.1\",src_pod_ip=\"127.0.0.1\",target_node_name=\"node-t1\",target_node_ip=\"127.0.0.1\",target_pod_ip=\"127.0.0.1\"}}"
    );
    let node_series = format!(
        "pinger_node_ping_count_total{{src_node_name=\"{node_name}\",src_node_ip=\"127.0.0.1\",src_pod_ip=\"127.0.0.1\",target_node_name=\"node-t1\",target_node_ip=\"127.0.0.1\"}}"
    );
    let expected = [
        (format!("pinger_ovs_up{nn}"), 1.0),
        (format!("pinger_ovs_down{nn}"), 0.0),
        (format!("pinger_ovn_controller_up{nn}"), 1.0),
        (format!("pinger_inconsistent_port_binding{nn}"), 1.0),
        (format!("pinger_apiserver_healthy{nn}"), 1.0),
        (format!("pinger_internal_dns_healthy{nn}"), 1.0),
        (format!("pinger_apiserver_latency_ms_count{nn}"), 1.0),
        (pod_series.clone(), 3.0),
        (node_series, 3.0),
    ];
    let mut last = String::new();
    wait_until("the first round's metrics", WAIT, || {
        pinger.check_alive()?;
        let (_, metrics) = http_get(port, "/metrics")?;
        let ok = expected
            .iter()
            .all(|(series, min)| sample(&metrics, series).is_some_and(|v| v >= *min));
        last = metrics;
        Ok(ok)
    })
    .with_context(|| format!("metrics:\n{last}\npinger log:\n{}", pinger.log_tail(30)))?;
    for (series, value) in &expected[..6] {
        assert_eq!(sample(&last, series), Some(*value), "{series} in\n{last}");
    }
    // Only the DaemonSet's pods are pinged, and nothing is lost on loopback.
    assert_eq!(last.matches("pinger_pod_ping_count_total{").count(), 1, "{last}");
    assert_eq!(
        sample(&last, &pod_series.replace("count_total", "lost_total")),
        Some(0.0)
    );
    assert_eq!(http_get(port, "/readyz")?.0, 200);
    assert_eq!(http_get(port, "/livez")?.0, 200);

    // ovs-vswitchd stops (its monitor follows it, see OvsNode): down within two intervals.
    let vswitchd = node.vswitchd_pid().context("ovs-vswitchd's pid")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(vswitchd)?),
        nix::sys::signal::Signal::SIGTERM,
    )?;
    let down = format!("pinger_ovs_up{nn} 0");
    wait_until("pinger_ovs_up to turn 0", Duration::from_secs(10), || {
        pinger.check_alive()?;
        Ok(http_get(port, "/metrics")?.1.contains(&down))
    })
    .with_context(|| pinger.log_tail(20))?;
    let (_, metrics) = http_get(port, "/metrics")?;
    assert_eq!(sample(&metrics, &format!("pinger_ovs_down{nn}")), Some(1.0));
    // ovn-controller still answers.
    assert_eq!(
        sample(&metrics, &format!("pinger_ovn_controller_up{nn}")),
        Some(1.0)
    );
    pinger.terminate(Duration::from_secs(5))?;

    // --mode=job: one round; --exit-code when a target is unreachable, 0 when all pass.
    let closed = free_port()?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
    let open = listener.local_addr()?.port();
    for (target, code) in [(closed, 1), (open, 0)] {
        let mut args = pinger_args(
            &node,
            &central,
            &kubeconfig,
            &[
                "--mode=job".into(),
                "--exit-code=1".into(),
                // OVS is stopped: leave it out, as on a cluster with another CNI.
                "--network-mode=calico".into(),
                format!("--target-ip-ports=tcp-127.0.0.1-{target}"),
            ],
        );
        args.retain(|a| !a.starts_with("--interval"));
        let out = Command::new(BIN).args(&args).output()?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(code),
            "target {target}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if code == 1 {
            assert!(stdout.contains(&format!("tcp 127.0.0.1:{target}")), "{stdout}");
        }
    }
    // Kube-OVN's default --exit-code=0: the failure is printed, the exit code is 0.
    let args = pinger_args(
        &node,
        &central,
        &kubeconfig,
        &[
            "--mode=job".into(),
            "--network-mode=calico".into(),
            format!("--target-ip-ports=tcp-127.0.0.1-{closed}"),
        ],
    );
    let out = Command::new(BIN).args(&args).output()?;
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("failed: tcp 127.0.0.1"));
    drop(listener);
    Ok(())
}

/// Starts with Kube-OVN's release argv in a namespace of its own (loopback only: the external
/// address and names it was given cannot be reached, so nothing leaves the machine) and serves
/// its metrics and health endpoints on Kube-OVN's port 8080.
/// What one round of the release-argv pinger reports: the probes that need a cluster or a route
/// fail, as they must here (OVS is the host's, whatever runs there, so only its series' presence
/// is checked).
const ROUND_SERIES: [&str; 5] = [
    "pinger_apiserver_unhealthy{nodeName=\"argv-node\"} 1",
    "pinger_external_dns_unhealthy{nodeName=\"argv-node\"} 1",
    "pinger_internal_dns_unhealthy{nodeName=\"argv-node\"} 1",
    "pinger_ovs_up{nodeName=\"argv-node\"}",
    "pinger_ovn_controller_up{nodeName=\"argv-node\"}",
];

#[test]
fn starts_with_kube_ovn_release_argv() -> Result<()> {
    let netns = Netns::create("pinger-argv")?;
    let dir = tempfile::tempdir()?;
    // A client configuration only; the API server it names does not exist.
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
         users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
    )?;
    let mut args: Vec<String> = vec!["netns".into(), "exec".into(), netns.name().into(), BIN.into()];
    // The manifest's log file moves from the host's /var/log/kube-ovn into the test's directory.
    args.extend(with_log_dir(KUBE_OVN_V1_16_2_ARGS, dir.path()));
    let logs = dir
        .path()
        .join(kube_ovn_testkit::kube_ovn_argv::LOG_DIR.trim_start_matches('/'));
    let envs = [
        ("KUBECONFIG", kubeconfig.as_path()),
        ("NODE_NAME", Path::new("argv-node")),
        ("POD_IP", Path::new("127.0.0.1")),
    ];
    let mut pinger = Daemon::spawn(
        "kube-ovn-pinger (release argv)",
        "ip",
        &args,
        &dir.path().join("pinger.log"),
        &envs,
    )?;
    let mut metrics = String::new();
    wait_until("the release-argv pinger's first round", WAIT, || {
        pinger.check_alive()?;
        let got = netns.run(|| http_get(8080, "/metrics"))?;
        let Ok((200, body)) = got else { return Ok(false) };
        metrics = body;
        // A round's results land one probe at a time: wait for the last of those checked.
        Ok(ROUND_SERIES.iter().all(|series| metrics.contains(series)))
    })
    .with_context(|| pinger.log_tail(30))?;
    for path in ["/healthz", "/livez", "/readyz"] {
        let (status, body) = netns.run(|| http_get(8080, path))??;
        assert_eq!(status, 200, "{path}: {body}");
    }
    // `--logtostderr=false --log_file=…`: the JSON lines go to the manifest's file.
    let log = std::fs::read_to_string(logs.join("kube-ovn-pinger.log")).context("--log_file")?;
    assert!(
        log.lines().any(|l| l.starts_with('{')),
        "no JSON line in --log_file: {log}"
    );
    let status = pinger.terminate(Duration::from_secs(5))?;
    if !status.success() {
        bail!("stopped with {status}:\n{}", pinger.log_tail(20));
    }
    Ok(())
}
