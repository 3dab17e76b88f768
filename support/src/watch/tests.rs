//! The watch against a fake API server (a `tower` service in place of the HTTP client): what
//! subscribers see, when the cache says it is synced, and that dropping the handle ends the
//! watch request.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{Request, Response};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ResourceExt;
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::*;

fn pod(name: &str, rv: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": "n", "resourceVersion": rv}})
}

/// A fake API server for pods: a list answers `listed` at resourceVersion 10, a watch sends
/// `events` and then stays open; `watch_closed` resolves when the watch request's response is
/// dropped (the client closed the watch). With `hang_list`, the list never answers and
/// `watch_closed` resolves when that request is dropped instead.
struct FakeApi {
    client: kube::Client,
    watch_closed: oneshot::Receiver<()>,
}

fn fake_api(listed: Vec<Value>, events: Vec<Value>, hang_list: bool) -> FakeApi {
    let (open_tx, watch_closed) = oneshot::channel::<()>();
    let open = Arc::new(Mutex::new(Some(open_tx)));
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let watching = req.uri().query().is_some_and(|q| q.contains("watch=true"));
        let (listed, events, open) = (listed.clone(), events.clone(), open.clone());
        async move {
            if hang_list && !watching {
                // Held until the request is dropped.
                let _open = open.lock().unwrap().take();
                std::future::pending::<()>().await;
            }
            let body = if watching {
                let guard = open.lock().unwrap().take();
                let lines: Vec<Result<axum::body::Bytes, Infallible>> =
                    events.iter().map(|e| Ok(format!("{e}\n").into())).collect();
                let rest = futures::stream::unfold(guard, |guard| async move {
                    // The watch stays open; the guard goes when the body is dropped.
                    let _guard = guard;
                    std::future::pending::<Option<(Result<axum::body::Bytes, Infallible>, _)>>().await
                });
                axum::body::Body::from_stream(futures::stream::iter(lines).chain(rest))
            } else {
                let list = json!({"apiVersion": "v1", "kind": "PodList",
                                  "metadata": {"resourceVersion": "10"}, "items": listed});
                axum::body::Body::from(list.to_string())
            };
            Ok::<_, Infallible>(Response::new(body))
        }
    });
    FakeApi {
        client: kube::Client::new(service, "default"),
        watch_closed,
    }
}

/// (name, old present, new present) of the next `n` changes, within 5 s.
async fn next_changes(
    changes: &mut (impl futures::Stream<Item = Change<Pod>> + Unpin),
    n: usize,
) -> Vec<(String, bool, bool)> {
    let mut out = Vec::new();
    while out.len() < n {
        let change = tokio::time::timeout(Duration::from_secs(5), changes.next())
            .await
            .unwrap_or_else(|_| panic!("{n} changes within 5 s; got {out:?}"))
            .expect("the stream goes on while the watch runs");
        let name = change.new.as_ref().or(change.old.as_ref()).unwrap().name_any();
        out.push((name, change.old.is_some(), change.new.is_some()));
    }
    out
}

#[tokio::test]
async fn subscribers_see_the_list_then_changes_and_deletions() {
    let api = fake_api(
        vec![pod("a", "1"), pod("b", "2")],
        vec![
            json!({"type": "ADDED", "object": pod("c", "11")}),
            json!({"type": "DELETED", "object": pod("a", "12")}),
        ],
        false,
    );
    let watch = Watch::<Pod>::new(Api::all(api.client));
    let cache = watch.cache();
    let mut changes = watch.subscribe().map(|c| Some(c.clone()), Vec::new).boxed();
    let watched = watch.start();
    let mut listed = next_changes(&mut changes, 2).await;
    listed.sort();
    assert_eq!(listed, [("a".into(), false, true), ("b".into(), false, true)]);
    assert_eq!(
        next_changes(&mut changes, 2).await,
        [("c".into(), false, true), ("a".into(), true, false)],
        "a deletion is a change with the old object and no new one"
    );
    assert!(watched.synced(Duration::from_secs(5)).await);
    cache.synced().await.expect("the cache listed");
    let mut names: Vec<String> = watched.all().iter().map(|p| p.name_any()).collect();
    names.sort();
    assert_eq!(names, ["b", "c"]);
    assert!(watched.get("a", Some("n")).is_none());
    assert_eq!(watched.stopped(), None);
}

#[tokio::test]
async fn dropping_the_last_handle_ends_the_watch() {
    let api = fake_api(vec![pod("a", "1")], Vec::new(), false);
    let watched: Watched<Pod> = Watched::start(Api::all(api.client), None, None);
    assert!(watched.synced(Duration::from_secs(5)).await, "listed within 5 s");
    let task = watched.shared.task.abort_handle();
    let changes = watched.subscribe();
    let clone = watched.clone();
    drop(watched);
    assert!(!task.is_finished(), "a clone still holds the watch");
    assert!(clone.get("a", Some("n")).is_some());
    drop(clone);
    tokio::time::timeout(Duration::from_secs(5), api.watch_closed)
        .await
        .expect("the watch request was closed within 5 s of the last handle's drop")
        .expect_err("closed, not answered");
    tokio::time::timeout(Duration::from_secs(5), async {
        while !task.is_finished() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the watch task finished");
    let rest: Vec<_> = tokio::time::timeout(
        Duration::from_secs(5),
        changes.map(|c| Some(c.clone()), Vec::new).collect(),
    )
    .await
    .expect("a subscriber's stream ends with the watch");
    assert!(rest.is_empty());
}

#[tokio::test]
async fn not_synced_until_listed_and_a_drop_ends_a_pending_list() {
    let api = fake_api(Vec::new(), Vec::new(), true);
    let watched: Watched<Pod> = Watched::start(Api::all(api.client), None, None);
    assert!(!watched.synced(Duration::from_millis(200)).await, "no list yet");
    assert!(!watched.cache().is_synced());
    drop(watched);
    tokio::time::timeout(Duration::from_secs(5), api.watch_closed)
        .await
        .expect("the pending list was dropped within 5 s")
        .expect_err("closed, not answered");
}

#[tokio::test]
async fn a_watch_task_that_panics_says_so() {
    // An API client whose every response panics; kube's client polls the response future
    // in the caller, so the panic happens inside the watch task.
    async fn broken(_: Request<kube::client::Body>) -> Result<Response<axum::body::Body>, Infallible> {
        panic!("the API client broke")
    }
    let service = tower::service_fn(broken);
    let client = kube::Client::new(service, "default");
    let pods: Watched<Pod> = Watched::start(Api::all(client), None, None);
    let cause = tokio::time::timeout(Duration::from_secs(5), pods.ended())
        .await
        .expect("the watch task reported its end within 5 s");
    assert_eq!(cause, "panicked: the API client broke");
    assert_eq!(pods.stopped().as_deref(), Some("panicked: the API client broke"));
    let err = pods.cache().synced().await.expect_err("it never listed");
    assert_eq!(err.to_string(), "the Pod watch stopped before it listed");
    let supervisor = crate::Supervisor::new();
    supervisor.also_check("pods-watch", move || pods.stopped());
    assert_eq!(
        supervisor.check().unwrap_err(),
        "background tasks stopped: task pods-watch panicked: the API client broke"
    );
}
