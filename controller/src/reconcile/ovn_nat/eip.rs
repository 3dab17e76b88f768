//! OvnEip (Kube-OVN's `ovn_eip.go`): an address on the external subnet (`spec.externalSubnet`,
//! empty: `--external-gateway-switch`), IPAM key = the EIP's name, a static `spec.v4Ip`/`v6Ip`
//! honoured when it lies in that subnet (else refused naming the field, nothing reserved: ours,
//! Kube-OVN checks that in its webhook only).
//!
//! - `nat` (and empty `type`): `status.ready=true` once allocated.
//! - `lsp`: the bare switch port `<eip>` with `addresses="<mac> <ips>"` on the external switch;
//!   not ready, as in Kube-OVN until its node side (ovnext0, not built here) takes it.
//! - `lrp`: the VPC's external router port's address, allocated by the external-gateway
//!   reconciler (plan §3.0.11); here only its labels, `status.nat` and the deletion gate.
//!
//! Every type: labels `subnet`, `ovn_eip_type`, `eip_v4_ip`, `eip_v6_ip`, and `vpc` once a rule
//! uses it, annotation `vpc_nat` (a rule using it), `status.nat` (`dnat,fip,snat` subset). For
//! the EIP of a distributed OvnFip, `status.activateGateway` = the pod's node (ours, read by the
//! speaker); on other `nat` EIPs it is cleared, and it is never touched on `lrp` EIPs (their
//! gateway chassis is the external-gateway reconciler's). Deleted while a rule uses it, it stays
//! (finalizer, `Ready=False` reason `EipInUse`, Kube-OVN's message); a rule's deletion brings it
//! back.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::{MacAddr, keys, parse};
use kube_ovn_api::crd::OvnEip;
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, READY, set_condition};
use kube_ovn_api::crd::ovn_nat::{NatKind, OvnEipType};
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort};
use serde_json::json;

use super::validate::{self, Refusal, in_cidr_block};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ipam::{IpamError, Request};
use crate::ovn::plan::{Plan, RowRef, owned_ids};
use crate::ovn::topology::{ensure_switch_port, remove_switch_port};

pub const KIND: &str = "OvnEip";

pub const REASON_ALLOCATED: &str = "Allocated";
pub const REASON_OUTSIDE: &str = "EipOutsideExternalSubnet";
pub const REASON_NO_SUBNET: &str = "ExternalSubnetNotFound";
pub const REASON_UNAVAILABLE: &str = "EipAddressUnavailable";
pub const REASON_IN_USE: &str = "EipInUse";
pub const REASON_NODE_SIDE: &str = "NodeSideNotBuilt";
/// `external_ids` key of an `lsp` EIP's switch port.
pub const EIP_KEY: &str = "ovn_eip";

pub async fn reconcile(eip: Arc<OvnEip>, ctx: Arc<Context>) -> Result<Action> {
    super::rule::finalized(eip, ctx, apply, cleanup).await
}

/// The external subnet of an EIP: `spec.externalSubnet`, else `--external-gateway-switch`.
pub fn subnet_of(eip: &OvnEip, ctx: &Context) -> String {
    eip.spec
        .external_subnet
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ctx.config.external.switch.clone())
}

/// What the EIP asks for statically, checked against its subnet's CIDRs (pure).
pub fn static_request(
    name: &str,
    v4: Option<&str>,
    v6: Option<&str>,
    mac: Option<&str>,
    cidr_block: &str,
) -> Result<Request, Refusal> {
    let mut req = Request::default();
    for (field, value) in [("v4Ip", v4), ("v6Ip", v6)] {
        let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            continue;
        };
        let ip = validate::parse_ip(KIND, name, field, value)?;
        let family_ok = matches!((field, ip), ("v4Ip", IpAddr::V4(_)) | ("v6Ip", IpAddr::V6(_)));
        if !family_ok || !in_cidr_block(cidr_block, ip) {
            return Err(validate::refuse(
                REASON_OUTSIDE,
                KIND,
                name,
                field,
                format_args!("the vip {value} is not in the range of the external subnet, cidr {cidr_block}"),
            ));
        }
        match ip {
            IpAddr::V4(v) => req.v4 = Some(v),
            IpAddr::V6(v) => req.v6 = Some(v),
        }
    }
    if let Some(m) = mac.filter(|m| !m.is_empty()) {
        req.mac = Some(
            parse::<MacAddr>("spec.macAddress", m)
                .map_err(|e| validate::refuse(validate::INVALID_SPEC, KIND, name, "macAddress", e))?,
        );
    }
    Ok(req)
}

/// Addresses and MAC the EIP has: allocated here (`nat`, `lsp`), or as the external-gateway
/// reconciler wrote them (`lrp`).
struct Held {
    v4: Option<String>,
    v6: Option<String>,
    mac: Option<String>,
}

async fn apply(eip: &OvnEip, ctx: &Context) -> Result<Action> {
    let name = eip.name_any();
    let status = eip.status.clone().unwrap_or_default();
    let type_ = match OvnEipType::parse(eip.spec.type_.as_deref()) {
        Ok(t) => t,
        Err(e) => {
            let r = validate::refuse(validate::INVALID_SPEC, KIND, &name, "type", e);
            return refuse(ctx, eip, r).await;
        }
    };
    let subnet = subnet_of(eip, ctx);
    let held = if type_ == OvnEipType::Lrp {
        let nonempty = |v: Option<String>| v.filter(|v| !v.is_empty());
        Held {
            v4: nonempty(status.v4_ip.clone()),
            v6: nonempty(status.v6_ip.clone()),
            mac: nonempty(status.mac_address.clone()),
        }
    } else {
        match allocate(eip, ctx, &name, &subnet)? {
            Ok(h) => h,
            Err(r) => return refuse(ctx, eip, r).await,
        }
    };
    if type_ == OvnEipType::Lsp {
        ensure_lsp(ctx, &name, &subnet, &held).await?;
    }
    let users = super::users_of(ctx, &name);
    let nat = NatKind::status_value(users.iter().map(|u| u.kind));
    let mut labels: BTreeMap<String, Option<String>> = BTreeMap::from([
        (keys::SUBNET_LABEL.to_owned(), Some(subnet.clone())),
        (
            keys::OVN_EIP_TYPE_LABEL.to_owned(),
            Some(type_.as_str().to_owned()),
        ),
        (keys::EIP_V4_IP_LABEL.to_owned(), held.v4.clone()),
        (
            keys::EIP_V6_IP_LABEL.to_owned(),
            held.v6.as_deref().map(keys::ipv6_label_value),
        ),
    ]);
    let mut annotations = BTreeMap::new();
    // Kube-OVN sets `vpc` and `vpc_nat` when a rule takes the EIP and never removes them.
    if let Some(u) = users.last() {
        labels.insert(keys::VPC_LABEL.to_owned(), Some(u.vpc.clone()));
        annotations.insert(keys::VPC_NAT.to_owned(), Some(u.name.clone()));
    }
    super::patch_meta(ctx, eip, &labels, &annotations).await?;

    // An lrp EIP's addresses, type and readiness are the external-gateway reconciler's.
    let mut want = if type_ == OvnEipType::Lrp {
        json!({"nat": nat})
    } else {
        json!({
            "v4Ip": held.v4, "v6Ip": held.v6, "macAddress": held.mac,
            "type": type_.as_str(), "nat": nat,
        })
    };
    let mut conditions = status.conditions.clone().unwrap_or_default();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let mut changed = match type_ {
        OvnEipType::Nat => {
            want["ready"] = json!(true);
            want["activateGateway"] = json!(distributed_node(ctx, &users));
            set_condition(
                &mut conditions,
                Condition::new(READY, ConditionStatus::True, REASON_ALLOCATED, ""),
                &now,
            )
        }
        OvnEipType::Lsp => {
            want["ready"] = json!(false);
            set_condition(
                &mut conditions,
                Condition::new(
                    READY,
                    ConditionStatus::False,
                    REASON_NODE_SIDE,
                    "the node side of lsp OvnEips (ovnext0, BFD) is not built by kube-ovn-rs",
                ),
                &now,
            )
        }
        // Readiness and the gateway node are the external-gateway reconciler's.
        OvnEipType::Lrp => false,
    };
    let have = serde_json::to_value(&status).unwrap_or_default();
    if let Some(m) = want.as_object() {
        changed |= m
            .iter()
            .any(|(k, v)| have.get(k).unwrap_or(&serde_json::Value::Null) != v);
    }
    if changed {
        want["conditions"] = serde_json::to_value(&conditions).unwrap_or_default();
        crate::reconcile::merge_status::<OvnEip>(&ctx.kube, &name, &want).await?;
    }
    Ok(Action::await_change())
}

/// The pod node of the distributed OvnFip using the EIP, if one does (the IP CR's node).
fn distributed_node(ctx: &Context, users: &[validate::Claim]) -> Option<String> {
    let fip = users.iter().find(|u| u.kind == NatKind::Fip && u.distributed)?;
    let fip = ctx.stores.ovn_fips.get(&ObjectRef::new(&fip.name))?;
    let ip = ctx
        .stores
        .ips
        .get(&ObjectRef::new(fip.spec.ip_name.as_deref().unwrap_or_default()))?;
    ip.spec.node_name.clone().filter(|n| !n.is_empty())
}

/// IPAM: the EIP's addresses on its subnet (the same ones again on every run: allocation is
/// idempotent per key, and the rebuild at start re-reserves `status` under the same key).
fn allocate(eip: &OvnEip, ctx: &Context, name: &str, subnet: &str) -> Result<Result<Held, Refusal>> {
    let Some(s) = ctx.stores.subnets.get(&ObjectRef::new(subnet)) else {
        return Ok(Err(validate::refuse(
            REASON_NO_SUBNET,
            KIND,
            name,
            "externalSubnet",
            format_args!("subnet {subnet} not found"),
        )));
    };
    let cidr_block = s.spec.cidr_block.clone().unwrap_or_default();
    let req = match static_request(
        name,
        eip.spec.v4_ip.as_deref(),
        eip.spec.v6_ip.as_deref(),
        eip.spec.mac_address.as_deref(),
        &cidr_block,
    ) {
        Ok(r) => r,
        Err(r) => return Ok(Err(r)),
    };
    let status = eip.status.clone().unwrap_or_default();
    // What the EIP holds already is asked for again: the rebuild at start re-reserves it, and
    // should it not have (a conflict it logged), the EIP keeps its address or is refused rather
    // than silently moved to another one.
    let mut req = req;
    req.v4 = req
        .v4
        .or_else(|| status.v4_ip.as_deref().and_then(|v| v.parse().ok()));
    req.v6 = req
        .v6
        .or_else(|| status.v6_ip.as_deref().and_then(|v| v.parse().ok()));
    if req.mac.is_none() {
        req.mac = status
            .mac_address
            .as_deref()
            .and_then(|m| parse::<MacAddr>("status.macAddress", m).ok());
    }
    if status.ready == Some(true)
        && let (Some(want), Some(have)) = (
            req.v4,
            status
                .v4_ip
                .as_deref()
                .and_then(|v| v.parse::<std::net::Ipv4Addr>().ok()),
        )
        && want != have
    {
        return Ok(Err(validate::refuse(
            validate::CHANGE_NOT_SUPPORTED,
            KIND,
            name,
            "v4Ip",
            format_args!("not support change v4 ip for ovn eip {name}"),
        )));
    }
    let allocation = ctx.ipam().allocate(subnet, name, &req);
    match allocation {
        Ok(a) => Ok(Ok(Held {
            v4: a.v4.map(|v| v.to_string()),
            v6: a.v6.map(|v| v.to_string()),
            mac: Some(a.mac.to_string()),
        })),
        Err(IpamError::UnknownSubnet(_)) => Err(Error::NotReady(format!(
            "OvnEip {name}: subnet {subnet} is not in IPAM yet"
        ))),
        Err(e) => {
            let field = if req.v4.is_some() {
                "v4Ip"
            } else if req.v6.is_some() {
                "v6Ip"
            } else {
                "externalSubnet"
            };
            Ok(Err(validate::refuse(REASON_UNAVAILABLE, KIND, name, field, e)))
        }
    }
}

/// The `lsp` EIP's bare switch port on the external switch.
async fn ensure_lsp(ctx: &Context, name: &str, subnet: &str, held: &Held) -> Result<()> {
    let addresses = std::iter::once(held.mac.clone().unwrap_or_default())
        .chain(held.v4.clone())
        .chain(held.v6.clone())
        .collect::<Vec<_>>()
        .join(" ");
    let plan = ctx.nb.read(|cache| {
        let Some(ls) = cache.uuids_by_name(LogicalSwitch::NAME, subnet).first().copied() else {
            return Err(Error::NotReady(format!(
                "OvnEip {name}: the switch {subnet} does not exist yet"
            )));
        };
        let port = LogicalSwitchPort {
            name: name.to_owned(),
            addresses: vec![addresses],
            external_ids: owned_ids(&[(EIP_KEY, name), ("ls", subnet)]),
            ..LogicalSwitchPort::default()
        };
        let mut plan = Plan::new();
        ensure_switch_port(
            &mut plan,
            cache,
            &RowRef::Existing(ls),
            subnet,
            &port,
            &["addresses", "external_ids"],
        );
        Ok(plan)
    })?;
    ctx.nb
        .apply(plan, "ovn-eip-lsp")
        .await
        .doing(format_args!("write the switch port of OvnEip {name}"))?;
    Ok(())
}

/// Held while rules use it; then its port (`lsp`) goes and its addresses are released.
async fn cleanup(eip: &OvnEip, ctx: &Context) -> Result<Action> {
    let name = eip.name_any();
    let users = super::users_of(ctx, &name);
    if !users.is_empty() {
        let list = users
            .iter()
            .map(|u| u.name.as_str())
            .collect::<Vec<_>>()
            .join(", ");
        let message = format!(
            "ovn eip {name} is still being used by NAT rules: {list}, waiting for them to be deleted"
        );
        let status = eip.status.clone().unwrap_or_default();
        let mut conditions = status.conditions.clone().unwrap_or_default();
        let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
        if set_condition(
            &mut conditions,
            Condition::new(READY, ConditionStatus::False, REASON_IN_USE, &message),
            &now,
        ) {
            tracing::info!(%message, "deletion waits");
            crate::reconcile::merge_status::<OvnEip>(&ctx.kube, &name, &json!({"conditions": conditions}))
                .await?;
        }
        return Err(Error::Invalid(message));
    }
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let ours = cache
            .by_name::<LogicalSwitchPort>(&name)
            .ok()
            .flatten()
            .is_some_and(|p| p.external_ids.get(EIP_KEY).is_some_and(|v| *v == name));
        if ours {
            remove_switch_port(&mut plan, cache, &name);
        }
        plan
    });
    ctx.nb
        .apply(plan, "ovn-eip-delete")
        .await
        .doing(format_args!("remove the switch port of OvnEip {name}"))?;
    let released = ctx.ipam().release(&subnet_of(eip, ctx), &name);
    tracing::info!(released = ?released.map(|a| a.addrs().collect::<Vec<_>>()), "OvnEip released");
    Ok(Action::await_change())
}

/// A refused EIP: `Ready=False` with the reason, a Warning when that changes, nothing reserved.
async fn refuse(ctx: &Context, eip: &OvnEip, r: Refusal) -> Result<Action> {
    let name = eip.name_any();
    let status = eip.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.clone().unwrap_or_default();
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    if set_condition(
        &mut conditions,
        Condition::new(READY, ConditionStatus::False, r.reason, &r.message),
        &now,
    ) {
        super::warn(ctx, eip, &r).await;
        crate::reconcile::merge_status::<OvnEip>(
            &ctx.kube,
            &name,
            &json!({"conditions": conditions, "ready": false}),
        )
        .await?;
    }
    Err(Error::Invalid(r.message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_static_address_must_lie_in_the_external_subnet() {
        let ok = static_request("e1", Some("10.200.0.50"), None, None, "10.200.0.0/24").unwrap();
        assert_eq!(ok.v4, Some("10.200.0.50".parse().unwrap()));
        let out = static_request("e1", Some("10.201.0.50"), None, None, "10.200.0.0/24").unwrap_err();
        assert_eq!(out.reason, REASON_OUTSIDE);
        assert!(out.message.starts_with("OvnEip e1: spec.v4Ip: "), "{out}");
        let family = static_request("e1", None, Some("10.200.0.50"), None, "10.200.0.0/24").unwrap_err();
        assert!(family.message.starts_with("OvnEip e1: spec.v6Ip: "), "{family}");
        let bad = static_request("e1", Some("10.200.0.x"), None, None, "10.200.0.0/24").unwrap_err();
        assert!(
            bad.message.contains("spec v4Ip 10.200.0.x is not a valid"),
            "{bad}"
        );
        assert_eq!(
            static_request("e1", None, None, None, "10.200.0.0/24").unwrap(),
            Request::default()
        );
    }
}
