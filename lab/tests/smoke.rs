//! The real `kube` client against the emulator, in process: the basic verbs and a watch.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

#[tokio::test]
async fn crud_and_watch() {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = serde_json::from_value(
        json!({"metadata": {"name": "a", "labels": {"app": "x"}}, "data": {"k": "v"}}),
    )
    .unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let dup = cms.create(&PostParams::default(), &cm).await.unwrap_err();
    assert!(matches!(dup, kube::Error::Api(ref s) if s.code == 409), "{dup:?}");
    let patched = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"k2": "v2"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap().len(), 2);
    let list = cms.list(&ListParams::default().labels("app=x")).await.unwrap();
    assert_eq!(list.items.len(), 1);

    let mut events = watcher(cms.clone(), watcher::Config::default()).boxed();
    // The initial list arrives as Init / InitApply / InitDone.
    let mut seen_a = false;
    while let Some(ev) = common::next_within(&mut events, "event of the initial list").await {
        match ev {
            watcher::Event::InitApply(o) if o.metadata.name.as_deref() == Some("a") => seen_a = true,
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert!(seen_a);
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    loop {
        match common::next_within(&mut events, "Delete event of \"a\"").await {
            Some(watcher::Event::Delete(o)) => {
                assert_eq!(o.metadata.name.as_deref(), Some("a"));
                break;
            }
            Some(_) => {}
            None => panic!("watch ended"),
        }
    }
}
