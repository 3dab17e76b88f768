//! What the controller benchmarks share: a real kube-apiserver (on its etcd:
//! `kube_ovn_lab::kubernetes::fixture`, without audit, without kube-controller-manager) and the
//! controller as their own processes, CPU time from `/proc`, and bounded polling.

#![allow(dead_code, reason = "each bench uses a part")]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
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
    kube_ovn_testkit::free_port().expect("a free TCP port on 127.0.0.1")
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

/// The benchmark's kube-apiserver (with our CRDs served), its admin kubeconfig, and a client.
pub struct KubeApi {
    pub server: ApiServer,
    pub kubeconfig: PathBuf,
    pub kube: kube::Client,
}

impl KubeApi {
    pub async fn start() -> Self {
        // No audit log: writing one line per request would be the API server's work measured.
        let options = ApiServerOptions {
            audit: false,
            ..ApiServerOptions::with_crds()
        };
        let server = ApiServer::start_with(options).await.expect("kube-apiserver");
        let kube = server.client().await.unwrap();
        Self {
            kubeconfig: server.admin_kubeconfig(),
            server,
            kube,
        }
    }

    /// kube-apiserver's PID.
    pub fn pid(&self) -> String {
        self.server.pid().unwrap().to_string()
    }

    /// The PID of the etcd it stores in.
    pub fn etcd_pid(&self) -> String {
        self.server.etcd().unwrap().pid().unwrap().to_string()
    }
}

/// The controller as its own process.
pub struct Controller {
    pub daemon: Daemon,
    pub metrics_port: u16,
}

impl Controller {
    pub fn start(dir: &Path, api: &KubeApi, ovn: &OvnCentral, run: usize) -> Self {
        let metrics_port = free_port();
        let args = vec![
            format!("--kubeconfig={}", api.kubeconfig.display()),
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

/// The API server (with our CRDs), OVN central and the controller (started once), and the node
/// `node1`, as the controller benchmarks begin.
pub async fn start_with_one_node(dir: &Path) -> (KubeApi, OvnCentral, Controller) {
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use kube::api::PostParams;

    let (api, ovn) = tokio::join!(KubeApi::start(), ovn());
    let kube = api.kube.clone();
    let controller = Controller::start(dir, &api, &ovn, 1);
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "node1"},
        "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.2"}]}}))
    .unwrap();
    Api::<Node>::all(kube)
        .create(&PostParams::default(), &node)
        .await
        .unwrap();
    (api, ovn, controller)
}

/// A fresh OVN central (NB, SB, northd).
pub async fn ovn() -> OvnCentral {
    tokio::task::spawn_blocking(OvnCentral::start)
        .await
        .unwrap()
        .unwrap()
}
