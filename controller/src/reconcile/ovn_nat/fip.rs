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
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube_ovn_api::crd::ovn_nat::{FipType, IpType, NatKind};
use kube_ovn_api::crd::{FINALIZER, OvnFip};
use kube_ovn_api::external_gw::{ExternalGwConfig, GatewayType};
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::LogicalRouter;
use serde_json::json;

use super::plan::{FIP_KEY, NatRow, pair, sync_nat};
use super::validate::{self, Claim, Internal, Refusal, refuse};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ovn::plan::Plan;

pub const KIND: &str = "OvnFip";

pub async fn reconcile(fip: Arc<OvnFip>, ctx: Arc<Context>) -> Result<Action> {
    let name = fip.name_any();
    let api: Api<OvnFip> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, fip, |event| async move {
        match event {
            Finalizer::Apply(f) => apply(&f, &c).await,
            Finalizer::Cleanup(f) => cleanup(&f, &c).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<OvnFip>(&name))
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
    let applied = status.ready == Some(true);
    let s = &fip.spec;
    let eip_name = s.ovn_eip.clone().unwrap_or_default();
    let facts = super::eip_facts(ctx, &eip_name);
    let eip = validate::usable_eip(KIND, &name, &eip_name, facts.as_ref(), applied)?.clone();
    let type_ = FipType::parse(s.type_.as_deref())
        .map_err(|e| refuse(validate::INVALID_SPEC, KIND, &name, "type", e))?;
    let ip_type = IpType::parse(s.ip_type.as_deref())
        .map_err(|e| refuse(validate::INVALID_SPEC, KIND, &name, "ipType", e))?;
    let ip_name = s.ip_name.clone().unwrap_or_default();
    let internal = if ip_name.is_empty() {
        let vpc = s.vpc.clone().filter(|v| !v.is_empty()).ok_or_else(|| {
            refuse(
                validate::INVALID_SPEC,
                KIND,
                &name,
                "vpc",
                "no vpc: set spec.ipName, or spec.vpc with spec.v4Ip/v6Ip",
            )
        })?;
        for (field, v) in [("v4Ip", &s.v4_ip), ("v6Ip", &s.v6_ip)] {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                validate::parse_ip(KIND, &name, field, v)?;
            }
        }
        Internal {
            vpc,
            v4: s.v4_ip.clone().filter(|v| !v.is_empty()),
            v6: s.v6_ip.clone().filter(|v| !v.is_empty()),
            ..Internal::default()
        }
    } else {
        super::internal_of(ctx, KIND, &name, &ip_name, ip_type).await?
    };
    validate::vpc_agrees(KIND, &name, s.vpc.as_deref(), &internal)?;
    if internal.v4.is_none() && internal.v6.is_none() {
        return Err(refuse(
            validate::IP_NOT_FOUND,
            KIND,
            &name,
            "ipName",
            format_args!("no internal ip for fip {name}"),
        ));
    }
    let distributed = ip_type == IpType::Ip
        && !ip_name.is_empty()
        && internal.mac.is_some()
        && type_ != Some(FipType::Centralized);
    let stateless = match type_ {
        Some(t) => t == FipType::Distributed,
        None => configmap_distributed(ctx),
    };
    let me = Claim {
        kind: NatKind::Fip,
        name: name.clone(),
        vpc: internal.vpc.clone(),
        distributed,
        ready: applied,
    };
    let others = super::claims_on(
        ctx,
        &eip_name,
        NatKind::Fip,
        &name,
        &super::created_of(&fip.metadata),
    );
    validate::may_share(&me, &eip_name, &others)?;
    if applied {
        let v4_eip = eip.v4.map(|v| v.to_string());
        for (field, what, have, want) in [
            ("vpc", "vpc", &status.vpc, Some(&internal.vpc)),
            ("ovnEip", "eip", &status.v4_eip, v4_eip.as_ref()),
            ("ipName", "ip", &status.v4_ip, internal.v4.as_ref()),
        ] {
            if have.as_ref() != want && have.as_deref().is_some_and(|h| !h.is_empty()) {
                return Err(refuse(
                    validate::CHANGE_NOT_SUPPORTED,
                    KIND,
                    &name,
                    field,
                    format_args!("not support change {what} for fip {name}"),
                ));
            }
        }
    }
    Ok(Target {
        eip,
        internal,
        distributed,
        stateless,
    })
}

/// The FIP's NAT rows (pure).
fn rows(t: &Target) -> Vec<NatRow> {
    let (ev4, ev6) = (t.eip.v4.map(|v| v.to_string()), t.eip.v6.map(|v| v.to_string()));
    pair(
        ev4.as_deref(),
        ev6.as_deref(),
        t.internal.v4.as_deref(),
        t.internal.v6.as_deref(),
    )
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
    let status = fip.status.clone().unwrap_or_default();
    let applied = status.ready == Some(true);
    let target = match validate(fip, ctx).await {
        Ok(t) => t,
        Err(r) => return super::refused(ctx, fip, status.conditions.as_ref(), applied, r).await,
    };
    let vpc = target.internal.vpc.clone();
    let rows = rows(&target);
    let plan = ctx.nb.read(|cache| {
        if cache.uuids_by_name(LogicalRouter::NAME, &vpc).is_empty() {
            return Err(Error::NotReady(format!(
                "OvnFip {name}: the router of VPC {vpc} does not exist yet"
            )));
        }
        let mut plan = Plan::new();
        sync_nat(&mut plan, cache, (FIP_KEY, &name), Some(&vpc), &rows, true);
        Ok(plan)
    })?;
    ctx.nb
        .apply(plan, "ovn-fip")
        .await
        .doing(format_args!("write the NAT row of OvnFip {name}"))?;
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
    let have = serde_json::to_value(&status).unwrap_or_default();
    super::write_rule(
        ctx,
        fip,
        labels,
        &target.eip.name,
        status.conditions.as_ref(),
        want,
        have,
    )
    .await?;
    Ok(Action::await_change())
}

async fn cleanup(fip: &OvnFip, ctx: &Context) -> Result<Action> {
    let name = fip.name_any();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        sync_nat(&mut plan, cache, (FIP_KEY, &name), None, &[], false);
        plan
    });
    ctx.nb
        .apply(plan, "ovn-fip-delete")
        .await
        .doing(format_args!("remove the NAT row of OvnFip {name}"))?;
    Ok(Action::await_change())
}
