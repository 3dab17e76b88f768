use super::*;

fn svc(key: &str, uid: &str, ips: &[&str]) -> ServiceView {
    ServiceView {
        key: key.into(),
        uid: uid.into(),
        cluster_ip: ips.first().map(|s| (*s).to_owned()),
        cluster_ips: ips.iter().map(|s| (*s).to_owned()).collect(),
        ..ServiceView::default()
    }
}

fn ips(d: &Decision) -> Vec<String> {
    match d {
        Decision::Set { cluster_ips, .. } => cluster_ips.iter().map(ToString::to_string).collect(),
        Decision::Warn { message, .. } => panic!("a warning: {message}"),
    }
}

#[test]
fn ranges_parse_and_bad_ones_are_refused_naming_the_flag() {
    let r = parse_ranges("10.96.0.0/12, fd00:10:96::/108").unwrap();
    assert_eq!(r.len(), 2);
    for (bad, why) in [
        ("10.96.0.1/12", "host bits"),
        ("10.96.0.0/31", "too small"),
        ("10.96.0.0/12,10.100.0.0/16", "one family"),
        ("nonsense", "not a CIDR"),
        ("", "not a CIDR"),
    ] {
        let e = parse_ranges(bad).unwrap_err().to_string();
        assert!(
            e.contains("--service-cluster-ip-range") && e.contains(why),
            "{bad}: {e}"
        );
    }
    assert_eq!(kubernetes_address(&r[0]).to_string(), "10.96.0.1");
    assert_eq!(kubernetes_address(&r[1]).to_string(), "fd00:10:96::1");
}

#[test]
fn addresses_are_unique_skip_the_first_and_are_reused_once_free() {
    let ranges = parse_ranges("10.96.0.0/29").unwrap(); // .2 to .6 allocatable
    let mut kubernetes = svc("default/kubernetes", "k", &["10.96.0.1"]);
    kubernetes.ip_families = vec!["IPv4".into()];
    kubernetes.ip_family_policy = Some("SingleStack".into());
    let mut services = vec![kubernetes];
    for i in 0..5 {
        services.push(svc(&format!("default/s{i}"), &format!("u{i}"), &[]));
    }
    let decisions = plan(&ranges, &services, &HashMap::new());
    let got: Vec<Vec<String>> = decisions.iter().map(ips).collect();
    assert_eq!(
        got,
        [
            ["10.96.0.2"],
            ["10.96.0.3"],
            ["10.96.0.4"],
            ["10.96.0.5"],
            ["10.96.0.6"]
        ]
    );
    // All taken: the next one is told the range is full.
    let mut full: Vec<ServiceView> = services[..1].to_vec();
    for (i, ip) in got.iter().enumerate() {
        let mut s = svc(&format!("default/s{i}"), &format!("u{i}"), &[ip[0].as_str()]);
        s.ip_families = vec!["IPv4".into()];
        s.ip_family_policy = Some("SingleStack".into());
        full.push(s);
    }
    full.push(svc("default/late", "late", &[]));
    let decisions = plan(&ranges, &full, &HashMap::new());
    assert!(
        matches!(&decisions[..], [Decision::Warn { message, .. }] if message.contains("is full")),
        "{decisions:?}"
    );
    // One goes: its address is the one handed out next; pending ones stay taken.
    full.remove(2); // 10.96.0.3
    let pending = HashMap::from([("x".to_owned(), vec!["10.96.0.3".parse().unwrap()])]);
    assert!(matches!(
        &plan(&ranges, &full, &pending)[..],
        [Decision::Warn { .. }]
    ));
    assert_eq!(ips(&plan(&ranges, &full, &HashMap::new())[0]), ["10.96.0.3"]);
}

#[test]
fn given_addresses_are_completed_or_warned_about() {
    let ranges = parse_ranges("10.96.0.0/24,fd00::/120").unwrap();
    let services = vec![
        svc("a/old", "1", &["10.96.0.10"]),
        svc("a/dup", "2", &["10.96.0.10"]),
        svc("a/out", "3", &["192.0.2.1"]),
        svc("a/headless", "4", &["None"]),
    ];
    let d = plan(&ranges, &services, &HashMap::new());
    assert_eq!(
        d[0],
        Decision::Set {
            key: "a/old".into(),
            uid: "1".into(),
            cluster_ips: vec!["10.96.0.10".parse().unwrap()],
            ip_families: vec!["IPv4".into()],
            ip_family_policy: "SingleStack".into(),
        }
    );
    assert!(
        matches!(&d[1], Decision::Warn { key, message, .. } if key == "a/dup" && message.contains("already allocated (by a/old)")),
        "{d:?}"
    );
    assert!(
        matches!(&d[2], Decision::Warn { key, message, .. } if key == "a/out" && message.contains("not in the valid range")),
        "{d:?}"
    );
    assert_eq!(d.len(), 3, "warned ones and headless ones are left alone: {d:?}");
}

#[test]
fn families_follow_the_policy_and_the_ranges() {
    let dual = parse_ranges("fd00::/120,10.96.0.0/24").unwrap();
    let mut s = svc("a/s", "1", &[]);
    assert_eq!(ips(&plan(&dual, &[s.clone()], &HashMap::new())[0]), ["fd00::2"]);
    s.ip_family_policy = Some("PreferDualStack".into());
    assert_eq!(
        ips(&plan(&dual, &[s.clone()], &HashMap::new())[0]),
        ["fd00::2", "10.96.0.2"]
    );
    s.ip_families = vec!["IPv4".into()];
    let d = plan(&dual, &[s.clone()], &HashMap::new());
    assert_eq!(ips(&d[0]), ["10.96.0.2", "fd00::2"]);
    assert!(matches!(&d[0], Decision::Set { ip_families, .. } if ip_families == &["IPv4", "IPv6"]));
    let single = parse_ranges("10.96.0.0/24").unwrap();
    s.ip_family_policy = Some("RequireDualStack".into());
    s.ip_families = vec![];
    assert!(
        matches!(&plan(&single, &[s.clone()], &HashMap::new())[0], Decision::Warn { message, .. } if message.contains("RequireDualStack"))
    );
    s.ip_family_policy = None;
    s.ip_families = vec!["IPv6".into()];
    assert!(
        matches!(&plan(&single, &[s], &HashMap::new())[0], Decision::Warn { message, .. } if message.contains("spec.ipFamilies[0]"))
    );
}
