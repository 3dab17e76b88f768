//! OVN northbound (and southbound, Open_vSwitch) rows `kubectl ko trace` and `diagnose` read (`ovn-nbctl --format=json list …`), decoded from
//! OVSDB's JSON notation (`["set", […]]`, `["map", [[k, v], …]]`). Pure.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use serde_json::Value;

use super::verdict::NbAcl;

/// `{"headings": [...], "data": [[...], ...]}` as rows of column → value.
pub fn rows(text: &str) -> anyhow::Result<Vec<BTreeMap<String, Value>>> {
    let doc: Value = serde_json::from_str(text).context("ovn-nbctl's JSON")?;
    let Some(headings) = doc["headings"].as_array() else {
        bail!("ovn-nbctl's JSON has no headings");
    };
    let headings: Vec<String> = headings
        .iter()
        .map(|h| h.as_str().unwrap_or_default().to_owned())
        .collect();
    Ok(doc["data"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|row| {
            headings
                .iter()
                .cloned()
                .zip(row.as_array().cloned().unwrap_or_default())
                .collect()
        })
        .collect())
}

/// A string column (an empty optional one is `["set", []]`).
pub fn string(v: Option<&Value>) -> Option<String> {
    v.and_then(Value::as_str).map(str::to_owned)
}

/// A map column's pairs.
pub fn map(v: Option<&Value>) -> BTreeMap<String, String> {
    let Some(Value::Array(parts)) = v else {
        return BTreeMap::new();
    };
    if parts.first().and_then(Value::as_str) != Some("map") {
        return BTreeMap::new();
    }
    parts
        .get(1)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter_map(|pair| Some((string(pair.get(0))?, string(pair.get(1))?)))
        .collect()
}

/// `ovn-nbctl --format=json --columns=name,direction,priority,match,action list ACL`.
pub fn acls(text: &str) -> anyhow::Result<Vec<NbAcl>> {
    Ok(rows(text)?
        .iter()
        .map(|r| NbAcl {
            name: string(r.get("name")),
            direction: string(r.get("direction")).unwrap_or_default(),
            priority: r.get("priority").and_then(Value::as_i64).unwrap_or_default(),
            r#match: string(r.get("match")).unwrap_or_default(),
            action: string(r.get("action")).unwrap_or_default(),
        })
        .collect())
}

/// `ovn-nbctl --format=json --columns=name,external_ids list Port_Group`: port group → the
/// NetworkPolicy (`external_ids:np`) it was made for.
pub fn policies_by_group(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    Ok(rows(text)?
        .iter()
        .filter_map(|r| {
            let np = map(r.get("external_ids")).remove("np")?;
            Some((string(r.get("name"))?, np))
        })
        .collect())
}

/// `ovn-nbctl --format=json --columns=addresses list Logical_Switch_Port`: each entry of every
/// port's `addresses` (`"MAC IP…"`, `router`, `unknown`).
pub fn port_addresses(text: &str) -> anyhow::Result<Vec<String>> {
    Ok(rows(text)?
        .iter()
        .flat_map(|r| match r.get("addresses") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(parts)) if parts.first().and_then(Value::as_str) == Some("set") => parts
                .get(1)
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        })
        .collect())
}

/// `ovn-nbctl --format=json --columns=_uuid,addresses find Logical_Switch_Port name=…`: the
/// port's UUID and its `addresses` entries; `None` when there is no such port.
pub fn port_record(text: &str) -> anyhow::Result<Option<(String, Vec<String>)>> {
    let Some(row) = rows(text)?.into_iter().next() else {
        return Ok(None);
    };
    let uuid = match row.get("_uuid") {
        Some(Value::Array(pair)) if pair.first().and_then(Value::as_str) == Some("uuid") => {
            string(pair.get(1)).context("ovn-nbctl's _uuid")?
        }
        other => bail!("ovn-nbctl's _uuid is not a UUID: {other:?}"),
    };
    Ok(Some((uuid, port_addresses(text)?)))
}

/// `ovn-nbctl --format=json --columns=name find Logical_Switch ports{>=}<uuid>`: the switch's
/// name.
pub fn switch_name(text: &str) -> anyhow::Result<Option<String>> {
    Ok(rows(text)?.iter().find_map(|r| string(r.get("name"))))
}

/// `ovn-nbctl --format=json --columns=mac find Logical_Router_Port name=…`: the router port's MAC.
pub fn router_port_mac(text: &str) -> anyhow::Result<Option<String>> {
    Ok(rows(text)?.iter().find_map(|r| string(r.get("mac"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ports_record_and_its_switch() {
        // As ovn-nbctl 23.03 prints them.
        let lsp = r#"{"data":[[["uuid","6c1f6f0e-6d2b-4f5c-9d7e-1a2b3c4d5e6f"],"00:00:00:aa:bb:cc 10.16.0.10"]],"headings":["_uuid","addresses"]}"#;
        let (uuid, addresses) = port_record(lsp).unwrap().unwrap();
        assert_eq!(uuid, "6c1f6f0e-6d2b-4f5c-9d7e-1a2b3c4d5e6f");
        assert_eq!(addresses, ["00:00:00:aa:bb:cc 10.16.0.10"]);
        assert_eq!(
            port_record(r#"{"data":[],"headings":["_uuid","addresses"]}"#).unwrap(),
            None
        );
        let ls = r#"{"data":[["ovn-default"]],"headings":["name"]}"#;
        assert_eq!(switch_name(ls).unwrap().as_deref(), Some("ovn-default"));
    }

    #[test]
    fn rows_in_ovsdb_json_notation() {
        // As ovn-nbctl 23.03 prints them.
        let acl = r#"{"data":[["deny.demo",2000,"outport == @deny.demo && ip","drop"],[["set",[]],2001,"ip","allow-related"]],"headings":["name","priority","match","action"]}"#;
        let got = acls(acl).unwrap();
        assert_eq!(got[0].name.as_deref(), Some("deny.demo"));
        assert_eq!(got[0].priority, 2000);
        assert_eq!(got[1].name, None);
        assert_eq!(got[1].action, "allow-related");
        let pg = r#"{"data":[["deny.demo",["map",[["np","demo/deny"]]]],["node.node1",["map",[]]]],"headings":["name","external_ids"]}"#;
        assert_eq!(
            policies_by_group(pg).unwrap().into_iter().collect::<Vec<_>>(),
            vec![("deny.demo".to_owned(), "demo/deny".to_owned())]
        );
        let lsp = r#"{"data":[["router"],["00:00:00:00:00:0a 10.16.0.10"],[["set",["00:00:00:00:00:0b 10.16.0.11","unknown"]]]],"headings":["addresses"]}"#;
        assert_eq!(
            port_addresses(lsp).unwrap(),
            vec![
                "router",
                "00:00:00:00:00:0a 10.16.0.10",
                "00:00:00:00:00:0b 10.16.0.11",
                "unknown"
            ]
        );
        let lrp = r#"{"data":[["00:00:00:00:00:01"]],"headings":["mac"]}"#;
        assert_eq!(
            router_port_mac(lrp).unwrap().as_deref(),
            Some("00:00:00:00:00:01")
        );
        assert!(acls("not json").is_err());
    }
}
