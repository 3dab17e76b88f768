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
//!                 and pools they may use, tenancy.rs); the ovn-external-gw-config
//!                 ConfigMap's data → the pods with eip/snat annotations (pod_eip)
//!   Service    ◀─ its own; its EndpointSlices (service/mod.rs); Services losing an address → sweep
//!   NetworkPolicy ◀─ its own; Pods, Namespaces → the policies they concern (network_policy/mod.rs)
//!   ProviderNetwork ◀─ its own changes but status; Nodes (labels, deletion) and kube-ovn-cni
//!                 pods (annotations, node) → every network; and every 30 s (Kube-OVN's resync)
//!   Vlan       ◀─ its own changes but status; other Vlans (spec, deletion) → the Vlans on the
//!                 same provider; Subnets (spec.vlan, deletion) → the Vlans they name;
//!                 ProviderNetworks (status.vlans, appearing, going) → the Vlans on them
//!   Subnet     ◀─ also Vlans (spec, conflict, deletion) → the subnets naming them;
//!                 ProviderNetworks' status.vlans → the subnets of the Vlans listed or unlisted
//!   OvnEip, OvnFip, OvnSnatRule, OvnDnatRule ◀─ see ovn_nat/wiring.rs
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
use kube_ovn_api::crd::{IPPool, Ip, ProviderNetwork, Subnet, Vlan, Vpc};

use super::ip::record::wants_reconcile;
use super::triggers::{self, waits_for};
use super::{drive, error_policy, every, instrumented, own};
use crate::config::Config;
use crate::context::Context;
use crate::informer::{Cache, Changes, OwnWrites};
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
    provider_networks: Controller<ProviderNetwork>,
    vlans: Controller<Vlan>,
    /// The VPCs' external gateways: what moves an lrp OvnEip's `activateGateway`.
    external: super::external::active::Subscriptions,
    ovn_nat: super::ovn_nat::wiring::OvnNat,
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

/// The subnets whose `spec.vlan` is one of `vlans`.
fn subnets_on(subnets: &Cache<Subnet>, vlans: &std::collections::BTreeSet<String>) -> Vec<ObjectRef<Subnet>> {
    subnets
        .state()
        .iter()
        .filter(|s| s.spec.vlan.as_ref().is_some_and(|v| vlans.contains(v)))
        .map(|s| ObjectRef::from_obj(&**s))
        .collect()
}

/// The Vlans whose provider (theirs, else `default`) is one of `providers`.
fn vlans_on(vlans: &Cache<Vlan>, providers: &[&str], default: &str) -> Vec<ObjectRef<Vlan>> {
    vlans
        .state()
        .iter()
        .filter(|v| providers.contains(&super::vlan::plan::provider_of(v, default)))
        .map(|v| ObjectRef::from_obj(&**v))
        .collect()
}

/// The ProviderNetwork and Vlan controllers.
fn underlay(
    config: &Config,
    informers: &Informers,
    stores: &Stores,
) -> (Controller<ProviderNetwork>, Controller<Vlan>) {
    let workers = config.worker_num;
    let namespace = config.lease_namespace.clone();
    let provider_networks = own(
        &informers.provider_networks,
        triggers::provider_network_beyond_status,
        workers,
    )
    .reconcile_on(informers.nodes.changes().when_all(
        triggers::node_for_provider_networks,
        every(&stores.provider_networks),
    ))
    .reconcile_on({
        let all = every(&stores.provider_networks);
        let again = all.clone();
        informers.pods.changes().when(
            triggers::pod_for_provider_networks,
            move |c| {
                let cni = c
                    .old
                    .iter()
                    .chain(c.new.iter())
                    .any(|p| super::provider_network::is_cni_pod(p, &namespace));
                if cni { all() } else { Vec::new() }
            },
            again,
        )
    });
    let default = config.default_provider_name.clone();
    let vlans = own(&informers.vlans, triggers::vlan_beyond_status, workers)
        .reconcile_on({
            let (cache, default) = (stores.vlans.clone(), default.clone());
            informers.vlans.changes().when(
                triggers::vlan_spec,
                move |c| {
                    let providers: Vec<&str> = c
                        .old
                        .iter()
                        .chain(c.new.iter())
                        .map(|v| super::vlan::plan::provider_of(v, &default))
                        .collect();
                    vlans_on(&cache, &providers, &default)
                },
                every(&stores.vlans),
            )
        })
        .reconcile_on(informers.subnets.changes().when(
            triggers::subnet_for_vlans,
            |c| {
                let mut names: Vec<ObjectRef<Vlan>> = c
                    .old
                    .iter()
                    .chain(c.new.iter())
                    .filter_map(|s| s.spec.vlan.as_deref().filter(|v| !v.is_empty()))
                    .map(ObjectRef::new)
                    .collect();
                names.dedup();
                names
            },
            every(&stores.vlans),
        ))
        .reconcile_on({
            let cache = stores.vlans.clone();
            informers.provider_networks.changes().when(
                triggers::provider_network_vlans,
                move |c| {
                    let names: Vec<String> = c.old.iter().chain(c.new.iter()).map(|p| p.name_any()).collect();
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    vlans_on(&cache, &names, &default)
                },
                every(&stores.vlans),
            )
        });
    (provider_networks, vlans)
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
        // External gateways (issue 26): gateway nodes, external subnets, the SB chassis set.
        let (chassis_changed, chassis_rx) = tokio::sync::mpsc::unbounded_channel();
        let vpcs = super::external::triggers::wire(vpcs, config, informers, stores, chassis_rx);
        let external = super::external::active::Subscriptions {
            eips: informers.ovn_eips.changes(),
            nodes: informers.nodes.changes(),
            chassis_changed,
        };
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
            .reconcile_on({
                let cache = stores.subnets.clone();
                informers.vlans.changes().when(
                    triggers::vlan_for_subnets,
                    move |c| {
                        let names = c.old.iter().chain(c.new.iter()).map(|v| v.name_any()).collect();
                        subnets_on(&cache, &names)
                    },
                    every(&stores.subnets),
                )
            })
            .reconcile_on({
                let cache = stores.subnets.clone();
                informers.provider_networks.changes().when(
                    triggers::provider_network_vlans,
                    move |c| subnets_on(&cache, &triggers::vlans_listed_or_unlisted(c)),
                    every(&stores.subnets),
                )
            });
        let (provider_networks, vlans) = underlay(config, informers, stores);
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
        })
        // Pods' eip/snat follow the external gateway's ConfigMap: enabled, its type, its gateway
        // address (pod_eip).
        .reconcile_on(informers.external_gw_config.changes().when_all(
            super::external::triggers::config_map_data,
            {
                let pods = stores.pods.clone();
                move || super::pod_eip::with_annotations(&pods)
            },
        ));
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
            provider_networks,
            vlans,
            external,
            ovn_nat: super::ovn_nat::wiring::OvnNat::new(config, informers, stores),
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
            provider_networks,
            vlans,
            external,
            ovn_nat,
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
                super::external::active::run(ctx.clone(), external),
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
                drive(
                    "ProviderNetwork",
                    provider_networks.run(
                        |o, c| instrumented(
                            super::provider_network::KIND,
                            o,
                            c,
                            super::provider_network::reconcile
                        ),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "Vlan",
                    vlans.run(
                        |o, c| instrumented(super::vlan::KIND, o, c, super::vlan::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                ovn_nat.run(ctx.clone()),
            );
        }
    }
}
