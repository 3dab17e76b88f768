//! `spec.externalTrafficPolicy: Local`: a Service's LoadBalancer ingress IPs and external IPs
//! are announced only by the speakers on nodes with a ready endpoint of it, as MetalLB, Cilium
//! and Calico do. The node daemon delivers traffic for them only to its own endpoints, keeping
//! the client's address (`node/src/lb_ingress.rs`), so a node without one must not draw it.
//!
//! The endpoints are the Service's EndpointSlices (label `kubernetes.io/service-name`, same
//! namespace), written by kube-controller-manager: an endpoint counts for the node named in its
//! `nodeName` when its `conditions.ready` is true or absent (the EndpointSlice API says an absent
//! condition is to be read as ready). Terminating endpoints are not ready, so a rolling update
//! moves the announcement before the old pod goes. ClusterIPs are not affected
//! (`internalTrafficPolicy` is another matter), nor is a Service with policy `Cluster` (or none).
//!
//! The same rule serves the annotation path (Kube-OVN's `ovn.kubernetes.io/bgp: "true"`,
//! [`super::services`]) and the `BgpAdvertisement` path ([`crate::policy`]). Pure: no I/O.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// The label kube-controller-manager puts on a Service's EndpointSlices.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// Whether `spec.externalTrafficPolicy` is `Local`.
pub fn is_local(service: &Service) -> bool {
    service
        .spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
        == Some("Local")
}

/// Whether the EndpointSlice belongs to the Service `namespace/name`.
pub fn slice_of(slice: &EndpointSlice, namespace: &str, name: &str) -> bool {
    slice.metadata.namespace.as_deref() == Some(namespace)
        && slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
            .is_some_and(|n| n == name)
}

/// Whether the Service `namespace/name` has a ready endpoint on `node`.
pub fn ready_endpoint_on(slices: &[Arc<EndpointSlice>], namespace: &str, name: &str, node: &str) -> bool {
    slices
        .iter()
        .filter(|s| slice_of(s, namespace, name))
        .flat_map(|s| s.endpoints.iter())
        .any(|e| {
            e.node_name.as_deref() == Some(node) && e.conditions.as_ref().and_then(|c| c.ready) != Some(false)
        })
}

/// Whether the speaker on `node` announces the Service's LoadBalancer ingress IPs and external
/// IPs: always for policy `Cluster`; for `Local` only with a ready endpoint on `node`.
pub fn announce_here(service: &Service, slices: &[Arc<EndpointSlice>], node: &str) -> bool {
    if !is_local(service) {
        return true;
    }
    let meta = &service.metadata;
    ready_endpoint_on(
        slices,
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default(),
        node,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn service(policy: Option<&str>) -> Service {
        let mut spec = json!({"type": "LoadBalancer", "ports": [{"port": 80}]});
        if let Some(p) = policy {
            spec["externalTrafficPolicy"] = json!(p);
        }
        serde_json::from_value(json!({"metadata": {"name": "web", "namespace": "ns"}, "spec": spec})).unwrap()
    }

    fn slice(ns: &str, service: &str, endpoints: &Value) -> Arc<EndpointSlice> {
        Arc::new(
            serde_json::from_value(
                json!({"metadata": {"name": format!("{service}-x"), "namespace": ns,
                "labels": {SERVICE_NAME_LABEL: service}}, "addressType": "IPv4", "endpoints": endpoints}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn local_is_announced_only_where_a_ready_endpoint_is() {
        let local = service(Some("Local"));
        let slices = [slice(
            "ns",
            "web",
            &json!([
                {"addresses": ["10.16.0.5"], "nodeName": "n1", "conditions": {"ready": true}},
                {"addresses": ["10.16.0.6"], "nodeName": "n2", "conditions": {"ready": false}},
                {"addresses": ["10.16.0.7"], "nodeName": "n3"},
                {"addresses": ["10.16.0.8"]}
            ]),
        )];
        assert!(announce_here(&local, &slices, "n1"));
        assert!(!announce_here(&local, &slices, "n2"), "not ready");
        assert!(
            announce_here(&local, &slices, "n3"),
            "an absent ready condition is ready"
        );
        assert!(!announce_here(&local, &slices, "n4"), "no endpoint");
        assert!(!announce_here(&local, &[], "n1"), "no slice at all");
    }

    #[test]
    fn only_the_services_own_slices_count() {
        let local = service(Some("Local"));
        let on_n1 = json!([{"addresses": ["10.16.0.5"], "nodeName": "n1"}]);
        let others = [slice("other", "web", &on_n1), slice("ns", "web2", &on_n1)];
        assert!(!announce_here(&local, &others, "n1"));
        let unlabelled: Arc<EndpointSlice> = Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "web-y", "namespace": "ns"},
                "addressType": "IPv4", "endpoints": on_n1}))
            .unwrap(),
        );
        assert!(!announce_here(&local, &[unlabelled], "n1"));
    }

    #[test]
    fn cluster_and_absent_policies_are_announced_everywhere() {
        for policy in [None, Some("Cluster")] {
            assert!(announce_here(&service(policy), &[], "n1"), "{policy:?}");
        }
    }

    #[test]
    fn desired_follows_the_endpoint_and_leaves_the_cluster_ip_alone() {
        use crate::announce::{Objects, Scope, desired};
        use kube_ovn_api::external_ips::ExternalIpCidrs;

        let mut web = service(Some("Local"));
        web.metadata.annotations = Some([("ovn.kubernetes.io/bgp".to_owned(), "true".to_owned())].into());
        let spec = web.spec.as_mut().unwrap();
        spec.cluster_ips = Some(vec!["10.96.0.10".into()]);
        spec.external_ips = Some(vec!["198.51.100.7".into(), "192.0.2.7".into()]);
        web.status = Some(
            serde_json::from_value(json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}})).unwrap(),
        );
        let services = [Arc::new(web)];
        let slices = [slice(
            "ns",
            "web",
            &json!([{"addresses": ["10.16.0.5"], "nodeName": "n1"}]),
        )];
        let allowed: ExternalIpCidrs = "198.51.100.0/24".parse().unwrap();
        let on = |node| {
            let d = desired(
                &Objects {
                    services: &services,
                    endpoint_slices: &slices,
                    ..Objects::default()
                },
                &Scope {
                    node_name: node,
                    announce_cluster_ip: true,
                    cluster_router: "ovn-cluster",
                    external_ip_cidrs: &allowed,
                },
            );
            let prefixes: Vec<String> = d.prefixes.keys().map(ToString::to_string).collect();
            let refused: Vec<String> = d.refusals.iter().map(|r| r.field.clone()).collect();
            (prefixes, refused)
        };
        assert_eq!(
            on("n1"),
            (
                vec![
                    "10.96.0.10/32".to_owned(),
                    "198.51.100.7/32".into(),
                    "203.0.113.10/32".into()
                ],
                vec!["spec.externalIPs[1]".to_owned()]
            )
        );
        // Elsewhere only the ClusterIP, and no refusal: that speaker would not announce it anyway.
        assert_eq!(on("n2"), (vec!["10.96.0.10/32".to_owned()], vec![]));
    }
}
