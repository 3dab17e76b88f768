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
use kube::runtime::controller::Action;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::OvnDnatRule;
use serde_json::json;

use super::plan::{DnatLb, endpoint, sync_dnat};
use super::rule::{self, Addressed};
use super::validate::{self, Internal, Refusal, refuse};
use crate::context::Context;
use crate::error::Result;

pub const KIND: &str = "OvnDnatRule";

pub async fn reconcile(rule: Arc<OvnDnatRule>, ctx: Arc<Context>) -> Result<Action> {
    rule::finalized(rule, ctx, apply, cleanup).await
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
    let s = &rule.spec;
    let eip = rule::usable_eip(ctx, rule)?;
    let external_port = validate::parse_port(KIND, &name, "externalPort", s.external_port.as_deref())?;
    let internal_port = validate::parse_port(KIND, &name, "internalPort", s.internal_port.as_deref())?;
    let protocol = validate::parse_protocol(&name, s.protocol.as_deref())?;
    let internal = rule::internal_by_ip(
        ctx,
        rule,
        &Addressed {
            ip_name: s.ip_name.as_deref(),
            ip_type: s.ip_type.as_deref(),
            vpc: s.vpc.as_deref(),
            v4_ip: s.v4_ip.as_deref(),
            v6_ip: s.v6_ip.as_deref(),
        },
    )
    .await?;
    rule::may_claim(ctx, rule, &internal.vpc, false)?;
    if let Some(other) = port_taken_by(ctx, rule, &eip.name, external_port) {
        return Err(refuse(
            validate::EXTERNAL_PORT_CONFLICT,
            KIND,
            &name,
            "externalPort",
            format_args!(
                "eip {} port {external_port} already used by OvnDnatRule {other}",
                eip.name
            ),
        ));
    }
    rule::unchanged(
        rule,
        &[("vpc", "vpc", status.vpc.as_deref(), Some(&internal.vpc))],
    )?;
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
    let vips: BTreeMap<String, String> = rule::pairs(&t.eip, &t.internal)
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
    let target = match validate(rule, ctx).await {
        Ok(t) => t,
        Err(r) => return super::refused(ctx, rule, r).await,
    };
    let vpc = target.internal.vpc.clone();
    let want_lb = lb(&target);
    rule::write_on_router(
        ctx,
        rule,
        Some(&vpc),
        "ovn-dnat",
        "load balancer",
        |plan, cache| sync_dnat(plan, cache, &name, Some(&vpc), Some(&want_lb)),
    )
    .await?;
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
    super::write_rule(ctx, rule, labels, &target.eip.name, want).await?;
    Ok(Action::await_change())
}

async fn cleanup(rule: &OvnDnatRule, ctx: &Context) -> Result<Action> {
    let name = rule.name_any();
    rule::write_on_router(
        ctx,
        rule,
        None,
        "ovn-dnat-delete",
        "load balancer",
        |plan, cache| sync_dnat(plan, cache, &name, None, None),
    )
    .await?;
    Ok(Action::await_change())
}
