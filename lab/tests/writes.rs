//! Writes through the HTTP face that carry options: server-side apply (its content type, the
//! required `fieldManager`, create then update, YAML or kube's JSON `Patch::Apply`) and
//! `fieldValidation` (Strict, Warn with its `Warning` header, Ignore).

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use axum::body::Body;
use axum::http::Request;
use common::{JSON, assert_status, install_crds, raw};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use serde_json::json;
use tower::ServiceExt;

fn server() -> ApiServer {
    ApiServer::new(ApiServerConfig::default()).unwrap()
}

#[tokio::test]
async fn apply_over_http_needs_a_field_manager_then_creates_and_updates() {
    let s = server();
    let uri = "/api/v1/namespaces/default/configmaps/applied";
    let yaml = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  a: \"1\"\n";
    let apply = Some("application/apply-patch+yaml");
    assert_status(
        &raw(&s, "PATCH", uri, apply, yaml).await,
        400,
        "BadRequest",
        "fieldManager",
    );
    assert_status(&raw(&s, "GET", uri, None, b"").await, 404, "NotFound", "applied");
    // A YAML body, as kubectl apply --server-side sends it: the first apply creates (201).
    let (code, created) = raw(&s, "PATCH", &format!("{uri}?fieldManager=lab"), apply, yaml).await;
    assert_eq!(code, 201, "{created}");
    assert_eq!(created["data"], json!({"a": "1"}));
    // Apply to /status of a missing object is NotFound, not a create.
    assert_status(
        &raw(
            &s,
            "PATCH",
            "/api/v1/namespaces/default/pods/ghost/status?fieldManager=lab",
            apply,
            b"{}",
        )
        .await,
        404,
        "NotFound",
        "ghost",
    );
    // kube's Patch::Apply (JSON body with the apply content type) updates it (200).
    let api: Api<ConfigMap> = Api::namespaced(s.client(), "default");
    let patch =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "2"}});
    let updated = api
        .patch("applied", &PatchParams::apply("lab"), &Patch::Apply(&patch))
        .await
        .unwrap();
    assert_eq!(updated.data.unwrap()["a"], "2");
    assert_ne!(
        updated.metadata.resource_version.as_deref(),
        created["metadata"]["resourceVersion"].as_str()
    );
    let missing_manager = api
        .patch("applied", &PatchParams::default(), &Patch::Apply(&patch))
        .await
        .unwrap_err();
    assert!(
        matches!(&missing_manager, kube::Error::Api(s) if s.code == 400 && s.message.contains("fieldManager")),
        "{missing_manager:?}"
    );
}

/// `fieldValidation` on a custom resource: the default (Warn) stores the object pruned and says
/// so in a `Warning` header; Strict refuses it naming the field; Ignore is silent.
#[tokio::test]
async fn field_validation_strict_warn_and_ignore() {
    let s = server();
    install_crds(&s.client()).await.unwrap();
    let vlan = |name: &str| {
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vlan", "metadata": {"name": name},
               "spec": {"id": 7, "provider": "p", "vid": 1}})
        .to_string()
    };
    let post = |query: &str, body: String| {
        let request = Request::builder()
            .method("POST")
            .uri(format!("/apis/kubeovn.io/v1/vlans{query}"))
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        s.router().oneshot(request)
    };
    let strict = raw(
        &s,
        "POST",
        "/apis/kubeovn.io/v1/vlans?fieldValidation=Strict",
        JSON,
        vlan("a").as_bytes(),
    )
    .await;
    assert_status(
        &strict,
        400,
        "BadRequest",
        "strict decoding error: unknown field \"spec.vid\"",
    );
    let warned = post("", vlan("b")).await.unwrap();
    assert_eq!(warned.status().as_u16(), 201);
    let warnings: Vec<&str> = warned
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect();
    assert_eq!(warnings, [r#"299 - "unknown field \"spec.vid\"""#]);
    let ignored = post("?fieldValidation=Ignore", vlan("c")).await.unwrap();
    assert_eq!(ignored.status().as_u16(), 201);
    assert!(ignored.headers().get("warning").is_none());
    let (_, stored) = raw(&s, "GET", "/apis/kubeovn.io/v1/vlans/b", None, b"").await;
    assert_eq!(
        stored["spec"],
        json!({"id": 7, "provider": "p"}),
        "unknown fields are pruned"
    );
    assert_status(
        &raw(
            &s,
            "POST",
            "/apis/kubeovn.io/v1/vlans?fieldValidation=Loose",
            JSON,
            vlan("d").as_bytes(),
        )
        .await,
        400,
        "BadRequest",
        "Loose",
    );
}
