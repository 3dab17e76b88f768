//! A subnet's `natOutgoingPolicyRules`: validation, and the status entries with the IDs the node
//! daemons name their sets after (`ovn40natpr-<ruleID>-src`, `-dst`).
//!
//! The ID is Kube-OVN's, so a node running Kube-OVN's daemon, or ours, finds the same sets: the
//! first 12 hex characters of SHA-256 over the subnet's name, the rule's index in decimal and
//! the rule as Go's `encoding/json` writes Kube-OVN's rule struct — `{"match":{"srcIPs":…,
//! "dstIPs":…},"action":…}`, fields in that order, `srcIPs`/`dstIPs` left out when empty (they
//! are `omitempty`), `match` and `action` always written (they are not). Members our types keep
//! beyond those (a newer Kube-OVN's fields) are not part of Go's struct, so not of the hash.
//!
//! Rules are checked as Kube-OVN's validator does (every comma-separated entry an address or a
//! CIDR, one family per list, the same family for source and destination), and, stricter, the
//! action must be `nat` or `forward` (Kube-OVN's daemon skips any other). With `natOutgoing`
//! off the status list is empty, as Kube-OVN writes it.
//!
//! Pure: no I/O.

use std::fmt::Write as _;
use std::net::IpAddr;

use ipnet::IpNet;
use kube_ovn_api::crd::{
    NatOutgoingPolicyMatch, NatOutgoingPolicyRule, NatOutgoingPolicyRuleStatus, SubnetSpec,
};

/// Kube-OVN's `NatPolicyRuleIDLength`.
const RULE_ID_LEN: usize = 12;

/// The actions Kube-OVN's daemon knows.
const ACTIONS: [&str; 2] = ["nat", "forward"];

fn non_empty(s: Option<&String>) -> Option<&str> {
    s.map(String::as_str).filter(|s| !s.is_empty())
}

/// Appends `s` as Go's `encoding/json` writes a string: `"` and `\` escaped, `\b \f \n \r \t`
/// short, other control characters as `\u00XX`, and (Go's HTML-safe default) `<`, `>`, `&`,
/// U+2028 and U+2029 as `\uXXXX`.
fn go_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || matches!(c, '<' | '>' | '&' | '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The rule as Go's `json.Marshal` writes Kube-OVN's `NatOutgoingPolicyRule`.
pub fn go_json(rule: &NatOutgoingPolicyRule) -> String {
    let m = rule.match_.as_ref();
    let mut out = String::from("{\"match\":{");
    let mut first = true;
    for (key, value) in [
        ("srcIPs", m.and_then(|m| non_empty(m.src_ips.as_ref()))),
        ("dstIPs", m.and_then(|m| non_empty(m.dst_ips.as_ref()))),
    ] {
        if let Some(v) = value {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(out, "\"{key}\":");
            go_string(&mut out, v);
        }
    }
    out.push_str("},\"action\":");
    go_string(&mut out, rule.action.as_deref().unwrap_or_default());
    out.push('}');
    out
}

/// Kube-OVN's rule ID: sha256(subnet name ‖ index in decimal ‖ [`go_json`]), first 12 hex chars.
pub fn rule_id(subnet: &str, index: usize, rule: &NatOutgoingPolicyRule) -> String {
    let input = format!("{subnet}{index}{}", go_json(rule));
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    let mut hex = String::with_capacity(64);
    for b in digest.as_ref() {
        let _ = write!(hex, "{b:02x}");
    }
    hex.truncate(RULE_ID_LEN);
    hex
}

/// Checks one `srcIPs`/`dstIPs` list and returns its family (true: IPv4).
fn check_ips(field: &str, list: &str) -> Result<bool, (String, String)> {
    let bad = |why: String| (field.to_owned(), why);
    let mut family = None;
    // As Kube-OVN: the list is trimmed, its entries are not.
    for entry in list.trim().split(',') {
        let v4 = match (entry.parse::<IpNet>(), entry.parse::<IpAddr>()) {
            (Ok(net), _) => net.addr().is_ipv4(),
            (_, Ok(ip)) => ip.is_ipv4(),
            _ => {
                return Err(bad(format!(
                    "{entry:?} (in {list:?}) is not an IP address or CIDR"
                )));
            }
        };
        if family.is_some_and(|f| f != v4) {
            return Err(bad(format!("{list:?} mixes IPv4 and IPv6")));
        }
        family = Some(v4);
    }
    Ok(family.unwrap_or(true))
}

fn check(index: usize, rule: &NatOutgoingPolicyRule) -> Result<(), (String, String)> {
    let at = format!("spec.natOutgoingPolicyRules[{index}]");
    let action = rule.action.as_deref().unwrap_or_default();
    if !ACTIONS.contains(&action) {
        return Err((
            format!("{at}.action"),
            format!("{action:?} is neither nat nor forward"),
        ));
    }
    let m = rule.match_.as_ref();
    let src = m
        .and_then(|m| non_empty(m.src_ips.as_ref()))
        .map(|l| check_ips(&format!("{at}.match.srcIPs"), l))
        .transpose()?;
    let dst = m
        .and_then(|m| non_empty(m.dst_ips.as_ref()))
        .map(|l| check_ips(&format!("{at}.match.dstIPs"), l))
        .transpose()?;
    if let (Some(s), Some(d)) = (src, dst)
        && s != d
    {
        return Err((
            format!("{at}.match"),
            "srcIPs and dstIPs are of different IP families".to_owned(),
        ));
    }
    Ok(())
}

/// `status.natOutgoingPolicyRules` for a subnet, as Kube-OVN writes it: each rule's match
/// (empty lists left out) and action, with its ID; empty when `natOutgoing` is off. A bad rule
/// is an error naming the field, and no entry is computed.
pub fn status_rules(
    subnet: &str,
    spec: &SubnetSpec,
) -> Result<Vec<NatOutgoingPolicyRuleStatus>, (String, String)> {
    let rules = spec.nat_outgoing_policy_rules.as_deref().unwrap_or_default();
    for (i, rule) in rules.iter().enumerate() {
        check(i, rule)?;
    }
    if spec.nat_outgoing != Some(true) {
        return Ok(Vec::new());
    }
    Ok(rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let m = rule.match_.as_ref();
            NatOutgoingPolicyRuleStatus {
                action: Some(rule.action.clone().unwrap_or_default()),
                match_: Some(NatOutgoingPolicyMatch {
                    src_ips: m.and_then(|m| non_empty(m.src_ips.as_ref())).map(str::to_owned),
                    dst_ips: m.and_then(|m| non_empty(m.dst_ips.as_ref())).map(str::to_owned),
                    ..NatOutgoingPolicyMatch::default()
                }),
                rule_id: Some(rule_id(subnet, i, rule)),
                ..NatOutgoingPolicyRuleStatus::default()
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
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
            let s = spec(
                json!({"cidrBlock": "10.16.0.0/16", "natOutgoing": true, "natOutgoingPolicyRules": rules}),
            );
            status_rules("s", &s).unwrap_err()
        };
        let ok = json!({"match": {"srcIPs": "10.16.0.0/24"}, "action": "nat"});
        let (field, why) =
            err(json!([ok, {"match": {"srcIPs": "10.16.0.0/24,10.17.0.300"}, "action": "nat"}]));
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
}
