//! `spec.externalTrafficPolicy: Local`: which of a Service's endpoints this node sends its
//! ingress to (`kube_ovn_gateway::ingress_local` builds the DNAT from them).
//!
//! An endpoint counts when it is in one of the Service's EndpointSlices (label
//! `kubernetes.io/service-name`, same namespace), ready (`conditions.ready` true or absent), of
//! the ingress address's family, and its address is one the controller recorded for a pod on
//! this node ([`super::super::gateway`]'s local pods, from the IP CRs). The last check is ours:
//! kube-proxy DNATs to whatever an EndpointSlice says, and whoever may write EndpointSlices in
//! the Service's namespace could point the node's DNAT at a node or an API server address
//! (CVE-2021-25740); here only to this node's own pods. The target port is the slice's port of
//! the same name and protocol as the Service's port (how kube-proxy resolves a named
//! `targetPort`: the EndpointSlice controller already did). Pure: no I/O.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_ovn_gateway::Protocol;

/// The label kube-controller-manager puts on a Service's EndpointSlices.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether `spec.externalTrafficPolicy` is `Local`.
pub fn is_local(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local")
}

/// A Service port as the endpoints are matched to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServicePortRef<'a> {
    /// `spec.ports[].name` (`""` when unnamed, as the slice's port then is).
    pub name: &'a str,
    pub protocol: Protocol,
}

/// This node's ready endpoints of `service` for `port`, of `family_of`'s family, sorted.
pub fn local_endpoints(
    service: &Service,
    slices: &[Arc<EndpointSlice>],
    port: ServicePortRef<'_>,
    family_of: IpAddr,
    local_pod_ips: &BTreeSet<IpAddr>,
) -> Vec<SocketAddr> {
    let namespace = service.metadata.namespace.as_deref();
    let name = service.metadata.name.as_deref().unwrap_or_default();
    let mut out = BTreeSet::new();
    for slice in slices.iter().filter(|s| {
        s.metadata.namespace.as_deref() == namespace
            && s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .is_some_and(|n| n == name)
    }) {
        let target = slice.ports.iter().flatten().find_map(|p| {
            let same_name = p.name.as_deref().unwrap_or_default() == port.name;
            let same_protocol = Protocol::from_service(p.protocol.as_deref()) == Some(port.protocol);
            (same_name && same_protocol)
                .then_some(p.port)
                .flatten()
                .and_then(|n| u16::try_from(n).ok())
        });
        let Some(target) = target else { continue };
        for endpoint in slice
            .endpoints
            .iter()
            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
        {
            out.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                    .filter(|a| a.is_ipv4() == family_of.is_ipv4() && local_pod_ips.contains(a))
                    .map(|a| SocketAddr::new(a, target)),
            );
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn ready_local_endpoints_of_the_port_by_name_and_family() {
        let service: Service = serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"},
            "spec": {"externalTrafficPolicy": "Local", "ports": [{"name": "http", "port": 80}]}}))
        .unwrap();
        let slice = |name: &str, ns: &str, svc: &str, family: &str, endpoints| -> Arc<EndpointSlice> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns,
                    "labels": {SERVICE_NAME_LABEL: svc}}, "addressType": family,
                    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}, {"name": "dns", "port": 5353, "protocol": "UDP"}],
                    "endpoints": endpoints}))
                .unwrap(),
            )
        };
        let slices = [
            slice(
                "a",
                "ns",
                "web",
                "IPv4",
                json!([
                    {"addresses": ["10.16.0.5"], "conditions": {"ready": true}},
                    {"addresses": ["10.16.0.6"]},
                    {"addresses": ["10.16.0.7"], "conditions": {"ready": false}},
                    {"addresses": ["10.16.0.9"]}
                ]),
            ),
            slice("b", "ns", "web", "IPv6", json!([{"addresses": ["fd00::5"]}])),
            slice("c", "other", "web", "IPv4", json!([{"addresses": ["10.16.0.8"]}])),
        ];
        let local: BTreeSet<IpAddr> = ["10.16.0.5", "10.16.0.6", "10.16.0.7", "10.16.0.8", "fd00::5"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let http = ServicePortRef {
            name: "http",
            protocol: Protocol::Tcp,
        };
        let v4: IpAddr = "203.0.113.10".parse().unwrap();
        let found = local_endpoints(&service, &slices, http, v4, &local);
        // 10.16.0.7 not ready, 10.16.0.9 not this node's, 10.16.0.8 another namespace's.
        assert_eq!(
            found,
            [
                "10.16.0.5:8080".parse::<SocketAddr>().unwrap(),
                "10.16.0.6:8080".parse().unwrap()
            ]
        );
        let v6: IpAddr = "2001:db8::10".parse().unwrap();
        assert_eq!(
            local_endpoints(&service, &slices, http, v6, &local),
            ["[fd00::5]:8080".parse::<SocketAddr>().unwrap()]
        );
        // No slice port of that name and protocol: nothing.
        let wrong = ServicePortRef {
            name: "http",
            protocol: Protocol::Udp,
        };
        assert!(local_endpoints(&service, &slices, wrong, v4, &local).is_empty());
        assert!(is_local(&service));
    }
}
