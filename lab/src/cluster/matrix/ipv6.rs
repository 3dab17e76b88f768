//! The outside host's rows over IPv6, for pods with an IPv6 address (a dual-stack subnet's): the
//! lab's fabric is dual stack (`super::super::topology`), the speakers announce IPv6 pod
//! addresses and subnet CIDRs over their IPv6 sessions, and the ToR routes them like IPv4 ones.
//!
//! - outside → pod over IPv6: answered when the pod is announced and in the default VPC (the same
//!   rule as IPv4: a custom VPC's pods have no way in), the pod seeing the outside host's own IPv6
//!   address (no NAT on the way in); otherwise no route.
//! - pod → outside over IPv6: the pod's own IPv6 address when it is announced in the default VPC
//!   (the reply comes back over the BGP route); no answer when it is not announced and not NATed.
//!   NATed pods (Kube-OVN NATs IPv6 egress too) and custom VPCs' pods get no IPv6 row: the lab
//!   has none that are dual stack, and their source would be an address the lab does not model.

use std::net::IpAddr;

use super::{Check, DEFAULT_VPC, Endpoint, Expect, Kind, Target};
use crate::cluster::topology::{OUTSIDE_PORT, Topology};

/// The outside host as policies see it over IPv6.
fn outside6() -> Endpoint<'static> {
    Endpoint {
        ip: Topology::outside_ip6().into(),
        pod: None,
    }
}

/// The IPv6 checks of `targets` under `allows`.
pub fn plan(targets: &[Target], allows: &impl Fn(&Endpoint, &Endpoint, u16) -> bool) -> Vec<Check> {
    let outside: IpAddr = Topology::outside_ip6().into();
    let mut checks = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let Some(ip6) = t.ip6 else { continue };
        if t.is_underlay() || t.nat_outgoing || t.vpc != DEFAULT_VPC {
            continue;
        }
        let pod = t.endpoint_at(ip6);
        checks.push(Check {
            kind: Kind::OutsideToPod6,
            from: None,
            to: Some(i),
            path: "/clientip",
            expect: if t.announced && allows(&outside6(), &pod, t.port) {
                Expect::ClientIp(outside)
            } else {
                Expect::Blocked
            },
        });
        checks.push(Check {
            kind: Kind::PodToOutside6,
            from: Some(i),
            to: None,
            path: "/clientip",
            expect: if t.announced && allows(&pod, &outside6(), OUTSIDE_PORT) {
                Expect::ClientIp(ip6)
            } else {
                Expect::Blocked
            },
        });
    }
    checks
}
