//! Properties of [`evaluate`] over generated clusters: pods on two nodes in three subnets
//! (one IPv6), Services, up to five advertisements with random kinds, selectors, attributes and
//! aggregation lengths, three peers (IPv4, dual, IPv6; two labelled, one flag peer).

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

#[derive(Debug, Clone)]
struct PodGen {
    subnet: usize,
    node: usize,
    namespace: usize,
    bgp: Option<&'static str>,
}

#[derive(Debug, Clone)]
struct ServiceGen {
    app: usize,
    namespace: usize,
    external_allowed: bool,
    bgp: bool,
}

#[derive(Debug, Clone)]
struct AdGen {
    kinds: Vec<&'static str>,
    subnet: Option<&'static str>,
    team: bool,
    web: bool,
    rack: Option<&'static str>,
    communities: Vec<&'static str>,
    local_pref: Option<u32>,
    med: Option<u32>,
    prepend: Option<u8>,
    v4: Option<u8>,
    v6: Option<u8>,
}

#[derive(Debug, Clone)]
struct Gen {
    subnet_bgp: [Option<&'static str>; 3],
    subnet_tier: [&'static str; 3],
    pods: Vec<PodGen>,
    services: Vec<ServiceGen>,
    ads: Vec<AdGen>,
}

const BGP: [Option<&str>; 3] = [None, Some("cluster"), Some("local")];
const KINDS: [&str; 6] = [
    "PodIPs",
    "SubnetCIDRs",
    "ClusterIPs",
    "ExternalIPs",
    "LoadBalancerIPs",
    "EIPs",
];
const CIDRS: [&str; 3] = ["10.0.0.0/16", "10.1.0.0/16", "fd00:2::/64"];
const NAMESPACES: [&str; 3] = ["ns-a", "ns-b", "ns-c"];
const APPS: [&str; 2] = ["web", "db"];

fn ad_gen() -> impl Strategy<Value = AdGen> {
    (
        proptest::sample::subsequence(KINDS.to_vec(), 1..=3),
        proptest::sample::select(vec![None, Some("gold"), Some("silver")]),
        any::<(bool, bool)>(),
        proptest::sample::select(vec![None, Some("r1"), Some("r2")]),
        proptest::sample::subsequence(vec!["65000:1", "65000:2", "no-export"], 0..=2),
        proptest::option::of(proptest::sample::select(vec![100u32, 200, 300])),
        proptest::option::of(0u32..3),
        proptest::option::of(0u8..4),
        proptest::option::of(proptest::sample::select(vec![8u8, 16, 24, 28, 32])),
        proptest::option::of(proptest::sample::select(vec![48u8, 64, 120])),
    )
        .prop_map(
            |(kinds, subnet, (team, web), rack, communities, local_pref, med, prepend, v4, v6)| AdGen {
                kinds,
                subnet,
                team,
                web,
                rack,
                communities,
                local_pref,
                med,
                prepend,
                v4,
                v6,
            },
        )
}

fn cluster() -> impl Strategy<Value = Gen> {
    let pod = (
        0..3usize,
        0..2usize,
        0..3usize,
        proptest::sample::select(BGP.to_vec()),
    )
        .prop_map(|(subnet, node, namespace, bgp)| PodGen {
            subnet,
            node,
            namespace,
            bgp,
        });
    let service = (0..2usize, 0..3usize, any::<bool>(), any::<bool>()).prop_map(
        |(app, namespace, external_allowed, bgp)| ServiceGen {
            app,
            namespace,
            external_allowed,
            bgp,
        },
    );
    (
        proptest::array::uniform3(proptest::sample::select(BGP.to_vec())),
        proptest::array::uniform3(proptest::sample::select(vec!["gold", "silver"])),
        proptest::collection::vec(pod, 0..24),
        proptest::collection::vec(service, 0..4),
        proptest::collection::vec(ad_gen(), 0..5),
    )
        .prop_map(|(subnet_bgp, subnet_tier, pods, services, ads)| Gen {
            subnet_bgp,
            subnet_tier,
            pods,
            services,
            ads,
        })
}

fn ad_spec(a: &AdGen) -> Value {
    let mut spec = json!({"advertise": a.kinds, "communities": a.communities});
    if let Some(t) = a.subnet {
        spec["subnetSelector"] = json!({"matchLabels": {"tier": t}});
    }
    if a.team {
        spec["namespaceSelector"] = json!({"matchLabels": {"team": "a"}});
    }
    if a.web {
        spec["serviceSelector"] = json!({"matchLabels": {"app": "web"}});
    }
    if let Some(r) = a.rack {
        spec["peerSelector"] = json!({"matchLabels": {"rack": r}});
    }
    for (key, value) in [
        ("localPref", a.local_pref),
        ("med", a.med),
        ("asPathPrepend", a.prepend.map(u32::from)),
    ] {
        if let Some(v) = value {
            spec[key] = json!(v);
        }
    }
    // Validation refuses aggregation of kinds without a known allocation.
    let unbounded = a
        .kinds
        .iter()
        .any(|k| *k == "ClusterIPs" || *k == "LoadBalancerIPs");
    if !unbounded {
        if let Some(v) = a.v4 {
            spec["aggregationLengthV4"] = json!(v);
        }
        if let Some(v) = a.v6 {
            spec["aggregationLengthV6"] = json!(v);
        }
    }
    spec
}

fn build(g: &Gen) -> World {
    let mut w = World {
        external: "192.0.2.0/28".parse().unwrap(),
        ..World::default()
    };
    w.namespaces = vec![
        namespace("ns-a", &json!({"team": "a"})),
        namespace("ns-b", &json!({"team": "b"})),
    ];
    w.subnets = (0..3)
        .map(|i| {
            subnet(
                &format!("s{i}"),
                CIDRS[i],
                &json!({"tier": g.subnet_tier[i]}),
                g.subnet_bgp[i],
            )
        })
        .collect();
    for (i, p) in g.pods.iter().enumerate() {
        let addr = if p.subnet == 2 {
            format!("fd00:2::{:x}", i + 1)
        } else {
            format!("10.{}.{}.{}", p.subnet, i / 8, i % 8 + 1)
        };
        let pod = pod(
            &mut w.ips,
            NAMESPACES[p.namespace],
            &format!("p{i}"),
            ["n1", "n2"][p.node],
            &addr,
            &format!("s{}", p.subnet),
            p.bgp,
        );
        w.pods.push(pod);
    }
    for (i, s) in g.services.iter().enumerate() {
        let external = if s.external_allowed {
            format!("192.0.2.{}", i + 1)
        } else {
            format!("198.18.0.{}", i + 1)
        };
        w.services.push(service(
            NAMESPACES[s.namespace],
            &format!("svc{i}"),
            &json!({"app": APPS[s.app]}),
            &format!("10.96.0.{}", i + 1),
            &[&external],
            &[&format!("203.0.113.{}", i + 1)],
            s.bgp.then_some("true"),
        ));
    }
    w.ads = g
        .ads
        .iter()
        .enumerate()
        .map(|(i, a)| ad(&format!("ad{i}"), ad_spec(a)))
        .collect();
    w.peers = vec![
        peer("192.168.0.1", &[("rack", "r1")], false),
        peer("192.168.0.2", &[("rack", "r2")], true),
        peer("fd00::3", &[], false),
    ];
    w.peers[1].defaults.communities = vec![community("65000:7")];
    w.peers[1].defaults.local_pref = Some(150);
    w
}

/// Where an aggregate may lie: a subnet's CIDR or the external IPs' CIDR.
fn inside_an_allocation(prefix: &IpNet) -> bool {
    CIDRS
        .iter()
        .chain(&["192.0.2.0/28"])
        .any(|c| c.parse::<IpNet>().unwrap().contains(prefix))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn evaluation_properties(g in cluster()) {
        let w = build(&g);
        let e = w.eval();

        // Independent of the order of advertisements, objects and peers.
        let mut r = build(&g);
        r.ads.reverse();
        r.pods.reverse();
        r.ips.reverse();
        r.services.reverse();
        r.subnets.reverse();
        r.namespaces.reverse();
        r.peers.reverse();
        let re = r.eval();
        prop_assert_eq!(&re.peers, &e.peers);
        prop_assert_eq!(&re.conflicts, &e.conflicts);
        prop_assert_eq!(&re.refused, &e.refused);

        for peer in &w.peers {
            for (prefix, route) in &e.peers[&peer.address] {
                // Never a family the session does not carry.
                prop_assert!(peer.families.contains(&Family::of(prefix)), "{} to {}", prefix, peer.address);
                // Every selecting advertisement's communities, and the peer's own.
                for source in route.sources.iter() {
                    if let Source::Advertisement(name) = source {
                        let ad = w.ads.iter().find(|a| &a.name == name).unwrap();
                        for c in &ad.communities {
                            prop_assert!(route.attributes.communities.contains(c), "{} lacks {}'s communities", prefix, name);
                        }
                        prop_assert!(ad.peer_selector.matches(&peer.labels));
                    }
                }
                for c in &peer.defaults.communities {
                    prop_assert!(route.attributes.communities.contains(c));
                }
                // Only host routes, or prefixes inside an allocation (aggregates included).
                let host = prefix.prefix_len() == prefix.max_prefix_len();
                prop_assert!(host || inside_an_allocation(prefix), "{} leaves every allocation", prefix);
                prop_assert!(!route.sources.is_empty());
            }
        }

        // With no advertisements: the annotation path, to every peer, with its own attributes.
        let mut bare = build(&g);
        bare.ads.clear();
        let be = bare.eval();
        prop_assert!(be.conflicts.is_empty() && be.refused.is_empty());
        for peer in &bare.peers {
            let expected: Vec<(IpNet, Origin)> = be
                .desired
                .prefixes
                .iter()
                .filter(|(p, _)| peer.families.contains(&Family::of(p)))
                .map(|(p, o)| (*p, o.clone()))
                .collect();
            let got: Vec<(IpNet, Origin)> = be.peers[&peer.address]
                .iter()
                .map(|(p, r)| (*p, (*r.origin).clone()))
                .collect();
            prop_assert_eq!(got, expected);
            for route in be.peers[&peer.address].values() {
                prop_assert_eq!(&*route.attributes, &peer.defaults);
                prop_assert_eq!(&*route.sources, &[Source::Annotation][..]);
            }
        }
        // And the annotation path is the same whatever advertisements exist.
        prop_assert_eq!(&be.desired, &e.desired);
    }
}
