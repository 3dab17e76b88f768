//! What the speaker refuses to announce, and why: each refusal names the object and the field
//! the address came from, for the Warning event and the log line the routes task turns it into.
//! Also the test every announced prefix passes first (a routable unicast address), so one bad
//! address is dropped alone and never reaches the Adj-RIB-Out, which would refuse it.
//!
//! Pure: no I/O.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use k8s_openapi::api::core::v1::ObjectReference;

/// Why an address is not announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// A pod's annotation names an address no IP record (written by the controller) gives to
    /// that pod.
    NotAllocated,
    /// The IP record's subnet does not contain the address.
    OutsideSubnet,
    /// The IP record's subnet does not exist or is not Ready.
    SubnetNotReady,
    /// Not a routable unicast address or prefix (multicast, broadcast, loopback, ...).
    NotUnicast,
    /// A Service's `spec.externalIPs` entry outside `--service-external-ip-cidrs`.
    ExternalIpNotAllowed,
    /// Not a refusal: an underlay subnet whose gateway is the physical router (`vlan`, neither
    /// `logicalGateway` nor `u2oInterconnection`) is announced, as Kube-OVN announces it, with
    /// this warning ([`Reason::still_announced`]).
    OnUnderlaySubnet,
}

impl Reason {
    /// The event's `reason` (CamelCase, as Kubernetes' own).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::NotAllocated => "BgpAddressNotAllocated",
            Reason::OutsideSubnet => "BgpAddressOutsideSubnet",
            Reason::SubnetNotReady => "BgpSubnetNotReady",
            Reason::NotUnicast => "BgpPrefixNotUnicast",
            Reason::ExternalIpNotAllowed => "BgpExternalIPNotAllowed",
            Reason::OnUnderlaySubnet => "BgpOnUnderlaySubnet",
        }
    }

    /// Whether the address is announced all the same (the report is a warning only).
    pub fn still_announced(self) -> bool {
        self == Reason::OnUnderlaySubnet
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal's identity: object UID, namespace, name, field, reason.
pub type RefusalKey = (String, String, String, String, Reason);

/// One address (or prefix) not announced.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    /// The object the address came from (kind, namespace, name, UID): the event's subject.
    pub object: ObjectReference,
    /// The field, as `kubectl explain` spells it: `metadata.annotations["ovn.kubernetes.io/ip_address"]`,
    /// `spec.externalIPs[0]`, `spec.cidrBlock`, ...
    pub field: String,
    /// Why.
    pub reason: Reason,
    /// The refused value and the explanation, for the event's note and the log.
    pub message: String,
}

impl Refusal {
    /// `Kind namespace/name` (or `Kind name`), for logs.
    pub fn object_name(&self) -> String {
        let kind = self.object.kind.as_deref().unwrap_or_default();
        let name = self.object.name.as_deref().unwrap_or_default();
        match self.object.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
            _ => format!("{kind} {name}"),
        }
    }

    /// What identifies this refusal for "report once": the object (by UID, so a recreated
    /// object is reported again), the field and the reason.
    pub fn key(&self) -> RefusalKey {
        let o = &self.object;
        (
            o.uid.clone().unwrap_or_default(),
            o.namespace.clone().unwrap_or_default(),
            o.name.clone().unwrap_or_default(),
            self.field.clone(),
            self.reason,
        )
    }
}

/// The field of annotation `key`.
pub fn annotation_field(key: &str) -> String {
    format!("metadata.annotations[{key:?}]")
}

/// The field of label `key`.
pub fn label_field(key: &str) -> String {
    format!("metadata.labels[{key:?}]")
}

fn v4_problem(a: Ipv4Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        Some("the unspecified address")
    } else if a.octets()[0] == 0 {
        Some("in 0.0.0.0/8 (\"this network\", RFC 1122 §3.2.1.3)")
    } else if a.is_loopback() {
        Some("a loopback address")
    } else if a.is_broadcast() {
        Some("the limited broadcast address")
    } else if a.is_multicast() {
        Some("a multicast address")
    } else if a.octets()[0] >= 240 {
        Some("in the reserved 240.0.0.0/4 (RFC 1112 §4)")
    } else if a.is_link_local() {
        Some("a link-local address (RFC 3927: never routed)")
    } else {
        None
    }
}

fn v6_problem(a: Ipv6Addr) -> Option<&'static str> {
    if a.is_unspecified() {
        Some("the unspecified address")
    } else if a.is_loopback() {
        Some("the loopback address")
    } else if a.is_multicast() {
        Some("a multicast address")
    } else if a.is_unicast_link_local() {
        Some("a link-local address (RFC 4291 §2.5.6: never routed)")
    } else if a.to_ipv4_mapped().is_some() {
        Some("an IPv4-mapped address (RFC 4291 §2.5.5.2: not an interface address)")
    } else {
        None
    }
}

/// Why `ip` cannot be announced as a host route, or `None` when it can.
pub fn host_problem(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(a) => v4_problem(a),
        IpAddr::V6(a) => v6_problem(a),
    }
}

/// Why `net` cannot be announced, or `None` when it can: its first and last addresses must
/// both be routable unicast ones (a prefix reaching into multicast or broadcast space is no
/// unicast NLRI, RFC 4760 §2), and the Adj-RIB-Out must take it.
pub fn prefix_problem(net: IpNet) -> Option<&'static str> {
    let net = net.trunc();
    let (first, last) = match net {
        IpNet::V4(n) => (IpAddr::V4(n.network()), IpAddr::V4(n.broadcast())),
        IpNet::V6(n) => (IpAddr::V6(n.network()), IpAddr::V6(n.broadcast())),
    };
    host_problem(first)
        .or_else(|| host_problem(last).map(|_| "a prefix reaching outside unicast space"))
        .or_else(|| {
            crate::bgp::rib_out::check_unicast(&net)
                .err()
                .map(|_| "not a unicast prefix")
        })
}
