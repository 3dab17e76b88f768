//! VPCs: one logical router each (`ovn-cluster` for the default VPC), and the status subnets and
//! users read (`router`, `default`, `standby`, `defaultLogicalSwitch`, `subnets`).

use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube_ovn_api::crd::{FINALIZER, Vpc};
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::LogicalRouter;
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::ovn::plan::Plan;
use crate::ovn::topology::ensure_router;

pub const KIND: &str = "Vpc";

pub async fn reconcile(vpc: Arc<Vpc>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<Vpc> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, vpc, |event| async move {
        match event {
            Finalizer::Apply(v) => apply(&v, &c).await,
            Finalizer::Cleanup(v) => cleanup(&v, &c).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Invalid(format!("finalizer: {other}")),
    })
}

/// The subnets of a VPC (by `spec.vpc`, defaulting to the default VPC).
fn subnets_of(ctx: &Context, vpc: &str) -> Vec<String> {
    let mut names: Vec<String> = ctx
        .stores
        .subnets
        .state()
        .iter()
        .filter(|s| {
            s.spec
                .vpc
                .as_deref()
                .filter(|v| !v.is_empty())
                .unwrap_or(&ctx.config.cluster_router)
                == vpc
        })
        .map(|s| s.name_any())
        .collect();
    names.sort();
    names
}

async fn apply(vpc: &Vpc, ctx: &Context) -> Result<Action> {
    let name = vpc.name_any();
    let is_default = name == ctx.config.cluster_router;
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        ensure_router(&mut plan, cache, &name, &[("vpc", name.as_str())]);
        plan
    });
    ctx.nb.apply(plan, "vpc").await?;
    let default_ls = if is_default {
        ctx.config.default_subnet.name.clone()
    } else {
        vpc.spec.default_subnet.clone().unwrap_or_default()
    };
    let status = json!({"status": {
        "router": name,
        "default": is_default,
        "standby": true,
        "defaultLogicalSwitch": default_ls,
        "subnets": subnets_of(ctx, &name),
    }});
    let current = vpc.status.as_ref();
    let same = current.is_some_and(|s| {
        s.router.as_deref() == Some(name.as_str())
            && s.default == Some(is_default)
            && s.standby == Some(true)
            && s.default_logical_switch.as_deref().unwrap_or_default() == default_ls
            && s.subnets.clone().unwrap_or_default() == subnets_of(ctx, &name)
    });
    if !same {
        let api: Api<Vpc> = Api::all(ctx.kube.clone());
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await?;
    }
    Ok(Action::await_change())
}

async fn cleanup(vpc: &Vpc, ctx: &Context) -> Result<Action> {
    let name = vpc.name_any();
    if name == ctx.config.cluster_router {
        return Err(Error::Invalid(format!(
            "the default VPC {name} cannot be deleted"
        )));
    }
    if let Some(s) = subnets_of(ctx, &name).first() {
        return Err(Error::NotReady(format!("VPC {name} still has subnet {s}")));
    }
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for uuid in cache.uuids_by_name(LogicalRouter::NAME, &name) {
            plan.delete(LogicalRouter::NAME, *uuid);
        }
        plan
    });
    ctx.nb.apply(plan, "vpc-delete").await?;
    Ok(Action::await_change())
}
