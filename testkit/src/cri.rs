//! A kubelet's side of the CRI (Container Runtime Interface, `runtime.v1`): the pod sandbox calls
//! a kubelet makes, over the runtime's unix socket, with the sandbox config a kubelet builds for
//! a pod. The messages and the gRPC client are `k8s-cri`'s, generated from the CRI protobufs.
//!
//! Only what a pod's network needs is here: RunPodSandbox, PodSandboxStatus, StopPodSandbox,
//! RemovePodSandbox, ListPodSandbox and Version. Errors keep the runtime's `tonic::Status`, so a
//! test reads the message a kubelet would log (the CNI plugin's error is in it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, ListPodSandboxRequest, NamespaceMode,
    NamespaceOption, PodSandbox, PodSandboxConfig, PodSandboxMetadata, PodSandboxStatusRequest,
    PodSandboxStatusResponse, RemovePodSandboxRequest, RunPodSandboxRequest, StopPodSandboxRequest,
    VersionRequest, VersionResponse,
};
use tonic::transport::{Channel, Endpoint, Uri};

/// The CRI v1 messages, for callers that read more of an answer than the helpers here do.
pub use k8s_cri::v1 as api;

/// How long one CRI call may take: above the node daemon's own bounds on ADD (address and
/// `ovn-installed` waits), so it only fires when something hangs.
pub const CRI_CALL_TIMEOUT: Duration = Duration::from_mins(3);

/// The pod a sandbox is for, as the kubelet names it to the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// The Pod object's `metadata.uid`.
    pub uid: String,
    /// How many sandboxes the kubelet made for this pod before (0 for the first).
    pub attempt: u32,
}

impl PodRef {
    /// A pod's first sandbox.
    pub fn new(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            attempt: 0,
        }
    }

    /// The sandbox config a kubelet sends for this pod: metadata, hostname, the labels and
    /// annotation the kubelet sets on every sandbox, and the Linux security context of an
    /// ordinary (not host-network) pod: network and IPC namespaces per pod, PID per container.
    /// No cgroup parent: the runtime's default, so no kubepods hierarchy must exist.
    pub fn sandbox_config(&self) -> PodSandboxConfig {
        let labels = HashMap::from([
            ("io.kubernetes.pod.name".to_owned(), self.name.clone()),
            ("io.kubernetes.pod.namespace".to_owned(), self.namespace.clone()),
            ("io.kubernetes.pod.uid".to_owned(), self.uid.clone()),
        ]);
        let annotations = HashMap::from([("kubernetes.io/config.source".to_owned(), "api".to_owned())]);
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: self.attempt,
            }),
            hostname: self.name.clone(),
            labels,
            annotations,
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(NamespaceOption {
                        network: NamespaceMode::Pod.into(),
                        pid: NamespaceMode::Container.into(),
                        ipc: NamespaceMode::Pod.into(),
                        ..NamespaceOption::default()
                    }),
                    ..LinuxSandboxSecurityContext::default()
                }),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        }
    }
}

/// A CRI runtime service client on a unix socket.
#[derive(Clone)]
pub struct CriClient {
    runtime: RuntimeServiceClient<Channel>,
}

impl CriClient {
    /// Connects to the runtime listening at `socket`.
    pub async fn connect(socket: &Path) -> anyhow::Result<Self> {
        let path = socket.to_owned();
        // The URI is required by the API and unused: every connection goes to the socket.
        let channel =
            Endpoint::try_from("http://[::1]:0")?
                .timeout(CRI_CALL_TIMEOUT)
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }))
                .await
                .with_context(|| format!("connect to the CRI socket {}", socket.display()))?;
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel),
        })
    }

    /// The runtime's name and version, and the CRI version it speaks.
    pub async fn version(&self) -> Result<VersionResponse, tonic::Status> {
        let request = VersionRequest { version: "v1".into() };
        Ok(self.runtime.clone().version(request).await?.into_inner())
    }

    /// RunPodSandbox for `pod`, as the kubelet calls it; the sandbox ID.
    pub async fn run_pod_sandbox(&self, pod: &PodRef) -> Result<String, tonic::Status> {
        let request = RunPodSandboxRequest {
            config: Some(pod.sandbox_config()),
            runtime_handler: String::new(),
        };
        Ok(self
            .runtime
            .clone()
            .run_pod_sandbox(request)
            .await?
            .into_inner()
            .pod_sandbox_id)
    }

    /// PodSandboxStatus, verbose (the runtime's `info` map, with the sandbox's spec, included).
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatusResponse, tonic::Status> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: true,
        };
        Ok(self
            .runtime
            .clone()
            .pod_sandbox_status(request)
            .await?
            .into_inner())
    }

    /// StopPodSandbox: the runtime stops the sandbox and tears its network down (CNI DEL).
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        self.runtime.clone().stop_pod_sandbox(request).await?;
        Ok(())
    }

    /// RemovePodSandbox.
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), tonic::Status> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        self.runtime.clone().remove_pod_sandbox(request).await?;
        Ok(())
    }

    /// Every sandbox the runtime knows, ready or not.
    pub async fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, tonic::Status> {
        let request = ListPodSandboxRequest { filter: None };
        Ok(self
            .runtime
            .clone()
            .list_pod_sandbox(request)
            .await?
            .into_inner()
            .items)
    }

    /// Stop, then remove, as the kubelet does when a pod goes.
    pub async fn stop_and_remove(&self, id: &str) -> Result<(), tonic::Status> {
        self.stop_pod_sandbox(id).await?;
        self.remove_pod_sandbox(id).await
    }
}

/// The sandbox's addresses as the runtime reports them: `network.ip`, then `additional_ips`.
pub fn sandbox_ips(status: &PodSandboxStatusResponse) -> Vec<String> {
    let Some(network) = status.status.as_ref().and_then(|s| s.network.as_ref()) else {
        return Vec::new();
    };
    std::iter::once(network.ip.clone())
        .chain(network.additional_ips.iter().map(|ip| ip.ip.clone()))
        .filter(|ip| !ip.is_empty())
        .collect()
}

/// The sandbox's network namespace file, from a verbose status: containerd puts its view of the
/// sandbox (with the OCI runtime spec) as JSON under `info`, and the spec's network namespace
/// entry has the path.
pub fn sandbox_netns(status: &PodSandboxStatusResponse) -> anyhow::Result<PathBuf> {
    let info = status
        .info
        .get("info")
        .context("the runtime's verbose status has no \"info\"")?;
    let info: serde_json::Value = serde_json::from_str(info).context("verbose status info is not JSON")?;
    let namespaces = info["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .context("verbose status info has no runtimeSpec.linux.namespaces")?;
    namespaces
        .iter()
        .find(|ns| ns["type"] == "network")
        .and_then(|ns| ns["path"].as_str())
        .map(PathBuf::from)
        .context("the sandbox's runtime spec names no network namespace path")
}
