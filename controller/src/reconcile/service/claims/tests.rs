// Builders take JSON by value so that cases read as literals.
#![allow(clippy::needless_pass_by_value)]

use serde_json::json;

use super::*;

fn svc(ns: &str, name: &str, created: &str, cluster_ip: &str, extra: serde_json::Value) -> Service {
    let mut v = json!({"metadata": {"name": name, "namespace": ns, "creationTimestamp": created},
        "spec": {"clusterIP": cluster_ip, "clusterIPs": [cluster_ip], "ports": [{"port": 53}]}});
    if let Some(a) = extra.get("annotations") {
        v["metadata"]["annotations"] = a.clone();
    }
    if let Some(e) = extra.get("externalIPs") {
        v["spec"]["externalIPs"] = e.clone();
    }
    serde_json::from_value(v).unwrap()
}

fn vip(ip: &str) -> serde_json::Value {
    json!({"annotations": {"ovn.kubernetes.io/switch_lb_vip": ip}})
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Annotation VIPs inside 10.0.0.0/8 are admissible in VPC `ovn-cluster`, the rest is not;
/// external IPs inside `cidrs`.
fn decide(all: &[&Service], me: &Service, cidrs: &str) -> Granted {
    let cidrs: ExternalIpCidrs = cidrs.parse().unwrap();
    let vip_range = |_: &str, ip: IpAddr| {
        if "10.0.0.0/8".parse::<IpNet>().unwrap().contains(&ip) {
            Ok("ovn-cluster".to_owned())
        } else {
            Err(format!("{ip} is inside no subnet"))
        }
    };
    let admission = Admission {
        external_ip_cidrs: &cidrs,
        vip_range: &vip_range,
    };
    let owners = Owners::compute(all, &admission, None);
    grant(me, &claims(me).unwrap(), &owners, &admission, "ovn-cluster")
}

const DNS: &str = "10.96.0.10";

#[test]
fn another_services_cluster_ip_is_refused_whoever_is_older() {
    // The claimant is older than kube-dns: a ClusterIP is its Service's all the same.
    let dns = svc("kube-system", "kube-dns", "2026-01-02T00:00:00Z", DNS, json!({}));
    let thief = svc("tenant", "thief", "2026-01-01T00:00:00Z", "10.96.0.99", vip(DNS));
    for all in [[&dns, &thief], [&thief, &dns]] {
        let got = decide(&all, &thief, "");
        assert!(got.ips.is_empty(), "{got:?}");
        assert_eq!(
            got.refused,
            [
                "service tenant/thief: metadata.annotations[\"ovn.kubernetes.io/switch_lb_vip\"]: \
              10.96.0.10 is the ClusterIP of service kube-system/kube-dns; not used"
            ]
        );
        let owner = decide(&all, &dns, "");
        assert_eq!(owner.ips, [ip(DNS)]);
        assert!(owner.refused.is_empty());
    }
    // Nor through externalIPs, even where external IPs are allowed.
    let ext = svc(
        "tenant",
        "ext",
        "2026-01-01T00:00:00Z",
        "10.96.0.98",
        json!({"externalIPs": ["192.0.2.1", DNS]}),
    );
    let got = decide(&[&dns, &ext], &ext, "0.0.0.0/0");
    assert_eq!(got.ips, [ip("10.96.0.98"), ip("192.0.2.1")]);
    assert_eq!(
        got.refused,
        [
            "service tenant/ext: spec.externalIPs[1]: 10.96.0.10 is the ClusterIP of service kube-system/kube-dns; not used"
        ]
    );
}

#[test]
fn the_oldest_admissible_claim_wins_in_any_order_and_the_next_gets_it_when_it_goes() {
    let a = svc("b-ns", "a", "2026-01-01T00:00:00Z", "10.96.0.1", vip("10.0.0.5"));
    let b = svc("a-ns", "b", "2026-01-02T00:00:00Z", "10.96.0.2", vip("10.0.0.5"));
    // Same timestamp as a: namespace/name decides (a-ns/c before b-ns/a).
    let c = svc("a-ns", "c", "2026-01-01T00:00:00Z", "10.96.0.3", vip("10.0.0.6"));
    let d = svc("b-ns", "d", "2026-01-01T00:00:00Z", "10.96.0.4", vip("10.0.0.6"));
    for all in [[&a, &b, &c, &d], [&d, &c, &b, &a]] {
        assert_eq!(decide(&all, &a, "").ips, [ip("10.0.0.5")]);
        let got = decide(&all, &b, "");
        assert!(got.ips.is_empty());
        assert_eq!(
            got.refused,
            [
                "service a-ns/b: metadata.annotations[\"ovn.kubernetes.io/switch_lb_vip\"]: \
              10.0.0.5 is already claimed by the older service b-ns/a; not used"
            ]
        );
        assert_eq!(decide(&all, &c, "").ips, [ip("10.0.0.6")]);
        assert!(decide(&all, &d, "").ips.is_empty());
    }
    // The owner gone, the next claimant gets it.
    assert_eq!(decide(&[&b], &b, "").ips, [ip("10.0.0.5")]);
}

#[test]
fn an_inadmissible_claim_owns_nothing() {
    // The older one's VIP is outside every range: it blocks no one.
    let old = svc(
        "x",
        "old",
        "2026-01-01T00:00:00Z",
        "10.96.0.1",
        json!({"externalIPs": ["192.0.2.7"]}),
    );
    let new = svc(
        "y",
        "new",
        "2026-01-02T00:00:00Z",
        "10.96.0.2",
        json!({"externalIPs": ["192.0.2.7"]}),
    );
    let got = decide(&[&old, &new], &old, "");
    assert_eq!(got.ips, [ip("10.96.0.1")]);
    assert_eq!(
        got.refused,
        [
            "service x/old: spec.externalIPs[0]: 192.0.2.7 is outside the CIDRs the operator allows for \
          external IPs (--service-external-ip-cidrs: \"\"); not used"
        ]
    );
    let out_of_range = svc("x", "o", "2026-01-01T00:00:00Z", "10.96.0.5", vip("172.16.0.1"));
    let got = decide(&[&out_of_range], &out_of_range, "");
    assert!(got.ips.is_empty());
    assert_eq!(
        got.refused,
        [
            "service x/o: metadata.annotations[\"ovn.kubernetes.io/switch_lb_vip\"]: 172.16.0.1 is inside no subnet; not used"
        ]
    );
}

#[test]
fn external_ips_are_honoured_only_inside_the_allowed_cidrs() {
    let s = svc(
        "x",
        "s",
        "2026-01-01T00:00:00Z",
        "10.96.0.1",
        json!({"externalIPs": ["192.0.2.7", "198.51.100.1", "10.96.0.1"]}),
    );
    let got = decide(&[&s], &s, "192.0.2.0/24");
    assert_eq!(
        got.ips,
        [ip("10.96.0.1"), ip("192.0.2.7")],
        "its own ClusterIP again is fine"
    );
    assert_eq!(got.refused.len(), 1);
    assert!(got.refused[0].starts_with("service x/s: spec.externalIPs[1]: 198.51.100.1 is outside"));
    // Empty (the default): none.
    assert_eq!(decide(&[&s], &s, "").ips, [ip("10.96.0.1")]);
}

#[test]
fn a_vip_in_another_vpcs_subnet_is_refused() {
    let s = svc("x", "s", "2026-01-01T00:00:00Z", "10.96.0.1", vip("10.0.0.5"));
    let cidrs = ExternalIpCidrs::default();
    let vip_range = |_: &str, _: IpAddr| Ok("vpc1".to_owned());
    let admission = Admission {
        external_ip_cidrs: &cidrs,
        vip_range: &vip_range,
    };
    let owners = Owners::compute(&[&s], &admission, None);
    let got = grant(&s, &claims(&s).unwrap(), &owners, &admission, "ovn-cluster");
    assert!(got.ips.is_empty());
    assert!(
        got.refused[0].contains("lies in a subnet of VPC vpc1, but the service's VIPs go to VPC ovn-cluster")
    );
}

fn range(name: &str, vpc: &str, cidr: &str, binds: bool, binds_any: bool) -> SubnetRange {
    SubnetRange {
        name: name.into(),
        vpc: vpc.into(),
        cidrs: vec![cidr.parse().unwrap()],
        binds,
        binds_any,
    }
}

#[test]
fn a_subnet_admits_a_vip_when_its_vpc_and_namespace_binding_admit_the_namespace() {
    let subnets = [
        range("ovn-default", "ovn-cluster", "10.16.0.0/16", false, false),
        range("join", "ovn-cluster", "100.64.0.0/16", false, false),
        range("team-a", "ovn-cluster", "10.20.0.0/16", true, true),
        range("team-b", "ovn-cluster", "10.21.0.0/16", false, true),
        range("vpc1-net", "vpc1", "192.168.10.0/24", false, false),
        range("vpc2-net", "vpc2", "192.168.20.0/24", false, false),
    ];
    let vpcs = BTreeMap::from([("vpc1".to_owned(), vec!["a".to_owned()])]);
    let check = |a: &str| admitting_vpc("a", ip(a), &subnets, &vpcs, "ovn-cluster", "join");
    assert_eq!(
        check("10.16.0.9").unwrap(),
        "ovn-cluster",
        "unbound subnet of the default VPC"
    );
    assert_eq!(
        check("10.20.0.9").unwrap(),
        "ovn-cluster",
        "a subnet binding the namespace"
    );
    assert_eq!(
        check("192.168.10.9").unwrap(),
        "vpc1",
        "a custom VPC listing the namespace"
    );
    assert_eq!(
        check("10.21.0.9").unwrap_err(),
        "10.21.0.9 is in subnet team-b, which does not admit namespace a"
    );
    assert_eq!(
        check("192.168.20.9").unwrap_err(),
        "192.168.20.9 is in subnet vpc2-net, which does not admit namespace a"
    );
    assert_eq!(
        check("100.64.0.9").unwrap_err(),
        "100.64.0.9 is in the join subnet join"
    );
    assert_eq!(check("10.96.0.10").unwrap_err(), "10.96.0.10 is inside no subnet");
}
