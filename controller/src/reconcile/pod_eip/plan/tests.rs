use super::*;

fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn the_annotations_ask_for_ipv4_addresses_each_once() {
    assert_eq!(wanted(&ann(&[])).unwrap(), []);
    assert_eq!(
        wanted(&ann(&[
            (keys::EIP, "10.200.0.150"),
            (keys::SNAT, " 10.200.0.151 ")
        ]))
        .unwrap(),
        [(Kind::Eip, v4("10.200.0.150")), (Kind::Snat, v4("10.200.0.151"))]
    );
    assert_eq!(wanted(&ann(&[(keys::SNAT, "")])).unwrap(), [], "empty is absent");
    let r = wanted(&ann(&[(keys::EIP, "ten")])).unwrap_err();
    assert_eq!(r.annotation, keys::EIP);
    let r = wanted(&ann(&[(keys::SNAT, "fd00::1")])).unwrap_err();
    assert!(r.annotation == keys::SNAT && r.why.contains("only IPv4"), "{r:?}");
    let r = wanted(&ann(&[(keys::EIP, "10.200.0.150"), (keys::SNAT, "10.200.0.150")])).unwrap_err();
    assert_eq!(r.annotation, keys::SNAT);
}

#[test]
fn an_address_is_refused_unless_free_in_the_external_subnet() {
    let cidrs = ["10.200.0.0/24".parse().unwrap()];
    let gateways = ["10.200.0.1".parse().unwrap()];
    let exclude = ["10.200.0.2..10.200.0.9".to_owned()];
    let in_use = ["10.200.0.20".parse().unwrap()];
    let ext = External {
        subnet: "external",
        cidrs: &cidrs,
        gateways: &gateways,
        exclude: &exclude,
        gateway_addr: Some("10.200.0.254".parse().unwrap()),
        in_use: &in_use,
    };
    let own = Kind::Eip.ipam_key("a.ns1");
    let check_ = |ip: &str, holder: Option<&str>| check(Kind::Eip, v4(ip), &ext, &own, holder);
    assert_eq!(check_("10.200.0.50", None), Ok(()));
    assert_eq!(check_("10.200.0.50", Some(own.as_str())), Ok(()), "its own");
    for (ip, holder, words) in [
        (
            "10.9.0.5",
            None,
            "not in the external subnet external (10.200.0.0/24)",
        ),
        ("10.200.0.0", None, "network or broadcast"),
        ("10.200.0.255", None, "network or broadcast"),
        ("10.200.0.1", None, "the gateway"),
        ("10.200.0.254", None, "the gateway"),
        ("10.200.0.5", None, "excluded"),
        ("10.200.0.20", None, "already in use"),
        ("10.200.0.50", Some("vpc1-external"), "already in use"),
        ("10.200.0.50", Some("eip:b.ns2"), "already in use"),
    ] {
        let r = check_(ip, holder).unwrap_err();
        assert_eq!(r.annotation, keys::EIP);
        assert!(r.why.contains(words), "{ip}: {r:?}");
        assert!(
            !r.why.contains("vpc1-external") && !r.why.contains("b.ns2"),
            "the holder is not named: {r:?}"
        );
    }
}

#[test]
fn rows_are_kube_ovns_and_keys_map_back_to_the_pod() {
    let w = [(Kind::Eip, v4("10.200.0.150")), (Kind::Snat, v4("10.200.0.151"))];
    let central = nat_rows("a.ns1", v4("10.16.0.5"), "00:00:00:01:02:03", false, &w);
    assert_eq!(central[0].kind, "dnat_and_snat");
    assert_eq!(central[0].external_ip, "10.200.0.150");
    assert_eq!(central[0].logical_ip, "10.16.0.5");
    assert_eq!(
        central[0].logical_port, None,
        "centralized: on the gateway chassis"
    );
    assert!(!central[0].stateless);
    assert_eq!(central[1].kind, "snat");
    let spread = nat_rows("a.ns1", v4("10.16.0.5"), "00:00:00:01:02:03", true, &w);
    assert_eq!(spread[0].logical_port.as_deref(), Some("a.ns1"));
    assert_eq!(spread[0].external_mac.as_deref(), Some("00:00:00:01:02:03"));
    assert!(spread[0].stateless);
    assert_eq!(spread[1].logical_port, None, "a snat row is never distributed");
    assert_eq!(Kind::of_nat_type("dnat_and_snat"), Some(Kind::Eip));
    assert_eq!(Kind::of_nat_type("snat"), Some(Kind::Snat));
    assert_eq!(Kind::of_nat_type("dnat"), None);
    let p = policy(v4("10.16.0.5"), "10.200.0.1".parse().unwrap());
    assert_eq!(
        (p.priority, p.r#match.as_str(), p.action.as_str()),
        (29250, "ip4.src == 10.16.0.5", "reroute")
    );
    assert_eq!(p.nexthops, ["10.200.0.1"]);
    assert_eq!(pod_key_of(&Kind::Eip.ipam_key("a.ns1")), Some("a.ns1"));
    assert_eq!(pod_key_of(&Kind::Snat.ipam_key("a.ns1")), Some("a.ns1"));
    assert_eq!(pod_key_of("a.ns1"), None);
    assert_eq!(pod_key_of("vpc1-external"), None);
}
