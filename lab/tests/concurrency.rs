//! 8 writers and 8 raw watches at once, half of the clients over TCP and half in process: every
//! watch, started from one known resourceVersion (some before the writers, some while they run,
//! replaying history into live events), sees every committed change exactly once, in
//! resourceVersion order, with the content the writer got back.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;

use common::WAIT;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_testkit::drill::Rng;
use kube_ovn_testkit::wait_until_async;
use serde_json::json;
use tokio::sync::watch;

const WRITERS: usize = 8;
const WATCHERS: usize = 8;
const OPS_PER_WRITER: usize = 150;
const SENTINEL: &str = "sentinel";

/// One event as seen: (resourceVersion, type, name, data).
type Seen = (u64, &'static str, String, Option<BTreeMap<String, String>>);

fn seen(kind: &'static str, cm: &ConfigMap) -> Seen {
    let rv = cm.resource_version().unwrap().parse().unwrap();
    (rv, kind, cm.name_any(), cm.data.clone())
}

/// Writer `w`: creates, updates (each a real change) and deletes its own objects; returns what
/// each write committed.
async fn writer(api: Api<ConfigMap>, w: usize, seed: u64) -> Vec<Seen> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut exists = [false; 5];
    let mut counter = 0;
    for _ in 0..OPS_PER_WRITER {
        let i = rng.below(exists.len());
        let name = format!("w{w}-{i}");
        counter += 1;
        let data = json!({"writer": w.to_string(), "n": counter.to_string()});
        if !exists[i] {
            let cm: ConfigMap =
                serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap();
            out.push(seen(
                "ADDED",
                &api.create(&PostParams::default(), &cm).await.unwrap(),
            ));
            exists[i] = true;
        } else if rng.below(4) == 0 {
            let gone = api.delete(&name, &DeleteParams::default()).await.unwrap();
            out.push(seen("DELETED", &gone.left().expect("deleted at once")));
            exists[i] = false;
        } else {
            let patch = Patch::Merge(json!({"data": data}));
            out.push(seen(
                "MODIFIED",
                &api.patch(&name, &PatchParams::default(), &patch).await.unwrap(),
            ));
        }
    }
    out
}

/// A raw watch from `from` until the sentinel arrives; waits for `go` before starting.
async fn watcher(api: Api<ConfigMap>, from: String, mut go: watch::Receiver<bool>) -> Vec<Seen> {
    go.wait_for(|g| *g).await.unwrap();
    let mut stream = api
        .watch(&WatchParams::default().timeout(290), &from)
        .await
        .unwrap()
        .boxed();
    let mut out = Vec::new();
    loop {
        let what = format!("event of the watch from {from} after {} events", out.len());
        let event = common::next_within(&mut stream, &what)
            .await
            .expect("the watch ended before the sentinel");
        let entry = match event {
            WatchEvent::Added(o) => seen("ADDED", &o),
            WatchEvent::Modified(o) => seen("MODIFIED", &o),
            WatchEvent::Deleted(o) => seen("DELETED", &o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("watch error {e:?}"),
        };
        if entry.2 == SENTINEL {
            return out;
        }
        out.push(entry);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_writers_eight_watchers_exactly_once_in_order() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let serving = {
        let server = server.clone();
        tokio::spawn(async move { server.serve(listener).await })
    };
    let tcp = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    let in_process = server.client();
    let client = |i: usize| {
        if i.is_multiple_of(2) {
            tcp.clone()
        } else {
            in_process.clone()
        }
    };
    let api = |i: usize| Api::<ConfigMap>::namespaced(client(i), "default");

    let start = server.store().current_rv().to_string();
    // Half the watches start before any write; half once the writers are under way, so their
    // history replay meets live events.
    let (early_tx, early) = watch::channel(false);
    let (late_tx, late) = watch::channel(false);
    let watchers: Vec<_> = (0..WATCHERS)
        .map(|i| {
            let go = if i < WATCHERS / 2 {
                early.clone()
            } else {
                late.clone()
            };
            tokio::spawn(watcher(api(i), start.clone(), go))
        })
        .collect();
    early_tx.send(true).unwrap();
    let seed = common::seed(0xc0c0);
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| tokio::spawn(writer(api(w + 1), w, seed + w as u64)))
        .collect();
    // Let the late watches start once some writes have committed.
    let first_rv: u64 = start.parse().unwrap();
    wait_until_async("the writers to commit 100 changes", WAIT, || {
        futures::future::ready(Ok(server.store().current_rv() >= first_rv + 100))
    })
    .await
    .unwrap();
    late_tx.send(true).unwrap();

    let mut expected: Vec<Seen> = Vec::new();
    for w in writers {
        expected.extend(w.await.unwrap());
    }
    expected.sort_by_key(|e| e.0);
    let sentinel: ConfigMap = serde_json::from_value(json!({"metadata": {"name": SENTINEL}})).unwrap();
    api(0).create(&PostParams::default(), &sentinel).await.unwrap();

    assert_eq!(expected.len(), WRITERS * OPS_PER_WRITER);
    // Every write got its own resourceVersion.
    assert!(
        expected.windows(2).all(|w| w[0].0 < w[1].0),
        "two writes share a resourceVersion"
    );
    for (i, w) in watchers.into_iter().enumerate() {
        let got = w.await.unwrap();
        let transport = if i.is_multiple_of(2) { "TCP" } else { "in-process" };
        assert!(
            got.windows(2).all(|w| w[0].0 < w[1].0),
            "watch {i} ({transport}): events out of resourceVersion order"
        );
        if got != expected {
            let first_difference = got.iter().zip(&expected).position(|(a, b)| a != b);
            panic!(
                "watch {i} ({transport}) saw {} events, {} expected; first difference at {first_difference:?}: {:?} vs {:?}",
                got.len(),
                expected.len(),
                first_difference.map(|d| &got[d]),
                first_difference.map(|d| &expected[d]),
            );
        }
    }
    // Nothing else committed: one resourceVersion per write, then the sentinel's.
    assert_eq!(server.store().current_rv(), expected.last().unwrap().0 + 1);
    serving.abort();
}
