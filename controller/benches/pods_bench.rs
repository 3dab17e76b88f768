//! Controller throughput and restart benchmark. A real kube-apiserver (on its own etcd, both built
//! from source: `kube_ovn_lab::kubernetes::fixture`) and the controller (`kube-ovn-controller`)
//! each run as their own process, as in a cluster, talking HTTPS over loopback; OVN central (NB,
//! SB, `ovn-northd`) is real.
//!
//! 1. N pods created through the API server (16 requests at a time) → all annotated
//!    `routed=true`, each with its port in NB: pods per second from the first create to the last
//!    `routed`, and the CPU time each process spent meanwhile (controller, kube-apiserver, etcd,
//!    NB `ovsdb-server`, `ovn-northd`), read from `/proc/<pid>/stat`, per 1,000 pods.
//! 2. The same N ports created by `ovn-nbctl` in one invocation (every `lsp-add` chained with
//!    `--`), and by one raw `transact` of N inserts (the server's own ceiling), on a fresh NB.
//! 3. Restart-to-ready: the controller process is killed (SIGKILL) and started again over the N
//!    routed pods; the time until it has re-checked every pod (its Pod reconcile count reaches N).
//!
//! Run: `cargo bench -p kube-ovn-controller --bench pods_bench -- 1000 10000` (Kubernetes built
//! by `scripts/install-deps.sh`). `KUBE_OVN_CONTROLLER_BIN` names another build of the controller
//! (the default: the one this bench was built with).

use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube_ovn_ovsdb::{
    Atom, Client, ClientConfig, Condition, MonitorTables, Mutation, Operation, Remote, Row, Value,
};
use kube_ovn_testkit::OvnCentral;
use serde_json::json;

mod support;

use support::{Controller, STEP, children_cpu_seconds, cpu_seconds, until};

/// Counts pods that reached `routed=true`, until `n` have.
async fn wait_routed(kube: &kube::Client, n: usize) {
    let mut routed = BTreeSet::new();
    let mut events = watcher(
        Api::<Pod>::namespaced(kube.clone(), "bench"),
        watcher::Config::default(),
    )
    .boxed();
    while routed.len() < n {
        let next = tokio::time::timeout(STEP, events.try_next()).await;
        let Some(ev) = next
            .unwrap_or_else(|_| panic!("no pod update for {STEP:?}; {} of {n} routed", routed.len()))
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

/// What one controller run measured.
struct Measured {
    throughput: Duration,
    /// CPU-seconds while the pods were created and routed, per process.
    cpu: Cpu,
    restart: Duration,
}

#[derive(Default, Clone, Copy)]
struct Cpu {
    controller: f64,
    apiserver: f64,
    etcd: f64,
    nb: f64,
    northd: f64,
}

/// The CPU-seconds each process has used so far.
fn cpu_now(controller: &str, apiserver: &str, etcd: &str, nb: &str) -> Cpu {
    Cpu {
        controller: cpu_seconds(controller),
        apiserver: cpu_seconds(apiserver),
        etcd: cpu_seconds(etcd),
        nb: cpu_seconds(nb),
        northd: children_cpu_seconds("ovn-northd"),
    }
}

impl std::ops::Sub for Cpu {
    type Output = Self;
    fn sub(self, o: Self) -> Self {
        Self {
            controller: self.controller - o.controller,
            apiserver: self.apiserver - o.apiserver,
            etcd: self.etcd - o.etcd,
            nb: self.nb - o.nb,
            northd: self.northd - o.northd,
        }
    }
}

async fn controller_run(n: usize) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let (api, ovn, controller) = support::start_with_one_node(dir.path()).await;
    let kube = api.kube.clone();
    let nodes: Api<Node> = Api::all(kube.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": "bench"}})).unwrap();
    Api::<Namespace>::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    // Timing starts with the controller up and idle: its start-up is not counted.
    until("the controller to allocate the node", || {
        let nodes = nodes.clone();
        async move {
            nodes.get("node1").await.is_ok_and(|n| {
                n.annotations()
                    .get("ovn.kubernetes.io/allocated")
                    .is_some_and(|v| v == "true")
            })
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(kube.clone(), "bench");
    let (controller_pid, apiserver_pid, etcd_pid) = (controller.pid(), api.pid(), api.etcd_pid());
    let (nb_pid, sb_pid) = (
        ovn.nb.pid().unwrap().to_string(),
        ovn.sb.pid().unwrap().to_string(),
    );
    let cpu_before = cpu_now(&controller_pid, &apiserver_pid, &etcd_pid, &nb_pid);
    let (bench_before, sb_before) = (cpu_seconds("self"), cpu_seconds(&sb_pid));
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
    let cpu = cpu_now(&controller_pid, &apiserver_pid, &etcd_pid, &nb_pid) - cpu_before;
    eprintln!(
        "in {:.2} s: controller {:.2} CPU-s, kube-apiserver {:.2} CPU-s, etcd {:.2} CPU-s, bench client {:.2} CPU-s, \
         NB ovsdb-server {:.2} CPU-s, SB ovsdb-server {:.2} CPU-s, ovn-northd {:.2} CPU-s",
        throughput.as_secs_f64(),
        cpu.controller,
        cpu.apiserver,
        cpu.etcd,
        cpu_seconds("self") - bench_before,
        cpu.nb,
        cpu_seconds(&sb_pid) - sb_before,
        cpu.northd,
    );
    eprintln!(
        "controller: {} northbound transactions, {} reconciles ({} of pods)",
        controller
            .metric("kube_ovn_controller_ovsdb_transaction_duration_seconds_count", "")
            .await,
        controller.metric("kube_ovn_controller_reconcile_total", "").await,
        controller.pod_reconciles().await,
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

    // A crash: SIGKILL by PID, then a new process over the N routed pods.
    drop(controller);
    let start = Instant::now();
    let controller = Controller::start(dir.path(), &api, &ovn, 2);
    until("the restarted controller to re-check every pod", || {
        let c = &controller;
        async move { c.pod_reconciles().await >= n as u64 }
    })
    .await;
    let restart = start.elapsed();
    drop(controller);
    drop(ovn);
    Measured {
        throughput,
        cpu,
        restart,
    }
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
        "| pods | controller: created → all routed | pods/s | ovn-nbctl, one run | controller / ovn-nbctl \
         | CPU-s per 1,000 pods: controller | kube-apiserver | etcd | NB | northd | raw transact, one txn | restart-to-ready |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for n in sizes {
        let m = controller_run(n).await;
        let nbctl = tokio::task::spawn_blocking(move || nbctl_one_run(n))
            .await
            .unwrap();
        let raw = raw_one_transaction(n).await;
        #[allow(clippy::cast_precision_loss, reason = "display only")]
        let (rate, per_1000) = (
            |d: Duration| n as f64 / d.as_secs_f64(),
            |cpu: f64| cpu * 1000.0 / n as f64,
        );
        println!(
            "| {n} | {:.2} s | {:.0} | {:.2} s | {:.1} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} s | {:.2} s |",
            m.throughput.as_secs_f64(),
            rate(m.throughput),
            nbctl.as_secs_f64(),
            m.throughput.as_secs_f64() / nbctl.as_secs_f64(),
            per_1000(m.cpu.controller),
            per_1000(m.cpu.apiserver),
            per_1000(m.cpu.etcd),
            per_1000(m.cpu.nb),
            per_1000(m.cpu.northd),
            raw.as_secs_f64(),
            m.restart.as_secs_f64()
        );
    }
}
