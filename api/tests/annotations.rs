//! Annotation values: a table of bad values, each giving the typed error that names the key and
//! the value, and a table of good values that round-trip parse → format unchanged.

use kube_ovn_api::annotations::{
    AnnotationError, AnnotationValue, BgpPolicy, CidrBlocks, CidrPair, ExcludeIpLists, GatewayNodes,
    IpFamily, IpPair, IpPoolAnnotation, IpRange, LossPercent, MacAddr, Mbit, Mbps, Milliseconds, NameList,
    Packets, Problem, Routes, TrueFlag, keys, parse, provider_key,
};

/// Parses `value` under `key` as `T` and returns the error, checking that it names both.
fn error_of<T: AnnotationValue + std::fmt::Debug>(key: &str, value: &str) -> AnnotationError {
    let err = parse::<T>(key, value).expect_err(&format!("{key}={value:?} should be rejected"));
    assert_eq!(err.key, key);
    assert_eq!(err.value, value);
    assert_eq!(err.expected, T::EXPECTED);
    let text = err.to_string();
    assert!(
        text.contains(key) && text.contains(&format!("{value:?}")),
        "message names key and value: {text}"
    );
    err
}

#[test]
fn bad_values_give_typed_errors() {
    let ip = keys::IP_ADDRESS;
    let cases: Vec<(AnnotationError, Problem)> = vec![
        // Addresses.
        (error_of::<IpPair>(ip, ""), Problem::Empty),
        (
            error_of::<IpPair>(ip, "10.0.0.256"),
            Problem::BadIp("10.0.0.256".into()),
        ),
        (error_of::<IpPair>(ip, "10.0.0"), Problem::BadIp("10.0.0".into())),
        (
            error_of::<IpPair>(ip, "010.0.0.1"),
            Problem::BadIp("010.0.0.1".into()),
        ),
        (
            error_of::<IpPair>(ip, "fd00::1::2"),
            Problem::BadIp("fd00::1::2".into()),
        ),
        (
            error_of::<IpPair>(ip, "10.0.0.0/24"),
            Problem::BadIp("10.0.0.0/24".into()),
        ),
        (
            error_of::<IpPair>(ip, "10.0.0.1,10.0.0.2"),
            Problem::DuplicateFamily(IpFamily::V4),
        ),
        (
            error_of::<IpPair>(ip, "fd00::1,fd00::2"),
            Problem::DuplicateFamily(IpFamily::V6),
        ),
        (
            error_of::<IpPair>(ip, "10.0.0.1,fd00::1,10.0.0.2"),
            Problem::TooMany { found: 3, max: 2 },
        ),
        (error_of::<IpPair>(ip, "10.0.0.1,"), Problem::EmptyElement),
        (error_of::<IpPair>(ip, "10.0.0.1, fd00::1"), Problem::Whitespace),
        (
            error_of::<IpPair>(keys::GATEWAY, "gateway"),
            Problem::BadIp("gateway".into()),
        ),
        (
            error_of::<CidrPair>(keys::CIDR, "10.16.0.0"),
            Problem::BadCidr("10.16.0.0".into()),
        ),
        (
            error_of::<CidrPair>(keys::CIDR, "10.16.0.0/33"),
            Problem::BadCidr("10.16.0.0/33".into()),
        ),
        (
            error_of::<CidrPair>(keys::CIDR, "10.16.0.0/16,10.17.0.0/16"),
            Problem::DuplicateFamily(IpFamily::V4),
        ),
        (
            error_of::<MacAddr>(keys::MAC_ADDRESS, "00:11:22:33:44"),
            Problem::BadMac("00:11:22:33:44".into()),
        ),
        (
            error_of::<MacAddr>(keys::MAC_ADDRESS, "00:11:22:33:44:gg"),
            Problem::BadMac("00:11:22:33:44:gg".into()),
        ),
        (
            error_of::<MacAddr>(keys::MAC_ADDRESS, "00:11:22:33:44:55:66"),
            Problem::BadMac("00:11:22:33:44:55:66".into()),
        ),
        (
            error_of::<MacAddr>(keys::MAC_ADDRESS, "0:11:22:33:44:55"),
            Problem::BadMac("0:11:22:33:44:55".into()),
        ),
        (error_of::<MacAddr>(keys::MAC_ADDRESS, ""), Problem::Empty),
        (
            error_of::<IpFamily>(keys::IP_FAMILY, "IPv4"),
            Problem::UnknownKeyword("IPv4".into()),
        ),
        (
            error_of::<IpRange>("excludeIps", "10.0.0.9..10.0.0.1"),
            Problem::ReversedRange("10.0.0.9..10.0.0.1".into()),
        ),
        (
            error_of::<IpRange>("excludeIps", "10.0.0.1..fd00::1"),
            Problem::MixedFamilies("10.0.0.1..fd00::1".into()),
        ),
        // Namespace lists.
        (
            error_of::<CidrBlocks>(keys::CIDR, "10.66.0.0/16;;10.67.0.0/16"),
            Problem::EmptyElement,
        ),
        (
            error_of::<CidrBlocks>(keys::CIDR, "10.66.0.0/16;bogus"),
            Problem::BadCidr("bogus".into()),
        ),
        (
            error_of::<ExcludeIpLists>(keys::EXCLUDE_IPS, "10.66.0.1;10.67.0.x"),
            Problem::BadIp("10.67.0.x".into()),
        ),
        (
            error_of::<NameList>(keys::LOGICAL_SWITCH, "ovn-default,,net1"),
            Problem::EmptyElement,
        ),
        (
            error_of::<NameList>(keys::LOGICAL_SWITCH, "Net_1"),
            Problem::BadName("Net_1".into()),
        ),
        // ip_pool.
        (
            error_of::<IpPoolAnnotation>(keys::IP_POOL, "10.0.0.1,10.0.0.x"),
            Problem::BadIp("10.0.0.x".into()),
        ),
        (
            error_of::<IpPoolAnnotation>(keys::IP_POOL, "10.0.0.300"),
            Problem::BadIp("10.0.0.300".into()),
        ),
        (
            error_of::<IpPoolAnnotation>(keys::IP_POOL, "10.0.0.1;;10.0.0.2"),
            Problem::EmptyElement,
        ),
        (
            error_of::<IpPoolAnnotation>(keys::IP_POOL, "10.0.0.1,10.0.0.2;10.0.0.3"),
            Problem::DuplicateFamily(IpFamily::V4),
        ),
        (
            error_of::<IpPoolAnnotation>(keys::IP_POOL, "My Pool"),
            Problem::BadName("My Pool".into()),
        ),
        (error_of::<IpPoolAnnotation>(keys::IP_POOL, "   "), Problem::Empty),
        // Routes.
        (
            error_of::<Routes>(keys::ROUTES, r#"{"dst":"10.0.0.0/8"}"#),
            json_problem(),
        ),
        (
            error_of::<Routes>(keys::ROUTES, r#"[{"dst":"10.0.0.0/8","gw":"10.0.0.300"}]"#),
            json_problem(),
        ),
        (
            error_of::<Routes>(keys::ROUTES, r#"[{"dst":"10.0.0.0","gw":"10.0.0.1"}]"#),
            json_problem(),
        ),
        (
            error_of::<Routes>(keys::ROUTES, r#"[{"dst":"10.0.0.0/8","gw":"10.0.0.1""#),
            json_problem(),
        ),
        (error_of::<Routes>(keys::ROUTES, "[{}]"), json_problem()),
        (
            error_of::<Routes>(keys::ROUTES, r#"[{"dst":"10.0.0.0/8","gw":"fd00::1"}]"#),
            Problem::MixedFamilies("10.0.0.0/8 via fd00::1".into()),
        ),
        // BGP.
        (
            error_of::<BgpPolicy>(keys::BGP, "yes"),
            Problem::UnknownKeyword("yes".into()),
        ),
        (
            error_of::<BgpPolicy>(keys::BGP, "True"),
            Problem::UnknownKeyword("True".into()),
        ),
        (
            error_of::<BgpPolicy>(keys::BGP, "Local"),
            Problem::UnknownKeyword("Local".into()),
        ),
        (
            error_of::<BgpPolicy>(keys::BGP, "false"),
            Problem::UnknownKeyword("false".into()),
        ),
        (error_of::<BgpPolicy>(keys::BGP, ""), Problem::Empty),
        // QoS.
        (
            error_of::<Mbps>(keys::INGRESS_RATE, "-1"),
            Problem::NotANumber("-1".into()),
        ),
        (
            error_of::<Mbps>(keys::INGRESS_RATE, "+5"),
            Problem::NotANumber("+5".into()),
        ),
        (
            error_of::<Mbps>(keys::INGRESS_RATE, "1.5"),
            Problem::NotANumber("1.5".into()),
        ),
        (
            error_of::<Mbps>(keys::EGRESS_RATE, "100M"),
            Problem::NotANumber("100M".into()),
        ),
        (
            error_of::<Mbps>(keys::EGRESS_RATE, "fast"),
            Problem::NotANumber("fast".into()),
        ),
        (
            error_of::<Mbps>(keys::EGRESS_RATE, " 100"),
            Problem::NotANumber(" 100".into()),
        ),
        (
            error_of::<Mbps>(keys::EGRESS_RATE, "9223372036855"),
            Problem::OutOfRange("9223372036855".into()),
        ),
        (
            error_of::<Mbit>(keys::EGRESS_BURST, "-10"),
            Problem::NotANumber("-10".into()),
        ),
        (
            error_of::<Milliseconds>(keys::LATENCY, "10ms"),
            Problem::NotANumber("10ms".into()),
        ),
        (
            error_of::<Milliseconds>(keys::JITTER, "4294967296"),
            Problem::OutOfRange("4294967296".into()),
        ),
        (
            error_of::<Packets>(keys::LIMIT, "-1"),
            Problem::NotANumber("-1".into()),
        ),
        (
            error_of::<LossPercent>(keys::LOSS, "101"),
            Problem::OutOfRange("101".into()),
        ),
        (
            error_of::<LossPercent>(keys::LOSS, "-5"),
            Problem::NotANumber("-5".into()),
        ),
        (
            error_of::<LossPercent>(keys::LOSS, "NaN"),
            Problem::NotANumber("NaN".into()),
        ),
        // Literal flags.
        (
            error_of::<TrueFlag>(keys::ALLOCATED, "True"),
            Problem::UnknownKeyword("True".into()),
        ),
        (
            error_of::<TrueFlag>(keys::ROUTED, "false"),
            Problem::UnknownKeyword("false".into()),
        ),
        (
            error_of::<TrueFlag>(keys::ROUTED, "1"),
            Problem::UnknownKeyword("1".into()),
        ),
        // Gateway nodes.
        (
            error_of::<GatewayNodes>("gatewayNode", "node1:not-an-ip"),
            Problem::BadIp("not-an-ip".into()),
        ),
        (
            error_of::<GatewayNodes>("gatewayNode", "Node1"),
            Problem::BadName("Node1".into()),
        ),
    ];
    for (err, problem) in cases {
        if matches!(problem, Problem::Json(_)) {
            assert!(matches!(err.problem, Problem::Json(_)), "{err}");
        } else {
            assert_eq!(err.problem, problem, "{err}");
        }
    }
}

/// Placeholder for "some JSON error" (serde's wording is not part of our contract).
fn json_problem() -> Problem {
    Problem::Json(String::new())
}

/// Good values: parse, format, and get the same text back (canonical forms), or the canonical
/// form of an accepted variant.
#[test]
fn good_values_round_trip() {
    fn check<T: AnnotationValue + std::fmt::Debug + PartialEq>(key: &str, input: &str, canonical: &str) {
        let value: T = parse(key, input).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value.to_string(), canonical, "{key}={input:?}");
        let again: T = parse(key, canonical).unwrap();
        assert_eq!(again, value, "{key}={canonical:?} parses back to the same value");
    }
    check::<IpPair>(keys::IP_ADDRESS, "10.16.0.5", "10.16.0.5");
    check::<IpPair>(keys::IP_ADDRESS, "fd00:10:16::5", "fd00:10:16::5");
    check::<IpPair>(
        keys::IP_ADDRESS,
        "10.16.0.5,fd00:10:16::5",
        "10.16.0.5,fd00:10:16::5",
    );
    // v6 first is accepted and normalised to v4 first.
    check::<IpPair>(
        keys::IP_ADDRESS,
        "fd00:10:16::5,10.16.0.5",
        "10.16.0.5,fd00:10:16::5",
    );
    // IPv6 is written in its canonical (RFC 5952) form, as Go writes it.
    check::<IpPair>(keys::IP_ADDRESS, "FD00:0010:0016:0000::5", "fd00:10:16::5");
    check::<IpPair>(
        keys::GATEWAY,
        "10.16.0.1,fd00:10:16::1",
        "10.16.0.1,fd00:10:16::1",
    );
    check::<CidrPair>(
        keys::CIDR,
        "10.16.0.0/16,fd00:10:16::/64",
        "10.16.0.0/16,fd00:10:16::/64",
    );
    check::<CidrPair>(
        keys::CIDR,
        "fd00:10:16::/64,10.16.0.0/16",
        "10.16.0.0/16,fd00:10:16::/64",
    );
    check::<MacAddr>(keys::MAC_ADDRESS, "0a:58:0a:10:00:05", "0a:58:0a:10:00:05");
    check::<MacAddr>(keys::MAC_ADDRESS, "00:00:00:0A:1B:2C", "00:00:00:0a:1b:2c");
    check::<CidrBlocks>(
        keys::CIDR,
        "10.66.0.0/16;10.67.0.0/16,fd00:67::/64",
        "10.66.0.0/16;10.67.0.0/16,fd00:67::/64",
    );
    check::<ExcludeIpLists>(
        keys::EXCLUDE_IPS,
        "10.66.0.1..10.66.0.10;10.67.0.1",
        "10.66.0.1..10.66.0.10;10.67.0.1",
    );
    check::<NameList>(keys::IP_POOL, "pool-a,pool-b", "pool-a,pool-b");
    check::<IpPoolAnnotation>(keys::IP_POOL, "pool-a", "pool-a");
    check::<IpPoolAnnotation>(
        keys::IP_POOL,
        "10.16.0.15,10.16.0.16,10.16.0.17",
        "10.16.0.15,10.16.0.16,10.16.0.17",
    );
    check::<IpPoolAnnotation>(keys::IP_POOL, "10.16.0.15;10.16.0.16", "10.16.0.15,10.16.0.16");
    check::<IpPoolAnnotation>(
        keys::IP_POOL,
        "10.16.0.15,fd00::f;10.16.0.16,fd00::10",
        "10.16.0.15,fd00::f;10.16.0.16,fd00::10",
    );
    check::<Routes>(
        keys::ROUTES,
        r#"[{"dst":"10.0.0.0/8","gw":"10.16.0.1"}]"#,
        r#"[{"dst":"10.0.0.0/8","gw":"10.16.0.1"}]"#,
    );
    check::<Routes>(
        keys::ROUTES,
        r#"[{"dst":"","gw":"10.16.0.1"}]"#,
        r#"[{"gw":"10.16.0.1"}]"#,
    );
    check::<Routes>(keys::ROUTES, r#"[ {"gw": "fd00::1"} ]"#, r#"[{"gw":"fd00::1"}]"#);
    check::<BgpPolicy>(keys::BGP, "true", "true");
    check::<BgpPolicy>(keys::BGP, "cluster", "cluster");
    check::<BgpPolicy>(keys::BGP, "local", "local");
    check::<Mbps>(keys::INGRESS_RATE, "100", "100");
    check::<Mbps>(keys::INGRESS_RATE, "0", "0");
    check::<Mbps>(keys::INGRESS_RATE, "0100", "100");
    check::<Mbit>(keys::INGRESS_BURST, "20", "20");
    check::<Milliseconds>(keys::LATENCY, "50", "50");
    check::<Packets>(keys::LIMIT, "1000", "1000");
    check::<LossPercent>(keys::LOSS, "0.5", "0.5");
    check::<LossPercent>(keys::LOSS, "100", "100");
    check::<TrueFlag>(keys::ROUTED, "true", "true");
    check::<IpFamily>(keys::IP_FAMILY, "ipv6", "ipv6");
    check::<GatewayNodes>(
        "gatewayNode",
        "kube-ovn-worker,kube-ovn-control-plane:172.18.0.2",
        "kube-ovn-worker,kube-ovn-control-plane:172.18.0.2",
    );
}

/// Values for attachment networks go under provider-prefixed keys and parse the same way.
#[test]
fn provider_keys_carry_the_same_values() {
    let key = provider_key("attachnet.default.ovn", keys::IP_ADDRESS).unwrap();
    assert_eq!(key, "attachnet.default.ovn.kubernetes.io/ip_address");
    let err = parse::<IpPair>(&key, "bogus").unwrap_err();
    assert_eq!(err.key, key, "the error names the provider-prefixed key");
}

mod properties {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use ipnet::{Ipv4Net, Ipv6Net};
    use kube_ovn_api::annotations::{
        CidrPair, IpPair, IpPoolAnnotation, MacAddr, Route, Routes, keys, parse,
    };
    use proptest::prelude::*;

    fn ip_pair() -> impl Strategy<Value = IpPair> {
        (any::<Option<u32>>(), any::<Option<u128>>())
            .prop_filter("at least one family", |(a, b)| a.is_some() || b.is_some())
            .prop_map(|(a, b)| IpPair {
                v4: a.map(Ipv4Addr::from),
                v6: b.map(Ipv6Addr::from),
            })
    }

    proptest! {
        /// Whatever we format, we parse back to the same value; dual stack is always `v4,v6`.
        #[test]
        fn ip_pairs(pair in ip_pair()) {
            let text = pair.to_string();
            prop_assert_eq!(parse::<IpPair>(keys::IP_ADDRESS, &text).unwrap(), pair);
            if let (Some(v4), true) = (pair.v4, pair.is_dual()) {
                prop_assert!(text.starts_with(&v4.to_string()));
            }
        }

        #[test]
        fn cidr_pairs(a in any::<Option<(u32, u8)>>(), b in any::<(u128, u8)>()) {
            let pair = CidrPair {
                v4: a.map(|(addr, len)| Ipv4Net::new(Ipv4Addr::from(addr), len % 33).unwrap()),
                v6: Some(Ipv6Net::new(Ipv6Addr::from(b.0), b.1 % 129).unwrap()),
            };
            prop_assert_eq!(parse::<CidrPair>(keys::CIDR, &pair.to_string()).unwrap(), pair);
        }

        #[test]
        fn macs(bytes in any::<[u8; 6]>()) {
            let mac = MacAddr(bytes);
            let text = mac.to_string();
            prop_assert_eq!(text.to_lowercase(), text.clone());
            prop_assert_eq!(parse::<MacAddr>(keys::MAC_ADDRESS, &text.to_uppercase()).unwrap(), mac);
        }

        /// The `,` / `;` choice when formatting never changes how the list reads back.
        #[test]
        fn ip_pool_lists(list in proptest::collection::vec(ip_pair(), 1..6)) {
            let value = IpPoolAnnotation::Addresses(list);
            prop_assert_eq!(parse::<IpPoolAnnotation>(keys::IP_POOL, &value.to_string()).unwrap(), value);
        }

        #[test]
        fn routes(list in proptest::collection::vec((any::<u32>(), 0u8..=32, any::<Option<u32>>()), 0..4)) {
            let routes = Routes(list.into_iter().map(|(dst, len, gw)| Route {
                dst: Some(Ipv4Net::new(Ipv4Addr::from(dst), len).unwrap().into()),
                gw: gw.map(|g| Ipv4Addr::from(g).into()),
            }).collect());
            prop_assert_eq!(parse::<Routes>(keys::ROUTES, &routes.to_string()).unwrap(), routes);
        }
    }
}
