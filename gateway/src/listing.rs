//! What the kernel has, read from `nft -j list table <family> kube-ovn`: the table's shape
//! (sets, chains and rules, without handles or elements) and every set's elements, so that the
//! node daemon can tell whether its table is still what it applied, whoever else writes rules.
//!
//! The shape is compared with the shape listed right after the daemon's last full apply (nft
//! decides how rules read back, so we do not predict it); the elements are compared with the
//! plan itself, because element updates do not list the table again. Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use serde_json::Value;

use crate::ruleset::{Element, Table};

/// One table as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Everything but handles and set elements, as canonical JSON.
    pub shape: String,
    /// Elements by set name; `None` for a set with an element we do not read (a range that is
    /// no prefix, say), which never equals a plan.
    pub elements: BTreeMap<String, Option<BTreeSet<Element>>>,
}

/// Why a listing could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("nft listing: {0}")]
pub struct ListingError(String);

fn parse_key(value: &Value) -> Option<IpNet> {
    match value {
        Value::String(s) => s.parse::<IpAddr>().ok().map(IpNet::from),
        Value::Object(map) => {
            if let Some(prefix) = map.get("prefix") {
                let addr: IpAddr = prefix.get("addr")?.as_str()?.parse().ok()?;
                let len = u8::try_from(prefix.get("len")?.as_u64()?).ok()?;
                IpNet::new(addr, len).ok()
            } else if let Some(elem) = map.get("elem") {
                // An element with options (counter, comment, timeout) wraps its value.
                parse_key(elem.get("val")?)
            } else {
                None
            }
        }
        _ => None,
    }
}

fn parse_element(value: &Value) -> Option<Element> {
    match value {
        Value::Array(pair) if pair.len() == 2 => {
            let data: IpAddr = pair[1].as_str()?.parse().ok()?;
            Some((parse_key(&pair[0])?, Some(data)))
        }
        other => Some((parse_key(other)?, None)),
    }
}

fn strip(object: &mut Value, keys: &[&str]) {
    if let Value::Object(map) = object {
        for key in keys {
            map.remove(*key);
        }
    }
}

/// Reads the output of `nft -j list table …` (one table).
pub fn parse_listing(json: &str) -> Result<Listing, ListingError> {
    let root: Value = serde_json::from_str(json).map_err(|e| ListingError(e.to_string()))?;
    let items = root
        .get("nftables")
        .and_then(Value::as_array)
        .ok_or_else(|| ListingError("no \"nftables\" array".into()))?;
    let mut shape = Vec::new();
    let mut elements = BTreeMap::new();
    for item in items {
        let Value::Object(map) = item else {
            continue;
        };
        let Some((kind, body)) = map.iter().next() else {
            continue;
        };
        if kind == "metainfo" {
            continue;
        }
        let mut body = body.clone();
        if kind == "set" || kind == "map" {
            let name = body
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let parsed = body.get("elem").and_then(Value::as_array).map_or_else(
                || Some(BTreeSet::new()),
                |elems| elems.iter().map(parse_element).collect::<Option<BTreeSet<_>>>(),
            );
            elements.insert(name, parsed);
            strip(&mut body, &["elem"]);
        }
        strip(&mut body, &["handle"]);
        shape.push(serde_json::json!({ kind: body }));
    }
    Ok(Listing {
        shape: Value::Array(shape).to_string(),
        elements,
    })
}

impl Listing {
    /// Whether the listed table holds exactly `table`'s sets and elements (its rules and
    /// chains are compared through [`Listing::shape`]).
    pub fn elements_match(&self, table: &Table) -> bool {
        self.elements.len() == table.sets.len()
            && table.sets.iter().all(|(name, set)| {
                self.elements.get(name).is_some_and(|listed| {
                    listed.as_ref().is_some_and(|l| {
                        l.len() == set.elements().len()
                            && set.elements().iter().all(|(k, v)| l.contains(&(*k, *v)))
                    })
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_sets_maps_and_strips_handles() {
        let json = r#"{"nftables": [
            {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
            {"table": {"family": "ip", "name": "kube-ovn", "handle": 25}},
            {"set": {"family": "ip", "name": "ovn40subnets", "table": "kube-ovn", "type": "ipv4_addr", "handle": 6,
                     "flags": ["interval"], "elem": [{"prefix": {"addr": "10.16.0.0", "len": 16}}, "100.64.0.2"]}},
            {"set": {"family": "ip", "name": "ovn40other-node", "table": "kube-ovn", "type": "ipv4_addr", "handle": 7, "flags": ["interval"]}},
            {"map": {"family": "ip", "name": "ovn40subnets-snat-ip", "table": "kube-ovn", "type": "ipv4_addr", "map": "ipv4_addr",
                     "handle": 11, "flags": ["interval"], "elem": [[{"prefix": {"addr": "10.20.0.0", "len": 16}}, "172.30.0.50"]]}},
            {"set": {"family": "ip", "name": "odd", "table": "kube-ovn", "type": "ipv4_addr", "handle": 12,
                     "flags": ["interval"], "elem": [{"range": ["10.0.0.1", "10.0.0.5"]}]}},
            {"rule": {"family": "ip", "table": "kube-ovn", "chain": "OVN-MASQUERADE", "handle": 19,
                      "expr": [{"masquerade": {"flags": "fully-random"}}]}}
        ]}"#;
        let listing = parse_listing(json).unwrap();
        let net = |s: &str| s.parse::<IpNet>().unwrap();
        assert_eq!(
            listing.elements["ovn40subnets"],
            Some([(net("10.16.0.0/16"), None), (net("100.64.0.2/32"), None)].into())
        );
        assert_eq!(listing.elements["ovn40other-node"], Some(BTreeSet::new()));
        assert_eq!(
            listing.elements["ovn40subnets-snat-ip"],
            Some([(net("10.20.0.0/16"), Some("172.30.0.50".parse().unwrap()))].into())
        );
        assert_eq!(listing.elements["odd"], None);
        assert!(
            !listing.shape.contains("handle") && !listing.shape.contains("elem"),
            "{}",
            listing.shape
        );
        assert!(listing.shape.contains("fully-random"));
        // Handles and elements do not change the shape.
        let other = json
            .replace("\"handle\": 19", "\"handle\": 91")
            .replace("\"100.64.0.2\"", "\"100.64.0.3\"");
        assert_eq!(parse_listing(&other).unwrap().shape, listing.shape);
        assert!(parse_listing("{}").is_err());
    }
}
