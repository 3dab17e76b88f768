//! Object semantics through kube's client: `generation` (spec changes only, never `/status`),
//! no-op writes (same resourceVersion, no event), the status subresource split, `generateName`,
//! the resourceVersion rules (monotonic, 409 on a stale write or a failed precondition), dry run.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use common::install_crds;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions, WatchEvent, WatchParams,
};
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::{Subnet, Vip};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;

async fn server_with_crds() -> ApiServer {
    let s = ApiServer::new(ApiServerConfig::default()).unwrap();
    install_crds(&s.client()).await.unwrap();
    s
}

fn subnet(name: &str, cidr: &str) -> Subnet {
    serde_json::from_value(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
                                  "spec": {"cidrBlock": cidr}}),
    )
    .unwrap()
}

fn config_map(name: &str, data: &serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

fn rv<K: Resource>(o: &K) -> u64 {
    o.meta().resource_version.as_deref().unwrap().parse().unwrap()
}

fn api_error(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason.clone(), s.message.clone()),
        other => panic!("not an API error: {other:?}"),
    }
}

#[tokio::test]
async fn generation_counts_spec_changes_only() {
    let s = server_with_crds().await;
    let subnets: Api<Subnet> = Api::all(s.client());
    let created = subnets
        .create(&PostParams::default(), &subnet("g", "10.0.0.0/24"))
        .await
        .unwrap();
    assert_eq!(created.meta().generation, Some(1));

    let pp = PatchParams::default();
    let status = subnets
        .patch_status(
            "g",
            &pp,
            &Patch::Merge(json!({"status": {"activateGateway": "node-1"}})),
        )
        .await
        .unwrap();
    assert!(rv(&status) > rv(&created));
    assert_eq!(
        status.meta().generation,
        Some(1),
        "a /status write is not a spec change"
    );
    let labelled = subnets
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}, "annotations": {"c": "d"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.meta().generation, Some(1), "metadata is not spec");
    let respecced = subnets
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"spec": {"cidrBlock": "10.0.1.0/24"}})),
        )
        .await
        .unwrap();
    assert_eq!(respecced.meta().generation, Some(2));
    let again = subnets
        .patch(
            "g",
            &pp,
            &json_patch(&json!([{"op": "add", "path": "/spec/mtu", "value": 1400}])),
        )
        .await
        .unwrap();
    assert_eq!(again.meta().generation, Some(3));

    // Without a status subresource (Kube-OVN's Vip), status is part of the object: it counts.
    let vips: Api<Vip> = Api::all(s.client());
    let vip: Vip = serde_json::from_value(json!({"apiVersion": "kubeovn.io/v1", "kind": "Vip",
        "metadata": {"name": "v"}, "spec": {"subnet": "g"}}))
    .unwrap();
    vips.create(&PostParams::default(), &vip).await.unwrap();
    let vip = vips
        .patch("v", &pp, &Patch::Merge(json!({"status": {"v4ip": "10.0.1.9"}})))
        .await
        .unwrap();
    assert_eq!(vip.meta().generation, Some(2));
    assert_eq!(vip.status.unwrap().v4ip.as_deref(), Some("10.0.1.9"));

    // Built-ins without a generation (ConfigMap, Pod before 1.34) have none.
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let cm = cms
        .create(&PostParams::default(), &config_map("c", &json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(cm.meta().generation, None);

    // Being marked for deletion bumps a kept generation (the apiserver's markAsDeleting).
    subnets
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"finalizers": ["lab/hold"]}})),
        )
        .await
        .unwrap();
    subnets.delete("g", &DeleteParams::default()).await.unwrap();
    let deleting = subnets.get("g").await.unwrap();
    assert!(deleting.meta().deletion_timestamp.is_some());
    assert_eq!(deleting.meta().generation, Some(4));
}

/// A JSON patch (RFC 6902) from its JSON form.
fn json_patch(ops: &serde_json::Value) -> Patch<()> {
    Patch::Json(serde_json::from_value(ops.clone()).unwrap())
}

#[tokio::test]
async fn the_status_subresource_splits_writes() {
    let s = server_with_crds().await;
    let subnets: Api<Subnet> = Api::all(s.client());
    subnets
        .create(&PostParams::default(), &subnet("s", "10.0.0.0/24"))
        .await
        .unwrap();
    // Status in a create is dropped: with a status subresource it is not the creator's.
    let mut with_status = subnet("s2", "10.0.2.0/24");
    with_status.status = Some(serde_json::from_value(json!({"activateGateway": "n"})).unwrap());
    let created = subnets
        .create(&PostParams::default(), &with_status)
        .await
        .unwrap();
    assert_eq!(created.status, None);

    // A /status write changes status only: its spec and label changes are ignored.
    let current = subnets.get("s").await.unwrap();
    let mut next = current.clone();
    next.spec.cidr_block = Some("192.168.0.0/16".into());
    next.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
    next.status = Some(serde_json::from_value(json!({"activateGateway": "node-2"})).unwrap());
    let written = subnets
        .replace_status("s", &PostParams::default(), &next)
        .await
        .unwrap();
    assert_eq!(written.spec.cidr_block.as_deref(), Some("10.0.0.0/24"));
    assert_eq!(written.metadata.labels, None);
    assert_eq!(
        written.status.as_ref().unwrap().activate_gateway.as_deref(),
        Some("node-2")
    );

    // A main-resource write ignores status; here that leaves nothing changed: a no-op.
    let mut main = written.clone();
    main.status = Some(serde_json::from_value(json!({"activateGateway": "elsewhere"})).unwrap());
    let same = subnets.replace("s", &PostParams::default(), &main).await.unwrap();
    assert_eq!(
        same.status.as_ref().unwrap().activate_gateway.as_deref(),
        Some("node-2")
    );
    assert_eq!(
        rv(&same),
        rv(&written),
        "a write that changes nothing keeps the resourceVersion"
    );
}

/// Reads events until `until` arrives; everything before it is returned.
async fn events_until<S>(stream: &mut S, until: &str) -> Vec<(String, String)>
where
    S: futures::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin,
{
    let mut seen = Vec::new();
    loop {
        let event = common::next_within(stream, &format!("watch event for {until} after {seen:?}"))
            .await
            .expect("the watch ended");
        let (kind, obj) = match event {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(_) => continue,
            WatchEvent::Error(e) => panic!("{e:?}"),
        };
        if obj.name_any() == until {
            return seen;
        }
        seen.push((kind.to_owned(), obj.name_any()));
    }
}

#[tokio::test]
async fn no_op_writes_keep_the_version_and_emit_nothing() {
    let s = ApiServer::new(ApiServerConfig::default()).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let cm = cms
        .create(&PostParams::default(), &config_map("quiet", &json!({"a": "1"})))
        .await
        .unwrap();
    let mut events = cms
        .watch(&WatchParams::default(), &cm.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    let pp = PatchParams::default();
    let writes = [
        cms.patch("quiet", &pp, &Patch::Merge(json!({"data": {"a": "1"}})))
            .await
            .unwrap(),
        cms.patch("quiet", &pp, &Patch::Strategic(json!({"data": {"a": "1"}})))
            .await
            .unwrap(),
        cms.patch(
            "quiet",
            &pp,
            &json_patch(&json!([{"op": "test", "path": "/data/a", "value": "1"}])),
        )
        .await
        .unwrap(),
        cms.replace("quiet", &PostParams::default(), &cm).await.unwrap(),
        // A delete of nothing, via a selector that matches nothing.
    ];
    for w in &writes {
        assert_eq!(rv(w), rv(&cm), "a no-op write changed the resourceVersion");
    }
    let none = cms
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("nothing=here"),
        )
        .await
        .unwrap();
    assert!(none.left().is_some_and(|l| l.items.is_empty()));
    // A real change after the no-ops is the first and only event.
    let changed = cms
        .patch("quiet", &pp, &Patch::Merge(json!({"data": {"a": "2"}})))
        .await
        .unwrap();
    assert!(rv(&changed) > rv(&cm));
    cms.create(&PostParams::default(), &config_map("sentinel", &json!({})))
        .await
        .unwrap();
    assert_eq!(
        events_until(&mut events, "sentinel").await,
        vec![("MODIFIED".to_owned(), "quiet".to_owned())]
    );
}

#[tokio::test]
async fn generate_name_makes_unique_names() {
    let s = ApiServer::new(ApiServerConfig::default()).unwrap();
    let pods: Api<Pod> = Api::namespaced(s.client(), "default");
    let template: Pod = serde_json::from_value(json!({"metadata": {"generateName": "web-"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    let mut names = std::collections::BTreeSet::new();
    for _ in 0..20 {
        let p = pods.create(&PostParams::default(), &template).await.unwrap();
        let name = p.name_any();
        assert!(
            name.starts_with("web-") && name.len() == "web-".len() + 5,
            "{name}"
        );
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-"));
        names.insert(name);
    }
    assert_eq!(names.len(), 20);
    // A name wins over generateName.
    let mut named = template.clone();
    named.metadata.name = Some("fixed".into());
    assert_eq!(
        pods.create(&PostParams::default(), &named)
            .await
            .unwrap()
            .name_any(),
        "fixed"
    );
}

#[tokio::test]
async fn resource_versions_conflicts_and_preconditions() {
    let s = server_with_crds().await;
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let mut last = 0;
    let mut cm = cms
        .create(&PostParams::default(), &config_map("v", &json!({"n": "0"})))
        .await
        .unwrap();
    for i in 1..10 {
        assert!(rv(&cm) > last, "resourceVersions only grow");
        last = rv(&cm);
        let mut next = cm.clone();
        next.data = Some([("n".to_owned(), i.to_string())].into());
        cm = cms.replace("v", &PostParams::default(), &next).await.unwrap();
    }
    // A write based on an old version is refused.
    let mut stale = cm.clone();
    stale.metadata.resource_version = Some(last.to_string());
    let (code, reason, message) = api_error(
        cms.replace("v", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "Conflict"));
    assert!(message.contains("the object has been modified"), "{message}");
    let (code, reason, _) = api_error(
        cms.create(&PostParams::default(), &config_map("v", &json!({})))
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (409, "AlreadyExists"));
    // A ConfigMap may be replaced without a resourceVersion; a custom resource may not.
    let mut unconditional = cm.clone();
    unconditional.metadata.resource_version = None;
    cms.replace("v", &PostParams::default(), &unconditional)
        .await
        .unwrap();
    let subnets: Api<Subnet> = Api::all(s.client());
    let sn = subnets
        .create(&PostParams::default(), &subnet("u", "10.9.0.0/24"))
        .await
        .unwrap();
    let mut blind = sn.clone();
    blind.metadata.resource_version = None;
    let (code, reason, message) = api_error(
        subnets
            .replace("u", &PostParams::default(), &blind)
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"));
    assert!(message.contains("metadata.resourceVersion"), "{message}");

    // Delete preconditions.
    let current = cms.get("v").await.unwrap();
    let wrong_uid = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(api_error(cms.delete("v", &wrong_uid).await.unwrap_err()).0, 409);
    let wrong_rv = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some(last.to_string()),
        }),
        ..DeleteParams::default()
    };
    assert_eq!(api_error(cms.delete("v", &wrong_rv).await.unwrap_err()).0, 409);
    let right = DeleteParams {
        preconditions: Some(Preconditions {
            uid: current.metadata.uid.clone(),
            resource_version: current.metadata.resource_version.clone(),
        }),
        ..DeleteParams::default()
    };
    cms.delete("v", &right).await.unwrap();
    assert!(cms.get_opt("v").await.unwrap().is_none());
}

#[tokio::test]
async fn dry_run_stores_nothing() {
    let s = ApiServer::new(ApiServerConfig::default()).unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let before = s.store().current_rv();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let answer = cms
        .create(&dry, &config_map("dry", &json!({"a": "1"})))
        .await
        .unwrap();
    assert_eq!(answer.name_any(), "dry");
    assert!(cms.get_opt("dry").await.unwrap().is_none());
    assert_eq!(s.store().current_rv(), before);
}
