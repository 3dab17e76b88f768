//! The Kubernetes side for the speaker's tests and benches: a real kube-apiserver (the lab's
//! test fixture: its own etcd prefix, our CRDs served, the BgpPeer CRD among them), objects as
//! the controller (and, for pods, the kubelet) would write them, and the `kube-ovn-speaker`
//! binary as a child process with its BGP sockets in the node's namespace.

use std::path::PathBuf;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use kube_ovn_testkit::Daemon;
use serde_json::json;

use super::{Lab, NODE_AS, NODE_V4, TOR_AS, TOR_V4};

/// The speaker's ServiceAccount in `deploy/base/rbac.yaml`.
pub const SPEAKER_ACCOUNT: (&str, &str) = ("kube-system", "kube-ovn-speaker");

/// Where the speaker's metrics are, by the port it was given.
pub fn metrics(port: u16) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// A kube-apiserver of this test with our CRDs; `kube` and `kubeconfig` are the admin's.
pub struct Cluster {
    pub server: ApiServer,
    pub kube: kube::Client,
    pub kubeconfig: PathBuf,
    /// Where the API server listens (HTTPS).
    pub addr: std::net::SocketAddr,
    dir: tempfile::TempDir,
}

impl Cluster {
    pub async fn start() -> Result<Self> {
        Self::start_with(ApiServerOptions::with_crds()).await
    }

    pub async fn start_with(options: ApiServerOptions) -> Result<Self> {
        let server = ApiServer::start_with(options).await.context("kube-apiserver")?;
        let kube = server.client().await?;
        Ok(Self {
            kubeconfig: server.admin_kubeconfig(),
            addr: server.addr,
            kube,
            server,
            dir: tempfile::tempdir()?,
        })
    }

    /// Applies `deploy/base/rbac.yaml` and returns a kubeconfig authenticating as the speaker's
    /// ServiceAccount (a TokenRequest token), as the DaemonSet's pods do.
    pub async fn speaker_identity(&self) -> Result<PathBuf> {
        let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/rbac.yaml"))?;
        kube_ovn_lab::manifests::create_all(&self.kube, &rbac).await?;
        let (namespace, name) = SPEAKER_ACCOUNT;
        self.server.service_account_kubeconfig(namespace, name).await
    }

    /// The admin's kubeconfig, pointing at `server` instead (a TCP proxy in front of the API
    /// server: TLS passes through, and the serving certificate names 127.0.0.1).
    pub fn kubeconfig_for(&self, server: std::net::SocketAddr) -> Result<PathBuf> {
        let text = std::fs::read_to_string(&self.kubeconfig)?;
        let here = format!("server: https://{}", self.addr);
        anyhow::ensure!(text.contains(&here), "no `{here}` in the admin kubeconfig");
        let path = self.dir.path().join(format!("kubeconfig-{}", server.port()));
        std::fs::write(&path, text.replace(&here, &format!("server: https://{server}")))?;
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
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}),
        )?;
        self.running_pod(&pod).await
    }

    /// Creates `pod` (bound to its `spec.nodeName`) and writes `status.phase: Running`, as the
    /// kubelet would once it runs: the API server ignores a status sent with the creation.
    pub async fn running_pod(&self, pod: &Pod) -> Result<()> {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().context("a pod without a name")?;
        let pods = Api::<Pod>::namespaced(self.kube.clone(), namespace);
        pods.create(&PostParams::default(), pod)
            .await
            .with_context(|| format!("creating pod {namespace}/{name}"))?;
        let running = json!({"status": {"phase": "Running"}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&running))
            .await?;
        Ok(())
    }

    /// Deletes pod `namespace/name` for good. A bound pod's deletion is graceful (it gets a
    /// deletionTimestamp and stays until its kubelet removes it); with no kubelet here, the test
    /// plays it and deletes with grace period 0.
    pub async fn delete_pod(&self, namespace: &str, name: &str) -> Result<()> {
        let now = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        Api::<Pod>::namespaced(self.kube.clone(), namespace)
            .delete(name, &now)
            .await
            .with_context(|| format!("deleting pod {namespace}/{name}"))?;
        Ok(())
    }
}

pub fn free_port() -> u16 {
    kube_ovn_testkit::free_port().expect("a free TCP port on 127.0.0.1")
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
    ];
    // Loopback unless the test says otherwise (a flag may be given once).
    if !extra.iter().any(|a| a.starts_with("--metrics-address")) {
        args.push("--metrics-address=127.0.0.1".into());
    }
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

/// A TCP proxy in front of the API server that a test can take away and bring back on the same
/// address: while it is down, every connection through it is cut and each new one closed at
/// once, as when the API server is unreachable. (TLS passes through it untouched, so it cannot
/// tell one request from another: what the speaker tried meanwhile is in its log.)
pub struct ApiProxy {
    pub addr: std::net::SocketAddr,
    down: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ApiProxy {
    pub async fn start(upstream: std::net::SocketAddr) -> Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (down, watch) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *watch.borrow() {
                    drop(client);
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
        Ok(Self { addr, down, task })
    }

    /// Cuts every connection and refuses new ones until [`ApiProxy::up`].
    pub fn down(&self) {
        self.down.send_replace(true);
    }

    pub fn up(&self) {
        self.down.send_replace(false);
    }
}
