//! OvnEips (OVN-native NAT on a VPC router, issue 26), announced from the node where each lives.
//!
//! Released Kube-OVN never announces an OvnEip over BGP (its users ask for it: kubeovn/kube-ovn
//! #5010, #6229, #4916); this is ours. An OvnEip is announced as a /32 (/128) of `status.v4Ip`
//! and `status.v6Ip`, with this node as next hop, by the one speaker on the node where OVN
//! answers for the address, when all of these hold:
//!
//! - the annotation `ovn.kubernetes.io/bgp` is the literal `"true"` (as for IptablesEIPs and
//!   Services);
//! - `status.ready` is true;
//! - it is in use: its type (`status.type`, else the label `ovn.kubernetes.io/ovn_eip_type`) is
//!   `lrp` (a VPC router's own port on the external network), or `status.nat` names a rule kind
//!   (`fip`, `snat`, `dnat`);
//! - the Subnet its label `ovn.kubernetes.io/subnet` names exists, is Ready and contains the
//!   address; otherwise the address is refused (a Warning event on the OvnEip, once);
//! - "where" is this node ([`location`]): the EIP's own `status.activateGateway` when the
//!   controller wrote one (an `lrp` EIP: the node whose chassis holds the router's gateway port
//!   `cr-<lrp>` in the southbound database; an EIP of a distributed OvnFip: the pod's node); else
//!   (an EIP used by SNAT, DNAT or a centralized FIP, which OVN runs on the gateway chassis) the
//!   `status.activateGateway` of the VPC's `lrp` EIP, named after the router port
//!   `<label ovn.kubernetes.io/vpc>-<label ovn.kubernetes.io/subnet>`. So a gateway failover is
//!   one status write, however many EIPs follow the port, and the old node withdraws while the
//!   new one announces, on that watch event, as for centralized subnets ([`super::gateway`]).
//!
//! Trust: every field read here is the controller's (the status through the status subresource,
//! the labels it writes on the cluster-scoped OvnEip; the annotation `bgp` is the operator's
//! opt-in, as on an IptablesEIP). The speaker asks neither OVN nor the pods: it announces what
//! the controller says, and still refuses an address outside its external subnet (an OvnEip
//! written by hand, or by another controller). A field the controller wrote as `""` means
//! "nowhere" (the port is bound to no chassis): nobody announces, and an EIP whose own field is
//! `""` does not fall back to its router's node.
//!
//! An EIP being deleted stays announced while it exists: the controller's finalizer keeps it
//! while rules still use it (Kube-OVN's "still being used by NAT rules"), and OVN still
//! translates with it until they are gone.
//!
//! With no controller running, the statuses are frozen and so are the announcements (OVN still
//! moves the port). A cluster serving Kube-OVN's own CRD manifests prunes the unknown
//! `status.activateGateway`: nothing is announced then (use `deploy/crds`).
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use kube::Resource;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{NatKind, OvnEip};
use kube_ovn_api::names::router_port_name;

use super::refusal::{Reason, Refusal, host_problem};
use super::{Desired, Origin, Scope, Subnets, host_route};

/// Where an OvnEip lives, as the controller wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Its own `status.activateGateway` (an `lrp` EIP, or the EIP of a distributed FIP).
    Own(Vec<String>),
    /// The `status.activateGateway` of the VPC's `lrp` EIP (named here) on the same external
    /// subnet: the gateway chassis, where OVN runs SNAT, DNAT and centralized FIPs.
    Router(String, Vec<String>),
    /// Unknown: no own field, and no `lrp` EIP with one (not yet written, or the EIP names no
    /// VPC): no speaker announces it.
    Unknown,
}

impl Location {
    /// The nodes whose speakers announce the EIP.
    pub fn nodes(&self) -> &[String] {
        match self {
            Location::Own(nodes) | Location::Router(_, nodes) => nodes,
            Location::Unknown => &[],
        }
    }
}

pub(crate) fn label<'a>(eip: &'a OvnEip, key: &str) -> Option<&'a str> {
    eip.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The type in effect: `status.type`, else the controller's label (Kube-OVN writes both).
fn eip_type(eip: &OvnEip) -> Option<&str> {
    eip.status
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .filter(|t| !t.is_empty())
        .or_else(|| label(eip, keys::OVN_EIP_TYPE_LABEL))
}

fn is_lrp(eip: &OvnEip) -> bool {
    eip_type(eip) == Some("lrp")
}

/// Whether something uses the address: the router's own port, or a NAT rule (`status.nat`).
pub(crate) fn in_use(eip: &OvnEip) -> bool {
    let nat = eip
        .status
        .as_ref()
        .and_then(|s| s.nat.as_deref())
        .unwrap_or_default();
    is_lrp(eip) || !NatKind::parse_status(nat).is_empty()
}

/// The node list of an `activateGateway` value (one node; a comma list is read as the Subnet's
/// field is), `None` when the field is absent.
fn active(eip: &OvnEip) -> Option<Vec<String>> {
    let value = eip.status.as_ref()?.activate_gateway.as_deref()?;
    Some(
        value
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect(),
    )
}

/// Where `eip` lives; `by_name` holds every OvnEip by name (for the router's `lrp` EIP).
pub fn location(eip: &OvnEip, by_name: &BTreeMap<&str, &OvnEip>) -> Location {
    if let Some(nodes) = active(eip) {
        return Location::Own(nodes);
    }
    if is_lrp(eip) {
        return Location::Unknown;
    }
    let (Some(vpc), Some(subnet)) = (label(eip, keys::VPC_LABEL), label(eip, keys::SUBNET_LABEL)) else {
        return Location::Unknown;
    };
    // Kube-OVN names a VPC's lrp EIP after its router port on the external subnet.
    let name = router_port_name(vpc, subnet);
    match by_name.get(name.as_str()) {
        Some(router) if is_lrp(router) => match active(router) {
            Some(nodes) => Location::Router(name, nodes),
            None => Location::Unknown,
        },
        _ => Location::Unknown,
    }
}

/// Adds the addresses of the OvnEips this speaker announces, and the refusals.
pub(super) fn add(eips: &[Arc<OvnEip>], subnets: &Subnets<'_>, scope: &Scope<'_>, out: &mut Desired) {
    let by_name: BTreeMap<&str, &OvnEip> = eips
        .iter()
        .filter_map(|e| Some((e.metadata.name.as_deref()?, e.as_ref())))
        .collect();
    for eip in eips {
        let annotated = eip
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::BGP))
            .is_some_and(|v| v == "true");
        let Some(status) = eip.status.as_ref() else {
            continue;
        };
        if !annotated || status.ready != Some(true) || !in_use(eip) {
            continue;
        }
        let location = location(eip, &by_name);
        if !location.nodes().iter().any(|n| n == scope.node_name) {
            continue;
        }
        let name = eip.metadata.name.clone().unwrap_or_default();
        let refusal = |field: String, reason, message| Refusal {
            object: eip.object_ref(&()),
            field,
            reason,
            message,
        };
        let subnet = label(eip, keys::SUBNET_LABEL).unwrap_or_default();
        if !subnets.ready(subnet) {
            out.refusals.push(refusal(
                super::refusal::label_field(keys::SUBNET_LABEL),
                Reason::SubnetNotReady,
                format!("external subnet {subnet:?} does not exist or is not Ready: not announced"),
            ));
            continue;
        }
        for (field, value) in [("status.v4Ip", &status.v4_ip), ("status.v6Ip", &status.v6_ip)] {
            let Some(value) = value.as_deref().filter(|v| !v.is_empty()) else {
                continue;
            };
            let Ok(ip) = value.parse::<IpAddr>() else {
                out.refusals.push(refusal(
                    field.into(),
                    Reason::NotUnicast,
                    format!("{value:?} is not an IP address: not announced"),
                ));
                continue;
            };
            if let Some(problem) = host_problem(ip) {
                out.refusals.push(refusal(
                    field.into(),
                    Reason::NotUnicast,
                    format!("{ip} is {problem}: not announced"),
                ));
            } else if !subnets.contains(subnet, ip) {
                out.refusals.push(refusal(
                    field.into(),
                    Reason::OutsideSubnet,
                    format!("{ip} lies outside the CIDR of its external subnet {subnet}: not announced"),
                ));
            } else {
                out.add(host_route(ip), Origin::OvnEip(name.clone()));
            }
        }
    }
}
