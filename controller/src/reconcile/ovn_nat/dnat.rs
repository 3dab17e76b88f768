//! OvnDnatRule (Kube-OVN's `ovn_dnat.go`): a port forward realised as an OVN load balancer named
//! after the rule, VIP `<eip>:<externalPort>` → `<ip>:<internalPort>` (`[v6]:port`), protocol
//! from the spec (UDP with `ct_flush`), attached to the VPC router; on a router with a
//! distributed gateway port northd runs it on the gateway chassis. An external port already
//! forwarded on the same EIP by an older rule is refused (Kube-OVN's `checkEipPortConflict`:
//! "eip %s port %s already used by OvnDnatRule %s"). Labels `eip_v4_ip`, `eip_v6_ip`,
//! `vpc_dnat_eport`, annotation `vpc_eip`, status as SNAT plus `protocol`, `ipName`,
//! `internalPort`, `externalPort`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::ovn_nat::{IpType, NatKind};
use kube_ovn_api::crd::{FINALIZER, OvnDnatRule};
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::LogicalRouter;
use serde_json::json;

use super::plan::{DnatLb, endpoint, pair, sync_dnat};
use super::validate::{self, Claim, Internal, Refusal, refuse};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ovn::plan::Plan;

pub const KIND: &str = "OvnDnatRule";

pub async fn reconcile(rule: Arc<OvnDnatRule>, ctx: Arc<Context>) -> Result<Action> {
    let name = rule.name_any();
    let api: Api<OvnDnatRule> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, rule, |event| async move {
        match event {
            Finalizer::Apply(r) => apply(&r, &c).await,
            Finalizer::Cleanup(r) => cleanup(&r, &c).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<OvnDnatRule>(&name))
}

struct Target {
    eip: validate::EipFacts,
    internal: Internal,
    protocol: &'static str,
    external_port: u16,
    internal_port: u16,
}

/// An older rule (by creation, then name) forwarding the same external port of the same EIP.
fn port_taken_by(ctx: &Context, rule: &OvnDnatRule, eip: &str, port: u16) -> Option<String> {
    let me = super::created_of(&rule.metadata);
    ctx.stores
        .ovn_dnat_rules
        .state()
        .into_iter()
        .filter(|o| o.name_any() != rule.name_any() && o.metadata.deletion_timestamp.is_none())
        .filter(|o| o.spec.ovn_eip.as_deref() == Some(eip))
        .filter(|o| {
            o.spec
                .external_port
                .as_deref()
                .and_then(|p| p.trim().parse::<u16>().ok())
                == Some(port)
        })
        .filter(|o| {
            o.status.as_ref().and_then(|s| s.ready) == Some(true) || super::created_of(&o.metadata) < me
        })
        .map(|o| o.name_any())
        .next()
}

async fn validate(rule: &OvnDnatRule, ctx: &Context) -> Result<Target, Refusal> {
    let name = rule.name_any();
    let status = rule.status.clone().unwrap_or_default();
    let applied = status.ready == Some(true);
    let s = &rule.spec;
    let eip_name = s.ovn_eip.clone().unwrap_or_default();
    let facts = super::eip_facts(ctx, &eip_name);
    let eip = validate::usable_eip(KIND, &name, &eip_name, facts.as_ref(), applied)?.clone();
    let external_port = validate::parse_port(KIND, &name, "externalPort", s.external_port.as_deref())?;
    let internal_port = validate::parse_port(KIND, &name, "internalPort", s.internal_port.as_deref())?;
    let protocol = validate::parse_protocol(&name, s.protocol.as_deref())?;
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
            format_args!("no internal ip for dnat {name}"),
        ));
    }
    let me = Claim {
        kind: NatKind::Dnat,
        name: name.clone(),
        vpc: internal.vpc.clone(),
        distributed: false,
        ready: applied,
    };
    let others = super::claims_on(
        ctx,
        &eip_name,
        NatKind::Dnat,
        &name,
        &super::created_of(&rule.metadata),
    );
    validate::may_share(&me, &eip_name, &others)?;
    if let Some(other) = port_taken_by(ctx, rule, &eip_name, external_port) {
        return Err(refuse(
            validate::EXTERNAL_PORT_CONFLICT,
            KIND,
            &name,
            "externalPort",
            format_args!("eip {eip_name} port {external_port} already used by OvnDnatRule {other}"),
        ));
    }
    if applied
        && status
            .vpc
            .as_deref()
            .is_some_and(|v| !v.is_empty() && v != internal.vpc)
    {
        return Err(refuse(
            validate::CHANGE_NOT_SUPPORTED,
            KIND,
            &name,
            "vpc",
            format_args!("not support change vpc for dnat {name}"),
        ));
    }
    Ok(Target {
        eip,
        internal,
        protocol,
        external_port,
        internal_port,
    })
}

/// The rule's load balancer (pure).
fn lb(t: &Target) -> DnatLb {
    let (ev4, ev6) = (t.eip.v4.map(|v| v.to_string()), t.eip.v6.map(|v| v.to_string()));
    let vips: BTreeMap<String, String> = pair(
        ev4.as_deref(),
        ev6.as_deref(),
        t.internal.v4.as_deref(),
        t.internal.v6.as_deref(),
    )
    .into_iter()
    .map(|(e, i)| (endpoint(&e, t.external_port), endpoint(&i, t.internal_port)))
    .collect();
    DnatLb {
        protocol: t.protocol,
        vips,
    }
}

async fn apply(rule: &OvnDnatRule, ctx: &Context) -> Result<Action> {
    let name = rule.name_any();
    let status = rule.status.clone().unwrap_or_default();
    let target = match validate(rule, ctx).await {
        Ok(t) => t,
        Err(r) => {
            return super::refused(
                ctx,
                rule,
                status.conditions.as_ref(),
                status.ready == Some(true),
                r,
            )
            .await;
        }
    };
    let vpc = target.internal.vpc.clone();
    let want_lb = lb(&target);
    let plan = ctx.nb.read(|cache| {
        if cache.uuids_by_name(LogicalRouter::NAME, &vpc).is_empty() {
            return Err(Error::NotReady(format!(
                "OvnDnatRule {name}: the router of VPC {vpc} does not exist yet"
            )));
        }
        let mut plan = Plan::new();
        sync_dnat(&mut plan, cache, &name, Some(&vpc), Some(&want_lb));
        Ok(plan)
    })?;
    ctx.nb
        .apply(plan, "ovn-dnat")
        .await
        .doing(format_args!("write the load balancer of OvnDnatRule {name}"))?;
    let mut labels = super::eip_labels(&target.eip, false);
    labels.insert(
        keys::VPC_DNAT_EPORT_LABEL.to_owned(),
        Some(target.external_port.to_string()),
    );
    let want = json!({
        "ready": true, "vpc": vpc,
        "v4Eip": target.eip.v4.map(|v| v.to_string()), "v6Eip": target.eip.v6.map(|v| v.to_string()),
        "v4Ip": target.internal.v4, "v6Ip": target.internal.v6,
        "protocol": target.protocol, "ipName": rule.spec.ip_name,
        "externalPort": target.external_port.to_string(), "internalPort": target.internal_port.to_string(),
    });
    let have = serde_json::to_value(&status).unwrap_or_default();
    super::write_rule(
        ctx,
        rule,
        labels,
        &target.eip.name,
        status.conditions.as_ref(),
        want,
        have,
    )
    .await?;
    Ok(Action::await_change())
}

async fn cleanup(rule: &OvnDnatRule, ctx: &Context) -> Result<Action> {
    let name = rule.name_any();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        sync_dnat(&mut plan, cache, &name, None, None);
        plan
    });
    ctx.nb
        .apply(plan, "ovn-dnat-delete")
        .await
        .doing(format_args!("remove the load balancer of OvnDnatRule {name}"))?;
    Ok(Action::await_change())
}
