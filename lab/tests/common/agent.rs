//! Helpers for the agent's tests: controllers run as tasks stopped on drop, Ready nodes, pods,
//! and bounded waits that return what they waited for.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::WAIT;

/// A controller's task, aborted when dropped (a test that fails stops it too).
pub struct Task(tokio::task::JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Task {
    /// Whether the task ended by itself (it should run until dropped).
    pub fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// Runs a controller's `run` future; an error it returns fails loudly in the log and ends it.
pub fn spawn<E: std::fmt::Display>(
    name: &'static str,
    run: impl Future<Output = Result<(), E>> + Send + 'static,
) -> Task {
    Task(tokio::spawn(async move {
        if let Err(e) = run.await {
            panic!("{name} ended with an error: {e}");
        }
    }))
}

/// Creates a Node and sets its `Ready` condition (through status, as a kubelet does).
pub async fn node(client: &kube::Client, name: &str, ready: bool, labels: Value, spec: Value) {
    let api: Api<Node> = Api::all(client.clone());
    let node: Node =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec})).unwrap();
    api.create(&PostParams::default(), &node).await.unwrap();
    let status =
        json!({"status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
        .unwrap();
}

/// Creates a pod in `namespace` from a spec (containers default to one `kube-ovn-lab/netexec`).
pub async fn pod(client: &kube::Client, namespace: &str, name: &str, labels: Value, mut spec: Value) -> Pod {
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "kube-ovn-lab/netexec"}]);
    }
    let pod: Pod =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec})).unwrap();
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await
        .unwrap_or_else(|e| panic!("creating pod {namespace}/{name}: {e}"))
}

/// Marks a pod Ready (or not), as a kubelet would.
pub async fn set_ready(client: &kube::Client, namespace: &str, name: &str, ready: bool, ip: Option<&str>) {
    let status = if ready { "True" } else { "False" };
    let mut body = json!({"status": {"phase": "Running",
        "conditions": [{"type": "Ready", "status": status}, {"type": "ContainersReady", "status": status}]}});
    if let Some(ip) = ip {
        body["status"]["podIP"] = json!(ip);
        body["status"]["podIPs"] = json!([{"ip": ip}]);
    }
    Api::<Pod>::namespaced(client.clone(), namespace)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(body))
        .await
        .unwrap_or_else(|e| panic!("status of pod {namespace}/{name}: {e}"));
}

/// Polls `check` until it returns `Some`, within [`WAIT`]; fails naming `what` and the last
/// value `check` saw (`describe`).
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let start = std::time::Instant::now();
    loop {
        match check().await {
            Ok(v) => return v,
            Err(last) if start.elapsed() > WAIT => {
                panic!("timed out after {WAIT:?} waiting for {what}; last: {last}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}
