//! What this speaker announces, from the cluster's objects, with Kube-OVN's semantics for the
//! `ovn.kubernetes.io/bgp` annotation (reference §5.4). Pure: objects in, prefixes out; the
//! caller feeds the result to every peer's Adj-RIB-Out, which sends only the difference.
//!
//! - Subnets: `true`/`cluster` announce each CIDR of `spec.cidrBlock` from every speaker, once
//!   the subnet is Ready; `local` announces no CIDR (only local pods, below).
//! - Pods: every address in a `<provider>.kubernetes.io/ip_address` annotation (attachment
//!   networks included), as /32 or /128, when the pod is alive. The pod's own `bgp` value wins
//!   over its subnet's. `true`/`cluster` announce from every speaker; `local` only from the
//!   speaker on the pod's node.
//! - Centralized-gateway subnets of the default VPC: their CIDR and their pods' addresses only
//!   from the speakers on the gateway nodes in `status.activateGateway`, whatever the policy
//!   (see [`gateway`]).
//! - Services with `bgp: "true"` (the literal, as Kube-OVN): ClusterIPs when
//!   `--announce-cluster-ip` is set; LoadBalancer ingress IPs and `spec.externalIPs` always.
//! - IptablesEIPs with `bgp: "true"` that are ready: `spec.v4ip`/`spec.v6ip`, from the speaker
//!   on the node where a Running pod of the EIP's NAT gateway (`spec.natGwDp`) is: Kube-OVN's
//!   `--node-route-eip-mode`, always on here. The gateway pod is found by its label
//!   `ovn.kubernetes.io/vpc-nat-gw=true` and annotation `ovn.kubernetes.io/vpc_nat_gw=<gw>`, in
//!   any namespace (Kube-OVN looks up `vpc-nat-gw-<gw>-0` in `--vpc-nat-gw-namespace`, which
//!   misses Deployment-style gateways and gateways in other namespaces).
//!
//! Deviations (documented): Kube-OVN skips every pod of a subnet that has no annotations at all,
//! even a pod annotated itself; here the pod's annotation is honoured. A centralized-gateway
//! subnet and its pods are announced only from its active gateway nodes ([`gateway`]), where
//! Kube-OVN announces them from every speaker.

pub mod gateway;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube_ovn_api::annotations::{AnnotationError, BgpPolicy, BgpScope, IpPair, get, keys};
use kube_ovn_api::crd::{ConditionStatus, IptablesEIP, Subnet};

/// Why a prefix is announced (for logs, metrics and the CRD status).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// A subnet's CIDR.
    Subnet(String),
    /// A pod's address (`namespace/name`).
    Pod(String),
    /// A Service address (`namespace/name`).
    Service(String),
    /// An EIP (its name).
    Eip(String),
}

/// What the speaker needs to know about itself.
#[derive(Debug, Clone, Copy)]
pub struct Scope<'a> {
    /// This node (for `local`).
    pub node_name: &'a str,
    /// `--announce-cluster-ip`.
    pub announce_cluster_ip: bool,
    /// `--cluster-router`: the default VPC, where centralized gateways exist.
    pub cluster_router: &'a str,
}

/// The objects, as the caches hold them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Objects<'a> {
    /// Pods (all namespaces).
    pub pods: &'a [Arc<Pod>],
    /// Subnets.
    pub subnets: &'a [Arc<Subnet>],
    /// Services.
    pub services: &'a [Arc<Service>],
    /// IptablesEIPs.
    pub eips: &'a [Arc<IptablesEIP>],
}

/// A bad annotation found on the way; the object is skipped, the rest still announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `kind namespace/name`.
    pub object: String,
    /// Key, value and what was expected.
    pub error: AnnotationError,
}

/// The desired prefixes, each with why.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Prefix → its origin (the first found when two objects share a prefix).
    pub prefixes: BTreeMap<IpNet, Origin>,
    /// Objects skipped for a bad annotation.
    pub skipped: Vec<Skipped>,
}

impl Desired {
    fn add(&mut self, prefix: IpNet, origin: Origin) {
        self.prefixes.entry(prefix.trunc()).or_insert(origin);
    }
}

fn host_route(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    match &meta.namespace {
        Some(ns) => format!("{ns}/{}", meta.name.as_deref().unwrap_or_default()),
        None => meta.name.clone().unwrap_or_default(),
    }
}

/// Whether Kube-OVN counts the pod as alive (`isPodAlive`): not finished for good, not evicted.
pub fn pod_alive(pod: &Pod) -> bool {
    let restart = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or_default();
    if status.and_then(|s| s.reason.as_deref()) == Some("Evicted") {
        return false;
    }
    !((phase == "Succeeded" && restart != "Always") || (phase == "Failed" && restart == "Never"))
}

fn subnet_ready(subnet: &Subnet) -> bool {
    subnet
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
        })
}

/// Computes everything this speaker should announce.
pub fn desired(objects: &Objects<'_>, scope: &Scope<'_>) -> Desired {
    let mut out = Desired::default();
    let mut subnet_policy: HashMap<&str, BgpPolicy> = HashMap::new();
    // Whether this speaker is on the gateway of each centralized subnet (annotated or not: a
    // pod's own annotation follows its subnet's gateway too).
    let mut gateway_here: HashMap<&str, bool> = HashMap::new();
    for subnet in objects.subnets {
        let name = subnet.metadata.name.as_deref().unwrap_or_default();
        if let Some(here) = gateway::placement(subnet, scope.cluster_router).gateway_here(scope.node_name) {
            gateway_here.insert(name, here);
        }
    }
    for subnet in objects.subnets {
        let name = subnet.metadata.name.as_deref().unwrap_or_default();
        let policy = match get::<BgpPolicy>(subnet.metadata.annotations.as_ref(), keys::BGP) {
            Ok(Some(p)) => p,
            Ok(None) => continue,
            Err(error) => {
                out.skipped.push(Skipped {
                    object: format!("Subnet {name}"),
                    error,
                });
                continue;
            }
        };
        subnet_policy.insert(name, policy);
        let placed_here = gateway_here.get(name).copied().unwrap_or(true);
        if policy.scope() == BgpScope::Cluster && subnet_ready(subnet) && placed_here {
            for cidr in subnet.spec.cidr_block.as_deref().unwrap_or_default().split(',') {
                if let Ok(net) = cidr.trim().parse::<IpNet>() {
                    out.add(net, Origin::Subnet(name.to_owned()));
                }
            }
        }
    }
    for pod in objects.pods {
        if !pod_alive(pod) || pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
            continue;
        }
        let id = name_of(&pod.metadata);
        let annotations = pod.metadata.annotations.as_ref();
        let own = match get::<BgpPolicy>(annotations, keys::BGP) {
            Ok(p) => p,
            Err(error) => {
                out.skipped.push(Skipped {
                    object: format!("Pod {id}"),
                    error,
                });
                continue;
            }
        };
        let on_this_node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(scope.node_name);
        for (key, _) in annotations.into_iter().flatten() {
            let Some(provider) = key.strip_suffix(".kubernetes.io/ip_address") else {
                continue;
            };
            let switch_key = format!("{provider}.kubernetes.io/logical_switch");
            let subnet = annotations
                .and_then(|a| a.get(&switch_key))
                .map(String::as_str)
                .unwrap_or_default();
            let Some(policy) = own.or_else(|| subnet_policy.get(subnet).copied()) else {
                continue;
            };
            let here = match gateway_here.get(subnet) {
                Some(&on_gateway) => on_gateway,
                None => policy.scope() == BgpScope::Cluster || on_this_node,
            };
            if !here {
                continue;
            }
            match get::<IpPair>(annotations, key) {
                Ok(Some(ips)) => ips
                    .addrs()
                    .for_each(|ip| out.add(host_route(ip), Origin::Pod(id.clone()))),
                Ok(None) => {}
                Err(error) => out.skipped.push(Skipped {
                    object: format!("Pod {id}"),
                    error,
                }),
            }
        }
    }
    for service in objects.services {
        let annotated = service
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::BGP))
            .is_some_and(|v| v == "true");
        if !annotated {
            continue;
        }
        let id = name_of(&service.metadata);
        let spec = service.spec.as_ref();
        let mut addresses: Vec<&str> = Vec::new();
        if scope.announce_cluster_ip {
            addresses.extend(
                spec.and_then(|s| s.cluster_ips.as_ref())
                    .into_iter()
                    .flatten()
                    .map(String::as_str),
            );
            addresses.extend(spec.and_then(|s| s.cluster_ip.as_deref()));
        }
        addresses.extend(
            spec.and_then(|s| s.external_ips.as_ref())
                .into_iter()
                .flatten()
                .map(String::as_str),
        );
        let ingress = service
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref());
        addresses.extend(ingress.into_iter().flatten().filter_map(|i| i.ip.as_deref()));
        for address in addresses {
            // `None` and "" are headless Services.
            if let Ok(ip) = address.parse::<IpAddr>() {
                out.add(host_route(ip), Origin::Service(id.clone()));
            }
        }
    }
    for eip in objects.eips {
        let annotated = eip
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::BGP))
            .is_some_and(|v| v == "true");
        let ready = eip.status.as_ref().and_then(|s| s.ready) == Some(true);
        let gateway = eip.spec.nat_gw_dp.as_deref().unwrap_or_default();
        if !annotated || !ready || !nat_gateway_here(objects.pods, gateway, scope.node_name) {
            continue;
        }
        let name = eip.metadata.name.clone().unwrap_or_default();
        for ip in [&eip.spec.v4ip, &eip.spec.v6ip].into_iter().flatten() {
            if let Ok(ip) = ip.parse::<IpAddr>() {
                out.add(host_route(ip), Origin::Eip(name.clone()));
            }
        }
    }
    out
}

/// Whether a pod of the NAT gateway `gateway` runs on this node. Kube-OVN's gateway pods (the
/// StatefulSet `vpc-nat-gw-<gw>`, or a Deployment when it has several replicas) carry the label
/// `ovn.kubernetes.io/vpc-nat-gw=true` and the annotation `ovn.kubernetes.io/vpc_nat_gw=<gw>`.
/// Their `app=<prefix>-<gw>` label depends on a configurable prefix, so it is not used; the
/// `vpc-nat-gw-name` label is on the IptablesEIP and its rules, not on the pod. As in
/// Kube-OVN's node-route EIP mode, only a Running pod counts: the EIP is configured inside it.
fn nat_gateway_here(pods: &[Arc<Pod>], gateway: &str, node: &str) -> bool {
    !gateway.is_empty()
        && pods.iter().any(|p| {
            let labelled = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(keys::VPC_NAT_GW_LABEL))
                .is_some_and(|v| v == "true");
            let of_gateway = p
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::VPC_NAT_GW))
                .is_some_and(|g| g == gateway);
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            labelled
                && of_gateway
                && running
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node)
        })
}

#[cfg(test)]
mod tests;
