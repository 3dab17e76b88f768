//! The connectivity matrix: which connections should work, from the objects (pure), and how
//! to show what real traffic measured. The probing itself is the binary's.
//!
//! Expectations, Kube-OVN's behaviour:
//! - pod → pod: within a VPC, yes (across nodes and subnets); between VPCs, no (a custom VPC
//!   is isolated from the default one unless peered).
//! - outside → pod: yes when the pod's address is announced over BGP (its subnet's or its own
//!   `ovn.kubernetes.io/bgp` annotation) and it is in the default VPC, and the pod sees the
//!   outside host's own address (no NAT on the way in); otherwise the ToR has no route.
//! - pod → outside: a `natOutgoing` pod's packets leave with the address of the node that NATs
//!   them: its own node's with a distributed gateway, the active gateway node's with a
//!   centralized one (or the `node:ip` address `gatewayNode` gives); an announced pod's that are
//!   not NATed go out with its own address and come back over the BGP route; others have no way
//!   back.
//! - NetworkPolicies (`super::policy`, Kubernetes' rules) turn any of these into no answer where
//!   they do not let the connection through; toward a Service they judge each backend (OVN
//!   applies egress ACLs after the load balancer).
//! - pod → Service: a pod reaches a ClusterIP through its VPC's OVN load balancers (no
//!   kube-proxy in the lab) when the Service is in its VPC and has a ready endpoint; the answer
//!   comes from one of the Service's ready backends. Other VPCs have no such VIP.
//! - outside → Service: an announced Service's LoadBalancer (or external) IP answers from one
//!   of its ready backends when it is in the default VPC (no kube-proxy: the node that the ToR
//!   picks routes it into `ovn0` and masquerades it to its join address, so policies judge the
//!   backends against the nodes' join addresses); a custom VPC's has no way in.
//! - Underlay pods (a subnet with `vlan`, Kube-OVN's underlay): their gateway is the physical
//!   router (the ToR), so they reach the outside host with their own address and the outside
//!   host reaches them with no BGP route and no NAT; they reach each other over the VLAN, on any
//!   node. With `u2oInterconnection` their VPC's router joins their subnet, so they and that
//!   VPC's overlay pods reach each other both ways, and they reach the VPC's ClusterIPs (the
//!   switch's load balancers). Without it, what overlay pods see of them depends on the
//!   physical network's routes: those checks are not made. These rows only exist when underlay
//!   pods do (`examples/lab/40-underlay.yaml`).
//! - A custom VPC with `enableExternal` (Kube-OVN's OVN EIPs, `examples/lab/50-external.yaml`):
//!   its pods leave with their FIP's or their SNAT rule's address, and the outside host reaches
//!   them at a FIP or a DNAT rule's address and port ([`external`]). Their own addresses stay
//!   unreachable from outside. Out that way they also reach what the external network's
//!   gateway (the ToR) routes to: underlay pods and default-VPC pods announced over BGP, which
//!   see the EIP.
//! - BGP advertisement policy ([`bgp_policy`]): an announced Service with
//!   `externalTrafficPolicy: Local` answers the outside host from a backend that sees the outside
//!   host's own address, and the ToR routes it only through the nodes with a ready endpoint; a
//!   Service a `BgpAdvertisement` with communities selects carries them at the ToR.
//! - IPv6 ([`ipv6`]): a pod with an IPv6 address too (a dual-stack subnet) gets the outside
//!   host's rows again over IPv6: outside → pod when its address is announced (the ToR's IPv6
//!   routes, learnt over the IPv6 sessions) in the default VPC, seeing the outside host's own
//!   IPv6 address; pod → outside with its own IPv6 address when announced and not NATed.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::policy::{self, Endpoint, PodView};

pub mod bgp_policy;
pub mod external;
pub mod ipv6;
mod report;

pub use external::{EipTarget, NatRules};
pub use report::{Outcome, Report, client_ip, judge};

/// The default VPC's name (Kube-OVN's `--cluster-router`).
pub const DEFAULT_VPC: &str = "ovn-cluster";

/// A pod with a netexec server, as the matrix needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub name: String,
    pub node: String,
    pub ip: IpAddr,
    /// Its IPv6 address, when it has one beside `ip` (a dual-stack subnet's pod).
    pub ip6: Option<IpAddr>,
    pub port: u16,
    pub subnet: String,
    pub vpc: String,
    pub announced: bool,
    pub nat_outgoing: bool,
    /// Whether its subnet is an overlay or an underlay (on a VLAN, the physical router its
    /// gateway).
    pub attachment: Attachment,
    /// The source addresses the outside host may see from this pod when it is NATed: its
    /// node's, or its centralized subnet's active gateways'; none when no gateway is active.
    pub egress_ips: Vec<IpAddr>,
    /// The address it leaves a custom VPC with through OVN's NAT (its FIP's, or a SNAT rule's):
    /// [`NatRules::egress`].
    pub egress_eip: Option<IpAddr>,
    /// What NetworkPolicies look at: its labels, its namespace's, its named container ports.
    pub labels: BTreeMap<String, String>,
    pub namespace_labels: BTreeMap<String, String>,
    pub named_ports: BTreeMap<String, u16>,
}

/// How a pod's subnet is attached (Kube-OVN's subnet `vlan`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Attachment {
    /// Geneve between nodes, its VPC's router the gateway.
    #[default]
    Overlay,
    /// On a VLAN of a provider network, the physical router the gateway; `u2o` when its VPC's
    /// router joins the subnet (`u2oInterconnection`).
    Underlay { u2o: bool },
}

impl Target {
    fn is_underlay(&self) -> bool {
        matches!(self.attachment, Attachment::Underlay { .. })
    }

    /// Whether `self` and `other` reach each other at all (policies aside), or `None` when it
    /// depends on what the lab does not model (an underlay without U2O and an overlay pod).
    fn reaches(&self, other: &Self) -> Option<bool> {
        match (self.attachment, other.attachment) {
            (Attachment::Overlay, Attachment::Overlay) => Some(self.vpc == other.vpc),
            // One VLAN (or the physical router between VLANs): any node, any VPC field.
            (Attachment::Underlay { .. }, Attachment::Underlay { .. }) => Some(true),
            (Attachment::Underlay { u2o }, Attachment::Overlay)
            | (Attachment::Overlay, Attachment::Underlay { u2o }) => u2o.then_some(self.vpc == other.vpc),
        }
    }

    /// The EIP a custom VPC's pod reaches `other` with, when `other` is on the fabric's side of
    /// the external network: an underlay pod, or a default-VPC pod announced over BGP (the ToR,
    /// the external network's gateway, routes to both).
    fn leaves_through_eip_to(&self, other: &Self) -> Option<IpAddr> {
        let on_the_fabric = other.is_underlay() || (other.announced && other.vpc == DEFAULT_VPC);
        self.egress_eip
            .filter(|_| self.vpc != DEFAULT_VPC && self.vpc != other.vpc && on_the_fabric)
    }

    pub fn label(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn endpoint(&self) -> Endpoint<'_> {
        self.endpoint_at(self.ip)
    }

    /// The pod as policies see it at one of its addresses.
    fn endpoint_at(&self, ip: IpAddr) -> Endpoint<'_> {
        Endpoint {
            ip,
            pod: Some(PodView {
                namespace: &self.namespace,
                labels: &self.labels,
                namespace_labels: &self.namespace_labels,
                named_ports: &self.named_ports,
            }),
        }
    }
}

/// The outside host as policies see it.
fn outside() -> Endpoint<'static> {
    Endpoint {
        ip: super::topology::Topology::outside_ip().into(),
        pod: None,
    }
}

/// A Service with a ClusterIP, as the matrix needs it: the address and TCP port to probe and
/// the pods that may answer (its ready endpoints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceTarget {
    pub namespace: String,
    pub name: String,
    pub ip: IpAddr,
    pub port: u16,
    /// The VPC whose load balancers carry it (the Service's `ovn.kubernetes.io/vpc`).
    pub vpc: String,
    /// The names of the pods behind its ready endpoints.
    pub backends: Vec<String>,
    /// Where the outside host reaches it: its first LoadBalancer ingress or external IP, when
    /// it is announced (`ovn.kubernetes.io/bgp: "true"`).
    pub outside_ip: Option<IpAddr>,
    /// The sources its backends see for traffic from outside: the nodes' join addresses, or the
    /// outside host's own address for a `Local` one.
    pub ingress_sources: Vec<IpAddr>,
    /// `externalTrafficPolicy: Local`: announced only from the nodes with a ready endpoint, the
    /// client's address preserved.
    pub local: bool,
    /// The fabric addresses of the nodes with a ready endpoint, sorted: the ToR's next hops for
    /// a `Local` one.
    pub local_next_hops: Vec<IpAddr>,
    /// The communities the ToR should see on its outside address (canonical `high:low`, from the
    /// `BgpAdvertisement`s selecting it).
    pub communities: Vec<String>,
}

impl ServiceTarget {
    pub fn label(&self) -> String {
        format!("svc {}/{}", self.namespace, self.name)
    }
}

/// What a probe should see.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// An answer equal to this (a hostname, or the client address as `ip:port` whose ip is
    /// this).
    Answer(String),
    /// An answer that is one of these (the hostnames of a Service's backends).
    AnswerIn(Vec<String>),
    ClientIp(IpAddr),
    /// A client address that is one of these (the active gateways of an ECMP subnet).
    ClientIpIn(Vec<IpAddr>),
    /// No answer.
    Blocked,
    /// The ToR's kernel routes the address through exactly these next hops (sorted).
    NextHops(Vec<IpAddr>),
    /// Every path the ToR learnt for the address carries these communities (canonical).
    Communities(Vec<String>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    PodToPod,
    OutsideToPod,
    PodToOutside,
    /// `to` indexes the services, not the pods.
    PodToService,
    /// From the outside host to a Service's `outside_ip`; `to` indexes the services.
    OutsideToService,
    /// From the outside host to a FIP or a DNAT rule's address; `to` indexes the EIP targets.
    OutsideToEip,
    /// [`Kind::OutsideToPod`] and [`Kind::PodToOutside`] over IPv6: to the pod's `ip6`, to the
    /// outside host's IPv6 address.
    OutsideToPod6,
    PodToOutside6,
    /// At the ToR, about a Service's outside address (`to` indexes the services): the
    /// communities of its BGP paths, and its kernel route's next hops.
    TorCommunities,
    TorNextHops,
}

/// One probe to make: from `from` (a pod label, or `outside`) to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub kind: Kind,
    /// Index into the targets, or `None` for the outside host.
    pub from: Option<usize>,
    pub to: Option<usize>,
    /// The HTTP path to ask.
    pub path: &'static str,
    pub expect: Expect,
}

/// The checks for `targets` (pods with netexec servers), `services` (ClusterIPs) and `eips` (a
/// custom VPC's FIPs and DNAT addresses) under `policies`.
pub fn plan(
    targets: &[Target],
    services: &[ServiceTarget],
    eips: &[EipTarget],
    policies: &[NetworkPolicy],
) -> Vec<Check> {
    let allows = |from: &Endpoint, to: &Endpoint, port: u16| policy::allows(policies, from, to, port);
    let mut checks = Vec::new();
    for (i, a) in targets.iter().enumerate() {
        for (j, b) in targets.iter().enumerate() {
            if i == j {
                continue;
            }
            if let Some(eip) = a.leaves_through_eip_to(b) {
                // Out through its VPC's NAT, back in through the fabric: `b` sees the EIP.
                let from = Endpoint { ip: eip, pod: None };
                checks.push(Check {
                    kind: Kind::PodToPod,
                    from: Some(i),
                    to: Some(j),
                    path: "/hostname",
                    expect: if allows(&from, &b.endpoint(), b.port) {
                        Expect::Answer(b.name.clone())
                    } else {
                        Expect::Blocked
                    },
                });
                continue;
            }
            let Some(reaches) = a.reaches(b) else {
                continue;
            };
            checks.push(Check {
                kind: Kind::PodToPod,
                from: Some(i),
                to: Some(j),
                path: "/hostname",
                expect: if reaches && allows(&a.endpoint(), &b.endpoint(), b.port) {
                    Expect::Answer(b.name.clone())
                } else {
                    Expect::Blocked
                },
            });
        }
    }
    for (i, t) in targets.iter().enumerate() {
        // An underlay pod's address is the fabric's own: the ToR reaches it on its VLAN.
        let routed = t.is_underlay() || (t.announced && t.vpc == DEFAULT_VPC);
        checks.push(Check {
            kind: Kind::OutsideToPod,
            from: None,
            to: Some(i),
            path: "/clientip",
            expect: if routed && allows(&outside(), &t.endpoint(), t.port) {
                Expect::ClientIp(super::topology::Topology::outside_ip().into())
            } else {
                Expect::Blocked
            },
        });
        checks.push(Check {
            kind: Kind::PodToOutside,
            from: Some(i),
            to: None,
            path: "/clientip",
            expect: if !allows(&t.endpoint(), &outside(), super::topology::OUTSIDE_PORT) {
                Expect::Blocked
            } else if t.nat_outgoing && t.vpc == DEFAULT_VPC && !t.is_underlay() {
                match t.egress_ips.as_slice() {
                    [] => Expect::Blocked,
                    [ip] => Expect::ClientIp(*ip),
                    many => Expect::ClientIpIn(many.to_vec()),
                }
            } else if let Some(eip) = t.egress_eip.filter(|_| t.vpc != DEFAULT_VPC) {
                Expect::ClientIp(eip)
            } else if routed {
                Expect::ClientIp(t.ip)
            } else {
                Expect::Blocked
            },
        });
        if t.attachment == (Attachment::Underlay { u2o: false }) {
            // Its VPC's load balancers answer through a router it has no port on.
            continue;
        }
        for (k, svc) in services.iter().enumerate() {
            // Each backend judged on its own: the load balancer picks first, then the ACLs.
            let (allowed, denied): (Vec<String>, Vec<String>) = svc.backends.iter().cloned().partition(|b| {
                targets
                    .iter()
                    .find(|x| x.namespace == svc.namespace && &x.name == b)
                    .is_none_or(|x| allows(&t.endpoint(), &x.endpoint(), x.port))
            });
            let expect = if svc.vpc != t.vpc || allowed.is_empty() {
                Expect::Blocked
            } else if denied.is_empty() {
                Expect::AnswerIn(allowed)
            } else {
                // Some backends would answer and others not: which one a request meets is the
                // load balancer's choice, so there is nothing to expect.
                continue;
            };
            checks.push(Check {
                kind: Kind::PodToService,
                from: Some(i),
                to: Some(k),
                path: "/hostname",
                expect,
            });
        }
    }
    for (k, svc) in services.iter().enumerate() {
        if svc.outside_ip.is_none() {
            continue;
        }
        let expect = if svc.vpc == DEFAULT_VPC {
            match from_outside(targets, svc, &allows) {
                Some(expect) => expect,
                None => continue,
            }
        } else {
            Expect::Blocked
        };
        // `Local`: whichever backend answers, it sees the outside host's own address.
        let (path, expect) = match expect {
            Expect::AnswerIn(_) if svc.local => (
                "/clientip",
                Expect::ClientIp(super::topology::Topology::outside_ip().into()),
            ),
            other => ("/hostname", other),
        };
        checks.push(Check {
            kind: Kind::OutsideToService,
            from: None,
            to: Some(k),
            path,
            expect,
        });
    }
    checks.extend(bgp_policy::plan(services));
    checks.extend(external::plan(targets, eips, &allows));
    checks.extend(ipv6::plan(targets, &allows));
    checks
}

/// What the outside host should see at a default-VPC Service's outside IP: an answer from a
/// backend that every node's join address may reach, none when no backend may be reached; `None`
/// when it would depend on the node or the backend the request meets.
fn from_outside(
    targets: &[Target],
    svc: &ServiceTarget,
    allows: &impl Fn(&Endpoint, &Endpoint, u16) -> bool,
) -> Option<Expect> {
    let (mut allowed, mut denied) = (Vec::new(), 0);
    for backend in &svc.backends {
        let target = targets
            .iter()
            .find(|x| x.namespace == svc.namespace && &x.name == backend);
        let verdicts: Vec<bool> = svc
            .ingress_sources
            .iter()
            .map(|ip| {
                let node = Endpoint { ip: *ip, pod: None };
                target.is_none_or(|x| allows(&node, &x.endpoint(), x.port))
            })
            .collect();
        if verdicts.iter().all(|v| *v) {
            allowed.push(backend.clone());
        } else if verdicts.iter().any(|v| *v) {
            return None;
        } else {
            denied += 1;
        }
    }
    match (allowed.is_empty(), denied) {
        (true, _) => Some(Expect::Blocked),
        (false, 0) => Some(Expect::AnswerIn(allowed)),
        (false, _) => None,
    }
}

#[cfg(test)]
mod tests;
