//! A custom VPC's way to the outside through OVN's own NAT (Kube-OVN's OvnFip, OvnSnatRule and
//! OvnDnatRule on a VPC with `enableExternal`), as the matrix expects it:
//! - pod → outside: a pod with a FIP leaves with the FIP's address (OVN prefers a pod's
//!   `dnat_and_snat` over any `snat`); else with the address of the most specific SNAT rule of its
//!   VPC that covers it (OVN orders `snat` rows by prefix length); else it has no way out.
//! - outside → FIP: the pod answers on its own ports at the FIP's address and sees the outside
//!   host's own address (a FIP translates the destination only, on the way in).
//! - outside → a DNAT rule's address and external port: the pod behind it answers, when the rule's
//!   internal port is the port its server listens on.
//!
//! The rules come from their specs (what the user asked for), the addresses from the EIPs' specs or
//! statuses: a controller that does not act on them shows as failed checks, not as fewer checks.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{Check, Expect, Kind, Target, outside};

/// A floating IP: the outside reaches pod `namespace/pod` at `eip`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fip {
    pub name: String,
    pub eip: IpAddr,
    pub namespace: String,
    pub pod: String,
}

/// Source NAT of `cidr` in `vpc` to `eip`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snat {
    pub name: String,
    pub eip: IpAddr,
    pub vpc: String,
    pub cidr: IpNet,
}

/// A port forward: `eip:external_port` (TCP) to `namespace/pod:internal_port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dnat {
    pub name: String,
    pub eip: IpAddr,
    pub external_port: u16,
    pub namespace: String,
    pub pod: String,
    pub internal_port: u16,
}

/// The NAT rules of VPCs with `enableExternal`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatRules {
    pub fips: Vec<Fip>,
    pub snats: Vec<Snat>,
    pub dnats: Vec<Dnat>,
}

/// An external address the outside host probes: a FIP or a DNAT rule's, with the pod behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EipTarget {
    /// `fip <name>` or `dnat <name>`.
    pub label: String,
    pub ip: IpAddr,
    pub port: u16,
    /// Index of the pod behind it in the targets.
    pub backend: usize,
    /// A DNAT rule whose internal port is not the pod's server's: nobody answers.
    pub listening: bool,
    pub kind: EipUse,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EipUse {
    Fip,
    Dnat,
}

impl NatRules {
    fn pod_index(targets: &[Target], namespace: &str, pod: &str) -> Option<usize> {
        targets
            .iter()
            .position(|t| t.namespace == namespace && t.name == pod)
    }

    /// The address pod `t` leaves its VPC with, if any (see the module's doc).
    pub fn egress(&self, t: &Target) -> Option<IpAddr> {
        if let Some(fip) = self
            .fips
            .iter()
            .find(|f| f.namespace == t.namespace && f.pod == t.name)
        {
            return Some(fip.eip);
        }
        self.snats
            .iter()
            .filter(|s| s.vpc == t.vpc && s.cidr.contains(&t.ip))
            .max_by_key(|s| s.cidr.prefix_len())
            .map(|s| s.eip)
    }

    /// The FIPs and DNAT addresses whose pods are among `targets`.
    pub fn eip_targets(&self, targets: &[Target]) -> Vec<EipTarget> {
        let fips = self.fips.iter().filter_map(|f| {
            let backend = Self::pod_index(targets, &f.namespace, &f.pod)?;
            Some(EipTarget {
                label: format!("fip {}", f.name),
                ip: f.eip,
                port: targets[backend].port,
                backend,
                listening: true,
                kind: EipUse::Fip,
            })
        });
        let dnats = self.dnats.iter().filter_map(|d| {
            let backend = Self::pod_index(targets, &d.namespace, &d.pod)?;
            Some(EipTarget {
                label: format!("dnat {}", d.name),
                ip: d.eip,
                port: d.external_port,
                backend,
                listening: d.internal_port == targets[backend].port,
                kind: EipUse::Dnat,
            })
        });
        fips.chain(dnats).collect()
    }
}

/// The outside host's checks of `eips` (`to` indexes them), under `allows` (the pod's policies
/// judge the outside host's own address: neither a FIP nor a DNAT rule changes the source).
pub fn plan(
    targets: &[Target],
    eips: &[EipTarget],
    allows: &impl Fn(&super::Endpoint, &super::Endpoint, u16) -> bool,
) -> Vec<Check> {
    let outside_ip: IpAddr = super::super::topology::Topology::outside_ip().into();
    eips.iter()
        .enumerate()
        .map(|(k, eip)| {
            let pod = &targets[eip.backend];
            let allowed = eip.listening && allows(&outside(), &pod.endpoint(), pod.port);
            let (path, expect) = match (allowed, eip.kind) {
                (false, _) => ("/hostname", Expect::Blocked),
                (true, EipUse::Fip) => ("/clientip", Expect::ClientIp(outside_ip)),
                (true, EipUse::Dnat) => ("/hostname", Expect::Answer(pod.name.clone())),
            };
            Check {
                kind: Kind::OutsideToEip,
                from: None,
                to: Some(k),
                path,
                expect,
            }
        })
        .collect()
}
