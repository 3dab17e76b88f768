//! Pure: the northbound rows of OVN NAT rules and the plan that makes the replica match them.
//!
//! FIP and SNAT are NAT rows on the VPC router (Kube-OVN's `ovn-nb-nat.go`), marked (ours, plan
//! §3.0.8) with `external_ids` `vendor=kube-ovn` + `ovn_fip|ovn_snat=<rule>` so a later run, a
//! restart and the garbage collector find them; Kube-OVN marks none. A DNAT rule is a load
//! balancer named after the rule (Kube-OVN's), `external_ids:ovn_dnat=<rule>`, attached to the
//! router. A plan touches only the owner's rows, and is empty when they are as wanted: a restart
//! writes nothing.

use std::collections::BTreeMap;

use kube_ovn_ovsdb::tables::nb::{LoadBalancer, LogicalRouter, Nat};
use kube_ovn_ovsdb::{Atom, DbCache, Row, Table, Uuid, Value};

use crate::ovn::plan::{Plan, RowRef, VENDOR, VENDOR_KEY, is_owned_by, owned_ids};

/// The `external_ids` key naming a FIP's, SNAT's and DNAT's rows.
pub const FIP_KEY: &str = "ovn_fip";
pub const SNAT_KEY: &str = "ovn_snat";
pub const DNAT_KEY: &str = "ovn_dnat";

/// One NAT row as a rule wants it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct NatRow {
    /// `dnat_and_snat` or `snat`.
    pub kind: &'static str,
    pub external_ip: String,
    pub logical_ip: String,
    pub external_mac: Option<String>,
    pub logical_port: Option<String>,
    pub stateless: bool,
}

impl NatRow {
    fn matches(&self, row: &Nat) -> bool {
        row.r#type == self.kind
            && row.external_ip == self.external_ip
            && row.logical_ip == self.logical_ip
            && row.external_mac == self.external_mac
            && row.logical_port == self.logical_port
            && row.options.get("stateless").map(String::as_str) == self.stateless.then_some("true")
    }

    fn to_nat(&self, owner: (&str, &str)) -> Nat {
        let mut options = BTreeMap::new();
        if self.stateless {
            options.insert("stateless".into(), "true".into());
        }
        Nat {
            r#type: self.kind.into(),
            external_ip: self.external_ip.clone(),
            logical_ip: self.logical_ip.clone(),
            external_mac: self.external_mac.clone(),
            logical_port: self.logical_port.clone(),
            options,
            external_ids: owned_ids(&[owner]),
            ..Nat::default()
        }
    }
}

/// Pairs external and internal addresses family by family; when only one side has each family
/// (an IPv4 EIP for an IPv6-only pod), the one of each (Kube-OVN's cross-family case).
pub fn pair(
    ext_v4: Option<&str>,
    ext_v6: Option<&str>,
    int_v4: Option<&str>,
    int_v6: Option<&str>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let (Some(e), Some(i)) = (ext_v4, int_v4) {
        out.push((e.to_owned(), i.to_owned()));
    }
    if let (Some(e), Some(i)) = (ext_v6, int_v6) {
        out.push((e.to_owned(), i.to_owned()));
    }
    if out.is_empty() {
        let e = ext_v4.or(ext_v6);
        let i = int_v4.or(int_v6);
        if let (Some(e), Some(i)) = (e, i) {
            out.push((e.to_owned(), i.to_owned()));
        }
    }
    out
}

/// Whether a stored row's map column `column` has `key` = `value`, read without decoding the
/// row (a plan runs per rule and looks at every NAT row of the router: decoding each one made
/// 1,000 FIPs cost a million row decodes).
fn has(row: &Row, column: &str, key: &Atom, value: &str) -> bool {
    matches!(row.get(column), Some(Value::Map(m)) if m.get(key).and_then(Atom::as_str) == Some(value))
}

fn string_column<'r>(row: &'r Row, column: &str) -> Option<&'r str> {
    match row.get(column) {
        Some(Value::Atom(a)) => a.as_str(),
        _ => None,
    }
}

/// Makes the owner's NAT rows exactly `desired` on `router` (none anywhere when `router` is
/// `None`). With `replace_foreign`, another writer's `dnat_and_snat` for the same external
/// address on that router goes first, as Kube-OVN replaces it (one FIP per EIP is ours to keep).
pub fn sync_nat(
    plan: &mut Plan,
    cache: &DbCache,
    owner: (&str, &str),
    router: Option<&str>,
    desired: &[NatRow],
    replace_foreign: bool,
) {
    let target = router.and_then(|r| cache.uuids_by_name(LogicalRouter::NAME, r).first().copied());
    let mut wanted: Vec<&NatRow> = if target.is_some() {
        desired.iter().collect()
    } else {
        Vec::new()
    };
    let (owner_key, vendor_key, fip_key) = (
        Atom::string(owner.0),
        Atom::string(VENDOR_KEY),
        Atom::string(FIP_KEY),
    );
    let mut remove: BTreeMap<Uuid, Vec<Uuid>> = BTreeMap::new();
    for (lr, lr_row) in cache.table(LogicalRouter::NAME) {
        let Some(Value::Set(nat)) = lr_row.get("nat") else {
            continue;
        };
        for uuid in nat.iter().filter_map(Atom::as_uuid) {
            let Some(row) = cache.row(Nat::NAME, &uuid) else {
                continue;
            };
            let ids = "external_ids";
            if has(row, ids, &owner_key, owner.1) && has(row, ids, &vendor_key, VENDOR) {
                if Some(*lr) == target
                    && let Ok(nat) = Nat::from_row(uuid, row)
                    && let Some(i) = wanted.iter().position(|w| w.matches(&nat))
                {
                    wanted.remove(i);
                    continue;
                }
                remove.entry(*lr).or_default().push(uuid);
            } else if replace_foreign
                && Some(*lr) == target
                && string_column(row, "type") == Some("dnat_and_snat")
                && string_column(row, "external_ip")
                    .is_some_and(|e| desired.iter().any(|d| d.external_ip == e))
                && !matches!(row.get(ids), Some(Value::Map(m)) if m.contains_key(&fip_key))
            {
                remove.entry(*lr).or_default().push(uuid);
            }
        }
    }
    for (lr, rows) in remove {
        plan.remove_members(LogicalRouter::NAME, &RowRef::Existing(lr), "nat", &rows);
    }
    if let Some(lr) = target {
        let refs: Vec<RowRef> = wanted
            .iter()
            .map(|w| plan.insert(Nat::NAME, w.to_nat(owner).to_row()))
            .collect();
        plan.add_members(
            LogicalRouter::NAME,
            &RowRef::Existing(lr),
            "nat",
            |_| false,
            &refs,
        );
    }
}

/// A DNAT rule's load balancer as wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnatLb {
    /// `tcp` or `udp`.
    pub protocol: &'static str,
    /// `eip:port` (`[v6]:port`) → `ip:port`.
    pub vips: BTreeMap<String, String>,
}

/// `addr:port`, with an IPv6 address in brackets (OVN's VIP syntax).
pub fn endpoint(addr: &str, port: u16) -> String {
    if addr.contains(':') {
        format!("[{addr}]:{port}")
    } else {
        format!("{addr}:{port}")
    }
}

fn lb_row(rule: &str, lb: &DnatLb) -> LoadBalancer {
    let mut options = BTreeMap::new();
    // UDP has no end of connection: flush conntrack of removed backends (Kube-OVN's ct_flush).
    if lb.protocol == "udp" {
        options.insert("ct_flush".into(), "true".into());
    }
    LoadBalancer {
        name: rule.into(),
        vips: lb.vips.clone(),
        protocol: Some(lb.protocol.into()),
        options,
        external_ids: owned_ids(&[(DNAT_KEY, rule)]),
        ..LoadBalancer::default()
    }
}

/// The load balancers a DNAT rule owns (by `external_ids`), whatever their name.
fn owned_lbs(cache: &DbCache, rule: &str) -> Vec<LoadBalancer> {
    cache
        .rows::<LoadBalancer>()
        .unwrap_or_default()
        .into_iter()
        .filter(|lb| is_owned_by(&lb.external_ids, &[(DNAT_KEY, rule)]))
        .collect()
}

/// Detaches `lbs` from every router that holds them.
fn detach_everywhere(plan: &mut Plan, cache: &DbCache, lbs: &[Uuid], keep_on: Option<Uuid>) {
    for router in cache.rows::<LogicalRouter>().unwrap_or_default() {
        let held: Vec<Uuid> = router
            .load_balancer
            .iter()
            .copied()
            .filter(|u| lbs.contains(u) && Some(router.uuid) != keep_on)
            .collect();
        plan.remove_members(
            LogicalRouter::NAME,
            &RowRef::Existing(router.uuid),
            "load_balancer",
            &held,
        );
    }
}

/// Makes rule `rule`'s load balancer `desired` on `router`, or removes it (`None`).
pub fn sync_dnat(
    plan: &mut Plan,
    cache: &DbCache,
    rule: &str,
    router: Option<&str>,
    desired: Option<&DnatLb>,
) {
    let target = router.and_then(|r| cache.uuids_by_name(LogicalRouter::NAME, r).first().copied());
    let owned = owned_lbs(cache, rule);
    let (Some(lr), Some(want)) = (target, desired) else {
        let uuids: Vec<Uuid> = owned.iter().map(|l| l.uuid).collect();
        detach_everywhere(plan, cache, &uuids, None);
        for u in uuids {
            plan.delete(LoadBalancer::NAME, u);
        }
        return;
    };
    let row = lb_row(rule, want);
    let lb = plan.ensure(
        cache,
        rule,
        &row,
        &["vips", "protocol", "options", "external_ids"],
    );
    let stray: Vec<Uuid> = owned
        .iter()
        .map(|l| l.uuid)
        .filter(|u| lb.existing() != Some(*u))
        .collect();
    detach_everywhere(plan, cache, &stray, None);
    for u in stray {
        plan.delete(LoadBalancer::NAME, u);
    }
    if let Some(u) = lb.existing() {
        detach_everywhere(plan, cache, &[u], Some(lr));
    }
    let attached = cache
        .get::<LogicalRouter>(&lr)
        .ok()
        .flatten()
        .map(|r| r.load_balancer)
        .unwrap_or_default();
    plan.add_members(
        LogicalRouter::NAME,
        &RowRef::Existing(lr),
        "load_balancer",
        |u| attached.contains(u),
        &[lb],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_pair_and_cross_when_alone() {
        assert_eq!(
            pair(Some("10.200.0.10"), None, Some("10.1.0.2"), Some("fd00::2")),
            vec![("10.200.0.10".to_owned(), "10.1.0.2".to_owned())]
        );
        assert_eq!(
            pair(
                Some("10.200.0.10"),
                Some("fd10::10"),
                Some("10.1.0.2"),
                Some("fd00::2")
            )
            .len(),
            2
        );
        assert_eq!(
            pair(Some("10.200.0.10"), None, None, Some("fd00::2")),
            vec![("10.200.0.10".to_owned(), "fd00::2".to_owned())],
            "cross-family when only one side has each"
        );
        assert!(pair(None, None, Some("10.1.0.2"), None).is_empty());
        assert_eq!(endpoint("fd00::1", 80), "[fd00::1]:80");
        assert_eq!(endpoint("10.0.0.1", 80), "10.0.0.1:80");
    }

    #[test]
    fn a_row_matches_only_what_we_would_write() {
        let want = NatRow {
            kind: "dnat_and_snat",
            external_ip: "10.200.0.10".into(),
            logical_ip: "10.1.0.2".into(),
            external_mac: Some("00:00:00:00:00:01".into()),
            logical_port: Some("a.ns".into()),
            stateless: true,
        };
        let nat = want.to_nat((FIP_KEY, "f1"));
        assert!(want.matches(&nat));
        assert_eq!(nat.external_ids.get(FIP_KEY).map(String::as_str), Some("f1"));
        assert_eq!(
            nat.external_ids.get("vendor").map(String::as_str),
            Some("kube-ovn")
        );
        let stateful = NatRow {
            stateless: false,
            ..want.clone()
        };
        assert!(!stateful.matches(&nat), "the stateless option is part of the row");
        let lb = lb_row(
            "d1",
            &DnatLb {
                protocol: "udp",
                vips: BTreeMap::from([("10.200.0.10:53".into(), "10.1.0.2:5353".into())]),
            },
        );
        assert_eq!(lb.options.get("ct_flush").map(String::as_str), Some("true"));
        assert_eq!(lb.external_ids.get(DNAT_KEY).map(String::as_str), Some("d1"));
    }
}
