//! OVN BFD sessions for `Vpc.spec.enableBfd` (pure: plans over the replica).
//!
//! Kube-OVN (`pkg/controller/vpc.go`, `pkg/ovs/ovn-nb-bfd.go`): a custom VPC with `enableBfd`
//! whose router is connected to the default external subnet (`--external-gateway-switch`) gets
//! one BFD row, `logical_port=<vpc>-<switch>`, `dst_ip=` the subnet's IPv4 gateway (the physical
//! router), `min_tx=--bfd-min-tx`, `min_rx=--bfd-min-rx`, `detect_mult=--detect-mult`;
//! `enableBfd` turned off deletes the rows of that port. ovn-controller on the chassis holding
//! the port runs the session (RFC 5880) and writes `status`.
//!
//! Ours: the rows carry `external_ids:vpc=<vpc>` (Kube-OVN's carry none) so garbage collection
//! finds those of VPCs that are gone; the timers of an existing row are corrected when the flags
//! change (Kube-OVN creates a row only when none of that port and destination exists).

use std::net::IpAddr;

use kube_ovn_ovsdb::tables::nb::Bfd;
use kube_ovn_ovsdb::{Condition, DbCache, Operation, Table};

use crate::config::external::BfdTimers;
use crate::ovn::plan::{Plan, is_owned_by, owned_ids};

/// The BFD row VPC `vpc` wants toward `peer` (the external subnet's IPv4 gateway) on router port
/// `lrp`.
pub fn row(vpc: &str, lrp: &str, peer: IpAddr, timers: BfdTimers) -> Bfd {
    Bfd {
        logical_port: lrp.to_owned(),
        dst_ip: peer.to_string(),
        min_tx: Some(timers.min_tx),
        min_rx: Some(timers.min_rx),
        detect_mult: Some(timers.detect_mult),
        external_ids: owned_ids(&[("vpc", vpc)]),
        ..Default::default()
    }
}

/// The columns the controller writes (never `status`, which ovn-controller owns).
const COLUMNS: &[&str] = &["min_tx", "min_rx", "detect_mult", "external_ids"];

/// Brings VPC `vpc`'s BFD rows to `desired`: rows on any of `ports` (the VPC's external router
/// ports, connected or being disconnected) or marked as the VPC's that are not desired are
/// deleted, desired ones created or corrected.
pub fn sync(plan: &mut Plan, cache: &DbCache, vpc: &str, ports: &[String], desired: &[Bfd]) {
    let existing: Vec<Bfd> = cache
        .rows::<Bfd>()
        .unwrap_or_default()
        .into_iter()
        .filter(|b| ports.contains(&b.logical_port) || is_owned_by(&b.external_ids, &[("vpc", vpc)]))
        .collect();
    for have in &existing {
        let want = desired
            .iter()
            .find(|d| d.logical_port == have.logical_port && d.dst_ip == have.dst_ip);
        match want {
            None => plan.delete(Bfd::NAME, have.uuid),
            Some(want) => {
                let changed: kube_ovn_ovsdb::Row = want
                    .partial_row(COLUMNS)
                    .into_iter()
                    .filter(|(col, v)| have.partial_row(COLUMNS).get(col) != Some(v))
                    .collect();
                if !changed.is_empty() {
                    plan.push(Operation::update(
                        Bfd::NAME,
                        vec![Condition::uuid(have.uuid)],
                        changed,
                    ));
                }
            }
        }
    }
    for want in desired {
        let exists = existing
            .iter()
            .any(|h| h.logical_port == want.logical_port && h.dst_ip == want.dst_ip);
        if !exists {
            plan.insert(
                Bfd::NAME,
                want.partial_row(&[
                    "logical_port",
                    "dst_ip",
                    "min_tx",
                    "min_rx",
                    "detect_mult",
                    "external_ids",
                ]),
            );
        }
    }
}

/// Every BFD row we wrote for a VPC, by that VPC's name (for garbage collection).
pub fn owned_rows(cache: &DbCache) -> Vec<(String, kube_ovn_ovsdb::Uuid)> {
    cache
        .rows::<Bfd>()
        .unwrap_or_default()
        .into_iter()
        .filter(|b| is_owned_by(&b.external_ids, &[]))
        .filter_map(|b| b.external_ids.get("vpc").map(|v| (v.clone(), b.uuid)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_row_has_kube_ovns_port_peer_and_timers() {
        let timers = BfdTimers {
            min_tx: 100,
            min_rx: 200,
            detect_mult: 3,
        };
        let b = row("vpc1", "vpc1-external", "10.200.0.1".parse().unwrap(), timers);
        assert_eq!(b.logical_port, "vpc1-external");
        assert_eq!(b.dst_ip, "10.200.0.1");
        assert_eq!(
            (b.min_tx, b.min_rx, b.detect_mult),
            (Some(100), Some(200), Some(3))
        );
        assert_eq!(b.external_ids["vpc"], "vpc1");
        assert!(b.status.is_none(), "status is ovn-controller's");
    }
}
