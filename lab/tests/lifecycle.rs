//! Deletion through kube's client: finalizers hold an object (marked with `deletionTimestamp`)
//! until the last is removed; owner references with background, foreground and orphan
//! propagation; namespace deletion removes its objects and waits for their finalizers; deleting a
//! CRD deletes its objects and stops serving its kind.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::Vlan;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};

fn server() -> ApiServer {
    ApiServer::new(ApiServerConfig::default()).unwrap()
}

fn object<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn owned_by(owners: &[&ConfigMap]) -> Value {
    json!(owners
        .iter()
        .map(|o| json!({"apiVersion": "v1", "kind": "ConfigMap", "name": o.name_any(), "uid": o.uid().unwrap(),
                        "blockOwnerDeletion": true}))
        .collect::<Vec<_>>())
}

fn set_finalizers(finalizers: &[&str]) -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"finalizers": finalizers}}))
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap().is_some()
}

#[tokio::test]
async fn finalizers_hold_a_deleted_object_until_the_last_goes() {
    let s = server();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let cm: ConfigMap = object(json!({"metadata": {"name": "held", "finalizers": ["a.io/one", "b.io/two"]}}));
    cms.create(&PostParams::default(), &cm).await.unwrap();
    let deleted = cms.delete("held", &DeleteParams::default()).await.unwrap();
    let marked = deleted
        .left()
        .expect("still there: the delete returns the object");
    assert!(marked.meta().deletion_timestamp.is_some());
    assert_eq!(marked.meta().deletion_grace_period_seconds, Some(0));
    // Deleting again changes nothing.
    let again = cms
        .delete("held", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(again.resource_version(), marked.resource_version());
    // No new finalizer while deleting; other changes are allowed.
    let err = cms
        .patch(
            "held",
            &PatchParams::default(),
            &set_finalizers(&["a.io/one", "b.io/two", "c.io/new"]),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 422 && s.message.contains("c.io/new")),
        "{err:?}"
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"note": "cleaning up"}})),
    )
    .await
    .unwrap();
    let one_left = cms
        .patch("held", &PatchParams::default(), &set_finalizers(&["b.io/two"]))
        .await
        .unwrap();
    assert_eq!(one_left.finalizers(), ["b.io/two"]);
    assert!(exists(&cms, "held").await);
    // The last one goes: so does the object.
    cms.patch("held", &PatchParams::default(), &set_finalizers(&[]))
        .await
        .unwrap();
    assert!(!exists(&cms, "held").await);
}

#[tokio::test]
async fn background_deletion_collects_dependents() {
    let s = server();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let secrets: Api<Secret> = Api::namespaced(s.client(), "default");
    let pp = PostParams::default();
    let owner = cms
        .create(&pp, &object(json!({"metadata": {"name": "owner"}})))
        .await
        .unwrap();
    let other = cms
        .create(&pp, &object(json!({"metadata": {"name": "other"}})))
        .await
        .unwrap();
    for name in ["dep-1", "dep-2"] {
        cms.create(
            &pp,
            &object(json!({"metadata": {"name": name, "ownerReferences": owned_by(&[&owner])}})),
        )
        .await
        .unwrap();
    }
    // A dependent of another kind, and one of its own dependents (a chain).
    let secret = secrets
        .create(
            &pp,
            &object(json!({"metadata": {"name": "dep-secret", "ownerReferences": owned_by(&[&owner])}})),
        )
        .await
        .unwrap();
    let chained =
        json!([{"apiVersion": "v1", "kind": "Secret", "name": "dep-secret", "uid": secret.uid().unwrap()}]);
    cms.create(
        &pp,
        &object(json!({"metadata": {"name": "grandchild", "ownerReferences": chained}})),
    )
    .await
    .unwrap();
    // Two owners: it stays while one lives, losing the reference to the one that went.
    cms.create(
        &pp,
        &object(json!({"metadata": {"name": "shared", "ownerReferences": owned_by(&[&owner, &other])}})),
    )
    .await
    .unwrap();

    cms.delete("owner", &DeleteParams::background()).await.unwrap();
    for name in ["owner", "dep-1", "dep-2", "grandchild"] {
        assert!(!exists(&cms, name).await, "{name} should be collected");
    }
    assert!(!exists(&secrets, "dep-secret").await);
    let shared = cms.get("shared").await.unwrap();
    let owners: Vec<String> = shared.owner_references().iter().map(|o| o.name.clone()).collect();
    assert_eq!(
        owners,
        ["other"],
        "the dangling reference is removed, the live one kept"
    );
}

#[tokio::test]
async fn foreground_deletion_waits_for_dependents() {
    let s = server();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let pp = PostParams::default();
    let owner = cms
        .create(&pp, &object(json!({"metadata": {"name": "owner"}})))
        .await
        .unwrap();
    cms.create(
        &pp,
        &object(json!({"metadata": {"name": "quick", "ownerReferences": owned_by(&[&owner])}})),
    )
    .await
    .unwrap();
    cms.create(
        &pp,
        &object(json!({"metadata": {"name": "slow", "finalizers": ["lab/hold"],
                                                   "ownerReferences": owned_by(&[&owner])}})),
    )
    .await
    .unwrap();

    cms.delete("owner", &DeleteParams::foreground()).await.unwrap();
    // The owner waits, marked, with the foregroundDeletion finalizer, while a dependent remains.
    let waiting = cms.get("owner").await.unwrap();
    assert!(waiting.meta().deletion_timestamp.is_some());
    assert!(
        waiting.finalizers().iter().any(|f| f == "foregroundDeletion"),
        "{:?}",
        waiting.finalizers()
    );
    assert!(!exists(&cms, "quick").await);
    let slow = cms.get("slow").await.unwrap();
    assert!(
        slow.meta().deletion_timestamp.is_some(),
        "the dependent is being deleted too"
    );
    // The last dependent goes: the owner follows.
    cms.patch("slow", &PatchParams::default(), &set_finalizers(&[]))
        .await
        .unwrap();
    assert!(!exists(&cms, "slow").await);
    assert!(!exists(&cms, "owner").await);
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_without_the_reference() {
    let s = server();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let pp = PostParams::default();
    let owner = cms
        .create(&pp, &object(json!({"metadata": {"name": "owner"}})))
        .await
        .unwrap();
    cms.create(
        &pp,
        &object(json!({"metadata": {"name": "kept", "ownerReferences": owned_by(&[&owner])}})),
    )
    .await
    .unwrap();
    let orphan = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..DeleteParams::default()
    };
    cms.delete("owner", &orphan).await.unwrap();
    assert!(!exists(&cms, "owner").await);
    let kept = cms.get("kept").await.unwrap();
    assert!(
        kept.owner_references().is_empty(),
        "{:?}",
        kept.owner_references()
    );
}

#[tokio::test]
async fn namespace_deletion_removes_its_objects() {
    let s = server();
    let namespaces: Api<Namespace> = Api::all(s.client());
    namespaces
        .create(
            &PostParams::default(),
            &object(json!({"metadata": {"name": "doomed"}})),
        )
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(s.client(), "doomed");
    let pods: Api<Pod> = Api::namespaced(s.client(), "doomed");
    let pp = PostParams::default();
    cms.create(&pp, &object(json!({"metadata": {"name": "plain"}})))
        .await
        .unwrap();
    cms.create(
        &pp,
        &object(json!({"metadata": {"name": "held", "finalizers": ["lab/hold"]}})),
    )
    .await
    .unwrap();
    pods.create(
        &pp,
        &object(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})),
    )
    .await
    .unwrap();
    // Elsewhere, untouched.
    let survivors: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    survivors
        .create(&pp, &object(json!({"metadata": {"name": "plain"}})))
        .await
        .unwrap();

    namespaces
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = namespaces.get("doomed").await.unwrap();
    assert!(terminating.meta().deletion_timestamp.is_some());
    assert_eq!(terminating.status.unwrap().phase.as_deref(), Some("Terminating"));
    // Pods go at once (no kubelet, no grace period), plain objects too; the held one waits.
    assert!(!exists(&pods, "p").await);
    assert!(!exists(&cms, "plain").await);
    assert!(cms.get("held").await.unwrap().meta().deletion_timestamp.is_some());
    let refused = cms
        .create(&pp, &object(json!({"metadata": {"name": "late"}})))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, kube::Error::Api(s) if s.code == 403 && s.message.contains("being terminated")),
        "{refused:?}"
    );

    cms.patch("held", &PatchParams::default(), &set_finalizers(&[]))
        .await
        .unwrap();
    assert!(!exists(&cms, "held").await);
    assert!(
        !exists(&namespaces, "doomed").await,
        "an empty terminating namespace goes"
    );
    assert!(exists(&survivors, "plain").await);
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_stops_serving_the_kind() {
    let s = server();
    let crds: Api<CustomResourceDefinition> = Api::all(s.client());
    let vlan_crd = kube_ovn_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "Vlan")
        .unwrap();
    crds.create(&PostParams::default(), &vlan_crd).await.unwrap();
    let vlans: Api<Vlan> = Api::all(s.client());
    let vlan: Vlan = object(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": "v10"},
                                   "spec": {"id": 10, "provider": "physnet"}}),
    );
    vlans.create(&PostParams::default(), &vlan).await.unwrap();
    crds.delete("vlans.kubeovn.io", &DeleteParams::default())
        .await
        .unwrap();
    assert!(!exists(&crds, "vlans.kubeovn.io").await);
    let gone = vlans.get("v10").await.unwrap_err();
    assert!(
        matches!(&gone, kube::Error::Api(s) if s.code == 404 && s.message.contains("could not find the requested resource")),
        "the kind is no longer served: {gone:?}"
    );
    // Created again, the kind is empty: its objects went with it.
    crds.create(&PostParams::default(), &vlan_crd).await.unwrap();
    assert!(
        vlans
            .list(&kube::api::ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
}
