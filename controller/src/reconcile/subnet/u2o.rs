//! The I/O of an underlay subnet: its Vlan and ProviderNetwork from the caches, and the U2O
//! interconnection address — in IPAM under Kube-OVN's key `u2o-interconnection.<vpc>.<subnet>`,
//! recorded as an IP CR of that name (namespace `default`, as Kube-OVN's), from which IPAM is
//! rebuilt after a restart.

use std::net::IpAddr;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys::u2o_interconnection_name;

use super::underlay::{VlanCheck, check_vlan};
use crate::context::Context;
use crate::error::Result;
use crate::ipam::{Allocation, Request};
use crate::reconcile::ip::record::{IpRecord, delete_ip, upsert_ip};
use crate::reconcile::subnet_spec::Effective;

/// The prefix of every U2O interconnection key and IP CR.
pub const U2O_PREFIX: &str = "u2o-interconnection.";

/// Whether an IPAM key or IP CR name is a U2O interconnection address (not a pod's).
pub fn is_u2o_key(key: &str) -> bool {
    key.starts_with(U2O_PREFIX)
}

/// `subnet`'s Vlan, checked against the caches.
pub fn vlan_of(ctx: &Context, subnet: &str, vlan: &str) -> VlanCheck {
    let v = ctx.stores.vlans.get(&ObjectRef::new(vlan));
    let pn = v
        .as_ref()
        .and_then(|v| v.spec.effective_provider().map(str::to_owned))
        .and_then(|p| ctx.stores.provider_networks.get(&ObjectRef::new(&p)));
    check_vlan(subnet, vlan, v.as_deref(), pn.as_deref())
}

/// Kube-OVN's `reconcileSubnetSpecialIPs` for U2O: with U2O on, the subnet's U2O address —
/// the one `spec.u2oInterconnectionIP` asks for (a different one held before is released), else
/// the one held, else the one the status names (kept across a restart whose IP CR was lost),
/// else IPAM's next; with U2O off, none (released). Other VPCs' U2O keys of the subnet are
/// released. A static address IPAM refuses is the spec's fault: `Err` names the field.
pub fn u2o_address(
    ctx: &Context,
    subnet: &str,
    eff: &Effective,
    status_ip: &str,
) -> Result<Option<Allocation>, String> {
    let key = u2o_interconnection_name(&eff.vpc, subnet);
    let mut ipam = ctx.ipam();
    for k in ipam.keys(subnet) {
        if is_u2o_key(&k) && (k != key || !eff.u2o()) {
            ipam.release(subnet, &k);
        }
    }
    let Some(u) = eff.underlay.as_ref().filter(|u| u.u2o) else {
        return Ok(None);
    };
    let held = ipam.allocation(subnet, &key).cloned();
    if !u.u2o_ips.is_empty() {
        if let Some(h) = &held {
            let mut have: Vec<IpAddr> = h.addrs().collect();
            let mut want = u.u2o_ips.clone();
            have.sort();
            want.sort();
            if have == want {
                return Ok(held);
            }
            ipam.release(subnet, &key);
        }
        return ipam
            .allocate(subnet, &key, &Request::pinned(u.u2o_ips.iter().copied(), None))
            .map(Some)
            .map_err(|e| format!("spec.u2oInterconnectionIP: {e}"));
    }
    if held.is_some() {
        return Ok(held);
    }
    let previous: Vec<IpAddr> = status_ip
        .split(',')
        .filter_map(|a| a.trim().parse().ok())
        .filter(|a| eff.cidrs.iter().any(|c| c.contains(a)))
        .collect();
    if !previous.is_empty()
        && let Ok(a) = ipam.allocate(subnet, &key, &Request::pinned(previous, None))
    {
        return Ok(Some(a));
    }
    ipam.allocate(subnet, &key, &Request::default())
        .map(Some)
        .map_err(|e| format!("u2oInterconnection: no address for the router port: {e}"))
}

/// Writes the U2O IP CR for `alloc`, or deletes the subnet's U2O IP CRs when there is none (or
/// those of another VPC).
pub async fn sync_u2o_record(
    ctx: &Context,
    subnet: &str,
    vpc: &str,
    alloc: Option<&Allocation>,
) -> Result<()> {
    let key = u2o_interconnection_name(vpc, subnet);
    if let Some(alloc) = alloc {
        upsert_ip(
            ctx,
            &IpRecord {
                name: &key,
                pod: &key,
                namespace: "default",
                subnet,
                node: "",
                alloc,
                pod_type: "",
            },
        )
        .await?;
    }
    for ip in ctx.stores.ips.state() {
        let name = ip.name_any();
        let stale = is_u2o_key(&name)
            && ip.spec.subnet.as_deref() == Some(subnet)
            && (alloc.is_none() || name != key);
        if stale {
            delete_ip(ctx, &name).await?;
        }
    }
    Ok(())
}
