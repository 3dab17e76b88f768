//! The lab's figures (issues 12 and 23): how long `kube-ovn-lab up` takes to a green matrix; a
//! pod's time from its create to its first answer, created one at a time (median and p99); and
//! pods created at once on 3 nodes: until every one is Running and answers, and each pod's own
//! create-to-answer time.
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
    percentile(v, 50)
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

/// Until kube-controller-manager made the bench namespace's `default` ServiceAccount: pods are
/// refused before it (the ServiceAccount admission plugin); not part of any figure.
async fn default_service_account(client: &kube::Client) -> Result<()> {
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE);
    let deadline = Instant::now() + Duration::from_mins(1);
    while accounts.get_opt("default").await?.is_none() {
        ensure!(
            Instant::now() < deadline,
            "no ServiceAccount {NAMESPACE}/default after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
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
    let (start, created) = cp.run(|| -> Result<(Instant, Vec<f64>)> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&kubeconfig)).await?;
            let api = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
            default_service_account(&client).await?;
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
            Ok((start, created))
        })
    })??;
    // Then, until every pod answers: the Running pods from the API (in the control plane's
    // namespace), each new one probed from node1's: a pod's time is its first answer.
    let node = kube_ovn_dataplane::Netns::open(lab.netns("node1"))?;
    let list = || -> Result<Vec<(String, IpAddr)>> {
        cp.run(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = kube_ovn_support::kube_client(Some(&kubeconfig)).await?;
                running(&client).await
            })
        })?
    };
    let mut answered: Vec<Option<f64>> = vec![None; pods];
    let mut all_running = None;
    while answered.iter().any(Option::is_none) {
        ensure!(
            start.elapsed() < Duration::from_mins(10),
            "{} pods still not answering after 600 s",
            answered.iter().filter(|a| a.is_none()).count()
        );
        let ips = list()?;
        if all_running.is_none() && ips.len() == pods {
            all_running = Some(start.elapsed().as_secs_f64());
        }
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
                        Duration::from_millis(300),
                    )
                    .is_ok_and(|a| a.body.trim() == name)
                {
                    answered[i] = Some(start.elapsed().as_secs_f64());
                }
            }
        })?;
    }
    let all_running = all_running.unwrap_or_else(|| start.elapsed().as_secs_f64());
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

/// 2 nodes, `pods` pods one after the other: each pod's time from its create to its first
/// answer (HTTP from node1's namespace), the next created once the last answered.
fn one_at_a_time(lab: &Lab, pods: usize, install: &str) -> Result<Vec<f64>> {
    lab.up(&["--nodes", "2", "--no-examples", "--install", install])?;
    lab.ok(&["kubectl", "create", "namespace", NAMESPACE])?;
    let cp = kube_ovn_dataplane::Netns::open(lab.netns("cp"))?;
    let node = kube_ovn_dataplane::Netns::open(lab.netns("node1"))?;
    let kubeconfig = lab.dir.path().join(&lab.name).join("admin.kubeconfig");
    // The API client lives in the control plane's namespace (its connections are made by the
    // thread that polls it there); the probes go from node1's, on a thread of their own.
    let times = cp.run(|| -> Result<Vec<f64>> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let client = kube_ovn_support::kube_client(Some(&kubeconfig)).await?;
            default_service_account(&client).await?;
            let api = Api::<Pod>::namespaced(client.clone(), NAMESPACE);
            let mut times = Vec::new();
            for i in 0..pods {
                let start = Instant::now();
                api.create(&PostParams::default(), &pod(i)).await?;
                let name = format!("p{i:03}");
                loop {
                    ensure!(
                        start.elapsed() < Duration::from_mins(2),
                        "{name} not answering after 120 s"
                    );
                    let ip = running(&client)
                        .await?
                        .into_iter()
                        .find_map(|(n, ip)| (n == name).then_some(ip));
                    if let Some(ip) = ip
                        && node.run(|| {
                            kube_ovn_lab::netexec::http_get(
                                SocketAddr::new(ip, PORT),
                                "/hostname",
                                Duration::from_millis(300),
                            )
                            .is_ok_and(|a| a.body.trim() == name)
                        })?
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                times.push(start.elapsed().as_secs_f64());
            }
            Ok(times)
        })
    })??;
    lab.down()?;
    Ok(times)
}

/// The value below which `percent` % of the samples are (nearest rank).
fn percentile(mut v: Vec<f64>, percent: usize) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = (percent * v.len()).div_ceil(100).clamp(1, v.len());
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
    if runs > 0 {
        let ups = up_to_green(&lab, runs, install)?;
        println!(
            "--install {install}: up to a green matrix (2 nodes, BIRD, examples/lab), {runs} runs: median {:.2} s, min {:.2} s, max {:.2} s",
            median(ups.clone()),
            ups.iter().copied().fold(f64::INFINITY, f64::min),
            ups.iter().copied().fold(0.0, f64::max)
        );
    }
    let single = one_at_a_time(&lab, pods, install)?;
    println!(
        "--install {install}: {pods} pods one at a time on 2 nodes, create to first answer: median {:.2} s, p99 {:.2} s",
        percentile(single.clone(), 50),
        percentile(single, 99)
    );
    let figures = many_pods(&lab, pods, install)?;
    println!(
        "--install {install}: {pods} pods at once on 3 nodes: all Running after {:.2} s, all answering HTTP from node1 after {:.2} s; a pod's create to its first answer: median {:.2} s, p99 {:.2} s",
        figures.all_running,
        figures.all_answering,
        percentile(figures.create_to_answer.clone(), 50),
        percentile(figures.create_to_answer, 99)
    );
    Ok(())
}
