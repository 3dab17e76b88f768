//! Raw watches through kube's client: the current objects as ADDED from resourceVersion 0, a
//! streaming list ending in the `k8s.io/initial-events-end` bookmark, periodic bookmarks at the
//! store's resourceVersion, `timeoutSeconds` ending the stream, and 410 Expired as an ERROR event
//! for a resourceVersion older than the history.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::core::watch::Bookmark;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

fn server(bookmarks: Duration) -> ApiServer {
    ApiServer::new(ApiServerConfig {
        bookmark_interval: bookmarks,
        ..ApiServerConfig::default()
    })
    .unwrap()
}

async fn create(api: &Api<ConfigMap>, name: &str) -> u64 {
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    let created = api.create(&PostParams::default(), &cm).await.unwrap();
    created.metadata.resource_version.unwrap().parse().unwrap()
}

/// The next event, within a bound.
async fn next<S>(stream: &mut S) -> Option<WatchEvent<ConfigMap>>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    common::next_within(stream, "watch event").await
}

fn bookmark_rv(bookmark: &Bookmark) -> u64 {
    bookmark.metadata.resource_version.parse().unwrap()
}

#[tokio::test]
async fn resource_version_zero_starts_with_the_current_objects() {
    let s = server(Duration::from_mins(1));
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    for name in ["a", "b"] {
        create(&api, name).await;
    }
    let mut events = api.watch(&WatchParams::default(), "0").await.unwrap().boxed();
    let mut added = Vec::new();
    for _ in 0..2 {
        match next(&mut events).await {
            Some(WatchEvent::Added(o)) => added.push(o.metadata.name.unwrap()),
            other => panic!("{other:?}"),
        }
    }
    added.sort();
    assert_eq!(added, ["a", "b"]);
    create(&api, "c").await;
    assert!(
        matches!(next(&mut events).await, Some(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("c"))
    );
}

#[tokio::test]
async fn a_streaming_list_ends_its_initial_events_with_a_bookmark() {
    let s = server(Duration::from_mins(1));
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let last = create(&api, "a").await.max(create(&api, "b").await);
    let mut events = api
        .watch(&WatchParams::streaming_lists(), "0")
        .await
        .unwrap()
        .boxed();
    for _ in 0..2 {
        assert!(matches!(next(&mut events).await, Some(WatchEvent::Added(_))));
    }
    match next(&mut events).await {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(
                b.metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str),
                Some("true")
            );
            assert_eq!(bookmark_rv(&b), last);
        }
        other => panic!("expected the initial-events-end bookmark, got {other:?}"),
    }
}

#[tokio::test]
async fn bookmarks_carry_the_current_resource_version() {
    let s = server(Duration::from_millis(50));
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let start = create(&api, "a").await;
    let mut events = api
        .watch(&WatchParams::default(), &start.to_string())
        .await
        .unwrap()
        .boxed();
    // A change elsewhere (another namespace) moves the resourceVersion but is not this watch's.
    let other: Api<ConfigMap> = Api::namespaced(s.client(), "kube-system");
    let elsewhere = create(&other, "x").await;
    loop {
        match next(&mut events).await {
            Some(WatchEvent::Bookmark(b)) if bookmark_rv(&b) == elsewhere => break,
            Some(WatchEvent::Bookmark(b)) => assert!(bookmark_rv(&b) >= start),
            other => panic!("only bookmarks were due, got {other:?}"),
        }
    }
    // Without allowWatchBookmarks, none come.
    let mut quiet = api
        .watch(
            &WatchParams::default().disable_bookmarks().timeout(1),
            &elsewhere.to_string(),
        )
        .await
        .unwrap()
        .boxed();
    assert!(
        next(&mut quiet).await.is_none(),
        "no event, then the end at timeoutSeconds"
    );
}

#[tokio::test]
async fn timeout_seconds_ends_the_stream() {
    let s = server(Duration::from_mins(1));
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let started = tokio::time::Instant::now();
    let mut events = api
        .watch(&WatchParams::default().timeout(1), "0")
        .await
        .unwrap()
        .boxed();
    assert!(next(&mut events).await.is_none());
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "{took:?}"
    );
    assert_eq!(s.store().open_watches(), 0, "the server let the watch go");
}

#[tokio::test]
async fn a_compacted_resource_version_is_410_expired() {
    let s = server(Duration::from_mins(1));
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let old = create(&api, "a").await;
    create(&api, "b").await;
    s.store().compact();
    let mut events = api
        .watch(&WatchParams::default(), &(old - 1).to_string())
        .await
        .unwrap()
        .boxed();
    match next(&mut events).await {
        Some(WatchEvent::Error(e)) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(e.message.contains("too old resource version"), "{}", e.message);
        }
        other => panic!("expected 410, got {other:?}"),
    }
    assert!(
        next(&mut events).await.is_none(),
        "the stream ends after the error"
    );
    // From the compaction point on, watching works again.
    let now = s.store().current_rv();
    let mut events = api
        .watch(&WatchParams::default(), &now.to_string())
        .await
        .unwrap()
        .boxed();
    create(&api, "c").await;
    assert!(matches!(next(&mut events).await, Some(WatchEvent::Added(_))));
}
