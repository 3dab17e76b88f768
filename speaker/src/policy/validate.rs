//! [`validate`]: a `BgpAdvertisement` checked whole before any of it is used, each error naming
//! the field as `kubectl explain` spells it (`spec.communities[1]`,
//! `spec.peerSelector.matchExpressions[0].values`), for the `Accepted=False` condition and the
//! Warning event `InvalidBgpAdvertisement`. The schema already bounds most numbers; this repeats
//! every bound (an API server serving an older CRD, or none, enforces nothing) and adds what a
//! schema cannot say: `70000:1` matches the community pattern but 70000 is no 16-bit number.

use kube_ovn_api::bgp_advertisement::{AdvertiseKind, BgpAdvertisement, MAX_AS_PATH_PREPEND};
use kube_ovn_api::selector::Selector;

use super::ValidatedAdvertisement;
use crate::crd::{CrdError, parse_communities, parse_large_communities};

/// The spec checked and parsed, or the first field that cannot be used.
pub fn validate(ad: &BgpAdvertisement) -> Result<ValidatedAdvertisement, CrdError> {
    let name = ad.metadata.name.clone().unwrap_or_default();
    if name.is_empty() {
        return Err(CrdError::new("metadata.name", "must not be empty"));
    }
    let spec = &ad.spec;
    if spec.advertise.is_empty() {
        return Err(CrdError::new(
            "spec.advertise",
            "must list at least one of PodIPs, SubnetCIDRs, ClusterIPs, ExternalIPs, LoadBalancerIPs, EIPs",
        ));
    }
    let mut kinds: Vec<AdvertiseKind> = Vec::with_capacity(spec.advertise.len());
    for (i, kind) in spec.advertise.iter().enumerate() {
        if kinds.contains(kind) {
            return Err(CrdError::new(
                format!("spec.advertise[{i}]"),
                format!("{} is listed twice", kind.as_str()),
            ));
        }
        kinds.push(*kind);
    }
    let selector = |s, field: &str| Selector::parse(s, field).map_err(CrdError::from);
    let subnet_selector = selector(spec.subnet_selector.as_ref(), "spec.subnetSelector")?;
    let namespace_selector = selector(spec.namespace_selector.as_ref(), "spec.namespaceSelector")?;
    let service_selector = selector(spec.service_selector.as_ref(), "spec.serviceSelector")?;
    let peer_selector = selector(spec.peer_selector.as_ref(), "spec.peerSelector")?;
    let communities = parse_communities(&spec.communities)?;
    let large_communities = parse_large_communities(&spec.large_communities)?;
    if let Some(n) = spec.as_path_prepend.filter(|n| *n > MAX_AS_PATH_PREPEND) {
        return Err(CrdError::new(
            "spec.asPathPrepend",
            format!("{n} is more than {MAX_AS_PATH_PREPEND} prepends"),
        ));
    }
    for (length, max, field) in [
        (spec.aggregation_length_v4, 32, "spec.aggregationLengthV4"),
        (spec.aggregation_length_v6, 128, "spec.aggregationLengthV6"),
    ] {
        let Some(length) = length else { continue };
        if length > max {
            return Err(CrdError::new(field, format!("{length} is longer than {max}")));
        }
        // A ClusterIP comes from the API server's service range and a LoadBalancer IP from
        // whatever allocator the platform runs; the speaker knows neither range, so it cannot
        // tell whether a covering prefix would also cover addresses that are not the cluster's.
        // A length that aggregates nothing (/32, /128) is harmless.
        let unbounded: Vec<&str> = kinds
            .iter()
            .filter(|k| matches!(k, AdvertiseKind::ClusterIps | AdvertiseKind::LoadBalancerIps))
            .map(|k| k.as_str())
            .collect();
        if length < max && !unbounded.is_empty() {
            return Err(CrdError::new(
                field,
                format!(
                    "{} have no allocation the speaker knows; aggregation would announce addresses \
                     not ours (advertise them in another BgpAdvertisement without aggregation)",
                    unbounded.join(" and ")
                ),
            ));
        }
    }
    Ok(ValidatedAdvertisement {
        name,
        kinds,
        subnet_selector,
        namespace_selector,
        service_selector,
        peer_selector,
        communities,
        large_communities,
        local_pref: spec.local_pref,
        med: spec.med,
        as_path_prepend: spec.as_path_prepend,
        aggregation_length_v4: spec.aggregation_length_v4,
        aggregation_length_v6: spec.aggregation_length_v6,
    })
}
