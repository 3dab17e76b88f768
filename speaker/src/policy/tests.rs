//! Unit tests of the policy: a small cluster as Kube-OVN writes it ([`World`]), advertisements
//! as a platform writes them (JSON through [`validate`]), per-peer tables out.

mod aggregation;
mod evaluate;
mod props;
mod validation;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube_ovn_api::bgp_advertisement::BgpAdvertisement;
use kube_ovn_api::crd::{Ip, IptablesEIP, OvnEip, Subnet};
use kube_ovn_api::external_ips::ExternalIpCidrs;
use serde_json::{Value, json};

use super::*;
use crate::announce::{Objects, Scope};

pub(super) fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

/// A Ready subnet with labels and an optional `bgp` annotation.
pub(super) fn subnet(name: &str, cidr: &str, labels: &Value, bgp: Option<&str>) -> Arc<Subnet> {
    let ann = bgp.map_or(json!({}), |b| json!({"ovn.kubernetes.io/bgp": b}));
    obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": name, "labels": labels, "annotations": ann},
        "spec": {"cidrBlock": cidr},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
}

/// A Running pod on `node` with its address in `subnet` (and the record the controller writes
/// for it, pushed to `ips`); `bgp` its own annotation.
pub(super) fn pod(
    ips: &mut Vec<Arc<Ip>>,
    ns: &str,
    name: &str,
    node: &str,
    addr: &str,
    subnet: &str,
    bgp: Option<&str>,
) -> Arc<Pod> {
    let mut ann = json!({"ovn.kubernetes.io/ip_address": addr, "ovn.kubernetes.io/logical_switch": subnet});
    if let Some(b) = bgp {
        ann["ovn.kubernetes.io/bgp"] = json!(b);
    }
    let v4 = addr.split(',').find(|a| a.contains('.')).unwrap_or_default();
    let v6 = addr.split(',').find(|a| a.contains(':')).unwrap_or_default();
    ips.push(obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": format!("{name}.{ns}"), "labels": {"ovn.kubernetes.io/ip_reserved": "false"}},
        "spec": {"podName": name, "namespace": ns, "subnet": subnet, "ipAddress": addr,
            "v4IpAddress": v4, "v6IpAddress": v6}})));
    obj(
        json!({"metadata": {"name": name, "namespace": ns, "annotations": ann},
        "spec": {"nodeName": node, "containers": []}, "status": {"phase": "Running"}}),
    )
}

pub(super) fn namespace(name: &str, labels: &Value) -> Arc<Namespace> {
    obj(json!({"metadata": {"name": name, "labels": labels}}))
}

/// A LoadBalancer Service with a ClusterIP, external IPs and an ingress IP.
pub(super) fn service(
    ns: &str,
    name: &str,
    labels: &Value,
    cluster: &str,
    external: &[&str],
    ingress: &[&str],
    bgp: Option<&str>,
) -> Arc<Service> {
    let ann = bgp.map_or(json!({}), |b| json!({"ovn.kubernetes.io/bgp": b}));
    let ingress: Vec<Value> = ingress.iter().map(|i| json!({"ip": i})).collect();
    obj(
        json!({"metadata": {"name": name, "namespace": ns, "labels": labels, "annotations": ann},
        "spec": {"type": "LoadBalancer", "clusterIP": cluster, "clusterIPs": [cluster], "externalIPs": external},
        "status": {"loadBalancer": {"ingress": ingress}}}),
    )
}

/// An advertisement from its spec, validated.
pub(super) fn ad(name: &str, spec: Value) -> ValidatedAdvertisement {
    validate(&raw_ad(name, spec)).unwrap()
}

pub(super) fn raw_ad(name: &str, spec: Value) -> BgpAdvertisement {
    serde_json::from_value(json!({"apiVersion": "bgp.kube-ovn-rs.io/v1alpha1",
        "kind": "BgpAdvertisement", "metadata": {"name": name}, "spec": spec}))
    .unwrap()
}

/// A peer at `addr` with labels, carrying the family of its address (both with `dual`).
pub(super) fn peer(addr: &str, labels: &[(&str, &str)], dual: bool) -> PeerView {
    let address: IpAddr = addr.parse().unwrap();
    let own = Family::of(&IpNet::from(address));
    let families = if dual {
        vec![Family::Ipv4Unicast, Family::Ipv6Unicast]
    } else {
        vec![own]
    };
    PeerView {
        address,
        name: (!labels.is_empty()).then(|| format!("peer-{addr}")),
        labels: labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        defaults: RouteAttributes::default(),
        families,
    }
}

/// The cluster's objects and the policy inputs, owned.
#[derive(Default)]
pub(super) struct World {
    pub pods: Vec<Arc<Pod>>,
    pub subnets: Vec<Arc<Subnet>>,
    pub services: Vec<Arc<Service>>,
    pub ips: Vec<Arc<Ip>>,
    pub eips: Vec<Arc<IptablesEIP>>,
    pub ovn_eips: Vec<Arc<OvnEip>>,
    pub namespaces: Vec<Arc<Namespace>>,
    pub endpoint_slices: Vec<Arc<k8s_openapi::api::discovery::v1::EndpointSlice>>,
    pub ads: Vec<ValidatedAdvertisement>,
    pub peers: Vec<PeerView>,
    pub external: ExternalIpCidrs,
    pub announce_cluster_ip: bool,
}

impl World {
    pub fn objects(&self) -> Objects<'_> {
        Objects {
            pods: &self.pods,
            subnets: &self.subnets,
            services: &self.services,
            eips: &self.eips,
            ips: &self.ips,
            ovn_eips: &self.ovn_eips,
            endpoint_slices: &self.endpoint_slices,
        }
    }

    pub fn scope<'a>(&'a self, node: &'a str) -> Scope<'a> {
        Scope {
            node_name: node,
            announce_cluster_ip: self.announce_cluster_ip,
            cluster_router: "ovn-cluster",
            external_ip_cidrs: &self.external,
        }
    }

    pub fn eval_on(&self, node: &str) -> Evaluation {
        let inputs = PolicyInputs {
            namespaces: &self.namespaces,
            advertisements: &self.ads,
            peers: &self.peers,
        };
        evaluate(&self.objects(), &self.scope(node), &inputs)
    }

    pub fn eval(&self) -> Evaluation {
        self.eval_on("n1")
    }
}

/// The prefixes of `peer`'s table.
pub(super) fn prefixes(e: &Evaluation, peer: &str) -> Vec<String> {
    e.peers[&peer.parse::<IpAddr>().unwrap()]
        .keys()
        .map(ToString::to_string)
        .collect()
}

/// One route of `peer`'s table.
pub(super) fn route<'a>(e: &'a Evaluation, peer: &str, prefix: &str) -> &'a AdvertisedRoute {
    let table = &e.peers[&peer.parse::<IpAddr>().unwrap()];
    table.get(&prefix.parse::<IpNet>().unwrap()).unwrap_or_else(|| {
        panic!(
            "{prefix} is not sent to {peer}: {:?}",
            table.keys().collect::<Vec<_>>()
        )
    })
}

pub(super) fn sources(r: &AdvertisedRoute) -> Vec<String> {
    r.sources
        .iter()
        .map(|s| match s {
            Source::Annotation => "annotation".to_owned(),
            Source::Advertisement(n) => n.clone(),
        })
        .collect()
}

pub(super) fn community(text: &str) -> u32 {
    crate::crd::parse_community(text).unwrap()
}

pub(super) fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}
