//! What the controller benchmarks share: the API emulator and the controller as their own
//! processes, CPU time from `/proc`, and bounded polling.

#![allow(dead_code, reason = "each bench uses a part")]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube_ovn_testkit::{Daemon, OvnCentral};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How long any one step may take before the bench gives up, naming it.
pub const STEP: Duration = Duration::from_mins(10);

/// CPU seconds (user + system) process `pid` has used, from `/proc/<pid>/stat` (`self` for this
/// one). Linux reports them in clock ticks of 1/100 s.
pub fn cpu_seconds(pid: &str) -> f64 {
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
pub fn children_cpu_seconds(comm: &str) -> f64 {
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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Polls `check` every 20 ms until it holds; panics naming `what` after [`STEP`].
pub async fn until<F, Fut>(what: &str, mut check: F)
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
pub fn lab_binary() -> PathBuf {
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
pub struct Emulator {
    pub daemon: Daemon,
    pub kubeconfig: PathBuf,
    pub kube: kube::Client,
}

impl Emulator {
    pub async fn start(dir: &Path) -> Self {
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

    pub fn pid(&self) -> String {
        self.daemon.pid().unwrap().to_string()
    }
}

/// The controller as its own process.
pub struct Controller {
    pub daemon: Daemon,
    pub metrics_port: u16,
}

impl Controller {
    pub fn start(dir: &Path, emulator: &Emulator, ovn: &OvnCentral, run: usize) -> Self {
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

    pub fn pid(&self) -> String {
        self.daemon.pid().unwrap().to_string()
    }

    /// The sum of the samples of metric `name` whose labels hold `label`, from the controller's
    /// `/metrics` (0 while it does not answer).
    pub async fn metric(&self, name: &str, label: &str) -> f64 {
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
    pub async fn pod_reconciles(&self) -> u64 {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, reason = "a count")]
        let n = self
            .metric("kube_ovn_controller_reconcile_total", "kind=\"Pod\"")
            .await as u64;
        n
    }
}

/// The emulator (with our CRDs), OVN central and the controller (started once), and the node
/// `node1`, as both controller benchmarks begin.
pub async fn start_with_one_node(dir: &Path) -> (Emulator, OvnCentral, Controller) {
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use kube::api::PostParams;

    let emulator = Emulator::start(dir).await;
    let kube = emulator.kube.clone();
    let ovn = crds_and_ovn(&kube).await;
    let controller = Controller::start(dir, &emulator, &ovn, 1);
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "node1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}}))
    .unwrap();
    Api::<Node>::all(kube)
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    (emulator, ovn, controller)
}

/// Kube-OVN's CRDs installed through `kube`, and a fresh OVN central (NB, SB, northd).
pub async fn crds_and_ovn(kube: &kube::Client) -> OvnCentral {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Api;
    use kube::api::PostParams;

    let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
    for crd in kube_ovn_api::crds() {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }
    tokio::task::spawn_blocking(OvnCentral::start)
        .await
        .unwrap()
        .unwrap()
}
