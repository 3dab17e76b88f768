//! Bodies built with the prost types, in the envelope client-go writes (`encode`).

use std::collections::BTreeMap;

use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::json;

use super::*;

#[allow(
    clippy::unnecessary_wraps,
    reason = "every optional string field of a prost message is an Option"
)]
fn s(v: &str) -> Option<String> {
    Some(v.to_owned())
}

/// Metadata as Go's marshaller writes it: every non-pointer field, empty ones included.
fn go_meta(name: &str) -> meta::ObjectMeta {
    meta::ObjectMeta {
        name: s(name),
        generate_name: s(""),
        namespace: s(""),
        self_link: s(""),
        uid: s(""),
        resource_version: s(""),
        generation: Some(0),
        creation_timestamp: Some(meta::Time::default()),
        ..Default::default()
    }
}

#[test]
fn a_namespace_decodes_to_the_json_kubectl_would_send() {
    let ns = core::Namespace {
        metadata: Some(meta::ObjectMeta {
            labels: BTreeMap::from([("team".into(), "a".into())]),
            ..go_meta("x")
        }),
        spec: Some(core::NamespaceSpec::default()),
        status: Some(core::NamespaceStatus {
            phase: s(""),
            ..Default::default()
        }),
    };
    let body = encode("v1", "Namespace", ns.encode_to_vec());
    assert_eq!(
        decode(&body).unwrap(),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x", "labels": {"team": "a"}},
               "spec": {}, "status": {}})
    );
}

#[test]
fn a_pod_keeps_pointer_zeros_and_drops_go_zero_values() {
    let container = core::Container {
        name: s("c"),
        image: s("nginx"),
        ports: vec![core::ContainerPort {
            container_port: Some(80),
            host_port: Some(0),
            protocol: s("TCP"),
            ..Default::default()
        }],
        resources: Some(core::ResourceRequirements {
            limits: BTreeMap::from([("cpu".into(), Quantity { string: s("500m") })]),
            ..Default::default()
        }),
        liveness_probe: Some(core::Probe {
            handler: Some(core::ProbeHandler {
                http_get: Some(core::HttpGetAction {
                    path: s("/healthz"),
                    port: Some(IntOrString {
                        r#type: Some(1),
                        int_val: Some(0),
                        str_val: s("http"),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            period_seconds: Some(0),
            ..Default::default()
        }),
        env: vec![core::EnvVar {
            name: s("K"),
            value_from: Some(core::EnvVarSource {
                config_map_key_ref: Some(core::ConfigMapKeySelector {
                    local_object_reference: Some(core::LocalObjectReference { name: s("cm") }),
                    key: s("k"),
                    optional: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }],
        stdin: Some(false),
        tty: Some(false),
        termination_message_path: s(""),
        ..Default::default()
    };
    let pod = core::Pod {
        metadata: Some(go_meta("p")),
        spec: Some(core::PodSpec {
            containers: vec![container],
            volumes: vec![core::Volume {
                name: s("data"),
                volume_source: Some(core::VolumeSource {
                    empty_dir: Some(core::EmptyDirVolumeSource::default()),
                    ..Default::default()
                }),
            }],
            host_network: Some(false),
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            node_name: s(""),
            ..Default::default()
        }),
        status: None,
    };
    let got = decode(&encode("v1", "Pod", pod.encode_to_vec())).unwrap();
    assert_eq!(got["metadata"], json!({"name": "p"}));
    assert_eq!(
        got["spec"],
        json!({
            "containers": [{
                "name": "c", "image": "nginx",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {"limits": {"cpu": "500m"}},
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                "env": [{"name": "K", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "k"}}}],
            }],
            "volumes": [{"name": "data", "emptyDir": {}}],
            // Pointers: zero and false mean something (no grace period; no token).
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": false,
        })
    );
    assert!(got.get("status").is_none(), "{got}");
}

#[test]
fn secret_bytes_are_base64_and_deployment_replicas_zero_is_kept() {
    let secret = core::Secret {
        metadata: Some(go_meta("s")),
        data: BTreeMap::from([("a".into(), b"b\x00c".to_vec())]),
        r#type: s("Opaque"),
        ..Default::default()
    };
    let got = decode(&encode("v1", "Secret", secret.encode_to_vec())).unwrap();
    assert_eq!(got["data"], json!({"a": "YgBj"}));
    assert_eq!(got["type"], "Opaque");

    let deployment = apps::Deployment {
        metadata: Some(go_meta("d")),
        spec: Some(apps::DeploymentSpec {
            replicas: Some(0),
            min_ready_seconds: Some(0),
            selector: Some(meta::LabelSelector {
                match_labels: BTreeMap::from([("app".into(), "d".into())]),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(apps::DeploymentStatus::default()),
    };
    let got = decode(&encode("apps/v1", "Deployment", deployment.encode_to_vec())).unwrap();
    assert_eq!(got["apiVersion"], "apps/v1");
    assert_eq!(got["spec"]["replicas"], 0, "{got}");
    assert!(got["spec"].get("minReadySeconds").is_none(), "{got}");
    assert_eq!(got["spec"]["selector"], json!({"matchLabels": {"app": "d"}}));
}

#[test]
fn delete_options_decode_from_any_group_version() {
    let options = meta::DeleteOptions {
        propagation_policy: s("Foreground"),
        grace_period_seconds: Some(0),
        preconditions: Some(meta::Preconditions {
            uid: s("u-1"),
            resource_version: None,
        }),
        ..Default::default()
    };
    for api_version in ["meta.k8s.io/v1", "v1", "apps/v1"] {
        let got = decode(&encode(api_version, "DeleteOptions", options.encode_to_vec())).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": api_version, "kind": "DeleteOptions", "propagationPolicy": "Foreground",
                   "gracePeriodSeconds": 0, "preconditions": {"uid": "u-1"}})
        );
    }
}

#[test]
fn a_kind_without_a_decoder_is_named_with_the_accepted_ones() {
    let body = encode("kubeovn.io/v1", "Subnet", Vec::new());
    let err = decode(&body).unwrap_err();
    assert!(matches!(err, ProtobufError::UnsupportedKind { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("not for Subnet (kubeovn.io/v1)"), "{text}");
    assert!(
        text.contains("Pod (v1)") && text.contains("Deployment (apps/v1)"),
        "{text}"
    );
    // The right kind at the wrong version is no better.
    assert!(matches!(
        decode(&encode("apps/v1beta1", "Deployment", Vec::new())),
        Err(ProtobufError::UnsupportedKind { .. })
    ));
}

#[test]
fn truncated_and_foreign_bodies_are_refused_without_a_panic() {
    let pod = core::Pod {
        metadata: Some(go_meta("p")),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: s("c"),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let raw = pod.encode_to_vec();
    // The message cut short: the envelope is whole, the Pod inside is not.
    let cut = encode("v1", "Pod", raw[..raw.len() - 3].to_vec());
    let err = decode(&cut).unwrap_err();
    assert!(
        matches!(&err, ProtobufError::Message { kind, .. } if kind == "Pod"),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("the Pod message is malformed"),
        "{err}"
    );
    // The envelope itself cut short, inside its `raw` field.
    let whole = encode("v1", "Pod", raw);
    assert!(matches!(
        decode(&whole[..whole.len() / 2]),
        Err(ProtobufError::Envelope(_))
    ));
    // JSON sent with a protobuf content type, and an envelope without a kind.
    assert_eq!(decode(br#"{"kind":"Pod"}"#), Err(ProtobufError::NoMagic));
    assert_eq!(decode(b"k8s\0"), Err(ProtobufError::NoKind));
    let gzipped = Unknown {
        type_meta: Some(TypeMeta {
            api_version: s("v1"),
            kind: s("Pod"),
        }),
        content_encoding: s("gzip"),
        ..Default::default()
    };
    assert_eq!(
        decode(&[MAGIC, &gzipped.encode_to_vec()].concat()),
        Err(ProtobufError::ContentEncoding("gzip".into()))
    );
    // Every prefix of a valid body, and every body with one byte changed, fails cleanly or
    // decodes; none panics.
    for n in 0..whole.len() {
        let _ = decode(&whole[..n]);
        for byte in [0x00, 0x01, 0x0a, 0x7f, 0x80, 0xff] {
            let mut changed = whole.clone();
            changed[n] = byte;
            let _ = decode(&changed);
        }
    }
}

#[test]
fn values_with_no_json_form_name_their_field() {
    let service = core::Service {
        metadata: Some(go_meta("svc")),
        spec: Some(core::ServiceSpec {
            ports: vec![core::ServicePort {
                port: Some(80),
                target_port: Some(IntOrString {
                    r#type: Some(7),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: None,
    };
    let err = decode(&encode("v1", "Service", service.encode_to_vec())).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Service message holds a value with no JSON form: spec.ports.target_port: \
         IntOrString type 7 is neither 0 (int) nor 1 (string)"
    );
    let cm = core::ConfigMap {
        metadata: Some(meta::ObjectMeta {
            managed_fields: vec![meta::ManagedFieldsEntry {
                fields_v1: Some(meta::FieldsV1 {
                    raw: Some(b"{not json".to_vec()),
                }),
                ..Default::default()
            }],
            ..go_meta("cm")
        }),
        ..Default::default()
    };
    let err = decode(&encode("v1", "ConfigMap", cm.encode_to_vec())).unwrap_err();
    assert!(
        err.to_string()
            .contains("metadata.managed_fields.fields_v1: fieldsV1 is not JSON"),
        "{err}"
    );
}
