//! LoadBalancer IPs reached from outside over BGP, without kube-proxy (ours; Kube-OVN leaves
//! this path to kube-proxy). The speaker announces a Service's ingress IPs (and its allowed
//! `spec.externalIPs`) from the nodes; each node marks the packets to the Service's ports on
//! them and routes those into `ovn0` (`kube_ovn_gateway::ingress`), masquerading them there to
//! its join address, so the packet enters the join switch, whose copy of the default VPC's load
//! balancers picks a backend, and the reply returns to this node's port, where OVN's conntrack
//! undoes the DNAT. Only the default VPC: a custom VPC has no `ovn0`.
//!
//! What is honoured:
//! - `status.loadBalancer.ingress[].ip`, written by the platform's LoadBalancer allocator
//!   through the status subresource (a tenant cannot write it);
//! - `spec.externalIPs[]`, written by whoever writes the Service, only inside
//!   `--service-external-ip-cidrs` (empty by default: none, as Kubernetes'
//!   `DenyServiceExternalIPs` intends);
//! - and of both only addresses that pass [`guard`]: no node's, BGP peer's, pod's, subnet's,
//!   Service's, join or API server address, nothing but unicast.
//!
//! A Service with `spec.externalTrafficPolicy: Local` keeps the client's address instead: traffic
//! from outside to its ports is DNATed by this node to its own ready endpoints (or dropped when
//! it has none), not masqueraded ([`local`], `kube_ovn_gateway::ingress_local`); the node's own
//! connections to it take the path above.
//!
//! Only the Service's ports reach `ovn0`; the rest of the address keeps the node's routing.
//! Everything refused is a [`Refusal`] naming the Service, the field and why. Pure: no I/O.

mod guard;
pub mod local;

pub use guard::{Owner, Protected, ProtectedInputs, Refused, api_server_endpoints, node_addresses};

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::external_ips::ExternalIpCidrs;
use kube_ovn_gateway::{IngressPort, LocalIngress, Protocol};

/// An ingress address the node will not route, and why.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Refusal {
    /// The Service's namespace and name.
    pub namespace: String,
    pub name: String,
    /// `spec.externalIPs[1]`, `status.loadBalancer.ingress[0].ip`.
    pub field: String,
    /// The value as written.
    pub value: String,
    /// Why.
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Service {}/{}: {} {:?} {}; not routed into ovn0",
            self.namespace, self.name, self.field, self.value, self.reason
        )
    }
}

/// The Service ports to route into `ovn0`, and what was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ingress {
    /// Sorted, each once.
    pub ports: Vec<IngressPort>,
    /// Of those, the ports of `externalTrafficPolicy: Local` Services, with this node's ready
    /// endpoints ([`local`]). Sorted.
    pub local: Vec<LocalIngress>,
    pub refused: Vec<Refusal>,
}

/// Where a `Local` Service's endpoints are: its EndpointSlices, and the addresses the
/// controller recorded for this node's pods.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints<'a> {
    pub slices: &'a [Arc<EndpointSlice>],
    pub local_pod_ips: &'a BTreeSet<IpAddr>,
}

/// The ingress of the Services whose VIPs live in the default VPC's load balancers: the
/// controller's `ovn.kubernetes.io/vpc` annotation names `cluster_router` (a Service it has not
/// placed yet has no VIP, so nothing to route either).
pub fn lb_ingress(
    services: &[Arc<Service>],
    cluster_router: &str,
    allowed_external: &ExternalIpCidrs,
    protected: &Protected,
    endpoints: Endpoints<'_>,
) -> Ingress {
    let mut ports = BTreeSet::new();
    let mut local_ports = BTreeSet::new();
    let mut refused = Vec::new();
    for service in services
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::VPC))
                .is_some_and(|vpc| vpc == cluster_router)
        })
    {
        let refuse = |field: String, value: &str, reason: String| Refusal {
            namespace: service.metadata.namespace.clone().unwrap_or_default(),
            name: service.metadata.name.clone().unwrap_or_default(),
            field,
            value: value.to_owned(),
            reason,
        };
        let ingress = service
            .status
            .as_ref()
            .and_then(|st| st.load_balancer.as_ref()?.ingress.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, ingress)| {
                Some((
                    format!("status.loadBalancer.ingress[{i}].ip"),
                    ingress.ip.as_deref()?,
                    false,
                ))
            });
        let external = service
            .spec
            .as_ref()
            .and_then(|sp| sp.external_ips.as_ref())
            .into_iter()
            .flatten()
            .enumerate()
            .map(|(i, ip)| (format!("spec.externalIPs[{i}]"), ip.as_str(), true));
        let service_ports: Vec<(Protocol, u16, &str)> = service
            .spec
            .as_ref()
            .and_then(|sp| sp.ports.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let protocol = Protocol::from_service(p.protocol.as_deref())?;
                Some((
                    protocol,
                    u16::try_from(p.port).ok()?,
                    p.name.as_deref().unwrap_or_default(),
                ))
            })
            .collect();
        let is_local = local::is_local(service);
        for (field, text, is_external) in ingress.chain(external) {
            let Ok(address) = text.trim().parse::<IpAddr>() else {
                refused.push(refuse(field, text, "is not an IP address".into()));
                continue;
            };
            if is_external && !allowed_external.allows(address) {
                refused.push(refuse(
                    field,
                    text,
                    format!(
                        "is outside the external IP CIDRs the platform allows (--service-external-ip-cidrs={allowed_external})"
                    ),
                ));
                continue;
            }
            if let Err(why) = protected.check(address) {
                refused.push(refuse(field, text, why.to_string()));
                continue;
            }
            for &(protocol, port, name) in &service_ports {
                let ingress = IngressPort {
                    address,
                    protocol,
                    port,
                };
                ports.insert(ingress);
                if is_local {
                    let here = local::local_endpoints(
                        service,
                        endpoints.slices,
                        local::ServicePortRef { name, protocol },
                        address,
                        endpoints.local_pod_ips,
                    );
                    local_ports.insert(LocalIngress {
                        port: ingress,
                        endpoints: here,
                    });
                }
            }
        }
    }
    refused.sort();
    refused.dedup();
    Ingress {
        ports: ports.into_iter().collect(),
        local: local_ports.into_iter().collect(),
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(vpc: Option<&str>, ips: &[&str], external: &[&str]) -> Arc<Service> {
        let ingress: Vec<serde_json::Value> = ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect();
        let mut meta = serde_json::json!({"name": "s", "namespace": "n"});
        if let Some(vpc) = vpc {
            meta["annotations"] = serde_json::json!({keys::VPC: vpc});
        }
        Arc::new(
            serde_json::from_value(
                serde_json::json!({"metadata": meta, "spec": {"type": "LoadBalancer",
                "externalIPs": external,
                "ports": [{"port": 80}, {"port": 53, "protocol": "UDP"}, {"port": 9, "protocol": "ICMP"}]},
                "status": {"loadBalancer": {"ingress": ingress}}}),
            )
            .unwrap(),
        )
    }

    static NO_PODS: BTreeSet<IpAddr> = BTreeSet::new();

    fn no_endpoints() -> Endpoints<'static> {
        Endpoints {
            slices: &[],
            local_pod_ips: &NO_PODS,
        }
    }

    fn addresses(ingress: &Ingress) -> Vec<String> {
        ingress
            .ports
            .iter()
            .map(|p| format!("{} {}/{}", p.address, p.protocol, p.port))
            .collect()
    }

    fn protected_node(ip: &str) -> Protected {
        let node: Arc<k8s_openapi::api::core::v1::Node> = Arc::new(
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"},
                "status": {"addresses": [{"type": "InternalIP", "address": ip}]}}))
            .unwrap(),
        );
        Protected::new(&ProtectedInputs {
            nodes: &[node],
            peers: &[],
            neighbors: &[],
            subnets: &[],
            node_switch: "join",
            join_cidrs: &[],
            services: &[],
            service_cidrs: &[],
            api_server: &[],
        })
    }

    #[test]
    fn only_the_default_vpcs_placed_services_on_their_ports() {
        let services = [
            service(Some("ovn-cluster"), &["203.0.113.10", "2001:db8::10"], &[]),
            service(Some("vpc1"), &["203.0.113.11"], &[]),
            service(None, &["203.0.113.12"], &[]),
            service(Some("ovn-cluster"), &["203.0.113.10"], &[]),
        ];
        let ingress = lb_ingress(
            &services,
            "ovn-cluster",
            &ExternalIpCidrs::default(),
            &Protected::default(),
            no_endpoints(),
        );
        assert_eq!(
            addresses(&ingress),
            [
                "203.0.113.10 tcp/80",
                "203.0.113.10 udp/53",
                "2001:db8::10 tcp/80",
                "2001:db8::10 udp/53"
            ]
        );
        assert_eq!(ingress.refused, []);
    }

    #[test]
    fn external_ips_only_inside_the_allowed_cidrs_and_nobody_elses_address() {
        let services = [service(
            Some("ovn-cluster"),
            &["172.30.0.1", "bad"],
            &["198.51.100.7", "192.0.2.7", "172.30.0.1"],
        )];
        let allowed: ExternalIpCidrs = "198.51.100.0/24,172.30.0.0/24".parse().unwrap();
        let ingress = lb_ingress(
            &services,
            "ovn-cluster",
            &allowed,
            &protected_node("172.30.0.1"),
            no_endpoints(),
        );
        assert_eq!(
            addresses(&ingress),
            ["198.51.100.7 tcp/80", "198.51.100.7 udp/53"]
        );
        let refused: Vec<String> = ingress.refused.iter().map(ToString::to_string).collect();
        assert_eq!(
            refused,
            [
                "Service n/s: spec.externalIPs[1] \"192.0.2.7\" is outside the external IP CIDRs the platform allows (--service-external-ip-cidrs=198.51.100.0/24,172.30.0.0/24); not routed into ovn0",
                "Service n/s: spec.externalIPs[2] \"172.30.0.1\" is an address of node n1; not routed into ovn0",
                "Service n/s: status.loadBalancer.ingress[0].ip \"172.30.0.1\" is an address of node n1; not routed into ovn0",
                "Service n/s: status.loadBalancer.ingress[1].ip \"bad\" is not an IP address; not routed into ovn0",
            ]
        );
        // By default no external IP at all.
        let none = lb_ingress(
            &[service(Some("ovn-cluster"), &[], &["198.51.100.7"])],
            "ovn-cluster",
            &ExternalIpCidrs::default(),
            &Protected::default(),
            no_endpoints(),
        );
        assert!(none.ports.is_empty() && none.refused.len() == 1, "{none:?}");
    }

    #[test]
    fn a_local_services_ports_carry_this_nodes_endpoints() {
        let local: Arc<Service> = Arc::new(
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s", "namespace": "n",
                "annotations": {keys::VPC: "ovn-cluster"}},
                "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                    "ports": [{"name": "http", "port": 80}, {"name": "dns", "port": 53, "protocol": "UDP"}]},
                "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}}))
            .unwrap(),
        );
        let slice: Arc<EndpointSlice> = Arc::new(
            serde_json::from_value(serde_json::json!({"metadata": {"name": "s-x", "namespace": "n",
                "labels": {"kubernetes.io/service-name": "s"}}, "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080}],
                "endpoints": [{"addresses": ["10.16.0.5"]}, {"addresses": ["10.16.0.6"]}]}))
            .unwrap(),
        );
        let here: BTreeSet<IpAddr> = ["10.16.0.5".parse().unwrap()].into();
        let ingress = lb_ingress(
            &[local],
            "ovn-cluster",
            &ExternalIpCidrs::default(),
            &Protected::default(),
            Endpoints {
                slices: &[slice],
                local_pod_ips: &here,
            },
        );
        // Both ports are routed (the node's own connections take the Cluster path) ...
        assert_eq!(
            addresses(&ingress),
            ["203.0.113.10 tcp/80", "203.0.113.10 udp/53"]
        );
        // ... and forwarded traffic goes to this node's endpoint, or nowhere (no slice port "dns").
        let local: Vec<(String, Vec<String>)> = ingress
            .local
            .iter()
            .map(|l| {
                (
                    format!("{}/{}", l.port.protocol, l.port.port),
                    l.endpoints.iter().map(ToString::to_string).collect(),
                )
            })
            .collect();
        assert_eq!(
            local,
            [
                ("tcp/80".to_owned(), vec!["10.16.0.5:8080".to_owned()]),
                ("udp/53".to_owned(), vec![])
            ]
        );
    }
}
