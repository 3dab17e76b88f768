//! An underlay subnet's northbound rows (Kube-OVN `pkg/controller/subnet.go`: `reconcileVlan`,
//! `handleAddOrUpdateSubnet`'s `needRouter`, `reconcileOvnDefaultVpcRoute`,
//! `reconcileCustomVpcStaticRoute`, `addPolicyRouteForU2OInterconn`):
//!
//! - the localnet port `localnet.<subnet>` that puts the switch on the provider network's bridge,
//!   tagged with the VLAN ID (no tag for ID 0, untagged);
//! - the router port: none when the physical router is the gateway; the subnet's gateway with
//!   `logicalGateway`; the U2O address (and its MAC) with U2O;
//! - the U2O policies and the address sets of node addresses they exclude, and in a custom VPC the
//!   source route to the physical gateway;
//! - with `u2oFeatures.overlayOnlyRouting`, Kube-OVN's other set of U2O policies: only the VPC's
//!   overlay CIDRs (the `<vpc>.u2o_overlay_cidrs.ipX` address set, see [`super::u2o_features`])
//!   are routed by the router; the subnet's other traffic goes to its physical gateway at 30050,
//!   above the node (30000) and every gateway policy.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_ovn_api::annotations::keys::{localnet_port, u2o_exclude_ip_set};
use kube_ovn_api::crd::{ProviderNetwork, Vlan};
use kube_ovn_ovsdb::tables::nb::LogicalSwitchPort;

use crate::ovn::owned::{PolicySpec, RouteSpec};
use crate::ovn::plan::{OwnedRows, owned_ids};
use crate::ovn::priority::{
    POLICY_GATEWAY, POLICY_SUBNET_ALLOW, POLICY_U2O_PHYSICAL_GATEWAY, POLICY_U2O_SAME_SUBNET,
    POLICY_U2O_SUBNET,
};
use crate::reconcile::subnet::u2o_features::overlay_cidrs_set;
use crate::reconcile::subnet_spec::Effective;

/// What the underlay plan reads.
#[derive(Debug, Clone, Copy)]
pub struct UnderlayInputs<'a> {
    pub subnet: &'a str,
    pub eff: &'a Effective,
    /// The Vlan's ID (0: untagged).
    pub vlan_id: u16,
    /// The Vlan's ProviderNetwork: the localnet port's `network_name`, which ovn-controller finds
    /// in each chassis' `ovn-bridge-mappings`.
    pub provider: &'a str,
    /// Whether the subnet is in the default VPC (`ovn-cluster`).
    pub default_vpc: bool,
    /// The U2O addresses allocated (status `u2oInterconnectionIP`), one per family; empty when
    /// U2O is off.
    pub u2o_ips: &'a [IpAddr],
    /// Every node's InternalIP: what the U2O policy2 keeps away from the physical gateway.
    pub node_ips: &'a [IpAddr],
}

/// An underlay subnet's rows.
#[derive(Debug, Clone, PartialEq)]
pub struct UnderlayPlan {
    /// The localnet port, as it should be.
    pub localnet: LogicalSwitchPort,
    /// The router port's networks; `None`: no router port (the pair is removed).
    pub router_networks: Option<Vec<String>>,
    /// The subnet's policies on its router: the 31000 allow where Kube-OVN writes it, and the
    /// U2O policies.
    pub policies: OwnedRows<PolicySpec>,
    /// The U2O exclude address sets by name, with their addresses (every family of the subnet;
    /// none without U2O).
    pub exclude_sets: Vec<(String, Vec<String>)>,
    /// Static routes on a custom VPC's router.
    pub routes: Vec<RouteSpec>,
}

fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv4() { "ip4" } else { "ip6" }
}

/// The localnet port: `type=localnet`, `addresses=["unknown"]`,
/// `options:network_name=<provider>`, `tag` only for 0 < id < 4096 (Kube-OVN's
/// `CreateLocalnetLogicalSwitchPort`), `external_ids` `ls`, `vendor` and the subnet's
/// `ipv4_network`/`ipv6_network`.
pub fn localnet_row(subnet: &str, eff: &Effective, provider: &str, vlan_id: u16) -> LogicalSwitchPort {
    let mut ids = owned_ids(&[("ls", subnet)]);
    for c in &eff.cidrs {
        let key = if c.addr().is_ipv4() {
            "ipv4_network"
        } else {
            "ipv6_network"
        };
        ids.insert(key.into(), c.to_string());
    }
    LogicalSwitchPort {
        name: localnet_port(subnet),
        r#type: "localnet".into(),
        addresses: vec!["unknown".into()],
        options: BTreeMap::from([("network_name".to_owned(), provider.to_owned())]),
        tag: (vlan_id > 0 && vlan_id < 4096).then_some(i64::from(vlan_id)),
        external_ids: ids,
        ..Default::default()
    }
}

/// The rows of an underlay subnet (`i.eff.underlay` is set).
pub fn underlay_plan(i: &UnderlayInputs<'_>) -> UnderlayPlan {
    let eff = i.eff;
    let u2o = eff.u2o() && !i.u2o_ips.is_empty();
    let router_networks = if u2o {
        // The router port sits on the U2O address with the subnet's prefix; the subnet's gateway
        // stays the physical router's.
        Some(
            eff.cidrs
                .iter()
                .filter_map(|c| {
                    let ip = i.u2o_ips.iter().find(|a| a.is_ipv4() == c.addr().is_ipv4())?;
                    Some(format!("{ip}/{}", c.prefix_len()))
                })
                .collect(),
        )
    } else if eff.needs_router() && !eff.u2o() {
        Some(eff.router_networks())
    } else {
        None
    };
    let subnet_ids = owned_ids(&[("subnet", i.subnet)]);
    let u2o_ids = owned_ids(&[("subnet", i.subnet), ("isU2ORoutePolicy", "true")]);
    let overlay_only = u2o && eff.underlay.as_ref().is_some_and(|u| u.overlay_only);
    let overlay_only_ids = owned_ids(&[
        ("subnet", i.subnet),
        ("isU2ORoutePolicy", "true"),
        ("isU2OOverlayOnlyRoutePolicy", "true"),
    ]);
    let mut policies = Vec::new();
    // Kube-OVN's `addCommonRoutesForSubnet` (31000 allow to the CIDR) runs for every subnet the
    // router is attached to, except in the default VPC where an underlay subnet without
    // logicalGateway gets only the U2O rows.
    let common_allow = router_networks.is_some() && !(i.default_vpc && eff.physical_gateway());
    let mut exclude_sets = Vec::new();
    let mut routes = Vec::new();
    for (c, gw) in eff.cidrs.iter().zip(&eff.gateways) {
        let v = family(&c.addr());
        if common_allow {
            let allow = PolicySpec {
                priority: POLICY_SUBNET_ALLOW,
                r#match: format!("{v}.dst == {c}"),
                action: "allow".into(),
                nexthops: vec![],
            };
            policies.push((allow, subnet_ids.clone()));
        }
        if !u2o {
            continue;
        }
        let reroute = |priority: i64, m: String| PolicySpec {
            priority,
            r#match: m,
            action: "reroute".into(),
            nexthops: vec![gw.to_string()],
        };
        let allow = |priority: i64, m: String| PolicySpec {
            priority,
            r#match: m,
            action: "allow".into(),
            nexthops: vec![],
        };
        // Kube-OVN's addPolicyRouteForU2OInterconn. Default: policy1 (29400, default VPC) lets
        // traffic to the subnet past the gateway reroutes. Overlay-only: only the VPC's overlay
        // CIDRs get that far (29400), and the subnet's own traffic to itself stays (30060).
        if overlay_only {
            let overlay = overlay_cidrs_set(&eff.vpc, v);
            let from_overlay = allow(
                POLICY_U2O_SUBNET,
                format!("{v}.src == ${overlay} && {v}.dst == {c}"),
            );
            policies.push((from_overlay, overlay_only_ids.clone()));
        } else if i.default_vpc {
            policies.push((
                allow(POLICY_U2O_SUBNET, format!("{v}.dst == {c}")),
                u2o_ids.clone(),
            ));
        }
        // policy2 (31000): the nodes are reached through the physical gateway, not their join
        // ports (default VPC; in every VPC with overlay-only routing).
        if i.default_vpc || overlay_only {
            let set = u2o_exclude_ip_set(i.subnet, v);
            let policy2 = reroute(
                POLICY_SUBNET_ALLOW,
                format!("{v}.dst == ${set} && {v}.src == {c}"),
            );
            let ids = if overlay_only { &overlay_only_ids } else { &u2o_ids };
            policies.push((policy2, ids.clone()));
            let mut addrs: Vec<String> = i
                .node_ips
                .iter()
                .filter(|a| family(a) == v)
                .map(ToString::to_string)
                .collect();
            addrs.sort();
            addrs.dedup();
            exclude_sets.push((set, addrs));
        }
        if overlay_only {
            let same = allow(
                POLICY_U2O_SAME_SUBNET,
                format!("{v}.src == {c} && {v}.dst == {c}"),
            );
            policies.push((same, overlay_only_ids.clone()));
        }
        if !i.default_vpc {
            // Kube-OVN's `addCustomVPCStaticRouteForSubnet`: the subnet's traffic that no other
            // route takes leaves through its physical gateway.
            routes.push(RouteSpec {
                ip_prefix: c.to_string(),
                nexthop: gw.to_string(),
                policy: Some("src-ip".into()),
                route_table: String::new(),
                options: BTreeMap::new(),
            });
        }
        // policy3: the rest of the subnet's traffic to its physical gateway; with overlay-only
        // routing above the node (30000) and every gateway policy. Kube-OVN marks it as a plain
        // U2O policy in both modes.
        let priority = if overlay_only {
            POLICY_U2O_PHYSICAL_GATEWAY
        } else {
            POLICY_GATEWAY
        };
        let policy3 = reroute(priority, format!("{v}.src == {c}"));
        policies.push((policy3, u2o_ids.clone()));
    }
    UnderlayPlan {
        localnet: localnet_row(i.subnet, eff, i.provider, i.vlan_id),
        router_networks,
        policies,
        exclude_sets,
        routes,
    }
}

/// Whether an underlay subnet's Vlan can be used (Kube-OVN's `validateSubnetVlan`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VlanCheck {
    /// The Vlan's ID and ProviderNetwork.
    Ready { id: u16, provider: String },
    /// No such Vlan: the subnet is not ready, and the user is told.
    Missing(String),
    /// The Vlan conflicts with another on its provider: refused with Kube-OVN's message.
    Conflict(String),
    /// The Vlan handler has not taken the Vlan yet (no provider, no ProviderNetwork, or the Vlan
    /// not in the ProviderNetwork's `status.vlans`): wait quietly, as Kube-OVN's `errVlanNotReady`
    /// — a new Vlan's `conflict: false` means nothing until then.
    NotReady(String),
}

/// Checks `subnet`'s Vlan `vlan_name` (`vlan`, and its ProviderNetwork `pn` when found).
pub fn check_vlan(
    subnet: &str,
    vlan_name: &str,
    vlan: Option<&Vlan>,
    pn: Option<&ProviderNetwork>,
) -> VlanCheck {
    let Some(vlan) = vlan else {
        return VlanCheck::Missing(format!("subnet {subnet}: spec.vlan: vlan {vlan_name} not found"));
    };
    if vlan.status.as_ref().and_then(|s| s.conflict) == Some(true) {
        return VlanCheck::Conflict(format!("subnet {subnet} has invalid conflict vlan {vlan_name}"));
    }
    let Some(provider) = vlan.spec.effective_provider() else {
        return VlanCheck::NotReady(format!(
            "vlan {vlan_name} provider not yet set, deferring subnet {subnet}"
        ));
    };
    let Some(pn) = pn else {
        return VlanCheck::NotReady(format!(
            "vlan {vlan_name} not yet ready (provider network {provider} not found)"
        ));
    };
    let listed = pn
        .status
        .as_ref()
        .and_then(|s| s.vlans.as_ref())
        .is_some_and(|v| v.iter().any(|n| n == vlan_name));
    if !listed {
        return VlanCheck::NotReady(format!(
            "vlan {vlan_name} not yet processed by vlan handler, deferring subnet {subnet}"
        ));
    }
    VlanCheck::Ready {
        id: vlan.spec.effective_id(),
        provider: provider.to_owned(),
    }
}

#[cfg(test)]
mod tests;
