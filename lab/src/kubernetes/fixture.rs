//! The real control plane for tests: one etcd per test process, started on first use, and a
//! kube-apiserver per test with its own `--etcd-prefix`, so tests run side by side and never see
//! each other's cluster-scoped objects (Subnets, Vpcs, Nodes), while paying etcd's start-up
//! once. Every process is a child of the test (killed with it, by the kernel, if the test dies
//! first: testkit's `Daemon`).
//!
//! The API server runs kube-apiserver's defaults (RBAC and Node authorization, admission
//! plugins, ClusterIP allocation) except what a test without kube-controller-manager cannot
//! have: the `ServiceAccount` admission plugin refuses pods in a namespace whose `default`
//! ServiceAccount the controller manager has not made yet, so it is off unless the test asks for
//! the controller manager ([`ApiServerOptions::controller_manager`]).

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};
use kube_ovn_testkit::{Daemon, free_port};

use super::audit::{self, AuditedRequest};
use super::flags::{self, ApiServerSpec, AuditFiles, EtcdSpec};
use super::pki::{ClientIdentity, Pki};
use super::{Credentials, binary, kubeconfig};

/// How long a control-plane process gets to become ready (a loaded 2-core machine, several
/// API servers starting at once).
pub const START_TIMEOUT: Duration = Duration::from_secs(90);

/// The ClusterIP ranges of every test API server (dual stack).
pub const SERVICE_CIDRS: [&str; 2] = ["10.96.0.0/16", "fd00:10:96::/112"];

/// The test process's etcd.
pub struct SharedEtcd {
    daemon: Mutex<Daemon>,
    pub client: SocketAddr,
    _dir: tempfile::TempDir,
}

impl SharedEtcd {
    /// The process's etcd, started by the first caller.
    pub fn get() -> anyhow::Result<&'static SharedEtcd> {
        static ETCD: OnceLock<Result<SharedEtcd, String>> = OnceLock::new();
        ETCD.get_or_init(|| Self::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("etcd: {e}"))
    }

    fn start() -> anyhow::Result<Self> {
        let program = binary("etcd")?;
        remove_stale_etcd_dirs();
        // Kept for the process's life (a static is never dropped); the name carries the PID so
        // the next test process removes it once this one is gone.
        let dir = tempfile::Builder::new()
            .prefix(&format!("{ETCD_DIR_PREFIX}{}-", std::process::id()))
            .tempdir()?;
        let spec = EtcdSpec {
            name: "test".into(),
            data_dir: dir.path().join("data"),
            client: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
            peer: SocketAddr::from(([127, 0, 0, 1], free_port()?)),
        };
        let log = dir.path().join("etcd.log");
        let mut daemon = Daemon::spawn(
            "etcd",
            program.to_str().context("etcd's path")?,
            &flags::etcd_args(&spec),
            &log,
            &[],
        )?;
        let deadline = Instant::now() + START_TIMEOUT;
        while !etcd_healthy(spec.client) {
            daemon.check_alive()?;
            if Instant::now() > deadline {
                bail!(
                    "etcd did not become healthy within {START_TIMEOUT:?}; log:\n{}",
                    daemon.log_tail(20)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self {
            daemon: Mutex::new(daemon),
            client: spec.client,
            _dir: dir,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.daemon.lock().unwrap_or_else(PoisonError::into_inner).pid()
    }

    /// Compacts etcd's history up to its current revision (etcd's JSON gateway,
    /// `/v3/kv/compaction`): a watch that resumes from an older revision gets 410 Gone, as
    /// after a long disconnection on a real cluster. Every API server of the process shares
    /// this etcd; their caught-up watches are not affected.
    pub fn compact(&self) -> anyhow::Result<i64> {
        // A range over one key answers with the store's header, which carries the revision.
        let reply = etcd_post(self.client, "/v3/kv/range", r#"{"key":"AA=="}"#)?;
        let revision: i64 = reply["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .with_context(|| format!("no revision in etcd's answer {reply}"))?;
        etcd_post(
            self.client,
            "/v3/kv/compaction",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        )?;
        Ok(revision)
    }
}

const ETCD_DIR_PREFIX: &str = "kube-ovn-rs-etcd-";

/// Removes the etcd directories of test processes that have exited.
fn remove_stale_etcd_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(ETCD_DIR_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn etcd_healthy(addr: SocketAddr) -> bool {
    http_plain(addr, "GET", "/health", "").is_ok_and(|body| body.contains(r#""health":"true""#))
}

fn etcd_post(addr: SocketAddr, path: &str, body: &str) -> anyhow::Result<serde_json::Value> {
    let text = http_plain(addr, "POST", path, body)?;
    serde_json::from_str(&text).with_context(|| format!("etcd {path}: {text}"))
}

/// One HTTP/1.0 request to etcd's plain-HTTP client port; the body of a 200 answer.
fn http_plain(addr: SocketAddr, method: &str, path: &str, body: &str) -> anyhow::Result<String> {
    use std::io::{Read, Write};
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("{method} {path}: {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_owned())
}

/// What a test's API server runs with.
#[derive(Debug, Clone)]
pub struct ApiServerOptions {
    /// CRDs created, and waited for until served, before [`ApiServer::start`] returns.
    pub crds: Vec<CustomResourceDefinition>,
    /// Also run kube-controller-manager with these controllers (its names: `serviceaccount`,
    /// `namespace`, `garbage-collector`, `endpointslice`, …); none when empty. With it the
    /// `ServiceAccount` admission plugin is on.
    pub controller_manager: Vec<String>,
    /// Audit every request (for [`ApiServer::denials`]).
    pub audit: bool,
    /// kube-apiserver's watch cache (on, as on every cluster, unless a test needs its watches
    /// served straight from etcd, which is how a compacted revision reaches them).
    pub watch_cache: bool,
    /// More kube-apiserver flags.
    pub extra_args: Vec<String>,
}

impl Default for ApiServerOptions {
    fn default() -> Self {
        Self {
            crds: Vec::new(),
            controller_manager: Vec::new(),
            audit: true,
            watch_cache: true,
            extra_args: Vec::new(),
        }
    }
}

impl ApiServerOptions {
    /// The options with our CRDs (Kube-OVN's and the extension CRDs).
    pub fn with_crds() -> Self {
        Self {
            crds: kube_ovn_api::crds()
                .into_iter()
                .chain(kube_ovn_api::extension_crds())
                .collect(),
            ..Self::default()
        }
    }
}

/// A kube-apiserver of one test, on 127.0.0.1, with its own etcd prefix and PKI.
pub struct ApiServer {
    daemon: Daemon,
    controller_manager: Option<Daemon>,
    dir: tempfile::TempDir,
    pki: Pki,
    pub addr: SocketAddr,
    args: Vec<String>,
    audit_log: Option<PathBuf>,
}

impl ApiServer {
    /// An API server with our CRDs served.
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with(ApiServerOptions::with_crds()).await
    }

    pub async fn start_with(options: ApiServerOptions) -> anyhow::Result<Self> {
        static SERVERS: AtomicUsize = AtomicUsize::new(0);
        let etcd = SharedEtcd::get()?;
        let dir = tempfile::Builder::new().prefix("kube-apiserver-").tempdir()?;
        let pki = Pki::create(
            &dir.path().join("pki"),
            &["127.0.0.1".into(), "localhost".into()],
            &[ClientIdentity::admin()],
        )?;
        let port = free_port()?;
        let audit = options.audit.then(|| AuditFiles {
            policy: dir.path().join("audit-policy.yaml"),
            log: dir.path().join("audit.log"),
        });
        if let Some(a) = &audit {
            std::fs::write(&a.policy, flags::AUDIT_POLICY)?;
        }
        let prefix = format!(
            "/test-{}-{}",
            std::process::id(),
            SERVERS.fetch_add(1, Ordering::Relaxed)
        );
        let spec = ApiServerSpec {
            etcd: etcd.client,
            etcd_prefix: prefix,
            bind: [127, 0, 0, 1].into(),
            port,
            service_cidrs: SERVICE_CIDRS.iter().map(|c| (*c).to_owned()).collect(),
            disabled_admission_plugins: if options.controller_manager.is_empty() {
                vec!["ServiceAccount".into()]
            } else {
                vec![]
            },
            audit: audit.clone(),
            watch_cache: options.watch_cache,
            endpoint_reconciler: false,
            kubelet_client: false,
        };
        let mut args = flags::apiserver_args(&spec, &pki);
        args.extend(options.extra_args.iter().cloned());
        let admin = dir.path().join("admin.kubeconfig");
        std::fs::write(
            &admin,
            kubeconfig(
                &format!("https://127.0.0.1:{port}"),
                &pki.ca_cert(),
                "kubernetes-admin",
                &Credentials::Certificate {
                    cert: pki.client_cert("admin"),
                    key: pki.client_key("admin"),
                },
            ),
        )?;
        let daemon = spawn("kube-apiserver", &args, &dir.path().join("kube-apiserver.log"))?;
        let mut server = Self {
            daemon,
            controller_manager: None,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            pki,
            args,
            audit_log: audit.map(|a| a.log),
            dir,
        };
        server.wait_ready().await?;
        if !options.controller_manager.is_empty() {
            let controllers: Vec<&str> = options.controller_manager.iter().map(String::as_str).collect();
            let args = flags::controller_manager_args(&admin, &server.pki, &controllers);
            server.controller_manager = Some(spawn(
                "kube-controller-manager",
                &args,
                &server.dir.path().join("kube-controller-manager.log"),
            )?);
        }
        server.install_crds(&options.crds).await?;
        Ok(server)
    }

    /// Waits until `/readyz` answers `ok`, failing at once with the log if kube-apiserver exits.
    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let client = self.client().await?;
        let daemon = &mut self.daemon;
        let ready = super::lab::wait_ready(&client, START_TIMEOUT, || {
            daemon.check_alive().map_err(|e| format!("{e:#}"))
        })
        .await;
        ready.map_err(|e| anyhow::anyhow!("{e}; its log ends:\n{}", self.daemon.log_tail(30)))
    }

    /// Creates `crds` and waits until each is Established and its resource lists.
    pub async fn install_crds(&self, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
        install_crds(&self.client().await?, crds).await
    }

    /// The admin's kubeconfig (client certificate, `system:masters`).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// The admin's client configuration, for a client with layers of the test's own.
    pub async fn admin_config(&self) -> anyhow::Result<kube::Config> {
        config_from(&self.admin_kubeconfig()).await
    }

    /// A client as the administrator.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        Ok(kube::Client::try_from(self.admin_config().await?)?)
    }

    /// The server's URL, `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    pub fn ca_cert(&self) -> PathBuf {
        self.pki.ca_cert()
    }

    /// A kubeconfig, written into the test's directory, authenticating as ServiceAccount
    /// `namespace/name` (which must exist) with a token from the TokenRequest API, as a
    /// projected token in a pod would.
    pub async fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> anyhow::Result<PathBuf> {
        // A day: longer than any test (kube-apiserver runs with no maximum).
        let valid = Duration::from_hours(24);
        let token = super::lab::service_account_token(&self.client().await?, namespace, name, valid)
            .await
            .with_context(|| format!("a token for ServiceAccount {namespace}/{name}"))?;
        anyhow::ensure!(
            !token.is_empty(),
            "TokenRequest for {namespace}/{name} without a token"
        );
        let path = self.dir.path().join(format!("{namespace}-{name}.kubeconfig"));
        let user = format!("system:serviceaccount:{namespace}:{name}");
        std::fs::write(
            &path,
            kubeconfig(&self.url(), &self.ca_cert(), &user, &Credentials::Token(token)),
        )?;
        Ok(path)
    }

    /// A client as ServiceAccount `namespace/name` (see [`Self::service_account_kubeconfig`]).
    pub async fn service_account_client(&self, namespace: &str, name: &str) -> anyhow::Result<kube::Client> {
        let path = self.service_account_kubeconfig(namespace, name).await?;
        Ok(kube::Client::try_from(config_from(&path).await?)?)
    }

    /// Every request audited so far (empty without [`ApiServerOptions::audit`]).
    pub fn audited(&self) -> Vec<AuditedRequest> {
        self.audit_log.as_deref().map(audit::read).unwrap_or_default()
    }

    /// The audited requests the server refused with 403.
    pub fn denials(&self) -> Vec<AuditedRequest> {
        self.audited()
            .into_iter()
            .filter(AuditedRequest::is_denial)
            .collect()
    }

    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// The etcd this server stores in (shared by the test process).
    pub fn etcd(&self) -> anyhow::Result<&'static SharedEtcd> {
        SharedEtcd::get()
    }

    /// Stops kube-apiserver (SIGTERM, as a rolling restart does) and starts it again with the
    /// same flags and etcd prefix: every object stays; every client's watches break.
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.daemon.stop();
        self.daemon = spawn(
            "kube-apiserver",
            &self.args,
            &self.dir.path().join("kube-apiserver.log"),
        )?;
        self.wait_ready().await
    }

    /// The last lines of kube-apiserver's log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(cm) = &mut self.controller_manager {
            cm.stop();
        }
        self.daemon.stop();
    }
}

fn spawn(name: &str, args: &[String], log: &Path) -> anyhow::Result<Daemon> {
    let program = binary(name)?;
    Daemon::spawn(name, program.to_str().context("binary path")?, args, log, &[])
}

async fn config_from(path: &Path) -> anyhow::Result<kube::Config> {
    let kc = kube::config::Kubeconfig::read_from(path)?;
    Ok(kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?)
}

/// Creates `crds` through `kube` and waits until each is Established and its resource answers
/// a list (a CRD is served a moment after it is accepted).
pub async fn install_crds(kube: &kube::Client, crds: &[CustomResourceDefinition]) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(kube.clone());
    for crd in crds {
        api.create(&PostParams::default(), crd)
            .await
            .with_context(|| format!("creating CRD {}", crd.metadata.name.as_deref().unwrap_or("?")))?;
    }
    let deadline = Instant::now() + START_TIMEOUT;
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let version = crd
            .spec
            .versions
            .iter()
            .find(|v| v.served)
            .map(|v| v.name.clone())
            .unwrap_or_default();
        let path = format!(
            "/apis/{}/{}/{}?limit=1",
            crd.spec.group, version, crd.spec.names.plural
        );
        loop {
            let established = api.get(&name).await.ok().is_some_and(|c| {
                c.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True")
            });
            let listed = established && {
                let request = http::Request::get(&path).body(Vec::new())?;
                kube.request_text(request).await.is_ok()
            };
            if listed {
                break;
            }
            if Instant::now() > deadline {
                bail!("CRD {name} not served within {START_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(())
}
