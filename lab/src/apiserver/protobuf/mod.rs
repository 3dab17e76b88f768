//! Kubernetes' protobuf request bodies (`application/vnd.kubernetes.protobuf`), which kubectl's
//! typed clients send (`kubectl create namespace|deployment|configmap|secret|service…`).
//!
//! A body is the four bytes `k8s\0` and a `runtime.Unknown`: the object's `apiVersion` and `kind`,
//! and its message as `raw` bytes. The message is decoded with the prost types of `k8s-pb`,
//! converted to the `k8s-openapi` type of the same kind (`convert`), and that type's serde form is
//! the JSON object every other part of the emulator works on: validation, defaults, managedFields
//! and watches see no difference from a JSON client. Answers stay JSON (every protobuf client also
//! accepts JSON; `http` refuses a request that accepts nothing else).
//!
//! Pure: no I/O.

mod apps_v1;
pub mod convert;
mod core_v1;
mod meta_v1;

use k8s_openapi::api::apps::v1 as oa_apps;
use k8s_openapi::api::autoscaling::v1 as oa_autoscaling;
use k8s_openapi::api::core::v1 as oa_core;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as oa_meta;
use k8s_pb::api::apps::v1 as pb_apps;
use k8s_pb::api::autoscaling::v1 as pb_autoscaling;
use k8s_pb::api::core::v1 as pb_core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::Value;

use self::convert::{ConvertError, FromPb};

/// The media type of Kubernetes' protobuf encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// What every protobuf body starts with (`runtime/serializer/protobuf`).
const MAGIC: &[u8] = b"k8s\0";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body does not start with the Kubernetes protobuf prefix \"k8s\\x00\"")]
    NoMagic,
    #[error("the runtime.Unknown envelope is malformed: {0}")]
    Envelope(prost::DecodeError),
    #[error("the runtime.Unknown envelope names no kind (typeMeta.kind is empty)")]
    NoKind,
    #[error("the runtime.Unknown envelope's contentEncoding {0:?} is not supported (only none)")]
    ContentEncoding(String),
    #[error("protobuf bodies are accepted for {accepted}, not for {kind} ({api_version}); send it as JSON")]
    UnsupportedKind {
        api_version: String,
        kind: String,
        accepted: String,
    },
    #[error("the {kind} message is malformed: {source}")]
    Message {
        kind: String,
        source: prost::DecodeError,
    },
    #[error("the {kind} message holds a value with no JSON form: {source}")]
    Convert { kind: String, source: ConvertError },
}

/// Decodes into JSON: the message's `k8s-pb` type `P`, converted to its `k8s-openapi` type `T`.
type Decoder = fn(&str, &[u8]) -> Result<Value, ProtobufError>;

fn decode_as<P, T>(kind: &str, raw: &[u8]) -> Result<Value, ProtobufError>
where
    P: Message + Default,
    T: FromPb<P> + serde::Serialize,
{
    let message = P::decode(raw).map_err(|source| ProtobufError::Message {
        kind: kind.to_owned(),
        source,
    })?;
    let typed = T::from_pb(message).map_err(|source| ProtobufError::Convert {
        kind: kind.to_owned(),
        source,
    })?;
    // A k8s-openapi value always serializes: its maps have string keys.
    Ok(serde_json::to_value(typed).expect("k8s-openapi types serialize to JSON"))
}

/// (apiVersion, kind, decoder) of every kind accepted in protobuf: the built-in kinds kubectl's
/// typed clients create or replace among those the emulator serves, the Scale of `kubectl scale`,
/// and DeleteOptions (any group version: client-go sends it as `meta.k8s.io/v1` or the target's).
const KINDS: &[(&str, &str, Decoder)] = &[
    (
        "v1",
        "Namespace",
        decode_as::<pb_core::Namespace, oa_core::Namespace>,
    ),
    ("v1", "Pod", decode_as::<pb_core::Pod, oa_core::Pod>),
    ("v1", "Service", decode_as::<pb_core::Service, oa_core::Service>),
    (
        "v1",
        "ConfigMap",
        decode_as::<pb_core::ConfigMap, oa_core::ConfigMap>,
    ),
    ("v1", "Secret", decode_as::<pb_core::Secret, oa_core::Secret>),
    (
        "v1",
        "ServiceAccount",
        decode_as::<pb_core::ServiceAccount, oa_core::ServiceAccount>,
    ),
    (
        "apps/v1",
        "Deployment",
        decode_as::<pb_apps::Deployment, oa_apps::Deployment>,
    ),
    (
        "autoscaling/v1",
        "Scale",
        decode_as::<pb_autoscaling::Scale, oa_autoscaling::Scale>,
    ),
    (
        "*",
        "DeleteOptions",
        decode_as::<pb_meta::DeleteOptions, oa_meta::DeleteOptions>,
    ),
];

/// The kinds accepted in protobuf, as `kind (apiVersion)`, for errors and docs.
pub fn accepted_kinds() -> Vec<String> {
    KINDS
        .iter()
        .map(|(api_version, kind, _)| format!("{kind} ({api_version})"))
        .collect()
}

/// A protobuf body as the JSON object it encodes, `apiVersion` and `kind` included.
pub fn decode(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
    let unknown = Unknown::decode(envelope).map_err(ProtobufError::Envelope)?;
    if let Some(encoding) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(ProtobufError::ContentEncoding(encoding));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let kind = type_meta
        .kind
        .filter(|k| !k.is_empty())
        .ok_or(ProtobufError::NoKind)?;
    let api_version = type_meta.api_version.unwrap_or_default();
    let (_, _, decoder) = KINDS
        .iter()
        .find(|(v, k, _)| *k == kind && (*v == "*" || *v == api_version))
        .ok_or_else(|| ProtobufError::UnsupportedKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
            accepted: accepted_kinds().join(", "),
        })?;
    let mut object = decoder(&kind, &unknown.raw.unwrap_or_default())?;
    // The envelope's type is the object's (the raw message has no TypeMeta of its own).
    object["apiVersion"] = Value::String(api_version);
    object["kind"] = Value::String(kind);
    Ok(object)
}

/// A protobuf body as client-go writes one: the prefix and an envelope around the message `raw`
/// (the inverse of [`decode`], for tests and clients of the emulator).
pub fn encode(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        // client-go writes both, empty.
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    [MAGIC, &unknown.encode_to_vec()].concat()
}

#[cfg(test)]
mod tests;
