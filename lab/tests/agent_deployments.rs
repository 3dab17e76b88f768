//! The Deployment controller against the emulator: pods made from the template (names, labels,
//! owner), status, scaling through `/scale`, a deleted pod replaced, a template change rolled
//! out (RollingUpdate, waiting for readiness; Recreate, old pods first), a restarted controller
//! that changes nothing, and the pods gone with their Deployment.
//!
//! No kubelet runs here: a stand-in task marks each pod Ready as soon as it sees it, unless told
//! to hold off.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::agent::{Task, eventually, set_ready, spawn};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use kube_ovn_lab::agent::deployments::{self, TEMPLATE_HASH_LABEL};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

/// Marks pods Ready as they appear, while `enabled`.
fn readiness(client: &kube::Client, enabled: Arc<AtomicBool>) -> Task {
    let client = client.clone();
    spawn("readiness", async move {
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        let mut pods = watcher(api, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(pod) = pods.next().await {
            let Ok(pod) = pod else { continue };
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            if !ready && pod.metadata.deletion_timestamp.is_none() && enabled.load(Ordering::SeqCst) {
                set_ready(&client, "default", &pod.name_any(), true, None).await;
            }
        }
        Ok::<(), String>(())
    })
}

/// The Deployment's live pods: (name, template hash, ready).
async fn pods_of(api: &Api<Pod>, deploy: &str) -> Result<Vec<(String, String, bool)>, String> {
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .iter()
        .filter(|p| {
            p.owner_references()
                .iter()
                .any(|o| o.name == deploy && o.kind == "Deployment")
        })
        .map(|p| {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            (
                p.name_any(),
                p.labels().get(TEMPLATE_HASH_LABEL).cloned().unwrap_or_default(),
                ready,
            )
        })
        .collect())
}

/// Waits until the Deployment has `count` ready pods, all of one template hash, and its status
/// says so for its current generation; returns the pods and the hash.
async fn settled(client: &kube::Client, deploy: &str, count: usize) -> (Vec<String>, String) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    eventually(&format!("{deploy} to settle at {count} ready pods"), || async {
        let now = pods_of(&pods, deploy).await?;
        let hashes: BTreeSet<&String> = now.iter().map(|(_, h, _)| h).collect();
        let d = deployments.get(deploy).await.map_err(|e| e.to_string())?;
        let s = d.status.clone().unwrap_or_default();
        let settled = now.len() == count
            && now.iter().all(|(_, _, r)| *r)
            && hashes.len() <= 1
            && s.observed_generation == d.metadata.generation
            && s.replicas == Some(i32::try_from(count).unwrap())
            && s.ready_replicas.unwrap_or(0) == i32::try_from(count).unwrap()
            && s.updated_replicas.unwrap_or(0) == i32::try_from(count).unwrap();
        if settled {
            Ok((
                now.iter().map(|(n, _, _)| n.clone()).collect(),
                hashes.into_iter().next().cloned().unwrap_or_default(),
            ))
        } else {
            Err(format!("pods {now:?}, status {s:?}"))
        }
    })
    .await
}

async fn create(api: &Api<Deployment>, name: &str, replicas: i32, strategy: serde_json::Value) {
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "strategy": strategy, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}},
                              "spec": {"containers": [{"name": "c", "image": "kube-ovn-lab/netexec:v1"}]}}},
    }))
    .unwrap();
    api.create(&PostParams::default(), &d).await.unwrap();
}

async fn set_image(api: &Api<Deployment>, name: &str, image: &str) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}}),
        ),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn deployments_create_scale_replace_and_roll_out_pods() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let ready = Arc::new(AtomicBool::new(true));
    let _readiness = readiness(&client, ready.clone());
    let controller = spawn("deployments", deployments::run(client.clone()));
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    create(&deployments, "web", 3, json!({"type": "RollingUpdate"})).await;
    let (names, hash) = settled(&client, "web", 3).await;
    assert_eq!(hash.len(), 10);
    for name in &names {
        let suffix = name
            .strip_prefix(&format!("web-{hash}-"))
            .unwrap_or_else(|| panic!("{name}"));
        assert_eq!(suffix.len(), 5, "{name}");
        let p = pods.get(name).await.unwrap();
        assert_eq!(p.labels()["app"], "web");
        assert_eq!(p.owner_references()[0].controller, Some(true));
        assert_eq!(
            p.spec.unwrap().containers[0].image.as_deref(),
            Some("kube-ovn-lab/netexec:v1")
        );
    }
    let status = deployments.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.available_replicas, Some(3));
    let available = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(available.status, "True");

    // Scale through /scale (kubectl scale), up and down.
    for replicas in [5, 2] {
        deployments
            .patch_scale(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .unwrap();
        settled(&client, "web", replicas).await;
    }
    // A pod deleted by hand is replaced.
    let (before, _) = settled(&client, "web", 2).await;
    pods.delete(&before[0], &DeleteParams::default()).await.unwrap();
    eventually("the deleted pod to be replaced", || async {
        let now = pods_of(&pods, "web").await?;
        let names: Vec<&String> = now.iter().map(|(n, _, _)| n).collect();
        if now.len() == 2 && !names.contains(&&before[0]) {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;

    // A rolling update waits for readiness: with pods never Ready it stops after the surge.
    ready.store(false, Ordering::SeqCst);
    set_image(&deployments, "web", "kube-ovn-lab/netexec:v2").await;
    let stuck = eventually("the rollout to surge one pod", || async {
        let now = pods_of(&pods, "web").await?;
        if now.len() == 3 {
            Ok(now)
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
    let hashes: BTreeSet<&String> = stuck.iter().map(|(_, h, _)| h).collect();
    assert_eq!(hashes.len(), 2, "one new pod beside the two old ones: {stuck:?}");
    // Readiness back: it finishes.
    ready.store(true, Ordering::SeqCst);
    for (name, _, r) in &stuck {
        if !r {
            set_ready(&client, "default", name, true, None).await;
        }
    }
    let (after, new_hash) = settled(&client, "web", 2).await;
    assert_ne!(new_hash, hash);
    assert!(after.iter().all(|n| !before.contains(n)));

    // Recreate: every old pod goes before a new one comes.
    create(&deployments, "batch", 2, json!({"type": "Recreate"})).await;
    let (_, old_hash) = settled(&client, "batch", 2).await;
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let recorder = {
        let api: Api<Pod> = Api::namespaced(client.clone(), "default");
        spawn("recorder", async move {
            let config = watcher::Config::default().labels("app=batch");
            let mut events = watcher(api, config).default_backoff().boxed();
            while let Some(event) = events.next().await {
                // (live, hash) per pod change: Apply is live, Delete is gone.
                let (live, pod) = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (true, p),
                    Ok(watcher::Event::Delete(p)) => (false, p),
                    _ => continue,
                };
                let hash = pod.labels().get(TEMPLATE_HASH_LABEL).cloned().unwrap_or_default();
                let _ = seen_tx.send((pod.name_any(), live, hash));
            }
            Ok::<(), String>(())
        })
    };
    // The recorder has seen the two old pods before the template changes.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let first = tokio::time::timeout(common::WAIT, seen_rx.recv()).await;
        seen.push(
            first
                .expect("the recorder to list batch's pods")
                .expect("recorder running"),
        );
    }
    set_image(&deployments, "batch", "kube-ovn-lab/netexec:v2").await;
    let (_, batch_hash) = settled(&client, "batch", 2).await;
    assert_ne!(batch_hash, old_hash);
    drop(recorder);
    while let Ok(event) = seen_rx.try_recv() {
        seen.push(event);
    }
    let mut live_old: BTreeSet<String> = BTreeSet::new();
    for (name, live, hash) in seen {
        if hash == old_hash {
            if live {
                live_old.insert(name);
            } else {
                live_old.remove(&name);
            }
        } else if live {
            assert!(
                live_old.is_empty(),
                "new pod {name} while old ones lived: {live_old:?}"
            );
        }
    }

    // A restarted controller leaves a settled Deployment as it is.
    drop(controller);
    let (names_before, _) = settled(&client, "web", 2).await;
    let rv = deployments.get("web").await.unwrap().resource_version();
    let _controller = spawn("deployments", deployments::run(client.clone()));
    // Something to wait for that the controller does after its first pass: a new Deployment.
    create(&deployments, "probe", 1, json!({})).await;
    settled(&client, "probe", 1).await;
    let (names_after, _) = settled(&client, "web", 2).await;
    assert_eq!(
        names_after.iter().collect::<BTreeSet<_>>(),
        names_before.iter().collect()
    );
    assert_eq!(
        deployments.get("web").await.unwrap().resource_version(),
        rv,
        "status unchanged"
    );

    // Deleting the Deployment deletes its pods (owner references).
    deployments.delete("web", &DeleteParams::default()).await.unwrap();
    eventually("web's pods to go", || async {
        let now = pods_of(&pods, "web").await?;
        if now.is_empty() {
            Ok(())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await;
}
