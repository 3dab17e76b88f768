//! IPAM rebuilt at start-up from what is authoritative — IP CRs, then the northbound ports (the
//! one record a crash between port and annotations leaves), then the pods' and nodes'
//! annotations — read from the filled caches and the northbound replica, before any reconciler
//! allocates or releases.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube::ResourceExt;
use kube_ovn_api::annotations::{IpPair, IpRange, MacAddr, get, is_true, keys, parse};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::LogicalSwitchPort;

use super::pod_state::port_name;
use super::subnet_spec::effective;
use crate::config::Config;
use crate::ipam::{Ipam, Request};
use crate::ovn::Nb;
use crate::ovn::plan::is_owned_by;
use crate::stores::Stores;

/// What a rebuild reserved, and what it could not (a conflict between two sources is logged, and
/// the later claimant gets a fresh address when it is reconciled).
#[derive(Debug, Default)]
pub struct Rebuilt {
    pub reserved: usize,
    pub conflicts: Vec<String>,
}

fn request(ips: &[IpAddr], mac: Option<MacAddr>) -> Request {
    let mut r = Request {
        mac,
        ..Request::default()
    };
    for ip in ips {
        match ip {
            IpAddr::V4(v) => r.v4 = Some(*v),
            IpAddr::V6(v) => r.v6 = Some(*v),
        }
    }
    r
}

/// Rebuilds IPAM from the filled caches and the northbound replica, before any reconciler runs.
/// No I/O: the caller waits for the caches.
pub fn rebuild_ipam(config: &Config, stores: &Stores, nb: &Nb) -> (Ipam, Rebuilt) {
    let mut ipam = Ipam::new();
    let mut out = Rebuilt::default();
    for s in &stores.subnets.state() {
        if let Ok(eff) = effective(s, &config.cluster_router)
            && let Ok(cfg) = eff.ipam_config()
            && let Err(e) = ipam.add_or_update_subnet(&s.name_any(), &cfg)
        {
            out.conflicts.push(format!("subnet {}: {e}", s.name_any()));
        }
    }
    for p in stores.ippools.state() {
        let ranges: Vec<IpRange> = p
            .spec
            .ips
            .iter()
            .flatten()
            .filter_map(|r| parse::<IpRange>("spec.ips", r).ok())
            .collect();
        if let Err(e) = ipam.add_or_update_pool(
            p.spec.subnet.as_deref().unwrap_or_default(),
            &p.name_any(),
            &ranges,
        ) {
            out.conflicts.push(format!("ippool {}: {e}", p.name_any()));
        }
    }
    let mut claims: Vec<(String, String, Request, &'static str)> = Vec::new();
    for ip in stores.ips.state() {
        let s = &ip.spec;
        let addrs: Vec<IpAddr> = [s.v4_ip_address.as_deref(), s.v6_ip_address.as_deref()]
            .into_iter()
            .flatten()
            .filter_map(|a| a.parse().ok())
            .collect();
        let mac = s
            .mac_address
            .as_deref()
            .and_then(|m| parse::<MacAddr>("spec.macAddress", m).ok());
        if let Some(subnet) = s.subnet.clone().filter(|s| !s.is_empty())
            && !addrs.is_empty()
        {
            claims.push((subnet, ip.name_any(), request(&addrs, mac), "IP CR"));
        }
    }
    let ports: Vec<(String, String, Request)> = nb.read(|cache| {
        cache
            .table(LogicalSwitchPort::NAME)
            .filter_map(|(u, r)| LogicalSwitchPort::from_row(*u, r).ok())
            .filter(|p| is_owned_by(&p.external_ids, &[]) && p.external_ids.contains_key("pod"))
            .filter_map(|p| {
                let subnet = p.external_ids.get("ls")?.clone();
                let mut words = p.addresses.first()?.split_whitespace();
                let mac = words.next().and_then(|m| parse::<MacAddr>("addresses", m).ok());
                let ips: Vec<IpAddr> = words.filter_map(|w| w.parse().ok()).collect();
                // A port without addresses claims none (an empty request would take a new one).
                (!ips.is_empty()).then(|| (subnet, p.name, request(&ips, mac)))
            })
            .collect()
    });
    claims.extend(ports.into_iter().map(|(s, k, r)| (s, k, r, "northbound port")));
    for pod in stores.pods.state() {
        let ann = pod.metadata.annotations.as_ref();
        if !is_true(ann, keys::ALLOCATED) {
            continue;
        }
        let (Some(subnet), Ok(Some(ips))) = (
            ann.and_then(|a| a.get(keys::LOGICAL_SWITCH)).cloned(),
            get::<IpPair>(ann, keys::IP_ADDRESS),
        ) else {
            continue;
        };
        let mac = get::<MacAddr>(ann, keys::MAC_ADDRESS).ok().flatten();
        let key = port_name(&pod);
        claims.push((
            subnet,
            key,
            request(&ips.addrs().collect::<Vec<_>>(), mac),
            "pod annotation",
        ));
    }
    for node in stores.nodes.state() {
        let ann = node.metadata.annotations.as_ref();
        if let (true, Ok(Some(ips))) = (
            is_true(ann, keys::ALLOCATED),
            get::<IpPair>(ann, keys::IP_ADDRESS),
        ) {
            let mac = get::<MacAddr>(ann, keys::MAC_ADDRESS).ok().flatten();
            claims.push((
                config.node_subnet.name.clone(),
                names::node_port_name(&node.name_any()),
                request(&ips.addrs().collect::<Vec<_>>(), mac),
                "node annotation",
            ));
        }
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
    for c in &out.conflicts {
        tracing::warn!(conflict = %c, "IPAM rebuild");
    }
    tracing::info!(
        reserved = out.reserved,
        conflicts = out.conflicts.len(),
        "IPAM rebuilt"
    );
    (ipam, out)
}
