//! Helpers shared by the emulator's integration tests: a seeded random generator, the server's own
//! view of a resource, CRD installation, and the `kube-ovn-lab` binary as a child process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use axum::body::Body;
use axum::http::Request;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube_ovn_lab::apiserver::ApiServer;
use kube_ovn_lab::apiserver::selectors::{FieldSelector, LabelSelector};
use kube_ovn_testkit::{Daemon, wait_until, wait_until_async};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;
use tower::ServiceExt;

pub mod agent;
pub mod kubectl;
pub mod lab;

/// How long any single condition may take before a test fails. Generous: the machine has two
/// cores and may be running a benchmark at the same time.
pub const WAIT: Duration = Duration::from_secs(30);

/// The next item of a stream of results within [`WAIT`], `None` when the stream ended; fails the
/// test naming `what` when nothing comes in time or the stream reports an error.
pub async fn next_within<S, T, E>(stream: &mut S, what: &str) -> Option<T>
where
    S: futures::Stream<Item = Result<T, E>> + Unpin,
    E: std::fmt::Debug,
{
    tokio::time::timeout(WAIT, futures::TryStreamExt::try_next(stream))
        .await
        .unwrap_or_else(|_| panic!("no {what} within {WAIT:?}"))
        .unwrap_or_else(|e| panic!("{what}: the stream failed: {e:?}"))
}

/// The seed of a random test: `LAB_TEST_SEED` when set, else `default`; printed, so a failure
/// can be replayed.
pub fn seed(default: u64) -> u64 {
    let seed = std::env::var("LAB_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("random seed: {seed} (replay with LAB_TEST_SEED={seed})");
    seed
}

/// The emulator's own objects of a resource, by `namespace/name` (or `name`), straight from its
/// store: what every client view is compared with.
pub fn server_objects(
    server: &ApiServer,
    group: &str,
    version: &str,
    plural: &str,
) -> BTreeMap<String, Value> {
    let store = server.store();
    let res = store
        .resource(group, version, plural)
        .unwrap_or_else(|| panic!("{group}/{version} {plural} is not served"));
    let page = store
        .list(
            &res,
            None,
            &LabelSelector::default(),
            &FieldSelector::default(),
            None,
            None,
        )
        .expect("listing the store");
    page.items
        .iter()
        .map(|o| (object_key(o), (**o).clone()))
        .collect()
}

/// `namespace/name`, or `name` for a cluster-scoped object.
pub fn object_key(obj: &Value) -> String {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) if !ns.is_empty() => format!("{ns}/{name}"),
        _ => name.to_owned(),
    }
}

pub fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no resourceVersion in {obj}"))
}

/// Creates the project's CRDs (`kube_ovn_api::crds()`) and waits until their kinds are served.
pub async fn install_crds(client: &kube::Client) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in kube_ovn_api::crds() {
        api.create(&PostParams::default(), &crd)
            .await
            .with_context(|| format!("creating CRD {:?}", crd.metadata.name))?;
    }
    wait_until_async("the CRDs to be Established", WAIT, || async {
        let list = api.list(&kube::api::ListParams::default()).await?;
        Ok(list.items.iter().all(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"))
        }) && list.items.len() == kube_ovn_api::crds().len())
    })
    .await
}

/// `kube-ovn-lab apiserver` as a child process on `127.0.0.1:0`; its address comes from the
/// kubeconfig it writes. Stopped by PID (SIGTERM or SIGKILL), never by name.
pub struct LabProcess {
    daemon: Daemon,
    pub addr: SocketAddr,
    pub kubeconfig: PathBuf,
}

impl LabProcess {
    /// Starts the binary with its kubeconfig and log in `dir`, plus `extra` arguments, and waits
    /// until it accepts connections.
    pub fn start(dir: &Path, extra: &[String]) -> anyhow::Result<Self> {
        let kubeconfig = dir.join("kubeconfig");
        // A previous run's kubeconfig names a port that is gone.
        let _ = std::fs::remove_file(&kubeconfig);
        let mut args = vec![
            "apiserver".to_owned(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--kubeconfig-out".into(),
            kubeconfig.display().to_string(),
        ];
        args.extend_from_slice(extra);
        let mut daemon = Daemon::spawn(
            "kube-ovn-lab apiserver",
            env!("CARGO_BIN_EXE_kube-ovn-lab"),
            &args,
            &dir.join("apiserver.log"),
            &[],
        )?;
        let mut addr = None;
        wait_until("the emulator to write its kubeconfig", WAIT, || {
            daemon.check_alive()?;
            let Ok(text) = std::fs::read_to_string(&kubeconfig) else {
                return Ok(false);
            };
            addr = server_address(&text);
            Ok(addr.is_some())
        })?;
        let addr = addr.expect("awaited above");
        wait_until("the emulator to accept connections", WAIT, || {
            daemon.check_alive()?;
            Ok(std::net::TcpStream::connect(addr).is_ok())
        })?;
        Ok(Self {
            daemon,
            addr,
            kubeconfig,
        })
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A `kube::Client` over TCP.
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url().parse().expect("a valid URL"));
        kube::Client::try_from(config).expect("a client for the emulator")
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.daemon.pid().expect("running")).expect("a pid"))
    }

    /// SIGTERM by PID, then waits (bounded) for the process to exit.
    pub fn terminate(&mut self) -> anyhow::Result<()> {
        kill(self.pid(), Signal::SIGTERM)?;
        let daemon = &mut self.daemon;
        wait_until("the emulator to exit on SIGTERM", WAIT, || {
            Ok(!daemon.is_running())
        })
    }

    /// SIGKILL by PID, as in a crash; reaps the process.
    pub fn kill(&mut self) {
        self.daemon.kill();
    }

    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

/// The `server:` URL's address in a kubeconfig.
fn server_address(kubeconfig: &str) -> Option<SocketAddr> {
    kubeconfig
        .lines()
        .find_map(|l| {
            let l = l.trim();
            l.strip_prefix("server: http://")
                .or_else(|| l.strip_prefix("server: https://"))
        })
        .and_then(|a| a.trim().parse().ok())
}

pub const JSON: Option<&str> = Some("application/json");

/// One raw request; the answer's status code and JSON body (a non-JSON body fails the test).
pub async fn raw(
    server: &ApiServer,
    method: &str,
    uri: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> (u16, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let resp = server
        .router()
        .oneshot(req.body(Body::from(body.to_vec())).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap();
    let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
        panic!(
            "{method} {uri} → {code} with a body that is not JSON ({e}): {:?}",
            String::from_utf8_lossy(&bytes)
        )
    });
    (code, value)
}

/// Asserts a failure Status with `code` and `reason` whose message mentions `mentions`.
#[track_caller]
pub fn assert_status(answer: &(u16, Value), code: u16, reason: &str, mentions: &str) {
    let (got, body) = answer;
    assert_eq!(*got, code, "HTTP code; body {body}");
    assert_eq!(body["kind"], "Status", "{body}");
    assert_eq!(body["apiVersion"], "v1", "{body}");
    assert_eq!(body["status"], "Failure", "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(mentions),
        "message {message:?} does not mention {mentions:?}"
    );
}
