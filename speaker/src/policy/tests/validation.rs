//! [`validate`]: every field checked, errors naming it.

use serde_json::json;

use super::*;

#[test]
fn a_valid_spec_is_parsed_into_the_speakers_types() {
    let v = ad(
        "gold",
        json!({"advertise": ["PodIPs", "SubnetCIDRs"],
            "subnetSelector": {"matchLabels": {"tier": "gold"}},
            "peerSelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]},
            "communities": ["65000:100", "no-export", "BLACKHOLE"],
            "largeCommunities": ["65000:1:2"],
            "localPref": 200, "med": 10, "asPathPrepend": 3,
            "aggregationLengthV4": 24, "aggregationLengthV6": 64}),
    );
    assert_eq!(v.name, "gold");
    assert_eq!(v.kinds, [AdvertiseKind::PodIps, AdvertiseKind::SubnetCidrs]);
    assert!(v.subnet_selector.matches(&labels(&[("tier", "gold")])));
    assert!(!v.subnet_selector.matches(&labels(&[("tier", "silver")])));
    assert!(v.namespace_selector.requirements.is_empty());
    assert!(v.peer_selector.matches(&labels(&[("rack", "r1")])));
    assert_eq!(v.communities, [65000 << 16 | 100, 0xFFFF_FF01, 0xFFFF_029A]);
    assert_eq!(
        v.large_communities,
        [LargeCommunity {
            global_admin: 65000,
            local_data1: 1,
            local_data2: 2
        }]
    );
    assert_eq!(
        (v.local_pref, v.med, v.as_path_prepend),
        (Some(200), Some(10), Some(3))
    );
    assert_eq!(
        (v.aggregation_length_v4, v.aggregation_length_v6),
        (Some(24), Some(64))
    );
    // Unset attributes stay unset: they take no part in the merge.
    let bare = ad("bare", json!({"advertise": ["EIPs"]}));
    assert_eq!(
        (bare.local_pref, bare.med, bare.as_path_prepend),
        (None, None, None)
    );
}

#[test]
fn every_invalid_field_is_named() {
    let cases = [
        (json!({"advertise": []}), "spec.advertise", "at least one"),
        (
            json!({"advertise": ["PodIPs", "EIPs", "PodIPs"]}),
            "spec.advertise[2]",
            "PodIPs is listed twice",
        ),
        (
            json!({"advertise": ["PodIPs"], "communities": ["65000:1", "70000:1"]}),
            "spec.communities[1]",
            "\"70000:1\" is not a valid community",
        ),
        (
            json!({"advertise": ["PodIPs"], "communities": ["no-such-name"]}),
            "spec.communities[0]",
            "not a valid community",
        ),
        (
            json!({"advertise": ["PodIPs"], "largeCommunities": ["1:2:3", "1:2"]}),
            "spec.largeCommunities[1]",
            "not a valid large community",
        ),
        (
            json!({"advertise": ["PodIPs"], "largeCommunities": ["4294967296:0:0"]}),
            "spec.largeCommunities[0]",
            "not a valid large community",
        ),
        (
            json!({"advertise": ["PodIPs"], "asPathPrepend": 11}),
            "spec.asPathPrepend",
            "11 is more than 10 prepends",
        ),
        (
            json!({"advertise": ["PodIPs"], "aggregationLengthV4": 33}),
            "spec.aggregationLengthV4",
            "33 is longer than 32",
        ),
        (
            json!({"advertise": ["PodIPs"], "aggregationLengthV6": 129}),
            "spec.aggregationLengthV6",
            "129 is longer than 128",
        ),
        (
            json!({"advertise": ["PodIPs", "LoadBalancerIPs"], "aggregationLengthV4": 24}),
            "spec.aggregationLengthV4",
            "LoadBalancerIPs have no allocation the speaker knows",
        ),
        (
            json!({"advertise": ["ClusterIPs"], "aggregationLengthV6": 112}),
            "spec.aggregationLengthV6",
            "ClusterIPs have no allocation",
        ),
        (
            json!({"advertise": ["PodIPs"],
                "peerSelector": {"matchExpressions": [{"key": "rack", "operator": "In", "values": []}]}}),
            "spec.peerSelector.matchExpressions[0].values",
            "must not be empty for In",
        ),
        (
            json!({"advertise": ["PodIPs"],
                "subnetSelector": {"matchExpressions": [{"key": "a", "operator": "Exists"},
                    {"key": "b", "operator": "Like"}]}}),
            "spec.subnetSelector.matchExpressions[1].operator",
            "\"Like\" is not one of",
        ),
        (
            json!({"advertise": ["PodIPs"], "namespaceSelector": {"matchLabels": {"": "x"}}}),
            "spec.namespaceSelector.matchLabels",
            "must not be empty",
        ),
        (
            json!({"advertise": ["ClusterIPs"],
                "serviceSelector": {"matchExpressions": [{"key": "", "operator": "Exists"}]}}),
            "spec.serviceSelector.matchExpressions[0].key",
            "must not be empty",
        ),
    ];
    for (spec, field, message) in cases {
        let err = validate(&raw_ad("bad", spec.clone())).unwrap_err();
        assert_eq!(err.field, field, "{spec}: {err}");
        assert!(err.message.contains(message), "{spec}: {err}");
        // The message the Warning event carries starts with the field.
        assert!(err.to_string().starts_with(&format!("{field}: ")), "{err}");
    }
    // Aggregating nothing is no aggregation: /32 and /128 are allowed for every kind.
    ad(
        "host-routes",
        json!({"advertise": ["ClusterIPs", "LoadBalancerIPs"], "aggregationLengthV4": 32,
            "aggregationLengthV6": 128}),
    );
    let mut nameless = raw_ad("x", json!({"advertise": ["PodIPs"]}));
    nameless.metadata.name = None;
    assert_eq!(validate(&nameless).unwrap_err().field, "metadata.name");
}
