//! kubectl's typed commands against `kube-ovn-lab apiserver` over TCP: `create namespace`, `run`,
//! `create deployment|configmap|secret generic|serviceaccount`, `expose`, `label`, `annotate`,
//! `scale`, `delete`. kubectl's typed clients send Kubernetes protobuf
//! (`application/vnd.kubernetes.protobuf`), which the emulator once refused with 415. Every object
//! is read back, with kubectl and with a kube client. Then the same bodies over HTTP: what a bad
//! protobuf body, an unsupported kind and a protobuf-only Accept get.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use axum::body::Body;
use axum::http::Request;
use common::LabProcess;
use common::kubectl::Kubectl;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service, ServiceAccount};
use kube::api::Api;
use kube::{Resource, ResourceExt};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig, protobuf};
use prost::Message;
use serde_json::{Value, json};
use tower::ServiceExt;

fn labels(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_creates_changes_and_deletes_built_in_objects() {
    let dir = tempfile::tempdir().unwrap();
    let lab = LabProcess::start(dir.path(), &[]).unwrap();
    let kubectl = Kubectl::new(&lab.kubeconfig, &dir.path().join("kube-cache"));
    let client = lab.client();

    // create namespace: the request is protobuf (kubectl's own log says so), the object is there.
    let out = kubectl
        .command(&["create", "namespace", "shop", "-v=8"])
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kubectl create namespace failed: {log}");
    assert!(
        log.contains("Content-Type: application/vnd.kubernetes.protobuf"),
        "kubectl sent no protobuf body, so this test does not test protobuf: {log}"
    );
    let ns = kubectl.get_json(&["namespace", "shop"]);
    assert_eq!(ns["status"]["phase"], "Active", "{ns}");
    let namespaces: Api<Namespace> = Api::all(client.clone());
    assert_eq!(
        namespaces.get("shop").await.unwrap().uid().as_deref(),
        ns["metadata"]["uid"].as_str()
    );

    // run: a Pod with labels, a port and an environment variable.
    kubectl.run(&[
        "run",
        "web",
        "-n",
        "shop",
        "--image=nginx:1.27",
        "--labels=app=web,tier=front",
        "--port=8080",
        "--env=MODE=prod",
    ]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "shop");
    let pod = pods.get("web").await.unwrap();
    assert_eq!(pod.labels(), &labels(&[("app", "web"), ("tier", "front")]));
    let c = &pod.spec.as_ref().unwrap().containers[0];
    assert_eq!(c.image.as_deref(), Some("nginx:1.27"));
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8080);
    let env = &c.env.as_ref().unwrap()[0];
    assert_eq!((env.name.as_str(), env.value.as_deref()), ("MODE", Some("prod")));
    assert_eq!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Pending")
    );

    // create deployment: replicas, selector and template as kubectl builds them, with defaults.
    kubectl.run(&[
        "create",
        "deployment",
        "api",
        "-n",
        "shop",
        "--image=registry.example/api:2",
        "--replicas=2",
        "--port=9000",
    ]);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "shop");
    let d = deployments.get("api").await.unwrap();
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(
        spec.selector.match_labels.as_ref(),
        Some(&labels(&[("app", "api")]))
    );
    let template = spec.template.spec.as_ref().unwrap();
    assert_eq!(
        template.containers[0].image.as_deref(),
        Some("registry.example/api:2")
    );
    assert_eq!(
        template.containers[0].ports.as_ref().unwrap()[0].container_port,
        9000
    );
    assert_eq!(
        spec.strategy.as_ref().and_then(|s| s.type_.as_deref()),
        Some("RollingUpdate")
    );
    assert_eq!(d.meta().generation, Some(1));

    // expose: kubectl reads the deployment and creates a Service selecting its pods.
    kubectl.run(&[
        "expose",
        "deployment",
        "api",
        "-n",
        "shop",
        "--port=80",
        "--target-port=9000",
    ]);
    let services: Api<Service> = Api::namespaced(client.clone(), "shop");
    let svc = services.get("api").await.unwrap();
    let svc_spec = svc.spec.as_ref().unwrap();
    assert_eq!(svc_spec.selector.as_ref(), Some(&labels(&[("app", "api")])));
    assert_eq!(svc_spec.type_.as_deref(), Some("ClusterIP"));
    let port = &svc_spec.ports.as_ref().unwrap()[0];
    assert_eq!((port.port, port.protocol.as_deref()), (80, Some("TCP")));
    assert_eq!(serde_json::to_value(&port.target_port).unwrap(), json!(9000));

    // create configmap, secret generic and serviceaccount.
    kubectl.run(&[
        "create",
        "configmap",
        "settings",
        "-n",
        "shop",
        "--from-literal=color=blue",
        "--from-literal=size=9",
    ]);
    let cm = Api::<ConfigMap>::namespaced(client.clone(), "shop")
        .get("settings")
        .await
        .unwrap();
    assert_eq!(cm.data, Some(labels(&[("color", "blue"), ("size", "9")])));
    kubectl.run(&[
        "create",
        "secret",
        "generic",
        "creds",
        "-n",
        "shop",
        "--from-literal=user=admin",
        "--from-literal=pass=p@ss w0rd",
    ]);
    let secret = Api::<Secret>::namespaced(client.clone(), "shop")
        .get("creds")
        .await
        .unwrap();
    let data = secret.data.as_ref().unwrap();
    assert_eq!(data["user"].0, b"admin");
    assert_eq!(data["pass"].0, b"p@ss w0rd");
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        kubectl.run(&[
            "get",
            "secret",
            "creds",
            "-n",
            "shop",
            "-o",
            "jsonpath={.data.user}"
        ]),
        "YWRtaW4="
    );
    kubectl.run(&["create", "serviceaccount", "robot", "-n", "shop"]);
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), "shop")
        .get("robot")
        .await
        .unwrap();
    assert_eq!(sa.name_any(), "robot");

    // label and annotate built-in objects (merge patches).
    kubectl.run(&["label", "pod", "web", "-n", "shop", "release=canary"]);
    kubectl.run(&["annotate", "deployment", "api", "-n", "shop", "owner=team-a"]);
    let pod = pods.get("web").await.unwrap();
    assert_eq!(pod.labels().get("release").map(String::as_str), Some("canary"));
    let d = deployments.get("api").await.unwrap();
    assert_eq!(d.annotations().get("owner").map(String::as_str), Some("team-a"));
    assert_eq!(
        d.meta().generation,
        Some(1),
        "metadata changes keep the generation"
    );
    assert_eq!(
        kubectl
            .run(&["get", "pods", "-n", "shop", "-l", "release=canary", "-o", "name"])
            .trim(),
        "pod/web"
    );

    // scale: through the deployment's /scale subresource.
    kubectl.run(&["scale", "deployment", "api", "-n", "shop", "--replicas=5"]);
    let d = deployments.get("api").await.unwrap();
    assert_eq!(d.spec.as_ref().unwrap().replicas, Some(5));
    assert_eq!(d.meta().generation, Some(2), "a replica change is a spec change");
    let scale: Value = serde_json::from_str(&kubectl.run(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/shop/deployments/api/scale",
    ]))
    .unwrap();
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["selector"], "app=api");
    // kubectl checks --current-replicas against the Scale it reads.
    let err = kubectl.fail(&[
        "scale",
        "deployment",
        "api",
        "-n",
        "shop",
        "--current-replicas=2",
        "--replicas=1",
    ]);
    assert!(err.contains("Expected replicas to be 2, was 5"), "{err}");
    assert_eq!(
        deployments.get("api").await.unwrap().spec.unwrap().replicas,
        Some(5)
    );

    // delete: each kind, then the namespace.
    for (kind, name) in [
        ("pod", "web"),
        ("deployment", "api"),
        ("service", "api"),
        ("configmap", "settings"),
        ("secret", "creds"),
        ("serviceaccount", "robot"),
    ] {
        let out = kubectl.run(&["delete", kind, name, "-n", "shop"]);
        assert!(out.contains(&format!("\"{name}\" deleted")), "{out}");
        assert!(
            kubectl
                .fail(&["get", kind, name, "-n", "shop"])
                .contains("NotFound"),
            "{kind}/{name} is still there"
        );
    }
    assert!(pods.get_opt("web").await.unwrap().is_none());
    assert!(deployments.get_opt("api").await.unwrap().is_none());
    assert!(services.get_opt("api").await.unwrap().is_none());
    kubectl.run(&["delete", "namespace", "shop"]);
    assert!(namespaces.get_opt("shop").await.unwrap().is_none());
}

/// One request to an in-process emulator: status code, `Content-Type` and JSON body.
async fn request(
    server: &ApiServer,
    method: &str,
    uri: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, String, Value) {
    let mut req = Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = server
        .router()
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let ct = resp
        .headers()
        .get("content-type")
        .map(|c| c.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
    (code, ct, serde_json::from_slice(&bytes).unwrap())
}

const PROTOBUF: (&str, &str) = ("content-type", "application/vnd.kubernetes.protobuf");
const KUBECTL_ACCEPT: (&str, &str) = ("accept", "application/vnd.kubernetes.protobuf,application/json");

#[tokio::test]
async fn protobuf_bodies_over_http() {
    use k8s_pb::api::core::v1 as pb;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
    let server = ApiServer::new(ApiServerConfig::default()).unwrap();
    let pod = pb::Pod {
        metadata: Some(pb_meta::ObjectMeta {
            name: Some("p".into()),
            ..Default::default()
        }),
        spec: Some(pb::PodSpec {
            containers: vec![pb::Container {
                name: Some("c".into()),
                image: Some("busybox".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    }
    .encode_to_vec();
    let pods = "/api/v1/namespaces/default/pods";

    // A client that accepts only protobuf is told so before anything is written.
    let only_pb = ("accept", "application/vnd.kubernetes.protobuf");
    let (code, _, body) = request(
        &server,
        "POST",
        pods,
        &[PROTOBUF, only_pb],
        protobuf::encode("v1", "Pod", pod.clone()),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (406, Some("NotAcceptable")),
        "{body}"
    );
    assert!(
        server
            .store()
            .get(
                &server.store().resource("", "v1", "pods").unwrap(),
                Some("default"),
                "p"
            )
            .is_err()
    );

    // kubectl's Accept: the answer is JSON, the object as a JSON client would have made it.
    let (code, ct, body) = request(
        &server,
        "POST",
        pods,
        &[PROTOBUF, KUBECTL_ACCEPT],
        protobuf::encode("v1", "Pod", pod.clone()),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    assert_eq!(ct, "application/json");
    assert_eq!(
        body["spec"]["containers"],
        json!([{"name": "c", "image": "busybox"}])
    );
    assert_eq!(body["status"]["phase"], "Pending");

    // A truncated message: 400 naming the kind; nothing stored.
    let (code, _, body) = request(
        &server,
        "POST",
        pods,
        &[PROTOBUF],
        protobuf::encode("v1", "Pod", pod[..pod.len() - 4].to_vec()),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (400, Some("BadRequest")),
        "{body}"
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("(Pod, application/vnd.kubernetes.protobuf)")
            && message.contains("the Pod message is malformed"),
        "{message}"
    );

    // A kind the emulator decodes, sent to another kind's URL: the store's kind check.
    let ns = pb::Namespace {
        metadata: Some(pb_meta::ObjectMeta {
            name: Some("n".into()),
            ..Default::default()
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let (code, _, body) = request(
        &server,
        "POST",
        pods,
        &[PROTOBUF],
        protobuf::encode("v1", "Namespace", ns),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("the kind in the data (Namespace) does not match the expected kind (Pod)"),
        "{body}"
    );

    // A kind without a decoder: 415, naming it and what is accepted.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
    let (code, _, body) = request(
        &server,
        "POST",
        leases,
        &[PROTOBUF],
        protobuf::encode("coordination.k8s.io/v1", "Lease", Vec::new()),
    )
    .await;
    assert_eq!(
        (code, body["reason"].as_str()),
        (415, Some("UnsupportedMediaType")),
        "{body}"
    );
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("not for Lease (coordination.k8s.io/v1)"),
        "{body}"
    );

    // DeleteOptions in protobuf are read: a wrong uid precondition refuses the delete.
    let options = pb_meta::DeleteOptions {
        preconditions: Some(pb_meta::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    }
    .encode_to_vec();
    let (code, _, body) = request(
        &server,
        "DELETE",
        &format!("{pods}/p"),
        &[PROTOBUF],
        protobuf::encode("meta.k8s.io/v1", "DeleteOptions", options),
    )
    .await;
    assert_eq!((code, body["reason"].as_str()), (409, Some("Conflict")), "{body}");
    let (code, _, _) = request(
        &server,
        "DELETE",
        &format!("{pods}/p"),
        &[PROTOBUF],
        protobuf::encode("meta.k8s.io/v1", "DeleteOptions", Vec::new()),
    )
    .await;
    assert_eq!(code, 200);
}
