//! Pod addresses: announced only when the controller allocated them to that pod.
//!
//! Every annotation of a pod, `ovn.kubernetes.io/allocated` and `ip_address` included, can be
//! written by the pod's author when creating it, so an annotation proves nothing about who chose
//! the address. What only the controller (or the platform) writes is the IP record
//! (`ips.kubeovn.io`, cluster-scoped, which tenants cannot create): `spec.podName`,
//! `spec.namespace`, `spec.subnet` and the addresses, labelled `ovn.kubernetes.io/ip_reserved`
//! (`false` on the records the controller writes for pods, `true` once it reserved a
//! platform-created one). So an address in a pod's `<provider>.kubernetes.io/ip_address`
//! annotation is announced only when such a record names that pod and that address, and the
//! record's subnet is Ready and contains the address. The `bgp` annotation (the pod's, else the
//! subnet's, the record's subnet when there is a record) still decides whether: Kube-OVN's
//! semantics, but never what.
//!
//! Pure: no I/O.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube_ovn_api::annotations::{BgpPolicy, BgpScope, IpPair, get, keys, pod_network, provider_key};
use kube_ovn_api::crd::Ip;

use super::refusal::{Reason, Refusal, annotation_field, host_problem};
use super::{Desired, Origin, Scope, Skipped, Subnets, host_route, name_of, pod_alive};

/// One IP record: its subnet and its addresses.
type Record<'a> = (&'a str, Vec<IpAddr>);

/// The addresses each pod was given, from the IP records: `(namespace, pod)` → its records.
pub(crate) struct Records<'a> {
    by_pod: HashMap<(&'a str, &'a str), Vec<Record<'a>>>,
}

/// Whether an IP record is one the controller wrote or accepted: labelled `ip_reserved`
/// `false` (its own record of a pod's allocation) or `true` (a reservation it carried out).
/// A reservation it has not accepted (or refused) carries neither.
fn accepted(ip: &Ip) -> bool {
    ip.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(keys::IP_RESERVED_LABEL))
        .is_some_and(|v| v == "false" || v == "true")
}

impl<'a> Records<'a> {
    pub(crate) fn new(ips: &'a [Arc<Ip>]) -> Self {
        let mut by_pod: HashMap<_, Vec<_>> = HashMap::new();
        for ip in ips.iter().filter(|ip| accepted(ip)) {
            let spec = &ip.spec;
            let (Some(ns), Some(pod), Some(subnet)) = (
                spec.namespace.as_deref(),
                spec.pod_name.as_deref(),
                spec.subnet.as_deref(),
            ) else {
                continue;
            };
            let addrs: Vec<IpAddr> = spec.addresses().into_iter().collect();
            by_pod.entry((ns, pod)).or_default().push((subnet, addrs));
        }
        Records { by_pod }
    }

    /// The subnet of the record that gives `ip` to pod `namespace/pod`.
    pub(crate) fn find(&self, namespace: &str, pod: &str, ip: IpAddr) -> Option<&'a str> {
        self.by_pod
            .get(&(namespace, pod))?
            .iter()
            .find(|(_, addrs)| addrs.contains(&ip))
            .map(|(subnet, _)| *subnet)
    }
}

fn refuse(out: &mut Desired, pod: &Pod, key: &str, reason: Reason, message: String) {
    out.refusals.push(Refusal {
        object: pod.object_ref(&()),
        field: annotation_field(key),
        reason,
        message,
    });
}

/// Adds the pods' addresses this speaker announces, and the refusals, to `out`.
pub(super) fn add(
    pods: &[Arc<Pod>],
    records: &Records<'_>,
    subnets: &Subnets<'_>,
    scope: &Scope<'_>,
    out: &mut Desired,
) {
    for pod in pods {
        if !pod_alive(pod) || pod.spec.as_ref().and_then(|s| s.host_network) == Some(true) {
            continue;
        }
        let id = name_of(&pod.metadata);
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
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
        for provider in pod_network::providers(annotations) {
            let Ok(key) = provider_key(provider, keys::IP_ADDRESS) else {
                continue;
            };
            let key = &key;
            let ips = match get::<IpPair>(annotations, key) {
                Ok(Some(ips)) => ips,
                Ok(None) => continue,
                Err(error) => {
                    out.skipped.push(Skipped {
                        object: format!("Pod {id}"),
                        error,
                    });
                    continue;
                }
            };
            // The subnet the pod's annotation claims: only to decide whether an address no
            // record gives would have been announced (and so is refused aloud).
            let claimed = pod_network::requested_subnet(annotations, provider).unwrap_or_default();
            for ip in ips.addrs() {
                let record = records.find(namespace, name, ip);
                let subnet = record.unwrap_or(claimed);
                let Some(policy) = own.or_else(|| subnets.policy(subnet)) else {
                    continue;
                };
                let here = match subnets.gateway_here(subnet) {
                    Some(on_gateway) => on_gateway,
                    None => policy.scope() == BgpScope::Cluster || on_this_node,
                };
                if !here {
                    continue;
                }
                if let Some(problem) = host_problem(ip) {
                    let message = format!("{ip} is {problem}: not announced");
                    refuse(out, pod, key, Reason::NotUnicast, message);
                    continue;
                }
                let Some(subnet) = record else {
                    let message = format!(
                        "{ip} was not allocated to pod {id} by the controller (no IP record names this pod and address): not announced"
                    );
                    refuse(out, pod, key, Reason::NotAllocated, message);
                    continue;
                };
                if !subnets.ready(subnet) {
                    let message =
                        format!("{ip}: its subnet {subnet} does not exist or is not Ready: not announced");
                    refuse(out, pod, key, Reason::SubnetNotReady, message);
                } else if !subnets.contains(subnet, ip) {
                    let message = format!("{ip} lies outside the CIDR of its subnet {subnet}: not announced");
                    refuse(out, pod, key, Reason::OutsideSubnet, message);
                } else {
                    out.add(host_route(ip), Origin::Pod(id.clone()));
                }
            }
        }
    }
}
