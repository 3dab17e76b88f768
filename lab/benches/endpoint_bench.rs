//! Issue 14's second figure: an endpoint added to a Service's EndpointSlice, until the first
//! request through the ClusterIP is answered by it, on the lab (2 nodes, real OVN/OVS, no
//! kube-proxy).
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p kube-ovn-lab --bench endpoint_bench -- [rounds]    # default 100
//! ```
//!
//! Binaries from `KUBE_OVN_LAB_BIN_DIR` (default `target/release`). The examples' `demo/web-1`
//! (node1) and `demo/web-2` (node2) are the backends of a selectorless Service whose slice the
//! bench writes as kube-controller-manager would; the client is `bgp/announced-1`. A round:
//! the slice holds web-1 only and the client is answered by web-1 alone; the clock starts, the
//! slice gets web-2 too, and the client sends new connections (each 1 s at most) until web-2
//! answers; the clock stops. With two backends a request meets web-2 half the time once the
//! VIP has it, so the figure includes about one extra request (a millisecond or two).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_lab::agent::kubelet::SandboxRecord;
use kube_ovn_lab::agent::kubelet::sandbox::SandboxDir;
use kube_ovn_lab::cluster::topology::{Topology, TorKind};
use serde_json::json;

mod support;
use support::Lab;

const NS: &str = "demo";
const BOUND: Duration = Duration::from_mins(1);

fn slice(backends: &[(&str, IpAddr)]) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = backends
        .iter()
        .map(|(name, ip)| {
            json!({"addresses": [ip.to_string()], "conditions": {"ready": true},
                   "targetRef": {"kind": "Pod", "namespace": NS, "name": name}})
        })
        .collect();
    serde_json::from_value(json!({
        "metadata": {"name": "lat-1", "namespace": NS, "labels": {"kubernetes.io/service-name": "lat"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]}))
    .expect("a valid slice")
}

/// Sends new connections from `client` to `vip:80` until one is answered by `want`; `Err` after
/// `BOUND`.
fn until_answered_by(client: &kube_ovn_dataplane::Netns, vip: SocketAddr, want: &str) -> Result<Duration> {
    let want = want.to_owned();
    client.run(move || {
        let start = Instant::now();
        loop {
            if let Ok(a) = kube_ovn_lab::netexec::http_get(vip, "/hostname", Duration::from_secs(1))
                && a.body.trim() == want
            {
                return Ok(start.elapsed());
            }
            if start.elapsed() > BOUND {
                bail!("{want} did not answer at {vip} within {BOUND:?}");
            }
        }
    })?
}

/// Waits until 20 requests in a row are answered by `only`.
fn until_only(client: &kube_ovn_dataplane::Netns, vip: SocketAddr, only: &str) -> Result<()> {
    let only = only.to_owned();
    client.run(move || {
        let start = Instant::now();
        let mut streak = 0;
        while streak < 20 {
            let ok = kube_ovn_lab::netexec::http_get(vip, "/hostname", Duration::from_secs(1))
                .is_ok_and(|a| a.body.trim() == only);
            streak = if ok { streak + 1 } else { 0 };
            ensure!(start.elapsed() < BOUND, "{vip} is not answered by {only} alone");
        }
        Ok(())
    })?
}

fn pod_netns(t: &Topology, ns: &str, name: &str) -> Result<kube_ovn_dataplane::Netns> {
    let record = SandboxDir::open(&t.sandbox_dir())?
        .load_for(ns, name)
        .into_iter()
        .find(SandboxRecord::is_ready)
        .with_context(|| format!("no sandbox for {ns}/{name}"))?;
    Ok(kube_ovn_dataplane::Netns::open(record.netns_path())?)
}

async fn measure(client: kube::Client, t: &Topology, rounds: usize) -> Result<Vec<f64>> {
    let pods = Api::<Pod>::namespaced(client.clone(), NS);
    let ip = |p: Pod| -> Result<IpAddr> { Ok(p.status.and_then(|s| s.pod_ip).context("a pod IP")?.parse()?) };
    let web1 = ip(pods.get("web-1").await?)?;
    let web2 = ip(pods.get("web-2").await?)?;
    let services = Api::<Service>::namespaced(client.clone(), NS);
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "lat", "namespace": NS},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))?;
    services.create(&PostParams::default(), &svc).await?;
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), NS);
    slices
        .create(&PostParams::default(), &slice(&[("web-1", web1)]))
        .await?;
    let start = Instant::now();
    let vip = loop {
        if let Some(ip) = services
            .get("lat")
            .await?
            .spec
            .and_then(|s| s.cluster_ip)
            .and_then(|ip| ip.parse::<IpAddr>().ok())
        {
            break SocketAddr::new(ip, 80);
        }
        ensure!(start.elapsed() < BOUND, "the lab gave lat no ClusterIP");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let client_ns = pod_netns(t, "bgp", "announced-1")?;
    let mut times = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let ns = client_ns.clone();
        tokio::task::spawn_blocking(move || until_only(&ns, vip, "web-1")).await??;
        let clock = Instant::now();
        slices
            .patch(
                "lat-1",
                &PatchParams::default(),
                &Patch::Merge(slice(&[("web-1", web1), ("web-2", web2)])),
            )
            .await?;
        let ns = client_ns.clone();
        tokio::task::spawn_blocking(move || until_answered_by(&ns, vip, "web-2")).await??;
        let took = clock.elapsed().as_secs_f64() * 1000.0;
        times.push(took);
        if round % 20 == 0 {
            eprintln!("round {round}: {took:.1} ms");
        }
        slices
            .patch(
                "lat-1",
                &PatchParams::default(),
                &Patch::Merge(slice(&[("web-1", web1)])),
            )
            .await?;
    }
    Ok(times)
}

fn main() -> Result<()> {
    let rounds: usize = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map_or(Ok(100), |a| a.parse())
        .context("rounds")?;
    let lab = Lab::new("ep")?;
    lab.up(&[])?;
    let t = Topology::new(&lab.name, 2, TorKind::Bird, lab.dir.path()).map_err(anyhow::Error::msg)?;
    let cp = kube_ovn_dataplane::Netns::open(Path::new("/run/netns").join(t.cp_netns()))?;
    let kubeconfig = t.admin_kubeconfig();
    let result = cp.run(|| -> Result<Vec<f64>> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&kubeconfig)).await?;
            measure(client, &t, rounds).await
        })
    });
    let down = lab.down();
    let mut times = result??;
    down?;
    times.sort_by(f64::total_cmp);
    // The q-th quantile by rank: index ⌈q·n⌉ − 1 (per mille, in integers).
    let at = |per_mille: usize| times[(times.len() * per_mille).div_ceil(1000).saturating_sub(1)];
    // A request that got no answer within its 1 s (a lost packet while the flows change; a
    // real client's SYN retransmit is 1 s too) shows as a round over 1 s.
    let lost = times.iter().filter(|t| **t >= 1000.0).count();
    println!(
        "endpoint added to an EndpointSlice → first request answered by it through the ClusterIP, {rounds} rounds: median {:.1} ms, p99 {:.1} ms, min {:.1} ms, max {:.1} ms; {lost} rounds had a request go unanswered for 1 s",
        at(500),
        at(990),
        times[0],
        times[times.len() - 1]
    );
    Ok(())
}
