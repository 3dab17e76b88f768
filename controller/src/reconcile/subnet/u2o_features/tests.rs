use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use super::*;

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|c| c.parse().unwrap()).collect()
}

fn ip(a: &str) -> IpAddr {
    a.parse().unwrap()
}

#[test]
fn no_lb_reroutes_each_nodes_pods_service_traffic_to_its_join_address() {
    let nodes = ["node-1".to_owned(), "node2".to_owned(), "node3".to_owned()];
    // node3 has no join address yet: its group, no policy (Kube-OVN skips a node without its
    // IP CR).
    let joins = BTreeMap::from([
        ("node-1".to_owned(), vec![ip("100.64.0.2"), ip("fd00:100:64::2")]),
        ("node2".to_owned(), vec![ip("100.64.0.3")]),
    ]);
    let cidrs = nets(&["172.17.0.0/24", "fd00:17::/64"]);
    let svc = nets(&["10.96.0.0/12", "fd00:10:96::/112"]);
    let p = no_lb_plan(&NoLbInputs {
        subnet: "ul-1",
        vpc: "ovn-cluster",
        cidrs: &cidrs,
        nodes: &nodes,
        joins: &joins,
        service_cidrs: &svc,
    });
    assert_eq!(
        p.groups,
        [
            ("ul.1.node.1".to_owned(), "node-1".to_owned()),
            ("ul.1.node2".to_owned(), "node2".to_owned()),
            ("ul.1.node3".to_owned(), "node3".to_owned()),
        ]
    );
    let rows: Vec<(i64, &str, &str, &[String])> = p
        .policies
        .iter()
        .map(|(s, _)| {
            (
                s.priority,
                s.r#match.as_str(),
                s.action.as_str(),
                s.nexthops.as_slice(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        [
            (
                29400,
                "ip4.src == $ul.1.node.1_ip4 && ip4.dst == 10.96.0.0/12",
                "reroute",
                &["100.64.0.2".to_owned()][..]
            ),
            (
                29400,
                "ip6.src == $ul.1.node.1_ip6 && ip6.dst == fd00:10:96::/112",
                "reroute",
                &["fd00:100:64::2".to_owned()][..]
            ),
            (
                29400,
                "ip4.src == $ul.1.node2_ip4 && ip4.dst == 10.96.0.0/12",
                "reroute",
                &["100.64.0.3".to_owned()][..]
            ),
        ]
    );
    let ids = &p.policies[1].1;
    let want = BTreeMap::from(
        [
            ("vendor", "kube-ovn"),
            ("subnet", "ul-1"),
            ("isU2ORoutePolicy", "true"),
            ("isU2ONoLBRoutePolicy", "true"),
            ("node", "node-1"),
            ("svcCidr", "fd00:10:96::/112"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned())),
    );
    assert_eq!(ids, &want);
}

#[test]
fn no_service_cidr_of_a_family_means_no_reroute_for_it() {
    let nodes = ["n1".to_owned()];
    let joins = BTreeMap::from([("n1".to_owned(), vec![ip("100.64.0.2")])]);
    let p = no_lb_plan(&NoLbInputs {
        subnet: "ul",
        vpc: "ovn-cluster",
        cidrs: &nets(&["172.17.0.0/24"]),
        nodes: &nodes,
        joins: &joins,
        service_cidrs: &nets(&["fd00:10:96::/112"]),
    });
    assert_eq!(p.groups.len(), 1);
    assert!(p.policies.is_empty());
}

fn vs(cidrs: &[&str], underlay: bool, overlay_only: bool) -> VpcSubnet {
    VpcSubnet {
        cidrs: nets(cidrs),
        underlay,
        overlay_only,
    }
}

#[test]
fn the_overlay_cidr_sets_hold_the_vpcs_overlay_cidrs_while_a_subnet_uses_them() {
    let subnets = [
        vs(&["10.16.0.0/16", "fd00:10:16::/64"], false, false),
        vs(&["100.64.0.0/16"], false, false),
        vs(&["172.17.0.0/24"], true, false),
    ];
    assert!(overlay_cidrs_sets("ovn-cluster", &subnets).is_empty());
    let mut with = subnets.to_vec();
    with.push(vs(&["172.18.0.0/24"], true, true));
    assert_eq!(
        overlay_cidrs_sets("my-vpc", &with),
        [
            (
                "my.vpc.u2o_overlay_cidrs.ip4".to_owned(),
                vec!["10.16.0.0/16".to_owned(), "100.64.0.0/16".to_owned()]
            ),
            (
                "my.vpc.u2o_overlay_cidrs.ip6".to_owned(),
                vec!["fd00:10:16::/64".to_owned()]
            ),
        ]
    );
}

#[test]
fn load_balancing_is_off_as_kube_ovn_reads_it() {
    use clap::Parser;
    let config = |flag: &str| {
        crate::config::Flags::try_parse_from([
            "c",
            "--ovn-nb-addr=tcp:127.0.0.1:6641",
            &format!("--enable-lb={flag}"),
        ])
        .unwrap()
        .validate()
        .unwrap()
    };
    let spec = |v: Option<bool>| SubnetSpec {
        enable_lb: v,
        ..Default::default()
    };
    let (on, off) = (config("true"), config("false"));
    // `--service-cluster-ip-range` is read now (Kube-OVN's default).
    assert_eq!(on.service_cidrs, nets(&["10.96.0.0/12"]));
    assert!(!lb_off(&on, &spec(None)));
    assert!(!lb_off(&on, &spec(Some(true))));
    assert!(lb_off(&on, &spec(Some(false))));
    assert!(lb_off(&off, &spec(None)));
    // Kube-OVN: `!EnableLb || enableLb != true`, so the flag off wins.
    assert!(lb_off(&off, &spec(Some(true))));
}
