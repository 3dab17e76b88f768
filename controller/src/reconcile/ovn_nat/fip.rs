//! OvnFip (Kube-OVN's `ovn_fip.go`): a `dnat_and_snat` row on the VPC router, `external_ip` =
//! the EIP, `logical_ip` = the internal address. For an IP CR (`ipType` `ip`, the default) the
//! row also carries the pod's `external_mac` and `logical_port`, so OVN runs the NAT on the pod's
//! chassis (distributed; Kube-OVN writes them whatever `spec.type` says, kubeovn/kube-ovn#5050);
//! ours: `spec.type: centralized` leaves them out, so the FIP lives on the gateway chassis and
//! moves with it (plan §3.0.4). A Vip (`ipType: vip`) has no MAC: centralized. `options:
//! stateless=true` when `spec.type` is `distributed`, or empty with the `ovn-external-gw-config`
//! ConfigMap's `type: distributed` (Kube-OVN's rule).
//!
//! Labels `eip_v4_ip` (Kube-OVN: v4 only on FIPs), annotation `vpc_eip`, status `ready`, `vpc`,
//! `v4Eip`, `v4Ip`, `v6Eip`, `v6Ip` (Kube-OVN writes no v6), `macAddress` (ours: set only for a
//! distributed FIP, which is how the other rules and the EIP see that it is one).

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube_ovn_api::crd::OvnFip;
use kube_ovn_api::crd::ovn_nat::FipType;
use kube_ovn_api::external_gw::{ExternalGwConfig, GatewayType};
use serde_json::json;

use super::plan::{FIP_KEY, NatRow, sync_nat};
use super::rule::{self, Addressed};
use super::validate::{self, Internal, Refusal, refuse};
use crate::context::Context;
use crate::error::Result;

pub const KIND: &str = "OvnFip";

pub async fn reconcile(fip: Arc<OvnFip>, ctx: Arc<Context>) -> Result<Action> {
    rule::finalized(fip, ctx, apply, cleanup).await
}

/// Everything the FIP's rows and status come from, once validated.
struct Target {
    eip: validate::EipFacts,
    internal: Internal,
    distributed: bool,
    stateless: bool,
}

/// Whether the ConfigMap says the NAT is distributed (an absent or unreadable one: no).
fn configmap_distributed(ctx: &Context) -> bool {
    ctx.stores
        .external_gw_config()
        .and_then(|c| c.data.clone())
        .and_then(|d| ExternalGwConfig::parse(&d).ok())
        .is_some_and(|c| c.gateway_type == GatewayType::Distributed)
}

async fn validate(fip: &OvnFip, ctx: &Context) -> Result<Target, Refusal> {
    let name = fip.name_any();
    let status = fip.status.clone().unwrap_or_default();
    let s = &fip.spec;
    let eip = rule::usable_eip(ctx, fip)?;
    let type_ = FipType::parse(s.type_.as_deref())
        .map_err(|e| refuse(validate::INVALID_SPEC, KIND, &name, "type", e))?;
    let internal = rule::internal_by_ip(
        ctx,
        fip,
        &Addressed {
            ip_name: s.ip_name.as_deref(),
            ip_type: s.ip_type.as_deref(),
            vpc: s.vpc.as_deref(),
            v4_ip: s.v4_ip.as_deref(),
            v6_ip: s.v6_ip.as_deref(),
        },
    )
    .await?;
    // Only an IP CR (`ipType: ip` by `spec.ipName`) gives the internal side a MAC.
    let distributed = internal.mac.is_some() && type_ != Some(FipType::Centralized);
    let stateless = match type_ {
        Some(t) => t == FipType::Distributed,
        None => configmap_distributed(ctx),
    };
    rule::may_claim(ctx, fip, &internal.vpc, distributed)?;
    let v4_eip = eip.v4.map(|v| v.to_string());
    rule::unchanged(
        fip,
        &[
            ("vpc", "vpc", status.vpc.as_deref(), Some(&internal.vpc)),
            ("ovnEip", "eip", status.v4_eip.as_deref(), v4_eip.as_deref()),
            ("ipName", "ip", status.v4_ip.as_deref(), internal.v4.as_deref()),
        ],
    )?;
    Ok(Target {
        eip,
        internal,
        distributed,
        stateless,
    })
}

/// The FIP's NAT rows (pure).
fn rows(t: &Target) -> Vec<NatRow> {
    rule::pairs(&t.eip, &t.internal)
        .into_iter()
        .map(|(external_ip, logical_ip)| NatRow {
            kind: "dnat_and_snat",
            external_ip,
            logical_ip,
            external_mac: t.internal.mac.clone().filter(|_| t.distributed),
            logical_port: t.internal.port.clone().filter(|_| t.distributed),
            stateless: t.stateless,
        })
        .collect()
}

async fn apply(fip: &OvnFip, ctx: &Context) -> Result<Action> {
    let name = fip.name_any();
    let target = match validate(fip, ctx).await {
        Ok(t) => t,
        Err(r) => return super::refused(ctx, fip, r).await,
    };
    let vpc = target.internal.vpc.clone();
    let rows = rows(&target);
    rule::write_on_router(ctx, fip, Some(&vpc), "ovn-fip", "NAT row", |plan, cache| {
        sync_nat(plan, cache, (FIP_KEY, &name), Some(&vpc), &rows, true);
    })
    .await?;
    let labels = super::eip_labels(&target.eip, true);
    let want = json!({
        "ready": true,
        "vpc": vpc,
        "v4Eip": target.eip.v4.map(|v| v.to_string()),
        "v6Eip": target.eip.v6.map(|v| v.to_string()),
        "v4Ip": target.internal.v4,
        "v6Ip": target.internal.v6,
        "macAddress": target.internal.mac.clone().filter(|_| target.distributed),
    });
    super::write_rule(ctx, fip, labels, &target.eip.name, want).await?;
    Ok(Action::await_change())
}

async fn cleanup(fip: &OvnFip, ctx: &Context) -> Result<Action> {
    let name = fip.name_any();
    rule::write_on_router(ctx, fip, None, "ovn-fip-delete", "NAT row", |plan, cache| {
        sync_nat(plan, cache, (FIP_KEY, &name), None, &[], false);
    })
    .await?;
    Ok(Action::await_change())
}
