//! containerd's CRI as the runtime: per node, our own containerd (1.6, Debian's) whose CNI dirs
//! are the ones the node daemon installed into, asked for pod sandboxes over the CRI as a
//! kubelet asks (`kube_ovn_lab::runtime`, which the lab's kubelet stand-in uses too). The runtime
//! then runs `loopback` and our conflist itself, with its own CNI library decoding our results,
//! which is what the shim-as-runtime tests cannot show.
//!
//! The rest of the cluster is the one the other daemon tests use (`common::Cluster`): a real
//! kube-apiserver, OVN central, the controller, and per node OVS in a network namespace with the
//! `kube-ovn-daemon` binary.

mod common;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use common::{Cluster, WAIT};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams};
use kube_ovn_lab::runtime::containerd::{self, CniDirs, Instance};
use kube_ovn_lab::runtime::cri::{CriClient, PodRef, sandbox_ips, sandbox_netns};
use kube_ovn_lab::runtime::images;
use kube_ovn_testkit::{Daemon, wait_ping_from, wait_until, wait_until_async};
use serde_json::{Value, json};

/// A node's runtime: containerd (our child, stopped by PID) and a CRI client on it.
struct NodeRuntime {
    instance: Instance,
    daemon: Daemon,
    cri: CriClient,
    _dir: tempfile::TempDir,
}

impl NodeRuntime {
    fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }
}

impl Drop for NodeRuntime {
    /// Every sandbox stopped and removed through the CRI (DEL runs, the shims exit), then
    /// containerd stopped by its PID, then any shim left, by the PID it wrote.
    fn drop(&mut self) {
        let socket = self.instance.socket();
        // Drop may run inside a tokio runtime, where blocking on another one panics: a thread.
        let cleaned = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(containerd::remove_all_sandboxes(&socket))
                .map_err(anyhow::Error::from)
        })
        .join();
        if !matches!(cleaned, Ok(Ok(_))) {
            eprintln!("could not remove every sandbox before stopping containerd: {cleaned:?}");
        }
        self.daemon.stop();
        for pid in self.instance.shim_pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

/// One containerd per node, on the CNI dirs that node's daemon installed into, with the pause
/// image loaded.
async fn start_runtimes(cluster: &Cluster) -> Result<Vec<NodeRuntime>> {
    let mut runtimes = Vec::new();
    for node in &cluster.nodes {
        let dirs = CniDirs {
            bin_dir: node.runtime.bin_dir.clone(),
            conf_dir: node.runtime.conf_dir.clone(),
        };
        let name = format!("containerd-{}", node.name);
        let (instance, daemon, dir) =
            tokio::task::spawn_blocking(move || start_containerd(&name, dirs)).await??;
        let cri = CriClient::connect(&instance.socket()).await?;
        runtimes.push(NodeRuntime {
            instance,
            daemon,
            cri,
            _dir: dir,
        });
    }
    Ok(runtimes)
}

fn start_containerd(name: &str, cni: CniDirs) -> Result<(Instance, Daemon, tempfile::TempDir)> {
    let archive = images::pause_image_archive(&images::default_cache_root())?;
    let dir = tempfile::Builder::new().prefix("containerd-").tempdir()?;
    let instance = Instance::new(dir.path(), cni);
    instance.prepare()?;
    let (program, args) = instance.command();
    let mut daemon = Daemon::spawn(name, &program, &args, &dir.path().join("containerd.log"), &[])?;
    let socket = instance.socket();
    wait_until(&format!("{name}: containerd's socket"), WAIT, || {
        daemon.check_alive()?;
        Ok(socket.exists())
    })
    .with_context(|| daemon.log_tail(30))?;
    containerd::import(&socket, &archive, containerd::Snapshotter::Native)
        .with_context(|| format!("{name}: import the pause image"))?;
    Ok((instance, daemon, dir))
}

/// A sandbox the runtime made for a pod, with what the runtime reports about it.
struct RunningSandbox {
    id: String,
    ip: IpAddr,
    netns: PathBuf,
}

/// The Pod object's UID, which the kubelet passes in the sandbox metadata.
async fn pod_ref(cluster: &Cluster, namespace: &str, name: &str) -> Result<PodRef> {
    let pod = Api::<Pod>::namespaced(cluster.kube.clone(), namespace)
        .get(name)
        .await?;
    Ok(PodRef::new(
        namespace,
        name,
        &pod.metadata.uid.context("pod without uid")?,
    ))
}

async fn annotated_ip(cluster: &Cluster, namespace: &str, name: &str) -> Result<String> {
    let pod = Api::<Pod>::namespaced(cluster.kube.clone(), namespace)
        .get(name)
        .await?;
    pod.metadata
        .annotations
        .unwrap_or_default()
        .remove("ovn.kubernetes.io/ip_address")
        .with_context(|| format!("pod {namespace}/{name} has no ip_address annotation"))
}

/// RunPodSandbox for a pod whose object exists, then PodSandboxStatus: the sandbox is ready and
/// the runtime reports exactly the address the controller annotated.
async fn run_sandbox(
    cluster: &Cluster,
    runtime: &NodeRuntime,
    namespace: &str,
    name: &str,
) -> Result<RunningSandbox> {
    let pod = pod_ref(cluster, namespace, name).await?;
    let id = runtime.cri.run_pod_sandbox(&pod).await.map_err(|e| {
        anyhow::anyhow!(
            "RunPodSandbox {namespace}/{name}: {}\ncontainerd's log:\n{}",
            e,
            runtime.log_tail(10)
        )
    })?;
    let status = runtime.cri.pod_sandbox_status(&id).await?;
    let state = status.status.as_ref().map(|s| s.state);
    assert_eq!(
        state,
        Some(kube_ovn_lab::runtime::cri::api::PodSandboxState::SandboxReady.into()),
        "{name}"
    );
    let ips = sandbox_ips(&status);
    let annotated = annotated_ip(cluster, namespace, name).await?;
    assert_eq!(
        ips,
        vec![annotated.clone()],
        "{namespace}/{name}: PodSandboxStatus IPs"
    );
    Ok(RunningSandbox {
        id,
        ip: annotated.parse()?,
        netns: sandbox_netns(&status)?,
    })
}

/// The subnet's `status.v4usingIPs`, as the controller counts it.
async fn used_ips(cluster: &Cluster, subnet: &str) -> Result<Value> {
    let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
    let (resource, _) = kube::discovery::pinned_kind(&cluster.kube, &gvk).await?;
    let api: Api<DynamicObject> = Api::all_with(cluster.kube.clone(), &resource);
    Ok(api.get(subnet).await?.data["status"]["v4usingIPs"].clone())
}

/// libcni's cached result for an attachment (containerd keeps the default cache dir).
fn cached_result(network: &str, container_id: &str) -> PathBuf {
    Path::new("/var/lib/cni/results").join(format!("{network}-{container_id}-eth0"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_gets_the_controllers_address_and_reaches_its_gateway_and_another_node() -> Result<()> {
    let cluster = Cluster::start(2, &[]).await?;
    let runtimes = start_runtimes(&cluster).await?;
    let version = runtimes[0].cri.version().await?;
    assert_eq!(version.runtime_name, "containerd", "{version:?}");
    eprintln!(
        "runtime: {} {} (CRI {})",
        version.runtime_name, version.runtime_version, version.runtime_api_version
    );
    let before = used_ips(&cluster, "ovn-default").await?;

    cluster.create_pod("default", "a", 0, &[]).await?;
    cluster.create_pod("default", "b", 1, &[]).await?;
    let a = run_sandbox(&cluster, &runtimes[0], "default", "a").await?;
    let b = run_sandbox(&cluster, &runtimes[1], "default", "b").await?;
    assert!(a.netns.exists(), "{}", a.netns.display());
    // The port is the pod's, on the node whose runtime made the sandbox.
    let node = &cluster.nodes[0];
    let ports = node.pod_ports()?;
    assert_eq!(ports.len(), 1, "{ports:?}");
    assert_eq!(
        node.iface_column(&ports[0], "external_ids:iface-id")?,
        "a.default"
    );
    // From inside the sandbox: the gateway through OVN, and the pod on the other node through
    // the geneve underlay.
    let gateway: IpAddr = "10.16.0.1".parse()?;
    let (a_netns, b_ip) = (a.netns.clone(), b.ip);
    tokio::task::spawn_blocking(move || {
        wait_ping_from(&a_netns, gateway, WAIT)?;
        wait_ping_from(&a_netns, b_ip, WAIT)
    })
    .await??;
    assert!(
        cached_result("kube-ovn", &a.id).exists(),
        "libcni cached no result"
    );

    // Stop (CNI DEL), then Remove, as the kubelet does when the pod goes: no port, veth,
    // network namespace or cached result stays; with the Pod objects deleted, the controller's
    // address count is back where it was.
    for (runtime, sandbox) in [(&runtimes[0], &a), (&runtimes[1], &b)] {
        runtime.cri.stop_pod_sandbox(&sandbox.id).await?;
        assert!(!sandbox.netns.exists(), "{} left", sandbox.netns.display());
        runtime.cri.remove_pod_sandbox(&sandbox.id).await?;
        assert!(runtime.cri.list_pod_sandboxes().await?.is_empty());
        assert!(!cached_result("kube-ovn", &sandbox.id).exists());
    }
    for node in &cluster.nodes {
        assert!(
            node.pod_ports()?.is_empty(),
            "{}: {:?}",
            node.name,
            node.pod_ports()?
        );
        assert!(
            node.pod_veths()?.is_empty(),
            "{}: {:?}",
            node.name,
            node.pod_veths()?
        );
    }
    cluster.delete_pod_object("default", "a").await?;
    cluster.delete_pod_object("default", "b").await?;
    wait_until_async("ovn-default's used address count to come back", WAIT, || async {
        Ok(used_ips(&cluster, "ovn-default").await? == before)
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_never_annotated_fails_with_our_error_and_the_retry_succeeds() -> Result<()> {
    let cluster = Cluster::start(1, &["--wait-address-timeout=3s"]).await?;
    let runtimes = start_runtimes(&cluster).await?;
    let runtime = &runtimes[0];
    // A static address outside every subnet: the controller refuses it and never annotates.
    cluster
        .create_pod(
            "default",
            "late",
            0,
            &[("ovn.kubernetes.io/ip_address", "192.0.2.7")],
        )
        .await?;
    let pod = pod_ref(&cluster, "default", "late").await?;
    let error = runtime
        .cri
        .run_pod_sandbox(&pod)
        .await
        .expect_err("RunPodSandbox succeeded for a pod without an address");
    // What the kubelet would log: containerd's words around our plugin's message.
    let message = error.to_string();
    for part in [
        r#"plugin type="kube-ovn""#,
        "pod default/late",
        "no address allocated",
    ] {
        assert!(message.contains(part), "{part:?} not in {message:?}");
    }
    // The failed sandbox is gone, and so is the port plugged early for it.
    assert!(runtime.cri.list_pod_sandboxes().await?.is_empty());
    let node = &cluster.nodes[0];
    wait_until("the failed sandbox's port to go", WAIT, || {
        Ok(node.pod_ports()?.is_empty())
    })?;

    // The user drops the bad address; the controller allocates one, and the kubelet's retry
    // (same metadata: containerd released the name) gets it.
    Api::<Pod>::namespaced(cluster.kube.clone(), "default")
        .patch(
            "late",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"ovn.kubernetes.io/ip_address": null}}})),
        )
        .await?;
    wait_until_async("the controller to annotate default/late", WAIT, || async {
        Ok(annotated_ip(&cluster, "default", "late").await.is_ok())
    })
    .await?;
    let sandbox = run_sandbox(&cluster, runtime, "default", "late").await?;
    let sandbox_netns = sandbox.netns.clone();
    tokio::task::spawn_blocking(move || wait_ping_from(&sandbox_netns, "10.16.0.1".parse::<IpAddr>()?, WAIT))
        .await??;
    runtime.cri.stop_and_remove(&sandbox.id).await?;
    assert!(node.pod_ports()?.is_empty());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sandboxes_at_once() -> Result<()> {
    const PODS: usize = 20;
    let cluster = Cluster::start(1, &[]).await?;
    let runtimes = start_runtimes(&cluster).await?;
    let runtime = &runtimes[0];
    let names: Vec<String> = (0..PODS).map(|i| format!("p{i:02}")).collect();
    for name in &names {
        cluster.create_pod("crowd", name, 0, &[]).await?;
    }
    let sandboxes = futures::future::try_join_all(
        names
            .iter()
            .map(|name| run_sandbox(&cluster, runtime, "crowd", name)),
    )
    .await?;
    let mut ips: Vec<IpAddr> = sandboxes.iter().map(|s| s.ip).collect();
    ips.sort();
    ips.dedup();
    assert_eq!(ips.len(), PODS, "addresses not distinct: {ips:?}");
    let node = &cluster.nodes[0];
    assert_eq!(node.pod_ports()?.len(), PODS);
    let (first, last_ip) = (sandboxes[0].netns.clone(), sandboxes[PODS - 1].ip);
    tokio::task::spawn_blocking(move || wait_ping_from(&first, last_ip, WAIT)).await??;

    futures::future::try_join_all(sandboxes.iter().map(|s| runtime.cri.stop_and_remove(&s.id))).await?;
    assert!(runtime.cri.list_pod_sandboxes().await?.is_empty());
    assert!(node.pod_ports()?.is_empty(), "{:?}", node.pod_ports()?);
    assert!(node.pod_veths()?.is_empty(), "{:?}", node.pod_veths()?);
    for s in &sandboxes {
        assert!(!s.netns.exists(), "{} left", s.netns.display());
    }
    Ok(())
}
