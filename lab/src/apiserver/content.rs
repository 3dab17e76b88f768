//! Content types: request bodies in JSON, YAML or Kubernetes protobuf, and what a client accepts
//! in return (the emulator answers in JSON; a client that takes nothing JSON-readable gets 406, as
//! from a real server asked for a type it cannot write).

use axum::http::{HeaderMap, header};
use serde_json::Value;

use super::errors::ApiError;
use super::protobuf::{self, ProtobufError};
use super::registry::Resource;

/// Bodies of create and update: an object.
pub const OBJECT_TYPES: &[&str] = &["application/json", "application/yaml", protobuf::MEDIA_TYPE];

/// Bodies of PATCH (protobuf has no patch form).
pub const PATCH_TYPES: &[&str] = &[
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
    "application/apply-patch+yaml",
];

/// The media type of a request's body, lower-cased without parameters; JSON when unsaid.
fn content_type(headers: &HeaderMap) -> (String, String) {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or("application/json");
    let mime = ct
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    (ct.to_owned(), mime)
}

/// Parses a body of one of the `allowed` media types; `res` is the resource the URL names, for
/// errors. Returns the value and its media type.
pub fn parse(
    headers: &HeaderMap,
    body: &[u8],
    allowed: &[&str],
    res: &Resource,
) -> Result<(Value, String), ApiError> {
    let (ct, mime) = content_type(headers);
    if !allowed.contains(&mime.as_str()) {
        return Err(ApiError::unsupported_media_type(&ct));
    }
    if mime == protobuf::MEDIA_TYPE {
        return decode_protobuf(body, &res.kind).map(|v| (v, mime));
    }
    let text =
        std::str::from_utf8(body).map_err(|_| ApiError::bad_request("the request body is not UTF-8"))?;
    let value = if mime.ends_with("yaml") {
        serde_saphyr::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid YAML: {e}")))?
    } else {
        serde_json::from_str::<Value>(text)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?
    };
    Ok((value, mime))
}

/// A protobuf body for a request about `url_kind` (the kind the URL names: the message may name
/// another, which the store then refuses as a kind mismatch).
fn decode_protobuf(body: &[u8], url_kind: &str) -> Result<Value, ApiError> {
    protobuf::decode(body).map_err(|e| match e {
        ProtobufError::UnsupportedKind { .. } => ApiError::new(
            415,
            "UnsupportedMediaType",
            format!(
                "the body of the request ({url_kind}, {}) cannot be decoded: {e}",
                protobuf::MEDIA_TYPE
            ),
        ),
        _ => ApiError::bad_request(format!(
            "the body of the request ({url_kind}, {}) cannot be decoded: {e}",
            protobuf::MEDIA_TYPE
        )),
    })
}

/// A DELETE's optional DeleteOptions body, in JSON or protobuf.
pub fn delete_options(headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(serde_json::json!({}));
    }
    let (ct, mime) = content_type(headers);
    match mime.as_str() {
        protobuf::MEDIA_TYPE => decode_protobuf(body, "DeleteOptions"),
        "application/json" | "application/yaml" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}"))),
        _ => Err(ApiError::unsupported_media_type(&ct)),
    }
}

/// Whether the client's `Accept` list takes JSON: JSON itself (any parameters, tables included),
/// a wildcard, or YAML (of which JSON is a subset). No `Accept` takes anything.
pub fn accepts_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|a| a.to_str().ok()) else {
        return true;
    };
    if accept.trim().is_empty() {
        return true;
    }
    accept.split(',').any(|item| {
        let mime = item
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        matches!(
            mime.as_str(),
            "application/json" | "application/yaml" | "application/*" | "*/*"
        )
    })
}

pub fn not_acceptable(headers: &HeaderMap) -> ApiError {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .unwrap_or_default();
    ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only application/json responses are served (the emulator encodes no protobuf); the client accepts only {accept:?}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn accept_lists_as_kubectl_and_kube_send_them() {
        assert!(accepts_json(&HeaderMap::new()));
        assert!(accepts_json(&accept(
            "application/vnd.kubernetes.protobuf,application/json"
        )));
        assert!(accepts_json(&accept("application/json, */*")));
        assert!(accepts_json(&accept(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
        )));
        assert!(accepts_json(&accept("application/vnd.kubernetes.protobuf, */*")));
        assert!(!accepts_json(&accept("application/vnd.kubernetes.protobuf")));
        assert!(!accepts_json(&accept(
            "application/vnd.kubernetes.protobuf;stream=watch"
        )));
        assert!(
            not_acceptable(&accept("application/vnd.kubernetes.protobuf"))
                .message
                .contains("application/vnd.kubernetes.protobuf")
        );
    }
}
