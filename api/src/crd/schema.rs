//! Schema helpers shared by the `kubeovn.io/v1` kinds, and the post-processing that turns what
//! `kube-derive` generates into the CRD Kube-OVN ships.
//!
//! The derive gets most of the way. What is left is done here, in one place, so that every kind
//! is treated the same:
//! - Kube-OVN's schemas never say `nullable`, but schemars marks every `Option` field so; the
//!   apiserver then stores explicit `null`s instead of pruning them. We strip it (and the `null`
//!   that `Option<enum>` adds to an `enum` list), together with the `title`s schemars invents.
//! - Kube-OVN does not require `spec` at the root and lists `apiVersion`, `kind` and `metadata`
//!   as plain properties; the derive requires `spec` and omits the other three.
//! - `required` lists, CRD-level defaults and plain `integer`s (no `format`) come from the
//!   helpers below, used through `#[schemars(...)]` attributes on the fields.
//!
//! No I/O: everything here maps values to values.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps,
};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// JSON members a type does not model, kept verbatim so that an object written by a newer
/// Kube-OVN (with fields we do not know yet) survives a read-modify-write through our types.
///
/// Every spec, status and nested Kube-OVN object carries one as `#[serde(flatten)]
/// #[schemars(skip)]`: it is invisible in the generated schema (so the CRD stays exactly
/// Kube-OVN's and still prunes unknown fields on the server), and only collects what the
/// apiserver already let through.
pub type ExtraFields = BTreeMap<String, Value>;

/// An address counter from a Subnet or IPPool status (`v4availableIPs`, `v6UsingIPs`, ...).
///
/// Kube-OVN declares these as JSON `number` because an IPv6 subnet holds more than 2^64
/// addresses. We keep the count as a `u128` and serialize it as a JSON integer while it fits
/// in a `u64` (every IPv4 count and IPv6 counts up to a /64), and as the nearest `f64` above
/// that, because JSON libraries (`serde_json` without `arbitrary_precision`, and the apiserver
/// itself, which decodes into int64/float64) cannot carry larger integers exactly anyway.
/// Reading accepts any non-negative JSON number; a fractional value is rounded towards zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpCount(pub u128);

impl fmt::Display for IpCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl From<u64> for IpCount {
    fn from(v: u64) -> Self {
        Self(u128::from(v))
    }
}

impl Serialize for IpCount {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if let Ok(v) = u64::try_from(self.0) {
            serializer.serialize_u64(v)
        } else {
            #[allow(
                clippy::cast_precision_loss,
                reason = "counts above 2^64 are approximate by design"
            )]
            let approx = self.0 as f64;
            serializer.serialize_f64(approx)
        }
    }
}

impl<'de> Deserialize<'de> for IpCount {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl Visitor<'_> for CountVisitor {
            type Value = IpCount;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a non-negative number of addresses")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<IpCount, E> {
                Ok(IpCount(u128::from(v)))
            }
            fn visit_u128<E: de::Error>(self, v: u128) -> Result<IpCount, E> {
                Ok(IpCount(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<IpCount, E> {
                u64::try_from(v)
                    .map(|v| IpCount(u128::from(v)))
                    .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<IpCount, E> {
                if v.is_finite() && v >= 0.0 {
                    #[allow(
                        clippy::cast_possible_truncation,
                        clippy::cast_sign_loss,
                        reason = "checked finite and non-negative; `as` saturates above u128::MAX"
                    )]
                    let count = v as u128;
                    Ok(IpCount(count))
                } else {
                    Err(E::invalid_value(de::Unexpected::Float(v), &self))
                }
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

impl JsonSchema for IpCount {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "IpCount".into()
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({ "type": "number" })
    }
}

/// `integer` with no `format`, as Kube-OVN declares Go `int` fields (ACL and policy priorities).
pub(crate) fn integer(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer" })
}

/// `integer` / `int32`, for fields Kube-OVN declares `uint32` in Go but `int32` in the CRD
/// (MTU, policy-routing table and priority, BGP ASNs): the Rust side keeps the unsigned range.
pub(crate) fn int32(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "integer", "format": "int32" })
}

/// Adds `names` to the `required` list of an object schema (serde's `default` would otherwise
/// leave every field optional; the Rust fields stay `Option` so reads never fail on them).
pub(crate) fn require(schema: &mut Schema, names: &[&str]) {
    if let Some(obj) = schema.as_object_mut() {
        let list = obj.entry("required").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(items) = list {
            for name in names {
                if !items.iter().any(|v| v == name) {
                    items.push(Value::String((*name).to_owned()));
                }
            }
        }
    }
}

/// Implements `Serialize`/`Deserialize` for a spec declared with `#[serde(remote = "Self")]`,
/// so that a missing or `null` `spec` reads as the default spec instead of failing.
///
/// Kube-OVN's CRDs do not require `spec`; an object created without one (`kubectl create` of a
/// bare `Vpc`) is valid there, and a single such object must not make a whole list/watch of
/// that kind undecodable for us. serde asks a missing field's type to `deserialize_option`,
/// which is what the impl below answers.
macro_rules! spec_absent_is_default {
    ($ty:ty) => {
        impl ::serde::Serialize for $ty {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                <$ty>::serialize(self, serializer)
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $ty {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                struct SpecVisitor;
                impl<'de> ::serde::de::Visitor<'de> for SpecVisitor {
                    type Value = $ty;
                    fn expecting(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                        f.write_str(concat!("a ", stringify!($ty), " object"))
                    }
                    fn visit_none<E: ::serde::de::Error>(self) -> Result<$ty, E> {
                        Ok(<$ty>::default())
                    }
                    fn visit_unit<E: ::serde::de::Error>(self) -> Result<$ty, E> {
                        Ok(<$ty>::default())
                    }
                    fn visit_some<D: ::serde::Deserializer<'de>>(self, d: D) -> Result<$ty, D::Error> {
                        <$ty>::deserialize(d)
                    }
                }
                deserializer.deserialize_option(SpecVisitor)
            }
        }
    };
}
pub(crate) use spec_absent_is_default;

/// Rewrites a derived CRD into Kube-OVN's shape (see the module documentation).
pub(crate) fn normalize(
    mut crd: CustomResourceDefinition,
    status_subresource: bool,
) -> CustomResourceDefinition {
    if !status_subresource {
        // kube-derive adds the status subresource whenever the kind has a status; Vip has a
        // status field but Kube-OVN registers it without the subresource.
        for version in &mut crd.spec.versions {
            version.subresources = None;
        }
    }
    clean(crd, |root| {
        root.remove("required");
        if let Some(Value::Object(props)) = root.get_mut("properties") {
            props.insert("apiVersion".into(), serde_json::json!({ "type": "string" }));
            props.insert("kind".into(), serde_json::json!({ "type": "string" }));
            props.insert("metadata".into(), serde_json::json!({ "type": "object" }));
        }
    })
}

/// What every CRD of ours (Kube-OVN's kinds and our own) gets after the derive: no `nullable`
/// (the API server would store explicit `null`s instead of pruning them), no invented `title`s,
/// no `null` in `enum` lists; then `edit_root` may change each version's root schema.
pub fn clean(
    mut crd: CustomResourceDefinition,
    edit_root: impl Fn(&mut serde_json::Map<String, Value>),
) -> CustomResourceDefinition {
    for version in &mut crd.spec.versions {
        let Some(schema) = version.schema.as_mut().and_then(|s| s.open_api_v3_schema.take()) else {
            continue;
        };
        let mut value = serde_json::to_value(schema).expect("JSONSchemaProps serializes");
        strip(&mut value);
        if let Value::Object(root) = &mut value {
            edit_root(root);
        }
        let schema: JSONSchemaProps =
            serde_json::from_value(value).expect("a cleaned schema is still a schema");
        if let Some(validation) = version.schema.as_mut() {
            validation.open_api_v3_schema = Some(schema);
        }
    }
    crd
}

fn strip(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("nullable");
            map.remove("title");
            if let Some(Value::Array(values)) = map.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            map.values_mut().for_each(strip);
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_count_keeps_u64_exact_and_accepts_floats() {
        let n: IpCount = serde_json::from_str("18446744073709551614").unwrap();
        assert_eq!(n, IpCount(18_446_744_073_709_551_614));
        assert_eq!(serde_json::to_string(&n).unwrap(), "18446744073709551614");
        let n: IpCount = serde_json::from_str("253.0").unwrap();
        assert_eq!(n, IpCount(253));
        assert_eq!(serde_json::to_string(&n).unwrap(), "253");
        // 2^80 comes back as a float of the same magnitude.
        let big = IpCount(1u128 << 80);
        let text = serde_json::to_string(&big).unwrap();
        let back: IpCount = serde_json::from_str(&text).unwrap();
        assert_eq!(back, big);
        assert!(serde_json::from_str::<IpCount>("-1").is_err());
        assert!(serde_json::from_str::<IpCount>("\"12\"").is_err());
    }

    #[test]
    fn require_appends_once() {
        let mut s = json_schema!({ "type": "object", "required": ["a"] });
        require(&mut s, &["a", "b"]);
        assert_eq!(s.get("required").unwrap(), &serde_json::json!(["a", "b"]));
    }
}
