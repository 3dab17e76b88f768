//! A kubelet stand-in for one node of the lab (a network namespace).
//!
//! - Registers its Node: labels (`kubernetes.io/hostname`, `kubernetes.io/os=linux`, and the
//!   configured ones), then status through the `status` subresource: InternalIP(s) and Hostname
//!   addresses, `Ready=True` and the pressure conditions, capacity and nodeInfo ([`node`]).
//!   Then heartbeats every [`HEARTBEAT`]: its Lease in `kube-node-lease` renewed and the Node's
//!   status posted again, so kube-controller-manager's node-lifecycle controller sees a live
//!   node and never taints or evicts it.
//! - Watches the pods bound to it (field selector `spec.nodeName`). For each pod that is not
//!   `hostNetwork`, a sandbox, made by the configured [`PodRuntime`]:
//!   - direct (the default, fast): a network namespace `<netns_prefix><hash>`, CNI ADD through
//!     the first conflist of `cni_conf_dir` run in the *node's* namespace as a container runtime
//!     runs it ([`crate::cni_runtime`]); containers of the image `kube-ovn-lab/netexec` are
//!     "run": the netexec server on each `containerPort`, in the pod's namespace, served from
//!     this process and answering with the pod's name ([`servers`]);
//!   - containerd: RunPodSandbox over its CRI (containerd runs the node's conflist), and a real
//!     container per netexec container in the sandbox ([`cri_pods`]).
//!
//!   Failures are retried with a backoff (each a Warning Event `FailedCreatePodSandBox`); then
//!   the pod's status: Running, `podIP(s)`, `hostIP(s)`, Ready ([`status`]). `hostNetwork` pods
//!   get the node's addresses and no sandbox; their netexec servers run in the node's namespace
//!   from this process with either runtime.
//! - When a pod goes, or is marked for deletion (then the kubelet deletes it with grace 0, as
//!   after its containers stopped: the API server keeps a bound pod until then): servers stopped, CNI DEL
//!   with the ADD result as `prevResult`, namespace removed, record removed ([`sandbox`]); or
//!   StopPodSandbox and RemovePodSandbox.
//! - Sandboxes are recorded in `sandbox_dir`, so a restarted kubelet tears down those of pods
//!   that went (or were replaced: another uid) while it was away, and adopts the others
//!   (restarting their servers). With containerd, what containerd lists is recorded first.
//!
//! Each pod has its own task (a span named after the pod) that reconciles what is (records,
//! servers) with what the pod asks, whenever the pod changes; pods are handled concurrently.

mod cri_pods;
mod node;
pub mod sandbox;
mod servers;
mod status;
mod worker;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use kube_ovn_dataplane::Netns;
use kube_ovn_support::Watch;
use kube_ovn_support::watch::Cache;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

pub use cri_pods::netexec_container;
pub use node::{HEARTBEAT, HostFacts, kubelet_version};
pub use sandbox::{NETNS_DIR, SandboxRecord, netns_name};
pub use servers::{NETEXEC_IMAGE, is_netexec};

use super::events::EventRecorder;
use crate::cni_runtime::Runtime;
use crate::runtime::cri::CriClient;
use cri_pods::CriPods;
use sandbox::SandboxDir;

/// How a kubelet makes its pods' sandboxes and containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PodRuntime {
    /// Network namespaces of ours, the CNI conflist run by us, netexec served from this process.
    #[default]
    Direct,
    /// containerd's CRI on `socket`: sandboxes and netexec containers are containerd's; the
    /// containers' logs go under `log_dir`.
    Containerd { socket: PathBuf, log_dir: PathBuf },
}

/// One node's kubelet.
#[derive(Debug, Clone)]
pub struct KubeletConfig {
    pub node_name: String,
    /// The node's network namespace file (`/run/netns/<node>`); CNI plugins run in it.
    pub node_netns: PathBuf,
    /// The node's InternalIP addresses (primary first).
    pub internal_ips: Vec<IpAddr>,
    /// Labels for the Node beyond the standard ones.
    pub labels: BTreeMap<String, String>,
    pub cni_conf_dir: PathBuf,
    pub cni_bin_dir: PathBuf,
    /// Pod network namespaces are named `<netns_prefix><10 hex>`.
    pub netns_prefix: String,
    /// One JSON record per pod sandbox (the node's records among others').
    pub sandbox_dir: PathBuf,
    pub runtime: PodRuntime,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubelet of node {node}: {field}: {why}")]
    Config {
        node: String,
        field: &'static str,
        why: String,
    },
    #[error("kubelet of node {node}: the node's network namespace: {source}")]
    NodeNetns {
        node: String,
        source: Box<kube_ovn_dataplane::Error>,
    },
    #[error("kubelet of node {node}: sandbox dir {}: {source}", dir.display())]
    SandboxDir {
        node: String,
        dir: PathBuf,
        source: std::io::Error,
    },
    /// A step for one pod failed (it is retried; this is what the log shows).
    #[error("pod {pod}: {step}: {source}")]
    Pod {
        pod: String,
        step: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl KubeletConfig {
    fn check(&self) -> Result<(), Error> {
        let invalid = |field, why: &str| {
            Err(Error::Config {
                node: self.node_name.clone(),
                field,
                why: why.to_owned(),
            })
        };
        if self.node_name.is_empty() {
            return invalid("node_name", "empty");
        }
        if self.internal_ips.is_empty() {
            return invalid("internal_ips", "at least one address is needed");
        }
        // Namespace names end up in paths and `ip netns` arguments.
        if self.netns_prefix.is_empty()
            || !self
                .netns_prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return invalid(
                "netns_prefix",
                "letters, digits, '-', '_' and '.' only, not empty",
            );
        }
        Ok(())
    }
}

/// What every pod task shares.
struct Shared {
    client: Client,
    config: KubeletConfig,
    node_netns: Netns,
    runtime: Runtime,
    /// Set when the pods are containerd's.
    cri: Option<CriPods>,
    sandboxes: SandboxDir,
    events: EventRecorder,
    /// The pods bound to this node, as last seen (the cache of [`supervise`]'s watch).
    pods: Cache<Pod>,
}

impl Shared {
    fn pod(&self, key: &str) -> Option<Arc<Pod>> {
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        self.pods.get(&ObjectRef::new(name).within(namespace))
    }
}

fn key_of(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

/// Runs the kubelet until dropped (or until its configuration proves unusable).
pub async fn run(client: Client, config: KubeletConfig) -> Result<(), Error> {
    config.check()?;
    let node_netns = Netns::open(&config.node_netns).map_err(|source| Error::NodeNetns {
        node: config.node_name.clone(),
        source: Box::new(source),
    })?;
    let sandboxes = SandboxDir::open(&config.sandbox_dir)
        .map_err(|source| Error::SandboxDir {
            node: config.node_name.clone(),
            dir: config.sandbox_dir.clone(),
            source,
        })?
        .of_node(&config.node_name);
    let cri = match &config.runtime {
        PodRuntime::Direct => None,
        PodRuntime::Containerd { socket, log_dir } => Some(CriPods {
            client: CriClient::connect_lazy(socket),
            node: config.node_name.clone(),
            log_dir: log_dir.clone(),
        }),
    };
    let span = tracing::info_span!("kubelet", node = %config.node_name);
    let selector = format!("spec.nodeName={}", config.node_name);
    let pods =
        Watch::new(Api::<Pod>::all(client.clone())).config(watcher::Config::default().fields(&selector));
    let shared = Arc::new(Shared {
        events: EventRecorder::new(client.clone(), "kubelet", Some(&config.node_name)),
        runtime: Runtime::new(&config.cni_conf_dir, &config.cni_bin_dir).in_netns(node_netns.clone()),
        cri,
        client,
        config,
        node_netns,
        sandboxes,
        pods: pods.cache(),
    });
    async move {
        register(&shared).await;
        let heartbeat = tokio::spawn(heartbeats(shared.clone()).in_current_span());
        // The heartbeats end with the kubelet (this future dropped or finished).
        let _heartbeat = AbortOnDrop(heartbeat);
        if let Some(cri) = &shared.cri {
            let found = cri_pods::adopt_all(cri, &shared.sandboxes).await;
            tracing::info!(sandboxes = found.len(), "containerd's sandboxes recorded");
        }
        supervise(shared, pods).await;
        Ok(())
    }
    .instrument(span)
    .await
}

/// Registers the Node, retrying until the API answers.
async fn register(shared: &Shared) {
    let mut delay = Duration::from_millis(200);
    loop {
        match node::register(&shared.client, &shared.config).await {
            Ok(()) => {
                tracing::info!("node registered");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %e, "registering the node failed; retrying");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(10));
            }
        }
    }
}

/// Renews the node's Lease and posts its status every [`HEARTBEAT`]; a failure is logged and
/// the next beat tries again (a kubelet keeps going while the API server is away).
async fn heartbeats(shared: Arc<Shared>) {
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        if let Err(e) = node::renew_lease(&shared.client, &shared.config.node_name).await {
            tracing::warn!(error = %e, "renewing the node's Lease failed");
        }
        if let Err(e) = node::register(&shared.client, &shared.config).await {
            tracing::warn!(error = %e, "posting the node's status failed");
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A pod task's handle: changes are announced by bumping `epoch`; dropping `tx` ends the task.
struct Handle {
    tx: watch::Sender<u64>,
    epoch: u64,
}

/// The pod tasks of one kubelet.
struct Workers {
    shared: Arc<Shared>,
    handles: HashMap<String, Handle>,
    tasks: JoinSet<()>,
    finished: mpsc::UnboundedSender<(String, u64)>,
}

impl Workers {
    /// Tells the pod's task to look again, starting one if there is none (or it died).
    fn notify(&mut self, key: &str) {
        if let Some(handle) = self.handles.get_mut(key) {
            handle.epoch += 1;
            if handle.tx.send(handle.epoch).is_ok() {
                return;
            }
            // Its task is gone (it panicked): start another, which reads the records again.
            self.handles.remove(key);
        }
        let (tx, rx) = watch::channel(0);
        let (namespace, name) = key.split_once('/').unwrap_or(("", key));
        let worker = worker::Worker::new(self.shared.clone(), namespace, name);
        let span = tracing::info_span!("pod", pod = %key);
        self.tasks
            .spawn(worker.run(rx, self.finished.clone()).instrument(span));
        self.handles.insert(key.to_owned(), Handle { tx, epoch: 0 });
    }

    /// A task found nothing left to do at `epoch`: it ends unless it was told of a change since.
    fn finished(&mut self, key: &str, epoch: u64) {
        if self.handles.get(key).is_some_and(|h| h.epoch == epoch) {
            self.handles.remove(key);
        }
    }
}

/// Watches the node's pods and tells each pod's task of its changes (deletions included), and,
/// once the first list is in, of the sandboxes recorded before a restart.
async fn supervise(shared: Arc<Shared>, pods: Watch<Pod>) {
    let every = shared.clone();
    let mut changes = pods
        .subscribe()
        .map(
            |c| c.new.as_ref().or(c.old.as_ref()).map(|pod| key_of(pod)),
            // Changes were dropped: every pod and every sandbox looks again.
            move || {
                let mut keys: Vec<String> = every.pods.state().iter().map(|p| key_of(p)).collect();
                keys.extend(every.sandboxes.load_all().iter().map(SandboxRecord::key));
                keys
            },
        )
        .boxed();
    // The watch ends with the kubelet (this future dropped or finished).
    let _pods = pods.start();
    let (finished_tx, mut finished_rx) = mpsc::unbounded_channel();
    let mut workers = Workers {
        shared: shared.clone(),
        handles: HashMap::new(),
        tasks: JoinSet::new(),
        finished: finished_tx,
    };
    // Until the first list is done nothing is known.
    let mut synced = false;
    loop {
        tokio::select! {
            key = changes.next() => {
                let Some(key) = key else { return };
                workers.notify(&key);
            }
            listed = shared.pods.synced(), if !synced => {
                if listed.is_err() {
                    return;
                }
                synced = true;
                // Sandboxes from before a restart: their pods may be gone or new.
                let mut keys: Vec<String> = shared.sandboxes.load_all().iter().map(SandboxRecord::key).collect();
                keys.sort();
                keys.dedup();
                for key in keys {
                    workers.notify(&key);
                }
            }
            Some((key, epoch)) = finished_rx.recv() => workers.finished(&key, epoch),
            Some(joined) = workers.tasks.join_next(), if !workers.tasks.is_empty() => {
                if let Err(e) = joined
                    && e.is_panic()
                {
                    tracing::error!(error = %e, "a pod task panicked; the next change of the pod starts another");
                }
            }
        }
    }
}

/// The lead spawns the kubelets with `tokio::spawn`: the future must be `Send`.
#[allow(dead_code)]
fn run_is_send(client: Client, config: KubeletConfig) -> impl Send {
    run(client, config)
}
