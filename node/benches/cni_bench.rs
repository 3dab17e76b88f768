//! CNI ADD and DEL latency of our `kube-ovn` shim + `kube-ovn-daemon` (real OVS with the
//! userspace datapath, real ovn-controller, ADD waiting for `ovn-installed`), in one run on one
//! node, against two references each started the same way (spawn to exit):
//!
//! - `ovs_vsctl_pod.sh`: the work Kube-OVN's daemon does for a pod, with the standard tools
//!   (veth, `ovs-vsctl add-port` with `iface-id=<pod>.<ns>`, the pod side, `ovs-vsctl
//!   wait-until` `ovn-installed`). Its pods are annotated by the same controller, so
//!   ovn-controller binds its ports as it binds ours: the reference that does the same work.
//! - Debian's `bridge` + `host-local` plugins: a veth on a Linux bridge, no OVN; context only.
//!
//! `cargo bench -p kube-ovn-node --bench cni_bench -- [PODS]` (default 100): the controller has
//! annotated every pod before timing starts, so the figures are the node's share; pod by pod,
//! ours, the script, bridge, alternating.
//!
//! `cargo bench -p kube-ovn-node --bench cni_bench -- [PODS] --late MS`: annotations arrive
//! late. Two nodes, `--early-plug=true` on one and `false` on the other; for each pod, on the
//! nodes in turn: the controller is held back (its northbound ovsdb-server stopped), the pod is
//! created, ADD starts, and after MS milliseconds the controller is let go. ADD is timed from
//! spawn to exit, so the figures include MS and the controller's own work.
//!
//! Needs root.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::runtime::{PLUGIN_TIMEOUT, Runtime, Sandbox, output_within, run_plugin};
use common::{Cluster, NorthboundPaused, Options, TestNode, WAIT};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube_ovn_testkit::{Netns, wait_until_async};
use serde_json::{Value, json};

const REFERENCE_BIN: &str = "/usr/lib/cni";
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/ovs_vsctl_pod.sh");

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct Series {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Series {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            samples: Vec::new(),
        }
    }

    fn summary(&self) -> (Duration, Duration) {
        let mut sorted = self.samples.clone();
        sorted.sort();
        (percentile(&sorted, 0.5), percentile(&sorted, 0.99))
    }

    fn print(&self) {
        let (median, p99) = self.summary();
        println!("{:<30} {:>8.2} {:>8.2}", self.name, ms(median), ms(p99));
    }

    /// `self / reference` at the median and at p99.
    fn ratio(&self, reference: &Self) -> (f64, f64) {
        let (m, p) = self.summary();
        let (rm, rp) = reference.summary();
        (ms(m) / ms(rm), ms(p) / ms(rp))
    }
}

/// Runs `bridge` (which calls `host-local`) from a thread inside `host`: a child inherits the
/// forking thread's network namespace, so `cni0` is made there and not on the machine, with no
/// `ip netns exec` wrapper in the timing.
fn bridge(host: &Netns, command: &str, sandbox: &Sandbox, conf: &[u8]) -> Result<Duration> {
    let env = [
        ("CNI_COMMAND", command),
        ("CNI_CONTAINERID", sandbox.container_id.as_str()),
        ("CNI_NETNS", sandbox.netns.as_str()),
        ("CNI_IFNAME", "eth0"),
        ("CNI_PATH", REFERENCE_BIN),
    ];
    let (took, run) = host.run(|| {
        let started = Instant::now();
        let run = run_plugin(Path::new(REFERENCE_BIN).join("bridge").as_path(), &env, conf);
        (started.elapsed(), run)
    })?;
    let run = run?;
    if !run.success {
        bail!("bridge {command} failed: {} {}", run.stdout, run.stderr);
    }
    Ok(took)
}

/// A pod for the script: its sandbox, and what the controller annotated.
struct ScriptPod {
    name: String,
    netns: Netns,
    host_nic: String,
    mac: String,
    address: String,
    gateway: String,
}

impl ScriptPod {
    async fn new(pods: &Api<Pod>, name: String) -> Result<Self> {
        let ann = pods.get(&name).await?.metadata.annotations.unwrap_or_default();
        let prefix = ann["ovn.kubernetes.io/cidr"]
            .split_once('/')
            .map(|(_, p)| p.to_owned())
            .context("cidr")?;
        Ok(Self {
            netns: Netns::create("cbs")?,
            host_nic: format!("{name}_h"),
            mac: ann["ovn.kubernetes.io/mac_address"].clone(),
            address: format!("{}/{prefix}", ann["ovn.kubernetes.io/ip_address"]),
            gateway: ann["ovn.kubernetes.io/gateway"].clone(),
            name,
        })
    }

    fn ip(&self) -> std::net::Ipv4Addr {
        self.address
            .split('/')
            .next()
            .unwrap_or_default()
            .parse()
            .unwrap_or(std::net::Ipv4Addr::UNSPECIFIED)
    }
}

/// One run of the script, timed from spawn to exit.
fn script(node: &TestNode, command: &str, pod: &ScriptPod) -> Result<Duration> {
    let db = node.ovs.db_socket().display().to_string();
    let mut args = vec![
        SCRIPT,
        command,
        node.ovs.name(),
        db.as_str(),
        pod.host_nic.as_str(),
    ];
    let iface_id = format!("{}.bench", pod.name);
    if command == "add" {
        args.extend([
            pod.netns.name(),
            "eth0",
            pod.mac.as_str(),
            pod.address.as_str(),
            pod.gateway.as_str(),
            "1400",
            iface_id.as_str(),
            pod.name.as_str(),
            "bench",
        ]);
    }
    let started = Instant::now();
    let child = Command::new("sh")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let out = output_within(child, PLUGIN_TIMEOUT, "ovs_vsctl_pod.sh")?;
    let took = started.elapsed();
    if !out.status.success() {
        bail!(
            "ovs_vsctl_pod.sh {command} {}: {}",
            pod.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(took)
}

fn ours(
    runtime: &Runtime,
    command: &str,
    sandbox: &Sandbox,
    prev: Option<&Value>,
) -> Result<(Duration, Value)> {
    let started = Instant::now();
    let result = if command == "ADD" {
        runtime.add(sandbox)?
    } else {
        runtime.del(sandbox, prev)?;
        Value::Null
    };
    Ok((started.elapsed(), result))
}

async fn wait_routed(pods: &Api<Pod>, count: usize) -> Result<()> {
    wait_until_async("the controller to route every pod", WAIT * 3, || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&kube::api::ListParams::default()).await?;
            Ok(list.items.len() >= count
                && list.items.iter().all(|p| {
                    p.metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get("ovn.kubernetes.io/routed"))
                        .is_some_and(|v| v == "true")
                }))
        }
    })
    .await
}

fn print_waits(node: &TestNode, label: &str) -> Result<()> {
    let metrics = node.metrics()?;
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("cni_wait_seconds_sum") || l.starts_with("cni_wait_seconds_count"))
    {
        println!("{label} {line}");
    }
    Ok(())
}

/// Annotations present before ADD: ours, the ovs-vsctl script and bridge, alternating.
async fn annotated_first(pods: usize) -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let pod_api: Api<Pod> = Api::namespaced(cluster.kube.clone(), "bench");
    for i in 0..pods {
        cluster.create_pod("bench", &format!("p{i:04}"), 0, &[]).await?;
        cluster.create_pod("bench", &format!("s{i:04}"), 0, &[]).await?;
    }
    wait_routed(&pod_api, 2 * pods).await?;

    let host = Netns::create("cbh")?;
    let data = tempfile::tempdir()?;
    let conf = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "benchnet", "type": "bridge", "bridge": "cni0",
        "isGateway": true, "ipMasq": false,
        "ipam": {"type": "host-local", "subnet": "10.88.0.0/16", "routes": [{"dst": "0.0.0.0/0"}],
                 "dataDir": data.path().join("ipam").display().to_string()}
    }))?;

    let mut our_add = Series::new("kube-ovn ADD");
    let mut script_add = Series::new("ovs-vsctl script ADD");
    let mut bridge_add = Series::new("bridge+host-local ADD");
    let mut our_del = Series::new("kube-ovn DEL");
    let mut script_del = Series::new("ovs-vsctl script DEL");
    let mut bridge_del = Series::new("bridge+host-local DEL");
    let mut attached = Vec::new();
    // Pod by pod, so all three see the same machine state (the number of ports on br-int
    // grows alike for ours and the script's).
    for i in 0..pods {
        let (ns_ours, ours_sb) = Cluster::sandbox("bench", &format!("p{i:04}"))?;
        let (ns_bridge, bridge_sb) = Cluster::sandbox("bench", &format!("r{i:04}"))?;
        let scripted = ScriptPod::new(&pod_api, format!("s{i:04}")).await?;
        let (took, result) = ours(&node.runtime, "ADD", &ours_sb, None)?;
        our_add.samples.push(took);
        script_add.samples.push(script(node, "add", &scripted)?);
        bridge_add.samples.push(bridge(&host, "ADD", &bridge_sb, &conf)?);
        attached.push((ns_ours, ours_sb, result, scripted, ns_bridge, bridge_sb));
    }
    // Every data path works at the end of the run.
    let (first_ns, _, _, first_script, first_bridge_ns, _) = &attached[0];
    let gateway = std::net::Ipv4Addr::new(10, 16, 0, 1);
    first_ns.wait_ping(gateway, Duration::from_secs(10))?;
    first_script.netns.wait_ping(gateway, Duration::from_secs(10))?;
    first_ns.wait_ping(first_script.ip(), Duration::from_secs(10))?;
    first_bridge_ns.wait_ping(std::net::Ipv4Addr::new(10, 88, 0, 1), Duration::from_secs(10))?;
    for (_, sb, result, scripted, _, bridge_sb) in &attached {
        our_del
            .samples
            .push(ours(&node.runtime, "DEL", sb, Some(result))?.0);
        script_del.samples.push(script(node, "del", scripted)?);
        bridge_del.samples.push(bridge(&host, "DEL", bridge_sb, &conf)?);
    }

    println!("CNI latency, annotations present, {pods} pods each, sequential, one run (ms):");
    println!("{:<30} {:>8} {:>8}", "", "median", "p99");
    for series in [
        &our_add,
        &script_add,
        &bridge_add,
        &our_del,
        &script_del,
        &bridge_del,
    ] {
        series.print();
    }
    for (what, ours, reference) in [
        ("ADD / ovs-vsctl script", &our_add, &script_add),
        ("ADD / bridge+host-local", &our_add, &bridge_add),
        ("DEL / ovs-vsctl script", &our_del, &script_del),
        ("DEL / bridge+host-local", &our_del, &bridge_del),
    ] {
        let (median, p99) = ours.ratio(reference);
        println!("ratio ours {what}: median {median:.2}, p99 {p99:.2}");
    }
    print_waits(node, "daemon")
}

/// Annotations arriving `delay` after ADD starts: early plug on one node, off on the other.
async fn annotated_late(pods: usize, delay: Duration) -> Result<()> {
    let cluster = Cluster::start_with(Options {
        nodes: 2,
        node_flags: vec![
            vec!["--early-plug=true".into()],
            vec!["--early-plug=false".into()],
        ],
        ..Options::default()
    })
    .await?;
    let pod_api: Api<Pod> = Api::namespaced(cluster.kube.clone(), "bench");
    cluster.namespace("bench").await?;
    let mut series = [
        Series::new("ADD, early plug"),
        Series::new("ADD, plug after annotations"),
    ];
    let mut attached = Vec::new();
    for i in 0..pods {
        let on = i % 2;
        let node = &cluster.nodes[on];
        let name = format!("l{i:04}");
        let paused = NorthboundPaused::new(&cluster.ovn)?;
        cluster.create_pod("bench", &name, on, &[]).await?;
        let (netns, sandbox) = Cluster::sandbox("bench", &name)?;
        let runtime = node.runtime.clone();
        let sb = sandbox.clone();
        let add = tokio::task::spawn_blocking(move || ours(&runtime, "ADD", &sb, None));
        tokio::time::sleep(delay).await;
        drop(paused);
        let (took, result) = add.await??;
        series[on].samples.push(took);
        attached.push((on, netns, sandbox, result));
    }
    wait_routed(&pod_api, pods).await?;
    for (on, netns, _, _) in attached.iter().take(2) {
        netns
            .wait_ping(std::net::Ipv4Addr::new(10, 16, 0, 1), Duration::from_secs(10))
            .with_context(|| format!("pod on node {on}"))?;
    }
    for (on, _, sandbox, result) in &attached {
        cluster.nodes[*on].runtime.del(sandbox, Some(result))?;
    }
    println!(
        "CNI ADD with annotations {} ms late, {} pods per node, sequential, one run (ms):",
        delay.as_millis(),
        pods / 2
    );
    println!("{:<30} {:>8} {:>8}", "", "median", "p99");
    for s in &series {
        s.print();
    }
    let (median, p99) = series[0].ratio(&series[1]);
    println!("ratio early plug / plug after annotations: median {median:.2}, p99 {p99:.2}");
    print_waits(&cluster.nodes[0], "early-plug daemon")?;
    print_waits(&cluster.nodes[1], "plug-after daemon")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    // `cargo bench` adds `--bench`; the rest is ours.
    let args: Vec<String> = std::env::args().skip(1).filter(|a| a != "--bench").collect();
    let mut pods = 100;
    let mut late = None;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--late" => {
                let value = it.next().context("--late needs milliseconds")?;
                late = Some(Duration::from_millis(value.parse().context("--late MS")?));
            }
            number => {
                pods = number
                    .parse()
                    .with_context(|| format!("PODS must be a number, not {number:?}"))?;
            }
        }
    }
    match late {
        None => annotated_first(pods).await,
        Some(delay) => annotated_late(pods, delay).await,
    }
}
