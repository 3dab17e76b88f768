//! Pure refusals of OVN NAT input (plan §3.0.7): every check a rule passes before anything is
//! written, each a [`Refusal`] naming `Kind name`, the field, and Kube-OVN's message where
//! Kube-OVN has one. A refused rule changes nothing in the northbound database; a rule already
//! applied keeps its rows (Kube-OVN's "not support change …").

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;
use kube_ovn_api::crd::ovn_nat::{NatKind, OvnEipType};

/// Condition/event reasons (plan §3.7).
pub const EIP_NOT_FOUND: &str = "EipNotFound";
pub const EIP_NOT_READY: &str = "EipNotReady";
pub const EIP_TYPE_LSP: &str = "EipTypeLsp";
pub const EIP_USED_BY_OTHER_FIP: &str = "EipUsedByOtherFip";
pub const EIP_USED_BY_OTHER_VPC: &str = "EipUsedByOtherVpc";
pub const DISTRIBUTED_FIP_EIP_SHARED: &str = "DistributedFipEipShared";
pub const IP_NOT_FOUND: &str = "IpNotFound";
pub const VPC_MISMATCH: &str = "VpcMismatch";
pub const EXTERNAL_PORT_CONFLICT: &str = "ExternalPortConflict";
pub const INVALID_PORT: &str = "InvalidPort";
pub const INVALID_PROTOCOL: &str = "InvalidProtocol";
pub const INVALID_SPEC: &str = "InvalidSpec";
pub const CHANGE_NOT_SUPPORTED: &str = "ChangeNotSupported";

/// Why a rule (or EIP) is not applied: a condition reason and a message naming the object and
/// the field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// `Kind name: spec.field: why`.
pub fn refuse(
    reason: &'static str,
    kind: &str,
    name: &str,
    field: &str,
    why: impl std::fmt::Display,
) -> Refusal {
    Refusal {
        reason,
        message: format!("{kind} {name}: spec.{field}: {why}"),
    }
}

/// What a rule needs to know of its OvnEip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EipFacts {
    pub name: String,
    pub type_: OvnEipType,
    pub v4: Option<Ipv4Addr>,
    pub v6: Option<Ipv6Addr>,
    pub ready: bool,
    /// Being deleted: no new rule may take it (it would hold the deletion).
    pub deleting: bool,
}

/// The EIP a rule names, usable by it: exists, has an address, is ready, is not `lsp`
/// (Kube-OVN's "eip '%s' is not ready, has no ip", "ovn nat %s can not use type lsp eip %s").
/// A rule already applied keeps a deleting EIP (its deletion waits for the rule); a new one may
/// not take it.
pub fn usable_eip<'a>(
    kind: &str,
    rule: &str,
    named: &str,
    eip: Option<&'a EipFacts>,
    applied: bool,
) -> Result<&'a EipFacts, Refusal> {
    if named.is_empty() {
        return Err(refuse(
            EIP_NOT_FOUND,
            kind,
            rule,
            "ovnEip",
            "should set spec ovnEip",
        ));
    }
    let Some(eip) = eip else {
        return Err(refuse(
            EIP_NOT_FOUND,
            kind,
            rule,
            "ovnEip",
            format_args!("OvnEip {named} not found"),
        ));
    };
    if eip.type_ == OvnEipType::Lsp {
        return Err(refuse(
            EIP_TYPE_LSP,
            kind,
            rule,
            "ovnEip",
            format_args!("ovn nat {rule} can not use type lsp eip {named}"),
        ));
    }
    if eip.deleting && !applied {
        return Err(refuse(
            EIP_NOT_READY,
            kind,
            rule,
            "ovnEip",
            format_args!("OvnEip {named} is being deleted"),
        ));
    }
    if eip.v4.is_none() && eip.v6.is_none() || !eip.ready {
        return Err(refuse(
            EIP_NOT_READY,
            kind,
            rule,
            "ovnEip",
            format_args!("eip '{named}' is not ready, has no ip"),
        ));
    }
    Ok(eip)
}

/// The internal side of a rule, resolved from its `ipName` (IP or Vip CR), subnet or CIDRs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Internal {
    pub vpc: String,
    /// Addresses (FIP, DNAT) or CIDRs (SNAT) per family.
    pub v4: Option<String>,
    pub v6: Option<String>,
    /// The IP CR's MAC and port (`ipType: ip`): what makes a FIP distributed.
    pub mac: Option<String>,
    pub port: Option<String>,
    /// The pod's node (IP CR `spec.nodeName`).
    pub node: Option<String>,
}

/// A rule's claim on an EIP, as the other rules see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub kind: NatKind,
    pub name: String,
    pub vpc: String,
    /// A FIP with `external_mac`/`logical_port`: OVN answers for the EIP on the pod's chassis.
    pub distributed: bool,
    /// Applied (`status.ready`).
    pub ready: bool,
}

/// Whether `me` may share its EIP with `others` (the other rules naming it; applied ones, and
/// for FIPs the older ones not yet applied): one FIP per EIP (Kube-OVN's "%s is used by the
/// other fip %s"), one VPC per EIP, and a distributed FIP alone on its EIP (ours: OVN would
/// answer ARP for the address on the pod's chassis and on the gateway chassis).
pub fn may_share(me: &Claim, eip: &str, others: &[Claim]) -> Result<(), Refusal> {
    let kind = kind_name(me.kind);
    if me.kind == NatKind::Fip
        && let Some(o) = others.iter().find(|o| o.kind == NatKind::Fip)
    {
        return Err(refuse(
            EIP_USED_BY_OTHER_FIP,
            kind,
            &me.name,
            "ovnEip",
            format_args!("{eip} is used by the other fip {}", o.name),
        ));
    }
    let applied: Vec<&Claim> = others.iter().filter(|o| o.ready).collect();
    if let Some(o) = applied.iter().find(|o| o.vpc != me.vpc) {
        return Err(refuse(
            EIP_USED_BY_OTHER_VPC,
            kind,
            &me.name,
            "ovnEip",
            format_args!(
                "OvnEip {eip} is used by {} {} in VPC {}, not in VPC {}",
                kind_name(o.kind),
                o.name,
                o.vpc,
                me.vpc
            ),
        ));
    }
    let distributed = applied.iter().find(|o| o.distributed);
    if let Some(o) = applied.first().filter(|_| me.distributed).or(distributed) {
        return Err(refuse(
            DISTRIBUTED_FIP_EIP_SHARED,
            kind,
            &me.name,
            "ovnEip",
            format_args!(
                "OvnEip {eip} is used by {} {}; a distributed OvnFip's EIP cannot be shared",
                kind_name(o.kind),
                o.name
            ),
        ));
    }
    Ok(())
}

pub const fn kind_name(kind: NatKind) -> &'static str {
    match kind {
        NatKind::Dnat => "OvnDnatRule",
        NatKind::Fip => "OvnFip",
        NatKind::Snat => "OvnSnatRule",
    }
}

/// `spec.vpc`, when given, must be the VPC of the internal address (ours: Kube-OVN ignores it
/// once `ipName` is set, and would put the NAT on the IP's VPC silently).
pub fn vpc_agrees(
    kind: &str,
    rule: &str,
    spec_vpc: Option<&str>,
    internal: &Internal,
) -> Result<(), Refusal> {
    match spec_vpc.filter(|v| !v.is_empty()) {
        Some(v) if v != internal.vpc => Err(refuse(
            VPC_MISMATCH,
            kind,
            rule,
            "vpc",
            format_args!("VPC {v} is not the VPC {} of the internal address", internal.vpc),
        )),
        _ => Ok(()),
    }
}

/// An address of `spec.<field>` (one IP), or a refusal naming it.
pub fn parse_ip(kind: &str, rule: &str, field: &str, value: &str) -> Result<IpAddr, Refusal> {
    value.trim().parse::<IpAddr>().map_err(|_| {
        refuse(
            INVALID_SPEC,
            kind,
            rule,
            field,
            format_args!("spec {field} {value} is not a valid"),
        )
    })
}

/// A CIDR (or a plain address, taken as a host route) of `spec.<field>`.
pub fn parse_cidr(kind: &str, rule: &str, field: &str, value: &str) -> Result<IpNet, Refusal> {
    let v = value.trim();
    v.parse::<IpNet>()
        .or_else(|_| v.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            refuse(
                INVALID_SPEC,
                kind,
                rule,
                field,
                format_args!("{value:?} is not a CIDR"),
            )
        })
}

/// A port of `spec.<field>`: 1–65535 (Kube-OVN's "spec externalPort %s is not a valid port").
pub fn parse_port(kind: &str, rule: &str, field: &str, value: Option<&str>) -> Result<u16, Refusal> {
    let v = value.unwrap_or_default();
    v.trim().parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| {
        refuse(
            INVALID_PORT,
            kind,
            rule,
            field,
            format_args!("spec {field} {v} is not a valid port"),
        )
    })
}

/// `spec.protocol`: `tcp` or `udp` (empty: `tcp`), Kube-OVN's "invalid dnat protocol: %s, support
/// tcp or udp".
pub fn parse_protocol(rule: &str, value: Option<&str>) -> Result<&'static str, Refusal> {
    match value.unwrap_or_default().trim() {
        "" | "tcp" => Ok("tcp"),
        "udp" => Ok("udp"),
        other => Err(refuse(
            INVALID_PROTOCOL,
            "OvnDnatRule",
            rule,
            "protocol",
            format_args!("invalid dnat protocol: {other}, support tcp or udp"),
        )),
    }
}

/// Whether an address lies in one of the subnet's CIDRs (`cidrBlock`, comma-separated).
pub fn in_cidr_block(cidr_block: &str, ip: IpAddr) -> bool {
    cidr_block
        .split(',')
        .filter_map(|c| c.trim().parse::<IpNet>().ok())
        .any(|n| n.contains(&ip))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eip(type_: OvnEipType, ready: bool) -> EipFacts {
        EipFacts {
            name: "e1".into(),
            type_,
            v4: Some("10.200.0.10".parse().unwrap()),
            v6: None,
            ready,
            deleting: false,
        }
    }

    fn claim(kind: NatKind, name: &str, vpc: &str, distributed: bool, ready: bool) -> Claim {
        Claim {
            kind,
            name: name.into(),
            vpc: vpc.into(),
            distributed,
            ready,
        }
    }

    #[test]
    fn an_eip_must_exist_be_ready_and_not_lsp() {
        let e = usable_eip("OvnFip", "f1", "e1", None, false).unwrap_err();
        assert_eq!(e.reason, EIP_NOT_FOUND);
        assert!(e.message.starts_with("OvnFip f1: spec.ovnEip: "), "{e}");
        let lsp = eip(OvnEipType::Lsp, true);
        let e = usable_eip("OvnFip", "f1", "e1", Some(&lsp), false).unwrap_err();
        assert_eq!(
            e.message,
            "OvnFip f1: spec.ovnEip: ovn nat f1 can not use type lsp eip e1"
        );
        let unready = eip(OvnEipType::Nat, false);
        let e = usable_eip("OvnSnatRule", "s1", "e1", Some(&unready), false).unwrap_err();
        assert_eq!(e.reason, EIP_NOT_READY);
        assert!(e.message.contains("eip 'e1' is not ready, has no ip"), "{e}");
        let mut deleting = eip(OvnEipType::Nat, true);
        deleting.deleting = true;
        let e = usable_eip("OvnFip", "f1", "e1", Some(&deleting), false).unwrap_err();
        assert!(e.message.ends_with("OvnEip e1 is being deleted"), "{e}");
        assert!(
            usable_eip("OvnFip", "f1", "e1", Some(&deleting), true).is_ok(),
            "an applied rule keeps it: the deletion waits for the rule"
        );
        let good = eip(OvnEipType::Lrp, true);
        assert!(usable_eip("OvnSnatRule", "s1", "e1", Some(&good), false).is_ok());
        assert_eq!(
            usable_eip("OvnFip", "f1", "", Some(&good), false)
                .unwrap_err()
                .reason,
            EIP_NOT_FOUND,
            "should set spec ovnEip"
        );
    }

    #[test]
    fn sharing_rules() {
        let snat = claim(NatKind::Snat, "s1", "vpc1", false, true);
        let dnat = claim(NatKind::Dnat, "d1", "vpc1", false, true);
        let vip_fip = claim(NatKind::Fip, "f1", "vpc1", false, false);
        // Kube-OVN's e2e 1.1: the lrp EIP shared by SNAT, DNAT and a (centralized) vip FIP.
        assert_eq!(may_share(&vip_fip, "e1", &[snat.clone(), dnat.clone()]), Ok(()));
        let second = claim(NatKind::Fip, "f2", "vpc1", false, false);
        let e = may_share(&second, "e1", std::slice::from_ref(&vip_fip)).unwrap_err();
        assert_eq!(
            (e.reason, e.message.as_str()),
            (
                EIP_USED_BY_OTHER_FIP,
                "OvnFip f2: spec.ovnEip: e1 is used by the other fip f1"
            )
        );
        let other_vpc = claim(NatKind::Snat, "s2", "vpc2", false, false);
        let e = may_share(&other_vpc, "e1", std::slice::from_ref(&snat)).unwrap_err();
        assert_eq!(e.reason, EIP_USED_BY_OTHER_VPC);
        assert!(e.message.contains("OvnSnatRule s1 in VPC vpc1"), "{e}");
        let distributed = claim(NatKind::Fip, "f3", "vpc1", true, false);
        let e = may_share(&distributed, "e1", std::slice::from_ref(&snat)).unwrap_err();
        assert_eq!(e.reason, DISTRIBUTED_FIP_EIP_SHARED);
        let applied_distributed = claim(NatKind::Fip, "f3", "vpc1", true, true);
        let e = may_share(&snat, "e1", std::slice::from_ref(&applied_distributed)).unwrap_err();
        assert_eq!(e.reason, DISTRIBUTED_FIP_EIP_SHARED);
        assert!(e.message.contains("OvnFip f3"), "{e}");
        assert_eq!(may_share(&distributed, "e1", &[]), Ok(()));
    }

    #[test]
    fn fields_are_named() {
        let e = parse_port("OvnDnatRule", "d1", "externalPort", Some("0")).unwrap_err();
        assert_eq!(
            e.message,
            "OvnDnatRule d1: spec.externalPort: spec externalPort 0 is not a valid port"
        );
        assert_eq!(
            parse_port("OvnDnatRule", "d1", "internalPort", Some("8080")),
            Ok(8080)
        );
        assert_eq!(parse_protocol("d1", None), Ok("tcp"));
        assert_eq!(
            parse_protocol("d1", Some("sctp")).unwrap_err().reason,
            INVALID_PROTOCOL
        );
        let internal = Internal {
            vpc: "vpc1".into(),
            ..Internal::default()
        };
        assert!(vpc_agrees("OvnFip", "f1", Some("vpc1"), &internal).is_ok());
        assert!(vpc_agrees("OvnFip", "f1", None, &internal).is_ok());
        let e = vpc_agrees("OvnFip", "f1", Some("vpc2"), &internal).unwrap_err();
        assert_eq!(e.reason, VPC_MISMATCH);
        assert!(e.message.starts_with("OvnFip f1: spec.vpc: "), "{e}");
        assert!(in_cidr_block(
            "10.200.0.0/24,fd00::/120",
            "fd00::5".parse().unwrap()
        ));
        assert!(!in_cidr_block("10.200.0.0/24", "10.201.0.5".parse().unwrap()));
        assert_eq!(
            parse_cidr("OvnSnatRule", "s1", "v4IpCidr", "10.1.0.5")
                .unwrap()
                .to_string(),
            "10.1.0.5/32"
        );
    }
}
