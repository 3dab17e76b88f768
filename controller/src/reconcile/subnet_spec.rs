//! A subnet's spec after Kube-OVN's defaulting.
//!
//! Kube-OVN normalises a subnet's spec in the controller (its `formatSubnet`), not with CRD
//! defaults: protocol from the CIDR, gateway = first usable address, the gateway added to
//! `excludeIps`, `provider: ovn`, `vpc: ovn-cluster`, and in the default VPC `gatewayType:
//! distributed`. We do the same and write the result back, so `kubectl get subnet` shows what is
//! in effect.
//!
//! Pure: no I/O.

use std::net::IpAddr;

use ipnet::IpNet;
use kube::ResourceExt;
use kube_ovn_api::annotations::{IpRange, parse};
use kube_ovn_api::crd::Subnet;
use serde_json::json;

use crate::error::{Error, Result};
use crate::ipam::{Family, SubnetConfig};

/// A subnet's spec after Kube-OVN's defaulting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub cidrs: Vec<IpNet>,
    pub gateways: Vec<IpAddr>,
    pub exclude_ips: Vec<String>,
    pub protocol: &'static str,
    pub provider: String,
    pub vpc: String,
    pub gateway_type: String,
}

impl Effective {
    pub fn cidr_block(&self) -> String {
        crate::config::comma_joined(&self.cidrs)
    }

    pub fn gateway(&self) -> String {
        crate::config::comma_joined(&self.gateways)
    }

    pub fn ipam_config(&self) -> Result<SubnetConfig> {
        let exclude_ips = self
            .exclude_ips
            .iter()
            .map(|e| parse::<IpRange>("spec.excludeIps", e))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(SubnetConfig {
            cidrs: self.cidrs.clone(),
            gateways: self.gateways.clone(),
            exclude_ips,
        })
    }

    /// `gateway/prefix` per family: the router port's networks.
    pub fn router_networks(&self) -> Vec<String> {
        self.cidrs
            .iter()
            .zip(&self.gateways)
            .map(|(c, g)| format!("{g}/{}", c.prefix_len()))
            .collect()
    }
}

fn family(ip: &IpAddr) -> Family {
    Family::of(ip)
}

/// Applies Kube-OVN's defaulting to a subnet; errors name the field.
pub fn effective(subnet: &Subnet, cluster_router: &str) -> Result<Effective> {
    let spec = &subnet.spec;
    let name = subnet.name_any();
    let bad = |field: &str, why: String| Error::Invalid(format!("subnet {name}: spec.{field}: {why}"));
    let block = spec
        .cidr_block
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| bad("cidrBlock", "is required".into()))?;
    let mut cidrs: Vec<IpNet> = Vec::new();
    for part in block.split(',') {
        let net: IpNet = part
            .trim()
            .parse()
            .map_err(|e| bad("cidrBlock", format!("{part:?} is not a CIDR: {e}")))?;
        if cidrs
            .iter()
            .any(|c| c.network().is_ipv4() == net.network().is_ipv4())
        {
            return Err(bad("cidrBlock", format!("{block:?} has two CIDRs of one family")));
        }
        cidrs.push(net.trunc());
    }
    // IPv4 first, as Kube-OVN writes dual-stack values.
    cidrs.sort_by_key(|c| !c.network().is_ipv4());
    let mut gateways: Vec<IpAddr> = Vec::new();
    for g in spec
        .gateway
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
    {
        let ip: IpAddr = g
            .parse()
            .map_err(|_| bad("gateway", format!("{g:?} is not an IP address")))?;
        if !cidrs.iter().any(|c| c.contains(&ip)) {
            return Err(bad("gateway", format!("{ip} is outside {block}")));
        }
        gateways.push(ip);
    }
    let mut ordered = Vec::new();
    for c in &cidrs {
        let g = match gateways.iter().find(|g| family(g) == family(&c.network())) {
            Some(g) => *g,
            None => first_usable(c).ok_or_else(|| bad("cidrBlock", format!("{c} has no usable address")))?,
        };
        ordered.push(g);
    }
    let mut exclude_ips = spec.exclude_ips.clone().unwrap_or_default();
    for e in &exclude_ips {
        parse::<IpRange>("spec.excludeIps", e).map_err(|err| bad("excludeIps", err.to_string()))?;
    }
    for g in &ordered {
        let covered = exclude_ips
            .iter()
            .filter_map(|e| parse::<IpRange>("x", e).ok())
            .any(|r| r.contains(g));
        if !covered {
            exclude_ips.push(g.to_string());
        }
    }
    let protocol = match (
        cidrs.iter().any(|c| c.network().is_ipv4()),
        cidrs.iter().any(|c| !c.network().is_ipv4()),
    ) {
        (true, true) => "Dual",
        (false, true) => "IPv6",
        _ => "IPv4",
    };
    let vpc = spec
        .vpc
        .clone()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| cluster_router.to_owned());
    // Gateway types mean something only in the default VPC (a custom VPC has no join subnet and
    // no node gateways), so Kube-OVN defaults and checks them only there.
    let mut gateway_type = spec.gateway_type.clone().unwrap_or_default();
    if vpc == cluster_router {
        if gateway_type.is_empty() {
            gateway_type = "distributed".into();
        }
        if !matches!(gateway_type.as_str(), "distributed" | "centralized") {
            return Err(bad(
                "gatewayType",
                format!("{gateway_type:?} is neither distributed nor centralized"),
            ));
        }
    }
    Ok(Effective {
        cidrs,
        gateways: ordered,
        exclude_ips,
        protocol,
        provider: spec
            .provider
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| "ovn".into()),
        vpc,
        gateway_type,
    })
}

/// The first address after the network address, Kube-OVN's default gateway (`fd00:10:16::1` for
/// `fd00:10:16::/64`). ipnet's `hosts()` starts IPv6 networks at the network address itself (the
/// subnet-router anycast address), so it is not used for IPv6; /31, /32, /127 and /128 have no
/// network address to skip.
fn first_usable(c: &IpNet) -> Option<IpAddr> {
    match c {
        IpNet::V4(n) => n.hosts().next().map(IpAddr::V4),
        IpNet::V6(n) if n.prefix_len() >= 127 => Some(IpAddr::V6(n.network())),
        IpNet::V6(n) => n.hosts().nth(1).map(IpAddr::V6),
    }
}

/// The spec fields defaulting changed, as a merge patch; `None` when the spec is already normal.
pub fn spec_patch(subnet: &Subnet, eff: &Effective) -> Option<serde_json::Value> {
    let s = &subnet.spec;
    let mut patch = serde_json::Map::new();
    let mut set = |k: &str, v: serde_json::Value| {
        patch.insert(k.to_owned(), v);
    };
    if s.cidr_block.as_deref() != Some(eff.cidr_block().as_str()) {
        set("cidrBlock", json!(eff.cidr_block()));
    }
    if s.gateway.as_deref() != Some(eff.gateway().as_str()) {
        set("gateway", json!(eff.gateway()));
    }
    if s.exclude_ips.as_ref() != Some(&eff.exclude_ips) {
        set("excludeIps", json!(eff.exclude_ips));
    }
    if s.protocol.as_deref() != Some(eff.protocol) {
        set("protocol", json!(eff.protocol));
    }
    if s.provider.as_deref() != Some(eff.provider.as_str()) {
        set("provider", json!(eff.provider));
    }
    if s.vpc.as_deref() != Some(eff.vpc.as_str()) {
        set("vpc", json!(eff.vpc));
    }
    if !eff.gateway_type.is_empty() && s.gateway_type.as_deref() != Some(eff.gateway_type.as_str()) {
        set("gatewayType", json!(eff.gateway_type));
    }
    (!patch.is_empty()).then(|| json!({"spec": patch}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(cidr: &str) -> Effective {
        let s: Subnet =
            serde_json::from_value(json!({"metadata": {"name": "s"}, "spec": {"cidrBlock": cidr}})).unwrap();
        effective(&s, "ovn-cluster").unwrap()
    }

    #[test]
    fn default_gateway_is_the_first_address_after_the_network_in_both_families() {
        assert_eq!(spec("10.16.0.0/16").gateway(), "10.16.0.1");
        assert_eq!(spec("fd00:10:16::/64").gateway(), "fd00:10:16::1");
        assert_eq!(
            spec("fd00:10:16::/64,10.16.0.0/16").gateway(),
            "10.16.0.1,fd00:10:16::1"
        );
        assert_eq!(spec("10.0.0.4/31").gateway(), "10.0.0.4");
        assert_eq!(spec("fd00::4/127").gateway(), "fd00::4");
        assert_eq!(spec("fd00::/64").exclude_ips, ["fd00::1"]);
    }
}
