//! The lab's Deployment controller: a Deployment keeps `spec.replicas` pods made from its
//! template, so `kubectl create deployment` and `kubectl scale` give pods.
//!
//! There are no ReplicaSets (the emulator does not serve them): pods are owned by the Deployment
//! itself and named `<deployment>-<pod-template-hash>-<5 random>`, the hash (10 hex digits of the
//! template's hash) labelled `pod-template-hash` as on a real cluster. A template change replaces
//! the pods: `Recreate` deletes the old ones first; `RollingUpdate` honours `maxSurge` and
//! `maxUnavailable` (counting Ready pods as available; `minReadySeconds` is not modelled).
//! `spec.paused` stops changes. Status has `replicas`, `updatedReplicas`, `readyReplicas`,
//! `availableReplicas`, `unavailableReplicas`, `observedGeneration` and the `Available` and
//! `Progressing` conditions. Orphans matching the selector are not adopted.
//!
//! [`plan`] and [`status`] are the decisions, without I/O; [`run`] feeds them from caches.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tracing::Instrument;

use super::informer::{Pass, Passes, informer, ready, run_passes};
use super::names::{random_suffix, short_hash};

pub const TEMPLATE_HASH_LABEL: &str = "pod-template-hash";

/// 10 hex digits of the hash of the Deployment's pod template (as serialized by k8s-openapi, so
/// field order and map order are fixed).
pub fn template_hash(deploy: &Deployment) -> String {
    let template = deploy.spec.as_ref().map(|s| &s.template);
    let bytes = serde_json::to_vec(&template).unwrap_or_default();
    short_hash(&bytes, 10)
}

/// How pods are replaced, with the numbers resolved against `replicas`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    Recreate,
    RollingUpdate { max_surge: i32, max_unavailable: i32 },
}

fn resolve(value: Option<&IntOrString>, replicas: i32, round_up: bool) -> i32 {
    match value {
        None => {
            // 25 %, the default of both.
            resolve(Some(&IntOrString::String("25%".into())), replicas, round_up)
        }
        Some(IntOrString::Int(n)) => *n,
        Some(IntOrString::String(s)) => {
            let percent: i64 = s.trim_end_matches('%').parse().unwrap_or(25);
            let scaled = percent * i64::from(replicas);
            let n = if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            };
            i32::try_from(n).unwrap_or(i32::MAX)
        }
    }
}

impl Strategy {
    pub fn of(deploy: &Deployment, replicas: i32) -> Self {
        let strategy = deploy.spec.as_ref().and_then(|s| s.strategy.as_ref());
        if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
            return Self::Recreate;
        }
        let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
        let max_surge = resolve(rolling.and_then(|r| r.max_surge.as_ref()), replicas, true);
        let mut max_unavailable = resolve(rolling.and_then(|r| r.max_unavailable.as_ref()), replicas, false);
        // Both zero would never make progress; Kubernetes then allows one unavailable.
        if max_surge == 0 && max_unavailable == 0 {
            max_unavailable = 1;
        }
        Self::RollingUpdate {
            max_surge,
            max_unavailable,
        }
    }

    fn max_unavailable(self) -> i32 {
        match self {
            Self::Recreate => 0,
            Self::RollingUpdate { max_unavailable, .. } => max_unavailable,
        }
    }
}

/// What the controller knows of one pod of a Deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub hash: String,
    pub ready: bool,
}

/// What to do: how many new pods to create, which pods to delete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub create: usize,
    pub delete: Vec<String>,
}

fn count(n: usize) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

fn take(n: i32) -> usize {
    usize::try_from(n.max(0)).unwrap_or(0)
}

/// Not-ready first, then by name from the end (newest suffixes are random, so this is only
/// stable): the order pods are given up in.
fn deletion_order(pods: &mut [&PodView]) {
    pods.sort_by(|a, b| a.ready.cmp(&b.ready).then_with(|| b.name.cmp(&a.name)));
}

/// The step towards `replicas` pods of template `hash`, given the pods there are.
pub fn plan(replicas: i32, strategy: Strategy, hash: &str, pods: &[PodView]) -> Plan {
    let (mut new, mut old): (Vec<&PodView>, Vec<&PodView>) = pods.iter().partition(|p| p.hash == hash);
    deletion_order(&mut new);
    deletion_order(&mut old);
    let scale_new = |new: &[&PodView]| {
        let n = count(new.len());
        if n < replicas {
            Plan {
                create: take(replicas - n),
                delete: Vec::new(),
            }
        } else {
            Plan {
                create: 0,
                delete: new[..take(n - replicas)].iter().map(|p| p.name.clone()).collect(),
            }
        }
    };
    if old.is_empty() {
        return scale_new(&new);
    }
    match strategy {
        Strategy::Recreate => Plan {
            create: 0,
            delete: old.iter().map(|p| p.name.clone()).collect(),
        },
        Strategy::RollingUpdate {
            max_surge,
            max_unavailable,
        } => {
            let total = count(new.len() + old.len());
            let create = (replicas - count(new.len()))
                .min(replicas + max_surge - total)
                .max(0);
            let available = count(pods.iter().filter(|p| p.ready).count());
            // Old pods that are not ready cost no availability; ready ones as the budget allows.
            let mut budget = (available - (replicas - max_unavailable)).max(0);
            let mut delete = Vec::new();
            for p in &old {
                if !p.ready {
                    delete.push(p.name.clone());
                } else if budget > 0 {
                    budget -= 1;
                    delete.push(p.name.clone());
                }
            }
            if count(new.len()) > replicas {
                delete.extend(scale_new(&new).delete);
            }
            Plan {
                create: take(create),
                delete,
            }
        }
    }
}

/// The Deployment's status for these pods; `now` stamps conditions that change.
pub fn status(deploy: &Deployment, hash: &str, pods: &[PodView], now: &str) -> Value {
    let replicas = deploy.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let strategy = Strategy::of(deploy, replicas);
    let updated = count(pods.iter().filter(|p| p.hash == hash).count());
    let ready = count(pods.iter().filter(|p| p.ready).count());
    let total = count(pods.len());
    let available = ready;
    let minimum = available >= replicas - strategy.max_unavailable();
    let complete = updated == replicas && available == replicas && total == replicas;
    let name = deploy.name_any();
    let old: BTreeMap<String, Value> = deploy
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| Some((c.type_.clone(), serde_json::to_value(c).ok()?)))
        .collect();
    let condition = |type_: &str, status: bool, reason: &str, message: String| {
        let status = if status { "True" } else { "False" };
        let kept = old
            .get(type_)
            .filter(|c| c["status"] == status && c["reason"] == reason);
        let since = kept.map_or(json!(now), |c| c["lastTransitionTime"].clone());
        let updated_at = kept
            .filter(|c| c["message"] == message.as_str())
            .map_or(json!(now), |c| c["lastUpdateTime"].clone());
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastTransitionTime": since, "lastUpdateTime": updated_at})
    };
    let available_condition = if minimum {
        condition(
            "Available",
            true,
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
        )
    } else {
        condition(
            "Available",
            false,
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
        )
    };
    let progressing = if complete {
        condition(
            "Progressing",
            true,
            "NewReplicaSetAvailable",
            format!("Pods \"{name}-{hash}\" have successfully progressed."),
        )
    } else {
        condition(
            "Progressing",
            true,
            "ReplicaSetUpdated",
            format!("Pods \"{name}-{hash}\" are progressing."),
        )
    };
    let mut status = json!({
        "observedGeneration": deploy.metadata.generation.unwrap_or(0),
        "replicas": total, "updatedReplicas": updated, "readyReplicas": ready,
        "availableReplicas": available,
        "conditions": [available_condition, progressing],
    });
    if replicas > available {
        status["unavailableReplicas"] = json!(replicas - available);
    }
    status
}

/// A new pod of the Deployment from its template.
pub fn new_pod(deploy: &Deployment, hash: &str, suffix: &str) -> Pod {
    let template = deploy
        .spec
        .as_ref()
        .map(|s| s.template.clone())
        .unwrap_or_default();
    let meta = template.metadata.unwrap_or_default();
    let mut labels = meta.labels.unwrap_or_default();
    labels.insert(TEMPLATE_HASH_LABEL.into(), hash.into());
    let name = deploy.name_any();
    Pod {
        metadata: ObjectMeta {
            name: Some(format!("{name}-{hash}-{suffix}")),
            namespace: deploy.namespace(),
            labels: Some(labels),
            annotations: meta.annotations,
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name,
                uid: deploy.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

fn view(pod: &Pod) -> PodView {
    PodView {
        name: pod.name_any(),
        hash: pod.labels().get(TEMPLATE_HASH_LABEL).cloned().unwrap_or_default(),
        ready: pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
    }
}

/// Whether the pod is one of the Deployment's live pods.
fn owned_and_active(pod: &Pod, uid: &str) -> bool {
    pod.owner_references()
        .iter()
        .any(|o| o.uid == uid && o.controller == Some(true))
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Deployment {deployment}: {what}: {source}")]
    Write {
        deployment: String,
        what: String,
        source: kube::Error,
    },
}

/// How long a create or delete the cache has not shown yet is waited for before the pass stops
/// counting on it (the write may have been undone before the cache saw it).
const EXPECTATION_TTL: Duration = Duration::from_secs(30);

/// Writes made that the cache does not show yet, for one Deployment.
#[derive(Default)]
struct Expectations {
    /// Pods created: name → (hash, when).
    created: HashMap<String, (String, Instant)>,
    /// Pods deleted: name → when.
    deleted: HashMap<String, Instant>,
}

/// Keeps Deployments' pods until dropped.
pub async fn run(client: Client) -> Result<(), Error> {
    let deployments = informer(
        Api::<Deployment>::all(client.clone()),
        watcher::Config::default(),
        "Deployment",
    );
    let pods = informer(Api::<Pod>::all(client.clone()), watcher::Config::default(), "Pod");
    let mut controller = Controller {
        client,
        deployments: deployments.store,
        pods: pods.store,
        expectations: HashMap::new(),
    };
    let changes = futures::stream::select_all([deployments.changes, pods.changes]).boxed();
    run_passes(changes, &mut controller).await;
    Ok(())
}

struct Controller {
    client: Client,
    deployments: Store<Deployment>,
    pods: Store<Pod>,
    /// By Deployment uid.
    expectations: HashMap<String, Expectations>,
}

impl Passes for Controller {
    fn ready(&self) -> bool {
        ready(&self.deployments) && ready(&self.pods)
    }

    async fn pass(&mut self) -> Pass {
        let pods = self.pods.state();
        let deployments = self.deployments.state();
        let live: Vec<String> = deployments.iter().filter_map(|d| d.uid()).collect();
        self.expectations.retain(|uid, _| live.contains(uid));
        let mut outcome = Pass::Done;
        for deploy in deployments {
            let key = format!("{}/{}", deploy.namespace().unwrap_or_default(), deploy.name_any());
            let span = tracing::info_span!("deployment", deployment = %key);
            if let Err(e) = self.sync(&deploy, &pods).instrument(span.clone()).await {
                span.in_scope(|| tracing::warn!(error = %e, "will retry"));
                outcome = Pass::Retry;
            }
        }
        outcome
    }
}

impl Controller {
    async fn sync(&mut self, deploy: &Arc<Deployment>, pods: &[Arc<Pod>]) -> Result<(), Error> {
        let uid = deploy.uid().unwrap_or_default();
        let ns = deploy.namespace().unwrap_or_default();
        let name = deploy.name_any();
        let fail = |what: String| {
            let deployment = format!("{ns}/{name}");
            move |source| Error::Write {
                deployment,
                what,
                source,
            }
        };
        let owned: Vec<&Arc<Pod>> = pods.iter().filter(|p| owned_and_active(p, &uid)).collect();
        let expect = self.expectations.entry(uid.clone()).or_default();
        let seen: Vec<String> = owned.iter().map(|p| p.name_any()).collect();
        expect
            .created
            .retain(|n, (_, at)| !seen.contains(n) && at.elapsed() < EXPECTATION_TTL);
        expect
            .deleted
            .retain(|n, at| seen.contains(n) && at.elapsed() < EXPECTATION_TTL);
        let mut views: Vec<PodView> = owned
            .iter()
            .map(|p| view(p))
            .filter(|v| !expect.deleted.contains_key(&v.name))
            .collect();
        views.extend(expect.created.iter().map(|(n, (hash, _))| PodView {
            name: n.clone(),
            hash: hash.clone(),
            ready: false,
        }));
        let replicas = deploy.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
        let hash = template_hash(deploy);
        let paused = deploy.spec.as_ref().and_then(|s| s.paused).unwrap_or(false);
        let todo = if paused {
            Plan::default()
        } else {
            plan(replicas, Strategy::of(deploy, replicas), &hash, &views)
        };
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        for _ in 0..todo.create {
            let pod = new_pod(deploy, &hash, &random_suffix(5));
            let pod_name = pod.name_any();
            match api.create(&PostParams::default(), &pod).await {
                Ok(_) => {
                    tracing::info!(pod = %pod_name, "created");
                    expect.created.insert(pod_name, (hash.clone(), Instant::now()));
                }
                // A name taken by chance: the next pass picks another.
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(fail(format!("creating pod {pod_name}"))(e)),
            }
        }
        for pod_name in &todo.delete {
            match api.delete(pod_name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(pod = %pod_name, "deleted");
                    expect.deleted.insert(pod_name.clone(), Instant::now());
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(fail(format!("deleting pod {pod_name}"))(e)),
            }
        }
        // Status from what is in the cache (the writes above show in the next pass).
        let current: Vec<PodView> = owned.iter().map(|p| view(p)).collect();
        let now = crate::apiserver::meta::now();
        let want = status(deploy, &hash, &current, &now);
        let have = deploy
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok())
            .unwrap_or_default();
        if !same_status(&have, &want) {
            let mut want = want;
            // A merge patch removes a field only when told to.
            if want.get("unavailableReplicas").is_none() {
                want["unavailableReplicas"] = Value::Null;
            }
            Api::<Deployment>::namespaced(self.client.clone(), &ns)
                .patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": want})),
                )
                .await
                .map_err(fail("writing status".into()))?;
        }
        Ok(())
    }
}

/// Whether two statuses agree on everything [`status`] writes (its timestamps come from the old
/// conditions when nothing else changed, so they compare too).
fn same_status(have: &Value, want: &Value) -> bool {
    want.as_object().is_some_and(|w| {
        w.iter().all(|(k, v)| have.get(k) == Some(v))
            && (w.contains_key("unavailableReplicas")
                || have.get("unavailableReplicas").is_none_or(|u| u == 0))
    })
}

#[cfg(test)]
#[path = "deployments_tests.rs"]
mod tests;
