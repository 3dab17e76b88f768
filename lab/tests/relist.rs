//! kube's watcher after a forced 410: its watch ends (a short `timeoutSeconds`), objects are created,
//! changed and deleted while it is away, the history it would resume from is gone (compaction, or a
//! small history bound), and on reconnecting it gets `410 Expired`, relists, and its store ends
//! equal to the server's, deletions included.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;
use std::pin::Pin;
use std::time::Duration;

use common::{WAIT, object_key, server_objects};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig, StoreConfig};
use kube_ovn_testkit::wait_until_async;
use serde_json::{Value, json};
use tokio::time::Instant;

type Events = Pin<Box<dyn Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>> + Send>>;

/// Polls the reflector's stream (it only makes progress when polled) until `done` holds, counting
/// the 410s it reports; fails after [`WAIT`] naming `what`.
async fn drive_until(events: &mut Events, gone: &mut usize, what: &str, mut done: impl FnMut(usize) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done(*gone) {
        assert!(
            Instant::now() < deadline,
            "timed out after {WAIT:?} waiting for {what}"
        );
        match tokio::time::timeout(Duration::from_millis(20), events.next()).await {
            Ok(Some(Err(watcher::Error::WatchError(status)))) if status.code == 410 => *gone += 1,
            Ok(Some(Err(e))) => panic!("unexpected watcher error while waiting for {what}: {e}"),
            Ok(Some(Ok(_))) | Err(_) => {}
            Ok(None) => panic!("the watcher stream ended while waiting for {what}"),
        }
    }
}

fn store_view(store: &Store<ConfigMap>) -> BTreeMap<String, Value> {
    store
        .state()
        .iter()
        .map(|cm| {
            let v = serde_json::to_value(&**cm).unwrap();
            (object_key(&v), v)
        })
        .collect()
}

fn server_view(server: &ApiServer) -> BTreeMap<String, Value> {
    server_objects(server, "", "v1", "configmaps")
        .into_iter()
        .map(|(k, v)| {
            let typed: ConfigMap = serde_json::from_value(v).unwrap();
            (k, serde_json::to_value(typed).unwrap())
        })
        .collect()
}

fn config_map(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": value}})).unwrap()
}

/// The scenario; `expire` makes the watcher's resume point too old.
async fn relists_after_expiry(server: ApiServer, expire: impl FnOnce(&ApiServer)) {
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    for i in 0..10 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), "0"))
            .await
            .unwrap();
    }
    let (reader, writer) = reflector::store();
    // The server ends each watch after a second, as it would after `timeoutSeconds`.
    let mut events: Events = reflector::reflector(
        writer,
        watcher(api.clone(), watcher::Config::default().timeout(1)),
    )
    .boxed();
    let mut gone = 0;
    drive_until(&mut events, &mut gone, "the initial list and a watch", |_| {
        store_view(&reader).len() == 10 && server.store().open_watches() == 1
    })
    .await;

    // Not polled, the watcher cannot reconnect: once the server has ended its watch, it is away.
    wait_until_async("the server to end the 1 s watch", WAIT, || {
        futures::future::ready(Ok(server.store().open_watches() == 0))
    })
    .await
    .unwrap();
    for i in 0..3 {
        api.delete(&format!("cm-{i}"), &DeleteParams::default())
            .await
            .unwrap();
    }
    for i in 3..6 {
        api.patch(
            &format!("cm-{i}"),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "changed"}})),
        )
        .await
        .unwrap();
    }
    for i in 10..13 {
        api.create(&PostParams::default(), &config_map(&format!("cm-{i}"), "new"))
            .await
            .unwrap();
    }
    expire(&server);

    drive_until(
        &mut events,
        &mut gone,
        "the relisted store to equal the server",
        |gone| gone > 0 && store_view(&reader) == server_view(&server),
    )
    .await;
    assert_eq!(gone, 1, "exactly one 410 Expired, then a clean relist");
    let names: Vec<String> = store_view(&reader).into_keys().collect();
    assert!(
        !names.iter().any(|n| n == "default/cm-0"),
        "a deletion made while away must not survive the relist: {names:?}"
    );
    assert_eq!(
        reader
            .get(&reflector::ObjectRef::new("cm-4").within("default"))
            .and_then(|cm| cm.data.clone())
            .and_then(|d| d.get("v").cloned())
            .as_deref(),
        Some("changed")
    );

    // And it keeps watching from the relist: a later change arrives without another 410.
    api.create(&PostParams::default(), &config_map("after", "1"))
        .await
        .unwrap();
    drive_until(&mut events, &mut gone, "a change after the relist", |_| {
        store_view(&reader).contains_key("default/after")
    })
    .await;
    assert_eq!(gone, 1);
}

#[tokio::test]
async fn watcher_relists_after_compaction() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    relists_after_expiry(server, |s| s.store().compact()).await;
}

#[tokio::test]
async fn watcher_relists_when_history_is_too_short() {
    // Nine changes while the watcher is away, four kept: its resume point falls out of history.
    let config = ApiServerConfig {
        store: StoreConfig {
            history_limit: 4,
            ..StoreConfig::default()
        },
        ..ApiServerConfig::default()
    };
    let server = ApiServer::new(config).unwrap();
    relists_after_expiry(server, |_| {}).await;
}
