//! From the prost messages of `k8s-pb` to the `k8s-openapi` types with the same meaning, whose
//! serde form is the JSON the emulator stores.
//!
//! Each message's conversion is written by [`convert!`] from a list of its fields: the macro
//! destructures the prost struct and builds the k8s-openapi struct without `..`, so a field that
//! either crate adds or renames is a compile error here, never a field silently dropped.
//!
//! The protobuf does not carry everything Go's JSON would: Kubernetes' generated marshallers write
//! every non-pointer field, zero or not, and the wire cannot tell such a zero from a pointer to
//! zero (`replicas: 0`, `runAsUser: 0`, `automountServiceAccountToken: false` all mean something).
//! So the rules are:
//! - an empty string, list or map is absent (Go's `omitempty`; a pointer to `""` is not kept);
//! - a present number or bool is kept, except the fields a message lists as `omit_zero`, which are
//!   non-pointer `omitempty` fields in the Go types (`hostNetwork`, `stdin`, probe periods…);
//! - a present message is kept, empty or not (Go emits `{}` for a non-nil struct);
//! - an empty `Time` is Go's zero time: absent.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_pb::apimachinery::pkg::api::resource as pb_resource;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as pb_meta;
use k8s_pb::apimachinery::pkg::util::intstr as pb_intstr;

/// A value the protobuf carried that has no JSON form, with the field path that led to it
/// (innermost last, as the k8s-pb field names).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", path.join("."))]
pub struct ConvertError {
    pub path: Vec<&'static str>,
    pub message: String,
}

impl ConvertError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            path: Vec::new(),
            message: message.into(),
        }
    }

    /// Prefixes the field that contained the bad value.
    #[must_use]
    pub fn within(mut self, field: &'static str) -> Self {
        self.path.insert(0, field);
        self
    }
}

/// `Self` from the decoded protobuf value `P`.
pub trait FromPb<P>: Sized {
    fn from_pb(p: P) -> Result<Self, ConvertError>;
}

/// One field's conversion, naming the field on failure.
pub fn field<P, T: FromPb<P>>(name: &'static str, p: P) -> Result<T, ConvertError> {
    T::from_pb(p).map_err(|e| e.within(name))
}

/// A non-pointer Go field that JSON omits when zero.
pub fn omit_zero<T: Default + PartialEq>(v: Option<T>) -> Option<T> {
    v.filter(|x| *x != T::default())
}

/// Writes `FromPb` for messages, one entry per message (see the module documentation):
/// `pb::X => oa::Y { fields…; rename { pb => oa }; omit_zero { … }; embed f: pb::Z { … }
/// omit_zero { … } newer { … }; newer { … }; absent { … } }`. `embed` inlines a message Go embeds
/// (its fields are the JSON object's own); `newer` names fields of Kubernetes releases after the
/// one the emulator serves (1.33), which its decoder, like Go's, skips; `absent` names k8s-openapi
/// fields the protobuf message lacks.
macro_rules! convert {
    ($(
        $pb:ident :: $pbty:ident => $oa:ident :: $oaty:ident {
            $($f:ident),* $(,)?
            $(; rename { $($rf:ident => $rt:ident),* $(,)? })?
            $(; omit_zero { $($z:ident),* $(,)? })?
            $(; embed $e:ident : $epb:ident :: $ety:ident { $($ef:ident),* $(,)? }
                $(omit_zero { $($ez:ident),* $(,)? })?
                $(newer { $($en:ident),* $(,)? })?
            )*
            $(; newer { $($n:ident),* $(,)? })?
            $(; absent { $($a:ident),* $(,)? })?
        }
    )*) => {$(
        impl $crate::apiserver::protobuf::convert::FromPb<$pb::$pbty> for $oa::$oaty {
            #[allow(unused_imports, reason = "not every message has a field of each kind")]
            fn from_pb(
                p: $pb::$pbty,
            ) -> Result<Self, $crate::apiserver::protobuf::convert::ConvertError> {
                use $crate::apiserver::protobuf::convert::{field, omit_zero};
                let $pb::$pbty {
                    $($f,)*
                    $($($rf,)*)?
                    $($($z,)*)?
                    $($e,)*
                    $($($n: _,)*)?
                } = p;
                $(
                    let $epb::$ety {
                        $($ef,)*
                        $($($ez,)*)?
                        $($($en: _,)*)?
                    } = $e.unwrap_or_default();
                )*
                Ok(Self {
                    $($f: field(stringify!($f), $f)?,)*
                    $($($rt: field(stringify!($rt), $rf)?,)*)?
                    $($($z: field(stringify!($z), omit_zero($z))?,)*)?
                    $(
                        $($ef: field(stringify!($ef), $ef)?,)*
                        $($($ez: field(stringify!($ez), omit_zero($ez))?,)*)?
                    )*
                    $($($a: Default::default(),)*)?
                })
            }
        }

        impl $crate::apiserver::protobuf::convert::FromPb<Option<$pb::$pbty>> for Option<$oa::$oaty> {
            fn from_pb(
                p: Option<$pb::$pbty>,
            ) -> Result<Self, $crate::apiserver::protobuf::convert::ConvertError> {
                p.map($crate::apiserver::protobuf::convert::FromPb::from_pb).transpose()
            }
        }

        /// A required message: absent on the wire is Go's zero value.
        impl $crate::apiserver::protobuf::convert::FromPb<Option<$pb::$pbty>> for $oa::$oaty {
            fn from_pb(
                p: Option<$pb::$pbty>,
            ) -> Result<Self, $crate::apiserver::protobuf::convert::ConvertError> {
                $crate::apiserver::protobuf::convert::FromPb::from_pb(p.unwrap_or_default())
            }
        }
    )*};
}
pub(crate) use convert;

// Scalars: an optional scalar field, and a required one (absent on the wire is Go's zero value).

impl FromPb<Option<String>> for Option<String> {
    fn from_pb(p: Option<String>) -> Result<Self, ConvertError> {
        Ok(p.filter(|s| !s.is_empty()))
    }
}

impl FromPb<String> for String {
    fn from_pb(p: String) -> Result<Self, ConvertError> {
        Ok(p)
    }
}

macro_rules! scalar {
    ($($t:ty),*) => {$(
        impl FromPb<Option<$t>> for Option<$t> {
            fn from_pb(p: Option<$t>) -> Result<Self, ConvertError> {
                Ok(p)
            }
        }

        impl FromPb<Option<$t>> for $t {
            fn from_pb(p: Option<$t>) -> Result<Self, ConvertError> {
                Ok(p.unwrap_or_default())
            }
        }

        impl FromPb<$t> for $t {
            fn from_pb(p: $t) -> Result<Self, ConvertError> {
                Ok(p)
            }
        }
    )*};
}

scalar!(i32, i64, bool);

impl FromPb<Option<String>> for String {
    fn from_pb(p: Option<String>) -> Result<Self, ConvertError> {
        Ok(p.unwrap_or_default())
    }
}

// Lists and maps: empty is absent when optional.

impl<P, T: FromPb<P>> FromPb<Vec<P>> for Vec<T> {
    fn from_pb(p: Vec<P>) -> Result<Self, ConvertError> {
        p.into_iter().map(T::from_pb).collect()
    }
}

impl<P, T: FromPb<P>> FromPb<Vec<P>> for Option<Vec<T>> {
    fn from_pb(p: Vec<P>) -> Result<Self, ConvertError> {
        if p.is_empty() {
            return Ok(None);
        }
        Vec::from_pb(p).map(Some)
    }
}

impl<P, T: FromPb<P>> FromPb<BTreeMap<String, P>> for BTreeMap<String, T> {
    fn from_pb(p: BTreeMap<String, P>) -> Result<Self, ConvertError> {
        p.into_iter()
            .map(|(k, v)| T::from_pb(v).map(|v| (k, v)))
            .collect()
    }
}

impl<P, T: FromPb<P>> FromPb<BTreeMap<String, P>> for Option<BTreeMap<String, T>> {
    fn from_pb(p: BTreeMap<String, P>) -> Result<Self, ConvertError> {
        if p.is_empty() {
            return Ok(None);
        }
        BTreeMap::from_pb(p).map(Some)
    }
}

// The apimachinery types whose JSON form is not an object of their fields.

/// `[]byte`: base64 in JSON (k8s-openapi's `ByteString` encodes it).
impl FromPb<Vec<u8>> for ByteString {
    fn from_pb(p: Vec<u8>) -> Result<Self, ConvertError> {
        Ok(Self(p))
    }
}

/// `resource.Quantity` is its string.
impl FromPb<pb_resource::Quantity> for Quantity {
    fn from_pb(p: pb_resource::Quantity) -> Result<Self, ConvertError> {
        Ok(Self(p.string.unwrap_or_default()))
    }
}

impl FromPb<Option<pb_resource::Quantity>> for Option<Quantity> {
    fn from_pb(p: Option<pb_resource::Quantity>) -> Result<Self, ConvertError> {
        p.map(Quantity::from_pb).transpose()
    }
}

/// `intstr.IntOrString`: `type` 0 is the int, 1 the string.
impl FromPb<pb_intstr::IntOrString> for IntOrString {
    fn from_pb(p: pb_intstr::IntOrString) -> Result<Self, ConvertError> {
        match p.r#type.unwrap_or(0) {
            0 => Ok(Self::Int(p.int_val.unwrap_or_default())),
            1 => Ok(Self::String(p.str_val.unwrap_or_default())),
            other => Err(ConvertError::new(format!(
                "IntOrString type {other} is neither 0 (int) nor 1 (string)"
            ))),
        }
    }
}

impl FromPb<Option<pb_intstr::IntOrString>> for Option<IntOrString> {
    fn from_pb(p: Option<pb_intstr::IntOrString>) -> Result<Self, ConvertError> {
        p.map(IntOrString::from_pb).transpose()
    }
}

impl FromPb<Option<pb_intstr::IntOrString>> for IntOrString {
    fn from_pb(p: Option<pb_intstr::IntOrString>) -> Result<Self, ConvertError> {
        Self::from_pb(p.unwrap_or_default())
    }
}

/// `metav1.Time`: seconds since the epoch; Go's decoder drops the nanoseconds (JSON has whole
/// seconds) and reads an empty message as the zero time, which JSON omits here.
impl FromPb<Option<pb_meta::Time>> for Option<Time> {
    fn from_pb(p: Option<pb_meta::Time>) -> Result<Self, ConvertError> {
        let Some(seconds) = p.and_then(|t| t.seconds) else {
            return Ok(None);
        };
        jiff::Timestamp::from_second(seconds)
            .map(|t| Some(Time(t)))
            .map_err(|e| ConvertError::new(format!("time {seconds} s is out of range: {e}")))
    }
}

/// A required `metav1.Time` (a condition's `lastTransitionTime`): Go would write the zero time as
/// `null`, which the typed JSON cannot hold; such an object is invalid on any server.
impl FromPb<Option<pb_meta::Time>> for Time {
    fn from_pb(p: Option<pb_meta::Time>) -> Result<Self, ConvertError> {
        Option::<Time>::from_pb(p)?
            .ok_or_else(|| ConvertError::new("a required time is missing (the zero time)"))
    }
}

/// `metav1.FieldsV1`: its raw bytes are JSON.
impl FromPb<Option<pb_meta::FieldsV1>> for Option<FieldsV1> {
    fn from_pb(p: Option<pb_meta::FieldsV1>) -> Result<Self, ConvertError> {
        let Some(raw) = p.and_then(|f| f.raw) else {
            return Ok(None);
        };
        serde_json::from_slice(&raw)
            .map(|v| Some(FieldsV1(v)))
            .map_err(|e| ConvertError::new(format!("fieldsV1 is not JSON: {e}")))
    }
}
