use serde_json::json;

use super::*;

fn rule(v: serde_json::Value) -> NatOutgoingPolicyRule {
    serde_json::from_value(v).unwrap()
}

fn spec(v: serde_json::Value) -> SubnetSpec {
    serde_json::from_value(v).unwrap()
}

/// The expected IDs were computed outside this code, from the bytes Kube-OVN hashes:
///
/// ```sh
/// printf '%s' 'net10{"match":{"srcIPs":"10.16.0.0/24","dstIPs":"198.51.100.0/24"},"action":"nat"}' | sha256sum  # f2b8c6c24575…
/// printf '%s' 'net11{"match":{"dstIPs":"203.0.113.0/24,192.0.2.1"},"action":"forward"}' | sha256sum                # 8ce81531baea…
/// printf '%s' 'net12{"match":{},"action":"nat"}' | sha256sum                                                       # 9d56cc1a8239…
/// printf '%s' 'ovn-default10{"match":{"srcIPs":"fd00:10:16::/64"},"action":"forward"}' | sha256sum                 # 9eae97b9fe19…
/// ```
///
/// The JSON is Go's encoding of Kube-OVN's `NatOutgoingPolicyRule{Match
/// NatOutGoingPolicyMatch `json:"match"`; Action string `json:"action"`}` with
/// `NatOutGoingPolicyMatch{SrcIPs `json:"srcIPs,omitempty"`; DstIPs `json:"dstIPs,omitempty"`}`
/// (pkg/apis/kubeovn/v1/subnet.go); the input is name + strconv.Itoa(index) + JSON
/// (pkg/controller/subnet_status.go). The last case has index 10 after name "ovn-default1".
#[test]
fn rule_ids_are_kube_ovns() {
    let s = spec(
        json!({"cidrBlock": "10.16.0.0/16", "natOutgoing": true, "natOutgoingPolicyRules": [
            {"match": {"dstIPs": "198.51.100.0/24", "srcIPs": "10.16.0.0/24"}, "action": "nat"},
            {"action": "forward", "match": {"srcIPs": "", "dstIPs": "203.0.113.0/24,192.0.2.1"}},
            {"action": "nat"},
        ]}),
    );
    let status = status_rules("net1", &s).unwrap();
    let ids: Vec<&str> = status.iter().map(|r| r.rule_id.as_deref().unwrap()).collect();
    assert_eq!(ids, ["f2b8c6c24575", "8ce81531baea", "9d56cc1a8239"]);
    assert_eq!(
        go_json(&s.nat_outgoing_policy_rules.as_ref().unwrap()[0]),
        r#"{"match":{"srcIPs":"10.16.0.0/24","dstIPs":"198.51.100.0/24"},"action":"nat"}"#
    );
    let v6 = rule(json!({"match": {"srcIPs": "fd00:10:16::/64"}, "action": "forward"}));
    assert_eq!(rule_id("ovn-default1", 0, &v6), rule_id("ovn-default", 10, &v6));
    assert_eq!(rule_id("ovn-default1", 0, &v6), "9eae97b9fe19");
    // The status entries are Kube-OVN's: ruleID, match without empty lists, action.
    assert_eq!(
        serde_json::to_value(&status).unwrap(),
        json!([
            {"ruleID": "f2b8c6c24575", "action": "nat",
                "match": {"srcIPs": "10.16.0.0/24", "dstIPs": "198.51.100.0/24"}},
            {"ruleID": "8ce81531baea", "action": "forward", "match": {"dstIPs": "203.0.113.0/24,192.0.2.1"}},
            {"ruleID": "9d56cc1a8239", "action": "nat", "match": {}},
        ])
    );
}

#[test]
fn members_beyond_kube_ovns_struct_do_not_change_the_id() {
    let plain = rule(json!({"match": {"srcIPs": "10.16.0.0/24"}, "action": "nat"}));
    let more = rule(json!({"match": {"srcIPs": "10.16.0.0/24", "ports": "80"}, "action": "nat", "x": 1}));
    assert_eq!(rule_id("s", 0, &plain), rule_id("s", 0, &more));
    assert_ne!(rule_id("s", 0, &plain), rule_id("s", 1, &plain));
    assert_ne!(rule_id("s", 0, &plain), rule_id("t", 0, &plain));
}

#[test]
fn strings_are_escaped_as_go_escapes_them() {
    let mut out = String::new();
    go_string(&mut out, "a\"b\\c\n\u{1}<>&\u{2028}é");
    assert_eq!(out, r#""a\"b\\c\n\u0001\u003c\u003e\u0026\u2028é""#);
}

#[test]
fn natoutgoing_off_empties_the_list_but_rules_are_still_checked() {
    let off = spec(json!({"cidrBlock": "10.16.0.0/16", "natOutgoingPolicyRules": [
        {"match": {"srcIPs": "10.16.0.0/24"}, "action": "nat"}]}));
    assert_eq!(status_rules("s", &off).unwrap(), []);
    let bad = spec(json!({"cidrBlock": "10.16.0.0/16", "natOutgoingPolicyRules": [
        {"match": {"srcIPs": "10.16.0.300"}, "action": "nat"}]}));
    assert!(status_rules("s", &bad).is_err());
}

#[test]
fn bad_rules_name_their_field() {
    let err = |rules: serde_json::Value| {
        let s =
            spec(json!({"cidrBlock": "10.16.0.0/16", "natOutgoing": true, "natOutgoingPolicyRules": rules}));
        status_rules("s", &s).unwrap_err()
    };
    let ok = json!({"match": {"srcIPs": "10.16.0.0/24"}, "action": "nat"});
    let (field, why) = err(json!([ok, {"match": {"srcIPs": "10.16.0.0/24,10.17.0.300"}, "action": "nat"}]));
    assert_eq!(field, "spec.natOutgoingPolicyRules[1].match.srcIPs");
    assert!(why.contains("10.17.0.300"), "{why}");
    let (field, _) = err(json!([{"match": {"dstIPs": "1.2.3.0/24,"}, "action": "nat"}]));
    assert_eq!(field, "spec.natOutgoingPolicyRules[0].match.dstIPs");
    let (field, _) = err(json!([{"match": {"dstIPs": "1.2.3.4, 1.2.3.5"}, "action": "nat"}]));
    assert_eq!(
        field, "spec.natOutgoingPolicyRules[0].match.dstIPs",
        "entries are not trimmed"
    );
    let (field, why) = err(json!([{"match": {"dstIPs": "1.2.3.4,fd00::1"}, "action": "nat"}]));
    assert_eq!(field, "spec.natOutgoingPolicyRules[0].match.dstIPs");
    assert!(why.contains("mixes"), "{why}");
    let (field, _) =
        err(json!([{"match": {"srcIPs": "10.16.0.0/24", "dstIPs": "fd00::/64"}, "action": "nat"}]));
    assert_eq!(field, "spec.natOutgoingPolicyRules[0].match");
    let (field, why) = err(json!([{"match": {"srcIPs": "10.16.0.0/24"}, "action": "snat"}]));
    assert_eq!(field, "spec.natOutgoingPolicyRules[0].action");
    assert!(why.contains("\"snat\""), "{why}");
    let (field, _) = err(json!([{"match": {"srcIPs": "10.16.0.0/24"}}]));
    assert_eq!(field, "spec.natOutgoingPolicyRules[0].action");
    // Kube-OVN's validator accepts these: a trimmed list, host bits in a CIDR, a lone address.
    let s = spec(
        json!({"cidrBlock": "10.16.0.0/16", "natOutgoing": true, "natOutgoingPolicyRules": [
        {"match": {"srcIPs": " 10.16.0.1/24 ", "dstIPs": "192.0.2.1"}, "action": "forward"}]}),
    );
    assert!(status_rules("s", &s).is_ok());
}
