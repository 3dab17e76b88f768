//! What this speaker announces, from the cluster's objects, with Kube-OVN's semantics for the
//! `ovn.kubernetes.io/bgp` annotation (reference §5.4), and only addresses that someone allowed
//! to choose them chose. Pure: objects in, prefixes and refusals out; the caller feeds the
//! prefixes to every peer's Adj-RIB-Out, which sends only the difference, and turns each
//! refusal that lasts into a Warning event and a log line, once per object, field and reason
//! ([`report`]).
//!
//! - Subnets: `true`/`cluster` announce each CIDR of `spec.cidrBlock` from every speaker, once
//!   the subnet is Ready; `local` announces no CIDR (only local pods, below). An underlay subnet
//!   (`spec.vlan`) is no exception, as in Kube-OVN; but when its gateway is the physical router
//!   (neither `logicalGateway` nor `u2oInterconnection`) the nodes announcing it draw traffic they
//!   cannot deliver, so the speaker also reports a Warning `BgpOnUnderlaySubnet` on the subnet.
//! - Pods: an address in a `<provider>.kubernetes.io/ip_address` annotation (attachment
//!   networks included), as /32 or /128, when the pod is alive, only if an IP record the
//!   controller wrote (`ips.kubeovn.io`) gives that address to that pod and the record's subnet
//!   is Ready and contains it ([`pods`]): the pod's annotations are its author's to write and
//!   prove nothing. The pod's own `bgp` value wins over its subnet's. `true`/`cluster` announce
//!   from every speaker; `local` only from the speaker on the pod's node.
//! - Centralized-gateway subnets of the default VPC: their CIDR and their pods' addresses only
//!   from the speakers on the gateway nodes in `status.activateGateway`, whatever the policy
//!   (see [`gateway`]).
//! - Services with `bgp: "true"` (the literal, as Kube-OVN): ClusterIPs when
//!   `--announce-cluster-ip` is set; LoadBalancer ingress IPs always; `spec.externalIPs` only
//!   inside `--service-external-ip-cidrs` (empty by default: none) ([`services`]). With
//!   `spec.externalTrafficPolicy: Local`, the LoadBalancer and external IPs only from the
//!   speakers on nodes with a ready endpoint of the Service ([`local`]).
//! - IptablesEIPs with `bgp: "true"` that are ready: `spec.v4ip`/`spec.v6ip`, from the speaker
//!   on the node where a Running pod of the EIP's NAT gateway (`spec.natGwDp`) is. This is ours:
//!   released Kube-OVN announces an EIP only from a speaker inside the NAT gateway pod
//!   (`--nat-gw-mode`); announcing it from the node's speaker is what an unmerged Kube-OVN
//!   proposal calls `--node-route-eip-mode`. There is no such flag here: it is always on. The
//!   gateway pod is found by its label `ovn.kubernetes.io/vpc-nat-gw=true` and annotation
//!   `ovn.kubernetes.io/vpc_nat_gw=<gw>`, in any namespace (the proposal looks up
//!   `vpc-nat-gw-<gw>-0` in `--vpc-nat-gw-namespace`, which misses Deployment-style gateways and
//!   gateways in other namespaces).
//! - OvnEips with `bgp: "true"` that are ready and in use (a VPC router's `lrp` port, or a FIP,
//!   SNAT or DNAT rule in `status.nat`): `status.v4Ip`/`v6Ip`, inside the external subnet their
//!   label names, from the speaker on the node where OVN answers for them, as the controller
//!   writes it in `status.activateGateway` (the EIP's own, else its VPC's `lrp` EIP's: the
//!   gateway chassis). Ours: Kube-OVN never announces OvnEips ([`ovn_eips`]).
//!
//! Every address and prefix must be a routable unicast one (not multicast, broadcast,
//! unspecified, loopback, link-local, ...): one that is not is refused alone ([`refusal`]), so it
//! never makes the Adj-RIB-Out refuse the whole set. A refusal is only made by a speaker that
//! would otherwise have announced the address (for a `local` pod, the one on its node).
//!
//! Deviations (documented): Kube-OVN skips every pod of a subnet that has no annotations at all,
//! even a pod annotated itself; here the pod's annotation is honoured. A centralized-gateway
//! subnet and its pods are announced only from its active gateway nodes ([`gateway`]), where
//! Kube-OVN announces them from every speaker. Kube-OVN announces whatever a pod's `ip_address`
//! annotation and a Service's `externalIPs` say; here a pod address needs the controller's IP
//! record inside a Ready subnet, and external IPs the operator's CIDRs.

pub mod gateway;
pub mod local;
pub mod ovn_eips;
pub mod pods;
pub mod refusal;
pub mod report;
pub mod services;

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube_ovn_api::annotations::{AnnotationError, BgpPolicy, BgpScope, get, keys};
use kube_ovn_api::crd::{ConditionStatus, Ip, IptablesEIP, OvnEip, Subnet};
use kube_ovn_api::external_ips::ExternalIpCidrs;

pub use refusal::{Reason, Refusal};

/// Why a prefix is announced (for logs, metrics and the CRD status).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Origin {
    /// A subnet's CIDR.
    Subnet(String),
    /// A pod's address (`namespace/name`).
    Pod(String),
    /// A Service address (`namespace/name`).
    Service(String),
    /// An IptablesEIP (its name).
    Eip(String),
    /// An OvnEip (its name).
    OvnEip(String),
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
    /// `--service-external-ip-cidrs`: where a Service's `spec.externalIPs` may lie.
    pub external_ip_cidrs: &'a ExternalIpCidrs,
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
    /// IP records (`ips.kubeovn.io`): what the controller allocated to which pod.
    pub ips: &'a [Arc<Ip>],
    /// OvnEips.
    pub ovn_eips: &'a [Arc<OvnEip>],
    /// EndpointSlices (all namespaces): where a `Local` Service's ready endpoints are.
    pub endpoint_slices: &'a [Arc<EndpointSlice>],
}

/// A bad annotation found on the way; the object is skipped, the rest still announced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// `kind namespace/name`.
    pub object: String,
    /// Key, value and what was expected.
    pub error: AnnotationError,
}

/// The desired prefixes, each with why, and what was refused.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Desired {
    /// Prefix → its origin (the first found when two objects share a prefix). Every one is a
    /// routable unicast prefix ([`refusal::prefix_problem`]).
    pub prefixes: BTreeMap<IpNet, Origin>,
    /// Objects skipped for a bad annotation.
    pub skipped: Vec<Skipped>,
    /// Addresses this speaker would have announced but refuses, each naming object and field.
    pub refusals: Vec<Refusal>,
}

impl Desired {
    fn add(&mut self, prefix: IpNet, origin: Origin) {
        self.prefixes.entry(prefix.trunc()).or_insert(origin);
    }
}

fn host_route(ip: IpAddr) -> IpNet {
    IpNet::from(ip)
}

pub(crate) fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
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

pub(crate) fn subnet_ready(subnet: &Subnet) -> bool {
    subnet
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| {
            c.iter()
                .any(|c| c.type_ == "Ready" && c.status == ConditionStatus::True)
        })
}

/// What the speaker knows of each subnet, by name.
pub(crate) struct Subnets<'a> {
    by_name: HashMap<&'a str, SubnetView>,
}

struct SubnetView {
    ready: bool,
    cidrs: Vec<IpNet>,
    policy: Option<BgpPolicy>,
    /// Whether this speaker is on the gateway of a centralized subnet (annotated or not: a
    /// pod's own annotation follows its subnet's gateway too); `None` for other subnets.
    gateway_here: Option<bool>,
}

fn cidrs(subnet: &Subnet) -> impl Iterator<Item = (&str, Option<IpNet>)> {
    let block = subnet.spec.cidr_block.as_deref().unwrap_or_default();
    block
        .split(',')
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .map(|c| (c, c.parse::<IpNet>().ok().map(|n| n.trunc())))
}

impl Subnets<'_> {
    pub(crate) fn policy(&self, name: &str) -> Option<BgpPolicy> {
        self.by_name.get(name).and_then(|s| s.policy)
    }

    pub(crate) fn gateway_here(&self, name: &str) -> Option<bool> {
        self.by_name.get(name).and_then(|s| s.gateway_here)
    }

    pub(crate) fn ready(&self, name: &str) -> bool {
        self.by_name.get(name).is_some_and(|s| s.ready)
    }

    pub(crate) fn contains(&self, name: &str, ip: IpAddr) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|s| s.cidrs.iter().any(|c| c.contains(&ip)))
    }

    /// The CIDR of subnet `name` that holds `ip` (the allocation an aggregate must stay in).
    pub(crate) fn cidr_of(&self, name: &str, ip: IpAddr) -> Option<IpNet> {
        self.by_name
            .get(name)?
            .cidrs
            .iter()
            .find(|c| c.contains(&ip))
            .copied()
    }
}

/// The warning for announcing an underlay subnet whose gateway is the physical router: the
/// nodes become a next hop for addresses that live behind that router, not behind them (Kube-OVN
/// announces it all the same, and so do we).
fn underlay_warning(subnet: &Subnet) -> Option<Refusal> {
    let spec = &subnet.spec;
    let vlan = spec.vlan.as_deref().filter(|v| !v.is_empty())?;
    if spec.logical_gateway == Some(true) || spec.u2o_interconnection == Some(true) {
        return None;
    }
    Some(Refusal {
        object: subnet.object_ref(&()),
        field: "spec.vlan".into(),
        reason: Reason::OnUnderlaySubnet,
        message: format!(
            "{vlan:?}, neither logicalGateway nor u2oInterconnection: the physical router is this \
             subnet's gateway; announcing {} from the nodes draws its traffic to nodes that cannot \
             deliver it (announced anyway, as Kube-OVN does)",
            spec.cidr_block.as_deref().unwrap_or_default()
        ),
    })
}

/// Reads the subnets, and adds the CIDRs this speaker announces (and their refusals) to `out`.
pub(crate) fn subnets<'a>(subnets: &'a [Arc<Subnet>], scope: &Scope<'_>, out: &mut Desired) -> Subnets<'a> {
    let mut by_name = HashMap::new();
    for subnet in subnets {
        let name = subnet.metadata.name.as_deref().unwrap_or_default();
        let policy = match get::<BgpPolicy>(subnet.metadata.annotations.as_ref(), keys::BGP) {
            Ok(p) => p,
            Err(error) => {
                out.skipped.push(Skipped {
                    object: format!("Subnet {name}"),
                    error,
                });
                None
            }
        };
        let view = SubnetView {
            ready: subnet_ready(subnet),
            cidrs: cidrs(subnet).filter_map(|(_, net)| net).collect(),
            policy,
            gateway_here: gateway::placement(subnet, scope.cluster_router).gateway_here(scope.node_name),
        };
        let announced = view.policy.is_some_and(|p| p.scope() == BgpScope::Cluster)
            && view.ready
            && view.gateway_here.unwrap_or(true);
        if announced {
            if let Some(refusal) = underlay_warning(subnet) {
                out.refusals.push(refusal);
            }
            for (text, net) in cidrs(subnet) {
                let Some(net) = net else { continue };
                match refusal::prefix_problem(net) {
                    None => out.add(net, Origin::Subnet(name.to_owned())),
                    Some(problem) => out.refusals.push(Refusal {
                        object: subnet.object_ref(&()),
                        field: "spec.cidrBlock".into(),
                        reason: Reason::NotUnicast,
                        message: format!("{text} is {problem}: not announced"),
                    }),
                }
            }
        }
        by_name.insert(name, view);
    }
    Subnets { by_name }
}

/// Computes everything this speaker should announce, and what it refuses.
pub fn desired(objects: &Objects<'_>, scope: &Scope<'_>) -> Desired {
    desired_with_views(objects, scope).0
}

/// [`desired`], with the subnet and IP-record views it built, for the advertisement policy
/// ([`crate::policy`]) to read the same facts without building them twice.
pub(crate) fn desired_with_views<'a>(
    objects: &Objects<'a>,
    scope: &Scope<'_>,
) -> (Desired, Subnets<'a>, pods::Records<'a>) {
    let mut out = Desired::default();
    let subnets = subnets(objects.subnets, scope, &mut out);
    let records = pods::Records::new(objects.ips);
    pods::add(objects.pods, &records, &subnets, scope, &mut out);
    services::add_services(objects.services, objects.endpoint_slices, scope, &mut out);
    services::add_eips(objects.eips, objects.pods, scope, &mut out);
    ovn_eips::add(objects.ovn_eips, &subnets, scope, &mut out);
    (out, subnets, records)
}

#[cfg(test)]
mod tests;
