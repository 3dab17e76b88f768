//! A kubelet's side of the CRI (Container Runtime Interface, `runtime.v1`): the calls a kubelet
//! makes over the runtime's unix socket for a pod's sandbox and containers, with the configs a
//! kubelet builds. The messages and the gRPC client are `k8s-cri`'s, generated from the CRI
//! protobufs.
//!
//! Errors keep the runtime's `tonic::Status` ([`CriError::status`]), so a caller reads the message
//! a kubelet would log (a CNI plugin's error is in it).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    Container, ContainerConfig, ContainerFilter, ContainerMetadata, CreateContainerRequest, ImageSpec,
    KeyValue, LinuxContainerConfig, LinuxContainerSecurityContext, LinuxPodSandboxConfig,
    LinuxSandboxSecurityContext, ListContainersRequest, ListPodSandboxRequest, NamespaceMode,
    NamespaceOption, PodSandbox, PodSandboxConfig, PodSandboxFilter, PodSandboxMetadata,
    PodSandboxStatusRequest, PodSandboxStatusResponse, RemoveContainerRequest, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopContainerRequest, StopPodSandboxRequest, VersionRequest,
    VersionResponse,
};
use tonic::transport::{Channel, Endpoint, Uri};

/// The CRI v1 messages, for callers that read more of an answer than the helpers here do.
pub use k8s_cri::v1 as api;

/// How long one CRI call may take: above the node daemon's own bounds on ADD (address and
/// `ovn-installed` waits), so it only fires when something hangs.
pub const CRI_CALL_TIMEOUT: Duration = Duration::from_mins(3);

/// The labels a kubelet puts on every sandbox and container (and reads back after a restart).
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("connecting to the CRI socket {}: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        source: tonic::transport::Error,
    },
    #[error("CRI {call}: {}", status.message())]
    Call {
        call: &'static str,
        status: Box<tonic::Status>,
    },
    #[error("sandbox {id}: {reason}")]
    Status { id: String, reason: String },
}

impl CriError {
    /// The runtime's answer, when the call reached it.
    pub fn status(&self) -> Option<&tonic::Status> {
        match self {
            Self::Call { status, .. } => Some(status),
            _ => None,
        }
    }

    /// The runtime does not know the sandbox or container (already removed).
    pub fn is_not_found(&self) -> bool {
        self.status().is_some_and(|s| s.code() == tonic::Code::NotFound)
    }
}

fn call(call: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |status| CriError::Call {
        call,
        status: Box::new(status),
    }
}

/// The pod a sandbox is for, as the kubelet describes it to the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    /// Pod namespace.
    pub namespace: String,
    /// Pod name (also the sandbox's hostname).
    pub name: String,
    /// The Pod object's `metadata.uid`.
    pub uid: String,
    /// How many sandboxes the kubelet made for this pod before (0 for the first).
    pub attempt: u32,
    /// The pod's labels (the kubelet adds its `io.kubernetes.pod.*` ones).
    pub labels: BTreeMap<String, String>,
    /// Where the runtime writes the containers' logs (`log_path`s are relative to it); none:
    /// containers' output is dropped.
    pub log_directory: Option<PathBuf>,
}

impl PodRef {
    /// A pod's first sandbox, with no labels of its own and no logs.
    pub fn new(namespace: &str, name: &str, uid: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            attempt: 0,
            labels: BTreeMap::new(),
            log_directory: None,
        }
    }

    /// The kubelet's labels identifying the pod.
    fn kubelet_labels(&self) -> HashMap<String, String> {
        HashMap::from([
            (LABEL_POD_NAME.to_owned(), self.name.clone()),
            (LABEL_POD_NAMESPACE.to_owned(), self.namespace.clone()),
            (LABEL_POD_UID.to_owned(), self.uid.clone()),
        ])
    }

    /// The pod's namespaces as an ordinary (not host-network) pod has them: network and IPC per
    /// pod, PID per container.
    fn namespace_options() -> NamespaceOption {
        NamespaceOption {
            network: NamespaceMode::Pod.into(),
            pid: NamespaceMode::Container.into(),
            ipc: NamespaceMode::Pod.into(),
            ..NamespaceOption::default()
        }
    }

    /// The sandbox config a kubelet sends for this pod: metadata, hostname, the pod's labels with
    /// the kubelet's, the annotation the kubelet sets on every sandbox, and the Linux security
    /// context of an ordinary pod. No cgroup parent: the runtime's default, so no kubepods
    /// hierarchy must exist.
    pub fn sandbox_config(&self) -> PodSandboxConfig {
        let mut labels: HashMap<String, String> = self.labels.clone().into_iter().collect();
        labels.extend(self.kubelet_labels());
        let annotations = HashMap::from([("kubernetes.io/config.source".to_owned(), "api".to_owned())]);
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: self.attempt,
            }),
            hostname: self.name.clone(),
            log_directory: self
                .log_directory
                .as_ref()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
            labels,
            annotations,
            linux: Some(LinuxPodSandboxConfig {
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(Self::namespace_options()),
                    ..LinuxSandboxSecurityContext::default()
                }),
                ..LinuxPodSandboxConfig::default()
            }),
            ..PodSandboxConfig::default()
        }
    }
}

/// A container of a pod, as the kubelet asks the runtime to create it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerSpec {
    /// The container's name in the pod spec.
    pub name: String,
    /// How many times the kubelet created it before in this sandbox.
    pub attempt: u32,
    /// An image the runtime has (there is no pull here).
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl ContainerSpec {
    /// The container config a kubelet sends: metadata, image, command, the kubelet's labels, a
    /// log file `<name>/<attempt>.log` in the sandbox's log directory, and the pod's namespaces.
    pub fn config(&self, pod: &PodRef) -> ContainerConfig {
        let mut labels = pod.kubelet_labels();
        labels.insert(LABEL_CONTAINER_NAME.to_owned(), self.name.clone());
        ContainerConfig {
            metadata: Some(ContainerMetadata {
                name: self.name.clone(),
                attempt: self.attempt,
            }),
            image: Some(ImageSpec {
                image: self.image.clone(),
                ..ImageSpec::default()
            }),
            command: self.command.clone(),
            args: self.args.clone(),
            envs: self
                .env
                .iter()
                .map(|(key, value)| KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            labels,
            log_path: if pod.log_directory.is_some() {
                format!("{}/{}.log", self.name, self.attempt)
            } else {
                String::new()
            },
            linux: Some(LinuxContainerConfig {
                security_context: Some(LinuxContainerSecurityContext {
                    namespace_options: Some(PodRef::namespace_options()),
                    ..LinuxContainerSecurityContext::default()
                }),
                ..LinuxContainerConfig::default()
            }),
            ..ContainerConfig::default()
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
    pub async fn connect(socket: &Path) -> Result<Self, CriError> {
        let path = socket.to_owned();
        let connect_err = |source| CriError::Connect {
            socket: socket.to_owned(),
            source,
        };
        // The URI is required by the API and unused: every connection goes to the socket.
        let channel =
            Endpoint::from_static("http://[::1]:0")
                .timeout(CRI_CALL_TIMEOUT)
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }))
                .await
                .map_err(connect_err)?;
        Ok(Self {
            runtime: RuntimeServiceClient::new(channel),
        })
    }

    /// A client on `socket` that connects on its first call, and again after the runtime
    /// restarts: for a kubelet that may start before its runtime.
    pub fn connect_lazy(socket: &Path) -> Self {
        let path = socket.to_owned();
        let channel =
            Endpoint::from_static("http://[::1]:0")
                .timeout(CRI_CALL_TIMEOUT)
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
                    }
                }));
        Self {
            runtime: RuntimeServiceClient::new(channel),
        }
    }

    /// The runtime's name and version, and the CRI version it speaks.
    pub async fn version(&self) -> Result<VersionResponse, CriError> {
        let request = VersionRequest { version: "v1".into() };
        let answer = self.runtime.clone().version(request).await;
        Ok(answer.map_err(call("Version"))?.into_inner())
    }

    /// RunPodSandbox for `pod`, as the kubelet calls it; the sandbox ID.
    pub async fn run_pod_sandbox(&self, pod: &PodRef) -> Result<String, CriError> {
        let request = RunPodSandboxRequest {
            config: Some(pod.sandbox_config()),
            runtime_handler: String::new(),
        };
        let answer = self.runtime.clone().run_pod_sandbox(request).await;
        Ok(answer.map_err(call("RunPodSandbox"))?.into_inner().pod_sandbox_id)
    }

    /// PodSandboxStatus, verbose (the runtime's `info` map, with the sandbox's spec, included).
    pub async fn pod_sandbox_status(&self, id: &str) -> Result<PodSandboxStatusResponse, CriError> {
        let request = PodSandboxStatusRequest {
            pod_sandbox_id: id.to_owned(),
            verbose: true,
        };
        let answer = self.runtime.clone().pod_sandbox_status(request).await;
        Ok(answer.map_err(call("PodSandboxStatus"))?.into_inner())
    }

    /// StopPodSandbox: the runtime stops the sandbox's containers and tears its network down
    /// (CNI DEL).
    pub async fn stop_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = StopPodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        let answer = self.runtime.clone().stop_pod_sandbox(request).await;
        answer.map_err(call("StopPodSandbox")).map(drop)
    }

    /// RemovePodSandbox (its containers go with it).
    pub async fn remove_pod_sandbox(&self, id: &str) -> Result<(), CriError> {
        let request = RemovePodSandboxRequest {
            pod_sandbox_id: id.to_owned(),
        };
        let answer = self.runtime.clone().remove_pod_sandbox(request).await;
        answer.map_err(call("RemovePodSandbox")).map(drop)
    }

    /// Every sandbox the runtime knows, ready or not.
    pub async fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, CriError> {
        self.list_pod_sandboxes_labelled(&[]).await
    }

    /// The sandboxes carrying every one of `labels` (e.g. a pod's uid).
    pub async fn list_pod_sandboxes_labelled(
        &self,
        labels: &[(&str, &str)],
    ) -> Result<Vec<PodSandbox>, CriError> {
        let filter = (!labels.is_empty()).then(|| PodSandboxFilter {
            label_selector: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..PodSandboxFilter::default()
        });
        let answer = self
            .runtime
            .clone()
            .list_pod_sandbox(ListPodSandboxRequest { filter })
            .await;
        Ok(answer.map_err(call("ListPodSandbox"))?.into_inner().items)
    }

    /// Stop, then remove, as the kubelet does when a pod goes. A sandbox the runtime no longer
    /// knows counts as removed.
    pub async fn stop_and_remove(&self, id: &str) -> Result<(), CriError> {
        match self.stop_pod_sandbox(id).await {
            Err(e) if e.is_not_found() => return Ok(()),
            other => other?,
        }
        match self.remove_pod_sandbox(id).await {
            Err(e) if e.is_not_found() => Ok(()),
            other => other,
        }
    }

    /// CreateContainer in sandbox `sandbox_id` of `pod`; the container ID.
    pub async fn create_container(
        &self,
        sandbox_id: &str,
        pod: &PodRef,
        container: &ContainerSpec,
    ) -> Result<String, CriError> {
        let request = CreateContainerRequest {
            pod_sandbox_id: sandbox_id.to_owned(),
            config: Some(container.config(pod)),
            sandbox_config: Some(pod.sandbox_config()),
        };
        let answer = self.runtime.clone().create_container(request).await;
        Ok(answer.map_err(call("CreateContainer"))?.into_inner().container_id)
    }

    pub async fn start_container(&self, id: &str) -> Result<(), CriError> {
        let request = StartContainerRequest {
            container_id: id.to_owned(),
        };
        let answer = self.runtime.clone().start_container(request).await;
        answer.map_err(call("StartContainer")).map(drop)
    }

    /// StopContainer with `grace` for SIGTERM before SIGKILL.
    pub async fn stop_container(&self, id: &str, grace: Duration) -> Result<(), CriError> {
        let request = StopContainerRequest {
            container_id: id.to_owned(),
            timeout: i64::try_from(grace.as_secs()).unwrap_or(i64::MAX),
        };
        let answer = self.runtime.clone().stop_container(request).await;
        answer.map_err(call("StopContainer")).map(drop)
    }

    pub async fn remove_container(&self, id: &str) -> Result<(), CriError> {
        let request = RemoveContainerRequest {
            container_id: id.to_owned(),
        };
        let answer = self.runtime.clone().remove_container(request).await;
        answer.map_err(call("RemoveContainer")).map(drop)
    }

    /// The containers of sandbox `sandbox_id`, in any state.
    pub async fn list_containers(&self, sandbox_id: &str) -> Result<Vec<Container>, CriError> {
        let filter = ContainerFilter {
            pod_sandbox_id: sandbox_id.to_owned(),
            ..ContainerFilter::default()
        };
        let request = ListContainersRequest { filter: Some(filter) };
        let answer = self.runtime.clone().list_containers(request).await;
        Ok(answer.map_err(call("ListContainers"))?.into_inner().containers)
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

/// [`sandbox_ips`], parsed; an address the runtime reports that is none is an error.
pub fn sandbox_addresses(status: &PodSandboxStatusResponse) -> Result<Vec<IpAddr>, CriError> {
    sandbox_ips(status)
        .iter()
        .map(|ip| {
            ip.parse().map_err(|_| CriError::Status {
                id: sandbox_id(status),
                reason: format!("the runtime reports {ip:?} as an address"),
            })
        })
        .collect()
}

fn sandbox_id(status: &PodSandboxStatusResponse) -> String {
    status.status.as_ref().map(|s| s.id.clone()).unwrap_or_default()
}

/// The sandbox's network namespace file, from a verbose status: containerd puts its view of the
/// sandbox (with the OCI runtime spec) as JSON under `info`, and the spec's network namespace
/// entry has the path.
pub fn sandbox_netns(status: &PodSandboxStatusResponse) -> Result<PathBuf, CriError> {
    let fail = |reason: &str| CriError::Status {
        id: sandbox_id(status),
        reason: reason.to_owned(),
    };
    let info = status
        .info
        .get("info")
        .ok_or_else(|| fail("the runtime's verbose status has no \"info\""))?;
    let info: serde_json::Value =
        serde_json::from_str(info).map_err(|_| fail("the verbose status's info is not JSON"))?;
    let namespaces = info["runtimeSpec"]["linux"]["namespaces"]
        .as_array()
        .ok_or_else(|| fail("the verbose status's info has no runtimeSpec.linux.namespaces"))?;
    namespaces
        .iter()
        .find(|ns| ns["type"] == "network")
        .and_then(|ns| ns["path"].as_str())
        .map(PathBuf::from)
        .ok_or_else(|| fail("the sandbox's runtime spec names no network namespace path"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_and_container_configs_carry_the_pod() {
        let mut pod = PodRef::new("demo", "web-1", "uid-1");
        pod.labels.insert("app".into(), "web".into());
        pod.labels.insert(LABEL_POD_UID.into(), "spoofed".into());
        pod.log_directory = Some("/logs/demo_web-1_uid-1".into());
        let sandbox = pod.sandbox_config();
        let meta = sandbox.metadata.as_ref().unwrap();
        assert_eq!(
            (meta.namespace.as_str(), meta.name.as_str(), meta.uid.as_str()),
            ("demo", "web-1", "uid-1")
        );
        assert_eq!(sandbox.hostname, "web-1");
        assert_eq!(sandbox.labels["app"], "web");
        assert_eq!(sandbox.labels[LABEL_POD_UID], "uid-1", "the kubelet's labels win");
        assert_eq!(sandbox.log_directory, "/logs/demo_web-1_uid-1");
        let container = ContainerSpec {
            name: "server".into(),
            attempt: 2,
            image: "localhost/x:1".into(),
            command: vec!["/x".into()],
            args: vec!["a".into()],
            env: vec![("K".into(), "V".into())],
        };
        let config = container.config(&pod);
        assert_eq!(config.log_path, "server/2.log");
        assert_eq!(config.labels[LABEL_CONTAINER_NAME], "server");
        assert_eq!(config.labels[LABEL_POD_NAME], "web-1");
        assert_eq!(config.envs[0].key, "K");
        let without_logs = container.config(&PodRef::new("demo", "web-1", "uid-1"));
        assert_eq!(without_logs.log_path, "");
    }

    #[test]
    fn the_netns_path_comes_from_the_verbose_status() {
        let info = serde_json::json!({"runtimeSpec": {"linux": {"namespaces": [
            {"type": "pid"}, {"type": "network", "path": "/s/netns/cni-1"}]}}});
        let mut status = PodSandboxStatusResponse::default();
        status.info.insert("info".into(), info.to_string());
        assert_eq!(sandbox_netns(&status).unwrap(), PathBuf::from("/s/netns/cni-1"));
        status.info.clear();
        assert!(
            sandbox_netns(&status)
                .unwrap_err()
                .to_string()
                .contains("no \"info\"")
        );
    }
}
