//! The lab's scheduler against the emulator: it binds pods through `pods/binding`, spreads them
//! over the Ready schedulable nodes, honours `nodeSelector`, reports a pod no node fits, and binds
//! it once a node fits. The `pods/binding` subresource itself: 201 Status, 409 when bound.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;

use common::agent::{Task, eventually, node, pod, spawn};
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use kube_ovn_lab::agent::scheduler;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref()?.node_name.clone()
}

fn condition(pod: &Pod, type_: &str) -> Option<(String, Option<String>)> {
    let c = pod
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn pods_are_bound_spread_over_ready_nodes_and_follow_their_selectors() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    node(&client, "n1", true, json!({"zone": "a"}), json!({})).await;
    node(&client, "n2", true, json!({"zone": "a"}), json!({})).await;
    node(&client, "n3", true, json!({"zone": "b"}), json!({})).await;
    node(&client, "down", false, json!({"zone": "a"}), json!({})).await;
    node(
        &client,
        "cordoned",
        true,
        json!({"zone": "a"}),
        json!({"unschedulable": true}),
    )
    .await;
    // Pods already on n1 before the scheduler starts: they count.
    for i in 0..3 {
        pod(
            &client,
            "default",
            &format!("pinned{i}"),
            json!({}),
            json!({"nodeName": "n1"}),
        )
        .await;
    }
    let _scheduler: Task = spawn("scheduler", scheduler::run(client.clone()));

    for i in 0..8 {
        pod(&client, "default", &format!("p{i}"), json!({}), json!({})).await;
    }
    pod(
        &client,
        "default",
        "in-b",
        json!({}),
        json!({"nodeSelector": {"zone": "b"}}),
    )
    .await;
    // Another scheduler's pod is not ours.
    pod(
        &client,
        "default",
        "other",
        json!({}),
        json!({"schedulerName": "someone-else"}),
    )
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let bound = eventually("every default-scheduler pod to be bound", || async {
        let list = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut on: BTreeMap<String, String> = BTreeMap::new();
        for p in &list.items {
            if let Some(n) = node_of(p) {
                on.insert(p.name_any(), n);
            }
        }
        if on.len() == 12 {
            Ok(on)
        } else {
            Err(format!("{on:?}"))
        }
    })
    .await;
    assert_eq!(bound["in-b"], "n3", "nodeSelector");
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for n in bound.values() {
        *per_node.entry(n.as_str()).or_default() += 1;
    }
    // 12 pods, 3 of them pinned to n1, fill the three fitting nodes evenly; none goes to `down`
    // or `cordoned`.
    assert_eq!(
        per_node,
        BTreeMap::from([("n1", 4), ("n2", 4), ("n3", 4)]),
        "spread counting the pinned pods"
    );
    let p0 = pods.get("p0").await.unwrap();
    assert_eq!(condition(&p0, "PodScheduled"), Some(("True".into(), None)));
    assert_eq!(node_of(&pods.get("other").await.unwrap()), None);

    // A pod no node fits: reported, then bound once a node fits.
    pod(
        &client,
        "default",
        "in-c",
        json!({}),
        json!({"nodeSelector": {"zone": "c"}}),
    )
    .await;
    eventually("in-c to be reported unschedulable", || async {
        let p = pods.get("in-c").await.map_err(|e| e.to_string())?;
        match condition(&p, "PodScheduled") {
            Some((s, Some(r))) if s == "False" && r == "Unschedulable" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let p = pods.get("in-c").await.unwrap();
    let message = p.status.unwrap().conditions.unwrap()[0]
        .message
        .clone()
        .unwrap_or_default();
    assert!(message.starts_with("0/5 nodes are available"), "{message}");
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons: Vec<String> = events
        .list(&ListParams::default().fields("involvedObject.name=in-c"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    assert_eq!(reasons, ["FailedScheduling"]);
    Api::<Node>::all(client.clone())
        .patch(
            "n2",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"zone": "c"}}})),
        )
        .await
        .unwrap();
    eventually("in-c to be bound to n2 once n2 fits", || async {
        let p = pods.get("in-c").await.map_err(|e| e.to_string())?;
        match node_of(&p) {
            Some(n) if n == "n2" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

#[tokio::test]
async fn binding_sets_the_node_once() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    pod(&client, "default", "p", json!({}), json!({})).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let binding = |node: &str| {
        json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"},
                                      "target": {"apiVersion": "v1", "kind": "Node", "name": node}})
    };
    let status: Value = pods
        .create_subresource("binding", "p", &PostParams::default(), &binding("n1"))
        .await
        .unwrap();
    assert_eq!(
        (&status["kind"], &status["status"], &status["code"]),
        (&json!("Status"), &json!("Success"), &json!(201))
    );
    let p = pods.get("p").await.unwrap();
    assert_eq!(node_of(&p).as_deref(), Some("n1"));
    assert_eq!(condition(&p, "PodScheduled"), Some(("True".into(), None)));
    let again = pods
        .create_subresource::<_, Value>("binding", "p", &PostParams::default(), &binding("n2"))
        .await
        .unwrap_err();
    match again {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert!(
                s.message.contains("already assigned to node \"n1\""),
                "{}",
                s.message
            );
        }
        other => panic!("{other}"),
    }
    let missing = pods
        .create_subresource::<_, Value>(
            "binding",
            "nope",
            &PostParams::default(),
            &json!({"target": {"name": "n1"}}),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(missing, kube::Error::Api(ref s) if s.code == 404),
        "{missing}"
    );
    let invalid = pods
        .create_subresource::<_, Value>("binding", "p", &PostParams::default(), &json!({"target": {}}))
        .await
        .unwrap_err();
    assert!(
        matches!(invalid, kube::Error::Api(ref s) if s.code == 422 && s.message.contains("target.name")),
        "{invalid}"
    );
}
