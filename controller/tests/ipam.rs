//! IPAM behaviour, case by case (Kube-OVN's IPAM test catalogue, reference §6.4), and a property
//! test over random operation sequences.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use kube_ovn_api::annotations::{IpRange, MacAddr};
use kube_ovn_controller::ipam::{Family, Ipam, IpamError, Request, SubnetConfig};
use proptest::prelude::*;

fn cfg(cidrs: &str, excludes: &[&str]) -> SubnetConfig {
    SubnetConfig {
        cidrs: cidrs.split(',').map(|c| c.parse().unwrap()).collect(),
        gateways: Vec::new(),
        exclude_ips: excludes.iter().map(|e| range(e)).collect(),
    }
}

fn range(s: &str) -> IpRange {
    if let Some((a, b)) = s.split_once("..") {
        IpRange::Range(a.parse().unwrap(), b.parse().unwrap())
    } else if s.contains('/') {
        IpRange::Cidr(s.parse().unwrap())
    } else {
        IpRange::Single(s.parse().unwrap())
    }
}

fn v4(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

fn v6(s: &str) -> Ipv6Addr {
    s.parse().unwrap()
}

fn auto() -> Request {
    Request::default()
}

fn ipam_with(name: &str, cidrs: &str, excludes: &[&str]) -> Ipam {
    let mut ipam = Ipam::with_seed(7);
    ipam.add_or_update_subnet(name, &cfg(cidrs, excludes)).unwrap();
    ipam
}

#[test]
fn new_subnets_count_usable_addresses_without_the_gateway() {
    let ipam = ipam_with("s", "10.16.0.0/24", &[]);
    let u = ipam.subnet_usage("s").unwrap();
    assert_eq!((u.v4_available, u.v4_using), (253, 0));
    assert_eq!(u.v4_available_range, "10.16.0.2-10.16.0.254");
    let ipam = ipam_with("s", "fd00::/120", &[]);
    assert_eq!(ipam.subnet_usage("s").unwrap().v6_available, 254);
    let ipam = ipam_with("s", "10.16.0.0/24,fd00::/120", &[]);
    let u = ipam.subnet_usage("s").unwrap();
    assert_eq!((u.v4_available, u.v6_available), (253, 254));
    // Point-to-point subnets keep both addresses; the gateway takes one.
    let ipam = ipam_with("s", "10.0.0.0/31", &[]);
    assert_eq!(ipam.subnet_usage("s").unwrap().v4_available, 1);
}

#[test]
fn sequential_lowest_first_and_idempotent_per_nic() {
    let mut ipam = ipam_with("s", "10.16.0.0/24", &[]);
    let a = ipam.allocate("s", "a.ns", &auto()).unwrap();
    let b = ipam.allocate("s", "b.ns", &auto()).unwrap();
    assert_eq!((a.v4, b.v4), (Some(v4("10.16.0.2")), Some(v4("10.16.0.3"))));
    assert_eq!(
        ipam.allocate("s", "a.ns", &auto()).unwrap(),
        a,
        "asking again returns the same"
    );
    assert_ne!(a.mac, b.mac);
    assert_eq!(a.mac.0[0] & 0x03, 0x02, "locally administered unicast");
    assert_eq!(ipam.holder("s", IpAddr::V4(v4("10.16.0.3"))), Some("b.ns"));
}

#[test]
fn released_addresses_are_reused_only_after_free_ones_run_out() {
    let mut ipam = ipam_with("s", "10.0.0.0/29", &[]); // .2-.6 free (5)
    for k in ["a", "b", "c"] {
        ipam.allocate("s", k, &auto()).unwrap();
    }
    ipam.release("s", "a").unwrap(); // .2 released
    assert_eq!(ipam.allocate("s", "d", &auto()).unwrap().v4, Some(v4("10.0.0.5")));
    assert_eq!(ipam.allocate("s", "e", &auto()).unwrap().v4, Some(v4("10.0.0.6")));
    assert_eq!(
        ipam.allocate("s", "f", &auto()).unwrap().v4,
        Some(v4("10.0.0.2")),
        "free ran out"
    );
    let err = ipam.allocate("s", "g", &auto()).unwrap_err();
    assert!(
        matches!(
            err,
            IpamError::Exhausted {
                family: Family::V4,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn static_addresses_and_macs() {
    let mut ipam = ipam_with("s", "10.16.0.0/24", &[]);
    let req = Request {
        v4: Some(v4("10.16.0.20")),
        mac: Some(MacAddr([0x0a, 0, 0, 0, 0, 0x20])),
        ..auto()
    };
    let a = ipam.allocate("s", "a", &req).unwrap();
    assert_eq!(
        (a.v4, a.mac),
        (Some(v4("10.16.0.20")), MacAddr([0x0a, 0, 0, 0, 0, 0x20]))
    );
    // Conflicts name the holder.
    let err = ipam
        .allocate(
            "s",
            "b",
            &Request {
                v4: Some(v4("10.16.0.20")),
                ..auto()
            },
        )
        .unwrap_err();
    assert_eq!(
        err,
        IpamError::Conflict {
            subnet: "s".into(),
            what: "10.16.0.20".into(),
            holder: "a".into()
        }
    );
    let err = ipam
        .allocate(
            "s",
            "b",
            &Request {
                mac: req.mac,
                ..auto()
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, IpamError::Conflict { ref holder, .. } if holder == "a"),
        "{err}"
    );
    // The gateway, and addresses outside the CIDR.
    let err = ipam
        .allocate(
            "s",
            "b",
            &Request {
                v4: Some(v4("10.16.0.1")),
                ..auto()
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, IpamError::Conflict { ref holder, .. } if holder.contains("gateway")),
        "{err}"
    );
    let err = ipam
        .allocate(
            "s",
            "b",
            &Request {
                v4: Some(v4("10.17.0.1")),
                ..auto()
            },
        )
        .unwrap_err();
    assert!(matches!(err, IpamError::OutOfRange { .. }), "{err}");
    let err = ipam
        .allocate(
            "s",
            "b",
            &Request {
                v4: Some(v4("10.16.0.255")),
                ..auto()
            },
        )
        .unwrap_err();
    assert!(matches!(err, IpamError::OutOfRange { .. }), "broadcast: {err}");
    ipam.set_gateway_mac("s", MacAddr([0x0a, 0, 0, 0, 0, 1])).unwrap();
    let err = ipam
        .allocate(
            "s",
            "b",
            &Request {
                mac: Some(MacAddr([0x0a, 0, 0, 0, 0, 1])),
                ..auto()
            },
        )
        .unwrap_err();
    assert!(
        matches!(err, IpamError::Conflict { ref holder, .. } if holder.contains("gateway")),
        "{err}"
    );
    // A NIC that asks for another static address gives up its old one.
    let moved = ipam
        .allocate(
            "s",
            "a",
            &Request {
                v4: Some(v4("10.16.0.30")),
                ..auto()
            },
        )
        .unwrap();
    assert_eq!(moved.v4, Some(v4("10.16.0.30")));
    assert_eq!(moved.mac, a.mac, "the MAC stays");
    assert_eq!(ipam.holder("s", IpAddr::V4(v4("10.16.0.20"))), None);
    // Nothing was half-applied by the failed requests.
    assert_eq!(ipam.subnet_usage("s").unwrap().v4_using, 1);
}

#[test]
fn excluded_addresses_are_reserved_but_statically_assignable() {
    let mut ipam = ipam_with("s", "10.16.0.0/28", &["10.16.0.2..10.16.0.5", "10.16.0.14"]);
    let u = ipam.subnet_usage("s").unwrap();
    assert_eq!(u.v4_available, 14 - 1 - 5); // .1-.14 minus gateway minus five excluded
    assert_eq!(
        ipam.allocate("s", "a", &auto()).unwrap().v4,
        Some(v4("10.16.0.6"))
    );
    let s = ipam
        .allocate(
            "s",
            "b",
            &Request {
                v4: Some(v4("10.16.0.3")),
                ..auto()
            },
        )
        .unwrap();
    assert_eq!(s.v4, Some(v4("10.16.0.3")));
    let u = ipam.subnet_usage("s").unwrap();
    assert_eq!((u.v4_available, u.v4_using), (7, 2));
    // Released, an excluded address does not become available.
    ipam.release("s", "b").unwrap();
    assert_eq!(ipam.subnet_usage("s").unwrap().v4_available, 7);
}

#[test]
fn dual_stack_allocates_both_or_neither() {
    let mut ipam = ipam_with("s", "10.16.0.0/29,fd00::/125", &[]);
    let a = ipam.allocate("s", "a", &auto()).unwrap();
    assert_eq!((a.v4, a.v6), (Some(v4("10.16.0.2")), Some(v6("fd00::2"))));
    // Only v4 requested on a dual-stack subnet (`ip_family`).
    let b = ipam
        .allocate(
            "s",
            "b",
            &Request {
                family: Some(Family::V4),
                ..auto()
            },
        )
        .unwrap();
    assert_eq!((b.v4.is_some(), b.v6), (true, None));
    // Use up the v6 side: fd00::1 gateway, ::2-::7 usable (6), a took one.
    for k in ["c", "d", "e", "f", "g"] {
        ipam.allocate(
            "s",
            k,
            &Request {
                family: Some(Family::V6),
                ..auto()
            },
        )
        .unwrap();
    }
    let before = ipam.subnet_usage("s").unwrap();
    let err = ipam.allocate("s", "h", &auto()).unwrap_err();
    assert!(
        matches!(
            err,
            IpamError::Exhausted {
                family: Family::V6,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(
        ipam.subnet_usage("s").unwrap(),
        before,
        "the v4 side was not taken"
    );
    // Wrong family on a single-stack subnet.
    let mut single = ipam_with("s4", "10.0.0.0/24", &[]);
    let err = single
        .allocate(
            "s4",
            "x",
            &Request {
                family: Some(Family::V6),
                ..auto()
            },
        )
        .unwrap_err();
    assert!(
        matches!(
            err,
            IpamError::WrongFamily {
                family: Family::V6,
                ..
            }
        ),
        "{err}"
    );
    let err = single
        .allocate(
            "s4",
            "x",
            &Request {
                v6: Some(v6("fd00::5")),
                ..auto()
            },
        )
        .unwrap_err();
    assert!(matches!(err, IpamError::WrongFamily { .. }), "{err}");
}

#[test]
fn named_pools_are_carved_out_and_may_not_overlap() {
    let mut ipam = ipam_with("s", "10.16.0.0/24", &[]);
    ipam.add_or_update_pool("s", "p1", &[range("10.16.0.10..10.16.0.12")])
        .unwrap();
    assert_eq!(
        ipam.pool_usage("s", "p1").unwrap().v4_available_range,
        "10.16.0.10-10.16.0.12"
    );
    let err = ipam
        .add_or_update_pool("s", "p2", &[range("10.16.0.12/30")])
        .unwrap_err();
    assert!(
        matches!(err, IpamError::PoolOverlap { ref other, .. } if other == "p1"),
        "{err}"
    );
    let err = ipam
        .add_or_update_pool("s", "p2", &[range("10.99.0.1")])
        .unwrap_err();
    assert!(matches!(err, IpamError::OutOfRange { .. }), "{err}");
    let in_pool = Request {
        pool: Some("p1".into()),
        ..auto()
    };
    let got: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|k| ipam.allocate("s", k, &in_pool).unwrap().v4.unwrap())
        .collect();
    assert_eq!(got, vec![v4("10.16.0.10"), v4("10.16.0.11"), v4("10.16.0.12")]);
    assert!(
        matches!(ipam.allocate("s", "d", &in_pool), Err(IpamError::Exhausted { ref pool, .. }) if pool == "p1")
    );
    // The default pool no longer hands out the pool's addresses.
    for i in 0..10 {
        let ip = ipam.allocate("s", &format!("x{i}"), &auto()).unwrap().v4.unwrap();
        assert!(!(10..=12).contains(&ip.octets()[3]), "{ip}");
    }
    // Removing the pool returns its addresses to the default pool; holders keep theirs.
    ipam.remove_pool("s", "p1");
    assert_eq!(ipam.holder("s", IpAddr::V4(v4("10.16.0.11"))), Some("b"));
    assert!(ipam.pool_usage("s", "p1").is_err());
    assert!(matches!(
        ipam.allocate("s", "z", &in_pool),
        Err(IpamError::UnknownPool { .. })
    ));
}

#[test]
fn subnet_changes_keep_allocations_inside_the_new_cidr() {
    let mut ipam = ipam_with("s", "10.16.0.0/24", &[]);
    let a = ipam.allocate("s", "a", &auto()).unwrap();
    let far = ipam
        .allocate(
            "s",
            "far",
            &Request {
                v4: Some(v4("10.16.0.200")),
                ..auto()
            },
        )
        .unwrap();
    ipam.add_or_update_subnet("s", &cfg("10.16.0.0/25", &["10.16.0.3..10.16.0.9"]))
        .unwrap();
    assert_eq!(ipam.holder("s", IpAddr::V4(a.v4.unwrap())), Some("a"));
    assert_eq!(
        ipam.holder("s", IpAddr::V4(far.v4.unwrap())),
        None,
        "outside the new CIDR"
    );
    // Newly excluded addresses are not handed out.
    assert_eq!(
        ipam.allocate("s", "b", &auto()).unwrap().v4,
        Some(v4("10.16.0.10"))
    );
    let err = ipam
        .add_or_update_subnet("s", &cfg("10.16.0.0/24,10.17.0.0/24", &[]))
        .unwrap_err();
    assert!(matches!(err, IpamError::InvalidCidr { .. }), "{err}");
}

#[test]
fn skip_list_and_unknown_subnet() {
    let mut ipam = ipam_with("s", "10.16.0.0/24", &[]);
    let req = Request {
        skip: vec![IpAddr::V4(v4("10.16.0.2")), IpAddr::V4(v4("10.16.0.3"))],
        ..auto()
    };
    assert_eq!(ipam.allocate("s", "a", &req).unwrap().v4, Some(v4("10.16.0.4")));
    assert_eq!(
        ipam.allocate("nope", "a", &auto()).unwrap_err(),
        IpamError::UnknownSubnet("nope".into())
    );
    assert_eq!(ipam.subnet_of(IpAddr::V4(v4("10.16.0.77"))), Some("s"));
}

/// Operations of the property test.
#[derive(Debug, Clone)]
enum Op {
    Auto(u8),
    Static(u8, u8),
    Release(u8),
    Exclude(u8, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..40).prop_map(Op::Auto),
        2 => (0u8..40, 0u8..64).prop_map(|(k, a)| Op::Static(k, a)),
        3 => (0u8..40).prop_map(Op::Release),
        1 => (0u8..64, 0u8..6).prop_map(|(a, n)| Op::Exclude(a, n)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Never a duplicate, never an excluded or gateway address handed out automatically, and the
    /// counts always add up: available + using + (reserved not in use) = usable.
    #[test]
    fn invariants_hold_over_random_sequences(ops in proptest::collection::vec(op(), 1..150)) {
        let mut ipam = Ipam::with_seed(1);
        let mut excludes: Vec<String> = Vec::new();
        ipam.add_or_update_subnet("s", &cfg("10.0.0.0/26,fd00::/122", &[])).unwrap();
        let mut held: BTreeMap<String, (Option<Ipv4Addr>, Option<Ipv6Addr>)> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Auto(k) => {
                    let key = format!("k{k}");
                    let static_before = held.get(&key).copied();
                    if let Ok(a) = ipam.allocate("s", &key, &Request::default()) {
                        let excluded: BTreeSet<Ipv4Addr> = excludes.iter().flat_map(|e| expand(e)).collect();
                        // An automatic pick is never reserved, unless the NIC already held it.
                        if static_before.is_none_or(|(v4, _)| v4 != a.v4) {
                            prop_assert!(!a.v4.is_some_and(|ip| excluded.contains(&ip) || ip == v4("10.0.0.1")), "{a:?}");
                        }
                        held.insert(key, (a.v4, a.v6));
                    }
                }
                Op::Static(k, a) => {
                    let key = format!("k{k}");
                    let ip = Ipv4Addr::new(10, 0, 0, a);
                    match ipam.allocate("s", &key, &Request { v4: Some(ip), ..Request::default() }) {
                        Ok(a) => { prop_assert_eq!(a.v4, Some(ip)); held.insert(key, (a.v4, a.v6)); }
                        Err(IpamError::Conflict { holder, .. }) => {
                            prop_assert!(holder.contains("gateway") || held.iter().any(|(h, (v, _))| *h == holder && *v == Some(ip)));
                        }
                        Err(IpamError::OutOfRange { .. }) => prop_assert!(a == 0 || a == 63),
                        Err(e) => prop_assert!(false, "unexpected {e}"),
                    }
                }
                Op::Release(k) => {
                    let key = format!("k{k}");
                    prop_assert_eq!(ipam.release("s", &key).is_some(), held.remove(&key).is_some());
                }
                Op::Exclude(a, n) => {
                    excludes.push(format!("10.0.0.{a}..10.0.0.{}", a.saturating_add(n).min(63)));
                    let refs: Vec<&str> = excludes.iter().map(String::as_str).collect();
                    ipam.add_or_update_subnet("s", &cfg("10.0.0.0/26,fd00::/122", &refs)).unwrap();
                }
            }
            // No address has two holders, and IPAM agrees with what each NIC holds.
            let mut seen = BTreeSet::new();
            for (key, (a4, a6)) in &held {
                for ip in a4.map(IpAddr::V4).into_iter().chain(a6.map(IpAddr::V6)) {
                    prop_assert!(seen.insert(ip), "{ip} handed out twice");
                    prop_assert_eq!(ipam.holder("s", ip), Some(key.as_str()));
                }
            }
            let u = ipam.subnet_usage("s").unwrap();
            let excluded: BTreeSet<Ipv4Addr> = excludes.iter().flat_map(|e| expand(e)).filter(|ip| (1..=62).contains(&ip.octets()[3])).collect();
            let reserved: BTreeSet<Ipv4Addr> = excluded.iter().copied().chain([v4("10.0.0.1")]).collect();
            let reserved_in_use = held.values().filter(|(a, _)| a.is_some_and(|ip| reserved.contains(&ip))).count() as u128;
            prop_assert_eq!(u.v4_available + u.v4_using + reserved.len() as u128 - reserved_in_use, 62);
            prop_assert_eq!(u.v4_using, held.values().filter(|(a, _)| a.is_some()).count() as u128);
        }
    }
}

fn expand(range: &str) -> Vec<Ipv4Addr> {
    let (a, b) = range.split_once("..").unwrap();
    let (a, b) = (u32::from(v4(a)), u32::from(v4(b)));
    (a..=b).map(Ipv4Addr::from).collect()
}
