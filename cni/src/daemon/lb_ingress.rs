//! LoadBalancer IPs reached from outside over BGP, without kube-proxy (ours; Kube-OVN leaves
//! this path to kube-proxy). The speaker announces a Service's ingress IPs (and its
//! `spec.externalIPs`, which are handled alike) from the nodes; the
//! node routes each into `ovn0` (`node_routes`) and masquerades it there to its join address
//! (the egress table's `lb-ingress` set), so the packet enters the join switch, whose copy of
//! the default VPC's load balancers picks a backend, and the reply returns to this node's port,
//! where OVN's conntrack undoes the DNAT. Only the default VPC: a custom VPC has no `ovn0`.
//! Pure: no I/O.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube_ovn_api::annotations::keys;

/// The ingress and external IPs of the Services whose VIPs live in the default VPC's load
/// balancers: the
/// controller's `ovn.kubernetes.io/vpc` annotation names `cluster_router` (a Service it has not
/// placed yet has no VIP, so nothing to route either).
pub fn lb_ingress_ips(services: &[Arc<Service>], cluster_router: &str) -> Vec<IpAddr> {
    let ips: BTreeSet<IpAddr> = services
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| {
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(keys::VPC))
                .is_some_and(|vpc| vpc == cluster_router)
        })
        .flat_map(|s| {
            let ingress = s
                .status
                .as_ref()
                .and_then(|st| st.load_balancer.as_ref()?.ingress.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|ingress| ingress.ip.as_deref());
            let external = s
                .spec
                .as_ref()
                .and_then(|sp| sp.external_ips.as_ref())
                .into_iter()
                .flatten()
                .map(String::as_str);
            ingress.chain(external)
        })
        .filter_map(|ip| ip.parse().ok())
        .collect();
    ips.into_iter().collect()
}

/// Of `wanted`, the addresses the egress tables masquerade already (`masqueraded`): only those
/// are routed into `ovn0`. Routed without the masquerade, a backend's reply would leave through
/// its own node un-NATed and the client would drop it.
pub fn routable_lb_ingress(wanted: Vec<IpAddr>, masqueraded: &BTreeSet<IpAddr>) -> Vec<IpAddr> {
    wanted.into_iter().filter(|ip| masqueraded.contains(ip)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(vpc: Option<&str>, ips: &[&str]) -> Arc<Service> {
        with_external(vpc, ips, &[])
    }

    fn with_external(vpc: Option<&str>, ips: &[&str], external: &[&str]) -> Arc<Service> {
        let ingress: Vec<serde_json::Value> = ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect();
        let mut meta = serde_json::json!({"name": "s", "namespace": "n"});
        if let Some(vpc) = vpc {
            meta["annotations"] = serde_json::json!({keys::VPC: vpc});
        }
        Arc::new(
            serde_json::from_value(
                serde_json::json!({"metadata": meta, "spec": {"type": "LoadBalancer", "externalIPs": external},
                "status": {"loadBalancer": {"ingress": ingress}}}),
            )
            .unwrap(),
        )
    }

    #[test]
    fn only_the_default_vpcs_placed_services() {
        let services = [
            service(
                Some("ovn-cluster"),
                &["203.0.113.10", "2001:db8::10", "not-an-ip"],
            ),
            service(Some("vpc1"), &["203.0.113.11"]),
            service(None, &["203.0.113.12"]),
            service(Some("ovn-cluster"), &["203.0.113.10"]),
            with_external(Some("ovn-cluster"), &[], &["192.0.2.7", "bad"]),
            with_external(Some("vpc1"), &[], &["192.0.2.8"]),
        ];
        let ips = lb_ingress_ips(&services, "ovn-cluster");
        let want: Vec<IpAddr> = ["192.0.2.7", "203.0.113.10", "2001:db8::10"]
            .map(|ip| ip.parse().unwrap())
            .to_vec();
        assert_eq!(ips, want);
    }

    #[test]
    fn only_masqueraded_addresses_are_routed() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let masqueraded = BTreeSet::from([ip("203.0.113.1"), ip("203.0.113.9")]);
        assert_eq!(
            routable_lb_ingress(vec![ip("203.0.113.1"), ip("203.0.113.2")], &masqueraded),
            vec![ip("203.0.113.1")],
            "203.0.113.2 waits for its masquerade; 203.0.113.9 is no longer wanted"
        );
    }
}
