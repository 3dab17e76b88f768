//! What NetworkPolicies allow, for the matrix's expectations (pure), by Kubernetes' rules rather
//! than from the controller's OVN rows, so the matrix checks the controller instead of repeating
//! it:
//! - a pod is isolated for ingress (egress) when a policy of its namespace selects it and lists
//!   that direction in `policyTypes` (absent: Ingress, plus Egress when it has egress rules);
//! - a connection needs both ends' consent: the destination's ingress (when isolated) and the
//!   source's egress (when isolated), each granted by any rule of any policy selecting it (the
//!   union);
//! - a rule with no peers admits everyone and with no ports every port; a peer is an `ipBlock`
//!   (the address in `cidr` and in none of `except`) or pod/namespace selectors (no namespace
//!   selector: the policy's own namespace; no pod selector: every pod there); a named port is the
//!   destination pod's container port of that name.
//!
//! Only TCP is modelled: the matrix probes HTTP. A policy with a selector the API would refuse
//! grants nothing.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_ovn_api::selector::Selector;

/// A pod as policies see it.
#[derive(Debug, Clone, Copy)]
pub struct PodView<'a> {
    pub namespace: &'a str,
    pub labels: &'a BTreeMap<String, String>,
    pub namespace_labels: &'a BTreeMap<String, String>,
    /// Its containers' named ports.
    pub named_ports: &'a BTreeMap<String, u16>,
}

/// One end of a connection: an address, and the pod behind it when there is one.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint<'a> {
    pub ip: IpAddr,
    pub pod: Option<PodView<'a>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Ingress,
    Egress,
}

/// Whether `policies` let `from` open a TCP connection to `to` on `port`.
pub fn allows(policies: &[NetworkPolicy], from: &Endpoint, to: &Endpoint, port: u16) -> bool {
    let ingress = to.pod.is_none_or(|pod| {
        consents(policies, &pod, Direction::Ingress, |policy_ns, peer, ports| {
            peers_match(policy_ns, peer, from) && ports_match(ports, port, &pod)
        })
    });
    let egress = from.pod.is_none_or(|pod| {
        consents(policies, &pod, Direction::Egress, |policy_ns, peer, ports| {
            peers_match(policy_ns, peer, to)
                && to.pod.map_or_else(
                    || ports_match_numbers(ports, port),
                    |dest| ports_match(ports, port, &dest),
                )
        })
    });
    ingress && egress
}

/// Whether `pod` consents in `direction`: not isolated, or some rule admits (`admits` sees the
/// policy's namespace, the rule's peers and ports).
fn consents<'p>(
    policies: &'p [NetworkPolicy],
    pod: &PodView,
    direction: Direction,
    admits: impl Fn(&str, Option<&'p [NetworkPolicyPeer]>, Option<&'p [NetworkPolicyPort]>) -> bool,
) -> bool {
    let mut isolated = false;
    for policy in policies {
        let Some(spec) = &policy.spec else { continue };
        let namespace = policy.metadata.namespace.as_deref().unwrap_or_default();
        if namespace != pod.namespace || !selects(spec.pod_selector.as_ref(), pod.labels) {
            continue;
        }
        let has_egress = spec.egress.is_some();
        let types: Vec<&str> = match &spec.policy_types {
            Some(types) => types.iter().map(String::as_str).collect(),
            None if has_egress => vec!["Ingress", "Egress"],
            None => vec!["Ingress"],
        };
        let wanted = match direction {
            Direction::Ingress => "Ingress",
            Direction::Egress => "Egress",
        };
        if !types.contains(&wanted) {
            continue;
        }
        isolated = true;
        let granted = match direction {
            Direction::Ingress => spec
                .ingress
                .iter()
                .flatten()
                .any(|rule| admits(namespace, rule.from.as_deref(), rule.ports.as_deref())),
            Direction::Egress => spec
                .egress
                .iter()
                .flatten()
                .any(|rule| admits(namespace, rule.to.as_deref(), rule.ports.as_deref())),
        };
        if granted {
            return true;
        }
    }
    !isolated
}

/// A selector against labels; one the API would refuse selects nothing.
fn selects(selector: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    Selector::parse(selector, "").is_ok_and(|s| s.matches(labels))
}

/// No peers: anyone. Otherwise any peer admitting `other`.
fn peers_match(policy_ns: &str, peers: Option<&[NetworkPolicyPeer]>, other: &Endpoint) -> bool {
    let Some(peers) = peers.filter(|p| !p.is_empty()) else {
        return true;
    };
    peers.iter().any(|peer| {
        if let Some(block) = &peer.ip_block {
            let within = |cidr: &str| cidr.parse::<IpNet>().is_ok_and(|net| net.contains(&other.ip));
            return within(&block.cidr) && !block.except.iter().flatten().any(|e| within(e));
        }
        let Some(pod) = other.pod else {
            return false;
        };
        let namespace_ok = match &peer.namespace_selector {
            None => pod.namespace == policy_ns,
            Some(selector) => selects(Some(selector), pod.namespace_labels),
        };
        namespace_ok
            && peer
                .pod_selector
                .as_ref()
                .is_none_or(|s| selects(Some(s), pod.labels))
    })
}

/// No ports: every port. Otherwise a TCP entry covering `port` by number, range or `dest`'s
/// named port.
fn ports_match(ports: Option<&[NetworkPolicyPort]>, port: u16, dest: &PodView) -> bool {
    any_port(ports, |p| match &p.port {
        None => true,
        Some(IntOrString::Int(n)) => in_range(*n, p.end_port, port),
        Some(IntOrString::String(name)) => dest.named_ports.get(name) == Some(&port),
    })
}

/// As [`ports_match`] toward a host outside the cluster, whose ports have no names.
fn ports_match_numbers(ports: Option<&[NetworkPolicyPort]>, port: u16) -> bool {
    any_port(ports, |p| match &p.port {
        None => true,
        Some(IntOrString::Int(n)) => in_range(*n, p.end_port, port),
        Some(IntOrString::String(_)) => false,
    })
}

fn any_port(ports: Option<&[NetworkPolicyPort]>, covers: impl Fn(&NetworkPolicyPort) -> bool) -> bool {
    let Some(ports) = ports.filter(|p| !p.is_empty()) else {
        return true;
    };
    ports
        .iter()
        .filter(|p| p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        .any(covers)
}

fn in_range(first: i32, end: Option<i32>, port: u16) -> bool {
    let port = i32::from(port);
    first <= port && port <= end.unwrap_or(first)
}

#[cfg(test)]
mod tests;
