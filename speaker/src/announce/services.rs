//! Service and IptablesEIP addresses, with who may choose each:
//!
//! - ClusterIPs are allocated by the API server: trusted (announced with `--announce-cluster-ip`).
//! - `status.loadBalancer.ingress[].ip` is written through the status subresource by the
//!   platform's load-balancer allocator: trusted.
//! - `spec.externalIPs` is written by whoever may write the Service, a tenant: announced only
//!   inside `--service-external-ip-cidrs` (empty by default, so none), as Kubernetes'
//!   `DenyServiceExternalIPs` admission plugin intends (see [`kube_ovn_api::external_ips`]).
//! - An IptablesEIP's `spec.v4ip`/`spec.v6ip` are the platform's (cluster-scoped objects the
//!   controller allocates): trusted.
//!
//! With `spec.externalTrafficPolicy: Local`, LoadBalancer and external IPs only from a node with
//! a ready endpoint of the Service ([`super::local`]); ClusterIPs as ever.
//!
//! Every one of them must still be a routable unicast address; one that is not is refused
//! alone.
//!
//! Pure: no I/O.

use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Resource;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::IptablesEIP;

use super::refusal::{Reason, Refusal, host_problem};
use super::{Desired, Origin, Scope, host_route, local, name_of};

/// An address found in `field` of an object.
struct Found<'a> {
    field: String,
    value: &'a str,
    /// A tenant's choice, honoured only inside `--service-external-ip-cidrs`.
    external: bool,
}

/// Announces `value` for `origin` unless it is refused (then the refusal names `field`).
fn offer(
    out: &mut Desired,
    object: &impl Resource<DynamicType = ()>,
    found: &Found<'_>,
    scope: &Scope<'_>,
    origin: &Origin,
) {
    // `None` and "" are headless Services; anything else the API server validated as an IP.
    let Ok(ip) = found.value.parse::<IpAddr>() else {
        return;
    };
    let refusal = |reason, message| Refusal {
        object: object.object_ref(&()),
        field: found.field.clone(),
        reason,
        message,
    };
    if found.external && !scope.external_ip_cidrs.allows(ip) {
        let allowed = match scope.external_ip_cidrs.to_string() {
            s if s.is_empty() => "none: the list is empty".to_owned(),
            s => s,
        };
        out.refusals.push(refusal(
            Reason::ExternalIpNotAllowed,
            format!("{ip} is outside --service-external-ip-cidrs ({allowed}): not announced"),
        ));
    } else if let Some(problem) = host_problem(ip) {
        out.refusals.push(refusal(
            Reason::NotUnicast,
            format!("{ip} is {problem}: not announced"),
        ));
    } else {
        out.add(host_route(ip), origin.clone());
    }
}

/// Adds the addresses of Services annotated `ovn.kubernetes.io/bgp: "true"` (the literal, as
/// Kube-OVN), and the refusals.
pub(super) fn add_services(
    services: &[Arc<Service>],
    slices: &[Arc<EndpointSlice>],
    scope: &Scope<'_>,
    out: &mut Desired,
) {
    for service in services {
        let annotated = service
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::BGP))
            .is_some_and(|v| v == "true");
        if !annotated {
            continue;
        }
        let origin = Origin::Service(name_of(&service.metadata));
        let spec = service.spec.as_ref();
        let mut found = Vec::new();
        if scope.announce_cluster_ip {
            // `clusterIPs[0]` is `clusterIP`; older objects may have only the latter.
            match spec
                .and_then(|s| s.cluster_ips.as_ref())
                .filter(|c| !c.is_empty())
            {
                Some(ips) => found.extend(ips.iter().enumerate().map(|(i, v)| Found {
                    field: format!("spec.clusterIPs[{i}]"),
                    value: v,
                    external: false,
                })),
                None => found.extend(spec.and_then(|s| s.cluster_ip.as_deref()).map(|v| Found {
                    field: "spec.clusterIP".into(),
                    value: v,
                    external: false,
                })),
            }
        }
        // `externalTrafficPolicy: Local`: the addresses from outside only from a node with a
        // ready endpoint ([`local`]); nor are they refused elsewhere (not this speaker's to say).
        let outside = local::announce_here(service, slices, scope.node_name);
        let external = spec.and_then(|s| s.external_ips.as_ref()).filter(|_| outside);
        found.extend(external.into_iter().flatten().enumerate().map(|(i, v)| Found {
            field: format!("spec.externalIPs[{i}]"),
            value: v,
            external: true,
        }));
        let ingress = service
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|l| l.ingress.as_ref())
            .filter(|_| outside);
        found.extend(ingress.into_iter().flatten().enumerate().filter_map(|(i, g)| {
            g.ip.as_deref().map(|v| Found {
                field: format!("status.loadBalancer.ingress[{i}].ip"),
                value: v,
                external: false,
            })
        }));
        for f in &found {
            offer(out, service.as_ref(), f, scope, &origin);
        }
    }
}

/// Adds the addresses of ready IptablesEIPs annotated `bgp: "true"` whose NAT gateway runs on
/// this node, and the refusals.
pub(super) fn add_eips(eips: &[Arc<IptablesEIP>], pods: &[Arc<Pod>], scope: &Scope<'_>, out: &mut Desired) {
    for eip in eips {
        let annotated = eip
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(keys::BGP))
            .is_some_and(|v| v == "true");
        let ready = eip.status.as_ref().and_then(|s| s.ready) == Some(true);
        let gateway = eip.spec.nat_gw_dp.as_deref().unwrap_or_default();
        if !annotated || !ready || !nat_gateway_here(pods, gateway, scope.node_name) {
            continue;
        }
        let origin = Origin::Eip(eip.metadata.name.clone().unwrap_or_default());
        for (field, value) in [("spec.v4ip", &eip.spec.v4ip), ("spec.v6ip", &eip.spec.v6ip)] {
            if let Some(value) = value {
                let found = Found {
                    field: field.into(),
                    value,
                    external: false,
                };
                offer(out, eip.as_ref(), &found, scope, &origin);
            }
        }
    }
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
