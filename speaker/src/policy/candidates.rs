//! Candidates: everything this speaker MAY announce from its node, annotated or not, each with its
//! kind, the object behind it and the facts the advertisements' selectors read (the subnet, the
//! namespace, the Service), under the same trust rules as the annotation path ([`crate::announce`]):
//!
//! - `PodIPs`: an alive, non-host-network pod's address that an IP record the controller wrote
//!   gives to that pod, in a Ready subnet that contains it; from the speaker on the pod's node,
//!   or from every speaker when the pod's (else its subnet's) `bgp` annotation says `cluster` /
//!   `true`; a centralized-gateway subnet's pods only from its active gateway nodes.
//! - `SubnetCIDRs`: a Ready subnet's CIDRs, from every speaker (a centralized-gateway subnet's
//!   only from its active gateway nodes).
//! - `ClusterIPs`: `spec.clusterIPs` (the API server's allocation), whatever
//!   `--announce-cluster-ip` says: that flag is the annotation path's switch, an advertisement
//!   is the platform's explicit choice.
//! - `ExternalIPs`: `spec.externalIPs` inside `--service-external-ip-cidrs` only (a tenant
//!   writes them).
//! - `LoadBalancerIPs`: `status.loadBalancer.ingress[].ip` (the platform's allocator).
//!   These and `ExternalIPs` of an `externalTrafficPolicy: Local` Service only from a node with
//!   a ready endpoint ([`crate::announce::local`]).
//! - `EIPs`: a ready IptablesEIP whose NAT gateway pod runs Running on this node; a ready, in-use
//!   OvnEip inside its Ready external subnet, from the node the controller says it lives on
//!   ([`crate::announce::ovn_eips::location`]). The `bgp` annotation is not needed.
//!
//! Every address must be routable unicast ([`refusal`]); one that is not is no candidate (the
//! annotation path reports such refusals; an advertisement cannot make them announceable).
//!
//! Memory: one [`Candidate`] per prefix holds indices into the object slices, never a copy of a
//! label map, and shares its object's [`Origin`]; 100,000 pods cost 100,000 small records.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube_ovn_api::annotations::{BgpPolicy, BgpScope, IpPair, get, keys, pod_network, provider_key};
use kube_ovn_api::bgp_advertisement::AdvertiseKind;
use kube_ovn_api::crd::{IptablesEIP, OvnEip};

use crate::announce::pods::Records;
use crate::announce::refusal::{host_problem, prefix_problem};
use crate::announce::{Objects, Origin, Scope, Subnets, name_of, ovn_eips, pod_alive};

/// One prefix this speaker may announce.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub prefix: IpNet,
    pub kind: AdvertiseKind,
    /// Shared by every prefix of one object.
    pub origin: Arc<Origin>,
    /// Index into [`Objects::subnets`]: the subnet (`SubnetCIDRs`), the pod's subnet from its IP
    /// record (`PodIPs`), the EIP's external subnet (`EIPs`; `None` when an IptablesEIP names
    /// none or a missing one: then `subnetSelector` is not checked for it).
    pub subnet: Option<u32>,
    /// Index into the Namespaces (`PodIPs` and Service kinds); `None`: no such Namespace object
    /// (only a `namespaceSelector` selecting everything matches).
    pub namespace: Option<u32>,
    /// Index into [`Objects::services`] (Service kinds).
    pub service: Option<u32>,
    /// The allocation holding the prefix, which an aggregate must not leave: the subnet CIDR
    /// (pods, subnets, EIPs), the `--service-external-ip-cidrs` entry (external IPs); `None`
    /// when the speaker knows none (ClusterIPs, LoadBalancer IPs).
    pub allocation: Option<IpNet>,
}

/// Every candidate of this speaker, in object order.
#[derive(Debug, Default)]
pub struct Candidates {
    pub items: Vec<Candidate>,
}

/// Index by name of objects in a slice.
fn index_by_name<'a, T: 'a>(
    items: impl Iterator<Item = &'a T>,
    name: impl Fn(&'a T) -> Option<&'a str>,
) -> HashMap<&'a str, u32> {
    items
        .enumerate()
        .filter_map(|(i, t)| Some((name(t)?, u32::try_from(i).ok()?)))
        .collect()
}

/// Collects the candidates. `subnets` and `records` are the annotation path's views of the
/// same objects ([`crate::announce::desired_with_views`]).
pub(crate) fn collect(
    objects: &Objects<'_>,
    scope: &Scope<'_>,
    subnets: &Subnets<'_>,
    records: &Records<'_>,
    namespaces: &[Arc<Namespace>],
) -> Candidates {
    let subnet_index = index_by_name(objects.subnets.iter(), |s| s.metadata.name.as_deref());
    let namespace_index = index_by_name(namespaces.iter(), |n| n.metadata.name.as_deref());
    let ctx = Context {
        scope,
        subnets,
        subnet_index,
        namespace_index,
    };
    let mut out = Candidates::default();
    ctx.subnets(objects, &mut out);
    ctx.pods(objects.pods, records, &mut out);
    ctx.services(objects.services, objects.endpoint_slices, &mut out);
    ctx.iptables_eips(objects.eips, objects.pods, &mut out);
    ctx.ovn_eips(objects.ovn_eips, &mut out);
    out
}

struct Context<'a, 's> {
    scope: &'a Scope<'a>,
    subnets: &'a Subnets<'s>,
    subnet_index: HashMap<&'a str, u32>,
    namespace_index: HashMap<&'a str, u32>,
}

impl Context<'_, '_> {
    fn subnet(&self, name: &str) -> Option<u32> {
        self.subnet_index.get(name).copied()
    }

    fn namespace(&self, name: Option<&str>) -> Option<u32> {
        self.namespace_index.get(name?).copied()
    }

    fn subnets(&self, objects: &Objects<'_>, out: &mut Candidates) {
        for (i, subnet) in objects.subnets.iter().enumerate() {
            let name = subnet.metadata.name.as_deref().unwrap_or_default();
            if !self.subnets.ready(name) || !self.subnets.gateway_here(name).unwrap_or(true) {
                continue;
            }
            let origin = Arc::new(Origin::Subnet(name.to_owned()));
            let block = subnet.spec.cidr_block.as_deref().unwrap_or_default();
            for net in block.split(',').filter_map(|c| c.trim().parse::<IpNet>().ok()) {
                let net = net.trunc();
                if prefix_problem(net).is_some() {
                    continue;
                }
                out.items.push(Candidate {
                    prefix: net,
                    kind: AdvertiseKind::SubnetCidrs,
                    origin: origin.clone(),
                    subnet: u32::try_from(i).ok(),
                    namespace: None,
                    service: None,
                    allocation: Some(net),
                });
            }
        }
    }

    fn pods(&self, pods: &[Arc<Pod>], records: &Records<'_>, out: &mut Candidates) {
        for pod in pods {
            if !pod_alive(pod) || pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
                continue;
            }
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let annotations = pod.metadata.annotations.as_ref();
            // A bad `bgp` value makes the annotation path skip the pod; here it only means no
            // `cluster` scope: the advertisement still selects the pod on its own node.
            let own = get::<BgpPolicy>(annotations, keys::BGP).ok().flatten();
            let on_this_node =
                pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.scope.node_name);
            let mut origin: Option<Arc<Origin>> = None;
            for provider in pod_network::providers(annotations) {
                let Ok(key) = provider_key(provider, keys::IP_ADDRESS) else {
                    continue;
                };
                let Ok(Some(ips)) = get::<IpPair>(annotations, &key) else {
                    continue;
                };
                for ip in ips.addrs() {
                    let Some(subnet) = records.find(namespace, name, ip) else {
                        continue;
                    };
                    let here = match self.subnets.gateway_here(subnet) {
                        Some(on_gateway) => on_gateway,
                        None => {
                            on_this_node
                                || own
                                    .or_else(|| self.subnets.policy(subnet))
                                    .is_some_and(|p| p.scope() == BgpScope::Cluster)
                        }
                    };
                    let allocation = self.subnets.cidr_of(subnet, ip);
                    if !here
                        || !self.subnets.ready(subnet)
                        || allocation.is_none()
                        || host_problem(ip).is_some()
                    {
                        continue;
                    }
                    let origin = origin
                        .get_or_insert_with(|| Arc::new(Origin::Pod(format!("{namespace}/{name}"))))
                        .clone();
                    out.items.push(Candidate {
                        prefix: IpNet::from(ip),
                        kind: AdvertiseKind::PodIps,
                        origin,
                        subnet: self.subnet(subnet),
                        namespace: self.namespace(Some(namespace)),
                        service: None,
                        allocation,
                    });
                }
            }
        }
    }

    fn services(
        &self,
        services: &[Arc<Service>],
        slices: &[Arc<k8s_openapi::api::discovery::v1::EndpointSlice>],
        out: &mut Candidates,
    ) {
        for (i, service) in services.iter().enumerate() {
            // `externalTrafficPolicy: Local`: the outside addresses only from a node with a
            // ready endpoint, on the advertisement path as on the annotation path (plan §3.6).
            let outside = crate::announce::local::announce_here(service, slices, self.scope.node_name);
            let origin = Arc::new(Origin::Service(name_of(&service.metadata)));
            let namespace = self.namespace(service.metadata.namespace.as_deref());
            let spec = service.spec.as_ref();
            // `clusterIPs[0]` is `clusterIP`; older objects may have only the latter.
            let cluster_ips: Vec<&str> = match spec
                .and_then(|s| s.cluster_ips.as_ref())
                .filter(|c| !c.is_empty())
            {
                Some(ips) => ips.iter().map(String::as_str).collect(),
                None => spec.and_then(|s| s.cluster_ip.as_deref()).into_iter().collect(),
            };
            let external = spec.and_then(|s| s.external_ips.as_ref()).into_iter().flatten();
            let ingress = service
                .status
                .as_ref()
                .and_then(|s| s.load_balancer.as_ref())
                .and_then(|l| l.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|g| g.ip.as_deref());
            let found = (cluster_ips.into_iter().map(|v| (AdvertiseKind::ClusterIps, v)))
                .chain(external.map(|v| (AdvertiseKind::ExternalIps, v.as_str())))
                .chain(ingress.map(|v| (AdvertiseKind::LoadBalancerIps, v)));
            for (kind, value) in found {
                // `None` and "" are headless Services.
                let Ok(ip) = value.parse::<IpAddr>() else {
                    continue;
                };
                if host_problem(ip).is_some() {
                    continue;
                }
                if kind != AdvertiseKind::ClusterIps && !outside {
                    continue;
                }
                let allocation = if kind == AdvertiseKind::ExternalIps {
                    match self
                        .scope
                        .external_ip_cidrs
                        .cidrs()
                        .iter()
                        .find(|c| c.contains(&ip))
                    {
                        Some(cidr) => Some(cidr.trunc()),
                        // Outside the operator's CIDRs: a tenant's choice, never announced.
                        None => continue,
                    }
                } else {
                    None
                };
                out.items.push(Candidate {
                    prefix: IpNet::from(ip),
                    kind,
                    origin: origin.clone(),
                    subnet: None,
                    namespace,
                    service: u32::try_from(i).ok(),
                    allocation,
                });
            }
        }
    }

    /// IptablesEIPs: ready, with a Running pod of their NAT gateway on this node (the rule of
    /// [`crate::announce::services`], found here with one pass over the pods for every EIP).
    fn iptables_eips(&self, eips: &[Arc<IptablesEIP>], pods: &[Arc<Pod>], out: &mut Candidates) {
        if eips.is_empty() {
            return;
        }
        let gateways_here: HashSet<&str> = pods
            .iter()
            .filter(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.scope.node_name)
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(keys::VPC_NAT_GW_LABEL))
                        .is_some_and(|v| v == "true")
            })
            .filter_map(|p| p.metadata.annotations.as_ref()?.get(keys::VPC_NAT_GW))
            .map(String::as_str)
            .collect();
        for eip in eips {
            let ready = eip.status.as_ref().and_then(|s| s.ready) == Some(true);
            let gateway = eip.spec.nat_gw_dp.as_deref().unwrap_or_default();
            if !ready || gateway.is_empty() || !gateways_here.contains(gateway) {
                continue;
            }
            let origin = Arc::new(Origin::Eip(eip.metadata.name.clone().unwrap_or_default()));
            let subnet_name = eip.spec.external_subnet.as_deref().unwrap_or_default();
            for value in [&eip.spec.v4ip, &eip.spec.v6ip].into_iter().flatten() {
                let Ok(ip) = value.parse::<IpAddr>() else {
                    continue;
                };
                if host_problem(ip).is_some() {
                    continue;
                }
                out.items.push(Candidate {
                    prefix: IpNet::from(ip),
                    kind: AdvertiseKind::Eips,
                    origin: origin.clone(),
                    subnet: self.subnet(subnet_name),
                    namespace: None,
                    service: None,
                    allocation: self.subnets.cidr_of(subnet_name, ip),
                });
            }
        }
    }

    /// OvnEips: ready, in use, living on this node, inside their Ready external subnet (the
    /// rules of [`crate::announce::ovn_eips`], without the annotation).
    fn ovn_eips(&self, eips: &[Arc<OvnEip>], out: &mut Candidates) {
        let by_name: BTreeMap<&str, &OvnEip> = eips
            .iter()
            .filter_map(|e| Some((e.metadata.name.as_deref()?, e.as_ref())))
            .collect();
        for eip in eips {
            let Some(status) = eip.status.as_ref() else {
                continue;
            };
            if status.ready != Some(true) || !ovn_eips::in_use(eip) {
                continue;
            }
            let location = ovn_eips::location(eip, &by_name);
            if !location.nodes().iter().any(|n| n == self.scope.node_name) {
                continue;
            }
            let subnet = ovn_eips::label(eip, keys::SUBNET_LABEL).unwrap_or_default();
            if !self.subnets.ready(subnet) {
                continue;
            }
            let origin = Arc::new(Origin::OvnEip(eip.metadata.name.clone().unwrap_or_default()));
            for value in [&status.v4_ip, &status.v6_ip].into_iter().flatten() {
                let Ok(ip) = value.parse::<IpAddr>() else {
                    continue;
                };
                let allocation = self.subnets.cidr_of(subnet, ip);
                if host_problem(ip).is_some() || allocation.is_none() {
                    continue;
                }
                out.items.push(Candidate {
                    prefix: IpNet::from(ip),
                    kind: AdvertiseKind::Eips,
                    origin: origin.clone(),
                    subnet: self.subnet(subnet),
                    namespace: None,
                    service: None,
                    allocation,
                });
            }
        }
    }
}
