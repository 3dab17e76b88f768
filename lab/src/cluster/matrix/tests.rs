use super::*;

fn target(name: &str, vpc: &str, announced: bool, nat: bool) -> Target {
    let node_ip: IpAddr = "172.30.0.11".parse().unwrap();
    Target {
        namespace: "demo".into(),
        name: name.into(),
        node: "node1".into(),
        ip: "10.16.0.5".parse().unwrap(),
        ip6: None,
        port: 8080,
        subnet: "s".into(),
        vpc: vpc.into(),
        announced,
        nat_outgoing: nat,
        attachment: Attachment::Overlay,
        egress_ips: if nat { vec![node_ip] } else { vec![] },
        egress_eip: None,
        labels: BTreeMap::new(),
        namespace_labels: BTreeMap::new(),
        named_ports: BTreeMap::new(),
    }
}

/// A Service in `demo` at 10.96.0.10:80 in the default VPC, not reachable from outside.
fn service(name: &str, backends: &[&str]) -> ServiceTarget {
    ServiceTarget {
        namespace: "demo".into(),
        name: name.into(),
        ip: "10.96.0.10".parse().unwrap(),
        port: 80,
        vpc: DEFAULT_VPC.into(),
        backends: backends.iter().map(|b| (*b).to_owned()).collect(),
        outside_ip: None,
        ingress_sources: vec![],
        local: false,
        local_next_hops: vec![],
        communities: vec![],
    }
}

#[test]
fn expectations_follow_vpcs_and_announcements() {
    let targets = [
        target("a", DEFAULT_VPC, true, false),
        target("b", DEFAULT_VPC, false, true),
        target("c", "vpc1", false, false),
    ];
    let services = [service("hello", &["h1", "h2"])];
    let checks = plan(&targets, &services, &[], &[]);
    let find = |kind, from, to| {
        checks
            .iter()
            .find(|c| c.kind == kind && c.from == from && c.to == to)
            .unwrap()
    };
    assert_eq!(
        find(Kind::PodToPod, Some(0), Some(1)).expect,
        Expect::Answer("b".into())
    );
    assert_eq!(find(Kind::PodToPod, Some(0), Some(2)).expect, Expect::Blocked);
    assert_eq!(find(Kind::PodToPod, Some(2), Some(1)).expect, Expect::Blocked);
    assert!(matches!(
        find(Kind::OutsideToPod, None, Some(0)).expect,
        Expect::ClientIp(_)
    ));
    assert_eq!(find(Kind::OutsideToPod, None, Some(1)).expect, Expect::Blocked);
    assert_eq!(
        find(Kind::PodToOutside, Some(1), None).expect,
        Expect::ClientIp("172.30.0.11".parse().unwrap()),
        "a NATed pod is seen with its gateway's address"
    );
    assert_eq!(
        find(Kind::PodToOutside, Some(0), None).expect,
        Expect::ClientIp("10.16.0.5".parse().unwrap()),
        "an announced pod that is not NATed is seen with its own"
    );
    assert_eq!(find(Kind::PodToOutside, Some(2), None).expect, Expect::Blocked);
    assert_eq!(
        find(Kind::PodToService, Some(1), Some(0)).expect,
        Expect::AnswerIn(vec!["h1".into(), "h2".into()]),
        "a pod of the Service's VPC is answered by one of its backends"
    );
    assert_eq!(
        find(Kind::PodToService, Some(2), Some(0)).expect,
        Expect::Blocked,
        "another VPC has no VIP for it"
    );
    assert_eq!(checks.len(), 3 * 2 + 3 * 2 + 3);
    let none_ready = ServiceTarget {
        backends: vec![],
        ..services[0].clone()
    };
    assert!(
        plan(&targets, &[none_ready], &[], &[])
            .iter()
            .filter(|c| c.kind == Kind::PodToService)
            .all(|c| c.expect == Expect::Blocked),
        "no ready endpoint: no answer, not a stale backend"
    );
}

#[test]
fn network_policies_turn_answers_into_silence() {
    let mut targets = [
        target("a", DEFAULT_VPC, true, false),
        target("b", DEFAULT_VPC, true, false),
    ];
    targets[1].labels.insert("app".into(), "b".into());
    let deny_b: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "deny", "namespace": "demo"},
        "spec": {"podSelector": {"matchLabels": {"app": "b"}}}}))
    .unwrap();
    let services = [service("s", &["a", "b"])];
    let checks = plan(&targets, &services, &[], &[deny_b]);
    let find = |kind, from, to| {
        checks
            .iter()
            .find(|c| c.kind == kind && c.from == from && c.to == to)
    };
    assert_eq!(
        find(Kind::PodToPod, Some(0), Some(1)).unwrap().expect,
        Expect::Blocked
    );
    assert_eq!(
        find(Kind::PodToPod, Some(1), Some(0)).unwrap().expect,
        Expect::Answer("a".into()),
        "b's egress is not isolated"
    );
    assert_eq!(
        find(Kind::OutsideToPod, None, Some(1)).unwrap().expect,
        Expect::Blocked
    );
    assert!(matches!(
        find(Kind::OutsideToPod, None, Some(0)).unwrap().expect,
        Expect::ClientIp(_)
    ));
    assert!(
        find(Kind::PodToService, Some(0), Some(0)).is_none(),
        "one backend admits a, the other not: no expectation"
    );
}

#[test]
fn outside_reaches_announced_default_vpc_services_as_policies_let_the_nodes_through() {
    let mut targets = [
        target("a", DEFAULT_VPC, false, false),
        target("b", DEFAULT_VPC, false, false),
    ];
    targets[1].labels.insert("app".into(), "b".into());
    let lb = ServiceTarget {
        outside_ip: Some("203.0.113.1".parse().unwrap()),
        ingress_sources: vec!["100.64.0.2".parse().unwrap(), "100.64.0.3".parse().unwrap()],
        ..service("s", &["a", "b"])
    };
    let not_announced = ServiceTarget {
        outside_ip: None,
        ..lb.clone()
    };
    let custom_vpc = ServiceTarget {
        vpc: "vpc1".into(),
        ..lb.clone()
    };
    let outside = |services: &[ServiceTarget], policies: &[NetworkPolicy]| -> Vec<(usize, Expect)> {
        plan(&targets, services, &[], policies)
            .into_iter()
            .filter(|c| c.kind == Kind::OutsideToService)
            .map(|c| (c.to.unwrap(), c.expect))
            .collect()
    };
    assert_eq!(
        outside(&[lb.clone(), not_announced, custom_vpc], &[]),
        vec![
            (0, Expect::AnswerIn(vec!["a".into(), "b".into()])),
            (2, Expect::Blocked),
        ],
        "announced: any backend answers; not announced: nothing to probe; a custom VPC: no way in"
    );
    let policy = |from: serde_json::Value| -> NetworkPolicy {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "demo"},
            "spec": {"podSelector": {}, "ingress": [{"from": from}]}}))
        .unwrap()
    };
    let only_joins = policy(serde_json::json!([{"ipBlock": {"cidr": "100.64.0.0/16"}}]));
    assert_eq!(
        outside(std::slice::from_ref(&lb), &[only_joins]),
        vec![(0, Expect::AnswerIn(vec!["a".into(), "b".into()]))]
    );
    let one_node = policy(serde_json::json!([{"ipBlock": {"cidr": "100.64.0.2/32"}}]));
    assert!(
        outside(std::slice::from_ref(&lb), &[one_node]).is_empty(),
        "whether it answers depends on the node the ToR picks: nothing to expect"
    );
    let pods_only = policy(serde_json::json!([{"podSelector": {}}]));
    assert_eq!(
        outside(std::slice::from_ref(&lb), &[pods_only]),
        vec![(0, Expect::Blocked)],
        "no backend admits the nodes' join addresses"
    );
}

#[test]
fn judging_answers() {
    assert!(judge(&Expect::Answer("a".into()), Some("a")));
    assert!(!judge(&Expect::Answer("a".into()), Some("b")));
    assert!(!judge(&Expect::Answer("a".into()), None));
    assert!(judge(&Expect::Blocked, None));
    assert!(
        !judge(&Expect::Blocked, Some("a")),
        "an answer where none should come is a failure"
    );
    let ip: IpAddr = "198.51.100.10".parse().unwrap();
    assert!(judge(&Expect::ClientIp(ip), Some("198.51.100.10:41234")));
    assert!(
        !judge(&Expect::ClientIp(ip), Some("172.30.0.11:41234")),
        "a NATed source is not the client's"
    );
    assert_eq!(client_ip("[fd00::1]:80"), Some("fd00::1".parse().unwrap()));
    let backends = Expect::AnswerIn(vec!["h1".into(), "h2".into()]);
    assert!(judge(&backends, Some("h2")));
    assert!(!judge(&backends, Some("web-1")), "a pod that is not a backend");
    assert!(!judge(&backends, None));
}

#[test]
fn the_rendering_names_failures() {
    let targets = vec![
        target("a", DEFAULT_VPC, true, false),
        target("c", "vpc1", false, false),
    ];
    let checks = plan(&targets, &[], &[], &[]);
    let outcomes = checks
        .into_iter()
        .map(|check| {
            let answer = if check.kind == Kind::PodToPod && check.from == Some(0) {
                Ok("c".to_owned())
            } else {
                Err("no answer".to_owned())
            };
            Outcome { check, answer }
        })
        .collect();
    let report = Report {
        eips: vec![],
        targets,
        services: vec![],
        policies: 0,
        outcomes,
    };
    assert!(!report.healthy());
    let text = report.render();
    assert!(text.contains("LEAKS"), "{text}");
    assert!(text.contains("demo/a → demo/c /hostname"), "{text}");
}

/// An underlay pod of subnet `underlay` (10.100.0.0/24) on `node`, `natOutgoing` set (which an
/// underlay ignores: its gateway is the physical router).
fn underlay(name: &str, node: &str, u2o: bool) -> Target {
    Target {
        namespace: "underlay".into(),
        node: node.into(),
        ip: format!("10.100.0.{}", 10 + name.len()).parse().unwrap(),
        subnet: "underlay".into(),
        attachment: Attachment::Underlay { u2o },
        ..target(name, DEFAULT_VPC, false, true)
    }
}

#[test]
fn underlay_pods_use_the_fabric_and_reach_overlay_pods_through_u2o() {
    let targets = [
        target("overlay", DEFAULT_VPC, false, true),
        target("tenant", "vpc1", false, false),
        underlay("u-1", "node1", true),
        underlay("u-22", "node2", true),
    ];
    let services = [service("hello", &["h1"])];
    let checks = plan(&targets, &services, &[], &[]);
    let find = |kind, from, to| {
        checks
            .iter()
            .find(|c| c.kind == kind && c.from == from && c.to == to)
            .map(|c| c.expect.clone())
    };
    let outside: IpAddr = "198.51.100.10".parse().unwrap();
    for u in [2, 3] {
        let ip = targets[u].ip;
        assert_eq!(
            find(Kind::PodToOutside, Some(u), None),
            Some(Expect::ClientIp(ip)),
            "the outside host sees the underlay pod's own address, not a node's"
        );
        assert_eq!(
            find(Kind::OutsideToPod, None, Some(u)),
            Some(Expect::ClientIp(outside)),
            "the ToR reaches the underlay pod on its VLAN, no BGP route, no NAT"
        );
        for (from, to) in [(u, 0), (0, u)] {
            assert_eq!(
                find(Kind::PodToPod, Some(from), Some(to)),
                Some(Expect::Answer(targets[to].name.clone())),
                "U2O: {from} → {to}"
            );
        }
        assert_eq!(find(Kind::PodToPod, Some(u), Some(1)), Some(Expect::Blocked));
        assert_eq!(find(Kind::PodToPod, Some(1), Some(u)), Some(Expect::Blocked));
        assert_eq!(
            find(Kind::PodToService, Some(u), Some(0)),
            Some(Expect::AnswerIn(vec!["h1".into()]))
        );
    }
    assert_eq!(
        find(Kind::PodToPod, Some(2), Some(3)),
        Some(Expect::Answer("u-22".into())),
        "across nodes over the VLAN"
    );
    assert_eq!(
        find(Kind::PodToPod, Some(3), Some(2)),
        Some(Expect::Answer("u-1".into()))
    );

    // Without U2O: the fabric rows stay, the overlay ones are not made (they depend on the
    // physical network's routes), nor the Services' (no router port for the load balancers).
    let targets = [
        target("overlay", DEFAULT_VPC, false, true),
        underlay("u-1", "node1", false),
        underlay("u-22", "node2", false),
    ];
    let checks = plan(&targets, &services, &[], &[]);
    let made = |kind, from, to| {
        checks
            .iter()
            .any(|c| c.kind == kind && c.from == from && c.to == to)
    };
    assert!(!made(Kind::PodToPod, Some(0), Some(1)) && !made(Kind::PodToPod, Some(1), Some(0)));
    assert!(made(Kind::PodToPod, Some(1), Some(2)) && made(Kind::OutsideToPod, None, Some(1)));
    assert!(!made(Kind::PodToService, Some(1), Some(0)));
    let report = Report {
        eips: vec![],
        targets: targets.to_vec(),
        services: vec![],
        policies: 0,
        outcomes: vec![],
    };
    assert!(
        report
            .render()
            .contains("subnet underlay (vpc ovn-cluster), natOutgoing, underlay\n")
    );
}

/// vpc1 pods: `t1` has a FIP, `t2` sits behind a DNAT rule, every pod of vpc1-net is SNATed,
/// and one /32 SNAT rule is more specific for `t3`.
#[test]
fn a_custom_vpc_reaches_out_through_its_eips_and_is_reached_at_them() {
    let pod = |name: &str, ip: &str| Target {
        namespace: "vpc1".into(),
        ip: ip.parse().unwrap(),
        subnet: "vpc1-net".into(),
        ..target(name, "vpc1", false, false)
    };
    let eip = |s: &str| -> IpAddr { s.parse().unwrap() };
    let rules = NatRules {
        fips: vec![external::Fip {
            name: "t1".into(),
            eip: eip("10.200.0.101"),
            namespace: "vpc1".into(),
            pod: "t1".into(),
        }],
        snats: vec![
            external::Snat {
                name: "net".into(),
                eip: eip("10.200.0.100"),
                vpc: "vpc1".into(),
                cidr: "192.168.10.0/24".parse().unwrap(),
            },
            external::Snat {
                name: "one".into(),
                eip: eip("10.200.0.103"),
                vpc: "vpc1".into(),
                cidr: "192.168.10.4/32".parse().unwrap(),
            },
            external::Snat {
                name: "other-vpc".into(),
                eip: eip("10.200.0.104"),
                vpc: "vpc2".into(),
                cidr: "192.168.10.0/24".parse().unwrap(),
            },
        ],
        dnats: vec![
            external::Dnat {
                name: "web".into(),
                eip: eip("10.200.0.102"),
                external_port: 80,
                namespace: "vpc1".into(),
                pod: "t2".into(),
                internal_port: 8080,
            },
            external::Dnat {
                name: "wrong-port".into(),
                eip: eip("10.200.0.102"),
                external_port: 81,
                namespace: "vpc1".into(),
                pod: "t2".into(),
                internal_port: 9999,
            },
            external::Dnat {
                name: "no-such-pod".into(),
                eip: eip("10.200.0.102"),
                external_port: 82,
                namespace: "vpc1".into(),
                pod: "gone".into(),
                internal_port: 8080,
            },
        ],
    };
    let mut targets = vec![
        pod("t1", "192.168.10.2"),
        pod("t2", "192.168.10.3"),
        pod("t3", "192.168.10.4"),
        target("d", DEFAULT_VPC, false, true),
    ];
    for t in &mut targets {
        t.egress_eip = rules.egress(t);
    }
    // The FIP wins over the SNAT, the /32 over the /24, another VPC's rule is not ours; the
    // default VPC's pod is not NATed by a custom VPC's rules.
    assert_eq!(targets[0].egress_eip, Some(eip("10.200.0.101")));
    assert_eq!(targets[1].egress_eip, Some(eip("10.200.0.100")));
    assert_eq!(targets[2].egress_eip, Some(eip("10.200.0.103")));
    assert_eq!(targets[3].egress_eip, None);
    let eips = rules.eip_targets(&targets);
    assert_eq!(eips.len(), 3, "{eips:?}");
    let checks = plan(&targets, &[], &eips, &[]);
    let out = |i: usize| {
        checks
            .iter()
            .find(|c| c.kind == Kind::PodToOutside && c.from == Some(i))
            .map(|c| c.expect.clone())
    };
    assert_eq!(out(0), Some(Expect::ClientIp(eip("10.200.0.101"))));
    assert_eq!(out(2), Some(Expect::ClientIp(eip("10.200.0.103"))));
    assert_eq!(out(3), Some(Expect::ClientIp(eip("172.30.0.11"))));
    let outside_ip: IpAddr = crate::cluster::topology::Topology::outside_ip().into();
    let to_eip: Vec<(String, u16, Expect, &str)> = checks
        .iter()
        .filter(|c| c.kind == Kind::OutsideToEip)
        .map(|c| {
            let e = &eips[c.to.unwrap()];
            (e.label.clone(), e.port, c.expect.clone(), c.path)
        })
        .collect();
    assert_eq!(
        to_eip,
        vec![
            ("fip t1".into(), 8080, Expect::ClientIp(outside_ip), "/clientip"),
            ("dnat web".into(), 80, Expect::Answer("t2".into()), "/hostname"),
            ("dnat wrong-port".into(), 81, Expect::Blocked, "/hostname"),
        ]
    );
    // Out through the EIP, back in through the fabric: an announced default-VPC pod and an
    // underlay pod answer; a default-VPC pod that is not announced has no route at the ToR.
    let mut announced = target("a", DEFAULT_VPC, true, false);
    announced.ip = eip("10.17.0.2");
    let mut fabric = targets.clone();
    fabric.extend([
        announced,
        underlay("u", "node2", false),
        target("quiet", DEFAULT_VPC, false, true),
    ]);
    let reached = plan(&fabric, &[], &[], &[]);
    let pod_to = |from: usize, to: usize| {
        reached
            .iter()
            .find(|c| c.kind == Kind::PodToPod && c.from == Some(from) && c.to == Some(to))
            .map(|c| c.expect.clone())
    };
    assert_eq!(pod_to(1, 4), Some(Expect::Answer("a".into())));
    assert_eq!(pod_to(0, 5), Some(Expect::Answer("u".into())));
    assert_eq!(pod_to(1, 6), Some(Expect::Blocked));
    // …and not the other way: vpc1's own addresses are not routed outside it.
    assert_eq!(pod_to(4, 1), Some(Expect::Blocked));
    // The pods' own addresses stay unreachable from outside.
    assert!(
        checks
            .iter()
            .filter(|c| c.kind == Kind::OutsideToPod && c.to.is_some_and(|j| j < 3))
            .all(|c| c.expect == Expect::Blocked)
    );
    let report = Report {
        targets,
        services: vec![],
        eips,
        policies: 0,
        outcomes: vec![],
    };
    let text = report.render();
    assert!(text.contains("fip t1 at 10.200.0.101:8080 → vpc1/t1"), "{text}");
    assert!(text.contains("(nothing listens on its internal port)"), "{text}");
}

/// Dual-stack pods get the outside host's rows again over IPv6 (announced: answered, each side
/// seeing the other's own IPv6 address; not announced: no answer); IPv4-only pods get none, and
/// a policy keeping the outside host's IPv6 address out silences the way in.
#[test]
fn dual_stack_pods_get_ipv6_rows_to_and_from_the_outside_host() {
    let dual = |name: &str, announced: bool, ip6: &str| Target {
        ip6: Some(ip6.parse().unwrap()),
        ..target(name, DEFAULT_VPC, announced, false)
    };
    let targets = [
        dual("d1", true, "fd00:10:66::b"),
        dual("d2", false, "fd00:10:66::c"),
        target("v4", DEFAULT_VPC, true, false),
    ];
    let checks = plan(&targets, &[], &[], &[]);
    let find = |kind: Kind, from: Option<usize>, to: Option<usize>| {
        checks
            .iter()
            .find(|c| c.kind == kind && c.from == from && c.to == to)
            .map(|c| c.expect.clone())
    };
    let outside: IpAddr = "fd00:198:51:100::10".parse().unwrap();
    assert_eq!(
        find(Kind::OutsideToPod6, None, Some(0)),
        Some(Expect::ClientIp(outside))
    );
    assert_eq!(
        find(Kind::PodToOutside6, Some(0), None),
        Some(Expect::ClientIp("fd00:10:66::b".parse().unwrap()))
    );
    assert_eq!(find(Kind::OutsideToPod6, None, Some(1)), Some(Expect::Blocked));
    assert_eq!(find(Kind::PodToOutside6, Some(1), None), Some(Expect::Blocked));
    assert_eq!(find(Kind::OutsideToPod6, None, Some(2)), None);
    assert_eq!(find(Kind::PodToOutside6, Some(2), None), None);
    // The IPv4 rows are still there for the dual-stack pods.
    assert!(find(Kind::OutsideToPod, None, Some(0)).is_some());

    // Ingress only from 198.51.100.0/24: the outside host's IPv6 address is not in it.
    let policy: NetworkPolicy = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "v4-only", "namespace": "demo"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"],
                 "ingress": [{"from": [{"ipBlock": {"cidr": "198.51.100.0/24"}}]}]}
    }))
    .unwrap();
    let checks = plan(&targets, &[], &[], &[policy]);
    let expect = |kind: Kind, to: Option<usize>| {
        checks
            .iter()
            .find(|c| c.kind == kind && c.to == to && c.from.is_none())
            .map(|c| c.expect.clone())
    };
    assert_eq!(expect(Kind::OutsideToPod6, Some(0)), Some(Expect::Blocked));
    assert_eq!(
        expect(Kind::OutsideToPod, Some(0)),
        Some(Expect::ClientIp("198.51.100.10".parse().unwrap()))
    );

    let outcomes = plan(&targets, &[], &[], &[])
        .into_iter()
        .filter(|c| matches!(c.kind, Kind::OutsideToPod6 | Kind::PodToOutside6))
        .map(|check| {
            let answer = match &check.expect {
                Expect::ClientIp(ip) => Ok(format!("[{ip}]:40000")),
                _ => Err("timed out".to_owned()),
            };
            Outcome { check, answer }
        })
        .collect();
    let report = Report {
        eips: vec![],
        targets: targets.to_vec(),
        services: vec![],
        policies: 0,
        outcomes,
    };
    let text = report.render();
    assert!(report.healthy(), "{text}");
    let d1 = text
        .lines()
        .find(|l| l.trim_start().starts_with("demo/d1 ") && l.contains("(IPv6)"))
        .unwrap_or_default();
    assert!(
        d1.contains("outside → pod (IPv6): ok ")
            && d1.contains("pod → outside (IPv6): ok ")
            && d1.ends_with("(the outside saw fd00:10:66::b)"),
        "{text}"
    );
    assert!(text.contains("outside → pod (IPv6): blocked"), "{text}");
    assert!(text.contains(", IPv6 fd00:10:66::b"), "{text}");
    assert!(!text.contains("demo/v4  outside → pod (IPv6)"), "{text}");
}
