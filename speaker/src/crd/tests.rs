use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};

use super::*;
use crate::bgp::fsm::State;
use crate::bgp::wire::{Family, LargeCommunity};

fn spec(value: Value) -> BgpPeerSpec {
    serde_json::from_value(value).unwrap()
}

fn minimal() -> Value {
    json!({ "peerAddress": "10.0.0.1", "peerASN": 65001 })
}

fn with(extra: &Value) -> BgpPeerSpec {
    let mut v = minimal();
    v.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    spec(v)
}

fn error(extra: &Value) -> String {
    with(extra).validate().unwrap_err().to_string()
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn minimal_spec_takes_the_defaults() {
    let peer = spec(minimal()).validate().unwrap();
    assert_eq!(
        peer.target,
        PeerTarget::Address(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))
    );
    assert_eq!(peer.port, 179);
    assert_eq!(peer.peer_asn, 65001);
    assert_eq!(peer.local_asn, None);
    assert_eq!(peer.local_asn_or(65000).unwrap(), 65000);
    assert_eq!(
        peer.families, None,
        "the address's family, decided with extended next hop"
    );
    assert_eq!(
        (peer.extended_nexthop, peer.vrf.as_deref()),
        (None, None),
        "the flags decide"
    );
    assert!(peer.communities.is_empty() && peer.password.is_none() && peer.bfd.is_none());
    assert!(peer.selects(&labels(&[])));
}

#[test]
fn full_spec_parses() {
    let peer = with(&json!({
        "localASN": 65001,
        "port": 1179,
        "passwordSecretRef": { "name": "tor", "namespace": "kube-system" },
        "holdTime": 9, "keepaliveTime": 3, "passive": true, "ebgpMultihop": 3,
        "ttlSecurity": true,
        "families": ["ipv4-unicast", "ipv6-unicast"],
        "communities": ["65000:100", "no-export", "NO-ADVERTISE", "no-export-subconfed", "blackhole"],
        "largeCommunities": ["4200000000:1:2"],
        "localPref": 200, "med": 10, "gracefulRestart": true,
        "bfd": { "enabled": true, "minTxMs": 300, "multiplier": 5 },
    }))
    .validate()
    .unwrap();
    assert_eq!(peer.port, 1179);
    assert_eq!(
        peer.password,
        Some(PasswordRef {
            namespace: "kube-system".into(),
            name: "tor".into(),
            key: "password".into()
        })
    );
    assert_eq!((peer.hold_time, peer.keepalive_time), (Some(9), Some(3)));
    assert_eq!((peer.ebgp_multihop, peer.ttl_security), (Some(3), Some(true)));
    assert_eq!(
        peer.families,
        Some(vec![Family::Ipv4Unicast, Family::Ipv6Unicast])
    );
    assert_eq!(
        peer.communities,
        vec![
            (65000 << 16) | 0x64,
            0xFFFF_FF01,
            0xFFFF_FF02,
            0xFFFF_FF03,
            0xFFFF_029A
        ]
    );
    assert_eq!(
        peer.large_communities,
        vec![LargeCommunity {
            global_admin: 4_200_000_000,
            local_data1: 1,
            local_data2: 2
        }]
    );
    assert_eq!(peer.local_asn_or(1).unwrap(), 65001);
    let bfd = peer.bfd.unwrap();
    assert_eq!(bfd.desired_min_tx, Duration::from_millis(300));
    assert_eq!(bfd.required_min_rx, Duration::from_secs(1));
    assert_eq!(bfd.detect_mult, 5);
}

#[test]
fn errors_name_the_field() {
    let cases = [
        (
            json!({ "peerAddress": "10.0.0.300" }),
            "spec.peerAddress: \"10.0.0.300\" is not an IP address",
        ),
        (
            json!({ "peerAddress": "224.0.0.5" }),
            "spec.peerAddress: 224.0.0.5 is not a unicast address",
        ),
        (json!({ "peerASN": 0 }), "spec.peerASN: AS 0 is reserved"),
        (json!({ "localASN": 0 }), "spec.localASN: AS 0 is reserved"),
        (json!({ "port": 0 }), "spec.port: must not be 0"),
        (json!({ "holdTime": 2 }), "spec.holdTime: must be 0 or at least 3"),
        (
            json!({ "holdTime": 9, "keepaliveTime": 9 }),
            "spec.keepaliveTime: 9s must be less than holdTime (9s)",
        ),
        (
            json!({ "holdTime": 0, "keepaliveTime": 3 }),
            "spec.keepaliveTime: must be absent when holdTime is 0",
        ),
        (json!({ "ebgpMultihop": 0 }), "spec.ebgpMultihop:"),
        (
            json!({ "ttlSecurity": true, "ebgpMultihop": 255 }),
            "spec.ebgpMultihop: with ttlSecurity it counts hops",
        ),
        (json!({ "families": [] }), "spec.families: must not be empty"),
        (
            json!({ "families": ["ipv4-unicast", "l2vpn-evpn"] }),
            "spec.families[1]: \"l2vpn-evpn\" is not one of",
        ),
        (
            json!({ "families": ["ipv6-unicast", "ipv6-unicast"] }),
            "spec.families[1]: \"ipv6-unicast\" is listed twice",
        ),
        (
            json!({ "communities": ["1:1", "2:2", "65536:1"] }),
            "spec.communities[2]: \"65536:1\" is not a valid community",
        ),
        (
            json!({ "communities": ["no-export-please"] }),
            "spec.communities[0]:",
        ),
        (
            json!({ "largeCommunities": ["1:2"] }),
            "spec.largeCommunities[0]: \"1:2\" is not a valid large community",
        ),
        (
            json!({ "largeCommunities": ["1:2:4294967296"] }),
            "spec.largeCommunities[0]:",
        ),
        (
            json!({ "largeCommunities": ["1:2:3:4"] }),
            "spec.largeCommunities[0]:",
        ),
        (
            json!({ "localASN": 65000, "localPref": 50 }),
            "spec.localPref: only sent to internal peers",
        ),
        (
            json!({ "passwordSecretRef": { "name": "", "namespace": "ns" } }),
            "spec.passwordSecretRef.name: must not be empty",
        ),
        (
            json!({ "bfd": { "enabled": true, "minRxMs": 0 } }),
            "spec.bfd.minRxMs:",
        ),
        (
            json!({ "bfd": { "enabled": true, "multiplier": 0 } }),
            "spec.bfd.multiplier:",
        ),
        (
            json!({ "nodeSelector": { "matchExpressions": [{ "key": "a", "operator": "Equals" }] } }),
            "spec.nodeSelector.matchExpressions[0].operator: \"Equals\" is not one of",
        ),
        (
            json!({ "nodeSelector": { "matchExpressions": [{ "key": "a", "operator": "In" }] } }),
            "spec.nodeSelector.matchExpressions[0].values: must not be empty for In",
        ),
        (
            json!({ "nodeSelector": { "matchExpressions": [{ "key": "a", "operator": "Exists", "values": ["x"] }] } }),
            "spec.nodeSelector.matchExpressions[0].values: must be empty for Exists",
        ),
    ];
    for (extra, want) in cases {
        let got = error(&extra);
        assert!(got.starts_with(want), "{extra}: got {got:?}, want {want:?}…");
    }
    // A disabled BFD block is not checked; localPref with the default local AS is checked when
    // the speaker's AS is known.
    assert!(
        with(&json!({ "bfd": { "enabled": false, "minRxMs": 0 } }))
            .validate()
            .is_ok()
    );
    let peer = with(&json!({ "localPref": 50 })).validate().unwrap();
    assert_eq!(peer.local_asn_or(65001).unwrap(), 65001);
    assert!(
        peer.local_asn_or(65000)
            .unwrap_err()
            .to_string()
            .starts_with("spec.localPref:")
    );
}

#[test]
fn communities_parse_by_rfc_1997_and_8092() {
    assert_eq!(parse_community("0:0"), Some(0));
    assert_eq!(parse_community("65535:65535"), Some(u32::MAX));
    assert_eq!(parse_community(" 1:2 "), Some(0x0001_0002));
    for bad in [
        "", "1", "1:", ":1", "1:2:3", "-1:2", "+1:2", "1 :2", "65536:0", "0:65536", "0x1:2",
    ] {
        assert_eq!(parse_community(bad), None, "{bad:?}");
    }
    assert_eq!(
        parse_large_community("4294967295:0:7"),
        Some(LargeCommunity {
            global_admin: u32::MAX,
            local_data1: 0,
            local_data2: 7
        })
    );
    for bad in ["1:2", "1:2:", "1:2:3:", "a:b:c", "1:-2:3", "4294967296:0:0"] {
        assert_eq!(parse_large_community(bad), None, "{bad:?}");
    }
}

fn peer_status(state: State) -> PeerStatus {
    let mut status = PeerStatus::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)));
    status.state = state;
    status
}

#[test]
fn status_patch_sets_one_node_and_clears_stale_values() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_500);
    let mut up = peer_status(State::Established);
    up.established_at = Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_699_999_000));
    up.prefixes_sent = 42;
    assert_eq!(
        status_patch_at("node-a", &up, now),
        json!({ "status": { "nodes": { "node-a": {
            "state": "Established",
            "establishedAt": "2023-11-14T21:56:40Z",
            "prefixesSent": 42,
            "lastError": null,
            "updatedAt": "2023-11-14T22:13:20Z",
        } } } })
    );
    let mut down = peer_status(State::Active);
    down.established_at = up.established_at; // a stale time is not reported once down
    down.last_error = Some("connection refused".into());
    let patch = status_patch_at("node-b", &down, now);
    let entry = &patch["status"]["nodes"]["node-b"];
    assert_eq!(entry["state"], "Active");
    assert_eq!(entry["establishedAt"], Value::Null);
    assert_eq!(entry["lastError"], "connection refused");
    assert_eq!(entry["prefixesSent"], 0);
    assert_eq!(
        remove_node_patch("node-b"),
        json!({ "status": { "nodes": { "node-b": null } } })
    );
}

#[test]
fn summary_counts_established_nodes() {
    let mut peer = BgpPeer::new("tor", spec(minimal()));
    peer.metadata.resource_version = Some("7".into());
    let now = SystemTime::UNIX_EPOCH;
    let patch = status_patch_with_summary("a", &peer_status(State::Established), &peer, now);
    assert_eq!(patch["status"]["established"], "1/1");
    assert_eq!(patch["metadata"]["resourceVersion"], "7");
    let mut status = BgpPeerStatus::default();
    status.nodes.insert(
        "a".into(),
        NodeStatus {
            state: Some("Established".into()),
            ..Default::default()
        },
    );
    status.nodes.insert(
        "b".into(),
        NodeStatus {
            state: Some("Connect".into()),
            ..Default::default()
        },
    );
    peer.status = Some(status);
    let patch = status_patch_with_summary("c", &peer_status(State::Established), &peer, now);
    assert_eq!(patch["status"]["established"], "2/3");
    let patch = status_patch_with_summary("a", &peer_status(State::Idle), &peer, now);
    assert_eq!(patch["status"]["established"], "0/2");
}

#[test]
fn crd_has_names_scope_columns_and_no_nullable() {
    let crd = crd();
    assert_eq!(crd.metadata.name.as_deref(), Some(CRD_NAME));
    assert_eq!(crd.spec.group, GROUP);
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.kind, "BgpPeer");
    assert_eq!(crd.spec.names.short_names, Some(vec!["bgpp".to_owned()]));
    let version = &crd.spec.versions[0];
    assert_eq!(version.name, VERSION);
    assert!(version.subresources.as_ref().unwrap().status.is_some());
    let columns: Vec<_> = version
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(columns, ["Peer", "Interface", "ASN", "Established", "Age"]);
    let text = serde_json::to_string(&crd).unwrap();
    assert!(
        !text.contains("nullable") && !text.contains("\"title\""),
        "{text}"
    );
    let schema = serde_json::to_value(version.schema.as_ref().unwrap()).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], json!(["peerASN"]));
    assert_eq!(
        spec["x-kubernetes-validations"][0]["rule"],
        "has(self.peerAddress) != has(self.peerInterface)"
    );
    assert_eq!(spec["properties"]["peerInterface"]["maxLength"], 15);
    assert_eq!(spec["properties"]["vrf"]["maxLength"], 15);
    assert_eq!(spec["properties"]["extendedNexthop"]["type"], "boolean");
    assert_eq!(
        spec["properties"]["peerASN"]["maximum"].as_f64(),
        Some(4_294_967_295.0)
    );
    assert!(spec["properties"]["nodeSelector"]["properties"]["matchExpressions"].is_object());
}

#[test]
fn a_peer_is_an_address_or_an_interface_with_extended_next_hop() {
    let unnumbered = spec(json!({ "peerInterface": "eth0", "peerASN": 65001, "vrf": "blue" }))
        .validate()
        .unwrap();
    assert_eq!(unnumbered.target, PeerTarget::Interface("eth0".into()));
    assert_eq!(
        unnumbered.extended_nexthop,
        Some(true),
        "IPv4 routes over a link-local session need an IPv6 next hop"
    );
    assert_eq!(unnumbered.vrf.as_deref(), Some("blue"));
    let enh = with(&json!({ "peerAddress": "fd00::1", "extendedNexthop": true }))
        .validate()
        .unwrap();
    assert_eq!(enh.extended_nexthop, Some(true));
    let off = with(&json!({ "extendedNexthop": false })).validate().unwrap();
    assert_eq!(off.extended_nexthop, Some(false), "overrides the flag");
    for (value, message) in [
        (
            json!({ "peerASN": 65001 }),
            "spec.peerAddress: one of peerAddress and peerInterface is required",
        ),
        (
            json!({ "peerAddress": "10.0.0.1", "peerInterface": "eth0", "peerASN": 65001 }),
            "spec.peerInterface: must not be set with peerAddress",
        ),
        (
            json!({ "peerInterface": "eth0/1", "peerASN": 65001 }),
            "spec.peerInterface: \"eth0/1\" is not an interface name",
        ),
        (
            json!({ "peerInterface": "a-very-long-name0", "peerASN": 65001 }),
            "spec.peerInterface: \"a-very-long-name0\" is not an interface name",
        ),
        (
            json!({ "peerInterface": "eth0", "peerASN": 65001, "extendedNexthop": false }),
            "spec.extendedNexthop: must not be false with peerInterface",
        ),
        (
            json!({ "peerInterface": "eth0", "peerASN": 65001, "bfd": { "enabled": true } }),
            "spec.bfd.enabled: BFD is not supported with peerInterface",
        ),
        (
            json!({ "peerAddress": "fe80::1", "peerASN": 65001 }),
            "spec.peerAddress: fe80::1 is link-local: name its interface in peerInterface",
        ),
        (
            json!({ "peerAddress": "10.0.0.1", "peerASN": 65001, "vrf": "" }),
            "spec.vrf: \"\" is not an interface name",
        ),
    ] {
        let error = spec(value.clone()).validate().unwrap_err().to_string();
        assert!(error.starts_with(message), "{value}: {error}");
    }
}
