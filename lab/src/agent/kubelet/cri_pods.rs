//! Pods through containerd's CRI, as a kubelet makes them: RunPodSandbox with the pod's
//! metadata, labels and hostname (containerd runs the node's CNI conflist), the addresses and
//! network namespace from PodSandboxStatus, then a container per `kube-ovn-lab/netexec`
//! container of the pod (the image built from this binary, serving the container's ports with
//! the pod's name); StopPodSandbox and RemovePodSandbox when the pod goes.
//!
//! containerd is the source of truth for what exists: a sandbox for the pod's uid that an
//! earlier attempt made (its answer lost to a crash or timeout) is adopted instead of making a
//! second, and a restarted kubelet records every ready sandbox containerd lists ([`adopt_all`]),
//! so the pod tasks tear down those whose pods went and keep the others.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube::ResourceExt;

use super::sandbox::{CriSandbox, SandboxDir, SandboxError, SandboxRecord};
use super::servers::{ServedPort, container_ports, is_netexec};
use crate::runtime::cri::{
    self, ContainerSpec, CriClient, CriError, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID, PodRef,
    api::{ContainerState, PodSandboxState},
};
use crate::runtime::images::{NETEXEC_BINARY, NETEXEC_IMAGE};

/// How long a netexec container gets between SIGTERM and SIGKILL when it is replaced.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// One node's containerd, as its kubelet uses it.
#[derive(Clone)]
pub(super) struct CriPods {
    pub client: CriClient,
    pub node: String,
    /// Pods' container logs go to `<log_dir>/<namespace>_<name>_<uid>/<container>/<attempt>.log`,
    /// as a kubelet lays out `/var/log/pods`.
    pub log_dir: PathBuf,
}

impl CriPods {
    fn pod_ref(&self, pod: &Pod) -> PodRef {
        let (namespace, name, uid) = (
            pod.namespace().unwrap_or_default(),
            pod.name_any(),
            pod.uid().unwrap_or_default(),
        );
        let mut pod_ref = PodRef::new(&namespace, &name, &uid);
        pod_ref.labels = pod.labels().clone();
        pod_ref.log_directory = Some(self.log_dir.join(format!("{namespace}_{name}_{uid}")));
        pod_ref
    }

    fn record(
        &self,
        pod: &PodRef,
        id: &str,
        status: &cri::api::PodSandboxStatusResponse,
    ) -> Result<SandboxRecord, CriError> {
        let found = CriSandbox {
            netns_path: cri::sandbox_netns(status)?,
            ips: cri::sandbox_addresses(status)?,
        };
        Ok(SandboxRecord::of_cri(
            &self.node,
            &pod.namespace,
            &pod.name,
            &pod.uid,
            id,
            found,
        ))
    }

    /// The pod's sandbox: a ready one containerd has for its uid, else a new one; recorded.
    /// Sandboxes of the uid that are not ready (a failed attempt) are removed first.
    pub async fn set_up(&self, dir: &SandboxDir, pod: &Pod) -> Result<SandboxRecord, SandboxError> {
        let mut pod_ref = self.pod_ref(pod);
        let existing = self
            .client
            .list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &pod_ref.uid)])
            .await?;
        let mut adopted = None;
        for sandbox in &existing {
            let attempt = sandbox.metadata.as_ref().map_or(0, |m| m.attempt);
            pod_ref.attempt = pod_ref.attempt.max(attempt + 1);
            if adopted.is_none() && sandbox.state == i32::from(PodSandboxState::SandboxReady) {
                tracing::info!(id = %sandbox.id, "adopting the pod's ready sandbox");
                adopted = Some(sandbox.id.clone());
            } else {
                tracing::info!(id = %sandbox.id, "removing a sandbox of an earlier attempt");
                self.client.stop_and_remove(&sandbox.id).await?;
            }
        }
        if let Some(dir) = &pod_ref.log_directory {
            std::fs::create_dir_all(dir).map_err(|source| SandboxError::Logs {
                dir: dir.display().to_string(),
                source,
            })?;
        }
        let id = match adopted {
            Some(id) => id,
            None => self.client.run_pod_sandbox(&pod_ref).await?,
        };
        let status = self.client.pod_sandbox_status(&id).await?;
        let record = self.record(&pod_ref, &id, &status)?;
        dir.write(&record).map_err(|source| SandboxError::Record {
            dir: dir.path().display().to_string(),
            source,
        })?;
        Ok(record)
    }

    /// StopPodSandbox (CNI DEL, containers stopped), RemovePodSandbox, the pod's logs, the
    /// record, in that order, so a failure leaves the record for the next attempt.
    pub async fn tear_down(&self, dir: &SandboxDir, record: &SandboxRecord) -> Result<(), SandboxError> {
        self.client.stop_and_remove(&record.container_id).await?;
        let logs = self
            .log_dir
            .join(format!("{}_{}_{}", record.namespace, record.name, record.uid));
        match std::fs::remove_dir_all(&logs) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(SandboxError::Logs {
                    dir: logs.display().to_string(),
                    source: e,
                });
            }
            _ => {}
        }
        dir.remove(record).map_err(|source| SandboxError::Record {
            dir: dir.path().display().to_string(),
            source,
        })
    }

    /// A running container for each netexec container of the pod, in its sandbox: one running
    /// already is kept, one that exited (or never started) is replaced by the next attempt. The
    /// container IDs (`containerd://…`) by container name.
    pub async fn ensure_containers(
        &self,
        record: &SandboxRecord,
        pod: &Pod,
    ) -> Result<BTreeMap<String, String>, SandboxError> {
        let pod_ref = self.pod_ref(pod);
        let existing = self.client.list_containers(&record.container_id).await?;
        let mut ids = BTreeMap::new();
        let wanted = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .filter(|c| c.image.as_deref().is_some_and(is_netexec));
        for container in wanted {
            let mine: Vec<_> = existing
                .iter()
                .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == container.name))
                .collect();
            if let Some(running) = mine
                .iter()
                .find(|c| c.state == i32::from(ContainerState::ContainerRunning))
            {
                ids.insert(container.name.clone(), format!("containerd://{}", running.id));
                continue;
            }
            let mut attempt = 0;
            for old in &mine {
                attempt = attempt.max(old.metadata.as_ref().map_or(0, |m| m.attempt) + 1);
                tracing::info!(container = %container.name, id = %old.id, "replacing a container that is not running");
                self.client.stop_container(&old.id, STOP_GRACE).await.ok();
                self.client.remove_container(&old.id).await?;
            }
            let spec = netexec_container(container, &pod_ref.name, attempt);
            if let Some(dir) = &pod_ref.log_directory {
                let dir = dir.join(&container.name);
                std::fs::create_dir_all(&dir).map_err(|source| SandboxError::Logs {
                    dir: dir.display().to_string(),
                    source,
                })?;
            }
            let id = self
                .client
                .create_container(&record.container_id, &pod_ref, &spec)
                .await?;
            self.client.start_container(&id).await?;
            tracing::info!(container = %container.name, %id, args = ?spec.args, "netexec container started");
            ids.insert(container.name.clone(), format!("containerd://{id}"));
        }
        Ok(ids)
    }
}

/// The netexec container for `container` of pod `pod_name`: the server on the container's
/// ports (TCP: HTTP, UDP: UDP, as [`container_ports`] says), answering with the pod's name.
pub fn netexec_container(container: &Container, pod_name: &str, attempt: u32) -> ContainerSpec {
    let (ports, problems) = container_ports(container);
    for problem in &problems {
        tracing::warn!(%problem, "port not served");
    }
    let join = |want_tcp: bool| {
        ports
            .iter()
            .filter_map(|p| match (p, want_tcp) {
                (ServedPort::Tcp(port), true) | (ServedPort::Udp(port), false) => Some(port.to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut args = vec!["netexec".to_owned(), format!("--hostname={pod_name}")];
    let (tcp, udp) = (join(true), join(false));
    if !tcp.is_empty() {
        args.push(format!("--http-port={tcp}"));
    }
    if !udp.is_empty() {
        args.push(format!("--udp-port={udp}"));
    }
    ContainerSpec {
        name: container.name.clone(),
        attempt,
        image: NETEXEC_IMAGE.to_owned(),
        command: vec![NETEXEC_BINARY.to_owned()],
        args,
        env: Vec::new(),
    }
}

/// Waits until containerd answers (a kubelet waits for its runtime the same way), then records
/// every ready sandbox it has that no record names, and removes the ones that are not ready.
/// The keys (`namespace/name`) of the pods whose sandboxes it found.
pub(super) async fn adopt_all(cri: &CriPods, dir: &SandboxDir) -> Vec<String> {
    let mut delay = Duration::from_millis(100);
    loop {
        match try_adopt_all(cri, dir).await {
            Ok(keys) => return keys,
            Err(e) => {
                tracing::warn!(error = %e, "containerd is not ready yet; waiting");
                tokio::time::sleep(delay).await;
                // Short: `up` starts containerd after the agent, and pods wait for this.
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
}

async fn try_adopt_all(cri: &CriPods, dir: &SandboxDir) -> Result<Vec<String>, SandboxError> {
    let version = cri.client.version().await?;
    tracing::info!(runtime = %version.runtime_name, version = %version.runtime_version, "container runtime ready");
    let recorded: Vec<String> = dir.load_all().into_iter().map(|r| r.container_id).collect();
    let mut keys = Vec::new();
    for sandbox in cri.client.list_pod_sandboxes().await? {
        let label = |k: &str| sandbox.labels.get(k).cloned().unwrap_or_default();
        let pod = PodRef::new(
            &label(LABEL_POD_NAMESPACE),
            &label(LABEL_POD_NAME),
            &label(LABEL_POD_UID),
        );
        if sandbox.state != i32::from(PodSandboxState::SandboxReady) {
            tracing::info!(id = %sandbox.id, pod = %format!("{}/{}", pod.namespace, pod.name), "removing a sandbox that is not ready");
            cri.client.stop_and_remove(&sandbox.id).await?;
            continue;
        }
        keys.push(format!("{}/{}", pod.namespace, pod.name));
        if recorded.contains(&sandbox.id) {
            continue;
        }
        let status = cri.client.pod_sandbox_status(&sandbox.id).await?;
        let record = cri.record(&pod, &sandbox.id, &status)?;
        tracing::info!(id = %sandbox.id, pod = %record.key(), "recording a sandbox containerd has");
        dir.write(&record).map_err(|source| SandboxError::Record {
            dir: dir.path().display().to_string(),
            source,
        })?;
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_netexec_container_serves_its_own_ports_as_the_pod() {
        let container: Container = serde_json::from_value(json!({"name": "server", "image": "kube-ovn-lab/netexec:1",
            "ports": [{"containerPort": 8080}, {"containerPort": 8081}, {"containerPort": 5353, "protocol": "UDP"}]}))
        .unwrap();
        let spec = netexec_container(&container, "web-1", 3);
        assert_eq!(spec.image, NETEXEC_IMAGE);
        assert_eq!(spec.command, [NETEXEC_BINARY]);
        assert_eq!(
            spec.args,
            [
                "netexec",
                "--hostname=web-1",
                "--http-port=8080,8081",
                "--udp-port=5353"
            ]
        );
        assert_eq!((spec.name.as_str(), spec.attempt), ("server", 3));
        let bare: Container =
            serde_json::from_value(json!({"name": "c", "image": "kube-ovn-lab/netexec"})).unwrap();
        assert_eq!(
            netexec_container(&bare, "p", 0).args,
            ["netexec", "--hostname=p", "--http-port=8080"],
            "no port declared: agnhost's default, said out loud"
        );
    }
}
