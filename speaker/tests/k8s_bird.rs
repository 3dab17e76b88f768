//! The `kube-ovn-speaker` binary against the API emulator and a real BIRD ToR: what the
//! `ovn.kubernetes.io/bgp` annotation announces (Kube-OVN's `cluster`/`local` semantics for pods
//! and subnets, Services), changes taking effect without a restart, and the next hop following
//! the node's source address. Needs root (namespaces) and bird2; fails, never skips.

mod common;

use std::path::PathBuf;

use anyhow::{Context, Result};
use common::peers::{Bird, PeerSpec};
use common::{Lab, NODE_AS, NODE_V4, TOR_AS, TOR_V4};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_testkit::{Daemon, wait_until};
use serde_json::{Value, json};

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The emulator, served on 127.0.0.1, with the project's CRDs.
struct Cluster {
    _api: ApiServer,
    kube: kube::Client,
    kubeconfig: PathBuf,
    _dir: tempfile::TempDir,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl Cluster {
    async fn start() -> Result<Self> {
        let api = ApiServer::new(ApiServerConfig::default()).context("API emulator")?;
        let kube = api.client();
        let crds: Api<CustomResourceDefinition> = Api::all(kube.clone());
        for crd in kube_ovn_api::crds() {
            crds.create(&PostParams::default(), &crd).await?;
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let served = api.clone();
        let server = tokio::spawn(async move {
            let _ = served.serve(listener).await;
        });
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        std::fs::write(&kubeconfig, kube_ovn_lab::apiserver::kubeconfig(addr))?;
        Ok(Self { _api: api, kube, kubeconfig, _dir: dir, server })
    }

    async fn subnet(&self, name: &str, cidr: &str, bgp: &str) -> Result<()> {
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
        let (ar, _) = kube::discovery::pinned_kind(&self.kube, &gvk).await?;
        let api: Api<DynamicObject> = Api::all_with(self.kube.clone(), &ar);
        let obj = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "annotations": {"ovn.kubernetes.io/bgp": bgp}}, "spec": {"cidrBlock": cidr}});
        api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(obj)).await?;
        let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await?;
        Ok(())
    }

    async fn pod(&self, name: &str, node: &str, ip: &str, extra: &[(&str, &str)]) -> Result<()> {
        let mut ann = json!({"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": "s1",
            "ovn.kubernetes.io/allocated": "true"});
        for (k, v) in extra {
            ann[*k] = json!(v);
        }
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name, "namespace": "default", "annotations": ann},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}}))?;
        Api::<Pod>::namespaced(self.kube.clone(), "default").create(&PostParams::default(), &pod).await?;
        Ok(())
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn speaker(cluster: &Cluster, lab: &Lab, dir: &std::path::Path, extra: &[&str]) -> Result<Daemon> {
    let mut args = vec![
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        "--node-name=n1".into(),
        format!("--cluster-as={NODE_AS}"),
        format!("--neighbor-as={TOR_AS}"),
        format!("--neighbor-address={TOR_V4}"),
        format!("--router-id={NODE_V4}"),
        format!("--bgp-netns={}", lab.node.path().display()),
        format!("--state-dir={}", dir.join("state").display()),
        format!("--pprof-port={}", free_port()),
        "--metrics-address=127.0.0.1".into(),
    ];
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    Daemon::spawn("speaker", env!("CARGO_BIN_EXE_kube-ovn-speaker"), &args, &dir.join("speaker.log"), &[])
}

fn wait_route(bird: &Bird, speaker: &Daemon, prefix: &str, present: bool) -> Result<()> {
    let what = format!("{prefix} {} in the ToR's table", if present { "present" } else { "absent" });
    wait_until(&what, WAIT, || Ok(bird.has(prefix)? == present)).with_context(|| speaker.log_tail(20))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bgp_annotation_decides_what_the_tor_learns() -> Result<()> {
    let lab = Lab::direct()?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let cluster = Cluster::start().await?;
    let dir = tempfile::tempdir()?;
    let mut speaker = speaker(&cluster, &lab, dir.path(), &["--announce-cluster-ip"])?;
    bird.wait_established().with_context(|| speaker.log_tail(20))?;

    // cluster: the subnet's CIDR and every pod, whichever node it runs on.
    cluster.subnet("s1", "10.16.0.0/16", "cluster").await?;
    cluster.pod("here", "n1", "10.16.0.5", &[]).await?;
    cluster.pod("there", "n2", "10.16.0.6", &[]).await?;
    for prefix in ["10.16.0.0/16", "10.16.0.5/32", "10.16.0.6/32"] {
        wait_route(&bird, &speaker, prefix, true)?;
    }
    let route = bird.route_all("10.16.0.5/32")?;
    assert!(route.contains(&format!("BGP.next_hop: {NODE_V4}")), "{route}");
    assert!(route.contains(&format!("BGP.as_path: {NODE_AS}")), "{route}");

    // Switching the subnet to local takes effect without a restart: no CIDR, only this node's pod.
    cluster.subnet("s1", "10.16.0.0/16", "local").await?;
    wait_route(&bird, &speaker, "10.16.0.0/16", false)?;
    wait_route(&bird, &speaker, "10.16.0.6/32", false)?;
    assert!(bird.has("10.16.0.5/32")?, "the local pod stays");
    // A pod's own annotation wins over its subnet's.
    cluster.pod("mine", "n2", "10.16.0.7", &[("ovn.kubernetes.io/bgp", "cluster")]).await?;
    wait_route(&bird, &speaker, "10.16.0.7/32", true)?;
    // A deleted pod is withdrawn.
    Api::<Pod>::namespaced(cluster.kube.clone(), "default").delete("here", &DeleteParams::default()).await?;
    wait_route(&bird, &speaker, "10.16.0.5/32", false)?;

    // Services: the literal "true", ClusterIPs with --announce-cluster-ip, LoadBalancer IPs.
    let services: Api<Service> = Api::namespaced(cluster.kube.clone(), "default");
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "web", "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"], "ports": [{"port": 80}]}}))?;
    services.create(&PostParams::default(), &svc).await?;
    wait_route(&bird, &speaker, "10.96.0.10/32", true)?;
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.80"}]}}});
    services.patch_status("web", &PatchParams::default(), &Patch::Merge(&lb)).await?;
    wait_route(&bird, &speaker, "192.0.2.80/32", true)?;
    let unannotate = json!({"metadata": {"annotations": {"ovn.kubernetes.io/bgp": Value::Null}}});
    services.patch("web", &PatchParams::default(), &Patch::Merge(&unannotate)).await?;
    wait_route(&bird, &speaker, "10.96.0.10/32", false)?;
    wait_route(&bird, &speaker, "192.0.2.80/32", false)?;

    // The next hop follows the kernel's source toward the ToR: a new preferred source address
    // replaces the announced next hop while the session stays up.
    lab.node.ip(&["addr", "add", "198.51.100.3/24", "dev", "eth0"])?;
    lab.node.ip(&["route", "replace", &format!("{TOR_V4}/32"), "dev", "eth0", "src", "198.51.100.3"])?;
    wait_until("the ToR to see next hop 198.51.100.3", WAIT, || {
        Ok(bird.route_all("10.16.0.7/32")?.contains("BGP.next_hop: 198.51.100.3"))
    })
    .with_context(|| speaker.log_tail(20))?;
    assert!(bird.established()?, "the session stayed up");
    speaker.check_alive()?;
    Ok(())
}
