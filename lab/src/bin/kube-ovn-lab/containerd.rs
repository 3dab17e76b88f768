//! `up --runtime containerd`: the lab's pods are sandboxes made by containerd's CRI, one
//! containerd per node (`cluster::containerd`), their netexec servers real containers of an image
//! built from this binary. What `up`, `down` and `status` do for it, kept here so those verbs
//! only call in.
//!
//! - `up`: before anything starts, the programs are checked and the lab's directory made a
//!   shared mount ([`prepare`]); once the nodes' daemons run (their CNI dirs filled), each node's
//!   containerd is started, recorded like every lab process, and given the pause and netexec
//!   images ([`start`]); the agent is told to use it ([`RuntimeArg::agent`]).
//! - `down`: the agent first (it would make sandboxes again), then every sandbox through the
//!   CRI while the node daemons still answer CNI DEL ([`remove_sandboxes`]); after the
//!   processes: the sandboxes' namespaces' processes, then every mount under the lab's directory.
//! - `status`: each containerd answers the CRI, with how many sandboxes it has ([`health`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use kube_ovn_lab::cluster::components::Binaries;
use kube_ovn_lab::cluster::containerd::{self, Mount};
use kube_ovn_lab::cluster::process::{self, Launch};
use kube_ovn_lab::cluster::state::LabState;
use kube_ovn_lab::cluster::topology::Topology;
use kube_ovn_lab::runtime::containerd::{Snapshotter, import, remove_all_sandboxes};
use kube_ovn_lab::runtime::cri::CriClient;
use kube_ovn_lab::runtime::images;

use super::record::{Recorder, wait_serving};

/// How long `down` lets each containerd take to remove its sandboxes.
const REMOVE_TIMEOUT: Duration = Duration::from_mins(1);

/// Which runtime makes the lab's pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeArg {
    /// The kubelet stand-in makes network namespaces and runs the CNI conflist itself; netexec
    /// is served from the agent (fast).
    #[default]
    Direct,
    /// containerd per node: pods are real sandboxes (pause container, CNI run by containerd),
    /// netexec a real container.
    Containerd,
}

impl RuntimeArg {
    /// The agent's launch, told which runtime its kubelets use.
    pub fn agent(self, mut launch: Launch) -> Launch {
        if self == Self::Containerd {
            launch.args.push("--runtime=containerd".into());
        }
        launch
    }
}

/// Before anything of the lab starts: what containerd needs is installed, and the lab's
/// directory is a shared mount (so the node daemons see the sandboxes' namespaces).
pub fn prepare(t: &Topology) -> anyhow::Result<()> {
    let missing: Vec<&str> = [
        "/usr/bin/containerd",
        "/usr/bin/containerd-shim-runc-v2",
        "/usr/bin/ctr",
        "/usr/sbin/runc",
        "/usr/bin/podman",
        "/usr/bin/ldd",
        "/usr/lib/cni/loopback",
        "/bin/busybox",
    ]
    .into_iter()
    .filter(|p| !Path::new(p).is_file())
    .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "--runtime containerd: not installed: {} (run scripts/install-deps.sh)",
        missing.join(", ")
    );
    containerd::share_lab_dir(t)?;
    Ok(())
}

/// Each node's containerd, started in the node's namespace, recorded, serving, with the pause
/// and netexec images loaded. The node daemons run (they filled the CNI dirs).
pub async fn start(t: &Topology, bins: &Binaries, rec: &Recorder, timeout: Duration) -> anyhow::Result<()> {
    let cache = containerd::image_cache(t);
    let binary = bins.path("kube-ovn-lab");
    let archives = tokio::task::spawn_blocking(move || -> anyhow::Result<[PathBuf; 2]> {
        Ok([
            images::pause_image_archive(&cache)?,
            images::netexec_image_archive(&cache, &binary)?,
        ])
    })
    .await??;
    let mut tasks = Vec::new();
    for node in t.nodes.clone() {
        let (t, rec, archives) = (t.clone(), rec.clone(), archives.clone());
        tasks.push(tokio::spawn(async move {
            let instance = containerd::instance(&t, &node);
            instance.prepare()?;
            let launch = containerd::launch(&t, &node);
            let started = rec.start(&launch)?;
            wait_serving(&launch, started, instance.socket(), timeout).await?;
            let socket = instance.socket();
            tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
                for archive in &archives {
                    import(&socket, archive, Snapshotter::Native)?;
                }
                Ok(())
            })
            .await??;
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// The nodes whose containerd the state records, with the newest record of each.
fn recorded(t: &Topology, state: &LabState) -> Vec<(String, u32, u64)> {
    t.nodes
        .iter()
        .filter_map(|n| {
            let (pid, start) = state.process(&containerd::component(&n.name))?;
            Some((n.name.clone(), pid, start))
        })
        .collect()
}

/// For a lab with containerd: stops the agent, then removes every sandbox through each running
/// containerd (CNI DEL reaches the node daemons, which still run). Failures are reported, not
/// fatal: what stays is cleaned up by PID and by unmounting.
pub fn remove_sandboxes(t: &Topology, state: &LabState, grace: Duration) -> anyhow::Result<usize> {
    let runtimes: Vec<(String, u32, u64)> = recorded(t, state)
        .into_iter()
        .filter(|(_, pid, start)| process::alive(*pid, *start))
        .collect();
    if runtimes.is_empty() {
        return Ok(0);
    }
    // The agent and real kubelets would make the sandboxes again.
    for (component, pid, start) in state.processes() {
        if component == "agent" || kube_ovn_lab::cluster::kubelet::node_of(component).is_some() {
            process::stop(pid, start, grace);
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut removed = 0;
    for (node, _, _) in runtimes {
        let Some(plan) = t.node(&node) else { continue };
        let socket = containerd::instance(t, plan).socket();
        match rt.block_on(async { tokio::time::timeout(REMOVE_TIMEOUT, remove_all_sandboxes(&socket)).await })
        {
            Ok(Ok(n)) => removed += n,
            Ok(Err(e)) => println!("{node}: removing its sandboxes through containerd failed: {e}"),
            Err(_) => println!("{node}: containerd did not remove its sandboxes within {REMOVE_TIMEOUT:?}"),
        }
    }
    Ok(removed)
}

/// The network namespaces mounted under the lab's directory (containerd's sandboxes'), for
/// `down` to stop what still runs in them.
pub fn sandbox_namespaces(t: &Topology) -> Vec<PathBuf> {
    containerd::mounts_under(&t.dir)
        .into_iter()
        .filter(|m| m.fstype == "nsfs")
        .map(|Mount { path, .. }| path)
        .collect()
}

/// Unmounts everything under the lab's directory (sandboxes' namespaces and root filesystems
/// a stopped containerd left, the shared bind mount itself).
pub fn unmount(t: &Topology) -> anyhow::Result<usize> {
    Ok(containerd::unmount_under(&t.dir)?)
}

/// For `status`: whether the node's containerd answers the CRI, and its sandboxes; `None` for a
/// component that is no containerd.
pub async fn health(t: &Topology, component: &str) -> Option<Result<String, String>> {
    let node = t.node(containerd::node_of(component)?)?;
    let socket = containerd::instance(t, node).socket();
    let answer = tokio::time::timeout(Duration::from_secs(2), async {
        let client = CriClient::connect(&socket).await?;
        let version = client.version().await?;
        let sandboxes = client.list_pod_sandboxes().await?;
        Ok::<_, kube_ovn_lab::runtime::cri::CriError>(format!(
            "ready ({} {}, {} sandboxes)",
            version.runtime_name,
            version.runtime_version,
            sandboxes.len()
        ))
    })
    .await;
    Some(match answer {
        Ok(Ok(text)) => Ok(text),
        Ok(Err(e)) => Err(format!("not ready: {e}")),
        Err(_) => Err(format!(
            "not ready: the CRI at {} does not answer",
            socket.display()
        )),
    })
}
