//! The lab's scheduler: binds each pod that has no `spec.nodeName` (and asks for the default
//! scheduler) to a node, through the `pods/binding` subresource as kube-scheduler does.
//!
//! A node fits when it is Ready, not `spec.unschedulable`, and has every label of the pod's
//! `spec.nodeSelector`. Among fitting nodes the one with the fewest pods bound wins (spread),
//! ties by name. Not modelled: taints and tolerations, affinity, resources, preemption. A pod no
//! node fits gets `PodScheduled=False` (`Unschedulable`) and a `FailedScheduling` Warning, and is
//! tried again when nodes change.
//!
//! [`pick_node`] is the decision, without I/O; [`run`] feeds it from caches.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tracing::Instrument;

use super::events::EventRecorder;
use super::informer::{Pass, Passes, informer, ready, run_passes};

/// The `schedulerName` the lab's scheduler answers to (Kubernetes' default).
pub const SCHEDULER_NAME: &str = "default-scheduler";

/// Why no node fits, in kube-scheduler's words (`0/3 nodes are available: …`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable(pub String);

/// Whether the node's `Ready` condition is True.
pub fn node_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Whether a pod waits for this scheduler: no node, our scheduler name, not being deleted.
pub fn wants_scheduling(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    spec.is_some_and(|s| s.node_name.as_deref().is_none_or(str::is_empty))
        && spec
            .and_then(|s| s.scheduler_name.as_deref())
            .is_none_or(|n| n.is_empty() || n == SCHEDULER_NAME)
        && pod.metadata.deletion_timestamp.is_none()
}

/// Whether a pod bound to a node counts against it (not finished).
fn occupies_node(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The node for `pod` among `nodes`, given how many pods each already has.
pub fn pick_node<S: std::hash::BuildHasher>(
    pod: &Pod,
    nodes: &[Arc<Node>],
    bound: &HashMap<String, usize, S>,
) -> Result<String, Unschedulable> {
    let selector: BTreeMap<String, String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default();
    let (mut not_ready, mut cordoned, mut mismatched) = (0, 0, 0);
    let mut best: Option<(usize, String)> = None;
    for node in nodes {
        let name = node.name_any();
        if !node_ready(node) {
            not_ready += 1;
            continue;
        }
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            cordoned += 1;
            continue;
        }
        let labels = node.labels();
        if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            mismatched += 1;
            continue;
        }
        let count = bound.get(&name).copied().unwrap_or(0);
        if best.as_ref().is_none_or(|(c, n)| (count, &name) < (*c, n)) {
            best = Some((count, name));
        }
    }
    if let Some((_, name)) = best {
        return Ok(name);
    }
    let mut reasons = Vec::new();
    if mismatched > 0 {
        reasons.push(format!(
            "{mismatched} node(s) didn't match Pod's node affinity/selector"
        ));
    }
    if not_ready > 0 {
        reasons.push(format!("{not_ready} node(s) were not ready"));
    }
    if cordoned > 0 {
        reasons.push(format!("{cordoned} node(s) were unschedulable"));
    }
    reasons.sort();
    let mut message = format!("0/{} nodes are available", nodes.len());
    if !reasons.is_empty() {
        message = format!("{message}: {}", reasons.join(", "));
    }
    Err(Unschedulable(format!("{message}.")))
}

/// Pods bound (or assumed bound) per node.
pub fn bound_counts<'a>(pods: impl IntoIterator<Item = &'a Pod>) -> HashMap<String, usize> {
    let mut counts = HashMap::new();
    for pod in pods {
        if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref())
            && !node.is_empty()
            && occupies_node(pod)
        {
            *counts.entry(node.to_owned()).or_default() += 1;
        }
    }
    counts
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding pod {pod} to node {node}: {source}")]
    Bind {
        pod: String,
        node: String,
        source: kube::Error,
    },
    #[error("marking pod {pod} unschedulable: {source}")]
    Status { pod: String, source: kube::Error },
}

/// Binds pods until dropped.
pub async fn run(client: Client) -> Result<(), Error> {
    let pods = informer(Api::<Pod>::all(client.clone()), watcher::Config::default(), "Pod");
    let nodes = informer(
        Api::<Node>::all(client.clone()),
        watcher::Config::default(),
        "Node",
    );
    let mut scheduler = Scheduler {
        events: EventRecorder::new(client.clone(), SCHEDULER_NAME, None),
        client,
        pods: pods.store,
        nodes: nodes.store,
        assumed: HashMap::new(),
        reported: HashMap::new(),
    };
    let changes = futures::stream::select_all([pods.changes, nodes.changes]).boxed();
    run_passes(changes, &mut scheduler).await;
    Ok(())
}

struct Scheduler {
    client: Client,
    events: EventRecorder,
    pods: Store<Pod>,
    nodes: Store<Node>,
    /// Bindings made whose pods the cache does not show bound yet: pod uid → node.
    assumed: HashMap<String, String>,
    /// Pods already told they are unschedulable, with the message, so it is written once.
    reported: HashMap<String, String>,
}

impl Passes for Scheduler {
    fn ready(&self) -> bool {
        ready(&self.pods) && ready(&self.nodes)
    }

    async fn pass(&mut self) -> Pass {
        let pods = self.pods.state();
        let nodes = self.nodes.state();
        // Assumptions the cache now confirms (or whose pods are gone) are dropped.
        let live: HashMap<String, &Pod> = pods
            .iter()
            .filter_map(|p| p.uid().map(|u| (u, p.as_ref())))
            .collect();
        let waiting = |uid: &String| live.get(uid).is_some_and(|p| wants_scheduling(p));
        self.assumed.retain(|uid, _| waiting(uid));
        self.reported.retain(|uid, _| waiting(uid));
        let mut counts = bound_counts(pods.iter().map(AsRef::as_ref));
        for node in self.assumed.values() {
            *counts.entry(node.clone()).or_default() += 1;
        }
        let mut pending: Vec<&Arc<Pod>> = pods
            .iter()
            .filter(|p| wants_scheduling(p) && !p.uid().is_some_and(|u| self.assumed.contains_key(&u)))
            .collect();
        // Oldest first, as the scheduling queue orders pods of equal priority.
        pending.sort_by_key(|p| (p.creation_timestamp().map(|t| t.0), p.namespace(), p.name_any()));
        let mut outcome = Pass::Done;
        for pod in pending {
            let key = format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any());
            let span = tracing::info_span!("schedule", pod = %key);
            let result = self
                .schedule(pod, &nodes, &mut counts)
                .instrument(span.clone())
                .await;
            match result {
                Ok(()) => {}
                // Bound by someone else meanwhile, or gone: the cache will say so.
                Err(
                    ref e @ (Error::Bind {
                        source: kube::Error::Api(ref s),
                        ..
                    }
                    | Error::Status {
                        source: kube::Error::Api(ref s),
                        ..
                    }),
                ) if s.code == 409 || s.code == 404 => {
                    span.in_scope(|| tracing::debug!(error = %e, "stale cache"));
                }
                Err(e) => {
                    span.in_scope(|| tracing::warn!(error = %e, "will retry"));
                    outcome = Pass::Retry;
                }
            }
        }
        outcome
    }
}

impl Scheduler {
    async fn schedule(
        &mut self,
        pod: &Arc<Pod>,
        nodes: &[Arc<Node>],
        counts: &mut HashMap<String, usize>,
    ) -> Result<(), Error> {
        match pick_node(pod, nodes, counts) {
            Ok(node) => {
                bind(&self.client, pod, &node).await?;
                tracing::info!(%node, "bound");
                *counts.entry(node.clone()).or_default() += 1;
                if let Some(uid) = pod.uid() {
                    self.assumed.insert(uid, node);
                }
            }
            Err(Unschedulable(message)) => {
                let uid = pod.uid().unwrap_or_default();
                if self.reported.get(&uid) != Some(&message) {
                    tracing::info!(%message, "unschedulable");
                    mark_unschedulable(&self.client, pod, &message).await?;
                    self.events
                        .warning(
                            &EventRecorder::reference(pod.as_ref()),
                            "FailedScheduling",
                            &message,
                        )
                        .await;
                    self.reported.insert(uid, message);
                }
            }
        }
        Ok(())
    }
}

async fn bind(client: &Client, pod: &Pod, node: &str) -> Result<(), Error> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": pod.uid()},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    Api::<Pod>::namespaced(client.clone(), &ns)
        .create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding)
        .await
        .map(drop)
        .map_err(|source| Error::Bind {
            pod: format!("{ns}/{name}"),
            node: node.to_owned(),
            source,
        })
}

async fn mark_unschedulable(client: &Client, pod: &Pod, message: &str) -> Result<(), Error> {
    let ns = pod.namespace().unwrap_or_default();
    let name = pod.name_any();
    let mut conditions: Vec<serde_json::Value> = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.type_ != "PodScheduled")
        .map(|c| serde_json::to_value(c).unwrap_or_default())
        .collect();
    conditions.push(
        json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                           "message": message, "lastProbeTime": null,
                           "lastTransitionTime": crate::apiserver::meta::now()}),
    );
    Api::<Pod>::namespaced(client.clone(), &ns)
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": conditions}})),
        )
        .await
        .map(drop)
        .map_err(|source| Error::Status {
            pod: format!("{ns}/{name}"),
            source,
        })
}

/// The lead spawns the controllers with `tokio::spawn`: their futures must be `Send`.
#[allow(dead_code)]
fn run_is_send(client: Client) -> impl Send {
    run(client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, unschedulable: bool, labels: &[(&str, &str)]) -> Arc<Node> {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "labels": labels},
                "spec": {"unschedulable": unschedulable},
                "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
            }))
            .unwrap(),
        )
    }

    fn pod(selector: &[(&str, &str)]) -> Pod {
        let selector: BTreeMap<&str, &str> = selector.iter().copied().collect();
        serde_json::from_value(json!({"metadata": {"name": "p"},
            "spec": {"containers": [], "nodeSelector": selector}}))
        .unwrap()
    }

    #[test]
    fn the_ready_schedulable_matching_node_with_fewest_pods_wins() {
        let nodes = vec![
            node("n1", true, false, &[("zone", "a")]),
            node("n2", true, false, &[("zone", "b")]),
            node("n3", false, false, &[("zone", "a")]),
            node("n4", true, true, &[("zone", "a")]),
        ];
        let counts = HashMap::from([("n1".to_owned(), 2), ("n2".to_owned(), 1)]);
        assert_eq!(pick_node(&pod(&[]), &nodes, &counts).unwrap(), "n2");
        assert_eq!(pick_node(&pod(&[("zone", "a")]), &nodes, &counts).unwrap(), "n1");
        // Ties go by name.
        assert_eq!(pick_node(&pod(&[]), &nodes, &HashMap::new()).unwrap(), "n1");
        let err = pick_node(&pod(&[("zone", "c")]), &nodes, &counts).unwrap_err();
        assert_eq!(
            err.0,
            "0/4 nodes are available: 1 node(s) were not ready, 1 node(s) were unschedulable, \
             2 node(s) didn't match Pod's node affinity/selector."
        );
        assert_eq!(
            pick_node(&pod(&[]), &[], &counts).unwrap_err().0,
            "0/0 nodes are available."
        );
    }

    #[test]
    fn only_unbound_live_pods_of_the_default_scheduler_wait() {
        let mut p = pod(&[]);
        assert!(wants_scheduling(&p));
        p.spec.as_mut().unwrap().scheduler_name = Some("other".into());
        assert!(!wants_scheduling(&p));
        p.spec.as_mut().unwrap().scheduler_name = Some(SCHEDULER_NAME.into());
        p.spec.as_mut().unwrap().node_name = Some("n1".into());
        assert!(!wants_scheduling(&p));
        let counts = bound_counts([&p]);
        assert_eq!(counts.get("n1"), Some(&1));
        p.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        assert!(bound_counts([&p]).is_empty(), "finished pods do not count");
    }
}
