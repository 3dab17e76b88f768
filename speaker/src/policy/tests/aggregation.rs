//! Aggregation inside and outside the allocation.

use serde_json::json;

use super::*;

const TOR: &str = "192.168.0.1";

/// A dual-stack /16 + /64 subnet with four pods on this node (one annotated `local`, so the
/// annotation path sends it too), external IPs inside a /28, one dual-family peer.
fn world(ads: Vec<ValidatedAdvertisement>) -> World {
    let mut w = World {
        external: "192.0.2.0/28".parse().unwrap(),
        ..World::default()
    };
    w.subnets = vec![subnet("s", "10.20.0.0/16,fd00:20::/64", &json!({}), None)];
    let ips = &mut w.ips;
    w.pods = vec![
        pod(ips, "ns", "a", "n1", "10.20.1.1", "s", None),
        pod(ips, "ns", "b", "n1", "10.20.1.2,fd00:20::5", "s", None),
        pod(ips, "ns", "c", "n1", "10.20.2.1", "s", Some("local")),
    ];
    w.services = vec![service(
        "ns",
        "ext",
        &json!({}),
        "10.96.0.1",
        &["192.0.2.1", "192.0.2.2"],
        &[],
        None,
    )];
    w.peers = vec![peer(TOR, &[], true)];
    w.ads = ads;
    w
}

#[test]
fn an_aggregate_inside_the_allocation_replaces_its_members() {
    let e = world(vec![
        ad(
            "agg",
            json!({"advertise": ["PodIPs", "ExternalIPs"], "aggregationLengthV4": 24,
                "aggregationLengthV6": 120, "communities": ["65000:1"]}),
        ),
        ad(
            "agg2",
            json!({"advertise": ["PodIPs"], "aggregationLengthV4": 24, "communities": ["65000:2"],
                "subnetSelector": {"matchLabels": {}}}),
        ),
    ])
    .eval();
    // The /32s of agg's pods are gone; 10.20.2.1 stays, announced by its annotation only; the
    // external IPs' /24 would leave the operator's /28: those stay /32 (see below). agg2 does
    // not aggregate IPv6: it still sends the pod's /128 (agg sends the /120 instead).
    assert_eq!(
        prefixes(&e, TOR),
        [
            "10.20.1.0/24",
            "10.20.2.0/24",
            "10.20.2.1/32",
            "192.0.2.1/32",
            "192.0.2.2/32",
            "fd00:20::/120",
            "fd00:20::5/128"
        ]
    );
    assert_eq!(sources(route(&e, TOR, "fd00:20::5/128")), ["agg2"]);
    assert_eq!(sources(route(&e, TOR, "fd00:20::/120")), ["agg"]);
    let agg = route(&e, TOR, "10.20.1.0/24");
    assert_eq!(agg.kind, AdvertiseKind::PodIps);
    assert_eq!(*agg.origin, Origin::Pod("ns/a".into()));
    // The aggregate's attributes merge every advertisement producing it.
    assert_eq!(sources(agg), ["agg", "agg2"]);
    assert_eq!(
        agg.attributes.communities,
        [community("65000:1"), community("65000:2")]
    );
    assert_eq!(sources(route(&e, TOR, "10.20.2.1/32")), ["annotation"]);
    assert_eq!(
        e.refused["agg"].to_string(),
        "spec.aggregationLengthV4: 24 would announce 192.0.2.0/24 for ExternalIPs 192.0.2.1/32 \
         (Service ns/ext), beyond its allocation 192.0.2.0/28: announced unaggregated"
    );
    assert!(!e.refused.contains_key("agg2"));

    // Inside the /28: aggregated.
    let e = world(vec![ad(
        "ext",
        json!({"advertise": ["ExternalIPs"], "aggregationLengthV4": 28}),
    )])
    .eval();
    assert_eq!(prefixes(&e, TOR), ["10.20.2.1/32", "192.0.2.0/28"]);
    assert_eq!(route(&e, TOR, "192.0.2.0/28").kind, AdvertiseKind::ExternalIps);
    assert!(e.refused.is_empty());
}

#[test]
fn an_aggregate_leaving_the_allocation_is_refused_and_its_members_go_out_alone() {
    let e = world(vec![ad(
        "wide",
        json!({"advertise": ["PodIPs", "SubnetCIDRs"], "aggregationLengthV4": 8,
            "communities": ["65000:9"]}),
    )])
    .eval();
    // Nothing covers more than the subnet: the members, and the subnet's own CIDR (the /8 would
    // reach beyond it), go out as they are, with the advertisement's attributes.
    assert_eq!(
        prefixes(&e, TOR),
        [
            "10.20.0.0/16",
            "10.20.1.1/32",
            "10.20.1.2/32",
            "10.20.2.1/32",
            "fd00:20::/64",
            "fd00:20::5/128"
        ]
    );
    assert_eq!(
        route(&e, TOR, "10.20.1.1/32").attributes.communities,
        [community("65000:9")]
    );
    // One example, the smallest member, naming the field.
    let err = &e.refused["wide"];
    assert_eq!(err.field, "spec.aggregationLengthV4");
    assert_eq!(
        err.message,
        "8 would announce 10.0.0.0/8 for SubnetCIDRs 10.20.0.0/16 (Subnet s), beyond its \
         allocation 10.20.0.0/16: announced unaggregated"
    );
    // A length no member is longer than changes nothing.
    let e = world(vec![ad(
        "noop",
        json!({"advertise": ["SubnetCIDRs"], "aggregationLengthV4": 24, "aggregationLengthV6": 128}),
    )])
    .eval();
    assert_eq!(
        prefixes(&e, TOR),
        ["10.20.0.0/16", "10.20.2.1/32", "fd00:20::/64"]
    );
    assert!(e.refused.is_empty());
}
