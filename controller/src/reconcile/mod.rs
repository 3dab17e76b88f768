//! The controller's event loop: one `kube::runtime::Controller` per kind, sharing a [`Context`].
//!
//! ```text
//!   start ─▶ NB client ─▶ leader lease ─▶ startup::init (router, default VPC, join + default
//!           subnets as CRs)
//!        ─▶ one watch per kind (Informers) fills the caches; controllers and deletion handlers
//!           are subscribed before it starts
//!        ─▶ every cache listed (Stores::synced) ─▶ ipam_rebuild from them (IP CRs, NB ports,
//!           pods, nodes) ─▶ Context
//!        ─▶ Controllers (each: shared watch ─▶ triggers ─▶ queue ─▶ reconcilers: --worker-num
//!           per kind, --pod-workers for pods, one for IP CRs; see controllers.rs, triggers.rs):
//!             Vpc (+Subnets) ─ Subnet (+Nodes, +VPCs) ─ IPPool
//!             Namespace (+Subnets, +IPPools, +VPCs) ─ Node ─ Pod (+Subnets, +VPCs, +IPPools,
//!             +Namespaces)
//!             IP (reserved addresses)
//!             Service (+EndpointSlices), and the sweep of Services gone
//!        ─▶ deletions (pods, nodes from the shared watches; StatefulSets) release at once
//!        ─▶ gc loop every --gc-interval, subnet address counters every second
//!        ─▶ runs until shutdown or leadership is lost
//! ```
//!
//! Reconcilers are level-triggered: each computes the desired northbound rows and Kubernetes
//! state from what exists now and applies the difference, so a crash at any point is repaired by
//! the next run.
//!
//! The layout: one folder per kind — [`pod`], [`subnet`], [`vpc`], [`service`],
//! [`network_policy`], [`ip`] (IP CRs, IP pools, the IPAM rebuild), [`node`] — whose `mod.rs` is
//! the reconciler (the apply side: reads the caches, writes Kubernetes and the northbound
//! database) and whose other files are its pure parts (`plan`, `spec`, `request`, …) with
//! their unit tests. What no single kind owns stays here: the wiring of the controllers
//! ([`controllers`], [`triggers`], [`startup`], [`leader`], [`gc`]), and the rules several kinds
//! read — which subnets a namespace binds ([`binding`]: pods, namespaces, services, the tenancy
//! rule), a StatefulSet's claim on its pods' addresses ([`statefulset`]: pods and the deletion
//! path), what a Pod, a Node and a Subnet say once read ([`pod_state`], [`node_state`],
//! [`subnet_spec`]: pure, read by the IP, pod, node, subnet and VPC reconcilers and the triggers,
//! so kept out of any one kind's folder: the folders never depend on each other in a circle,
//! which `testkit/tests/module_graph.rs` checks) — and the namespace reconciler ([`namespace`]),
//! which only mirrors the subnets and pools bound to a namespace into its annotations. The tenancy rule is the pods' ([`tenancy`]):
//! only a pod's own annotations are checked against it.

// By kind: each folder holds the kind's reconciler (`mod.rs`, the apply side: reads the caches,
// writes Kubernetes and the northbound database) and its pure parts (plans, specs, rules) beside
// it.
pub mod ip;
pub mod network_policy;
pub mod node;
pub mod ovn_nat;
pub mod pod;
pub mod pod_eip;
pub mod provider_network;
pub mod service;
pub mod subnet;
pub mod vlan;
pub mod vpc;

// Across kinds: the controllers' wiring and what several kinds share.
pub mod binding;
pub mod controllers;
pub mod external;
pub mod gc;
pub mod leader;
pub mod namespace;
pub mod node_state;
pub mod pod_state;
pub mod startup;
pub mod statefulset;
pub mod subnet_spec;
pub mod tenancy;
pub mod triggers;

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::controller::{self, Action};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, reflector, watcher};
use kube::{Api, Resource};

use crate::context::Context;
use crate::error::{Doing, Error};
use crate::informer::{Cache, Informer};

/// How long to wait before retrying after an error: short for "not ready yet", longer for input
/// that needs a human.
pub fn retry_after(error: &Error) -> Duration {
    match error {
        Error::NotReady(_) => Duration::from_millis(500),
        Error::Invalid(_) | Error::Annotation(_) => Duration::from_mins(1),
        _ => Duration::from_secs(2),
    }
}

/// Wraps a reconciler with a span, metrics and logging.
pub async fn instrumented<K, F, Fut>(
    kind: &'static str,
    obj: Arc<K>,
    ctx: Arc<Context>,
    f: F,
) -> Result<Action, Error>
where
    K: Resource + Debug,
    F: FnOnce(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>>,
{
    let name = obj.meta().name.clone().unwrap_or_default();
    let namespace = obj.meta().namespace.clone().unwrap_or_default();
    let span = tracing::info_span!("reconcile", kind, %name, %namespace);
    let start = Instant::now();
    let metrics = ctx.metrics.clone();
    let result = tracing::Instrument::instrument(f(obj, ctx), span.clone()).await;
    metrics.reconciled(
        kind,
        result.is_ok() || matches!(result, Err(Error::NotReady(_))),
        start.elapsed(),
    );
    let _enter = span.enter();
    match &result {
        Ok(_) => tracing::debug!(elapsed_ms = start.elapsed().as_millis(), "reconciled"),
        Err(e @ Error::NotReady(_)) => tracing::debug!(reason = %e, "not ready; retrying"),
        Err(e) => tracing::warn!(error = %e, "reconcile failed"),
    }
    result
}

pub fn error_policy<K>(_obj: Arc<K>, error: &Error, _ctx: Arc<Context>) -> Action {
    Action::requeue(retry_after(error))
}

/// What a reconcile run behind Kube-OVN's finalizer failed at: the reconciler's own error, or
/// adding or removing the finalizer, naming the object.
pub fn finalizer_error<K: Resource<DynamicType = ()>>(
    name: &str,
) -> impl FnOnce(kube::runtime::finalizer::Error<Error>) -> Error + '_ {
    use kube::runtime::finalizer::Error as F;
    move |e| {
        let kind = K::kind(&());
        match e {
            F::ApplyFailed(e) | F::CleanupFailed(e) => e,
            F::AddFinalizer(source) => Error::Kube {
                doing: format!("add the finalizer to {kind} {name}"),
                source,
            },
            F::RemoveFinalizer(source) => Error::Kube {
                doing: format!("remove the finalizer from {kind} {name}"),
                source,
            },
            other => Error::Invalid(format!("{kind} {name}: finalizer: {other}")),
        }
    }
}

/// Every object of the kind in `store`, as references (for "everything of kind K" mappers).
pub fn all_refs<K>(store: &reflector::Store<K>) -> Vec<ObjectRef<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store.state().iter().map(|o| ObjectRef::from_obj(&**o)).collect()
}

/// Drives a controller's stream to completion, logging what it cannot reconcile.
pub async fn drive<K, S>(kind: &'static str, stream: S)
where
    K: Resource + Debug,
    S: futures::Stream<Item = Result<(ObjectRef<K>, Action), controller::Error<Error, watcher::Error>>>,
{
    stream
        .for_each(|r| async move {
            if let Err(e) = r {
                match e {
                    controller::Error::ReconcilerFailed(..) => {}
                    other => tracing::debug!(kind, error = %other, "controller event"),
                }
            }
        })
        .await;
}

/// Writes a cluster-scoped object's status with a merge patch (the status subresource).
pub async fn merge_status<K>(
    kube: &kube::Client,
    name: &str,
    status: &impl serde::Serialize,
) -> crate::error::Result<()>
where
    K: Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + serde::de::DeserializeOwned,
{
    let api: Api<K> = Api::all(kube.clone());
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({ "status": status })),
    )
    .await
    .doing(format_args!("write the status of {} {name}", K::kind(&())))?;
    Ok(())
}

/// A controller of `K` over the shared watch, reconciling objects that change in what `differs`
/// compares, `workers` at a time.
pub(crate) fn own<K>(informer: &Informer<K>, differs: fn(&K, &K) -> bool, workers: u16) -> Controller<K>
where
    K: Resource<DynamicType = ()> + Clone + Debug + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    Controller::for_shared_stream(informer.changes().objects(differs), informer.cache().store())
        .with_config(controller::Config::default().concurrency(workers))
}

/// Every object of the cache, as references.
pub(crate) fn every<K>(cache: &Cache<K>) -> impl Fn() -> Vec<ObjectRef<K>> + Clone + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let cache = cache.clone();
    move || all_refs(&cache)
}

#[cfg(test)]
mod tests {
    use kube_ovn_api::crd::Subnet;

    use super::*;

    #[test]
    fn a_finalizer_failure_names_the_object() {
        let forbidden = || {
            kube::Error::Api(
                kube::core::Status::failure("no", "Forbidden")
                    .with_code(403)
                    .boxed(),
            )
        };
        let add = finalizer_error::<Subnet>("s1")(kube::runtime::finalizer::Error::AddFinalizer(forbidden()));
        assert!(
            add.to_string().starts_with("add the finalizer to Subnet s1: "),
            "{add}"
        );
        let ours = finalizer_error::<Subnet>("s1")(kube::runtime::finalizer::Error::ApplyFailed(
            Error::NotReady("x".into()),
        ));
        assert!(
            matches!(ours, Error::NotReady(_)),
            "the reconciler's own error passes through"
        );
    }
}
