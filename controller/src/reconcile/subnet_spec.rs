//! A subnet's spec after Kube-OVN's defaulting.
//!
//! Kube-OVN normalises a subnet's spec in the controller (its `formatSubnet`), not with CRD
//! defaults: protocol from the CIDR, gateway = first usable address, the gateway added to
//! `excludeIps`, `provider: ovn`, `vpc: ovn-cluster`, and in the default VPC `gatewayType:
//! distributed`. We do the same and write the result back, so `kubectl get subnet` shows what is
//! in effect.
//!
//! Underlay subnets (`vlan`) are checked here as Kube-OVN's `ValidateSubnet` does
//! (`logicalGateway` with `u2oInterconnection`, `u2oInterconnectionIP` inside the CIDR and not the
//! gateway), and normalised as its `formatSubnet` does: `u2oInterconnectionIP` cleared while U2O is
//! off, `u2oInterconnection` cleared on an overlay subnet.
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
    /// Set for an underlay subnet (`spec.vlan`).
    pub underlay: Option<Underlay>,
}

/// What makes a subnet an underlay one: its Vlan and how it meets the VPC router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Underlay {
    /// `spec.vlan`: the Vlan CR, which names the VLAN ID and the ProviderNetwork.
    pub vlan: String,
    /// `spec.logicalGateway`: OVN's router stays the pods' gateway.
    pub logical_gateway: bool,
    /// `spec.u2oInterconnection`: the VPC router joins the subnet on its own address, so
    /// underlay and overlay pods reach each other.
    pub u2o: bool,
    /// `spec.u2oInterconnectionIP`, one per family (only with `u2o`): the router port's address
    /// asked for; IPAM picks one otherwise.
    pub u2o_ips: Vec<IpAddr>,
    /// `spec.u2oFeatures.overlayOnlyRouting` (only with `u2o`): only the VPC's overlay CIDRs go
    /// through the router; everything else the subnet sends leaves through its physical gateway.
    pub overlay_only: bool,
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

    /// Whether the subnet's switch is patched to the VPC router. Kube-OVN's `needRouter`: an
    /// underlay subnet's gateway is the physical router, unless `logicalGateway` keeps OVN's or
    /// U2O attaches the router on its own address.
    pub fn needs_router(&self) -> bool {
        self.underlay.as_ref().is_none_or(|u| u.logical_gateway || u.u2o)
    }

    /// An underlay subnet whose gateway is the physical router (no `logicalGateway`): no
    /// gateway policies, node reroutes or NAT for it.
    pub fn physical_gateway(&self) -> bool {
        self.underlay.as_ref().is_some_and(|u| !u.logical_gateway)
    }

    /// An underlay subnet with U2O interconnection.
    pub fn u2o(&self) -> bool {
        self.underlay.as_ref().is_some_and(|u| u.u2o)
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
    let underlay = underlay(subnet, &cidrs, &ordered)?;
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
        underlay,
    })
}

/// The underlay part of a subnet, with Kube-OVN's checks (`pkg/util/validator.go
/// ValidateSubnet`, its messages kept). `u2oInterconnection` on an overlay subnet is ignored here
/// and cleared by [`spec_patch`], as Kube-OVN's `formatSubnet` does.
fn underlay(subnet: &Subnet, cidrs: &[IpNet], gateways: &[IpAddr]) -> Result<Option<Underlay>> {
    let spec = &subnet.spec;
    let name = subnet.name_any();
    let bad = |field: &str, why: String| Error::Invalid(format!("subnet {name}: spec.{field}: {why}"));
    let Some(vlan) = spec.vlan.clone().filter(|v| !v.is_empty()) else {
        overlay_only_routing(subnet)?;
        return Ok(None);
    };
    let logical_gateway = spec.logical_gateway == Some(true);
    let u2o = spec.u2o_interconnection == Some(true);
    if logical_gateway && u2o {
        return Err(bad(
            "u2oInterconnection",
            "logicalGateway and u2oInterconnection can't be opened at the same time".into(),
        ));
    }
    let overlay_only = overlay_only_routing(subnet)?;
    let mut u2o_ips = Vec::new();
    let asked = spec.u2o_interconnection_ip.as_deref().unwrap_or_default();
    if u2o && !asked.is_empty() {
        let field = "u2oInterconnectionIP";
        if asked.chars().any(|c| c.is_ascii_uppercase()) {
            return Err(bad(
                field,
                format!(
                    "subnet {name} U2O interconnection ip {asked} v6 ip address can not contain upper case"
                ),
            ));
        }
        let block = crate::config::comma_joined(cidrs);
        for part in asked.split(',').map(str::trim) {
            let ip: IpAddr = part
                .parse()
                .map_err(|_| bad(field, format!("{part:?} is not an IP address")))?;
            if !cidrs.iter().any(|c| c.contains(&ip)) {
                return Err(bad(
                    field,
                    format!("u2oInterconnectionIP {asked} is not in subnet {name} cidr {block}"),
                ));
            }
            if gateways.contains(&ip) {
                let gw = crate::config::comma_joined(gateways);
                return Err(bad(
                    field,
                    format!("u2oInterconnectionIP {asked} conflicts with subnet gateway {gw}"),
                ));
            }
            if u2o_ips.iter().any(|o: &IpAddr| o.is_ipv4() == ip.is_ipv4()) {
                return Err(bad(field, format!("{asked:?} has two addresses of one family")));
            }
            u2o_ips.push(ip);
        }
    }
    Ok(Some(Underlay {
        vlan,
        logical_gateway,
        u2o,
        u2o_ips,
        overlay_only,
    }))
}

/// `u2oFeatures.overlayOnlyRouting`, with Kube-OVN's checks and messages (`ValidateSubnet`): it
/// needs `u2oInterconnection`, and a Vlan.
fn overlay_only_routing(subnet: &Subnet) -> Result<bool> {
    let spec = &subnet.spec;
    if spec.u2o_features.as_ref().and_then(|f| f.overlay_only_routing) != Some(true) {
        return Ok(false);
    }
    let why = if spec.u2o_interconnection != Some(true) {
        "u2oFeatures.overlayOnlyRouting can only be enabled when u2OInterconnection is true"
    } else if spec.vlan.as_deref().is_none_or(str::is_empty) {
        "u2oFeatures.overlayOnlyRouting can only be enabled on underlay subnets (vlan must be set)"
    } else {
        return Ok(true);
    };
    Err(Error::Invalid(format!(
        "subnet {}: spec.u2oFeatures.overlayOnlyRouting: {why}",
        subnet.name_any()
    )))
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
///
/// `enable_lb` is `--enable-lb` (`None` for the join subnet, whose `enableLb` Kube-OVN leaves
/// unset). Kube-OVN's `formatSubnet` writes the flag into every unset `enableLb`; we write it only
/// when it is off: unset already reads as on everywhere (the VPC's load balancers, the node
/// daemon's routes), while the node daemon, which has no `--enable-lb`, must see a subnet whose
/// load balancing is off as such — a U2O subnet's Service traffic then goes through the nodes
/// (`u2o_features::no_lb_plan`), and their routes back to the subnet through `ovn0`.
pub fn spec_patch(subnet: &Subnet, eff: &Effective, enable_lb: Option<bool>) -> Option<serde_json::Value> {
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
    // Kube-OVN's formatSubnet: no U2O on an overlay subnet, no U2O address without U2O.
    if eff.underlay.is_none() && s.u2o_interconnection == Some(true) {
        set("u2oInterconnection", json!(false));
    }
    if !eff.u2o() && s.u2o_interconnection_ip.as_deref().is_some_and(|i| !i.is_empty()) {
        set("u2oInterconnectionIP", json!(""));
    }
    if s.enable_lb.is_none() && enable_lb == Some(false) {
        set("enableLb", json!(false));
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

    fn subnet(spec: serde_json::Value) -> Subnet {
        let mut v = json!({"metadata": {"name": "ul"}});
        v["spec"] = spec;
        serde_json::from_value(v).unwrap()
    }

    fn refusal(spec: serde_json::Value) -> String {
        effective(&subnet(spec), "ovn-cluster").unwrap_err().to_string()
    }

    #[test]
    fn underlay_fields_are_checked_with_kube_ovns_messages() {
        let base = json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100"});
        let with = |extra: serde_json::Value| {
            let mut v = base.clone();
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            v
        };
        assert_eq!(
            refusal(with(json!({"logicalGateway": true, "u2oInterconnection": true}))),
            "subnet ul: spec.u2oInterconnection: logicalGateway and u2oInterconnection can't be opened at the same time"
        );
        assert_eq!(
            refusal(with(
                json!({"u2oInterconnection": true, "u2oInterconnectionIP": "172.18.0.9"})
            )),
            "subnet ul: spec.u2oInterconnectionIP: u2oInterconnectionIP 172.18.0.9 is not in subnet ul cidr 172.17.0.0/24"
        );
        assert_eq!(
            refusal(with(
                json!({"u2oInterconnection": true, "u2oInterconnectionIP": "172.17.0.1"})
            )),
            "subnet ul: spec.u2oInterconnectionIP: u2oInterconnectionIP 172.17.0.1 conflicts with subnet gateway 172.17.0.1"
        );
        assert_eq!(
            refusal(with(json!({"u2oFeatures": {"overlayOnlyRouting": true}}))),
            "subnet ul: spec.u2oFeatures.overlayOnlyRouting: u2oFeatures.overlayOnlyRouting can only be enabled when u2OInterconnection is true"
        );
        let overlay = |extra: serde_json::Value| {
            let mut s = json!({"cidrBlock": "10.16.0.0/16", "u2oFeatures": {"overlayOnlyRouting": true}});
            s.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            effective(&subnet(s), "ovn-cluster").unwrap_err().to_string()
        };
        assert_eq!(
            overlay(json!({"u2oInterconnection": true})),
            "subnet ul: spec.u2oFeatures.overlayOnlyRouting: u2oFeatures.overlayOnlyRouting can only be enabled on underlay subnets (vlan must be set)"
        );
        assert!(overlay(json!({})).contains("can only be enabled when u2OInterconnection is true"));
        let oo = effective(
            &subnet(with(
                json!({"u2oInterconnection": true, "u2oFeatures": {"overlayOnlyRouting": true}}),
            )),
            "ovn-cluster",
        )
        .unwrap();
        assert!(oo.underlay.unwrap().overlay_only);

        let ok = effective(
            &subnet(with(
                json!({"u2oInterconnection": true, "u2oInterconnectionIP": "172.17.0.9"}),
            )),
            "ovn-cluster",
        )
        .unwrap();
        let u = ok.underlay.clone().unwrap();
        assert_eq!((u.vlan.as_str(), u.u2o, u.logical_gateway), ("v100", true, false));
        assert_eq!(u.u2o_ips, ["172.17.0.9".parse::<IpAddr>().unwrap()]);
        assert!(!u.overlay_only);
        assert!(ok.needs_router() && ok.physical_gateway() && ok.u2o());
        let plain = effective(&subnet(base.clone()), "ovn-cluster").unwrap();
        assert!(!plain.needs_router() && plain.physical_gateway());
        let lgw = effective(&subnet(with(json!({"logicalGateway": true}))), "ovn-cluster").unwrap();
        assert!(lgw.needs_router() && !lgw.physical_gateway());
        assert!(spec("10.16.0.0/16").needs_router());
    }

    #[test]
    fn u2o_is_cleared_where_kube_ovn_clears_it() {
        // U2O off: its address goes; overlay: U2O itself goes.
        let s = subnet(
            json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100", "u2oInterconnectionIP": "172.17.0.9"}),
        );
        let eff = effective(&s, "ovn-cluster").unwrap();
        let p = spec_patch(&s, &eff, Some(true)).unwrap();
        assert_eq!(p["spec"]["u2oInterconnectionIP"], json!(""));
        let s = subnet(json!({"cidrBlock": "10.16.0.0/16", "u2oInterconnection": true}));
        let eff = effective(&s, "ovn-cluster").unwrap();
        assert!(eff.underlay.is_none());
        assert_eq!(
            spec_patch(&s, &eff, Some(true)).unwrap()["spec"]["u2oInterconnection"],
            json!(false)
        );
    }

    #[test]
    fn enable_lb_is_written_only_when_the_flag_turns_it_off() {
        let s = subnet(json!({"cidrBlock": "10.16.0.0/16"}));
        let eff = effective(&s, "ovn-cluster").unwrap();
        let p = spec_patch(&s, &eff, Some(false)).unwrap();
        assert_eq!(p["spec"]["enableLb"], json!(false));
        // The flag on, or the join subnet: left unset.
        assert!(
            spec_patch(&s, &eff, Some(true)).unwrap()["spec"]
                .get("enableLb")
                .is_none()
        );
        assert!(
            spec_patch(&s, &eff, None).unwrap()["spec"]
                .get("enableLb")
                .is_none()
        );
        // A subnet's own choice stays.
        let s = subnet(json!({"cidrBlock": "10.16.0.0/16", "enableLb": true}));
        assert!(
            spec_patch(&s, &eff, Some(false)).unwrap()["spec"]
                .get("enableLb")
                .is_none()
        );
    }
}
