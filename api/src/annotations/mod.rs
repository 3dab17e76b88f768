//! `ovn.kubernetes.io/*` annotations and labels: the keys ([`keys`]), provider-prefixed keys for
//! attachment networks ([`provider`]), and typed parsing and formatting of the structured values.
//!
//! Every value type implements [`AnnotationValue`]: parse it with [`parse`] (a present value) or
//! [`get`] (from an object's annotation map), format it with `to_string()`. Formatting always
//! produces Kube-OVN's canonical form (dual-stack `v4,v6` with IPv4 first, lower-case MACs, ...),
//! and parsing a formatted value gives the same value back.
//!
//! Empty values: Kube-OVN treats an empty annotation as absent everywhere it reads one, so [`get`]
//! returns `None` for both, while [`parse`] (which is handed a value) rejects `""` with
//! [`Problem::Empty`]. A bad value is an [`AnnotationError`] naming the key, the value, what is
//! wrong and what was expected.

mod addr;
pub mod keys;
mod lists;
pub mod pod_network;
mod policy;
pub mod provider;
mod routes;

use std::collections::BTreeMap;

pub use addr::{CidrPair, IpFamily, IpPair, IpRange, MacAddr};
pub use lists::{CidrBlocks, ExcludeIpLists, GatewayNode, GatewayNodes, IpPoolAnnotation, NameList};
pub use pod_network::{PodNetwork, PodNetworkError};
pub use policy::{
    Bandwidth, BgpPolicy, BgpScope, LossPercent, MAX_BANDWIDTH_MBPS, Mbit, Mbps, Milliseconds, Packets,
    TrueFlag, htb_burst_bits, htb_max_rate_bps, policing_burst_kbit, policing_rate_kbit,
};
pub use provider::{
    PRIMARY_PROVIDER, ProviderKey, ProviderKeyError, attachment_provider, parse_provider_key, provider_key,
};
pub use routes::{Route, Routes};

/// What is wrong with an annotation value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The value is the empty string.
    #[error("empty value")]
    Empty,
    /// A comma- or semicolon-separated list has an empty element.
    #[error("empty list element")]
    EmptyElement,
    /// Leading or trailing whitespace (Kube-OVN's parsers do not trim it either).
    #[error("surrounding whitespace")]
    Whitespace,
    /// More elements than the format allows.
    #[error("{found} elements, at most {max} allowed")]
    TooMany { found: usize, max: usize },
    /// Not an IP address.
    #[error("{0:?} is not an IP address")]
    BadIp(String),
    /// Not a CIDR (`address/prefix`).
    #[error("{0:?} is not a CIDR")]
    BadCidr(String),
    /// Not a 6-byte MAC address.
    #[error("{0:?} is not a MAC address")]
    BadMac(String),
    /// A dual-stack value names the same family twice.
    #[error("two {0} entries")]
    DuplicateFamily(IpFamily),
    /// Two addresses that must share a family (range ends, route destination and gateway) do not.
    #[error("{0:?} mixes IPv4 and IPv6")]
    MixedFamilies(String),
    /// A range whose start is after its end.
    #[error("range {0:?} starts after it ends")]
    ReversedRange(String),
    /// The JSON does not have the expected shape.
    #[error("invalid JSON: {0}")]
    Json(String),
    /// Not a non-negative decimal number.
    #[error("{0:?} is not a non-negative number")]
    NotANumber(String),
    /// A number outside the allowed range.
    #[error("{0:?} is out of range")]
    OutOfRange(String),
    /// A keyword outside the allowed set.
    #[error("{0:?} is not an allowed keyword")]
    UnknownKeyword(String),
    /// Not a Kubernetes object name (DNS-1123 subdomain).
    #[error("{0:?} is not a valid object name")]
    BadName(String),
}

/// A bad annotation value: which key, which value, what is wrong, and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("annotation {key}: invalid value {value:?}: {problem}; expected {expected}")]
pub struct AnnotationError {
    /// The annotation (or label) key, as found on the object.
    pub key: String,
    /// The offending value, verbatim.
    pub value: String,
    /// What is wrong with it.
    pub problem: Problem,
    /// A short description of a valid value.
    pub expected: &'static str,
}

/// A value type of an annotation or label, with its canonical text form.
pub trait AnnotationValue: Sized + std::fmt::Display {
    /// A short description of a valid value, for error messages.
    const EXPECTED: &'static str;

    /// Parses a non-empty value. Use [`parse`] to get an error that names the key.
    fn parse_value(value: &str) -> Result<Self, Problem>;
}

/// Parses `value` (found under `key`) as a `T`. An empty value is [`Problem::Empty`].
pub fn parse<T: AnnotationValue>(key: &str, value: &str) -> Result<T, AnnotationError> {
    let result = if value.is_empty() {
        Err(Problem::Empty)
    } else {
        T::parse_value(value)
    };
    result.map_err(|problem| AnnotationError {
        key: key.to_owned(),
        value: value.to_owned(),
        problem,
        expected: T::EXPECTED,
    })
}

/// Reads `key` from an object's annotations (or labels) as a `T`: `Ok(None)` when the map, the
/// key or the value is absent or empty, as Kube-OVN reads them.
pub fn get<T: AnnotationValue>(
    annotations: Option<&BTreeMap<String, String>>,
    key: &str,
) -> Result<Option<T>, AnnotationError> {
    match annotations.and_then(|a| a.get(key)) {
        Some(value) if !value.is_empty() => parse(key, value).map(Some),
        _ => Ok(None),
    }
}

/// Whether `key` holds exactly `"true"`, the only spelling Kube-OVN writes or honours for
/// `allocated`, `routed`, `port_security`, `layer2_forward`, the `bgp` node label and friends.
pub fn is_true(annotations: Option<&BTreeMap<String, String>>, key: &str) -> bool {
    annotations.and_then(|a| a.get(key)).is_some_and(|v| v == "true")
}

/// Rejects leading/trailing whitespace and empty elements; shared by the list parsers.
fn check_element(element: &str) -> Result<&str, Problem> {
    if element.is_empty() {
        Err(Problem::EmptyElement)
    } else if element.trim() != element {
        Err(Problem::Whitespace)
    } else {
        Ok(element)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_treats_missing_and_empty_alike() {
        let mut map = BTreeMap::new();
        map.insert(keys::IP_ADDRESS.to_owned(), String::new());
        assert_eq!(get::<IpPair>(Some(&map), keys::IP_ADDRESS), Ok(None));
        assert_eq!(get::<IpPair>(Some(&map), keys::MAC_ADDRESS), Ok(None));
        assert_eq!(get::<IpPair>(None, keys::IP_ADDRESS), Ok(None));
        map.insert(keys::IP_ADDRESS.to_owned(), "10.0.0.1".to_owned());
        assert_eq!(
            get::<IpPair>(Some(&map), keys::IP_ADDRESS)
                .unwrap()
                .unwrap()
                .to_string(),
            "10.0.0.1"
        );
        map.insert(keys::IP_ADDRESS.to_owned(), "10.0.0.300".to_owned());
        let err = get::<IpPair>(Some(&map), keys::IP_ADDRESS).unwrap_err();
        assert_eq!(err.key, keys::IP_ADDRESS);
        assert_eq!(err.value, "10.0.0.300");
    }

    #[test]
    fn is_true_is_exact() {
        let mut map = BTreeMap::new();
        map.insert(keys::ROUTED.to_owned(), "true".to_owned());
        map.insert(keys::ALLOCATED.to_owned(), "True".to_owned());
        assert!(is_true(Some(&map), keys::ROUTED));
        assert!(!is_true(Some(&map), keys::ALLOCATED));
        assert!(!is_true(Some(&map), keys::BGP));
        assert!(!is_true(None, keys::ROUTED));
    }

    #[test]
    fn error_message_names_key_value_and_expectation() {
        let err = parse::<MacAddr>("ovn.kubernetes.io/mac_address", "zz").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("ovn.kubernetes.io/mac_address"), "{text}");
        assert!(text.contains("\"zz\""), "{text}");
        assert!(text.contains(MacAddr::EXPECTED), "{text}");
    }
}
