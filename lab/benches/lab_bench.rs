//! The lab's figures (issues 12 and 23): how long `kube-ovn-lab up` takes to a green matrix, and
//! how long pods created at once on 3 nodes take until every one is Running and answers, with
//! each pod's own time from its create to its first answer (median and p99).
//!
//! ```sh
//! cargo build --release --workspace --bins
//! cargo bench -p kube-ovn-lab --bench lab_bench -- [up-runs] [pods] [install]
//! #   default 5, 300 and `processes`; `manifests` runs `up --install manifests` (real kubelets)
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

fn median(v: Vec<f64>) -> f64 {
    percentile(v, 0.5)
}

/// `up` to a green matrix, `runs` times (2 nodes, BIRD, the examples): wall time of the whole
/// command, which prints the matrix before it exits.
fn up_to_green(lab: &Lab, runs: usize, install: &str) -> Result<Vec<f64>> {
    let mut times = Vec::new();
    for i in 0..runs {
        let start = Instant::now();
        let out = lab.up(&["--install", install])?;
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
        "spec": {"containers": [{"name": "c", "image": "kube-ovn-lab/netexec", "imagePullPolicy": "IfNotPresent", "ports": [{"containerPort": PORT}]}]}
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

/// What `many_pods` measured, in seconds from the first create.
struct PodFigures {
    all_running: f64,
    all_answering: f64,
    /// Each pod's time from its create returning to its first answer.
    create_to_answer: Vec<f64>,
}

/// 3 nodes, `pods` pods at once: seconds until all are Running, until all answer, and each
/// pod's create-to-answer time.
fn many_pods(lab: &Lab, pods: usize, install: &str) -> Result<PodFigures> {
    lab.up(&["--nodes", "3", "--no-examples", "--install", install])?;
    lab.ok(&["kubectl", "create", "namespace", NAMESPACE])?;
    let cp = kube_ovn_dataplane::Netns::open(lab.netns("cp"))?;
    let kubeconfig = lab.dir.path().join(&lab.name).join("admin.kubeconfig");
    // All pods are created at once (concurrent POSTs), as a burst of a ReplicaSet's would be.
    let (start, created, all_running) = cp.run(|| -> Result<(Instant, Vec<f64>, f64)> {
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
                async move {
                    api.create(&PostParams::default(), &pod(i)).await?;
                    anyhow::Ok(start.elapsed().as_secs_f64())
                }
            });
            let created: Vec<f64> = futures::future::join_all(creates)
                .await
                .into_iter()
                .collect::<Result<_>>()?;
            eprintln!("{pods} pods created in {:.2} s", start.elapsed().as_secs_f64());
            loop {
                let now = running(&client).await?;
                if now.len() == pods {
                    return Ok((start, created, start.elapsed().as_secs_f64()));
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
    let node = kube_ovn_dataplane::Netns::open(lab.netns("node1"))?;
    // Probed from node1's namespace as they come up: a pod answers once, its time is taken.
    let ips: Vec<(String, IpAddr)> = cp.run(|| -> Result<Vec<(String, IpAddr)>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&kubeconfig)).await?;
            running(&client).await
        })
    })??;
    let mut answered: Vec<Option<f64>> = vec![None; pods];
    while answered.iter().any(Option::is_none) {
        ensure!(
            start.elapsed() < Duration::from_mins(10),
            "{} pods still not answering after 600 s",
            answered.iter().filter(|a| a.is_none()).count()
        );
        node.run(|| {
            for (name, ip) in &ips {
                let Some(i) = name.strip_prefix('p').and_then(|n| n.parse::<usize>().ok()) else {
                    continue;
                };
                if i < pods
                    && answered[i].is_none()
                    && kube_ovn_lab::netexec::http_get(
                        SocketAddr::new(*ip, PORT),
                        "/hostname",
                        Duration::from_secs(1),
                    )
                    .is_ok_and(|a| a.body.trim() == name)
                {
                    answered[i] = Some(start.elapsed().as_secs_f64());
                }
            }
        })?;
    }
    let all_answering = start.elapsed().as_secs_f64();
    lab.down()?;
    let create_to_answer = answered
        .iter()
        .zip(&created)
        .map(|(a, c)| a.unwrap_or_default() - c)
        .collect();
    Ok(PodFigures {
        all_running,
        all_answering,
        create_to_answer,
    })
}

/// The value below which `p` of the samples are (nearest rank).
fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runs: usize = args.first().map_or(Ok(5), |a| a.parse()).context("up-runs")?;
    let pods: usize = args.get(1).map_or(Ok(300), |a| a.parse()).context("pods")?;
    let install = args.get(2).map_or("processes", String::as_str);
    ensure!(
        matches!(install, "processes" | "manifests"),
        "install: processes or manifests, not {install}"
    );
    let lab = Lab::new("bench")?;
    let ups = up_to_green(&lab, runs, install)?;
    println!(
        "--install {install}: up to a green matrix (2 nodes, BIRD, examples/lab), {runs} runs: median {:.2} s, min {:.2} s, max {:.2} s",
        median(ups.clone()),
        ups.iter().copied().fold(f64::INFINITY, f64::min),
        ups.iter().copied().fold(0.0, f64::max)
    );
    let figures = many_pods(&lab, pods, install)?;
    println!(
        "--install {install}: {pods} pods at once on 3 nodes: all Running after {:.2} s, all answering HTTP from node1 after {:.2} s; a pod's create to its first answer: median {:.2} s, p99 {:.2} s",
        figures.all_running,
        figures.all_answering,
        percentile(figures.create_to_answer.clone(), 0.5),
        percentile(figures.create_to_answer, 0.99)
    );
    Ok(())
}
