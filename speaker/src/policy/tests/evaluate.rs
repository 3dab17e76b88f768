//! Selection (per kind, per selector), peers, families, the attribute merge and conflicts.

use serde_json::json;

use super::*;

const TOR1: &str = "192.168.0.1";
const TOR2: &str = "192.168.0.2";
const FLAG: &str = "192.168.0.3";
const TOR6: &str = "fd00::1";

/// Two labelled subnets (silver annotated `cluster`), pods in two namespaces and one whose
/// Namespace does not exist, two Services, four peers (two racks, a flag peer with no labels, an
/// IPv6-only one), and advertisements selecting each kind.
fn selection_world() -> World {
    let mut w = World {
        external: "192.0.2.0/24".parse().unwrap(),
        ..World::default()
    };
    w.namespaces = vec![
        namespace("ns-a", &json!({"team": "a"})),
        namespace("ns-b", &json!({"team": "b"})),
    ];
    w.subnets = vec![
        subnet("gold", "10.1.0.0/16", &json!({"tier": "gold"}), None),
        subnet(
            "silver",
            "10.2.0.0/16",
            &json!({"tier": "silver"}),
            Some("cluster"),
        ),
        subnet("gold6", "fd00:10::/64", &json!({"tier": "gold"}), None),
    ];
    let ips = &mut w.ips;
    w.pods = vec![
        pod(ips, "ns-a", "p1", "n1", "10.1.0.5", "gold", None),
        pod(ips, "ns-a", "p2", "n2", "10.1.0.6", "gold", None),
        pod(ips, "ns-b", "p3", "n1", "10.2.0.7", "silver", None),
        pod(ips, "ns-c", "p4", "n1", "10.1.0.8", "gold", None),
    ];
    w.services = vec![
        service(
            "ns-a",
            "web",
            &json!({"app": "web"}),
            "10.96.0.10",
            &["192.0.2.10", "198.18.0.1"],
            &["203.0.113.10"],
            None,
        ),
        service(
            "ns-b",
            "db",
            &json!({"app": "db"}),
            "10.96.0.11",
            &[],
            &["203.0.113.11"],
            Some("true"),
        ),
    ];
    w.peers = vec![
        peer(TOR1, &[("rack", "r1")], true),
        peer(TOR2, &[("rack", "r2")], false),
        peer(FLAG, &[], false),
        peer(TOR6, &[("rack", "r1")], false),
    ];
    w.ads = vec![
        ad(
            "pods-gold",
            json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "gold"}},
                "namespaceSelector": {"matchLabels": {"team": "a"}},
                "peerSelector": {"matchLabels": {"rack": "r1"}}}),
        ),
        ad("subnets-all", json!({"advertise": ["SubnetCIDRs"]})),
        ad(
            "web-lb",
            json!({"advertise": ["LoadBalancerIPs", "ExternalIPs"],
                "serviceSelector": {"matchLabels": {"app": "web"}},
                "peerSelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r2"]}]}}),
        ),
        ad(
            "cluster-ips",
            json!({"advertise": ["ClusterIPs"], "namespaceSelector": {"matchLabels": {"team": "b"}}}),
        ),
        ad(
            "pods-any",
            json!({"advertise": ["PodIPs"], "peerSelector": {"matchLabels": {"rack": "r2"}}}),
        ),
    ];
    w
}

#[test]
fn advertisements_select_by_kind_selector_and_peer() {
    let w = selection_world();
    let e = w.eval();
    // tor1 (rack r1, both families): the annotation path (silver and its pod, db's LoadBalancer
    // IP), pods-gold's pod of gold in a team-a namespace, every subnet, db's ClusterIP.
    assert_eq!(
        prefixes(&e, TOR1),
        [
            "10.1.0.0/16",
            "10.1.0.5/32",
            "10.2.0.0/16",
            "10.2.0.7/32",
            "10.96.0.11/32",
            "203.0.113.11/32",
            "fd00:10::/64"
        ]
    );
    // tor2 (rack r2, IPv4): pods-any's pods of this node (p4's Namespace does not exist: an
    // absent selector still selects it), web's LoadBalancer IP and its one external IP inside
    // --service-external-ip-cidrs (198.18.0.1 is outside: never).
    assert_eq!(
        prefixes(&e, TOR2),
        [
            "10.1.0.0/16",
            "10.1.0.5/32",
            "10.1.0.8/32",
            "10.2.0.0/16",
            "10.2.0.7/32",
            "10.96.0.11/32",
            "192.0.2.10/32",
            "203.0.113.10/32",
            "203.0.113.11/32"
        ]
    );
    // The flag peer has no labels: only advertisements without a peerSelector reach it.
    assert_eq!(
        prefixes(&e, FLAG),
        [
            "10.1.0.0/16",
            "10.2.0.0/16",
            "10.2.0.7/32",
            "10.96.0.11/32",
            "203.0.113.11/32"
        ]
    );
    // An IPv6-only session gets no IPv4 prefix, whatever selects it.
    assert_eq!(prefixes(&e, TOR6), ["fd00:10::/64"]);

    // Kinds come from the field the address was found in, annotated or not.
    let kind = |peer, p| route(&e, peer, p).kind;
    assert_eq!(kind(TOR2, "10.96.0.11/32"), AdvertiseKind::ClusterIps);
    assert_eq!(kind(TOR2, "192.0.2.10/32"), AdvertiseKind::ExternalIps);
    assert_eq!(kind(TOR2, "203.0.113.11/32"), AdvertiseKind::LoadBalancerIps);
    assert_eq!(kind(TOR2, "10.1.0.0/16"), AdvertiseKind::SubnetCidrs);
    assert_eq!(kind(TOR2, "10.2.0.7/32"), AdvertiseKind::PodIps);
    assert_eq!(
        *route(&e, TOR2, "10.1.0.8/32").origin,
        Origin::Pod("ns-c/p4".into())
    );
    // Every reason, annotation first.
    assert_eq!(
        sources(route(&e, TOR2, "10.2.0.7/32")),
        ["annotation", "pods-any"]
    );
    assert_eq!(
        sources(route(&e, TOR1, "10.2.0.0/16")),
        ["annotation", "subnets-all"]
    );
    assert_eq!(sources(route(&e, TOR1, "10.96.0.11/32")), ["cluster-ips"]);
    assert_eq!(sources(route(&e, FLAG, "203.0.113.11/32")), ["annotation"]);
    assert!(e.conflicts.is_empty() && e.refused.is_empty());

    // On n2, p2 is the local pod: pods-gold sends it from there, and not p1.
    let on_n2 = w.eval_on("n2");
    assert_eq!(
        prefixes(&on_n2, TOR1),
        [
            "10.1.0.0/16",
            "10.1.0.6/32",
            "10.2.0.0/16",
            "10.2.0.7/32",
            "10.96.0.11/32",
            "203.0.113.11/32",
            "fd00:10::/64"
        ]
    );
}

#[test]
fn without_advertisements_every_peer_gets_the_annotation_path_with_its_defaults() {
    let mut w = selection_world();
    w.ads.clear();
    w.peers[0].defaults.communities = vec![community("65000:1")];
    w.peers[0].defaults.local_pref = Some(150);
    let e = w.eval();
    let desired = announce::desired(&w.objects(), &w.scope("n1"));
    assert_eq!(e.desired, desired);
    for peer in &w.peers {
        let table = &e.peers[&peer.address];
        let expected: Vec<&IpNet> = desired
            .prefixes
            .keys()
            .filter(|p| peer.families.contains(&Family::of(p)))
            .collect();
        assert_eq!(table.keys().collect::<Vec<_>>(), expected, "{}", peer.address);
        for (prefix, r) in table {
            assert_eq!(*r.attributes, peer.defaults, "{prefix}");
            assert_eq!(*r.origin, desired.prefixes[prefix]);
            assert_eq!(&*r.sources, [Source::Annotation]);
        }
    }
}

/// One annotated subnet and pod; tor1 has defaults; three advertisements overlap.
fn merge_world() -> World {
    let mut w = World::default();
    w.subnets = vec![subnet("s", "10.5.0.0/16", &json!({}), Some("cluster"))];
    w.pods = vec![pod(&mut w.ips, "ns", "p1", "n1", "10.5.0.1", "s", None)];
    let mut tor1 = peer(TOR1, &[("rack", "r1")], false);
    tor1.defaults.communities = vec![community("65000:1")];
    tor1.defaults.local_pref = Some(150);
    tor1.defaults.med = Some(50);
    w.peers = vec![tor1, peer(TOR2, &[("rack", "r2")], false)];
    w.ads = vec![
        ad(
            "a",
            json!({"advertise": ["PodIPs"], "communities": ["65000:100"], "localPref": 200,
                "med": 30, "asPathPrepend": 3}),
        ),
        ad(
            "b",
            json!({"advertise": ["PodIPs"], "communities": ["65000:200", "65000:100"],
                "localPref": 300, "med": 40, "asPathPrepend": 1,
                "peerSelector": {"matchLabels": {"rack": "r1"}}}),
        ),
        ad(
            "c",
            json!({"advertise": ["SubnetCIDRs"], "largeCommunities": ["1:2:3"]}),
        ),
    ];
    w
}

#[test]
fn attributes_merge_by_the_documented_rule_and_losers_are_named() {
    let w = merge_world();
    let e = w.eval();
    let pod1 = route(&e, TOR1, "10.5.0.1/32");
    // Union of communities (the peer's too); highest LOCAL_PREF (b), lowest MED (a), fewest
    // prepends (b); the peer's defaults lose to any advertisement's value.
    assert_eq!(
        pod1.attributes.communities,
        [
            community("65000:1"),
            community("65000:100"),
            community("65000:200")
        ]
    );
    assert_eq!(pod1.attributes.local_pref, Some(300));
    assert_eq!(pod1.attributes.med, Some(30));
    assert_eq!(pod1.attributes.as_path_prepend, 1);
    assert_eq!(sources(pod1), ["annotation", "a", "b"]);
    // tor2 is not b's: a alone.
    let pod2 = route(&e, TOR2, "10.5.0.1/32");
    assert_eq!(pod2.attributes.communities, [community("65000:100")]);
    assert_eq!(
        (
            pod2.attributes.local_pref,
            pod2.attributes.med,
            pod2.attributes.as_path_prepend
        ),
        (Some(200), Some(30), 3)
    );
    assert_eq!(sources(pod2), ["annotation", "a"]);
    // c sets no LOCAL_PREF or MED: the peer's defaults stay; its large community is added.
    let cidr = route(&e, TOR1, "10.5.0.0/16");
    assert_eq!(cidr.attributes.communities, [community("65000:1")]);
    assert_eq!(cidr.attributes.large_communities.len(), 1);
    assert_eq!(
        (
            cidr.attributes.local_pref,
            cidr.attributes.med,
            cidr.attributes.as_path_prepend
        ),
        (Some(150), Some(50), 0)
    );
    // Conflicts: a lost LOCAL_PREF (and its prepends) to b, b lost MED to a; c lost nothing.
    assert_eq!(e.conflicts.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(
        e.conflicts["a"],
        "spec.localPref 200 lost to BgpAdvertisement b's 300 for 10.5.0.1/32 to peer \
         192.168.0.1 (the highest LOCAL_PREF wins)"
    );
    assert_eq!(
        e.conflicts["b"],
        "spec.med 40 lost to BgpAdvertisement a's 30 for 10.5.0.1/32 to peer 192.168.0.1 \
         (the lowest MED wins)"
    );
    // The same whatever order the advertisements and peers come in.
    let mut reversed = merge_world();
    reversed.ads.reverse();
    reversed.peers.reverse();
    assert_eq!(reversed.eval(), e);
    // Equal values are no conflict.
    let mut equal = merge_world();
    equal.ads[1] = ad(
        "b",
        json!({"advertise": ["PodIPs"], "localPref": 200, "med": 30, "asPathPrepend": 3}),
    );
    assert!(equal.eval().conflicts.is_empty());
    // Routes with the same attributes share them.
    assert!(Arc::ptr_eq(
        &route(&e, TOR1, "10.5.0.1/32").attributes,
        &e.peers[&TOR1.parse::<IpAddr>().unwrap()][&"10.5.0.1/32".parse::<IpNet>().unwrap()].attributes
    ));
}

/// `externalTrafficPolicy: Local` on the advertisement path: a LoadBalancer Service an
/// advertisement selects (no `bgp` annotation) is sent by the speaker on its endpoint's node only
/// (its ClusterIP, not concerned, from both); `Cluster` from both.
#[test]
fn a_local_service_is_advertised_only_from_its_endpoints_node() {
    let mut w = World::default();
    let local = service(
        "demo",
        "local",
        &json!({"tagged": "yes"}),
        "10.96.0.20",
        &[],
        &["203.0.113.10"],
        None,
    );
    let mut local = (*local).clone();
    local.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    w.services = vec![
        Arc::new(local),
        service(
            "demo",
            "cluster",
            &json!({"tagged": "yes"}),
            "10.96.0.21",
            &[],
            &["203.0.113.11"],
            None,
        ),
    ];
    w.endpoint_slices = vec![obj(json!({"addressType": "IPv4",
        "metadata": {"name": "local-x", "namespace": "demo", "labels": {"kubernetes.io/service-name": "local"}},
        "endpoints": [{"addresses": ["10.16.0.6"], "nodeName": "n1", "conditions": {"ready": true}}]}))];
    w.ads = vec![ad(
        "tagged",
        json!({"advertise": ["LoadBalancerIPs", "ClusterIPs"],
        "serviceSelector": {"matchLabels": {"tagged": "yes"}}, "communities": ["65000:100"]}),
    )];
    w.peers = vec![peer("172.30.0.1", &[], false)];
    let on = |node: &str| prefixes(&w.eval_on(node), "172.30.0.1");
    assert_eq!(
        on("n1"),
        [
            "10.96.0.20/32",
            "10.96.0.21/32",
            "203.0.113.10/32",
            "203.0.113.11/32"
        ]
    );
    assert_eq!(on("n2"), ["10.96.0.20/32", "10.96.0.21/32", "203.0.113.11/32"]);
}
