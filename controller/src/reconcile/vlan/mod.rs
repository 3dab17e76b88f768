//! Vlans: the default provider, `status.subnets`, `status.conflict` with a `Ready` condition and
//! a `VlanConflict` Warning event, and the Vlan's name in its ProviderNetwork's `status.vlans`
//! ([`plan`]). The subnets using a Vlan look again when it changes (the Subnet controller's
//! triggers, `controllers.rs`). Behind Kube-OVN's finalizer, which Kube-OVN does not put on Vlans:
//! a Vlan deleted while no controller ran still leaves its networks' `status.vlans`.
//!
//! Several Vlans (and nothing else) write one network's `status.vlans`: each write is a merge
//! patch that carries the `resourceVersion` it was computed from, so a concurrent writer's name
//! is never lost; a conflict is retried from the cache's newer copy.

pub mod plan;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, READY, set_condition};
use kube_ovn_api::crd::{FINALIZER, ProviderNetwork, Vlan};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use plan::{REASON_CONFLICT, VlanPlan};

pub const KIND: &str = "Vlan";

pub async fn reconcile(vlan: Arc<Vlan>, ctx: Arc<Context>) -> Result<Action> {
    let name = vlan.name_any();
    let api: Api<Vlan> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, vlan, |event| async move {
        match event {
            Finalizer::Apply(v) => apply(&v, &c).await,
            Finalizer::Cleanup(v) => cleanup(&v, &c).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<Vlan>(&name))
}

fn plan_for(vlan: &Vlan, ctx: &Context) -> VlanPlan {
    plan::plan(
        vlan,
        &ctx.stores.vlans.state(),
        &ctx.stores.subnets.state(),
        &ctx.stores.provider_networks.state(),
        &ctx.config.default_provider_name,
    )
}

async fn apply(vlan: &Vlan, ctx: &Context) -> Result<Action> {
    let name = vlan.name_any();
    let plan = plan_for(vlan, ctx);
    if let Some(provider) = &plan.set_provider {
        // Kube-OVN writes the default into the spec; the change event brings us back.
        Api::<Vlan>::all(ctx.kube.clone())
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"provider": provider}})),
            )
            .await
            .doing(format_args!("set the provider of vlan {name} to {provider}"))?;
    }
    write_status(ctx, vlan, &plan).await?;
    for pn in &plan.remove_from {
        edit_vlans(ctx, pn, &name, false).await?;
    }
    if let Some(pn) = &plan.add_to {
        edit_vlans(ctx, pn, &name, true).await?;
    }
    Ok(Action::await_change())
}

async fn cleanup(vlan: &Vlan, ctx: &Context) -> Result<Action> {
    let name = vlan.name_any();
    for pn in &plan_for(vlan, ctx).remove_from {
        edit_vlans(ctx, pn, &name, false).await?;
    }
    Ok(Action::await_change())
}

/// `status.subnets`, `status.conflict` and the `Ready` condition, written when they differ; a
/// new conflict is also a Warning event and a log line.
async fn write_status(ctx: &Context, vlan: &Vlan, plan: &VlanPlan) -> Result<()> {
    let name = vlan.name_any();
    let old = vlan.status.clone().unwrap_or_default();
    let mut conditions = old.conditions.clone().unwrap_or_default();
    let (ready, reason, message) = plan.readiness(&name);
    let status = if ready {
        ConditionStatus::True
    } else {
        ConditionStatus::False
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let changed = set_condition(
        &mut conditions,
        Condition::new(READY, status, reason, &message),
        &now,
    );
    let conflict = plan.conflicts_with.is_some();
    if changed && reason == REASON_CONFLICT {
        tracing::warn!(reason, %message, "vlan refused");
        warn(ctx, vlan, &message).await;
    }
    let subnets = (!plan.subnets.is_empty()).then(|| plan.subnets.clone());
    if !changed && old.conflict == Some(conflict) && old.subnets == subnets {
        return Ok(());
    }
    let patch = json!({"subnets": subnets, "conflict": conflict, "conditions": conditions});
    crate::reconcile::merge_status::<Vlan>(&ctx.kube, &name, &patch).await
}

/// Adds `vlan` to (or removes it from) provider network `pn`'s `status.vlans`, from the cached
/// copy and only if that copy is still current (its `resourceVersion` in the patch): another
/// Vlan's concurrent edit makes this one fail with 409 and retry from the newer copy.
async fn edit_vlans(ctx: &Context, pn: &str, vlan: &str, add: bool) -> Result<()> {
    let Some(cached) = ctx.stores.provider_networks.get(&ObjectRef::new(pn)) else {
        return Ok(());
    };
    let mut vlans = cached
        .status
        .as_ref()
        .and_then(|s| s.vlans.clone())
        .unwrap_or_default();
    if vlans.iter().any(|v| v == vlan) == add {
        return Ok(());
    }
    if add {
        vlans.push(vlan.to_owned());
    } else {
        vlans.retain(|v| v != vlan);
    }
    let patch = json!({
        "metadata": {"resourceVersion": cached.resource_version()},
        "status": {"vlans": (!vlans.is_empty()).then_some(vlans)},
    });
    let doing = if add { "add" } else { "remove" };
    match Api::<ProviderNetwork>::all(ctx.kube.clone())
        .patch_status(pn, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => {
            tracing::info!(provider_network = pn, vlan, doing, "status.vlans");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::NotReady(format!(
            "provider network {pn} changed while vlan {vlan} edited its status.vlans; again from the newer copy"
        ))),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).doing(format_args!(
            "{doing} vlan {vlan} in the status.vlans of provider network {pn}"
        )),
    }
}

async fn warn(ctx: &Context, vlan: &Vlan, message: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: REASON_CONFLICT.into(),
        note: Some(message.to_owned()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &vlan.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}
