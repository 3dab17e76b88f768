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
mod tests;
