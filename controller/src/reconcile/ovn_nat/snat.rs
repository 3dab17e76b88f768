//! OvnSnatRule (Kube-OVN's `ovn_snat.go`): `snat` rows on the VPC router, `external_ip` = the
//! EIP, `logical_ip` = what is translated: `v4IpCidr`/`v6IpCidr` (with `spec.vpc`), else
//! `vpcSubnet` (its `cidrBlock`, its VPC), else `ipName` (the IP CR's addresses, its subnet's
//! VPC). Several SNAT rules, a DNAT rule and a centralized FIP may share one EIP (Kube-OVN's
//! e2e: the `lrp` EIP shared by all three). Labels `eip_v4_ip`, `eip_v6_ip`, annotation
//! `vpc_eip`, status `ready`, `vpc`, `v4Eip`, `v6Eip`, `v4IpCidr`, `v6IpCidr`.

use std::net::IpAddr;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::crd::OvnSnatRule;
use kube_ovn_api::crd::ovn_nat::IpType;
use serde_json::json;

use super::plan::{NatRow, SNAT_KEY, sync_nat};
use super::rule;
use super::validate::{self, Internal, Refusal, refuse};
use crate::context::Context;
use crate::error::Result;

pub const KIND: &str = "OvnSnatRule";

pub async fn reconcile(rule: Arc<OvnSnatRule>, ctx: Arc<Context>) -> Result<Action> {
    rule::finalized(rule, ctx, apply, cleanup).await
}

/// The CIDRs of a comma-separated list, one per family (`field` names them in a refusal).
fn by_family(name: &str, field: &str, list: &str) -> Result<(Option<String>, Option<String>), Refusal> {
    let (mut v4, mut v6) = (None, None);
    for c in list.split(',').map(str::trim).filter(|c| !c.is_empty()) {
        let net = validate::parse_cidr(KIND, name, field, c)?;
        match net.addr() {
            IpAddr::V4(_) => v4 = Some(net.to_string()),
            IpAddr::V6(_) => v6 = Some(net.to_string()),
        }
    }
    Ok((v4, v6))
}

async fn internal(rule: &OvnSnatRule, ctx: &Context) -> Result<Internal, Refusal> {
    let name = rule.name_any();
    let s = &rule.spec;
    let nonempty = |v: &Option<String>| v.clone().filter(|v| !v.is_empty());
    let (subnet, ip_name) = (nonempty(&s.vpc_subnet), nonempty(&s.ip_name));
    if subnet.is_some() && ip_name.is_some() {
        return Err(refuse(
            validate::INVALID_SPEC,
            KIND,
            &name,
            "vpcSubnet",
            "should not set spec vpcSubnet and spec ipName at the same time",
        ));
    }
    if nonempty(&s.v4_ip_cidr).is_some() || nonempty(&s.v6_ip_cidr).is_some() {
        let vpc = nonempty(&s.vpc).ok_or_else(|| {
            refuse(
                validate::INVALID_SPEC,
                KIND,
                &name,
                "vpc",
                "spec v4IpCidr/v6IpCidr need spec vpc",
            )
        })?;
        let (v4, _) = by_family(&name, "v4IpCidr", &nonempty(&s.v4_ip_cidr).unwrap_or_default())?;
        let (_, v6) = by_family(&name, "v6IpCidr", &nonempty(&s.v6_ip_cidr).unwrap_or_default())?;
        return Ok(Internal {
            vpc,
            v4,
            v6,
            ..Internal::default()
        });
    }
    if let Some(subnet) = subnet {
        let sn = ctx.stores.subnets.get(&ObjectRef::new(&subnet)).ok_or_else(|| {
            refuse(
                validate::IP_NOT_FOUND,
                KIND,
                &name,
                "vpcSubnet",
                format_args!("subnet {subnet} not found"),
            )
        })?;
        let (v4, v6) = by_family(
            &name,
            "vpcSubnet",
            sn.spec.cidr_block.as_deref().unwrap_or_default(),
        )?;
        let vpc = crate::reconcile::triggers::subnet_vpc_name(&ctx.config.cluster_router, &sn).to_owned();
        validate::vpc_agrees(
            KIND,
            &name,
            s.vpc.as_deref(),
            &Internal {
                vpc: vpc.clone(),
                ..Internal::default()
            },
        )?;
        return Ok(Internal {
            vpc,
            v4,
            v6,
            ..Internal::default()
        });
    }
    if let Some(ip_name) = ip_name {
        let i = super::internal_of(ctx, KIND, &name, &ip_name, IpType::Ip).await?;
        validate::vpc_agrees(KIND, &name, s.vpc.as_deref(), &i)?;
        return Ok(Internal {
            mac: None,
            port: None,
            node: None,
            ..i
        });
    }
    Err(refuse(
        validate::INVALID_SPEC,
        KIND,
        &name,
        "vpcSubnet",
        "should set spec vpcSubnet, spec ipName, or spec vpc with v4IpCidr/v6IpCidr",
    ))
}

async fn validate(rule: &OvnSnatRule, ctx: &Context) -> Result<(validate::EipFacts, Internal), Refusal> {
    let status = rule.status.clone().unwrap_or_default();
    let eip = rule::usable_eip(ctx, rule)?;
    let internal = internal(rule, ctx).await?;
    rule::may_claim(ctx, rule, &internal.vpc, false)?;
    rule::unchanged(
        rule,
        &[("vpc", "vpc", status.vpc.as_deref(), Some(&internal.vpc))],
    )?;
    Ok((eip, internal))
}

async fn apply(rule: &OvnSnatRule, ctx: &Context) -> Result<Action> {
    let name = rule.name_any();
    let (eip, internal) = match validate(rule, ctx).await {
        Ok(t) => t,
        Err(r) => return super::refused(ctx, rule, r).await,
    };
    let rows: Vec<NatRow> = rule::pairs(&eip, &internal)
        .into_iter()
        .map(|(external_ip, logical_ip)| NatRow {
            kind: "snat",
            external_ip,
            logical_ip,
            external_mac: None,
            logical_port: None,
            stateless: false,
        })
        .collect();
    let vpc = internal.vpc.clone();
    rule::write_on_router(ctx, rule, Some(&vpc), "ovn-snat", "NAT rows", |plan, cache| {
        sync_nat(plan, cache, (SNAT_KEY, &name), Some(&vpc), &rows, false);
    })
    .await?;
    let want = json!({
        "ready": true, "vpc": vpc,
        "v4Eip": eip.v4.map(|v| v.to_string()), "v6Eip": eip.v6.map(|v| v.to_string()),
        "v4IpCidr": internal.v4, "v6IpCidr": internal.v6,
    });
    super::write_rule(ctx, rule, super::eip_labels(&eip, false), &eip.name, want).await?;
    Ok(Action::await_change())
}

async fn cleanup(rule: &OvnSnatRule, ctx: &Context) -> Result<Action> {
    let name = rule.name_any();
    rule::write_on_router(ctx, rule, None, "ovn-snat-delete", "NAT rows", |plan, cache| {
        sync_nat(plan, cache, (SNAT_KEY, &name), None, &[], false);
    })
    .await?;
    Ok(Action::await_change())
}
