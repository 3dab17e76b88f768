//! A VPC's `lrp` OvnEip `<vpc>-<subnet>`: the address of its router port on an external subnet
//! (plan §3.0.11: this module allocates it; the OvnEip reconciler leaves `lrp` EIPs' allocation
//! alone).
//!
//! Kube-OVN (`handleAddVpcExternalSubnet`, `createOrUpdateOvnEipCR`): IPAM on the external
//! subnet with the EIP's name as key, the OvnEip created with its addresses and MAC in `spec`
//! and the labels `ovn.kubernetes.io/subnet`, `ovn_eip_type=lrp`, `eip_v4_ip`, `eip_v6_ip`; an
//! existing EIP's spec addresses are taken as they are. The status (`v4Ip`, `v6Ip`,
//! `macAddress`, `type`, `ready`) is written once the router port exists.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys::{
    EIP_V4_IP_LABEL, EIP_V6_IP_LABEL, OVN_EIP_TYPE_LABEL, SUBNET_LABEL, ipv6_label_value,
};
use kube_ovn_api::annotations::{MacAddr, parse};
use kube_ovn_api::crd::{OvnEip, OvnEipType};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::{Allocation, Request};

/// What an existing OvnEip of the lrp name holds, or why it cannot serve as the lrp EIP.
pub fn check_existing(eip: &OvnEip) -> Result<(), String> {
    let ty = eip.spec.type_.as_deref().unwrap_or_default();
    if OvnEipType::parse(Some(ty)) != Ok(OvnEipType::Lrp) && !ty.is_empty() {
        return Err(format!(
            "OvnEip {} exists with spec.type {ty:?}; the router's gateway port needs it as type lrp",
            eip.name_any()
        ));
    }
    Ok(())
}

/// The addresses and MAC an existing EIP names (spec first, as Kube-OVN reads it, else status).
fn recorded(eip: &OvnEip) -> (Vec<IpAddr>, Option<MacAddr>) {
    let status = eip.status.clone().unwrap_or_default();
    let pick = |spec: &Option<String>, status: &Option<String>| -> Option<IpAddr> {
        spec.as_deref()
            .filter(|s| !s.is_empty())
            .or(status.as_deref().filter(|s| !s.is_empty()))
            .and_then(|s| s.parse().ok())
    };
    let addrs = [
        pick(&eip.spec.v4_ip, &status.v4_ip),
        pick(&eip.spec.v6_ip, &status.v6_ip),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mac = eip
        .spec
        .mac_address
        .as_deref()
        .filter(|m| !m.is_empty())
        .or(status.mac_address.as_deref().filter(|m| !m.is_empty()))
        .and_then(|m| parse::<MacAddr>("macAddress", m).ok());
    (addrs, mac)
}

/// The lrp EIP `name` on `subnet`: its IPAM allocation (taken again as recorded in an existing
/// EIP, else IPAM's next), and the OvnEip created if missing. Returns the allocation.
pub async fn ensure(ctx: &Context, name: &str, subnet: &str) -> Result<Allocation> {
    let existing = ctx.stores.ovn_eips.get(&ObjectRef::new(name));
    let alloc = {
        let mut ipam = ctx.ipam();
        if !ipam.has_subnet(subnet) {
            return Err(Error::NotReady(format!(
                "external subnet {subnet} is not in IPAM yet"
            )));
        }
        let held = ipam.allocation(subnet, name).cloned();
        match existing.as_deref().map(recorded) {
            Some((addrs, mac)) if !addrs.is_empty() => {
                let same = held.as_ref().is_some_and(|h| {
                    let mut have: Vec<IpAddr> = h.addrs().collect();
                    let mut want = addrs.clone();
                    have.sort();
                    want.sort();
                    have == want && mac.is_none_or(|m| m == h.mac)
                });
                if same {
                    held.expect("held")
                } else {
                    ipam.release(subnet, name);
                    ipam.allocate(subnet, name, &Request::pinned(addrs, mac))
                        .map_err(|e| Error::Invalid(format!("OvnEip {name}: {e}")))?
                }
            }
            _ => match held {
                Some(h) => h,
                None => ipam.allocate(subnet, name, &Request::default())?,
            },
        }
    };
    if existing.is_none() {
        create(ctx, name, subnet, &alloc).await?;
    }
    Ok(alloc)
}

fn labels(subnet: &str, alloc: &Allocation) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        (SUBNET_LABEL.to_owned(), subnet.to_owned()),
        (OVN_EIP_TYPE_LABEL.to_owned(), OvnEipType::Lrp.as_str().to_owned()),
    ]);
    if let Some(v4) = alloc.v4 {
        labels.insert(EIP_V4_IP_LABEL.to_owned(), v4.to_string());
    }
    if let Some(v6) = alloc.v6 {
        labels.insert(EIP_V6_IP_LABEL.to_owned(), ipv6_label_value(&v6.to_string()));
    }
    labels
}

async fn create(ctx: &Context, name: &str, subnet: &str, alloc: &Allocation) -> Result<()> {
    let eip: OvnEip = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1",
        "kind": "OvnEip",
        "metadata": {"name": name, "labels": labels(subnet, alloc)},
        "spec": {
            "externalSubnet": subnet,
            "type": OvnEipType::Lrp.as_str(),
            "v4Ip": alloc.v4.map(|a| a.to_string()).unwrap_or_default(),
            "v6Ip": alloc.v6.map(|a| a.to_string()).unwrap_or_default(),
            "macAddress": alloc.mac.to_string(),
        },
    }))
    .map_err(|e| Error::Invalid(format!("OvnEip {name}: {e}")))?;
    let api: Api<OvnEip> = Api::all(ctx.kube.clone());
    match api.create(&PostParams::default(), &eip).await {
        Ok(_) => {
            tracing::info!(eip = name, v4 = ?alloc.v4, v6 = ?alloc.v6, "created the VPC's lrp OvnEip");
            Ok(())
        }
        // Made since the cache was read: the next reconcile reads its addresses.
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::NotReady(format!(
            "OvnEip {name} exists but is not in the cache yet"
        ))),
        Err(e) => Err(e).doing(format_args!("create OvnEip {name}")),
    }
}

/// Writes the lrp EIP's status once its router port exists (only what differs).
pub async fn mark_ready(ctx: &Context, name: &str, alloc: &Allocation) -> Result<()> {
    let v4 = alloc.v4.map(|a| a.to_string()).unwrap_or_default();
    let v6 = alloc.v6.map(|a| a.to_string()).unwrap_or_default();
    let mac = alloc.mac.to_string();
    let old = ctx
        .stores
        .ovn_eips
        .get(&ObjectRef::new(name))
        .and_then(|e| e.status.clone())
        .unwrap_or_default();
    let same = old.v4_ip.as_deref().unwrap_or_default() == v4
        && old.v6_ip.as_deref().unwrap_or_default() == v6
        && old.mac_address.as_deref() == Some(mac.as_str())
        && old.type_.as_deref() == Some(OvnEipType::Lrp.as_str())
        && old.ready == Some(true);
    if same {
        return Ok(());
    }
    let status = json!({
        "v4Ip": v4, "v6Ip": v6, "macAddress": mac, "type": OvnEipType::Lrp.as_str(), "ready": true,
    });
    crate::reconcile::merge_status::<OvnEip>(&ctx.kube, name, &status).await
}

/// Deletes the lrp EIP `name` of `subnet` and releases its address. When the OvnEip carries a
/// finalizer (the OvnEip reconciler's, which waits for NAT rules still using it), the address is
/// released by that reconciler once the finalizer goes, not before. One DELETE, no read: the
/// answer says whether the object is gone or waits for its finalizers.
pub async fn remove(ctx: &Context, name: &str, subnet: &str) -> Result<()> {
    let api: Api<OvnEip> = Api::all(ctx.kube.clone());
    let held = match api.delete(name, &DeleteParams::default()).await {
        // The object back (left): still there, its deletion waits for its finalizers; a status
        // (right): gone.
        Ok(answer) => {
            tracing::info!(
                eip = name,
                waits = answer.is_left(),
                "deleted the VPC's lrp OvnEip"
            );
            answer.is_left()
        }
        Err(kube::Error::Api(s)) if s.code == 404 => false,
        Err(e) => return Err(e).doing(format_args!("delete OvnEip {name}")),
    };
    if !held {
        ctx.ipam().release(subnet, name);
    }
    Ok(())
}
