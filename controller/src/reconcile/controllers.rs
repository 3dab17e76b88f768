//! One `kube::runtime::Controller` per kind, each fed by the shared watches: its own objects when
//! they change in what its reconciler reads, and the objects of its kind that another kind's
//! change concerns ([`super::triggers`]).
//!
//! ```text
//!   Vpc        ◀─ its own changes but status; Subnets (spec, deletion) → their VPCs, old and new
//!   Subnet     ◀─ its own changes but status; Nodes (labels, readiness, addresses, join) and
//!                 VPCs (spec, router, deletion), Vlans (id, provider, conflict) and
//!                 ProviderNetworks (status.vlans) → every subnet
//!   IPPool     ◀─ its own changes but status
//!   Namespace  ◀─ its own; Subnets, IPPools (spec, deletion), VPCs (+ default subnet) → every namespace
//!   Node, IP   ◀─ their own
//!   Pod        ◀─ its own; a Subnet's spec, deletion or turning ready → the pods waiting for it;
//!                 VPCs (spec, default subnet, deletion), IPPools (spec, deletion) → every pod
//!                 not yet routed; a Namespace's labels → its pods not yet routed (the subnets
//!                 and pools they may use, pod/tenancy.rs)
//!   Service    ◀─ its own; its EndpointSlices (service/mod.rs); Services losing an address → sweep
//!   NetworkPolicy ◀─ its own; Pods, Namespaces → the policies they concern (network_policy/mod.rs)
//! ```

use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::controller;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::{IPPool, Ip, Subnet, Vpc};

use super::ip::record::wants_reconcile;
use super::triggers::{self, waits_for};
use super::{all_refs, drive, error_policy, instrumented};
use crate::config::Config;
use crate::context::Context;
use crate::informer::{Cache, Changes, Informer, OwnWrites};
use crate::stores::{Informers, Stores};

/// The controllers, built (and subscribed to their triggers) before the watches start.
pub struct Controllers {
    vpcs: Controller<Vpc>,
    subnets: Controller<Subnet>,
    ippools: Controller<IPPool>,
    namespaces: Controller<Namespace>,
    nodes: Controller<Node>,
    pods: Controller<Pod>,
    ips: Controller<Ip>,
    services: Controller<Service>,
    service_sweeps: Changes<Service>,
    network_policies: Controller<NetworkPolicy>,
}

/// A controller of `K` over the shared watch, reconciling objects that change in what `differs`
/// compares, `workers` at a time.
fn own<K>(informer: &Informer<K>, differs: fn(&K, &K) -> bool, workers: u16) -> Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    Controller::for_shared_stream(informer.changes().objects(differs), informer.cache().store())
        .with_config(controller::Config::default().concurrency(workers))
}

/// The pods not yet routed (waiting for an address, or refused one), as references; of
/// namespace `ns` only when given.
fn unrouted(pods: &Cache<Pod>, ns: Option<&str>) -> Vec<ObjectRef<Pod>> {
    pods.state()
        .iter()
        .filter(|p| !p.annotations().contains_key(keys::ROUTED))
        .filter(|p| ns.is_none_or(|ns| p.namespace().as_deref() == Some(ns)))
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// Every object of the cache, as references.
fn every<K>(cache: &Cache<K>) -> impl Fn() -> Vec<ObjectRef<K>> + Clone + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let cache = cache.clone();
    move || all_refs(&cache)
}

impl Controllers {
    /// `pod_writes` are the pod versions the pod reconciler's own patches produced.
    pub fn new(
        config: &Config,
        informers: &Informers,
        stores: &Stores,
        pod_writes: Arc<OwnWrites<Pod>>,
    ) -> Self {
        let workers = config.worker_num;
        let router = config.cluster_router.clone();
        let vpcs = own(&informers.vpcs, triggers::vpc_beyond_status, workers).reconcile_on(
            informers.subnets.changes().when(
                triggers::subnet_spec,
                move |c| triggers::vpcs_of(&router, c),
                every(&stores.vpcs),
            ),
        );
        let subnets = own(&informers.subnets, triggers::subnet_beyond_status, workers)
            .reconcile_on(
                informers
                    .nodes
                    .changes()
                    .when_all(triggers::node_for_subnets, every(&stores.subnets)),
            )
            .reconcile_on(
                informers
                    .vpcs
                    .changes()
                    .when_all(triggers::vpc_for_subnets, every(&stores.subnets)),
            )
            .reconcile_on(
                informers
                    .vlans
                    .changes()
                    .when_all(triggers::vlan_for_subnets, every(&stores.subnets)),
            )
            .reconcile_on(
                informers
                    .provider_networks
                    .changes()
                    .when_all(triggers::provider_network_for_subnets, every(&stores.subnets)),
            );
        let namespaces = own(&informers.namespaces, triggers::any, workers)
            .reconcile_on(
                informers
                    .subnets
                    .changes()
                    .when_all(triggers::subnet_spec, every(&stores.namespaces)),
            )
            .reconcile_on(
                informers
                    .ippools
                    .changes()
                    .when_all(triggers::ippool_spec, every(&stores.namespaces)),
            )
            .reconcile_on(
                informers
                    .vpcs
                    .changes()
                    .when_all(triggers::vpc_for_namespaces, every(&stores.namespaces)),
            );
        let (waiting, unrouted_pods) = (stores.pods.clone(), stores.pods.clone());
        let pods = Controller::for_shared_stream(
            informers
                .pods
                .changes()
                .objects_not_from(triggers::any, pod_writes),
            informers.pods.cache().store(),
        )
        .with_config(controller::Config::default().concurrency(config.pod_workers))
        .reconcile_on(informers.subnets.changes().when(
            triggers::subnet_for_pods,
            move |c| {
                let name = c
                    .new
                    .as_ref()
                    .or(c.old.as_ref())
                    .map(|s| s.name_any())
                    .unwrap_or_default();
                waiting
                    .state()
                    .iter()
                    .filter(|p| waits_for(p, &name))
                    .map(|p| ObjectRef::from_obj(&**p))
                    .collect()
            },
            move || unrouted(&unrouted_pods, None),
        ))
        .reconcile_on(informers.vpcs.changes().when_all(triggers::vpc_for_namespaces, {
            let pods = stores.pods.clone();
            move || unrouted(&pods, None)
        }))
        .reconcile_on(informers.ippools.changes().when_all(triggers::ippool_spec, {
            let pods = stores.pods.clone();
            move || unrouted(&pods, None)
        }))
        .reconcile_on({
            let (pods, all) = (stores.pods.clone(), stores.pods.clone());
            informers.namespaces.changes().when(
                triggers::namespace_labels,
                move |c| {
                    let ns = c.new.as_ref().or(c.old.as_ref()).map(|n| n.name_any());
                    ns.map_or_else(Vec::new, |ns| unrouted(&pods, Some(&ns)))
                },
                move || unrouted(&all, None),
            )
        });
        // As many at a time as pods: a Service's reconcile waits for its northbound write, and
        // only concurrent writes share a transaction (with --worker-num's 3, 1,000 Services took
        // 26x an ovn-nbctl run; docs/benchmarks.md).
        let claimed = stores.services.clone();
        let services = own(&informers.services, triggers::any, config.pod_workers)
            .reconcile_on(
                informers
                    .endpoint_slices
                    .changes()
                    .map(super::service::services_of_slice, every(&stores.services)),
            )
            // Claimants of an address whose owner changed or went (service::claims' rule).
            .reconcile_on(informers.services.changes().map(
                move |c| super::service::claimants_of(c, &claimed.state()),
                Vec::new,
            ));
        let network_policies = super::network_policy::controller(informers, stores, workers);
        Self {
            services,
            service_sweeps: informers.services.changes(),
            vpcs,
            subnets,
            ippools: own(&informers.ippools, triggers::ippool_beyond_status, workers),
            namespaces,
            nodes: own(&informers.nodes, triggers::any, workers),
            pods,
            // One at a time: reservations of one subnet must not race for the same address. The
            // records the controller writes for every pod need no reconcile.
            ips: Controller::for_shared_stream(
                informers
                    .ips
                    .changes()
                    .objects_where(triggers::any, wants_reconcile),
                informers.ips.cache().store(),
            )
            .with_config(controller::Config::default().concurrency(1)),
            network_policies,
        }
    }

    /// Runs every controller until the watches end.
    pub fn run(self, ctx: Arc<Context>) -> impl Future<Output = ()> {
        let Self {
            vpcs,
            subnets,
            ippools,
            namespaces,
            nodes,
            pods,
            ips,
            services,
            service_sweeps,
            network_policies,
        } = self;
        async move {
            futures::join!(
                drive(
                    "Vpc",
                    vpcs.run(
                        |o, c| instrumented(super::vpc::KIND, o, c, super::vpc::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "Subnet",
                    subnets.run(
                        |o, c| instrumented(super::subnet::KIND, o, c, super::subnet::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "IPPool",
                    ippools.run(
                        |o, c| instrumented(super::ip::pool::KIND, o, c, super::ip::pool::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "Namespace",
                    namespaces.run(
                        |o, c| instrumented(super::namespace::KIND, o, c, super::namespace::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "Node",
                    nodes.run(
                        |o, c| instrumented(super::node::KIND, o, c, super::node::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "Pod",
                    pods.run(
                        |o, c| instrumented(super::pod::KIND, o, c, super::pod::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "Service",
                    services.run(
                        |o, c| instrumented(super::service::KIND, o, c, super::service::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                super::service::sweep_on(ctx.clone(), service_sweeps),
                drive(
                    "IP",
                    ips.run(
                        |o, c| instrumented(super::ip::cr::KIND, o, c, super::ip::cr::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "NetworkPolicy",
                    network_policies.run(
                        |o, c| instrumented(
                            super::network_policy::KIND,
                            o,
                            c,
                            super::network_policy::reconcile
                        ),
                        error_policy,
                        ctx.clone()
                    )
                ),
            );
        }
    }
}
