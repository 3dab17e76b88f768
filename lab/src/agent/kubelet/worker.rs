//! One pod's task: makes what is (sandbox records, running servers) match what the pod asks,
//! each time it is told the pod changed, and again after a backoff while a step fails.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube_ovn_dataplane::Netns;
use serde_json::json;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinSet;

use super::sandbox::{self, SandboxError, SandboxRecord};
use super::servers::{self, ServedPort};
use super::{Error, Shared, status};
use crate::agent::events::EventRecorder;
use crate::netexec;

const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// What a reconcile found.
enum Step {
    /// Nothing left for this pod (no object, no sandbox): the task may end.
    Gone,
    /// Done until something changes.
    Idle,
}

/// The netexec servers of a pod.
struct Servers {
    uid: String,
    ports: Vec<ServedPort>,
    tasks: JoinSet<Result<(), netexec::Error>>,
}

pub(super) struct Worker {
    shared: Arc<Shared>,
    key: String,
    namespace: String,
    name: String,
    /// This pod name's sandboxes (normally one; more while a replaced pod's is torn down).
    records: Vec<SandboxRecord>,
    servers: Option<Servers>,
    /// The uid whose final delete was sent, so it is sent once.
    deleted: Option<String>,
}

impl Worker {
    pub(super) fn new(shared: Arc<Shared>, namespace: &str, name: &str) -> Self {
        let records = shared.sandboxes.load_for(namespace, name);
        Self {
            shared,
            key: format!("{namespace}/{name}"),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            records,
            servers: None,
            deleted: None,
        }
    }

    fn fail(&self, step: &str) -> impl FnOnce(Box<dyn std::error::Error + Send + Sync>) -> Error {
        let (pod, step) = (self.key.clone(), step.to_owned());
        move |source| Error::Pod { pod, step, source }
    }

    pub(super) async fn run(
        mut self,
        mut rx: watch::Receiver<u64>,
        finished: mpsc::UnboundedSender<(String, u64)>,
    ) {
        let mut backoff = BACKOFF_FIRST;
        loop {
            let epoch = *rx.borrow_and_update();
            // Boxed: with the CRI calls in it the future is large, and it lives across awaits.
            let retry = match Box::pin(self.reconcile()).await {
                Ok(step) => {
                    backoff = BACKOFF_FIRST;
                    if matches!(step, Step::Gone) {
                        let _ = finished.send((self.key.clone(), epoch));
                    }
                    None
                }
                Err(e) => {
                    tracing::warn!(error = %e, retry_in = ?backoff, "pod not in step yet");
                    let delay = backoff;
                    backoff = (backoff * 2).min(BACKOFF_MAX);
                    Some(delay)
                }
            };
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = tokio::time::sleep(retry.unwrap_or(Duration::MAX)), if retry.is_some() => {}
                () = server_ended(&mut self.servers) => {}
            }
        }
    }

    async fn reconcile(&mut self) -> Result<Step, Error> {
        let pod = self.shared.pod(&self.key);
        let live = pod
            .as_ref()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && !finished(p));
        let live_uid = live.and_then(|p| p.uid());
        let is_live = live.is_some();
        // Servers first: their sockets keep a namespace alive.
        if self
            .servers
            .as_ref()
            .is_some_and(|s| Some(&s.uid) != live_uid.as_ref())
        {
            self.servers = None;
        }
        // Sandboxes of no live pod, and any whose ADD never finished, go.
        let mut keep = Vec::new();
        for record in std::mem::take(&mut self.records) {
            if Some(&record.uid) == live_uid.as_ref() && record.is_ready() {
                keep.push(record);
                continue;
            }
            tracing::info!(netns = %record.netns, uid = %record.uid, "tearing down sandbox");
            if let Err(e) = self.tear_down(&record).await {
                keep.push(record);
                self.records = keep;
                return Err(self.fail("tearing down the sandbox")(e.into()));
            }
        }
        self.records = keep;
        let Some(pod) = pod.clone() else {
            return Ok(if self.records.is_empty() {
                Step::Gone
            } else {
                Step::Idle
            });
        };
        if pod.metadata.deletion_timestamp.is_some() {
            self.finish_deletion(&pod).await?;
            return Ok(Step::Idle);
        }
        if !is_live {
            return Ok(Step::Idle);
        }
        let uid = pod.uid().unwrap_or_default();
        let host_network = pod.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        let mut container_ids = BTreeMap::new();
        let (pod_ips, container_id) = if host_network {
            let id = crate::agent::names::short_hash(uid.as_bytes(), 16);
            let netns = self.shared.node_netns.clone();
            self.ensure_servers(&pod, &uid, &netns).await?;
            (self.shared.config.internal_ips.clone(), id)
        } else if let Some(cri) = self.shared.cri.clone() {
            let record = self.sandbox(&pod, &uid).await?;
            container_ids = match cri.ensure_containers(&record, &pod).await {
                Ok(ids) => ids,
                Err(e) => {
                    let message = format!("Error: netexec could not start: {e}");
                    self.shared
                        .events
                        .warning(&EventRecorder::reference(pod.as_ref()), "Failed", &message)
                        .await;
                    return Err(self.fail("starting the netexec containers")(e.into()));
                }
            };
            (record.ips(), record.container_id.clone())
        } else {
            let record = self.sandbox(&pod, &uid).await?;
            let netns = Netns::open(record.netns_path())
                .map_err(|e| self.fail("opening the pod's namespace")(e.into()))?;
            self.ensure_servers(&pod, &uid, &netns).await?;
            (record.ips(), record.container_id.clone())
        };
        let info = status::Running {
            pod_ips: &pod_ips,
            host_ips: &self.shared.config.internal_ips,
            container_id: &container_id,
            container_ids: &container_ids,
        };
        if let Some(status) = status::running(&pod, &info, &crate::agent::now()) {
            self.write_status(status).await?;
            tracing::info!(pod_ips = ?pod_ips, "pod running");
        }
        Ok(Step::Idle)
    }

    /// The pod's sandbox, made if there is none.
    async fn sandbox(&mut self, pod: &Pod, uid: &str) -> Result<SandboxRecord, Error> {
        if let Some(record) = self.records.iter().find(|r| r.uid == uid) {
            return Ok(record.clone());
        }
        let made = if let Some(cri) = &self.shared.cri {
            tracing::info!("creating sandbox through containerd");
            cri.set_up(&self.shared.sandboxes, pod).await
        } else {
            let record = SandboxRecord::new(
                &self.shared.config.node_name,
                &self.namespace,
                &self.name,
                uid,
                &self.shared.config.netns_prefix,
            );
            tracing::info!(netns = %record.netns, container_id = %record.container_id, "creating sandbox");
            sandbox::set_up(&self.shared.sandboxes, &self.shared.runtime, record).await
        };
        match made {
            Ok(record) => {
                tracing::info!(ips = ?record.ips(), netns = %record.netns_path().display(), "sandbox ready");
                self.records.push(record.clone());
                Ok(record)
            }
            Err(e) => {
                let message = format!("Failed to create pod sandbox: {e}");
                self.shared
                    .events
                    .warning(&EventRecorder::reference(pod), "FailedCreatePodSandBox", &message)
                    .await;
                // A failure that left a record (its undo failed) is torn down next time.
                self.records = self.shared.sandboxes.load_for(&self.namespace, &self.name);
                Err(self.fail("creating the sandbox")(e.into()))
            }
        }
    }

    /// Removes a sandbox the way it was made (its record says which runtime made it).
    async fn tear_down(&self, record: &SandboxRecord) -> Result<(), SandboxError> {
        match (&record.cri, &self.shared.cri) {
            (None, _) => sandbox::tear_down(&self.shared.sandboxes, &self.shared.runtime, record).await,
            (Some(_), Some(cri)) => cri.tear_down(&self.shared.sandboxes, record).await,
            (Some(_), None) => Err(SandboxError::NoRuntime {
                id: record.container_id.clone(),
            }),
        }
    }

    async fn ensure_servers(&mut self, pod: &Pod, uid: &str, netns: &Netns) -> Result<(), Error> {
        let (ports, problems) = servers::served_ports(pod);
        let running = self
            .servers
            .as_ref()
            .is_some_and(|s| s.uid == uid && s.ports == ports && s.tasks.len() == ports.len());
        if running {
            return Ok(());
        }
        self.servers = None;
        for problem in &problems {
            tracing::warn!(%problem, "port not served");
        }
        if ports.is_empty() {
            return Ok(());
        }
        match servers::bind(netns, &ports).await {
            Ok(bound) => {
                tracing::info!(?ports, "netexec serving");
                self.servers = Some(Servers {
                    uid: uid.to_owned(),
                    ports,
                    tasks: servers::serve(bound, &self.name),
                });
                Ok(())
            }
            Err(e) => {
                let message = format!("Error: netexec could not start: {e}");
                self.shared
                    .events
                    .warning(&EventRecorder::reference(pod), "Failed", &message)
                    .await;
                Err(self.fail("starting netexec")(e.into()))
            }
        }
    }

    async fn write_status(&self, status: serde_json::Value) -> Result<(), Error> {
        Api::<Pod>::namespaced(self.shared.client.clone(), &self.namespace)
            .patch_status(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await
            .map(drop)
            .or_else(|e| match e {
                // Gone meanwhile: its deletion is the next event.
                kube::Error::Api(s) if s.code == 404 => Ok(()),
                e => Err(self.fail("writing the pod's status")(e.into())),
            })
    }

    /// The pod's containers are stopped (its sandbox went above): say so, then delete it for
    /// good, as a kubelet does once a terminating pod's containers are gone.
    async fn finish_deletion(&mut self, pod: &Pod) -> Result<(), Error> {
        if let Some(status) = status::stopped(pod, &crate::agent::now()) {
            self.write_status(status).await?;
        }
        let uid = pod.uid();
        if self.deleted == uid {
            return Ok(());
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match Api::<Pod>::namespaced(self.shared.client.clone(), &self.namespace)
            .delete(&self.name, &params)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => return Err(self.fail("deleting the stopped pod")(e.into())),
        }
        tracing::info!("pod stopped and deleted");
        self.deleted = uid;
        Ok(())
    }
}

/// Whether the pod has finished (its phase is final): nothing runs for it.
fn finished(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Resolves when one of the servers ends (so the task restarts them); never without servers.
async fn server_ended(servers: &mut Option<Servers>) {
    match servers.as_mut() {
        Some(s) if !s.tasks.is_empty() => {
            if let Some(ended) = s.tasks.join_next().await {
                match ended {
                    Ok(Err(e)) => tracing::warn!(error = %e, "a netexec server failed; restarting"),
                    other => tracing::warn!(?other, "a netexec server ended; restarting"),
                }
            }
        }
        _ => std::future::pending().await,
    }
}
