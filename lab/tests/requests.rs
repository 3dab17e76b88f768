//! Bad requests through the emulator's HTTP face (in process, the same router that serves TCP):
//! each gets a `metav1.Status` with the real server's code and reason and a message naming the
//! problem; random garbage never panics and never gets anything but a Status.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::path::Path;

use axum::body::Body;
use axum::http::Request;
use common::{assert_status, install_crds, raw};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig};
use kube_ovn_testkit::drill::Rng;
use serde_json::{Value, json};
use tower::ServiceExt;

fn server() -> ApiServer {
    ApiServer::new(ApiServerConfig::default()).unwrap()
}

use common::JSON;

#[tokio::test]
async fn unknown_groups_versions_and_kinds_are_404() {
    let s = server();
    for (uri, mentions) in [
        ("/apis/nope.example.io/v1/things", "nope.example.io/v1"),
        ("/apis/nope.example.io/v1", "nope.example.io/v1"),
        ("/apis/nope.example.io", "nope.example.io"),
        ("/apis/apps/v1/replicasets", "apps/v1"),
        ("/api/v2/pods", "v2"),
        ("/api/v1/frobnicators", "frobnicators"),
        ("/api/v1/namespaces/default/frobnicators", "frobnicators"),
        (
            "/apis/coordination.k8s.io/v2/namespaces/default/leases",
            "coordination.k8s.io/v2",
        ),
        ("/api/v1/namespaces/default/configmaps/x/scale", "scale"),
        ("/api/v1/namespaces/default/configmaps/x/status/deeper", "/deeper"),
        ("/no/such/path", "/no/such/path"),
        ("/openapi/v3/apis/nope.example.io/v1", "nope.example.io/v1"),
        ("/openapi/v2", "/openapi/v2"),
    ] {
        assert_status(&raw(&s, "GET", uri, None, b"").await, 404, "NotFound", mentions);
    }
    // A missing object names itself, as clients print it.
    assert_status(
        &raw(
            &s,
            "GET",
            "/api/v1/namespaces/default/configmaps/ghost",
            None,
            b"",
        )
        .await,
        404,
        "NotFound",
        "configmaps \"ghost\" not found",
    );
    // Objects in a namespace that does not exist cannot be created.
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}).to_string();
    assert_status(
        &raw(
            &s,
            "POST",
            "/api/v1/namespaces/nowhere/configmaps",
            JSON,
            cm.as_bytes(),
        )
        .await,
        404,
        "NotFound",
        "namespaces \"nowhere\" not found",
    );
}

#[tokio::test]
async fn malformed_bodies_are_400_naming_the_problem() {
    let s = server();
    let uri = "/api/v1/namespaces/default/configmaps";
    assert_status(
        &raw(&s, "POST", uri, JSON, b"{\"metadata\": ").await,
        400,
        "BadRequest",
        "JSON",
    );
    assert_status(
        &raw(&s, "POST", uri, JSON, b"[1, 2]").await,
        400,
        "BadRequest",
        "object",
    );
    assert_status(
        &raw(&s, "POST", uri, JSON, b"\xff\xfe").await,
        400,
        "BadRequest",
        "UTF-8",
    );
    assert_status(
        &raw(&s, "POST", uri, Some("application/yaml"), b"metadata: [unclosed").await,
        400,
        "BadRequest",
        "YAML",
    );
    let wrong_kind = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}).to_string();
    assert_status(
        &raw(&s, "POST", uri, JSON, wrong_kind.as_bytes()).await,
        400,
        "BadRequest",
        "Secret",
    );
    let wrong_version =
        json!({"apiVersion": "v2", "kind": "ConfigMap", "metadata": {"name": "a"}}).to_string();
    assert_status(
        &raw(&s, "POST", uri, JSON, wrong_version.as_bytes()).await,
        400,
        "BadRequest",
        "v2",
    );
    let bad_name = json!({"metadata": {"name": "Not_A_Name"}}).to_string();
    assert_status(
        &raw(&s, "POST", uri, JSON, bad_name.as_bytes()).await,
        422,
        "Invalid",
        "metadata.name",
    );
    let no_name = json!({"metadata": {}}).to_string();
    assert_status(
        &raw(&s, "POST", uri, JSON, no_name.as_bytes()).await,
        422,
        "Invalid",
        "metadata.name",
    );
    // A JSON patch that is not a list of operations.
    let good = json!({"metadata": {"name": "a"}}).to_string();
    assert_eq!(raw(&s, "POST", uri, JSON, good.as_bytes()).await.0, 201);
    assert_status(
        &raw(
            &s,
            "PATCH",
            &format!("{uri}/a"),
            Some("application/json-patch+json"),
            b"{\"op\": \"add\"}",
        )
        .await,
        422,
        "Invalid",
        "array",
    );
    // Query parameters are checked too.
    for (query, mentions) in [
        ("labelSelector=a%20in%20(b", "a in (b"),
        ("fieldSelector=spec.nothing%3Dx", "spec.nothing"),
        ("limit=many", "many"),
        ("continue=not-a-token", "continue"),
        ("watch=true&resourceVersion=yesterday", "yesterday"),
        ("propagationPolicy=Sideways", "Sideways"),
    ] {
        let method = if query.starts_with("propagation") {
            "DELETE"
        } else {
            "GET"
        };
        let target = if method == "DELETE" {
            format!("{uri}/a")
        } else {
            uri.to_owned()
        };
        assert_status(
            &raw(&s, method, &format!("{target}?{query}"), None, b"").await,
            400,
            "BadRequest",
            mentions,
        );
    }
}

#[tokio::test]
async fn wrong_content_types_are_415() {
    let s = server();
    let uri = "/api/v1/namespaces/default/configmaps";
    let cm = json!({"metadata": {"name": "a"}}).to_string();
    for ct in [
        "text/plain",
        // Kubernetes' CBOR encoding (1.32+): the emulator decodes JSON, YAML and protobuf only.
        "application/cbor",
        "application/merge-patch+json",
    ] {
        assert_status(
            &raw(&s, "POST", uri, Some(ct), cm.as_bytes()).await,
            415,
            "UnsupportedMediaType",
            ct,
        );
    }
    // Protobuf is accepted, and JSON labelled as protobuf is refused as not protobuf.
    assert_status(
        &raw(
            &s,
            "POST",
            uri,
            Some("application/vnd.kubernetes.protobuf"),
            cm.as_bytes(),
        )
        .await,
        400,
        "BadRequest",
        "(ConfigMap, application/vnd.kubernetes.protobuf) cannot be decoded: the body does not start with the Kubernetes protobuf prefix",
    );
    assert_eq!(raw(&s, "POST", uri, JSON, cm.as_bytes()).await.0, 201);
    // A PATCH must say which kind of patch it is: plain JSON is not one.
    for ct in ["application/json", "text/plain"] {
        assert_status(
            &raw(&s, "PATCH", &format!("{uri}/a"), Some(ct), b"{}").await,
            415,
            "UnsupportedMediaType",
            ct,
        );
    }
}

#[tokio::test]
async fn method_and_path_shape_errors_are_405() {
    let s = server();
    let cm = json!({"metadata": {"name": "a"}}).to_string();
    assert_status(
        &raw(
            &s,
            "POST",
            "/api/v1/namespaces/default/configmaps/a",
            JSON,
            cm.as_bytes(),
        )
        .await,
        405,
        "MethodNotAllowed",
        "POST",
    );
    assert_status(
        &raw(
            &s,
            "PUT",
            "/api/v1/namespaces/default/configmaps",
            JSON,
            cm.as_bytes(),
        )
        .await,
        405,
        "MethodNotAllowed",
        "PUT",
    );
    assert_status(
        &raw(
            &s,
            "PATCH",
            "/api/v1/namespaces/default/configmaps",
            Some("application/merge-patch+json"),
            b"{}",
        )
        .await,
        405,
        "MethodNotAllowed",
        "PATCH",
    );
    assert_status(
        &raw(&s, "OPTIONS", "/api/v1/namespaces/default/configmaps", None, b"").await,
        405,
        "MethodNotAllowed",
        "OPTIONS",
    );
}

/// Every document in `examples/invalid/` is refused with 422 `Invalid`, the cause naming the
/// field its comment says it breaks; nothing is stored.
#[tokio::test]
async fn schema_violations_are_422_naming_the_field() {
    let s = server();
    install_crds(&s.client()).await.unwrap();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/invalid/invalid.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(path).unwrap()).unwrap();
    let expected = [
        ("vlan-too-big", "spec.id"),
        ("dnat-bad-type", "spec.type"),
        ("pool-without-ips", "spec.ips"),
        ("physnet-long", "spec.defaultInterface"),
        ("subnet-bad-mtu", "spec.mtu"),
    ];
    assert_eq!(docs.len(), expected.len());
    for (doc, (name, field)) in docs.iter().zip(expected) {
        assert_eq!(doc["metadata"]["name"], name);
        let kind = doc["kind"].as_str().unwrap();
        let res = s
            .store()
            .resources()
            .into_iter()
            .find(|r| r.group == "kubeovn.io" && r.kind == kind)
            .unwrap();
        let uri = format!("/apis/kubeovn.io/v1/{}", res.plural);
        let answer = raw(&s, "POST", &uri, JSON, doc.to_string().as_bytes()).await;
        assert_status(&answer, 422, "Invalid", field);
        let causes = answer.1["details"]["causes"].as_array().unwrap();
        assert!(
            causes.iter().any(|c| c["field"] == field),
            "{name}: no cause names {field}: {causes:?}"
        );
        assert_eq!(answer.1["details"]["kind"], kind);
        assert_eq!(answer.1["details"]["name"], name);
        assert_status(
            &raw(&s, "GET", &format!("{uri}/{name}"), None, b"").await,
            404,
            "NotFound",
            name,
        );
    }
}

/// Random methods, paths, content types and bodies: every answer is JSON, and every failure is a
/// Status whose code is the HTTP code. A panic in the handler would fail the test.
#[tokio::test]
async fn garbage_never_panics_and_always_gets_a_status() {
    let s = server();
    install_crds(&s.client()).await.unwrap();
    let mut rng = Rng::new(common::seed(0x6a7b_a6e0));
    let methods = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"];
    let segments = [
        "api",
        "apis",
        "v1",
        "v2",
        "namespaces",
        "default",
        "configmaps",
        "status",
        "kubeovn.io",
        "subnets",
        "",
        "..",
        "%00",
        "a%2Fb",
        "watch",
    ];
    // Mostly well-formed paths, so requests get past routing into the verbs; some garbage.
    let prefixes = [
        "/api/v1/namespaces/default/configmaps",
        "/api/v1/namespaces/default/pods",
        "/api/v1/namespaces/nowhere/pods",
        "/api/v1/namespaces",
        "/api/v1/nodes",
        "/apis/kubeovn.io/v1/subnets",
        "/apis/kubeovn.io/v1/vips",
        "/apis/kubeovn.io/v1/namespaces/default/subnets",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "/apis/events.k8s.io/v1/namespaces/default/events",
    ];
    let tails = [
        "",
        "/x",
        "/x/status",
        "/x/finalize",
        "/default",
        "/default/finalize",
        "/x/y/z",
    ];
    let content_types = [
        None,
        Some("application/json"),
        Some("application/yaml"),
        Some("application/merge-patch+json"),
        Some("application/json-patch+json"),
        Some("application/strategic-merge-patch+json"),
        Some("application/apply-patch+yaml"),
        Some("application/vnd.kubernetes.protobuf"),
        Some("text/plain; charset=utf-8"),
    ];
    let bodies: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"{}".to_vec(),
        b"null".to_vec(),
        b"[]".to_vec(),
        b"{\"metadata\": {\"name\": \"x\"}}".to_vec(),
        b"{\"metadata\": \"x\"}".to_vec(),
        b"{\"metadata\": {\"name\": \"x\", \"finalizers\": \"oops\", \"labels\": [1]}}".to_vec(),
        b"{\"apiVersion\": \"kubeovn.io/v1\", \"kind\": \"Subnet\", \"metadata\": {\"name\": \"x\"}, \"spec\": {\"mtu\": []}}".to_vec(),
        b"[{\"op\": \"remove\", \"path\": \"/metadata\"}]".to_vec(),
        b"[{\"op\": \"replace\", \"path\": \"\", \"value\": 5}]".to_vec(),
        b"{\"metadata\": null, \"spec\": null}".to_vec(),
        b"\x00\x01\x02".to_vec(),
        b"- a\n- b\n".to_vec(),
    ];
    let queries = [
        "",
        "?watch=0",
        "?limit=1",
        "?labelSelector=!a",
        "?fieldSelector=metadata.name%3Dx",
        "?dryRun=All",
    ];
    // Objects named `x` exist (again) before each request, so writes reach the patch and update
    // code with garbage rather than stopping at NotFound.
    let seeds = [
        (
            "/api/v1/namespaces/default/configmaps",
            json!({"metadata": {"name": "x"}, "data": {"a": "b"}}),
        ),
        (
            "/api/v1/namespaces/default/pods",
            json!({"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c"}]}}),
        ),
        (
            "/apis/kubeovn.io/v1/subnets",
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "x"}, "spec": {"cidrBlock": "10.0.0.0/24"}}),
        ),
    ];
    for _ in 0..1500 {
        for (uri, obj) in &seeds {
            raw(&s, "POST", uri, JSON, obj.to_string().as_bytes()).await;
        }
        let method = *rng.pick(&methods);
        let path = if rng.below(5) == 0 {
            let depth = 1 + rng.below(6);
            let path: Vec<&str> = (0..depth).map(|_| *rng.pick(&segments)).collect();
            format!("/{}", path.join("/"))
        } else {
            format!("{}{}", rng.pick(&prefixes), rng.pick(&tails))
        };
        let uri = format!("{path}{}", rng.pick(&queries));
        let body = rng.pick(&bodies).clone();
        let ct = *rng.pick(&content_types);
        let Ok(request) = Request::builder()
            .method(method)
            .uri(&uri)
            .body(Body::from(body.clone()))
        else {
            continue;
        };
        let mut request = request;
        if let Some(ct) = ct {
            request.headers_mut().insert("content-type", ct.parse().unwrap());
        }
        let resp = s.router().oneshot(request).await.unwrap();
        let code = resp.status().as_u16();
        let bytes = axum::body::to_bytes(resp.into_body(), 16 << 20).await.unwrap();
        let what = format!(
            "{method} {uri} ({ct:?}, {:?}) → {code}",
            String::from_utf8_lossy(&body)
        );
        assert!(
            code < 500,
            "{what}: a server error: {}",
            String::from_utf8_lossy(&bytes)
        );
        if method == "HEAD" {
            continue;
        }
        if uri.contains("watch=") && code == 200 {
            continue;
        }
        let value: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "{what}: body is not JSON ({e}): {:?}",
                String::from_utf8_lossy(&bytes)
            )
        });
        if code >= 400 {
            assert_eq!(value["kind"], "Status", "{what}: {value}");
            assert_eq!(value["code"], code, "{what}: {value}");
            assert!(
                value["message"].as_str().is_some_and(|m| !m.is_empty()),
                "{what}: {value}"
            );
        }
    }
}
