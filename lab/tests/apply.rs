//! Server-side apply and managedFields through the real `kube` client, in process: conflicts
//! between field managers, force, removal of fields a manager stops applying, status apply, and
//! managedFields as kube reads them.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::{Value, json};

fn server() -> (ApiServer, kube::Client) {
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let client = server.client();
    (server, client)
}

fn cm(data: Value) -> Value {
    let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}});
    obj["data"] = data;
    obj
}

/// (manager, operation, subresource) of each managedFields entry, as kube decodes them.
fn owners(meta: &ObjectMeta) -> Vec<(String, String, String)> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|e| {
            (
                e.manager.clone().unwrap_or_default(),
                e.operation.clone().unwrap_or_default(),
                e.subresource.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// The fieldsV1 of `manager`'s entry.
fn fields_of(meta: &ObjectMeta, manager: &str) -> Value {
    meta.managed_fields
        .iter()
        .flatten()
        .find(|e| e.manager.as_deref() == Some(manager))
        .and_then(|e| e.fields_v1.as_ref())
        .map_or(Value::Null, |f| f.0.clone())
}

fn entry(manager: &str, operation: &str, subresource: &str) -> (String, String, String) {
    (manager.into(), operation.into(), subresource.into())
}

#[tokio::test]
async fn overlapping_appliers_conflict_until_one_forces() {
    let (_server, client) = server();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let a = PatchParams::apply("manager-a");
    let b = PatchParams::apply("manager-b");
    cms.patch("shared", &a, &Patch::Apply(cm(json!({"x": "1", "y": "1"}))))
        .await
        .unwrap();

    let err = cms
        .patch("shared", &b, &Patch::Apply(cm(json!({"x": "2"}))))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        status.message,
        r#"Apply failed with 1 conflict: conflict with "manager-a": .data.x"#
    );
    let causes = status.details.unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(
        (
            causes[0].reason.as_str(),
            causes[0].field.as_str(),
            causes[0].message.as_str()
        ),
        ("FieldManagerConflict", ".data.x", r#"conflict with "manager-a""#)
    );
    assert_eq!(cms.get("shared").await.unwrap().data.unwrap()["x"], "1");

    // Applying the value already there is no conflict: the field is then shared.
    let shared = cms
        .patch("shared", &b, &Patch::Apply(cm(json!({"y": "1"}))))
        .await
        .unwrap();
    assert_eq!(
        fields_of(&shared.metadata, "manager-a"),
        json!({"f:data": {"f:x": {}, "f:y": {}}})
    );
    assert_eq!(
        fields_of(&shared.metadata, "manager-b"),
        json!({"f:data": {"f:y": {}}})
    );

    let forced = cms
        .patch(
            "shared",
            &b.clone().force(),
            &Patch::Apply(cm(json!({"x": "2", "y": "1"}))),
        )
        .await
        .unwrap();
    assert_eq!(forced.data.as_ref().unwrap()["x"], "2");
    assert_eq!(
        fields_of(&forced.metadata, "manager-a"),
        json!({"f:data": {"f:y": {}}})
    );
    assert_eq!(
        fields_of(&forced.metadata, "manager-b"),
        json!({"f:data": {"f:x": {}, "f:y": {}}})
    );

    // Now "manager-a" is the one that conflicts.
    let err = cms
        .patch("shared", &a, &Patch::Apply(cm(json!({"x": "1", "y": "1"}))))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.message.contains(r#""manager-b": .data.x"#)),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_field_an_applier_stops_applying_disappears_unless_shared() {
    let (_server, client) = server();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let a = PatchParams::apply("manager-a");
    cms.patch(
        "shared",
        &a,
        &Patch::Apply(cm(json!({"keep": "1", "drop": "1", "both": "1"}))),
    )
    .await
    .unwrap();
    cms.patch(
        "shared",
        &PatchParams::apply("manager-b"),
        &Patch::Apply(cm(json!({"both": "1"}))),
    )
    .await
    .unwrap();
    let after = cms
        .patch("shared", &a, &Patch::Apply(cm(json!({"keep": "1"}))))
        .await
        .unwrap();
    let data = after.data.unwrap();
    assert_eq!(
        data.keys().map(String::as_str).collect::<Vec<_>>(),
        ["both", "keep"]
    );
    assert_eq!(
        fields_of(&after.metadata, "manager-a"),
        json!({"f:data": {"f:keep": {}}})
    );
}

#[tokio::test]
async fn managed_fields_record_creators_updaters_and_appliers() {
    let (_server, client) = server();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = cms
        .create(
            &PostParams {
                field_manager: Some("creator".into()),
                ..PostParams::default()
            },
            &serde_json::from_value(
                json!({"metadata": {"name": "shared", "labels": {"app": "x"}}, "data": {"a": "1"}}),
            )
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(owners(&created.metadata), [entry("creator", "Update", "")]);
    assert_eq!(
        fields_of(&created.metadata, "creator"),
        json!({"f:data": {".": {}, "f:a": {}}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
    let patched = cms
        .patch(
            "shared",
            &PatchParams {
                field_manager: Some("editor".into()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"data": {"a": "2"}})),
        )
        .await
        .unwrap();
    let applied = cms
        .patch(
            "shared",
            &PatchParams::apply("applier"),
            &Patch::Apply(cm(json!({"b": "1"}))),
        )
        .await
        .unwrap();
    assert!(patched.metadata.resource_version < applied.metadata.resource_version);
    // Apply entries come first, then updates by time (and by name within a second).
    assert_eq!(
        owners(&applied.metadata),
        [
            entry("applier", "Apply", ""),
            entry("creator", "Update", ""),
            entry("editor", "Update", "")
        ]
    );
    assert_eq!(
        fields_of(&applied.metadata, "editor"),
        json!({"f:data": {"f:a": {}}})
    );
    assert_eq!(
        fields_of(&applied.metadata, "creator"),
        json!({"f:data": {}, "f:metadata": {"f:labels": {".": {}, "f:app": {}}}})
    );
    let time = applied.metadata.managed_fields.as_ref().unwrap()[0].time.clone();
    assert!(time.is_some(), "entries carry a time kube can parse");
}

#[tokio::test]
async fn a_no_op_apply_changes_nothing_and_emits_no_watch_event() {
    let (_server, client) = server();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PatchParams::apply("manager-a");
    let first = cms
        .patch("shared", &pp, &Patch::Apply(cm(json!({"x": "1"}))))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.clone().unwrap();
    let mut events = cms.watch(&WatchParams::default(), &rv).await.unwrap().boxed();

    let again = cms
        .patch("shared", &pp, &Patch::Apply(cm(json!({"x": "1"}))))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version.as_deref(), Some(rv.as_str()));
    assert_eq!(again.metadata.managed_fields, first.metadata.managed_fields);

    // The next event must be this real change: the no-op before it sent none.
    cms.patch("shared", &pp, &Patch::Apply(cm(json!({"x": "2"}))))
        .await
        .unwrap();
    let event = common::next_within(&mut events, "watch event for the real change")
        .await
        .expect("the watch is open");
    let WatchEvent::Modified(changed) = event else {
        panic!("{event:?}")
    };
    assert_eq!(changed.data.unwrap()["x"], "2");
}

/// A namespaced `Widget` kind with a status subresource, registered through the API.
async fn widgets(client: &kube::Client) -> Api<DynamicObject> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"},
                        "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}}}]}}))
    .unwrap();
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource::from_gvk_with_plural(&gvk, "widgets"),
    )
}

fn widget(body: Value) -> Patch<Value> {
    let mut w = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
    let Value::Object(fields) = body else {
        panic!("a widget body is an object")
    };
    w.as_object_mut().unwrap().extend(fields);
    Patch::Apply(w)
}

#[tokio::test]
async fn status_apply_leaves_the_spec_alone() {
    let (_server, client) = server();
    let api = widgets(&client).await;
    let created = api
        .patch(
            "w",
            &PatchParams::apply("owner"),
            &widget(json!({"spec": {"size": 1, "tags": ["a"]}})),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));

    // As a controller reports status: forced apply on /status, carrying a stale spec.
    let reported = api
        .patch_status(
            "w",
            &PatchParams::apply("controller").force(),
            &widget(json!({"spec": {"size": 99}, "status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    assert_eq!(reported.data["spec"], json!({"size": 1, "tags": ["a"]}));
    assert_eq!(reported.data["status"], json!({"phase": "Ready"}));
    assert_eq!(
        reported.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );
    // Both are appliers; within a second they are ordered by name.
    let mut who = owners(&reported.metadata);
    who.sort();
    assert_eq!(
        who,
        [
            entry("controller", "Apply", "status"),
            entry("owner", "Apply", "")
        ]
    );
    assert_eq!(
        fields_of(&reported.metadata, "controller"),
        json!({"f:status": {"f:phase": {}}})
    );

    // The main resource's apply neither sets nor removes status, and sets merge.
    let respec = api
        .patch(
            "w",
            &PatchParams::apply("other"),
            &widget(json!({"spec": {"tags": ["b"]}, "status": {"phase": "Lost"}})),
        )
        .await
        .unwrap();
    assert_eq!(respec.data["spec"]["tags"], json!(["a", "b"]));
    assert_eq!(respec.data["status"], json!({"phase": "Ready"}));
    assert_eq!(respec.metadata.generation, Some(2));

    // Custom resources take no strategic merge patch.
    let err = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 415 && s.reason == "UnsupportedMediaType"),
        "{err:?}"
    );
    // A field the schema does not declare fails the apply (a bare 500, as Kubernetes 1.33 answers),
    // where a create or update would have it pruned: a misspelt serde name shows up here.
    let err = api
        .patch(
            "w",
            &PatchParams::apply("owner"),
            &widget(json!({"spec": {"sise": 1}})),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 500 && s.message.ends_with(".spec.sise: field not declared in schema")),
        "{err:?}"
    );
    // Status apply to a missing object is a 404; apply of the wrong kind a 400.
    let err = api
        .patch_status(
            "nope",
            &PatchParams::apply("controller"),
            &widget(json!({"status": {"phase": "x"}})),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, kube::Error::Api(ref s) if s.code == 404), "{err:?}");
    let err = api
        .patch(
            "w",
            &PatchParams::apply("owner"),
            &Patch::Apply(
                json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "w"}}),
            ),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 400 && s.message == "invalid object type: example.com/v1, Kind=Gadget"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_resource_version_in_the_configuration_is_a_precondition() {
    let (_server, client) = server();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PatchParams::apply("manager-a");
    let first = cms
        .patch("shared", &pp, &Patch::Apply(cm(json!({"x": "1"}))))
        .await
        .unwrap();
    let rv = first.metadata.resource_version.unwrap();
    let mut current = cm(json!({"x": "2"}));
    current["metadata"]["resourceVersion"] = json!(rv);
    let updated = cms.patch("shared", &pp, &Patch::Apply(&current)).await.unwrap();
    assert_ne!(updated.metadata.resource_version.as_deref(), Some(rv.as_str()));
    // The same configuration again is now stale.
    current["data"]["x"] = json!("3");
    let err = cms
        .patch("shared", &pp, &Patch::Apply(&current))
        .await
        .unwrap_err();
    assert!(
        matches!(err, kube::Error::Api(ref s) if s.code == 409 && s.message.contains("the object has been modified")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_status_apply_that_owns_nothing_leaves_no_managed_fields() {
    let (_server, client) = server();
    let api = widgets(&client).await;
    // Applied with no fields, the object has no managedFields at all.
    let created = api
        .patch("w", &PatchParams::apply("owner"), &widget(json!({})))
        .await
        .unwrap();
    assert_eq!(created.metadata.managed_fields, None);
    // An empty status is set (a custom resource keeps it) but owned by nobody.
    let pp = PatchParams::apply("ctl").force();
    let first = api
        .patch_status("w", &pp, &widget(json!({"status": {}})))
        .await
        .unwrap();
    assert_eq!(first.data["status"], json!({}));
    assert_eq!(first.metadata.managed_fields, None, "not an empty list");
    let again = api
        .patch_status("w", &pp, &widget(json!({"status": {}})))
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version, first.metadata.resource_version);
}
