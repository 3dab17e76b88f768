//! Controller throughput and restart benchmark, with real OVN northbound and the API emulator.
//!
//! 1. N pods created in the emulator → all annotated `routed=true`, each with its port in NB:
//!    pods per second, from the first create to the last `routed`.
//! 2. The same N ports created by `ovn-nbctl` in one invocation (every `lsp-add` chained with
//!    `--`), and by one raw `transact` of N inserts (the server's own ceiling), on a fresh NB.
//! 3. Restart-to-ready: the controller is killed and started again over the N routed pods; the
//!    time until it has re-checked every pod (its Pod reconcile count reaches N) with no writes.
//!
//! Run: `cargo bench -p kube-ovn-controller --bench pods_bench -- 1000 10000`.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube_ovn_controller::config::Flags;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_ovsdb::{
    Atom, Client, ClientConfig, Condition, MonitorTables, Mutation, Operation, Remote, Row, Value,
};
use kube_ovn_testkit::OvnCentral;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// CPU seconds this process has used (user + system), from /proc/self/stat.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name (which may hold spaces) start at state; utime/stime are 14/15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|v| v.parse().ok())
        .collect();
    #[allow(clippy::cast_precision_loss, reason = "display only")]
    let secs = f.iter().sum::<u64>() as f64 / 100.0;
    secs
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Run {
    kube: kube::Client,
    flags: Vec<String>,
    metrics_port: u16,
}

impl Run {
    fn start(&self) -> tokio::task::JoinHandle<()> {
        let config = Flags::try_parse_from(&self.flags).unwrap().validate().unwrap();
        let kube = self.kube.clone();
        tokio::spawn(async move {
            kube_ovn_controller::run(config, kube, std::future::pending())
                .await
                .unwrap();
        })
    }

    /// The controller's Pod reconcile count, from its `/metrics`.
    async fn pod_reconciles(&self) -> u64 {
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await else {
            return 0;
        };
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
        let mut body = String::new();
        let _ = s.read_to_string(&mut body).await;
        body.lines()
            .find(|l| l.starts_with("kube_ovn_controller_reconcile_total{kind=\"Pod\"}"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// Counts pods that reached `routed=true`, until `n` have.
async fn wait_routed(kube: &kube::Client, n: usize) {
    let mut routed = BTreeSet::new();
    let mut events = watcher(
        Api::<Pod>::namespaced(kube.clone(), "bench"),
        watcher::Config::default(),
    )
    .boxed();
    while routed.len() < n {
        let next = tokio::time::timeout(Duration::from_mins(10), events.try_next()).await;
        let Some(ev) = next
            .unwrap_or_else(|_| panic!("no pod update for 10 minutes; {} of {n} routed", routed.len()))
            .unwrap()
        else {
            panic!("pod watch ended")
        };
        let pods: Vec<Pod> = match ev {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
            _ => vec![],
        };
        for p in pods {
            if p.annotations()
                .get("ovn.kubernetes.io/routed")
                .is_some_and(|v| v == "true")
            {
                routed.insert(p.name_any());
            }
        }
    }
}

fn nbctl_one_run(n: usize) -> Duration {
    let ovn = OvnCentral::start().unwrap();
    ovn.nbctl(&["ls-add", "bench"]).unwrap();
    let mut args = vec![format!("--db={}", ovn.nb_remote())];
    for i in 0..n {
        if i > 0 {
            args.push("--".into());
        }
        let name = format!("pod-{i}.bench");
        args.extend(["lsp-add".into(), "bench".into(), name.clone()]);
        args.extend([
            "--".into(),
            "lsp-set-addresses".into(),
            name,
            format!(
                "0a:00:00:00:{:02x}:{:02x} 10.16.{}.{}",
                i / 256,
                i % 256,
                i / 250,
                i % 250 + 2
            ),
        ]);
    }
    let start = Instant::now();
    let out = Command::new("ovn-nbctl").args(&args).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    start.elapsed()
}

async fn raw_one_transaction(n: usize) -> Duration {
    let ovn = OvnCentral::start().unwrap();
    ovn.nbctl(&["ls-add", "bench"]).unwrap();
    let mut c = ClientConfig::new(Remote::parse_list(&ovn.nb_remote()).unwrap(), "OVN_Northbound");
    c.monitor = MonitorTables::None;
    let nb = Client::connect(c).await.unwrap();
    let mut ops = Vec::new();
    let mut refs = BTreeSet::new();
    for i in 0..n {
        let row = Row::from([
            ("name".to_owned(), Value::from(format!("pod-{i}.bench"))),
            (
                "addresses".to_owned(),
                Value::set([format!(
                    "0a:00:00:00:{:02x}:{:02x} 10.16.{}.{}",
                    i / 256,
                    i % 256,
                    i / 250,
                    i % 250 + 2
                )]),
            ),
        ]);
        ops.push(Operation::insert_named(
            "Logical_Switch_Port",
            row,
            format!("p{i}"),
        ));
        refs.insert(Atom::named(format!("p{i}")));
    }
    ops.push(Operation::mutate(
        "Logical_Switch",
        vec![Condition::eq("name", "bench")],
        vec![Mutation::insert("ports", Value::Set(refs))],
    ));
    let start = Instant::now();
    nb.transact(ops).await.unwrap();
    start.elapsed()
}

async fn controller_run(n: usize) -> (Duration, Duration) {
    let api = ApiServer::new(ApiServerConfig::default()).unwrap();
    let kube = api.client();
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    for crd in kube_ovn_api::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let ovn = tokio::task::spawn_blocking(OvnCentral::start)
        .await
        .unwrap()
        .unwrap();
    let metrics_port = free_port();
    let run = Run {
        kube: kube.clone(),
        flags: vec![
            "kube-ovn-controller".into(),
            format!("--ovn-nb-addr={}", ovn.nb_remote()),
            "--bind-address=127.0.0.1".into(),
            format!("--pprof-port={metrics_port}"),
            "--leader-elect=false".into(),
            "--default-cidr=10.16.0.0/16".into(),
        ],
        metrics_port,
    };
    let controller = run.start();
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}}))
    .unwrap();
    Api::<Node>::all(kube.clone())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    let ns = serde_json::from_value(json!({"metadata": {"name": "bench"}})).unwrap();
    Api::<k8s_openapi::api::core::v1::Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(kube.clone(), "bench");
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    // Created 16 at a time, as a workload controller does (Deployments, Jobs).
    futures::stream::iter(0..n)
        .map(|i| {
            let pods = pods.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({"metadata": {"name": format!("pod-{i}")},
                    "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}}))
                .unwrap();
                pods.create(&PostParams::default(), &pod).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<()>()
        .await;
    eprintln!("{n} pods created in {:?}", start.elapsed());
    wait_routed(&kube, n).await;
    let throughput = start.elapsed();
    eprintln!(
        "bench process (emulator + controller + client) used {:.2} CPU-seconds in {:.2} s",
        cpu_seconds() - cpu_before,
        throughput.as_secs_f64()
    );
    let ports = ovn
        .nbctl(&[
            "--bare",
            "--columns=name",
            "find",
            "Logical_Switch_Port",
            "external_ids:vendor=kube-ovn",
        ])
        .unwrap();
    assert!(
        ports
            .lines()
            .filter(|l| l.rsplit_once('.').is_some_and(|(_, ns)| ns == "bench"))
            .count()
            == n,
        "every pod has its port"
    );

    controller.abort();
    let _ = controller.await;
    let start = Instant::now();
    let controller = run.start();
    while run.pod_reconciles().await < n as u64 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let restart = start.elapsed();
    controller.abort();
    drop(ovn);
    (throughput, restart)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() {
        vec![1000, 10_000]
    } else {
        sizes
    };
    println!(
        "| pods | controller: created → all routed | pods/s | ovn-nbctl, one run | raw transact, one txn | restart-to-ready |"
    );
    println!("|---|---|---|---|---|---|");
    for n in sizes {
        let (throughput, restart) = controller_run(n).await;
        let nbctl = tokio::task::spawn_blocking(move || nbctl_one_run(n))
            .await
            .unwrap();
        let raw = raw_one_transaction(n).await;
        #[allow(clippy::cast_precision_loss, reason = "display only")]
        let rate = |d: Duration| n as f64 / d.as_secs_f64();
        println!(
            "| {n} | {:.2} s | {:.0} | {:.2} s ({:.0}/s) | {:.2} s ({:.0}/s) | {:.2} s |",
            throughput.as_secs_f64(),
            rate(throughput),
            nbctl.as_secs_f64(),
            rate(nbctl),
            raw.as_secs_f64(),
            rate(raw),
            restart.as_secs_f64()
        );
    }
}
