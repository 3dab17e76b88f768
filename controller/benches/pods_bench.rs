//! Controller throughput and restart benchmark. The API emulator (`kube-ovn-lab apiserver`) and
//! the controller (`kube-ovn-controller`) each run as their own process, as an API server and a
//! controller do in a cluster, talking HTTP over loopback; OVN central (NB, SB, `ovn-northd`) is
//! real.
//!
//! 1. N pods created in the emulator (16 requests at a time) → all annotated `routed=true`, each
//!    with its port in NB: pods per second from the first create to the last `routed`, and the
//!    CPU time the controller process (and, apart, the emulator process) spent meanwhile, read
//!    from `/proc/<pid>/stat`.
//! 2. The same N ports created by `ovn-nbctl` in one invocation (every `lsp-add` chained with
//!    `--`), and by one raw `transact` of N inserts (the server's own ceiling), on a fresh NB.
//! 3. Restart-to-ready: the controller process is killed (SIGKILL) and started again over the N
//!    routed pods; the time until it has re-checked every pod (its Pod reconcile count reaches N).
//!
//! Run: `cargo build --release -p kube-ovn-lab && cargo bench -p kube-ovn-controller --bench
//! pods_bench -- 1000 10000`. `KUBE_OVN_LAB_BIN` and `KUBE_OVN_CONTROLLER_BIN` name other builds
//! of the two binaries (the defaults: the release `kube-ovn-lab` next to this bench, and the
//! controller this bench was built with).

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::watcher::{self, watcher};
use kube_ovn_ovsdb::{
    Atom, Client, ClientConfig, Condition, MonitorTables, Mutation, Operation, Remote, Row, Value,
};
use kube_ovn_testkit::{Daemon, OvnCentral};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long any one step may take before the bench gives up, naming it.
const STEP: Duration = Duration::from_mins(10);

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat` (`self` for this
/// one). Linux reports them in clock ticks of 1/100 s.
fn cpu_seconds(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
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

/// CPU seconds used so far by this process's children named `comm` (OVN central's
/// `ovsdb-server`s and `ovn-northd` are started by this process).
fn children_cpu_seconds(comm: &str) -> f64 {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0.0;
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let name = stat
                .split_once('(')
                .and_then(|(_, r)| r.rsplit_once(')'))
                .map(|(n, _)| n);
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, r)| r.split_whitespace().nth(1));
            name == Some(comm) && ppid == Some(me.as_str())
        })
        .map(|pid| cpu_seconds(&pid))
        .sum()
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after [`STEP`].
async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < STEP, "{what}: not within {STEP:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The emulator's binary: `KUBE_OVN_LAB_BIN`, else the release build beside this bench.
fn lab_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("KUBE_OVN_LAB_BIN") {
        return p.into();
    }
    let exe = std::env::current_exe().unwrap();
    // target/release/deps/pods_bench-… → target/release/kube-ovn-lab
    let path = exe.parent().and_then(Path::parent).unwrap().join("kube-ovn-lab");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --release -p kube-ovn-lab` first, or set KUBE_OVN_LAB_BIN",
        path.display()
    );
    path
}

/// `kube-ovn-lab apiserver` on 127.0.0.1, and a client of it over TCP.
struct Emulator {
    daemon: Daemon,
    kubeconfig: PathBuf,
    kube: kube::Client,
}

impl Emulator {
    async fn start(dir: &Path) -> Self {
        let kubeconfig = dir.join("kubeconfig");
        let args: Vec<String> = [
            "apiserver",
            "--listen",
            "127.0.0.1:0",
            "--kubeconfig-out",
            &kubeconfig.display().to_string(),
            // Every pod is written about four times; keep enough history that no watch of the
            // run expires and relists.
            "--history",
            "500000",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let lab = lab_binary();
        let daemon = Daemon::spawn(
            "kube-ovn-lab apiserver",
            lab.to_str().unwrap(),
            &args,
            &dir.join("apiserver.log"),
            &[],
        )
        .unwrap();
        let mut addr = None;
        until("the emulator to write its kubeconfig", || {
            addr = std::fs::read_to_string(&kubeconfig).ok().and_then(|text| {
                text.lines()
                    .find_map(|l| l.trim().strip_prefix("server: http://"))
                    .map(str::to_owned)
            });
            std::future::ready(addr.is_some())
        })
        .await;
        let url = format!("http://{}", addr.unwrap());
        let kube = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
        until("the emulator to answer", || {
            let kube = kube.clone();
            async move { kube.apiserver_version().await.is_ok() }
        })
        .await;
        Self {
            daemon,
            kubeconfig,
            kube,
        }
    }

    fn pid(&self) -> String {
        self.daemon.pid().unwrap().to_string()
    }
}

/// The controller as its own process.
struct Controller {
    daemon: Daemon,
    metrics_port: u16,
}

impl Controller {
    fn start(dir: &Path, emulator: &Emulator, ovn: &OvnCentral, run: usize) -> Self {
        let metrics_port = free_port();
        let args = vec![
            format!("--kubeconfig={}", emulator.kubeconfig.display()),
            format!("--ovn-nb-addr={}", ovn.nb_remote()),
            "--bind-address=127.0.0.1".into(),
            format!("--pprof-port={metrics_port}"),
            "--leader-elect=false".into(),
            "--default-cidr=10.16.0.0/16".into(),
        ];
        let bin = std::env::var("KUBE_OVN_CONTROLLER_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_kube-ovn-controller").to_owned());
        let daemon = Daemon::spawn(
            "kube-ovn-controller",
            &bin,
            &args,
            &dir.join(format!("controller-{run}.log")),
            &[],
        )
        .unwrap();
        Self { daemon, metrics_port }
    }

    fn pid(&self) -> String {
        self.daemon.pid().unwrap().to_string()
    }

    /// The sum of the samples of metric `name` whose labels hold `label`, from the controller's
    /// `/metrics` (0 while it does not answer).
    async fn metric(&self, name: &str, label: &str) -> f64 {
        let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).await else {
            return 0.0;
        };
        let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await;
        let mut body = String::new();
        let _ = s.read_to_string(&mut body).await;
        body.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{') && l.contains(label))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum()
    }

    /// The controller's Pod reconcile count.
    async fn pod_reconciles(&self) -> u64 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a count")]
        let n = self
            .metric("kube_ovn_controller_reconcile_total", "kind=\"Pod\"")
            .await as u64;
        n
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
    controller_cpu: f64,
    emulator_cpu: f64,
    restart: Duration,
}

async fn controller_run(n: usize) -> Measured {
    let dir = tempfile::tempdir().unwrap();
    let emulator = Emulator::start(dir.path()).await;
    let kube = emulator.kube.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    for crd in kube_ovn_api::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    let ovn = tokio::task::spawn_blocking(OvnCentral::start)
        .await
        .unwrap()
        .unwrap();
    let controller = Controller::start(dir.path(), &emulator, &ovn, 1);
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "node1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}}))
    .unwrap();
    let nodes: Api<Node> = Api::all(kube.clone());
    nodes.create(&PostParams::default(), &node).await.unwrap();
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
    let (controller_before, emulator_before, bench_before) = (
        cpu_seconds(&controller.pid()),
        cpu_seconds(&emulator.pid()),
        cpu_seconds("self"),
    );
    let (nb_pid, sb_pid) = (
        ovn.nb.pid().unwrap().to_string(),
        ovn.sb.pid().unwrap().to_string(),
    );
    let (nb_before, sb_before, northd_before) = (
        cpu_seconds(&nb_pid),
        cpu_seconds(&sb_pid),
        children_cpu_seconds("ovn-northd"),
    );
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
    let controller_cpu = cpu_seconds(&controller.pid()) - controller_before;
    let emulator_cpu = cpu_seconds(&emulator.pid()) - emulator_before;
    eprintln!(
        "in {:.2} s: controller {controller_cpu:.2} CPU-s, emulator {emulator_cpu:.2} CPU-s, bench client {:.2} CPU-s, \
         NB ovsdb-server {:.2} CPU-s, SB ovsdb-server {:.2} CPU-s, ovn-northd {:.2} CPU-s",
        throughput.as_secs_f64(),
        cpu_seconds("self") - bench_before,
        cpu_seconds(&nb_pid) - nb_before,
        cpu_seconds(&sb_pid) - sb_before,
        children_cpu_seconds("ovn-northd") - northd_before,
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
    let controller = Controller::start(dir.path(), &emulator, &ovn, 2);
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
        controller_cpu,
        emulator_cpu,
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
        "| pods | controller: created → all routed | pods/s | ovn-nbctl, one run | controller / ovn-nbctl | controller CPU-s per 1,000 pods | emulator CPU-s per 1,000 pods | raw transact, one txn | restart-to-ready |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
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
            "| {n} | {:.2} s | {:.0} | {:.2} s | {:.1} | {:.2} | {:.2} | {:.2} s | {:.2} s |",
            m.throughput.as_secs_f64(),
            rate(m.throughput),
            nbctl.as_secs_f64(),
            m.throughput.as_secs_f64() / nbctl.as_secs_f64(),
            per_1000(m.controller_cpu),
            per_1000(m.emulator_cpu),
            raw.as_secs_f64(),
            m.restart.as_secs_f64()
        );
    }
}
