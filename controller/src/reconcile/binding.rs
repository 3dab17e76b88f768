//! Which subnets a namespace is bound to, in Kube-OVN's order (its `handleAddNamespace`): the
//! default subnet of a custom VPC that lists the namespace in `spec.namespaces` first, then every
//! subnet naming it in `spec.namespaces` or selecting it with `spec.namespaceSelectors`. With
//! none, the default subnet of the VPC that lists the namespace, else the cluster's default
//! subnet. The namespace reconciler writes this as the namespace's `logical_switch` annotation and
//! the pod reconciler picks a pod's subnet from it.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::{Subnet, Vpc};
use kube_ovn_api::selector;

/// Whether a subnet binds the namespace, by name or by one of its selectors. A selector with a
/// bad operator binds nothing (the subnet reconciler reports it).
pub fn subnet_binds(subnet: &Subnet, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
    subnet
        .spec
        .namespaces
        .as_ref()
        .is_some_and(|n| n.iter().any(|x| x == namespace))
        || subnet
            .spec
            .namespace_selectors
            .iter()
            .flatten()
            .any(|sel| selector::matches(sel, "spec.namespaceSelectors", labels).unwrap_or(false))
}

/// Whether any subnet selects namespaces by label (then a namespace's labels must be known
/// before a pod in it can be placed).
pub fn any_selectors(subnets: &[Arc<Subnet>]) -> bool {
    subnets
        .iter()
        .any(|s| s.spec.namespace_selectors.as_ref().is_some_and(|v| !v.is_empty()))
}

/// The subnets bound to a namespace, in Kube-OVN's order; empty when none is.
pub fn bound_subnets(
    namespace: &str,
    labels: &BTreeMap<String, String>,
    subnets: &[Arc<Subnet>],
    vpcs: &[Arc<Vpc>],
    cluster_router: &str,
) -> Vec<String> {
    let mut live: Vec<&Arc<Subnet>> = subnets
        .iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .collect();
    live.sort_by_key(|s| s.name_any());
    let mut out: Vec<String> = Vec::new();
    for s in &live {
        let name = s.name_any();
        let vpc = s.spec.vpc.as_deref().unwrap_or(cluster_router);
        let vpc_default = vpc != cluster_router
            && vpcs.iter().any(|v| {
                v.name_any() == vpc
                    && v.spec.default_subnet.as_deref() == Some(name.as_str())
                    && v.spec.namespaces.iter().flatten().any(|n| n == namespace)
            });
        if vpc_default {
            out.retain(|n| *n != name);
            out.insert(0, name);
        } else if subnet_binds(s, namespace, labels) && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

/// The subnet a namespace's pods use when no subnet is bound to it: the default subnet of the
/// custom VPC listing the namespace (its `status.defaultLogicalSwitch`), else `default_subnet`.
pub fn fallback_subnet(namespace: &str, vpcs: &[Arc<Vpc>], default_subnet: &str) -> String {
    let mut listing: Vec<&Arc<Vpc>> = vpcs
        .iter()
        .filter(|v| v.spec.namespaces.iter().flatten().any(|n| n == namespace))
        .collect();
    listing.sort_by_key(|v| v.name_any());
    listing
        .first()
        .and_then(|v| v.status.as_ref()?.default_logical_switch.clone())
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| default_subnet.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn subnet(v: serde_json::Value) -> Arc<Subnet> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn bound_subnets_in_kube_ovn_order() {
        let subnets = vec![
            subnet(json!({"metadata": {"name": "b-named"}, "spec": {"namespaces": ["ns1"]}})),
            subnet(json!({"metadata": {"name": "a-selected"},
                "spec": {"namespaceSelectors": [{"matchLabels": {"team": "blue"}}]}})),
            subnet(json!({"metadata": {"name": "z-vpc-default"}, "spec": {"vpc": "vpc1"}})),
        ];
        let vpcs: Vec<Arc<Vpc>> = vec![Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "vpc1"},
                "spec": {"namespaces": ["ns1"], "defaultSubnet": "z-vpc-default"}}))
            .unwrap(),
        )];
        let l = labels(&[("team", "blue")]);
        assert_eq!(
            bound_subnets("ns1", &l, &subnets, &vpcs, "ovn-cluster"),
            ["z-vpc-default", "a-selected", "b-named"]
        );
        assert_eq!(
            bound_subnets("ns2", &labels(&[]), &subnets, &vpcs, "ovn-cluster"),
            Vec::<String>::new()
        );
        assert_eq!(fallback_subnet("ns2", &vpcs, "ovn-default"), "ovn-default");
    }
}
