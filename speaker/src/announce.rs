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
//! - Services with `bgp: "true"` (the literal, as Kube-OVN): ClusterIPs when
//!   `--announce-cluster-ip` is set; LoadBalancer ingress IPs and `spec.externalIPs` always.
//! - IptablesEIPs with `bgp: "true"` that are ready: `spec.v4ip`/`spec.v6ip`, from the speaker
//!   on the node where a Running pod of the EIP's NAT gateway (`spec.natGwDp`) is: Kube-OVN's
//!   `--node-route-eip-mode`, always on here. The gateway pod is found by its label
//!   `ovn.kubernetes.io/vpc-nat-gw=true` and annotation `ovn.kubernetes.io/vpc_nat_gw=<gw>`, in
//!   any namespace (Kube-OVN looks up `vpc-nat-gw-<gw>-0` in `--vpc-nat-gw-namespace`, which
//!   misses Deployment-style gateways and gateways in other namespaces).
//!
//! Deviation (documented): Kube-OVN skips every pod of a subnet that has no annotations at all,
//! even a pod annotated itself; here the pod's annotation is honoured.

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
        if policy.scope() == BgpScope::Cluster && subnet_ready(subnet) {
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
            if policy.scope() == BgpScope::Local && !on_this_node {
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
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn subnet(name: &str, cidr: &str, bgp: Option<&str>, ready: bool) -> Arc<Subnet> {
        let ann = bgp
            .map(|b| json!({"ovn.kubernetes.io/bgp": b}))
            .unwrap_or(json!({}));
        let status = if ready { "True" } else { "False" };
        obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "annotations": ann},
            "spec": {"cidrBlock": cidr},
            "status": {"conditions": [{"type": "Ready", "status": status}]}}))
    }

    fn pod(name: &str, node: &str, ann: &Value, phase: &str) -> Arc<Pod> {
        obj(
            json!({"metadata": {"name": name, "namespace": "ns", "annotations": ann},
            "spec": {"nodeName": node, "containers": [], "restartPolicy": "Never"},
            "status": {"phase": phase}}),
        )
    }

    fn allocated(ip: &str, subnet: &str) -> Value {
        json!({"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": subnet})
    }

    fn prefixes(d: &Desired) -> Vec<String> {
        d.prefixes.keys().map(ToString::to_string).collect()
    }

    const HERE: Scope<'static> = Scope {
        node_name: "n1",
        announce_cluster_ip: false,
    };

    #[test]
    fn cluster_subnets_announce_cidr_and_pods_from_every_speaker() {
        let subnets = [subnet("s1", "10.16.0.0/16,fd00:16::/64", Some("cluster"), true)];
        let pods = [
            pod("a", "n1", &allocated("10.16.0.5,fd00:16::5", "s1"), "Running"),
            pod("b", "n2", &allocated("10.16.0.6", "s1"), "Running"),
        ];
        let d = desired(
            &Objects {
                pods: &pods,
                subnets: &subnets,
                ..Objects::default()
            },
            &HERE,
        );
        assert_eq!(
            prefixes(&d),
            [
                "10.16.0.0/16",
                "10.16.0.5/32",
                "10.16.0.6/32",
                "fd00:16::/64",
                "fd00:16::5/128"
            ]
        );
        assert_eq!(
            d.prefixes[&"10.16.0.6/32".parse().unwrap()],
            Origin::Pod("ns/b".into())
        );
    }

    #[test]
    fn local_announces_only_pods_on_this_node_and_no_cidr() {
        let subnets = [subnet("s1", "10.16.0.0/16", Some("local"), true)];
        let pods = [
            pod("a", "n1", &allocated("10.16.0.5", "s1"), "Running"),
            pod("b", "n2", &allocated("10.16.0.6", "s1"), "Running"),
        ];
        let d = desired(
            &Objects {
                pods: &pods,
                subnets: &subnets,
                ..Objects::default()
            },
            &HERE,
        );
        assert_eq!(prefixes(&d), ["10.16.0.5/32"]);
    }

    #[test]
    fn the_pods_own_policy_wins_and_works_without_a_subnet_policy() {
        let subnets = [
            subnet("s1", "10.16.0.0/16", Some("local"), true),
            subnet("plain", "10.17.0.0/16", None, true),
        ];
        let mut ann = allocated("10.16.0.6", "s1");
        ann["ovn.kubernetes.io/bgp"] = json!("cluster");
        let mut other = allocated("10.17.0.9", "plain");
        other["ovn.kubernetes.io/bgp"] = json!("true");
        let pods = [
            pod("b", "n2", &ann, "Running"),
            pod("c", "n2", &other, "Running"),
            pod("d", "n1", &allocated("10.17.0.10", "plain"), "Running"),
        ];
        let d = desired(
            &Objects {
                pods: &pods,
                subnets: &subnets,
                ..Objects::default()
            },
            &HERE,
        );
        assert_eq!(prefixes(&d), ["10.16.0.6/32", "10.17.0.9/32"]);
    }

    #[test]
    fn dead_pods_unready_subnets_and_bad_values_are_not_announced() {
        let subnets = [
            subnet("s1", "10.16.0.0/16", Some("cluster"), false),
            subnet("bad", "10.18.0.0/16", Some("yes"), true),
        ];
        let pods = [
            pod("done", "n1", &allocated("10.16.0.5", "s1"), "Succeeded"),
            pod("failed", "n1", &allocated("10.16.0.7", "s1"), "Failed"),
            pod("run", "n1", &allocated("10.16.0.8", "s1"), "Running"),
        ];
        let d = desired(
            &Objects {
                pods: &pods,
                subnets: &subnets,
                ..Objects::default()
            },
            &HERE,
        );
        assert_eq!(
            prefixes(&d),
            ["10.16.0.8/32"],
            "an unready subnet's CIDR waits; its running pods go out"
        );
        assert_eq!(d.skipped.len(), 1);
        assert_eq!(d.skipped[0].object, "Subnet bad");
        assert_eq!(d.skipped[0].error.key, keys::BGP);
    }

    #[test]
    fn attachment_networks_are_announced_under_their_provider() {
        let subnets = [subnet("att", "172.20.0.0/24", Some("cluster"), true)];
        let ann = json!({"net1.ns.ovn.kubernetes.io/ip_address": "172.20.0.4", "net1.ns.ovn.kubernetes.io/logical_switch": "att"});
        let pods = [pod("m", "n2", &ann, "Running")];
        let d = desired(
            &Objects {
                pods: &pods,
                subnets: &subnets,
                ..Objects::default()
            },
            &HERE,
        );
        assert_eq!(prefixes(&d), ["172.20.0.0/24", "172.20.0.4/32"]);
    }

    #[test]
    fn services_need_the_literal_true_and_cluster_ips_need_the_flag() {
        let svc = |name: &str, bgp: &str| -> Arc<Service> {
            obj(
                json!({"metadata": {"name": name, "namespace": "ns", "annotations": {"ovn.kubernetes.io/bgp": bgp}},
                "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"], "externalIPs": ["192.0.2.10"]},
                "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}}),
            )
        };
        let services = [svc("web", "true"), svc("other", "cluster")];
        let objects = Objects {
            services: &services,
            ..Objects::default()
        };
        assert_eq!(
            prefixes(&desired(&objects, &HERE)),
            ["192.0.2.10/32", "198.51.100.7/32"]
        );
        let with_flag = Scope {
            announce_cluster_ip: true,
            ..HERE
        };
        assert_eq!(
            prefixes(&desired(&objects, &with_flag)),
            [
                "10.96.0.10/32",
                "192.0.2.10/32",
                "198.51.100.7/32",
                "fd00:96::10/128"
            ]
        );
    }

    /// An IptablesEIP as Kube-OVN's controller writes it (labels, spec, status) for gateway gw1.
    fn kube_ovn_eip(ready: bool) -> Arc<IptablesEIP> {
        obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IptablesEIP",
            "metadata": {"name": "eip1", "annotations": {"ovn.kubernetes.io/bgp": "true"},
                "finalizers": ["kubeovn.io/kube-ovn-controller"],
                "labels": {"ovn.kubernetes.io/subnet": "ovn-vpc-external-network",
                    "ovn.kubernetes.io/eip_v4_ip": "203.0.113.5",
                    "ovn.kubernetes.io/vpc-nat-gw-name": "gw1"}},
            "spec": {"natGwDp": "gw1", "v4ip": "203.0.113.5", "macAddress": "00:00:00:5e:00:01",
                "externalSubnet": "ovn-vpc-external-network"},
            "status": {"ready": ready, "ip": "203.0.113.5", "nat": "fip"}}))
    }

    /// The gateway's pod as Kube-OVN's StatefulSet makes it: `vpc-nat-gw-<gw>-0`, labels
    /// `app=vpc-nat-gw-<gw>` and `ovn.kubernetes.io/vpc-nat-gw=true`, annotation
    /// `ovn.kubernetes.io/vpc_nat_gw=<gw>`.
    fn kube_ovn_gateway_pod(node: &str, phase: &str) -> Arc<Pod> {
        obj(
            json!({"metadata": {"name": "vpc-nat-gw-gw1-0", "namespace": "kube-system",
                "labels": {"app": "vpc-nat-gw-gw1", "ovn.kubernetes.io/vpc-nat-gw": "true",
                    "statefulset.kubernetes.io/pod-name": "vpc-nat-gw-gw1-0"},
                "annotations": {"ovn.kubernetes.io/vpc_nat_gw": "gw1",
                    "k8s.v1.cni.cncf.io/networks": "kube-system/ovn-vpc-external-network",
                    "ovn.kubernetes.io/logical_switch": "vpc1-subnet1",
                    "ovn.kubernetes.io/ip_address": "10.0.1.254"}},
            "spec": {"nodeName": node, "containers": []}, "status": {"phase": phase}}),
        )
    }

    fn eip_prefixes(pods: &[Arc<Pod>], eips: &[Arc<IptablesEIP>]) -> Vec<String> {
        prefixes(&desired(
            &Objects {
                pods,
                eips,
                ..Objects::default()
            },
            &HERE,
        ))
    }

    #[test]
    fn eips_go_out_from_the_node_of_their_nat_gateway() {
        let ready = [kube_ovn_eip(true)];
        assert_eq!(
            eip_prefixes(&[kube_ovn_gateway_pod("n1", "Running")], &ready),
            ["203.0.113.5/32"]
        );
        assert!(
            eip_prefixes(&[kube_ovn_gateway_pod("n2", "Running")], &ready).is_empty(),
            "the gateway runs on another node"
        );
        assert!(
            eip_prefixes(&[kube_ovn_gateway_pod("n1", "Pending")], &ready).is_empty(),
            "the gateway is not running yet"
        );
        assert!(
            eip_prefixes(&[kube_ovn_gateway_pod("n1", "Running")], &[kube_ovn_eip(false)]).is_empty(),
            "the EIP is not ready"
        );
        // The IptablesEIP's own label names the gateway; a pod carrying only that label (and
        // no gateway annotation) is not a gateway pod.
        let impostor: Arc<Pod> = obj(json!({"metadata": {"name": "x", "namespace": "kube-system",
                "labels": {"ovn.kubernetes.io/vpc-nat-gw-name": "gw1"}},
            "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}));
        assert!(eip_prefixes(&[impostor], &ready).is_empty());
    }
}
