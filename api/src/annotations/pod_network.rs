//! The pod-network handshake: what the controller writes on a pod once it has allocated the
//! pod's address on one network, and what the node daemon, the speaker and the NetworkPolicy
//! planner read back. This is the compatibility contract with Kube-OVN's controller and CNI:
//! the keys (`<provider>.kubernetes.io/{ip_address, mac_address, cidr, gateway, logical_switch,
//! logical_router, allocated, routed, routes}`) and their canonical forms are Kube-OVN's, so a
//! pod annotated by either controller is read by either daemon.
//!
//! Trust: every one of these annotations can also be written by the pod's author when the pod is
//! created (`allocated: "true"` included) — the API server does not know which writer is the
//! controller. A [`PodNetwork`] read from a pod is therefore what the pod *says* it was given.
//! It is good enough to configure the pod's own interface (OVN's port security holds the pod to
//! the logical port's addresses, which only the controller sets), but never enough to announce an
//! address, route one on a node or put one into an allow-list: those compare it with a record only
//! the controller writes (the `IP` custom resource, the controller's IPAM).

use std::collections::{BTreeMap, BTreeSet};

use super::provider::{ProviderKeyError, parse_provider_key, provider_key};
use super::{AnnotationError, CidrPair, IpPair, MacAddr, Problem, Routes, get, is_true};

/// The handshake's key names, without the provider prefix.
mod name {
    pub const IP_ADDRESS: &str = "ip_address";
    pub const MAC_ADDRESS: &str = "mac_address";
    pub const CIDR: &str = "cidr";
    pub const GATEWAY: &str = "gateway";
    pub const LOGICAL_SWITCH: &str = "logical_switch";
    pub const LOGICAL_ROUTER: &str = "logical_router";
    pub const ALLOCATED: &str = "allocated";
    pub const ROUTED: &str = "routed";
    pub const ROUTES: &str = "routes";
}

/// The network a pod was given on one provider, as the controller writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNetwork {
    /// The pod's addresses (`ip_address`), one per family.
    pub addresses: IpPair,
    /// The port's MAC (`mac_address`).
    pub mac: MacAddr,
    /// The subnet's CIDR of each family the pod has an address in (`cidr`).
    pub cidr: CidrPair,
    /// The subnet's gateway of each family the pod has (`gateway`); empty on a network without one.
    pub gateway: IpPair,
    /// The subnet (`logical_switch`).
    pub logical_switch: String,
    /// The VPC's router (`logical_router`), when the controller wrote one.
    pub logical_router: Option<String>,
}

/// Why a provider's handshake cannot be read or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodNetworkError {
    /// A value does not parse.
    #[error(transparent)]
    Annotation(#[from] AnnotationError),
    /// The provider cannot form a key.
    #[error(transparent)]
    Provider(#[from] ProviderKeyError),
}

fn key(provider: &str, name: &str) -> Result<String, ProviderKeyError> {
    provider_key(provider, name)
}

fn missing(key: String) -> AnnotationError {
    AnnotationError {
        key,
        value: String::new(),
        problem: Problem::Empty,
        expected: "the value the controller writes with `allocated: \"true\"`",
    }
}

impl PodNetwork {
    /// Reads `provider`'s handshake: `Ok(None)` until `allocated` is `"true"` and an address is
    /// there (the controller has not answered yet); an error names the first bad key. The MAC and
    /// the subnet are required once allocated: the controller writes them in the same patch.
    pub fn read(
        annotations: Option<&BTreeMap<String, String>>,
        provider: &str,
    ) -> Result<Option<Self>, PodNetworkError> {
        let k = |name: &str| key(provider, name);
        let Some(addresses) = get::<IpPair>(annotations, &k(name::IP_ADDRESS)?)? else {
            return Ok(None);
        };
        if !is_true(annotations, &k(name::ALLOCATED)?) {
            return Ok(None);
        }
        let mac_key = k(name::MAC_ADDRESS)?;
        let mac = get::<MacAddr>(annotations, &mac_key)?.ok_or_else(|| missing(mac_key))?;
        let switch_key = k(name::LOGICAL_SWITCH)?;
        let logical_switch = annotations
            .and_then(|a| a.get(&switch_key))
            .filter(|s| !s.is_empty())
            .cloned()
            .ok_or_else(|| missing(switch_key))?;
        let logical_router = annotations
            .and_then(|a| a.get(&key(provider, name::LOGICAL_ROUTER).ok()?).cloned())
            .filter(|s| !s.is_empty());
        Ok(Some(Self {
            addresses,
            mac,
            cidr: get(annotations, &k(name::CIDR)?)?.unwrap_or_default(),
            gateway: get(annotations, &k(name::GATEWAY)?)?.unwrap_or_default(),
            logical_switch,
            logical_router,
        }))
    }

    /// The annotations the controller writes for this network on `provider`, `allocated`
    /// included and `routed` not (that one follows once the port's routes are in place).
    pub fn to_annotations(&self, provider: &str) -> Result<BTreeMap<String, String>, ProviderKeyError> {
        let mut out = BTreeMap::from([
            (key(provider, name::IP_ADDRESS)?, self.addresses.to_string()),
            (key(provider, name::MAC_ADDRESS)?, self.mac.to_string()),
            (key(provider, name::CIDR)?, self.cidr.to_string()),
            (key(provider, name::GATEWAY)?, self.gateway.to_string()),
            (key(provider, name::LOGICAL_SWITCH)?, self.logical_switch.clone()),
            (key(provider, name::ALLOCATED)?, "true".to_owned()),
        ]);
        if let Some(router) = &self.logical_router {
            out.insert(key(provider, name::LOGICAL_ROUTER)?, router.clone());
        }
        Ok(out)
    }
}

/// Whether the controller has said `provider`'s port is routed (`routed: "true"`).
pub fn routed(annotations: Option<&BTreeMap<String, String>>, provider: &str) -> bool {
    key(provider, name::ROUTED).is_ok_and(|k| is_true(annotations, &k))
}

/// The extra routes the pod asks for on `provider` (`routes`; empty when absent).
pub fn requested_routes(
    annotations: Option<&BTreeMap<String, String>>,
    provider: &str,
) -> Result<Routes, PodNetworkError> {
    Ok(get(annotations, &key(provider, name::ROUTES)?)?.unwrap_or_default())
}

/// The subnet a pod asks for on `provider` (`logical_switch` before allocation), if any.
pub fn requested_subnet<'a>(
    annotations: Option<&'a BTreeMap<String, String>>,
    provider: &str,
) -> Option<&'a str> {
    let k = key(provider, name::LOGICAL_SWITCH).ok()?;
    annotations?.get(&k).map(String::as_str).filter(|s| !s.is_empty())
}

/// Every provider with an `ip_address` annotation on the pod (the primary `ovn` and each
/// attachment network), in key order.
pub fn providers(annotations: Option<&BTreeMap<String, String>>) -> BTreeSet<&str> {
    annotations
        .into_iter()
        .flatten()
        .filter_map(|(k, _)| parse_provider_key(k))
        .filter(|pk| pk.name == name::IP_ADDRESS)
        .map(|pk| pk.provider)
        .collect()
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use ipnet::{Ipv4Net, Ipv6Net};
    use proptest::prelude::*;

    use super::*;
    use crate::annotations::keys;

    fn sample() -> PodNetwork {
        PodNetwork {
            addresses: IpPair {
                v4: Some(Ipv4Addr::new(10, 16, 0, 5)),
                v6: Some("fd00:10:16::5".parse().unwrap()),
            },
            mac: MacAddr([0x00, 0x00, 0x00, 0x1a, 0x2b, 0x3c]),
            cidr: CidrPair {
                v4: Some("10.16.0.0/16".parse().unwrap()),
                v6: Some("fd00:10:16::/64".parse().unwrap()),
            },
            gateway: IpPair {
                v4: Some(Ipv4Addr::new(10, 16, 0, 1)),
                v6: Some("fd00:10:16::1".parse().unwrap()),
            },
            logical_switch: "ovn-default".to_owned(),
            logical_router: Some("ovn-cluster".to_owned()),
        }
    }

    #[test]
    fn writes_kube_ovns_keys_and_forms() {
        let ann = sample().to_annotations("ovn").unwrap();
        assert_eq!(ann[keys::IP_ADDRESS], "10.16.0.5,fd00:10:16::5");
        assert_eq!(ann[keys::MAC_ADDRESS], "00:00:00:1a:2b:3c");
        assert_eq!(ann[keys::CIDR], "10.16.0.0/16,fd00:10:16::/64");
        assert_eq!(ann[keys::GATEWAY], "10.16.0.1,fd00:10:16::1");
        assert_eq!(ann[keys::LOGICAL_SWITCH], "ovn-default");
        assert_eq!(ann[keys::LOGICAL_ROUTER], "ovn-cluster");
        assert_eq!(ann[keys::ALLOCATED], "true");
        assert!(!ann.contains_key(keys::ROUTED));
        let attached = sample().to_annotations("net1.ns1.ovn").unwrap();
        assert_eq!(
            attached["net1.ns1.ovn.kubernetes.io/ip_address"],
            "10.16.0.5,fd00:10:16::5"
        );
    }

    #[test]
    fn nothing_until_allocated() {
        let mut ann = sample().to_annotations("ovn").unwrap();
        ann.remove(keys::ALLOCATED);
        assert_eq!(PodNetwork::read(Some(&ann), "ovn"), Ok(None));
        ann.insert(keys::ALLOCATED.to_owned(), "True".to_owned());
        assert_eq!(PodNetwork::read(Some(&ann), "ovn"), Ok(None));
        assert_eq!(PodNetwork::read(None, "ovn"), Ok(None));
    }

    #[test]
    fn a_bad_or_missing_value_names_its_key() {
        let mut ann = sample().to_annotations("ovn").unwrap();
        ann.insert(keys::MAC_ADDRESS.to_owned(), "zz".to_owned());
        let err = PodNetwork::read(Some(&ann), "ovn").unwrap_err();
        assert!(err.to_string().contains(keys::MAC_ADDRESS), "{err}");
        ann.remove(keys::MAC_ADDRESS);
        let err = PodNetwork::read(Some(&ann), "ovn").unwrap_err();
        assert!(err.to_string().contains(keys::MAC_ADDRESS), "{err}");
        let mut ann = sample().to_annotations("ovn").unwrap();
        ann.remove(keys::LOGICAL_SWITCH);
        let err = PodNetwork::read(Some(&ann), "ovn").unwrap_err();
        assert!(err.to_string().contains(keys::LOGICAL_SWITCH), "{err}");
    }

    #[test]
    fn providers_are_found_by_their_address_key() {
        let mut ann = sample().to_annotations("ovn").unwrap();
        ann.extend(sample().to_annotations("net1.ns1.ovn").unwrap());
        ann.insert("example.com/ip_address".to_owned(), "1.2.3.4".to_owned());
        let found: Vec<&str> = providers(Some(&ann)).into_iter().collect();
        assert_eq!(found, ["net1.ns1.ovn", "ovn"]);
    }

    #[test]
    fn routed_routes_and_requested_subnet() {
        let mut ann = BTreeMap::new();
        assert!(!routed(Some(&ann), "ovn"));
        assert_eq!(requested_subnet(Some(&ann), "ovn"), None);
        ann.insert(keys::ROUTED.to_owned(), "true".to_owned());
        ann.insert(keys::LOGICAL_SWITCH.to_owned(), "vpc1-net".to_owned());
        ann.insert(
            keys::ROUTES.to_owned(),
            r#"[{"dst":"192.168.0.0/24","gw":"10.16.0.254"}]"#.to_owned(),
        );
        assert!(routed(Some(&ann), "ovn"));
        assert_eq!(requested_subnet(Some(&ann), "ovn"), Some("vpc1-net"));
        assert_eq!(requested_routes(Some(&ann), "ovn").unwrap().0.len(), 1);
        ann.insert(keys::ROUTES.to_owned(), "[{".to_owned());
        let err = requested_routes(Some(&ann), "ovn").unwrap_err();
        assert!(err.to_string().contains(keys::ROUTES), "{err}");
    }

    fn pair() -> impl Strategy<Value = (Option<Ipv4Addr>, Option<Ipv6Addr>)> {
        (any::<Option<u32>>(), any::<Option<u128>>())
            .prop_filter("at least one family", |(a, b)| a.is_some() || b.is_some())
            .prop_map(|(a, b)| (a.map(Ipv4Addr::from), b.map(Ipv6Addr::from)))
    }

    proptest! {
        #[test]
        fn what_is_written_reads_back(
            (v4, v6) in pair(),
            mac in any::<[u8; 6]>(),
            (p4, p6) in (0u8..=32, 0u8..=128),
            gw in any::<bool>(),
            switch in "[a-z][a-z0-9-]{0,20}",
            router in proptest::option::of("[a-z][a-z0-9-]{0,20}"),
            provider in prop_oneof![Just("ovn".to_owned()), "[a-z]{1,8}\\.[a-z]{1,8}\\.ovn"],
        ) {
            let addresses = IpPair { v4, v6 };
            let cidr = CidrPair {
                v4: v4.map(|a| Ipv4Net::new(a, p4).unwrap().trunc()),
                v6: v6.map(|a| Ipv6Net::new(a, p6).unwrap().trunc()),
            };
            let network = PodNetwork {
                addresses,
                mac: MacAddr(mac),
                cidr,
                gateway: if gw { addresses } else { IpPair::default() },
                logical_switch: switch,
                logical_router: router,
            };
            let ann = network.to_annotations(&provider).unwrap();
            prop_assert_eq!(PodNetwork::read(Some(&ann), &provider).unwrap(), Some(network));
            prop_assert_eq!(providers(Some(&ann)).into_iter().collect::<Vec<_>>(), vec![provider.as_str()]);
        }
    }
}
