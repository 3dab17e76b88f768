//! IPAM rebuilt at start-up from what is authoritative — IP CRs, then the northbound ports (the
//! one record a crash between port and annotations leaves), then the nodes' annotations — read
//! from the filled caches and the northbound replica, before any reconciler allocates or releases.
//!
//! A pod's own annotations are not a source: its author can write `allocated: "true"` with any
//! subnet and address when creating it, and a rebuild that believed them would reserve that
//! address in another tenant's subnet for the pod (and refuse it to its owner). The controller
//! writes the port and the IP CR before it names an address in the annotations, so a pod it
//! networked always has at least one of those records. Nodes are written by kubelets and the
//! platform, not tenants.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube_ovn_api::crd::{IPPool, Ip, OvnEip, Subnet};

use kube::ResourceExt;
use kube_ovn_api::annotations::{IpPair, IpRange, MacAddr, get, is_true, keys, parse};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::LogicalSwitchPort;

use crate::config::Config;
use crate::ipam::{Ipam, Request};
use crate::ovn::Nb;
use crate::ovn::plan::is_owned_by;
use crate::reconcile::subnet_spec::effective;
use crate::stores::Stores;

/// What a rebuild reserved, and what it could not: a conflict between two sources (the later
/// claimant gets a fresh address when it is reconciled), and records it could not read (their
/// addresses are not reserved; each is logged naming the object and field).
#[derive(Debug, Default)]
pub struct Rebuilt {
    pub reserved: usize,
    pub conflicts: Vec<String>,
    pub unreadable: Vec<String>,
}

/// The records IPAM is rebuilt from, as the caches and the northbound replica hold them.
#[derive(Default)]
pub struct Records {
    pub subnets: Vec<Arc<Subnet>>,
    pub ippools: Vec<Arc<IPPool>>,
    pub ips: Vec<Arc<Ip>>,
    /// The controller's pod ports.
    pub ports: Vec<LogicalSwitchPort>,
    pub nodes: Vec<Arc<Node>>,
    /// OvnEips: their `status` addresses and MAC on their external subnet.
    pub ovn_eips: Vec<Arc<OvnEip>>,
    /// Default-VPC pods' EIP/SNAT addresses, by our NAT rows: `(subnet, IPAM key, address)`
    /// (`reconcile::pod_eip`).
    pub pod_eips: Vec<(String, String, std::net::Ipv4Addr)>,
}

/// Rebuilds IPAM from the filled caches and the northbound replica, before any reconciler runs,
/// and logs what it could not reserve. No I/O: the caller waits for the caches.
pub fn rebuild_ipam(config: &Config, stores: &Stores, nb: &Nb) -> (Ipam, Rebuilt) {
    let ports = nb.read(|cache| {
        cache
            .table(LogicalSwitchPort::NAME)
            .filter_map(|(u, r)| LogicalSwitchPort::from_row(*u, r).ok())
            .filter(|p| is_owned_by(&p.external_ids, &[]) && p.external_ids.contains_key("pod"))
            .collect()
    });
    let pod_eips = nb.read(|cache| {
        crate::reconcile::pod_eip::reserved_in_nb(cache, &config.cluster_router, &config.external.switch)
    });
    let records = Records {
        pod_eips,
        subnets: stores.subnets.state(),
        ippools: stores.ippools.state(),
        ips: stores.ips.state(),
        ports,
        nodes: stores.nodes.state(),
        ovn_eips: stores.ovn_eips.state(),
    };
    let (ipam, out) = rebuild(&config.cluster_router, &config.node_subnet.name, &records);
    let (ipam, out) = with_ovn_eips(ipam, out, &records.ovn_eips, &config.external.switch);
    for u in &out.unreadable {
        tracing::warn!(record = %u, "IPAM rebuild: a record could not be read; its address is not reserved");
    }
    for c in &out.conflicts {
        tracing::warn!(conflict = %c, "IPAM rebuild");
    }
    tracing::info!(
        reserved = out.reserved,
        conflicts = out.conflicts.len(),
        unreadable = out.unreadable.len(),
        "IPAM rebuilt"
    );
    (ipam, out)
}

/// Parses what a record holds, noting what does not parse (`what` names record and field).
fn readable<T, E: std::fmt::Display>(
    unreadable: &mut Vec<String>,
    what: impl FnOnce() -> String,
    r: Result<T, E>,
) -> Option<T> {
    r.map_err(|e| unreadable.push(format!("{}: {e}", what()))).ok()
}

/// An annotation's value, if present and readable.
fn annotation<T: kube_ovn_api::annotations::AnnotationValue>(
    unreadable: &mut Vec<String>,
    object: &str,
    ann: Option<&BTreeMap<String, String>>,
    key: &str,
) -> Option<T> {
    readable(unreadable, || object.to_owned(), get::<T>(ann, key)).flatten()
}

/// OvnEips after the other records (Kube-OVN: after IptablesEIPs, before nodes; nodes hold
/// join addresses, never an external subnet's, so the order changes nothing): each EIP's `status.v4Ip`/`v6Ip` and
/// `macAddress` on `spec.externalSubnet` (empty: `default_subnet`), key = the EIP's name. Both
/// families (Kube-OVN: v4 only), so a dual-stack EIP keeps its IPv6 address too.
pub fn with_ovn_eips(
    mut ipam: Ipam,
    mut out: Rebuilt,
    eips: &[Arc<OvnEip>],
    default_subnet: &str,
) -> (Ipam, Rebuilt) {
    for e in eips {
        let name = e.name_any();
        let status = e.status.clone().unwrap_or_default();
        let bad = &mut out.unreadable;
        let addrs: Vec<IpAddr> = [("status.v4Ip", &status.v4_ip), ("status.v6Ip", &status.v6_ip)]
            .into_iter()
            .filter_map(|(field, a)| Some((field, a.as_deref().filter(|a| !a.is_empty())?)))
            .filter_map(|(field, a)| {
                readable(
                    bad,
                    || format!("OvnEip {name}: {field} {a:?}"),
                    a.parse::<IpAddr>(),
                )
            })
            .collect();
        if addrs.is_empty() {
            continue;
        }
        let mac = status
            .mac_address
            .as_deref()
            .filter(|m| !m.is_empty())
            .and_then(|m| {
                readable(
                    bad,
                    || format!("OvnEip {name}"),
                    parse::<MacAddr>("status.macAddress", m),
                )
            });
        let subnet = e
            .spec
            .external_subnet
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| default_subnet.to_owned());
        match ipam.allocate(&subnet, &name, &Request::pinned(addrs, mac)) {
            Ok(_) => out.reserved += 1,
            Err(e) => out.conflicts.push(format!("OvnEip {name}: {e}")),
        }
    }
    (ipam, out)
}

/// The rebuild itself: subnets and IP pools from their CRs, then every recorded allocation in
/// order of authority (IP CRs, northbound ports, nodes' annotations); the first claim
/// of a NIC in a subnet holds.
pub fn rebuild(cluster_router: &str, join_subnet: &str, records: &Records) -> (Ipam, Rebuilt) {
    let mut ipam = Ipam::new();
    let mut out = Rebuilt::default();
    let bad = &mut out.unreadable;
    for s in &records.subnets {
        let name = s.name_any();
        let Some(cfg) = readable(
            bad,
            || format!("subnet {name}"),
            effective(s, cluster_router).and_then(|e| e.ipam_config()),
        ) else {
            continue;
        };
        if let Err(e) = ipam.add_or_update_subnet(&name, &cfg) {
            out.conflicts.push(format!("subnet {name}: {e}"));
        }
    }
    for p in &records.ippools {
        let name = p.name_any();
        let ranges: Vec<IpRange> = p
            .spec
            .ips
            .iter()
            .flatten()
            .filter_map(|r| readable(bad, || format!("IP pool {name}"), parse::<IpRange>("spec.ips", r)))
            .collect();
        if let Err(e) = ipam.add_or_update_pool(p.spec.subnet.as_deref().unwrap_or_default(), &name, &ranges)
        {
            out.conflicts.push(format!("IP pool {name}: {e}"));
        }
    }
    let mut claims: Vec<(String, String, Request, &'static str)> = Vec::new();
    for ip in &records.ips {
        let (name, s) = (ip.name_any(), &ip.spec);
        let addrs: Vec<IpAddr> = [
            ("spec.v4IpAddress", &s.v4_ip_address),
            ("spec.v6IpAddress", &s.v6_ip_address),
        ]
        .into_iter()
        .filter_map(|(field, a)| Some((field, a.as_deref().filter(|a| !a.is_empty())?)))
        .filter_map(|(field, a)| readable(bad, || format!("IP {name}: {field} {a:?}"), a.parse::<IpAddr>()))
        .collect();
        let mac = s.mac_address.as_deref().filter(|m| !m.is_empty()).and_then(|m| {
            readable(
                bad,
                || format!("IP {name}"),
                parse::<MacAddr>("spec.macAddress", m),
            )
        });
        if let Some(subnet) = s.subnet.clone().filter(|s| !s.is_empty())
            && !addrs.is_empty()
        {
            claims.push((subnet, name, Request::pinned(addrs, mac), "IP CR"));
        }
    }
    for p in &records.ports {
        let Some(subnet) = p.external_ids.get("ls") else {
            continue;
        };
        let Some(mut words) = p.addresses.first().map(|a| a.split_whitespace()) else {
            continue;
        };
        let what = || format!("northbound port {}: addresses {:?}", p.name, p.addresses[0]);
        let mac = words
            .next()
            .and_then(|m| readable(bad, what, parse::<MacAddr>("addresses", m)));
        let ips: Vec<IpAddr> = words
            .filter_map(|w| readable(bad, what, w.parse::<IpAddr>()))
            .collect();
        // A port without addresses claims none (an empty request would take a new one).
        if !ips.is_empty() {
            claims.push((
                subnet.clone(),
                p.name.clone(),
                Request::pinned(ips, mac),
                "northbound port",
            ));
        }
    }
    for node in &records.nodes {
        let ann = node.metadata.annotations.as_ref();
        if !is_true(ann, keys::ALLOCATED) {
            continue;
        }
        let object = format!("node {}", node.name_any());
        if let Some(ips) = annotation::<IpPair>(bad, &object, ann, keys::IP_ADDRESS) {
            let mac = annotation::<MacAddr>(bad, &object, ann, keys::MAC_ADDRESS);
            claims.push((
                join_subnet.to_owned(),
                names::node_port_name(&node.name_any()),
                Request::pinned(ips.addrs(), mac),
                "node annotation",
            ));
        }
    }
    for (subnet, key, ip) in &records.pod_eips {
        claims.push((
            subnet.clone(),
            key.clone(),
            Request::pinned([IpAddr::V4(*ip)], None),
            "pod EIP/SNAT NAT row",
        ));
    }
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for (subnet, key, req, source) in claims {
        // The same NIC seen again from a later source: the first (more authoritative) one holds.
        if let Some(first) = seen.get(&key)
            && first == &subnet
        {
            continue;
        }
        match ipam.allocate(&subnet, &key, &req) {
            Ok(_) => {
                out.reserved += 1;
                seen.insert(key, subnet);
            }
            Err(e) => out.conflicts.push(format!("{source} {key}: {e}")),
        }
    }
    (ipam, out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn unreadable_records_are_named_not_dropped_silently() {
        let records = Records {
            subnets: vec![obj(
                json!({"metadata": {"name": "s1"}, "spec": {"cidrBlock": "10.0.0.0/24", "protocol": "IPv4"}}),
            )],
            ippools: vec![obj(
                json!({"metadata": {"name": "pool1"}, "spec": {"subnet": "s1", "ips": ["10.0.0.10..10.0.0.20", "10.0.0.x"]}}),
            )],
            ips: vec![
                obj(
                    json!({"metadata": {"name": "a.ns"}, "spec": {"subnet": "s1", "v4IpAddress": "10.0.0.300"}}),
                ),
                obj(
                    json!({"metadata": {"name": "b.ns"}, "spec": {"subnet": "s1", "v4IpAddress": "10.0.0.5"}}),
                ),
            ],
            ..Records::default()
        };
        let (ipam, out) = rebuild("ovn-cluster", "join", &records);
        let said = out.unreadable.join("\n");
        for words in [["IP pool pool1", "10.0.0.x"], ["IP a.ns", "10.0.0.300"]] {
            assert!(
                out.unreadable.iter().any(|u| words.iter().all(|w| u.contains(w))),
                "no report naming {words:?} in:\n{said}"
            );
        }
        assert_eq!(out.unreadable.len(), 2, "{said}");
        assert_eq!(out.reserved, 1, "the readable IP CR is reserved");
        assert!(ipam.allocation("s1", "b.ns").is_some());
    }

    #[test]
    fn an_ovn_eip_keeps_both_addresses_and_its_mac_under_its_name() {
        let records = Records {
            subnets: vec![obj(
                json!({"metadata": {"name": "external"}, "spec": {"cidrBlock": "10.200.0.0/24,fd20::/120", "protocol": "Dual"}}),
            )],
            ..Records::default()
        };
        let (ipam, out) = rebuild("ovn-cluster", "join", &records);
        let eips = vec![
            obj(json!({"metadata": {"name": "e1"}, "spec": {},
                "status": {"v4Ip": "10.200.0.50", "v6Ip": "fd20::50", "macAddress": "00:00:00:aa:bb:cc"}})),
            obj(json!({"metadata": {"name": "e2"}, "spec": {"externalSubnet": "external"}})),
        ];
        let (ipam, out) = with_ovn_eips(ipam, out, &eips, "external");
        assert_eq!(out.reserved, 1, "{out:?}");
        let a = ipam.allocation("external", "e1").expect("e1 reserved");
        assert_eq!(a.v4, Some("10.200.0.50".parse().unwrap()));
        assert_eq!(a.v6, Some("fd20::50".parse().unwrap()));
        assert_eq!(a.mac.to_string(), "00:00:00:aa:bb:cc");
        assert!(
            ipam.allocation("external", "e2").is_none(),
            "no address yet: nothing reserved"
        );
    }
}
