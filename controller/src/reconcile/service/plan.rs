//! What one Service wants in its VPC's load balancers, from the Service, its EndpointSlices and
//! the pods they point at. Pure: no I/O; [`crate::reconcile::service`] applies the result.
//!
//! Following Kube-OVN's `endpoint_slice.go`: the VIPs are the ClusterIPs (or the addresses of the
//! `switch_lb_vip` / `router_lb_vip` annotations), one key per VIP and Service port; its value is
//! the ready endpoints of the VIP's family as `ip:targetPort`; a Service with `sessionAffinity:
//! ClientIP` goes into the session load balancer; the VPC is the one of the endpoints' pods. A
//! key with no ready endpoint is left out, so the VIP goes (Kube-OVN deletes it from both load
//! balancers). Headless Services want nothing. Of the addresses a Service asks for, it gets those
//! [`claims`](mod@super::claims)' rule grants it (its ClusterIPs always; another Service's address
//! never); each refused one is reported with its field and reason.
//!
//! Input problems (a malformed address, a port name no pod has) do not fail the whole Service:
//! the part they concern is left out and each is reported with the object and field it is in.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube_ovn_api::annotations::keys;

use super::claims::{Admission, Claims, Owners, claims, grant};
use crate::ovn::lb::{LbKind, Protocol, vip_key};

/// The label Kubernetes puts on a Service's EndpointSlices.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// What a Service wants.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ServiceVips {
    /// The VPC whose load balancers hold the VIPs.
    pub vpc: String,
    /// The addresses the Service owns, as text: every key of its in any load balancer starts
    /// with one of them, whether it is still wanted or not.
    pub ips: Vec<String>,
    /// Per load balancer, `key → backends`.
    pub vips: BTreeMap<LbKind, BTreeMap<String, String>>,
    /// Input left out, each naming its object and field.
    pub problems: Vec<String>,
    /// Addresses asked for and refused (another Service's, outside the allowed ranges), each
    /// naming the field and the reason.
    pub refused: Vec<String>,
}

/// Every address a Service asks for (its ClusterIPs, or its annotation's VIPs, its LoadBalancer
/// ingress IPs and its `spec.externalIPs`), whether it gets them or not; a bad address is an
/// error naming the Service and field. Which it gets is [`claims`](mod@super::claims)' rule.
///
/// Ingress and external IPs are ours, not Kube-OVN's (which leaves them to kube-proxy): the
/// speaker announces them, so they must lead somewhere without kube-proxy. A pod reaches them
/// through its own switch; from outside, the node routes them into `ovn0` and the join switch's
/// copy of the load balancers answers (the daemon's `lb_ingress`, `docs/architecture.md`).
pub fn service_ips(svc: &Service) -> Result<Vec<IpAddr>, String> {
    let c = claims(svc)?;
    let mut ips: Vec<IpAddr> = Vec::new();
    for claim in c.cluster.iter().chain(&c.others) {
        if !ips.contains(&claim.ip) {
            ips.push(claim.ip);
        }
    }
    Ok(ips)
}

/// One ready endpoint: its address and the pod it is (for the VPC and named ports).
struct Ready<'a> {
    ip: IpAddr,
    pod: Option<&'a str>,
    /// The slice's port numbers by port name.
    ports: BTreeMap<&'a str, i32>,
}

fn ready_endpoints<'a>(slices: &'a [&'a EndpointSlice], problems: &mut Vec<String>) -> Vec<Ready<'a>> {
    let mut out = Vec::new();
    for slice in slices {
        let id = format!(
            "endpointslice {}/{}",
            slice.namespace().unwrap_or_default(),
            slice.name_any()
        );
        let family = slice.address_type.as_str();
        if family != "IPv4" && family != "IPv6" {
            // FQDN slices have no address OVN can balance to.
            continue;
        }
        let ports: BTreeMap<&str, i32> = slice
            .ports
            .iter()
            .flatten()
            .filter_map(|p| Some((p.name.as_deref().unwrap_or(""), p.port?)))
            .collect();
        for (i, ep) in slice.endpoints.iter().enumerate() {
            // Kubernetes: an unset `ready` means ready.
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            let pod = ep
                .target_ref
                .as_ref()
                .filter(|r| r.kind.as_deref() == Some("Pod"))
                .and_then(|r| r.name.as_deref());
            for (j, a) in ep.addresses.iter().enumerate() {
                match a.parse::<IpAddr>() {
                    Ok(ip) if ip.is_ipv4() == (family == "IPv4") => out.push(Ready {
                        ip,
                        pod,
                        ports: ports.clone(),
                    }),
                    _ => problems.push(format!(
                        "{id}: endpoints[{i}].addresses[{j}]: {a:?} is not an {family} address"
                    )),
                }
            }
        }
    }
    out
}

/// The backend port of `port` at endpoint `ep`: the slice's port of the Service port's name (the
/// EndpointSlice controller resolved it), else the `targetPort` number, else the pod's container
/// port of that name.
fn target_port(port: &ServicePort, ep: &Ready<'_>, pod: Option<&Pod>) -> Result<u16, String> {
    let name = port.name.as_deref().unwrap_or("");
    let number = match (ep.ports.get(name), &port.target_port) {
        (Some(p), _) | (None, Some(IntOrString::Int(p))) => *p,
        (None, None) => port.port,
        (None, Some(IntOrString::String(named))) => {
            let found = pod
                .and_then(|p| p.spec.as_ref())
                .into_iter()
                .flat_map(|s| s.containers.iter())
                .flat_map(|c| c.ports.iter().flatten())
                .find(|c| c.name.as_deref() == Some(named.as_str()))
                .map(|c| c.container_port);
            found.ok_or_else(|| {
                format!(
                    "targetPort {named:?} names no container port of pod {}",
                    ep.pod.unwrap_or("(none)")
                )
            })?
        }
    };
    u16::try_from(number)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| format!("port {number} is out of range"))
}

/// What the Service's VIPs are decided by besides itself: the owner of every address and the
/// ranges claims must lie in ([`claims`](mod@super::claims)).
pub struct Rules<'a> {
    pub owners: &'a Owners,
    pub admission: &'a Admission<'a>,
    /// Where a Service whose endpoints name no pod goes, unless its `vpc` annotation says
    /// otherwise.
    pub default_vpc: &'a str,
    /// Whether custom VPC `vpc` admits namespace `ns` (lists it in `spec.namespaces`): the `vpc`
    /// annotation is tenant-writable, and names another tenant's VPC only to be refused.
    pub vpc_admits: &'a dyn Fn(&str, &str) -> bool,
}

/// The VIPs of `svc` given its slices and a pod lookup (`pod(name)` in the Service's namespace).
pub fn plan_service<'a>(
    svc: &Service,
    slices: &[&EndpointSlice],
    pod: impl Fn(&str) -> Option<&'a Pod>,
    rules: &Rules<'_>,
) -> ServiceVips {
    let default_vpc = rules.default_vpc;
    let ns = svc.namespace().unwrap_or_default();
    let id = format!("service {ns}/{}", svc.name_any());
    let mut out = ServiceVips::default();
    let asked = match claims(svc) {
        Ok(c) => c,
        Err(e) => {
            out.problems.push(e);
            Claims::default()
        }
    };
    let endpoints = ready_endpoints(slices, &mut out.problems);
    // The endpoints' pods decide the VPC (Kube-OVN: the pods' logical router); a Service whose
    // endpoints are no pods keeps the one its annotation names. The controller writes a pod's
    // logical_router, but its tenant can too: one naming a VPC that does not admit the
    // namespace is not the pod's (a pod is only ever placed in a custom VPC that lists its
    // namespace, tenancy.rs), and is reported instead.
    let mut from_pods: BTreeSet<&str> = BTreeSet::new();
    for p in endpoints.iter().filter_map(|e| e.pod.and_then(&pod)) {
        let Some(v) = p
            .annotations()
            .get(keys::LOGICAL_ROUTER)
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        if v == default_vpc || (rules.vpc_admits)(v, &ns) {
            from_pods.insert(v);
        } else {
            out.problems.push(format!(
                "{id}: pod {ns}/{}: metadata.annotations[\"{}\"]: VPC {v} does not admit namespace {ns}; not used",
                p.name_any(),
                keys::LOGICAL_ROUTER
            ));
        }
    }
    // The annotation is the tenant's word (the controller also writes it, with the VPC the pods
    // gave): a VPC that does not admit the Service's namespace is refused, as a pod would be.
    let annotated = match svc.annotations().get(keys::VPC).filter(|v| !v.is_empty()) {
        Some(v) if v == default_vpc || (rules.vpc_admits)(v, &ns) => Some(v.clone()),
        Some(v) => {
            out.problems.push(format!(
                "{id}: metadata.annotations[\"{}\"]: VPC {v} does not admit namespace {ns}; using {default_vpc}",
                keys::VPC
            ));
            None
        }
        None => None,
    };
    out.vpc = from_pods
        .first()
        .map(|v| (*v).to_owned())
        .or(annotated)
        .unwrap_or_else(|| default_vpc.to_owned());
    if from_pods.len() > 1 {
        out.problems.push(format!(
            "{id}: endpoints are pods of several VPCs ({}); using {}",
            from_pods.iter().copied().collect::<Vec<_>>().join(", "),
            out.vpc
        ));
    }
    // Only what it owns: `ips` is also what its reconcile clears in the load balancers, so an
    // address another Service owns must not be in it (that one's VIP stays as it is).
    let granted = grant(svc, &asked, rules.owners, rules.admission, &out.vpc);
    let ips = granted.ips;
    out.refused = granted.refused;
    // Its keys to make exactly what it wants: those of the addresses it gets, and those it owns
    // and does not use (its ClusterIP under an annotation) or asks for and nobody owns (a claim
    // no longer admissible, say its Subnet went), which are cleared. Never another's.
    let me = super::claims::key_of(svc);
    let unowned = asked
        .cluster
        .iter()
        .chain(&asked.others)
        .map(|c| c.ip)
        .filter(|ip| rules.owners.owner(*ip).is_none());
    let mut mine: Vec<IpAddr> = ips.clone();
    for ip in rules.owners.owned_by(&me).chain(unowned) {
        if !mine.contains(&ip) {
            mine.push(ip);
        }
    }
    out.ips = mine.iter().map(ToString::to_string).collect();
    let session = svc.spec.as_ref().and_then(|s| s.session_affinity.as_deref()) == Some("ClientIP");
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    for (i, port) in ports.iter().enumerate() {
        let Some(protocol) = Protocol::from_service(port.protocol.as_deref()) else {
            out.problems.push(format!(
                "{id}: spec.ports[{i}].protocol: {:?} is not TCP, UDP or SCTP",
                port.protocol.as_deref().unwrap_or_default()
            ));
            continue;
        };
        let Ok(vip_port) = u16::try_from(port.port) else {
            out.problems.push(format!(
                "{id}: spec.ports[{i}].port: {} is out of range",
                port.port
            ));
            continue;
        };
        let kind = LbKind { protocol, session };
        for ip in &ips {
            let mut backends = BTreeSet::new();
            for ep in endpoints.iter().filter(|e| e.ip.is_ipv4() == ip.is_ipv4()) {
                match target_port(port, ep, ep.pod.and_then(&pod)) {
                    Ok(p) => {
                        backends.insert(vip_key(ep.ip, p));
                    }
                    Err(e) => {
                        let msg = format!("{id}: spec.ports[{i}]: {e}");
                        if !out.problems.contains(&msg) {
                            out.problems.push(msg);
                        }
                    }
                }
            }
            if backends.is_empty() {
                continue;
            }
            let value = backends.into_iter().collect::<Vec<_>>().join(",");
            out.vips
                .entry(kind)
                .or_default()
                .insert(vip_key(*ip, vip_port), value);
        }
    }
    out
}

#[cfg(test)]
mod tests;
