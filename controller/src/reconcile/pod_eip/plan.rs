//! What a default-VPC pod's `ovn.kubernetes.io/eip` / `ovn.kubernetes.io/snat` annotations ask
//! for, whether the address may be given, and the northbound rows (pure).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::IpNet;
use kube_ovn_api::annotations::{IpRange, keys, parse};
use kube_ovn_ovsdb::tables::nb::{LogicalRouter, Nat};
use kube_ovn_ovsdb::{Atom, DbCache, Table, Uuid, Value};

use crate::ovn::owned::PolicySpec;
use crate::ovn::plan::is_owned_by;
use crate::ovn::priority::POLICY_NORTH_GATEWAY;
pub use crate::reconcile::ovn_nat::plan::NatRow;

/// `external_ids` key of our NAT rows and policy: the pod's key `<pod>.<ns>`.
pub const OWNER_KEY: &str = "pod_eip";

/// Which annotation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// `ovn.kubernetes.io/eip`: a `dnat_and_snat` row.
    Eip,
    /// `ovn.kubernetes.io/snat`: a `snat` row.
    Snat,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Eip, Kind::Snat];

    pub fn annotation(self) -> &'static str {
        match self {
            Kind::Eip => keys::EIP,
            Kind::Snat => keys::SNAT,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Eip => "eip",
            Kind::Snat => "snat",
        }
    }

    fn nat_type(self) -> &'static str {
        match self {
            Kind::Eip => "dnat_and_snat",
            Kind::Snat => "snat",
        }
    }

    /// The annotation a NAT row of ours was written for, by its type.
    pub fn of_nat_type(t: &str) -> Option<Self> {
        Kind::ALL.into_iter().find(|k| k.nat_type() == t)
    }

    /// The IPAM key the address is reserved under on the external subnet: `<kind>:<pod key>`
    /// (not the pod's own key, which IPAM releases in every subnet but the pod's).
    pub fn ipam_key(self, pod_key: &str) -> String {
        format!("{}:{pod_key}", self.as_str())
    }
}

/// The pod key of an IPAM key made by [`Kind::ipam_key`].
pub fn pod_key_of(ipam_key: &str) -> Option<&str> {
    Kind::ALL
        .iter()
        .find_map(|k| ipam_key.strip_prefix(k.as_str())?.strip_prefix(':'))
}

/// A refusal of tenant input: the annotation and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub annotation: &'static str,
    pub why: String,
}

impl Refusal {
    fn new(kind: Kind, why: impl Into<String>) -> Self {
        Self {
            annotation: kind.annotation(),
            why: why.into(),
        }
    }
}

/// The addresses the annotations ask for (absent or empty: none). IPv4 only.
pub fn wanted(annotations: &BTreeMap<String, String>) -> Result<Vec<(Kind, Ipv4Addr)>, Refusal> {
    let mut out: Vec<(Kind, Ipv4Addr)> = Vec::new();
    for kind in Kind::ALL {
        let Some(v) = annotations
            .get(kind.annotation())
            .map(|v| v.trim())
            .filter(|v| !v.is_empty())
        else {
            continue;
        };
        let ip: IpAddr = v
            .parse()
            .map_err(|_| Refusal::new(kind, format!("{v:?} is not an IP address")))?;
        let IpAddr::V4(ip) = ip else {
            return Err(Refusal::new(
                kind,
                format!("{v}: only IPv4 addresses are supported"),
            ));
        };
        out.push((kind, ip));
    }
    if let [(_, a), (_, b)] = out.as_slice()
        && a == b
    {
        return Err(Refusal::new(
            Kind::Snat,
            format!(
                "{b} is also the pod's {}: its dnat_and_snat already translates the pod's outgoing traffic",
                keys::EIP
            ),
        ));
    }
    Ok(out)
}

/// The external subnet and what else holds addresses on it, as the checks see them.
pub struct External<'a> {
    pub subnet: &'a str,
    pub cidrs: &'a [IpNet],
    pub gateways: &'a [IpAddr],
    /// `excludeIps`.
    pub exclude: &'a [String],
    /// `external-gw-addr`.
    pub gateway_addr: Option<IpAddr>,
    /// Addresses in use outside IPAM's view or before it has them: the nodes', the OvnEips'
    /// (by their objects: after a restart an lrp EIP is reserved again only when its VPC is
    /// reconciled), the router ports' (`nic-ip` is never in IPAM).
    pub in_use: &'a [IpAddr],
}

/// Whether `ip` may be given to the pod for `kind`. `holder` is who holds it in IPAM now
/// (anyone but the pod's own key for `kind` is a refusal). The message does not name the holder:
/// the Warning goes to the tenant, who is not to learn about others' objects.
pub fn check(
    kind: Kind,
    ip: Ipv4Addr,
    ext: &External<'_>,
    own_key: &str,
    holder: Option<&str>,
) -> Result<(), Refusal> {
    let addr = IpAddr::V4(ip);
    let refuse = |why: String| Err(Refusal::new(kind, format!("{ip}: {why}")));
    if !ext.cidrs.iter().any(|c| c.contains(&addr)) {
        let cidrs: Vec<String> = ext.cidrs.iter().map(ToString::to_string).collect();
        return refuse(format!(
            "not in the external subnet {} ({})",
            ext.subnet,
            cidrs.join(",")
        ));
    }
    if ext
        .cidrs
        .iter()
        .any(|c| c.network() == addr || c.broadcast() == addr)
    {
        return refuse(format!(
            "the network or broadcast address of subnet {}",
            ext.subnet
        ));
    }
    if ext.gateways.contains(&addr) || ext.gateway_addr == Some(addr) {
        return refuse(format!("the gateway of the external subnet {}", ext.subnet));
    }
    let excluded = ext
        .exclude
        .iter()
        .filter_map(|r| parse::<IpRange>("excludeIps", r).ok())
        .any(|r| r.contains(&addr));
    if excluded {
        return refuse(format!(
            "excluded in the external subnet {} (spec.excludeIps)",
            ext.subnet
        ));
    }
    if ext.in_use.contains(&addr) {
        return refuse("already in use".into());
    }
    match holder {
        Some(h) if h != own_key => refuse("already in use".into()),
        _ => Ok(()),
    }
}

/// The pod's NAT rows (Kube-OVN's `UpdateDnatAndSnat` / `EnsureSnat`), as the OVN NAT rules'
/// builder takes them ([`crate::reconcile::ovn_nat::plan::NatRow`]): `eip` → `dnat_and_snat`
/// (with `logical_port`, `external_mac` and `options:stateless=true` when the ConfigMap's `type`
/// is distributed, so the pod's own chassis does the NAT), `snat` → `snat`.
pub fn nat_rows(
    pod_key: &str,
    pod_ip: Ipv4Addr,
    pod_mac: &str,
    distributed: bool,
    wanted: &[(Kind, Ipv4Addr)],
) -> Vec<NatRow> {
    wanted
        .iter()
        .map(|(kind, ext)| {
            let spread = distributed && *kind == Kind::Eip;
            NatRow {
                kind: kind.nat_type(),
                external_ip: ext.to_string(),
                logical_ip: pod_ip.to_string(),
                logical_port: spread.then(|| pod_key.to_owned()),
                external_mac: spread.then(|| pod_mac.to_owned()),
                stateless: spread,
            }
        })
        .collect()
}

/// The policy sending the pod's traffic to the external gateway (Kube-OVN's 29250 reroute).
pub fn policy(pod_ip: Ipv4Addr, nexthop: IpAddr) -> PolicySpec {
    PolicySpec {
        priority: POLICY_NORTH_GATEWAY,
        r#match: format!("ip4.src == {pod_ip}"),
        action: "reroute".into(),
        nexthops: vec![nexthop.to_string()],
    }
}

/// Our NAT rows on `router` (of `pod_key` when given, else every pod's).
pub fn owned_nats(cache: &DbCache, router: &str, pod_key: Option<&str>) -> Vec<Nat> {
    let Some(r) = cache.uuids_by_name(LogicalRouter::NAME, router).first().copied() else {
        return Vec::new();
    };
    let members: Vec<Uuid> = match cache.row(LogicalRouter::NAME, &r).and_then(|row| row.get("nat")) {
        Some(Value::Set(s)) => s
            .iter()
            .filter_map(|a| match a {
                Atom::Uuid(u) => Some(*u),
                _ => None,
            })
            .collect(),
        Some(Value::Atom(Atom::Uuid(u))) => vec![*u],
        _ => Vec::new(),
    };
    members
        .iter()
        .filter_map(|u| cache.get::<Nat>(u).ok().flatten())
        .filter(|n| match pod_key {
            Some(k) => is_owned_by(&n.external_ids, &[(OWNER_KEY, k)]),
            None => is_owned_by(&n.external_ids, &[]) && n.external_ids.contains_key(OWNER_KEY),
        })
        .collect()
}

#[cfg(test)]
mod tests;
