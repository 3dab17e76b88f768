//! A subnet's ACLs on its logical switch, as Kube-OVN writes them (`external_ids`
//! `parent=<subnet>`, `vendor=kube-ovn`; user ACLs also `subnet=<subnet>`).
//!
//! `private: true` isolates the subnet. All rules are `to-lport`, so they judge a packet as it
//! leaves the switch — towards a pod, or towards the router for traffic leaving the subnet:
//! - priority 1000 (`DefaultDropPriority`): drop `ip`, logged (name = subnet, severity warning);
//! - priority 1001 (`SubnetAllowPriority`): allow-related within the subnet, and between the
//!   subnet and each `allowSubnets` CIDR in both directions;
//! - priority 3000 (`NodeAllowPriority`): allow-related from the join subnet, so nodes (kubelet
//!   probes, host-network pods) still reach the pods.
//!
//! User `acls` are added as given; with `allowEWTraffic` also an allow within the subnet at
//! priority 1900 (`AllowEWTrafficPriority`) in both directions. Kube-OVN puts these in ACL tier 2;
//! OVN 23.03 has no tiers, so ours have none.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;

use ipnet::IpNet;
use kube_ovn_api::crd::SubnetSpec;

use crate::ovn::owned::AclSpec;
use crate::ovn::plan::owned_ids;
use crate::ovn::priority::{
    ACL_ALLOW_EAST_WEST, ACL_DEFAULT_DROP, ACL_LOCALNET_ARP_DROP, ACL_NODE_ALLOW, ACL_SUBNET_ALLOW,
};
use crate::reconcile::subnet_spec::Effective;

const ACTIONS: &[&str] = &[
    "allow",
    "allow-related",
    "allow-stateless",
    "drop",
    "reject",
    "pass",
];

fn v(net: &IpNet) -> &'static str {
    if net.addr().is_ipv4() { "ip4" } else { "ip6" }
}

/// OVN limits ACL names to 63 characters; Kube-OVN cuts longer ones to 60 and adds `...`.
fn acl_name(subnet: &str) -> String {
    if subnet.len() > 63 {
        format!("{}...", &subnet[..60])
    } else {
        subnet.to_owned()
    }
}

/// An ACL and the `external_ids` that mark it as this subnet's.
pub type OwnedAcl = (AclSpec, BTreeMap<String, String>);

/// The ACLs of a subnet's switch with their `external_ids`. `node_cidrs` is the join subnet's
/// CIDRs. Errors name the field.
pub fn subnet_acls(
    subnet: &str,
    eff: &Effective,
    spec: &SubnetSpec,
    node_cidrs: &[IpNet],
) -> Result<Vec<OwnedAcl>, (String, String)> {
    let private_ids = owned_ids(&[("parent", subnet)]);
    let user_ids = owned_ids(&[("parent", subnet), ("subnet", subnet)]);
    let mut out = Vec::new();
    if spec.private == Some(true) {
        let mut allow: Vec<IpNet> = Vec::new();
        for (i, a) in spec.allow_subnets.iter().flatten().enumerate() {
            let a = a.trim();
            if a.is_empty() {
                continue;
            }
            let net = a
                .parse::<IpNet>()
                .map_err(|_| (format!("spec.allowSubnets[{i}]"), format!("{a:?} is not a CIDR")))?;
            // OVN refuses a prefix with host bits set; take the network.
            allow.push(net.trunc());
        }
        out.push((
            AclSpec {
                name: Some(acl_name(subnet)),
                log: true,
                severity: Some("warning".into()),
                ..AclSpec::new("to-lport", ACL_DEFAULT_DROP, "ip", "drop")
            },
            private_ids.clone(),
        ));
        for cidr in &eff.cidrs {
            let s = v(cidr);
            out.push((
                AclSpec::new(
                    "to-lport",
                    ACL_SUBNET_ALLOW,
                    format!("{s}.src == {cidr} && {s}.dst == {cidr}"),
                    "allow-related",
                ),
                private_ids.clone(),
            ));
            for node in node_cidrs.iter().filter(|n| v(n) == s) {
                out.push((
                    AclSpec::new(
                        "to-lport",
                        ACL_NODE_ALLOW,
                        format!("{s}.src == {node}"),
                        "allow-related",
                    ),
                    private_ids.clone(),
                ));
            }
            for a in allow.iter().filter(|a| v(a) == s) {
                out.push((
                    AclSpec::new(
                        "to-lport",
                        ACL_SUBNET_ALLOW,
                        format!(
                            "({s}.src == {cidr} && {s}.dst == {a}) || ({s}.src == {a} && {s}.dst == {cidr})"
                        ),
                        "allow-related",
                    ),
                    private_ids.clone(),
                ));
            }
        }
    }
    let user = spec.acls.as_deref().unwrap_or_default();
    // Kube-OVN adds the east-west allow only alongside user ACLs.
    if !user.is_empty() && spec.allow_ew_traffic == Some(true) {
        for cidr in &eff.cidrs {
            let s = v(cidr);
            for direction in ["to-lport", "from-lport"] {
                out.push((
                    AclSpec::new(
                        direction,
                        ACL_ALLOW_EAST_WEST,
                        format!("{s}.src == {cidr} && {s}.dst == {cidr}"),
                        "allow",
                    ),
                    user_ids.clone(),
                ));
            }
        }
    }
    for (i, acl) in user.iter().enumerate() {
        let field = |f: &str| format!("spec.acls[{i}].{f}");
        let direction = acl.direction.as_deref().unwrap_or_default();
        if !matches!(direction, "from-lport" | "to-lport") {
            return Err((
                field("direction"),
                format!("{direction:?} is neither from-lport nor to-lport"),
            ));
        }
        let priority = acl.priority.unwrap_or_default();
        if !(0..=32767).contains(&priority) {
            return Err((field("priority"), format!("{priority} is outside 0..32767")));
        }
        let r#match = acl.match_.as_deref().map(str::trim).unwrap_or_default();
        if r#match.is_empty() {
            return Err((field("match"), "is required".into()));
        }
        let action = acl.action.as_deref().unwrap_or_default();
        if !ACTIONS.contains(&action) {
            return Err((
                field("action"),
                format!("{action:?} is not one of {}", ACTIONS.join(", ")),
            ));
        }
        out.push((
            AclSpec::new(direction, i64::from(priority), r#match, action),
            user_ids.clone(),
        ));
    }
    Ok(out)
}

/// On an underlay switch the router port is distributed: every chassis has it, and every
/// chassis would answer an ARP request for its address that came in through the localnet port,
/// so the physical network would see the address at every node (duplicate replies, MAC
/// flapping in the switches). Kube-OVN patches ovn-northd to skip ARP/ND requests for router
/// port addresses from localnet ports (its e2e "should drop ARP/ND request from localnet port
/// to LRP"); with a stock ovn-northd an ACL does it for ARP: the ACL stage comes before the
/// request can reach the router. Nothing on the physical network needs that address: the
/// subnet's pods resolve it on their own chassis, not through the localnet port. IPv6 is not
/// covered: ovn-northd allows every Neighbor Solicitation at priority 65532, above any ACL.
/// `router_networks` are the router port's `networks` (`10.100.0.10/24`).
pub fn localnet_arp_drop(subnet: &str, router_networks: &[String]) -> Vec<OwnedAcl> {
    let ids = owned_ids(&[("parent", subnet)]);
    let localnet = kube_ovn_api::annotations::keys::localnet_port(subnet);
    router_networks
        .iter()
        .filter_map(|n| n.parse::<IpNet>().ok())
        .filter(|n| n.addr().is_ipv4())
        .map(|n| {
            let m = format!(
                "inport == \"{localnet}\" && arp.op == 1 && arp.tpa == {}",
                n.addr()
            );
            (
                AclSpec::new("from-lport", ACL_LOCALNET_ARP_DROP, m, "drop"),
                ids.clone(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::subnet_spec::effective;
    use serde_json::json;

    fn acls(spec: serde_json::Value) -> Result<Vec<OwnedAcl>, (String, String)> {
        let mut object = json!({"metadata": {"name": "priv"}});
        object["spec"] = spec;
        let s: kube_ovn_api::crd::Subnet = serde_json::from_value(object).unwrap();
        let eff = effective(&s, "ovn-cluster").unwrap();
        subnet_acls("priv", &eff, &s.spec, &["100.64.0.0/16".parse().unwrap()])
    }

    #[test]
    fn private_subnet_rules() {
        let list = acls(json!({"cidrBlock": "10.20.0.0/16", "private": true,
            "allowSubnets": ["10.21.0.5/16"]}))
        .unwrap();
        let rules: Vec<(i64, &str, &str)> = list
            .iter()
            .map(|(a, _)| (a.priority, a.r#match.as_str(), a.action.as_str()))
            .collect();
        assert_eq!(
            rules,
            [
                (1000, "ip", "drop"),
                (
                    1001,
                    "ip4.src == 10.20.0.0/16 && ip4.dst == 10.20.0.0/16",
                    "allow-related"
                ),
                (3000, "ip4.src == 100.64.0.0/16", "allow-related"),
                (
                    1001,
                    "(ip4.src == 10.20.0.0/16 && ip4.dst == 10.21.0.0/16) || (ip4.src == 10.21.0.0/16 && ip4.dst == 10.20.0.0/16)",
                    "allow-related"
                ),
            ]
        );
        assert!(list.iter().all(|(a, _)| a.direction == "to-lport"));
        assert!(list[0].0.log && list[0].0.name.as_deref() == Some("priv"));
        assert_eq!(list[0].1.get("parent").map(String::as_str), Some("priv"));
        assert!(!list[0].1.contains_key("subnet"));
    }

    #[test]
    fn user_acls_are_checked_and_tagged() {
        let list = acls(json!({"cidrBlock": "10.20.0.0/16", "allowEWTraffic": true,
            "acls": [{"direction": "from-lport", "priority": 1002, "match": "ip4.dst == 1.1.1.1", "action": "drop"}]}))
        .unwrap();
        assert_eq!(list.len(), 3, "{list:?}");
        assert!(
            list.iter()
                .all(|(_, ids)| ids.get("subnet").map(String::as_str) == Some("priv"))
        );
        let e = acls(json!({"cidrBlock": "10.20.0.0/16",
            "acls": [{"direction": "inbound", "priority": 1, "match": "ip", "action": "drop"}]}))
        .unwrap_err();
        assert_eq!(e.0, "spec.acls[0].direction");
        let e =
            acls(json!({"cidrBlock": "10.20.0.0/16", "private": true, "allowSubnets": ["x"]})).unwrap_err();
        assert_eq!(e.0, "spec.allowSubnets[0]");
        assert!(acls(json!({"cidrBlock": "10.20.0.0/16"})).unwrap().is_empty());
    }

    #[test]
    fn arp_requests_from_the_localnet_port_for_the_router_port_are_dropped() {
        let nets = ["10.100.0.10/24".to_owned(), "fd00:100::a/64".to_owned()];
        let list = localnet_arp_drop("underlay", &nets);
        assert_eq!(list.len(), 1, "IPv4 only: {list:?}");
        let (acl, ids) = &list[0];
        assert_eq!(
            (acl.direction.as_str(), acl.priority, acl.action.as_str()),
            ("from-lport", ACL_LOCALNET_ARP_DROP, "drop")
        );
        assert_eq!(
            acl.r#match,
            r#"inport == "localnet.underlay" && arp.op == 1 && arp.tpa == 10.100.0.10"#
        );
        assert_eq!(ids.get("parent").map(String::as_str), Some("underlay"));
        assert!(localnet_arp_drop("underlay", &[]).is_empty());
    }
}
