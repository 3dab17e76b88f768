use std::net::IpAddr;

use kube_ovn_api::crd::Subnet;
use serde_json::json;

use super::*;
use crate::reconcile::subnet_spec::effective;

fn eff(spec: serde_json::Value) -> Effective {
    let mut v = json!({"metadata": {"name": "ul"}});
    v["spec"] = spec;
    let s: Subnet = serde_json::from_value(v).unwrap();
    effective(&s, "ovn-cluster").unwrap()
}

fn ips(list: &[&str]) -> Vec<IpAddr> {
    list.iter().map(|a| a.parse().unwrap()).collect()
}

fn plan(e: &Effective, default_vpc: bool, u2o: &[IpAddr], nodes: &[IpAddr], id: u16) -> UnderlayPlan {
    underlay_plan(&UnderlayInputs {
        subnet: "ul",
        eff: e,
        vlan_id: id,
        provider: "pn1",
        default_vpc,
        u2o_ips: u2o,
        node_ips: nodes,
    })
}

fn rows(p: &UnderlayPlan) -> Vec<(i64, String, String, Vec<String>, bool)> {
    p.policies
        .iter()
        .map(|(s, ids)| {
            (
                s.priority,
                s.r#match.clone(),
                s.action.clone(),
                s.nexthops.clone(),
                ids.get("isU2ORoutePolicy").is_some_and(|v| v == "true"),
            )
        })
        .collect()
}

#[test]
fn the_localnet_port_is_kube_ovns_and_id_0_is_untagged() {
    let e = eff(json!({"cidrBlock": "172.17.0.0/24,fd00:17::/64", "vlan": "v100"}));
    let p = plan(&e, true, &[], &[], 100);
    let ln = &p.localnet;
    assert_eq!(ln.name, "localnet.ul");
    assert_eq!(ln.r#type, "localnet");
    assert_eq!(ln.addresses, ["unknown"]);
    assert_eq!(ln.options.get("network_name").map(String::as_str), Some("pn1"));
    assert_eq!(ln.tag, Some(100));
    assert_eq!(
        ln.external_ids.get("ipv4_network").map(String::as_str),
        Some("172.17.0.0/24")
    );
    assert_eq!(
        ln.external_ids.get("ipv6_network").map(String::as_str),
        Some("fd00:17::/64")
    );
    assert_eq!(ln.external_ids.get("ls").map(String::as_str), Some("ul"));
    assert_eq!(
        ln.external_ids.get("vendor").map(String::as_str),
        Some("kube-ovn")
    );
    assert_eq!(plan(&e, true, &[], &[], 0).localnet.tag, None);
    assert_eq!(plan(&e, true, &[], &[], 4095).localnet.tag, Some(4095));
}

#[test]
fn a_plain_underlay_subnet_has_no_router_port_and_no_policies_in_any_vpc() {
    let e = eff(json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100"}));
    for default_vpc in [true, false] {
        let p = plan(&e, default_vpc, &[], &ips(&["172.18.0.2"]), 100);
        assert_eq!(p.router_networks, None);
        assert!(p.policies.is_empty() && p.exclude_sets.is_empty() && p.routes.is_empty());
    }
}

#[test]
fn a_logical_gateway_keeps_the_router_port_on_the_gateway() {
    let e = eff(json!({"cidrBlock": "172.17.0.0/24,fd00:17::/64", "vlan": "v100", "logicalGateway": true}));
    let p = plan(&e, true, &[], &[], 100);
    assert_eq!(
        p.router_networks,
        Some(vec!["172.17.0.1/24".to_owned(), "fd00:17::1/64".to_owned()])
    );
    // As an overlay subnet's, in every VPC (the default VPC's gateway policies come from the
    // gateway plan, as for an overlay subnet).
    for default_vpc in [true, false] {
        let p = plan(&e, default_vpc, &[], &[], 100);
        assert_eq!(
            rows(&p),
            [
                (
                    31000,
                    "ip4.dst == 172.17.0.0/24".into(),
                    "allow".into(),
                    vec![],
                    false
                ),
                (
                    31000,
                    "ip6.dst == fd00:17::/64".into(),
                    "allow".into(),
                    vec![],
                    false
                ),
            ]
        );
        assert!(p.routes.is_empty() && p.exclude_sets.is_empty());
    }
}

#[test]
fn u2o_in_the_default_vpc_writes_the_three_policies_and_the_exclude_sets() {
    let e = eff(json!({"cidrBlock": "172.17.0.0/24,fd00:17::/64", "vlan": "v100",
        "u2oInterconnection": true, "gateway": "172.17.0.254,fd00:17::fe"}));
    let u2o = ips(&["172.17.0.2", "fd00:17::2"]);
    let nodes = ips(&["172.18.0.3", "172.18.0.2", "fd00:18::2"]);
    let p = plan(&e, true, &u2o, &nodes, 100);
    assert_eq!(
        p.router_networks,
        Some(vec!["172.17.0.2/24".to_owned(), "fd00:17::2/64".to_owned()])
    );
    let gw4 = vec!["172.17.0.254".to_owned()];
    let gw6 = vec!["fd00:17::fe".to_owned()];
    assert_eq!(
        rows(&p),
        [
            (
                29400,
                "ip4.dst == 172.17.0.0/24".into(),
                "allow".into(),
                vec![],
                true
            ),
            (
                31000,
                "ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24".into(),
                "reroute".into(),
                gw4.clone(),
                true
            ),
            (
                29000,
                "ip4.src == 172.17.0.0/24".into(),
                "reroute".into(),
                gw4,
                true
            ),
            (
                29400,
                "ip6.dst == fd00:17::/64".into(),
                "allow".into(),
                vec![],
                true
            ),
            (
                31000,
                "ip6.dst == $ul.u2o_exclude_ip.ip6 && ip6.src == fd00:17::/64".into(),
                "reroute".into(),
                gw6.clone(),
                true
            ),
            (
                29000,
                "ip6.src == fd00:17::/64".into(),
                "reroute".into(),
                gw6,
                true
            ),
        ]
    );
    assert!(
        p.policies
            .iter()
            .all(|(_, ids)| ids.get("subnet").map(String::as_str) == Some("ul"))
    );
    assert_eq!(
        p.exclude_sets,
        [
            (
                "ul.u2o_exclude_ip.ip4".to_owned(),
                vec!["172.18.0.2".to_owned(), "172.18.0.3".to_owned()]
            ),
            ("ul.u2o_exclude_ip.ip6".to_owned(), vec!["fd00:18::2".to_owned()]),
        ]
    );
    assert!(p.routes.is_empty());
}

#[test]
fn u2o_in_a_custom_vpc_writes_policy3_the_common_allow_and_a_source_route() {
    let e = eff(
        json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100", "u2oInterconnection": true,
        "vpc": "vpc1"}),
    );
    let p = plan(&e, false, &ips(&["172.17.0.9"]), &ips(&["172.18.0.2"]), 100);
    assert_eq!(p.router_networks, Some(vec!["172.17.0.9/24".to_owned()]));
    let gw = vec!["172.17.0.1".to_owned()];
    assert_eq!(
        rows(&p),
        [
            (
                31000,
                "ip4.dst == 172.17.0.0/24".into(),
                "allow".into(),
                vec![],
                false
            ),
            (
                29000,
                "ip4.src == 172.17.0.0/24".into(),
                "reroute".into(),
                gw,
                true
            ),
        ]
    );
    assert!(p.exclude_sets.is_empty());
    assert_eq!(p.routes.len(), 1);
    assert_eq!(
        (
            p.routes[0].ip_prefix.as_str(),
            p.routes[0].nexthop.as_str(),
            p.routes[0].policy.as_deref()
        ),
        ("172.17.0.0/24", "172.17.0.1", Some("src-ip"))
    );
}

#[test]
fn u2o_before_its_address_is_allocated_writes_no_router_port() {
    let e = eff(json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100", "u2oInterconnection": true}));
    let p = plan(&e, true, &[], &[], 100);
    assert_eq!(p.router_networks, None);
    assert!(p.policies.is_empty());
}

fn vlan(v: serde_json::Value) -> Vlan {
    serde_json::from_value(v).unwrap()
}

fn pn(vlans: &[&str]) -> ProviderNetwork {
    serde_json::from_value(
        json!({"metadata": {"name": "pn1"}, "spec": {"defaultInterface": "eth1"},
        "status": {"vlans": vlans}}),
    )
    .unwrap()
}

#[test]
fn a_vlan_is_usable_once_its_provider_network_lists_it_and_not_in_conflict() {
    let v = vlan(json!({"metadata": {"name": "v100"}, "spec": {"id": 100, "provider": "pn1"}}));
    assert_eq!(
        check_vlan("ul", "v100", None, None),
        VlanCheck::Missing("subnet ul: spec.vlan: vlan v100 not found".into())
    );
    assert!(matches!(
        check_vlan("ul", "v100", Some(&v), None),
        VlanCheck::NotReady(_)
    ));
    assert!(matches!(
        check_vlan("ul", "v100", Some(&v), Some(&pn(&["other"]))),
        VlanCheck::NotReady(_)
    ));
    assert_eq!(
        check_vlan("ul", "v100", Some(&v), Some(&pn(&["v100"]))),
        VlanCheck::Ready {
            id: 100,
            provider: "pn1".into()
        }
    );
    let c = vlan(
        json!({"metadata": {"name": "v100"}, "spec": {"id": 100, "provider": "pn1"},
        "status": {"conflict": true}}),
    );
    assert_eq!(
        check_vlan("ul", "v100", Some(&c), Some(&pn(&["v100"]))),
        VlanCheck::Conflict("subnet ul has invalid conflict vlan v100".into())
    );
}

/// The policies with whether each is marked overlay-only.
fn overlay_only_marks(p: &UnderlayPlan) -> Vec<(i64, bool)> {
    p.policies
        .iter()
        .map(|(s, ids)| {
            (
                s.priority,
                ids.get("isU2OOverlayOnlyRoutePolicy")
                    .is_some_and(|v| v == "true"),
            )
        })
        .collect()
}

#[test]
fn overlay_only_routing_allows_only_the_vpcs_overlay_cidrs_and_sends_the_rest_to_the_gateway() {
    let e = eff(json!({"cidrBlock": "172.17.0.0/24,fd00:17::/64", "vlan": "v100",
        "u2oInterconnection": true, "gateway": "172.17.0.254,fd00:17::fe",
        "u2oFeatures": {"overlayOnlyRouting": true}}));
    let u2o = ips(&["172.17.0.2", "fd00:17::2"]);
    let nodes = ips(&["172.18.0.2", "fd00:18::2"]);
    let p = plan(&e, true, &u2o, &nodes, 100);
    let gw4 = vec!["172.17.0.254".to_owned()];
    let gw6 = vec!["fd00:17::fe".to_owned()];
    let r =
        |prio: i64, m: &str, a: &str, nh: &[String]| (prio, m.to_owned(), a.to_owned(), nh.to_vec(), true);
    assert_eq!(
        rows(&p),
        [
            r(
                29400,
                "ip4.src == $ovn.cluster.u2o_overlay_cidrs.ip4 && ip4.dst == 172.17.0.0/24",
                "allow",
                &[]
            ),
            r(
                31000,
                "ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24",
                "reroute",
                &gw4
            ),
            r(
                30060,
                "ip4.src == 172.17.0.0/24 && ip4.dst == 172.17.0.0/24",
                "allow",
                &[]
            ),
            r(30050, "ip4.src == 172.17.0.0/24", "reroute", &gw4),
            r(
                29400,
                "ip6.src == $ovn.cluster.u2o_overlay_cidrs.ip6 && ip6.dst == fd00:17::/64",
                "allow",
                &[]
            ),
            r(
                31000,
                "ip6.dst == $ul.u2o_exclude_ip.ip6 && ip6.src == fd00:17::/64",
                "reroute",
                &gw6
            ),
            r(
                30060,
                "ip6.src == fd00:17::/64 && ip6.dst == fd00:17::/64",
                "allow",
                &[]
            ),
            r(30050, "ip6.src == fd00:17::/64", "reroute", &gw6),
        ]
    );
    // Kube-OVN marks all but the physical-gateway reroute as overlay-only.
    assert_eq!(
        overlay_only_marks(&p),
        [
            (29400, true),
            (31000, true),
            (30060, true),
            (30050, false),
            (29400, true),
            (31000, true),
            (30060, true),
            (30050, false)
        ]
    );
    assert_eq!(p.exclude_sets.len(), 2);
    assert!(p.routes.is_empty());
}

#[test]
fn overlay_only_routing_in_a_custom_vpc_also_excludes_the_nodes() {
    let e = eff(
        json!({"cidrBlock": "172.17.0.0/24", "vlan": "v100", "u2oInterconnection": true,
        "vpc": "vpc-1", "u2oFeatures": {"overlayOnlyRouting": true}}),
    );
    let p = plan(&e, false, &ips(&["172.17.0.9"]), &ips(&["172.18.0.2"]), 100);
    let gw = vec!["172.17.0.1".to_owned()];
    assert_eq!(
        rows(&p),
        [
            (
                31000,
                "ip4.dst == 172.17.0.0/24".into(),
                "allow".into(),
                vec![],
                false
            ),
            (
                29400,
                "ip4.src == $vpc.1.u2o_overlay_cidrs.ip4 && ip4.dst == 172.17.0.0/24".into(),
                "allow".into(),
                vec![],
                true
            ),
            (
                31000,
                "ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24".into(),
                "reroute".into(),
                gw.clone(),
                true
            ),
            (
                30060,
                "ip4.src == 172.17.0.0/24 && ip4.dst == 172.17.0.0/24".into(),
                "allow".into(),
                vec![],
                true
            ),
            (
                30050,
                "ip4.src == 172.17.0.0/24".into(),
                "reroute".into(),
                gw,
                true
            ),
        ]
    );
    assert_eq!(
        p.exclude_sets,
        [("ul.u2o_exclude_ip.ip4".to_owned(), vec!["172.18.0.2".to_owned()])]
    );
    assert_eq!(p.routes.len(), 1);
}
