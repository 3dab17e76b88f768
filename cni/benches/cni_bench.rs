//! CNI ADD and DEL latency: our `kube-ovn` shim + `kube-ovn-daemon` (real OVS with the
//! userspace datapath, real ovn-controller, ADD waiting for `ovn-installed`) against the
//! reference `bridge` + `host-local` plugins from Debian's containernetworking-plugins, each
//! plugin process started the same way (environment + config on stdin, timed from spawn to
//! exit), alternating pod by pod in one run.
//!
//! `cargo bench -p kube-ovn-cni --bench cni_bench -- [PODS]` (default 100). Needs root.
//! Pods are annotated by the controller before timing starts: the figure is the node's share.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use common::runtime::{Runtime, Sandbox, run_plugin};
use common::{Cluster, WAIT};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube_ovn_testkit::{Netns, wait_until_async};
use serde_json::json;

const REFERENCE_BIN: &str = "/usr/lib/cni";

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
    fn summary(&mut self) -> (Duration, Duration) {
        self.samples.sort();
        (percentile(&self.samples, 0.5), percentile(&self.samples, 0.99))
    }
}

/// Runs the reference plugin chain's first plugin (`bridge`, which calls `host-local`) from a
/// thread inside `host`: a child inherits the forking thread's network namespace, so `cni0`
/// is made there and not on the machine, with no `ip netns exec` wrapper in the timing.
fn reference(host: &Netns, command: &str, sandbox: &Sandbox, conf: &[u8]) -> Result<Duration> {
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
        bail!("reference {command} failed: {} {}", run.stdout, run.stderr);
    }
    Ok(took)
}

fn ours(
    runtime: &Runtime,
    command: &str,
    sandbox: &Sandbox,
    prev: Option<&serde_json::Value>,
) -> Result<(Duration, serde_json::Value)> {
    let started = Instant::now();
    let result = if command == "ADD" {
        runtime.add(sandbox)?
    } else {
        runtime.del(sandbox, prev)?;
        serde_json::Value::Null
    };
    Ok((started.elapsed(), result))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let pods: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or(Ok(100), |a| a.parse())
        .context("PODS must be a number")?;
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let pod_api: Api<Pod> = Api::namespaced(cluster.kube.clone(), "bench");
    for i in 0..pods {
        cluster.create_pod("bench", &format!("p{i:04}"), 0, &[]).await?;
    }
    wait_until_async("the controller to route every pod", WAIT * 3, || {
        let pod_api = pod_api.clone();
        async move {
            let list = pod_api.list(&kube::api::ListParams::default()).await?;
            Ok(list.items.iter().all(|p| {
                p.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("ovn.kubernetes.io/routed"))
                    .is_some_and(|v| v == "true")
            }))
        }
    })
    .await?;

    let host = Netns::create("cbh")?;
    let data = tempfile::tempdir()?;
    let conf = serde_json::to_vec(&json!({
        "cniVersion": "1.0.0", "name": "benchnet", "type": "bridge", "bridge": "cni0",
        "isGateway": true, "ipMasq": false,
        "ipam": {"type": "host-local", "subnet": "10.88.0.0/16", "routes": [{"dst": "0.0.0.0/0"}],
                 "dataDir": data.path().join("ipam").display().to_string()}
    }))?;

    let mut our_add = Series::new("kube-ovn ADD");
    let mut ref_add = Series::new("bridge+host-local ADD");
    let mut our_del = Series::new("kube-ovn DEL");
    let mut ref_del = Series::new("bridge+host-local DEL");
    let mut sandboxes = Vec::new();
    // Alternate pod by pod so both see the same machine state.
    for i in 0..pods {
        let (ns_ours, ours_sb) = Cluster::sandbox("bench", &format!("p{i:04}"))?;
        let (ns_ref, ref_sb) = Cluster::sandbox("bench", &format!("r{i:04}"))?;
        let (took, result) = ours(&node.runtime, "ADD", &ours_sb, None)?;
        our_add.samples.push(took);
        ref_add.samples.push(reference(&host, "ADD", &ref_sb, &conf)?);
        sandboxes.push((ns_ours, ours_sb, result, ns_ref, ref_sb));
    }
    // Both data paths work at the end of the run.
    let (first_ns, _, _, first_ref_ns, _) = &sandboxes[0];
    first_ns.wait_ping(std::net::Ipv4Addr::new(10, 16, 0, 1), Duration::from_secs(10))?;
    first_ref_ns.wait_ping(std::net::Ipv4Addr::new(10, 88, 0, 1), Duration::from_secs(10))?;
    for (_ns, sb, result, _rns, rsb) in &sandboxes {
        our_del
            .samples
            .push(ours(&node.runtime, "DEL", sb, Some(result))?.0);
        ref_del.samples.push(reference(&host, "DEL", rsb, &conf)?);
    }

    println!("CNI latency, {pods} pods each, sequential, one run (ms):");
    println!("{:<24} {:>8} {:>8}", "", "median", "p99");
    let mut rows = Vec::new();
    for series in [&mut our_add, &mut ref_add, &mut our_del, &mut ref_del] {
        let (median, p99) = series.summary();
        println!("{:<24} {:>8.2} {:>8.2}", series.name, ms(median), ms(p99));
        rows.push((median, p99));
    }
    println!(
        "ratio ours/reference: ADD median {:.2}, p99 {:.2}; DEL median {:.2}, p99 {:.2}",
        ms(rows[0].0) / ms(rows[1].0),
        ms(rows[0].1) / ms(rows[1].1),
        ms(rows[2].0) / ms(rows[3].0),
        ms(rows[2].1) / ms(rows[3].1),
    );
    let metrics = node.metrics()?;
    for line in metrics
        .lines()
        .filter(|l| l.starts_with("cni_wait_seconds_sum") || l.starts_with("cni_wait_seconds_count"))
    {
        println!("daemon {line}");
    }
    Ok(())
}
