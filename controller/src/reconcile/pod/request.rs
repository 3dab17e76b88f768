//! What a pod asks IPAM for, from its annotations, in Kube-OVN's order (reference §3.3):
//! `ip_address` (static), then `ip_pool` (a list of candidates — a StatefulSet pod takes the entry
//! of its ordinal — or a named IPPool), then the IP pools bound to its namespace, then any free
//! address of the subnet. Once allocated, the pod carries its address in `ip_address`, so every
//! later run asks for exactly that address again and a restart never moves it.
//!
//! Pure: every function takes the IPAM state and the objects it reads ([`Cluster`]) as plain
//! values; [`allocate`] changes only the IPAM it is handed.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::{
    AnnotationError, Bandwidth, CidrPair, IpFamily, IpPair, IpPoolAnnotation, MacAddr, PRIMARY_PROVIDER,
    PodNetwork, Problem, Routes, get, keys,
};
use kube_ovn_api::crd::{IPPool, Vlan};

use crate::error::{Error, Result};
use crate::informer::Cache;
use crate::ipam::{Allocation, Family, Ipam, IpamError, Request};
use crate::reconcile::statefulset;
use crate::reconcile::subnet_spec::Effective;

/// What a pod's request reads besides the pod and IPAM: the IP pools (its namespace's come from
/// them) and the nodes' own addresses, which Kube-OVN never hands a pod (`validatePodIP`).
#[derive(Debug, Clone, Copy)]
pub struct Cluster<'a> {
    pub pools: &'a [Arc<IPPool>],
    pub node_ips: &'a [IpAddr],
}

/// Checks every annotation the controller or the CNI reads from a pod (Kube-OVN's
/// `ValidatePodNetwork`): a bad value is an error naming the key, before anything is allocated.
pub fn validate(pod: &Pod) -> Result<(), AnnotationError> {
    let ann = pod.metadata.annotations.as_ref();
    let ips = get::<IpPair>(ann, keys::IP_ADDRESS)?;
    get::<MacAddr>(ann, keys::MAC_ADDRESS)?;
    let pool = get::<IpPoolAnnotation>(ann, keys::IP_POOL)?;
    // The node daemon reads the rates with the same reader before applying them.
    Bandwidth::read(ann, PRIMARY_PROVIDER)?;
    if let Some(family) = get::<IpFamily>(ann, keys::IP_FAMILY)? {
        // A static address of the other family cannot be what the pod asks for.
        let mut statics: Vec<IpAddr> = ips.iter().flat_map(IpPair::addrs).collect();
        if let Some(IpPoolAnnotation::Addresses(list)) = &pool {
            statics.extend(list.iter().flat_map(IpPair::addrs));
        }
        if let Some(other) = statics.iter().find(|a| IpFamily::of(a) != family) {
            return Err(AnnotationError {
                key: keys::IP_FAMILY.to_owned(),
                value: family.to_string(),
                problem: Problem::MixedFamilies(other.to_string()),
                expected: "the family of the pod's static addresses",
            });
        }
    }
    Ok(())
}

/// Checks the pod's `routes` annotation before anything is allocated for it: the CNI daemon
/// installs these routes in the pod at every ADD, so a value it cannot parse, or a route of a
/// family the pod's NIC will not have (the subnet's families, narrowed by `ip_family`), would
/// fail every ADD of a pod that holds an address. Kube-OVN parses the annotation in
/// `ValidatePodNetwork`; the family check is ours.
pub fn validate_routes(pod: &Pod, subnet: &str, cidrs: &[ipnet::IpNet]) -> Result<()> {
    let ann = pod.metadata.annotations.as_ref();
    let Some(routes) = get::<Routes>(ann, keys::ROUTES)? else {
        return Ok(());
    };
    let wanted = get::<IpFamily>(ann, keys::IP_FAMILY).ok().flatten();
    let families: Vec<IpFamily> = cidrs
        .iter()
        .map(|c| IpFamily::of(&c.addr()))
        .filter(|f| wanted.is_none_or(|w| w == *f))
        .collect();
    for route in &routes.0 {
        if let Some(family) = route.family()
            && !families.contains(&family)
        {
            let have: Vec<String> = families.iter().map(ToString::to_string).collect();
            return Err(Error::Invalid(format!(
                "pod {}/{}: metadata.annotations[\"{}\"]: route {} is {family}, but the pod's \
                 NIC in subnet {subnet} has only {}",
                pod.namespace().unwrap_or_default(),
                pod.name_any(),
                keys::ROUTES,
                serde_json::to_string(route).unwrap_or_default(),
                if have.is_empty() {
                    "no address".to_owned()
                } else {
                    have.join(" and ")
                },
            )));
        }
    }
    Ok(())
}

/// The static addresses a pod names (`ip_address`, or the candidates of an `ip_pool` list).
pub fn static_addresses(pod: &Pod) -> Vec<IpAddr> {
    let ann = pod.metadata.annotations.as_ref();
    if let Ok(Some(pair)) = get::<IpPair>(ann, keys::IP_ADDRESS) {
        return pair.addrs().collect();
    }
    match get::<IpPoolAnnotation>(ann, keys::IP_POOL) {
        Ok(Some(IpPoolAnnotation::Addresses(list))) => list.iter().flat_map(IpPair::addrs).collect(),
        _ => Vec::new(),
    }
}

/// The IP pools bound to a namespace (`spec.namespaces`; what Kube-OVN mirrors into the
/// namespace's `ip_pool` annotation), by name.
pub fn namespace_pools(pools: &[Arc<IPPool>], namespace: &str) -> Vec<Arc<IPPool>> {
    let mut pools: Vec<Arc<IPPool>> = pools
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_none()
                && p.spec
                    .namespaces
                    .as_ref()
                    .is_some_and(|n| n.iter().any(|x| x == namespace))
        })
        .cloned()
        .collect();
    pools.sort_by_key(|p| p.name_any());
    pools
}

/// Whether a pod takes its address from its namespace's pools: it names no address and no
/// pool of its own.
pub fn uses_namespace_pools(pod: &Pod) -> bool {
    let ann = pod.metadata.annotations.as_ref();
    !matches!(get::<IpPair>(ann, keys::IP_ADDRESS), Ok(Some(_)))
        && !matches!(get::<IpPoolAnnotation>(ann, keys::IP_POOL), Ok(Some(_)))
}

fn requested_family(pod: &Pod) -> Option<Family> {
    match get::<IpFamily>(pod.metadata.annotations.as_ref(), keys::IP_FAMILY) {
        Ok(Some(IpFamily::V4)) => Some(Family::V4),
        Ok(Some(IpFamily::V6)) => Some(Family::V6),
        _ => None,
    }
}

/// Whether `pool` of `subnet` has a free address in every family the pod needs.
pub fn pool_has_room(ipam: &Ipam, pod: &Pod, subnet: &str, pool: &str) -> bool {
    let Ok(u) = ipam.pool_usage(subnet, pool) else {
        return false;
    };
    let Ok(s) = ipam.subnet_usage(subnet) else {
        return false;
    };
    let has_v4 = s.v4_available + s.v4_using > 0;
    let has_v6 = s.v6_available + s.v6_using > 0;
    match requested_family(pod) {
        Some(Family::V4) => u.v4_available > 0,
        Some(Family::V6) => u.v6_available > 0,
        None => (!has_v4 || u.v4_available > 0) && (!has_v6 || u.v6_available > 0),
    }
}

/// The first of the namespace's pools in one of `subnets` with room for the pod; `Err` when the
/// namespace has pools there but none has room (Kube-OVN blocks allocation then rather than
/// falling back to the rest of the subnet).
pub fn namespace_pool(
    ipam: &Ipam,
    all_pools: &[Arc<IPPool>],
    pod: &Pod,
    subnets: &[String],
) -> Result<Option<(String, String)>> {
    let ns = pod.namespace().unwrap_or_default();
    let pools: Vec<(String, String)> = namespace_pools(all_pools, &ns)
        .iter()
        .filter_map(|p| Some((p.spec.subnet.clone()?, p.name_any())))
        .filter(|(s, _)| subnets.contains(s))
        .collect();
    if pools.is_empty() {
        return Ok(None);
    }
    if let Some(found) = pools.iter().find(|(s, p)| pool_has_room(ipam, pod, s, p)) {
        return Ok(Some(found.clone()));
    }
    let names: Vec<&str> = pools.iter().map(|(_, p)| p.as_str()).collect();
    Err(Error::Ipam(IpamError::Exhausted {
        subnet: subnets.join(","),
        pool: names.join(","),
        family: requested_family(pod).unwrap_or(Family::V4),
    }))
}

/// The candidates a pod asks IPAM for in `subnet`, in order (the first that can be had wins).
pub fn requests(ipam: &Ipam, cluster: &Cluster<'_>, pod: &Pod, subnet: &str) -> Result<Vec<Request>> {
    let ann = pod.metadata.annotations.as_ref();
    let base = Request {
        family: requested_family(pod),
        mac: get::<MacAddr>(ann, keys::MAC_ADDRESS)?,
        // Kube-OVN never hands a pod an address equal to a node's own (`validatePodIP`).
        skip: cluster.node_ips.to_vec(),
        ..Request::default()
    };
    let pinned = |pair: &IpPair| Request {
        v4: pair.v4,
        v6: pair.v6,
        ..base.clone()
    };
    if let Some(pair) = get::<IpPair>(ann, keys::IP_ADDRESS)? {
        return Ok(vec![pinned(&pair)]);
    }
    match get::<IpPoolAnnotation>(ann, keys::IP_POOL)? {
        Some(IpPoolAnnotation::Pool(pool)) => Ok(vec![Request {
            pool: Some(pool),
            ..base
        }]),
        Some(IpPoolAnnotation::Addresses(list)) => {
            // A StatefulSet pod takes the entry of its ordinal (Kube-OVN indexes the list by the
            // ordinal itself, not by its offset from `ordinals.start`); others the first free.
            if statefulset::owner(pod).is_some()
                && let Some(i) = statefulset::ordinal(&pod.name_any())
            {
                let entry = usize::try_from(i).ok().and_then(|i| list.get(i));
                return entry.map(|p| vec![pinned(p)]).ok_or_else(|| {
                    Error::Invalid(format!(
                        "pod {}/{}: annotation {}: {} entries, none for ordinal {i}",
                        pod.namespace().unwrap_or_default(),
                        pod.name_any(),
                        keys::IP_POOL,
                        list.len()
                    ))
                });
            }
            Ok(list.iter().map(pinned).collect())
        }
        None => match namespace_pool(ipam, cluster.pools, pod, &[subnet.to_owned()])? {
            Some((_, pool)) => Ok(vec![Request {
                pool: Some(pool),
                ..base
            }]),
            None => Ok(vec![base]),
        },
    }
}

/// Allocates the first candidate that can be had; the error of the last one otherwise. IPAM
/// validates before it changes anything, so a failure leaves nothing allocated.
pub fn allocate(
    ipam: &mut Ipam,
    cluster: &Cluster<'_>,
    pod: &Pod,
    subnet: &str,
    key: &str,
) -> Result<Allocation> {
    let candidates = requests(ipam, cluster, pod, subnet)?;
    let mut last = None;
    for req in &candidates {
        match ipam.allocate(subnet, key, req) {
            Ok(a) => return Ok(a),
            Err(
                e @ (IpamError::Conflict { .. } | IpamError::Exhausted { .. } | IpamError::OutOfRange { .. }),
            ) if candidates.len() > 1 => {
                last = Some(e);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(last.map_or_else(
        || Error::Invalid(format!("pod {key}: no address candidates")),
        Error::from,
    ))
}

/// An underlay subnet's Vlan ID and ProviderNetwork, for the pod's `vlan_id` and
/// `provider_network` annotations; `None` for an overlay subnet. Not ready while the Vlan is
/// missing (the subnet is not ready then either).
pub fn underlay_vlan(vlans: &Cache<Vlan>, subnet: &str, eff: &Effective) -> Result<Option<(u16, String)>> {
    let Some(u) = &eff.underlay else {
        return Ok(None);
    };
    let vlan = vlans
        .get(&ObjectRef::new(&u.vlan))
        .ok_or_else(|| Error::NotReady(format!("vlan {} of subnet {subnet} does not exist", u.vlan)))?;
    let provider = vlan.spec.effective_provider().unwrap_or_default().to_owned();
    Ok(Some((vlan.spec.effective_id(), provider)))
}

/// Kube-OVN's underlay handshake on top of [`handshake`]: `vlan_id` and `provider_network` for
/// a subnet on a Vlan, and `logical_router` only where the VPC router is the pod's (overlay,
/// `logicalGateway`, U2O) — without it the node daemon knows the physical router is the gateway.
pub fn with_underlay(
    mut want: BTreeMap<String, String>,
    eff: &Effective,
    vlan: Option<(u16, &str)>,
) -> BTreeMap<String, String> {
    if let Some((id, provider)) = vlan {
        want.insert(keys::VLAN_ID.to_owned(), id.to_string());
        want.insert(keys::PROVIDER_NETWORK.to_owned(), provider.to_owned());
    }
    if !eff.needs_router() {
        want.remove(keys::LOGICAL_ROUTER);
    }
    want
}

/// The handshake annotations for an allocation (everything but `routed`), through the one typed
/// writer the daemon, the speaker and Kube-OVN's CNI read back ([`PodNetwork`]): the subnet's CIDR
/// and gateway of each family the pod has an address in, v4 first.
pub fn handshake(
    subnet: &str,
    vpc: &str,
    cidrs: &[ipnet::IpNet],
    gateways: &[IpAddr],
    alloc: &Allocation,
) -> BTreeMap<String, String> {
    let cidr_of = |addr: Option<IpAddr>| addr.and_then(|a| cidrs.iter().find(|c| c.contains(&a)).copied());
    let gateway_of = |addr: Option<IpAddr>| {
        addr.and_then(|a| gateways.iter().find(|g| g.is_ipv4() == a.is_ipv4()).copied())
    };
    let (v4, v6) = (alloc.v4.map(IpAddr::V4), alloc.v6.map(IpAddr::V6));
    let network = PodNetwork {
        addresses: IpPair {
            v4: alloc.v4,
            v6: alloc.v6,
        },
        mac: alloc.mac,
        cidr: CidrPair {
            v4: match cidr_of(v4) {
                Some(ipnet::IpNet::V4(n)) => Some(n),
                _ => None,
            },
            v6: match cidr_of(v6) {
                Some(ipnet::IpNet::V6(n)) => Some(n),
                _ => None,
            },
        },
        gateway: IpPair {
            v4: match gateway_of(v4) {
                Some(IpAddr::V4(g)) => Some(g),
                _ => None,
            },
            v6: match gateway_of(v6) {
                Some(IpAddr::V6(g)) => Some(g),
                _ => None,
            },
        },
        logical_switch: subnet.to_owned(),
        logical_router: Some(vpc.to_owned()),
    };
    network
        .to_annotations(PRIMARY_PROVIDER)
        .expect("the primary provider forms every key")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use kube_ovn_api::annotations::IpRange;

    use super::*;

    fn pod(annotations: serde_json::Value) -> Pod {
        let mut v = json!({"metadata": {"name": "p", "namespace": "ns"}});
        v["metadata"]["annotations"] = annotations;
        serde_json::from_value(v).unwrap()
    }

    fn cidrs(list: &[&str]) -> Vec<ipnet::IpNet> {
        list.iter().map(|c| c.parse().unwrap()).collect()
    }

    #[test]
    fn routes_must_parse_and_match_the_families_the_pod_gets() {
        let v4 = cidrs(&["10.16.0.0/16"]);
        let dual = cidrs(&["10.16.0.0/16", "fd00:10:16::/64"]);
        let ok = pod(json!({keys::ROUTES: r#"[{"dst":"192.168.0.0/16","gw":"10.16.0.1"}]"#}));
        assert!(validate_routes(&ok, "s", &v4).is_ok());
        assert!(validate_routes(&pod(json!({})), "s", &v4).is_ok());

        let bad = pod(json!({keys::ROUTES: "[{\"dst\": 10}]"}));
        let e = validate_routes(&bad, "s", &v4).unwrap_err().to_string();
        assert!(e.contains(keys::ROUTES) && e.contains("invalid JSON"), "{e}");

        let v6 = pod(json!({keys::ROUTES: r#"[{"gw":"fd00::1"}]"#}));
        let e = validate_routes(&v6, "s", &v4).unwrap_err().to_string();
        assert_eq!(
            e,
            "pod ns/p: metadata.annotations[\"ovn.kubernetes.io/routes\"]: route {\"gw\":\"fd00::1\"} \
             is ipv6, but the pod's NIC in subnet s has only ipv4"
        );
        assert!(validate_routes(&v6, "s", &dual).is_ok());
        // A dual-stack subnet, but the pod asks for IPv4 only.
        let narrowed = pod(json!({keys::ROUTES: r#"[{"dst":"fd00:1::/64"}]"#, keys::IP_FAMILY: "ipv4"}));
        assert!(validate_routes(&narrowed, "s", &dual).is_err());
    }

    fn pool(name: &str, namespaces: &[&str]) -> Arc<IPPool> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name},
                "spec": {"subnet": "s", "ips": ["10.16.0.8/29"], "namespaces": namespaces}}))
            .unwrap(),
        )
    }

    #[test]
    fn allocate_takes_the_namespace_pool_and_skips_the_nodes_addresses_in_the_ipam_it_is_given() {
        let mut ipam = Ipam::with_seed(7);
        let config = crate::ipam::SubnetConfig {
            cidrs: cidrs(&["10.16.0.0/27"]),
            gateways: vec!["10.16.0.1".parse().unwrap()],
            exclude_ips: Vec::new(),
        };
        ipam.add_or_update_subnet("s", &config).unwrap();
        ipam.add_or_update_pool("s", "ns-pool", &[IpRange::Cidr("10.16.0.8/29".parse().unwrap())])
            .unwrap();
        let pools = [pool("other", &["elsewhere"]), pool("ns-pool", &["ns"])];
        let node_ips: Vec<IpAddr> = ["10.16.0.8".parse().unwrap(), "10.16.0.9".parse().unwrap()].into();
        let cluster = Cluster {
            pools: &pools,
            node_ips: &node_ips,
        };
        assert!(uses_namespace_pools(&pod(json!({}))));
        let a = allocate(&mut ipam, &cluster, &pod(json!({})), "s", "p.ns").unwrap();
        assert_eq!(a.pool, "ns-pool");
        let v4 = a.v4.unwrap();
        assert!(
            "10.16.0.8/29".parse::<ipnet::Ipv4Net>().unwrap().contains(&v4) && !node_ips.contains(&v4.into()),
            "{v4}: in the namespace's pool, not a node's address"
        );
        assert_eq!(
            ipam.allocation("s", "p.ns"),
            Some(&a),
            "the IPAM handed in holds it"
        );

        // A static address is asked for as it is, and a taken one is refused: nothing changes.
        let pinned = pod(json!({keys::IP_ADDRESS: v4.to_string()}));
        let e = allocate(&mut ipam, &cluster, &pinned, "s", "q.ns").unwrap_err();
        assert!(matches!(e, Error::Ipam(IpamError::Conflict { .. })), "{e}");
        assert_eq!(ipam.allocation("s", "q.ns"), None);
    }

    #[test]
    fn the_handshake_is_kube_ovns_and_reads_back_through_the_typed_reader() {
        let alloc = Allocation {
            v4: Some("10.16.0.5".parse().unwrap()),
            v6: None,
            mac: MacAddr([0, 0, 0, 0x0a, 0x10, 0x05]),
            pool: String::new(),
        };
        let cidrs = [
            "10.16.0.0/16".parse().unwrap(),
            "fd00:10:16::/64".parse().unwrap(),
        ];
        let gateways = ["10.16.0.1".parse().unwrap(), "fd00:10:16::1".parse().unwrap()];
        let want = handshake("ovn-default", "ovn-cluster", &cidrs, &gateways, &alloc);
        // Only the families the pod has an address in.
        assert_eq!(want[keys::IP_ADDRESS], "10.16.0.5");
        assert_eq!(want[keys::CIDR], "10.16.0.0/16");
        assert_eq!(want[keys::GATEWAY], "10.16.0.1");
        assert_eq!(want[keys::MAC_ADDRESS], "00:00:00:0a:10:05");
        assert_eq!(want[keys::LOGICAL_SWITCH], "ovn-default");
        assert_eq!(want[keys::LOGICAL_ROUTER], "ovn-cluster");
        assert_eq!(want[keys::ALLOCATED], "true");
        let read = PodNetwork::read(Some(&want), PRIMARY_PROVIDER).unwrap().unwrap();
        assert_eq!(read.addresses.v4, alloc.v4);
        assert_eq!(read.mac, alloc.mac);
    }

    #[test]
    fn underlay_pods_name_their_vlan_and_the_router_only_where_it_is_their_gateway() {
        let sub = |spec: serde_json::Value| {
            let s: kube_ovn_api::crd::Subnet =
                serde_json::from_value(json!({"metadata": {"name": "ul"}, "spec": spec})).unwrap();
            crate::reconcile::subnet_spec::effective(&s, "ovn-cluster").unwrap()
        };
        let alloc = Allocation {
            v4: Some("172.17.0.5".parse().unwrap()),
            v6: None,
            mac: MacAddr([0, 0, 0, 0xaa, 0xbb, 0xcc]),
            pool: String::new(),
        };
        let hs = |eff: &Effective, vlan| {
            with_underlay(
                handshake("ul", "ovn-cluster", &eff.cidrs, &eff.gateways, &alloc),
                eff,
                vlan,
            )
        };
        let plain = sub(json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100"}));
        let a = hs(&plain, Some((100, "pn1")));
        assert_eq!(a.get(keys::VLAN_ID).map(String::as_str), Some("100"));
        assert_eq!(a.get(keys::PROVIDER_NETWORK).map(String::as_str), Some("pn1"));
        assert_eq!(a.get(keys::LOGICAL_ROUTER), None);
        assert_eq!(a.get(keys::GATEWAY).map(String::as_str), Some("172.17.0.1"));
        for spec in [
            json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100", "logicalGateway": true}),
            json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100", "u2oInterconnection": true}),
        ] {
            let a = hs(&sub(spec), Some((100, "pn1")));
            assert_eq!(
                a.get(keys::LOGICAL_ROUTER).map(String::as_str),
                Some("ovn-cluster")
            );
            assert_eq!(a.get(keys::VLAN_ID).map(String::as_str), Some("100"));
        }
        let overlay = hs(&sub(json!({"cidrBlock": "10.16.0.0/16"})), None);
        assert_eq!(
            overlay.get(keys::LOGICAL_ROUTER).map(String::as_str),
            Some("ovn-cluster")
        );
        assert_eq!(overlay.get(keys::VLAN_ID), None);
    }
}
