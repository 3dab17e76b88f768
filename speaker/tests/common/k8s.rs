//! The Kubernetes side for the speaker's tests and benches: the API emulator served on
//! 127.0.0.1 with the project's CRDs, objects as the controller would write them, and the
//! `kube-ovn-speaker` binary as a child process with its BGP sockets in the node's namespace.

use std::path::PathBuf;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_testkit::Daemon;
use serde_json::json;

use super::{Lab, NODE_AS, NODE_V4, TOR_AS, TOR_V4};

/// Where the speaker's metrics are, by the port it was given.
pub fn metrics(port: u16) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The emulator, served on 127.0.0.1, with the project's CRDs.
pub struct Cluster {
    _api: ApiServer,
    pub kube: kube::Client,
    pub kubeconfig: PathBuf,
    /// Where the emulator listens.
    pub addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Cluster {
    pub async fn start() -> Result<Self> {
        Self::start_with(ApiServerConfig::default(), None).await
    }

    /// The emulator with `config` (RBAC, tokens); with `admin`, a token of `config`'s, served
    /// over HTTPS (a self-signed certificate in the cluster's directory), `kube` authenticating
    /// with `admin` and [`Cluster::kubeconfig_as`] giving other identities.
    pub async fn start_with(config: ApiServerConfig, admin: Option<&str>) -> Result<Self> {
        let api = ApiServer::new(config).context("API emulator")?;
        let kube = admin.map_or_else(|| api.client(), |t| api.client_with_token(t));
        let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
        for crd in kube_ovn_api::crds() {
            crds.create(&PostParams::default(), &crd).await?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let served = api.clone();
        let dir = tempfile::tempdir()?;
        let tls = match admin {
            Some(_) => {
                let hosts = kube_ovn_lab::apiserver::tls::default_hosts(addr.ip());
                let cert =
                    kube_ovn_lab::apiserver::tls::ServingCert::in_dir(&dir.path().join("pki"), &hosts)?;
                Some(cert.server_config()?)
            }
            None => None,
        };
        let server = tokio::spawn(async move {
            let _ = match tls {
                Some(config) => served.serve_tls(listener, config).await,
                None => served.serve(listener).await,
            };
        });
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kube_ovn_lab::apiserver::kubeconfig(addr))?;
        Ok(Self {
            _api: api,
            kube,
            kubeconfig,
            addr,
            dir,
            server,
        })
    }

    /// A kubeconfig (HTTPS, see [`Cluster::start_with`]) authenticating with `token`.
    pub fn kubeconfig_as(&self, token: &str) -> Result<PathBuf> {
        let ca = self.dir.path().join("pki/apiserver.crt");
        let path = self.dir.path().join(format!("kubeconfig-{token}"));
        std::fs::write(
            &path,
            kube_ovn_lab::apiserver::kubeconfig_for(self.addr, Some(&ca), Some(token)),
        )?;
        Ok(path)
    }

    /// A kubeconfig in this cluster's directory that points at `server` instead (a proxy).
    pub fn kubeconfig_for(&self, server: std::net::SocketAddr) -> Result<PathBuf> {
        let path = self.dir.path().join(format!("kubeconfig-{}", server.port()));
        std::fs::write(&path, kube_ovn_lab::apiserver::kubeconfig(server))?;
        Ok(path)
    }

    pub async fn subnet(&self, name: &str, cidr: &str, bgp: &str) -> Result<()> {
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
        let (ar, _) = kube::discovery::pinned_kind(&self.kube, &gvk).await?;
        let api: Api<DynamicObject> = Api::all_with(self.kube.clone(), &ar);
        let obj = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "annotations": {"ovn.kubernetes.io/bgp": bgp}}, "spec": {"cidrBlock": cidr}});
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(obj))
            .await?;
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }

    /// A pod in `default` as the controller leaves it: annotated with its address in subnet s1,
    /// and the IP record the controller writes for it.
    pub async fn pod(&self, name: &str, node: &str, ip: &str, extra: &[(&str, &str)]) -> Result<()> {
        self.annotated_pod(name, node, ip, extra).await?;
        self.ip_record(name, "s1", ip).await
    }

    /// The IP record the controller writes for pod `default/<pod>` (`ip_record.rs`): named
    /// like its port, labelled `ovn.kubernetes.io/ip_reserved=false`.
    pub async fn ip_record(&self, pod: &str, subnet: &str, ip: &str) -> Result<()> {
        let (v4, v6) = if ip.contains(':') { ("", ip) } else { (ip, "") };
        let record: kube_ovn_api::crd::Ip = serde_json::from_value(json!({
            "apiVersion": "kubeovn.io/v1", "kind": "IP",
            "metadata": {"name": format!("{pod}.default"), "labels": {
                "ovn.kubernetes.io/subnet": subnet, "ovn.kubernetes.io/node-name": "n1",
                subnet: "", "ovn.kubernetes.io/ip_reserved": "false"}},
            "spec": {"podName": pod, "namespace": "default", "subnet": subnet, "nodeName": "n1",
                "ipAddress": ip, "v4IpAddress": v4, "v6IpAddress": v6,
                "macAddress": "00:00:00:12:34:56", "podType": "",
                "attachIps": [], "attachMacs": [], "attachSubnets": []}}))?;
        Api::<kube_ovn_api::crd::Ip>::all(self.kube.clone())
            .create(&PostParams::default(), &record)
            .await?;
        Ok(())
    }

    /// A pod in `default` with the annotations the controller would write, but no IP record:
    /// what the pod's author can write alone.
    pub async fn annotated_pod(
        &self,
        name: &str,
        node: &str,
        ip: &str,
        extra: &[(&str, &str)],
    ) -> Result<()> {
        let mut ann = json!({"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": "s1",
            "ovn.kubernetes.io/allocated": "true"});
        for (k, v) in extra {
            ann[*k] = json!(v);
        }
        let pod: Pod = serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "default", "annotations": ann},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}}),
        )?;
        Api::<Pod>::namespaced(self.kube.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await?;
        Ok(())
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The speaker with the ToR as its flag peer (Kube-OVN's way); `extra` flags follow.
pub fn speaker(cluster: &Cluster, lab: &Lab, dir: &std::path::Path, extra: &[&str]) -> Result<Speaker> {
    let mut args = vec![
        format!("--neighbor-as={TOR_AS}"),
        format!("--neighbor-address={TOR_V4}"),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    speaker_without_peers(cluster, lab, dir, &args)
}

/// The speaker with no flag peers (BgpPeer objects may give it some).
pub fn speaker_without_peers(
    cluster: &Cluster,
    lab: &Lab,
    dir: &std::path::Path,
    extra: &[&str],
) -> Result<Speaker> {
    speaker_via(&cluster.kubeconfig, lab, dir, extra)
}

/// The speaker with no flag peers, reaching the API server through `kubeconfig`.
pub fn speaker_via(
    kubeconfig: &std::path::Path,
    lab: &Lab,
    dir: &std::path::Path,
    extra: &[&str],
) -> Result<Speaker> {
    speaker_on(kubeconfig, &lab.node, "n1", NODE_V4, dir, extra)
}

/// The speaker of node `node` (router ID `router_id`), its BGP in `netns`, reaching the API
/// server through `kubeconfig`; `extra` flags follow (peers among them).
pub fn speaker_on(
    kubeconfig: &std::path::Path,
    netns: &kube_ovn_testkit::Netns,
    node: &str,
    router_id: std::net::Ipv4Addr,
    dir: &std::path::Path,
    extra: &[&str],
) -> Result<Speaker> {
    let port = free_port();
    let mut args = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--node-name={node}"),
        format!("--cluster-as={NODE_AS}"),
        format!("--router-id={router_id}"),
        format!("--bgp-netns={}", netns.path().display()),
        format!("--state-dir={}", dir.join("state").display()),
        format!("--pprof-port={port}"),
        "--metrics-address=127.0.0.1".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let daemon = Daemon::spawn(
        "speaker",
        env!("CARGO_BIN_EXE_kube-ovn-speaker"),
        &args,
        &dir.join("speaker.log"),
        &[],
    )?;
    Ok(Speaker {
        daemon,
        metrics_port: port,
    })
}

/// Waits (30 s at most) until `prefix` is in the ToR's table, or gone from it.
pub fn wait_route(bird: &super::peers::Bird, speaker: &Speaker, prefix: &str, present: bool) -> Result<()> {
    let what = format!(
        "{prefix} {} in the ToR's table",
        if present { "present" } else { "absent" }
    );
    kube_ovn_testkit::wait_until(&what, std::time::Duration::from_secs(30), || {
        Ok(bird.has(prefix)? == present)
    })
    .with_context(|| speaker.log_tail(20))
}

/// A speaker process and where its metrics are.
pub struct Speaker {
    pub daemon: Daemon,
    pub metrics_port: u16,
}

impl Speaker {
    pub fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }

    pub fn metrics(&self) -> Result<String> {
        metrics(self.metrics_port)
    }
}

/// A TCP proxy in front of the emulator that a test can take away and bring back on the same
/// address: while it is down, every connection through it is cut, and each new one is closed
/// after its request line is read (and counted when it writes a status), as when the API server
/// is unreachable.
pub struct ApiProxy {
    pub addr: std::net::SocketAddr,
    down: tokio::sync::watch::Sender<bool>,
    refused_status_writes: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Reads the request line of a connection the proxy refuses; true for a status write.
async fn is_status_write(mut client: tokio::net::TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut line = Vec::new();
    let mut buf = [0u8; 512];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while !line.windows(2).any(|w| w == b"\r\n") && line.len() < 8192 {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => line.extend_from_slice(&buf[..n]),
            }
        }
    });
    let _ = read.await;
    let line = String::from_utf8_lossy(&line);
    let first = line.lines().next().unwrap_or_default();
    first.starts_with("PATCH ") && first.contains("/status")
}

impl ApiProxy {
    pub async fn start(upstream: std::net::SocketAddr) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (down, watch) = tokio::sync::watch::channel(false);
        let refused = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = refused.clone();
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watch.borrow() {
                    let counter = counter.clone();
                    tokio::spawn(async move {
                        if is_status_write(client).await {
                            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        }
                    });
                    continue;
                }
                let mut watch = watch.clone();
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let (mut client, mut server) = (client, server);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = watch.wait_for(|down| *down) => {}
                    }
                });
            }
        });
        Ok(Self {
            addr,
            down,
            refused_status_writes: refused,
            task,
        })
    }

    /// Cuts every connection and refuses new ones until [`ApiProxy::up`].
    pub fn down(&self) {
        self.down.send_replace(true);
    }

    pub fn up(&self) {
        self.down.send_replace(false);
    }

    /// Status writes (`PATCH .../status`) refused while down, so far.
    pub fn refused_status_writes(&self) -> usize {
        self.refused_status_writes
            .load(std::sync::atomic::Ordering::SeqCst)
    }
}
