//! Services on OVN load balancers: each Service's VIPs in its VPC's load balancers (planned by
//! [`super::service_plan`]; the load balancers themselves and their switches are
//! [`super::service_lb`]'s), and the sweep that removes the VIPs of Services gone.
//!
//! ```text
//!   Service ◀─ its own changes; its EndpointSlices (label kubernetes.io/service-name)
//!      └─▶ plan_service ─▶ events for bad input ─▶ `ovn.kubernetes.io/vpc` annotation
//!          ─▶ per load balancer of every VPC: this Service's keys made exactly what it wants
//!   Service gone, or an address dropped ─▶ sweep: every VIP of an address no Service has goes
//! ```
//!
//! Ownership of a VIP is its address: ClusterIPs are unique in a cluster, so the keys of a
//! Service are those that start with one of its addresses (Kube-OVN finds them the same way
//! when it cleans up after a Service). Nothing else is remembered, so a restart finds the same
//! keys and writes nothing when nothing changed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use kube_ovn_ovsdb::tables::nb::LoadBalancer;
use kube_ovn_ovsdb::{Atom, Table, Value};

use super::service_lb::lb_names;
use super::service_plan::{SERVICE_NAME_LABEL, plan_service, service_ips};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::informer::{Change, Changes};
use crate::ovn::lb;
use crate::ovn::plan::{Plan, VENDOR, VENDOR_KEY};

pub const KIND: &str = "Service";

/// The EndpointSlices of a Service, from the cache.
fn slices_of(ctx: &Context, ns: &str, name: &str) -> Vec<Arc<EndpointSlice>> {
    ctx.stores
        .endpoint_slices
        .state()
        .into_iter()
        .filter(|s| {
            s.namespace().as_deref() == Some(ns)
                && s.labels().get(SERVICE_NAME_LABEL).map(String::as_str) == Some(name)
        })
        .collect()
}

/// The Service an EndpointSlice belongs to, before and after a change.
pub fn services_of_slice(change: &Change<EndpointSlice>) -> Vec<ObjectRef<Service>> {
    let mut out: Vec<ObjectRef<Service>> = [&change.old, &change.new]
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let svc = s.labels().get(SERVICE_NAME_LABEL)?;
            Some(ObjectRef::new(svc).within(&s.namespace()?))
        })
        .collect();
    out.dedup();
    out
}

/// Every VPC the controller knows (the default one even before its CR is cached).
fn vpcs(ctx: &Context) -> BTreeSet<String> {
    let mut all: BTreeSet<String> = ctx.stores.vpcs.state().iter().map(|v| v.name_any()).collect();
    all.insert(ctx.config.cluster_router.clone());
    all
}

pub async fn reconcile(svc: Arc<Service>, ctx: Arc<Context>) -> Result<Action> {
    let ns = svc.namespace().unwrap_or_default();
    let name = svc.name_any();
    let slices = slices_of(&ctx, &ns, &name);
    let slice_refs: Vec<&EndpointSlice> = slices.iter().map(AsRef::as_ref).collect();
    // Only the pods the endpoints name (looked up by key, not by scanning the namespace).
    let pods: BTreeMap<String, _> = slices
        .iter()
        .flat_map(|s| s.endpoints.iter())
        .filter_map(|e| e.target_ref.as_ref()?.name.clone())
        .filter_map(|n| {
            let pod = ctx.stores.pods.get(&ObjectRef::new(&n).within(&ns))?;
            Some((n, pod))
        })
        .collect();
    let want = plan_service(
        &svc,
        &slice_refs,
        |p| pods.get(p).map(AsRef::as_ref),
        &ctx.config.cluster_router,
    );
    for problem in &want.problems {
        warn(&ctx, &svc, problem).await;
    }
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for vpc in vpcs(&ctx) {
            let names = lb_names(&ctx.config, &vpc);
            for (kind, lb_name) in names.each() {
                let desired = if vpc == want.vpc {
                    want.vips.get(&kind).cloned().unwrap_or_default()
                } else {
                    BTreeMap::new()
                };
                match cache.uuids_by_name(LoadBalancer::NAME, lb_name).first() {
                    Some(uuid) => lb::sync_vips(&mut plan, cache, *uuid, &want.ips, &desired),
                    None if !desired.is_empty() => {
                        return Err(Error::NotReady(format!(
                            "load balancer {lb_name} of VPC {vpc} does not exist yet"
                        )));
                    }
                    None => {}
                }
            }
        }
        Ok(plan)
    })?;
    ctx.nb
        .apply(plan, "service")
        .await
        .doing(format_args!("write the VIPs of service {ns}/{name}"))?;
    let has_vips = !want.ips.is_empty();
    if has_vips && svc.annotations().get(keys::VPC) != Some(&want.vpc) {
        let api: Api<Service> = Api::namespaced(ctx.kube.clone(), &ns);
        let patch = serde_json::json!({"metadata": {"annotations": {keys::VPC: want.vpc}}});
        api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .doing(format_args!("annotate service {ns}/{name} with its VPC"))?;
    }
    Ok(Action::await_change())
}

/// A Warning event on the Service (kube-runtime's recorder folds repeats into a count).
async fn warn(ctx: &Context, svc: &Service, message: &str) {
    tracing::warn!(problem = message, "service input left out");
    let event = Event {
        type_: EventType::Warning,
        reason: "InvalidServiceInput".into(),
        note: Some(message.to_owned()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &svc.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// Whether a change takes an address away from a Service (or the Service itself).
fn drops_an_address(change: &Change<Service>) -> bool {
    let ips = |s: &Option<Arc<Service>>| -> BTreeSet<String> {
        s.as_deref()
            .and_then(|s| service_ips(s).ok())
            .unwrap_or_default()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    !ips(&change.old).is_subset(&ips(&change.new))
}

/// Removes from every load balancer of ours each VIP whose address no Service in the cache has.
pub async fn sweep(ctx: &Context) -> Result<()> {
    let live: BTreeSet<String> = ctx
        .stores
        .services
        .state()
        .iter()
        .filter_map(|s| service_ips(s).ok())
        .flatten()
        .map(|ip| ip.to_string())
        .collect();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        let ours: Vec<_> = cache
            .table(LoadBalancer::NAME)
            .filter(|(_, row)| {
                matches!(row.get("external_ids"), Some(Value::Map(m))
                    if m.get(&Atom::from(VENDOR_KEY)).and_then(|v| v.as_str()) == Some(VENDOR)
                        && m.contains_key(&Atom::from("vpc")))
            })
            .map(|(u, _)| *u)
            .collect();
        for uuid in ours {
            lb::sweep_vips(&mut plan, cache, uuid, |ip| live.contains(ip));
        }
        plan
    });
    ctx.nb
        .apply(plan, "service-sweep")
        .await
        .doing("remove the VIPs of Services gone")?;
    Ok(())
}

/// Sweeps once at start (Services deleted while no controller ran) and after every change that
/// drops an address; changes that queue up while a sweep runs are served by one more sweep.
pub async fn sweep_on(ctx: Arc<Context>, changes: Changes<Service>) {
    let signals = changes
        .map(|c| drops_an_address(c).then_some(()), || Some(()))
        .ready_chunks(1024);
    let first = futures::stream::once(async { vec![()] });
    first
        .chain(signals)
        .for_each(|_| {
            let ctx = ctx.clone();
            async move {
                let mut backoff = std::time::Duration::from_millis(200);
                while let Err(e) = sweep(&ctx).await {
                    tracing::warn!(error = %e, "sweeping the VIPs of Services gone failed; retrying");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(std::time::Duration::from_secs(10));
                }
            }
        })
        .await;
}
