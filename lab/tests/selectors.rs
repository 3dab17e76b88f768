//! Lists and watches through kube's client: label selectors (every operator), field selectors
//! (Pod `spec.nodeName` and `status.phase`; an unsupported field is a 400), `limit` + `continue`
//! pages as one consistent snapshot, and a selector-filtered watch that sends ADDED and DELETED as
//! an object's labels enter and leave the selector.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeSet;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

fn server() -> ApiServer {
    ApiServer::new(ApiServerConfig::default()).unwrap()
}

/// Creates a Pod, then sets its phase through `/status` as a kubelet would (a create's status
/// is the server's: Pending).
async fn pod(pods: &Api<Pod>, name: &str, labels: &serde_json::Value, node: Option<&str>, phase: &str) {
    let mut spec = json!({"containers": [{"name": "c", "image": "busybox"}]});
    if let Some(node) = node {
        spec["nodeName"] = json!(node);
    }
    let obj: Pod =
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": spec})).unwrap();
    let created = pods.create(&PostParams::default(), &obj).await.unwrap();
    assert_eq!(created.status.and_then(|s| s.phase).as_deref(), Some("Pending"));
    if phase != "Pending" {
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }
}

async fn names<K>(api: &Api<K>, params: &ListParams) -> BTreeSet<String>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(params)
        .await
        .unwrap_or_else(|e| panic!("list {params:?}: {e}"))
        .items
        .iter()
        .map(|o| o.meta().name.clone().unwrap())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn label_selectors_with_every_operator() {
    let s = server();
    let pods: Api<Pod> = Api::namespaced(s.client(), "default");
    for (name, labels) in [
        ("web-1", json!({"app": "web", "team": "a"})),
        ("web-2", json!({"app": "web"})),
        ("db-1", json!({"app": "db", "team": "b"})),
        ("cache-1", json!({"app": "cache", "team": "a", "tier": "hot"})),
        ("bare", json!({})),
    ] {
        pod(&pods, name, &labels, None, "Pending").await;
    }
    for (selector, want) in [
        ("", &["web-1", "web-2", "db-1", "cache-1", "bare"][..]),
        ("app=web", &["web-1", "web-2"]),
        ("app==web", &["web-1", "web-2"]),
        ("app!=web", &["db-1", "cache-1", "bare"]),
        ("app in (web, db)", &["web-1", "web-2", "db-1"]),
        ("app notin (web,db)", &["cache-1", "bare"]),
        ("team", &["web-1", "db-1", "cache-1"]),
        ("!team", &["web-2", "bare"]),
        ("app in (web),!team", &["web-2"]),
        ("team=a,tier", &["cache-1"]),
        ("app notin (cache),team notin (a)", &["db-1", "web-2", "bare"]),
    ] {
        let got = names(&pods, &ListParams::default().labels(selector)).await;
        assert_eq!(got, set(want), "labelSelector {selector:?}");
    }
    let bad = pods
        .list(&ListParams::default().labels("app in web"))
        .await
        .unwrap_err();
    assert!(matches!(&bad, kube::Error::Api(s) if s.code == 400), "{bad:?}");
}

#[tokio::test]
async fn field_selectors_on_pods() {
    let s = server();
    let pods: Api<Pod> = Api::namespaced(s.client(), "default");
    for (name, node, phase) in [
        ("a", Some("node-1"), "Running"),
        ("b", Some("node-1"), "Pending"),
        ("c", Some("node-2"), "Running"),
        ("d", None, "Pending"),
    ] {
        pod(&pods, name, &json!({}), node, phase).await;
    }
    let all: Api<Pod> = Api::all(s.client());
    for (selector, want) in [
        ("spec.nodeName=node-1", &["a", "b"][..]),
        ("spec.nodeName==node-2", &["c"]),
        ("spec.nodeName!=node-1", &["c", "d"]),
        // An unset field selects as "": how kube-scheduler finds unscheduled pods.
        ("spec.nodeName=", &["d"]),
        ("status.phase=Running", &["a", "c"]),
        ("spec.nodeName=node-1,status.phase!=Running", &["b"]),
        ("metadata.name=c", &["c"]),
        ("metadata.namespace=default", &["a", "b", "c", "d"]),
        ("metadata.namespace=kube-system", &[]),
    ] {
        assert_eq!(
            names(&all, &ListParams::default().fields(selector)).await,
            set(want),
            "fieldSelector {selector:?}"
        );
    }
    let unsupported = pods
        .list(&ListParams::default().fields("spec.hostname=x"))
        .await
        .unwrap_err();
    match unsupported {
        kube::Error::Api(e) => {
            assert_eq!(e.code, 400);
            assert!(e.message.contains("spec.hostname"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    // ConfigMaps only know the metadata fields.
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let err = cms
        .list(&ListParams::default().fields("spec.nodeName=node-1"))
        .await
        .unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 400), "{err:?}");
}

#[tokio::test]
async fn limit_and_continue_pages_are_one_snapshot() {
    let s = server();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let cm = |name: String| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"paged": "yes"}}})).unwrap()
    };
    for i in 0..25 {
        cms.create(&PostParams::default(), &cm(format!("cm-{i:02}")))
            .await
            .unwrap();
    }
    let params = ListParams::default().labels("paged=yes").limit(10);
    let first = cms.list(&params).await.unwrap();
    assert_eq!(first.items.len(), 10);
    assert_eq!(first.metadata.remaining_item_count, Some(15));
    let token = first.metadata.continue_.clone().expect("a continue token");
    let rv = first.metadata.resource_version.clone();
    // Changes after the first page do not show in later pages: they are the same snapshot.
    cms.create(&PostParams::default(), &cm("cm-99".into()))
        .await
        .unwrap();
    cms.delete("cm-24", &DeleteParams::default()).await.unwrap();
    let second = cms.list(&params.clone().continue_token(&token)).await.unwrap();
    // A retried page is the same page.
    let again = cms.list(&params.clone().continue_token(&token)).await.unwrap();
    assert_eq!(
        second
            .items
            .iter()
            .map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>(),
        again
            .items
            .iter()
            .map(|c| c.metadata.name.clone())
            .collect::<Vec<_>>()
    );
    let third = cms
        .list(
            &params
                .clone()
                .continue_token(second.metadata.continue_.as_deref().unwrap()),
        )
        .await
        .unwrap();
    assert_eq!((second.items.len(), third.items.len()), (10, 5));
    assert!(third.metadata.continue_.as_deref().is_none_or(str::is_empty));
    for page in [&second, &third] {
        assert_eq!(
            page.metadata.resource_version, rv,
            "every page is at the first page's version"
        );
    }
    let all: Vec<String> = [first, second, third]
        .iter()
        .flat_map(|p| p.items.iter().map(|c| c.metadata.name.clone().unwrap()))
        .collect();
    let want: Vec<String> = (0..25).map(|i| format!("cm-{i:02}")).collect();
    assert_eq!(all, want, "each object once, in order, as of the snapshot");
    // A fresh list sees the changes.
    let now = names(&cms, &ListParams::default().labels("paged=yes")).await;
    assert!(now.contains("cm-99") && !now.contains("cm-24"));
}

#[tokio::test]
async fn a_selector_filtered_watch_follows_objects_in_and_out() {
    let s = server();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let start = cms
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = cms
        .watch(&WatchParams::default().labels("app=web").timeout(60), &start)
        .await
        .unwrap()
        .boxed();
    let labelled = |labels: serde_json::Value| Patch::Merge(json!({"metadata": {"labels": labels}}));
    let pp = PatchParams::default();
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "x", "labels": {"app": "db"}}})).unwrap();
    let rv = |o: ConfigMap| o.metadata.resource_version.unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap(); // not selected: nothing
    let entered = rv(cms
        .patch("x", &pp, &labelled(json!({"app": "web"})))
        .await
        .unwrap()); // ADDED
    let changed = rv(cms.patch("x", &pp, &labelled(json!({"v": "2"}))).await.unwrap()); // MODIFIED
    let left = rv(cms
        .patch("x", &pp, &labelled(json!({"app": "db"})))
        .await
        .unwrap()); // DELETED
    cms.patch("x", &pp, &labelled(json!({"v": "3"}))).await.unwrap(); // still out: nothing
    cms.delete("x", &DeleteParams::default()).await.unwrap(); // out: nothing
    let end: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "end", "labels": {"app": "web"}}})).unwrap();
    let created = rv(cms.create(&PostParams::default(), &end).await.unwrap()); // ADDED
    let deleted = cms.delete("end", &DeleteParams::default()).await.unwrap(); // DELETED
    let deleted = rv(deleted.left().expect("deleted at once: the object comes back"));

    let mut seen = Vec::new();
    while seen.len() < 5 {
        let event = common::next_within(&mut events, &format!("watch event after {seen:?}"))
            .await
            .expect("the watch ended early");
        let (kind, obj) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        let labels = obj.metadata.labels.clone().unwrap_or_default();
        seen.push((
            kind,
            obj.metadata.name.unwrap(),
            labels.get("app").cloned().unwrap_or_default(),
            obj.metadata.resource_version.unwrap(),
        ));
    }
    let want = [
        ("ADDED", "x", "web", &entered),
        ("MODIFIED", "x", "web", &changed),
        // Leaving the selector: the last content it matched with, at the change's version, as
        // the real server sends it.
        ("DELETED", "x", "web", &left),
        ("ADDED", "end", "web", &created),
        ("DELETED", "end", "web", &deleted),
    ];
    let seen: Vec<(&str, &str, &str, &String)> = seen
        .iter()
        .map(|(k, n, a, rv)| (*k, n.as_str(), a.as_str(), rv))
        .collect();
    assert_eq!(seen, want);
}
