//! The lab's figures (issue 12): how long `kube-ovn-lab up` takes to a green matrix, and how
//! long 300 pods created at once on 3 nodes take until every one is Running and answers.
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p kube-ovn-lab --bench lab_bench -- [up-runs] [pods]    # default 5 and 300
//! ```
//!
//! The binaries are taken from `KUBE_OVN_LAB_BIN_DIR` (default `target/release`). Each lab gets
//! its own name and labs directory and is taken down at the end. "Answers" means an HTTP GET of
//! `/hostname` from node1's namespace (through its `ovn0` and OVN, across nodes for two thirds
//! of the pods) returned the pod's name: the data path works, not only the API objects.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use kube::Api;
use kube::api::{ListParams, PostParams};

mod support;
use support::Lab;

const NAMESPACE: &str = "bench";
const PORT: u16 = 8080;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `up` to a green matrix, `runs` times (2 nodes, BIRD, the examples): wall time of the whole
/// command, which prints the matrix before it exits.
fn up_to_green(lab: &Lab, runs: usize) -> Result<Vec<f64>> {
    let mut times = Vec::new();
    for i in 0..runs {
        let start = Instant::now();
        let out = lab.up(&[])?;
        let took = start.elapsed().as_secs_f64();
        ensure!(
            out.contains("checks as expected") && !out.contains("FAIL"),
            "run {i}: the matrix is not green:\n{out}"
        );
        times.push(took);
        lab.down()?;
        eprintln!("up run {i}: {took:.2} s");
    }
    Ok(times)
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("p{i:03}"), "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "c", "image": "kube-ovn-lab/netexec", "ports": [{"containerPort": PORT}]}]}
    }))
    .expect("a valid pod")
}

/// The pods of the bench namespace that are Running, with their addresses.
async fn running(client: &kube::Client) -> Result<Vec<(String, IpAddr)>> {
    let pods = Api::<Pod>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await?;
    Ok(pods
        .items
        .into_iter()
        .filter_map(|p| {
            let status = p.status?;
            (status.phase.as_deref() == Some("Running")).then_some(())?;
            Some((p.metadata.name?, status.pod_ip?.parse().ok()?))
        })
        .collect())
}

/// 3 nodes, `pods` pods at once: seconds until all are Running, and until all answer.
fn many_pods(lab: &Lab, pods: usize) -> Result<(f64, f64)> {
    lab.up(&["--nodes", "3", "--no-examples"])?;
    lab.ok(&["kubectl", "create", "namespace", NAMESPACE])?;
    let cp = kube_ovn_dataplane::Netns::open(lab.netns("cp"))?;
    let kubeconfig = lab.dir.path().join(&lab.name).join("admin.kubeconfig");
    // All pods are created at once (concurrent POSTs), as a burst of a ReplicaSet's would be.
    let (start, ips) = cp.run(|| -> Result<(Instant, Vec<(String, IpAddr)>)> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&kubeconfig)).await?;
            let api = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
            // Pods are refused until kube-controller-manager made the namespace's `default`
            // ServiceAccount (the ServiceAccount admission plugin); not part of the figure.
            let accounts = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE);
            let deadline = Instant::now() + Duration::from_mins(1);
            while accounts.get_opt("default").await?.is_none() {
                ensure!(
                    Instant::now() < deadline,
                    "no ServiceAccount {NAMESPACE}/default after 60 s"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let start = Instant::now();
            let creates = (0..pods).map(|i| {
                let api = api.clone();
                async move { api.create(&PostParams::default(), &pod(i)).await }
            });
            for created in futures::future::join_all(creates).await {
                created?;
            }
            eprintln!("{pods} pods created in {:.2} s", start.elapsed().as_secs_f64());
            loop {
                let now = running(&client).await?;
                if now.len() == pods {
                    return Ok((start, now));
                }
                ensure!(
                    start.elapsed() < Duration::from_mins(10),
                    "only {} of {pods} Running after 10 minutes",
                    now.len()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    })??;
    let all_running = start.elapsed().as_secs_f64();
    let node = kube_ovn_dataplane::Netns::open(lab.netns("node1"))?;
    let mut waiting = ips;
    while !waiting.is_empty() {
        ensure!(
            start.elapsed() < Duration::from_mins(10),
            "{} pods still not answering after 600 s",
            waiting.len()
        );
        waiting = node.run(|| {
            waiting
                .into_iter()
                .filter(|(name, ip)| {
                    kube_ovn_lab::netexec::http_get(
                        SocketAddr::new(*ip, PORT),
                        "/hostname",
                        Duration::from_secs(1),
                    )
                    .map_or(true, |a| a.body.trim() != name)
                })
                .collect::<Vec<_>>()
        })?;
    }
    let all_answer = start.elapsed().as_secs_f64();
    lab.down()?;
    Ok((all_running, all_answer))
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs: usize = args.first().map_or(Ok(5), |a| a.parse()).context("up-runs")?;
    let pods: usize = args.get(1).map_or(Ok(300), |a| a.parse()).context("pods")?;
    let lab = Lab::new("bench")?;
    let ups = up_to_green(&lab, runs)?;
    println!(
        "up to a green matrix (2 nodes, BIRD, examples/lab), {runs} runs: median {:.2} s, min {:.2} s, max {:.2} s",
        median(ups.clone()),
        ups.iter().copied().fold(f64::INFINITY, f64::min),
        ups.iter().copied().fold(0.0, f64::max)
    );
    let (running, answering) = many_pods(&lab, pods)?;
    println!(
        "{pods} pods at once on 3 nodes: all Running after {running:.2} s, all answering HTTP from node1 after {answering:.2} s"
    );
    Ok(())
}
