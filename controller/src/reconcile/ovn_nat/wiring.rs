//! The OVN NAT controllers' wiring: which changes reconcile which OvnEips and rules.
//!
//! ```text
//!   OvnEip      ◀─ its own; any rule change → the EIPs it names (old and new: status.nat, the
//!                  deletion gate); Subnets → every EIP; IPs → the EIPs of FIPs naming them
//!   OvnFip, OvnSnatRule, OvnDnatRule
//!               ◀─ their own; an EIP's change, and any rule's change → the rules naming the
//!                  same EIPs (sharing, one FIP per EIP, port conflicts); IPs → the rules naming
//!                  them; Subnets → every SNAT rule (vpcSubnet); a VPC created → every rule
//!                  (its router is new); the ovn-external-gw-config ConfigMap → every FIP
//! ```
//!
//! Every reconcile is idempotent and writes only what differs, so the status writes these
//! triggers answer end in a run that writes nothing.

use std::future::Future;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::Controller;
use kube::runtime::controller;
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::crd::{OvnDnatRule, OvnEip, OvnFip, OvnSnatRule};

use crate::config::Config;
use crate::context::Context;
use crate::informer::{Cache, Informer};
use crate::reconcile::triggers;
use crate::reconcile::{all_refs, drive, error_policy, instrumented};
use crate::stores::{Informers, Stores};

/// A controller of `K` over the shared watch (every change of its own), `workers` at a time.
fn own<K>(informer: &Informer<K>, workers: u16) -> Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    Controller::for_shared_stream(
        informer.changes().objects(triggers::any),
        informer.cache().store(),
    )
    .with_config(controller::Config::default().concurrency(workers))
}

/// Every object of the cache, as references.
fn every<K>(cache: &Cache<K>) -> impl Fn() -> Vec<ObjectRef<K>> + Clone + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    let cache = cache.clone();
    move || all_refs(&cache)
}

/// The four controllers, built (and subscribed to their triggers) before the watches start.
pub struct OvnNat {
    eips: Controller<OvnEip>,
    fips: Controller<OvnFip>,
    snats: Controller<OvnSnatRule>,
    dnats: Controller<OvnDnatRule>,
}

/// The EIPs a change of rules names (`spec.ovnEip`, before and after).
fn eips_named<K>(change: &kube_ovn_support::watch::Change<K>, eip_of: fn(&K) -> Option<&str>) -> Vec<String>
where
    K: kube::Resource + Clone,
{
    let mut out: Vec<String> = change
        .old
        .iter()
        .chain(change.new.iter())
        .filter_map(|r| eip_of(r).filter(|e| !e.is_empty()).map(str::to_owned))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The rules of a cache naming one of `eips`, or (with `ips`) one of those IPs in `spec.ipName`.
fn rules_naming<K>(
    cache: &Cache<K>,
    eips: &[String],
    ips: &[String],
    eip_of: fn(&K) -> Option<&str>,
    ip_of: fn(&K) -> Option<&str>,
) -> Vec<ObjectRef<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    cache
        .state()
        .iter()
        .filter(|r| {
            eip_of(r).is_some_and(|e| eips.iter().any(|x| x == e))
                || ip_of(r).is_some_and(|i| ips.iter().any(|x| x == i))
        })
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

fn fip_eip(r: &OvnFip) -> Option<&str> {
    r.spec.ovn_eip.as_deref()
}
fn snat_eip(r: &OvnSnatRule) -> Option<&str> {
    r.spec.ovn_eip.as_deref()
}
fn dnat_eip(r: &OvnDnatRule) -> Option<&str> {
    r.spec.ovn_eip.as_deref()
}
fn fip_ip(r: &OvnFip) -> Option<&str> {
    r.spec.ip_name.as_deref()
}
fn snat_ip(r: &OvnSnatRule) -> Option<&str> {
    r.spec.ip_name.as_deref()
}
fn dnat_ip(r: &OvnDnatRule) -> Option<&str> {
    r.spec.ip_name.as_deref()
}

/// The names of the objects of a change (old and new).
fn names_of<K: kube::Resource + Clone>(change: &kube_ovn_support::watch::Change<K>) -> Vec<String> {
    change
        .old
        .iter()
        .chain(change.new.iter())
        .map(|o| o.name_any())
        .collect()
}

/// A rule controller of `K`: its own changes, every rule kind's and EIP's changes (the rules
/// naming the same EIPs), IP changes (the rules naming them).
fn nat_rule<K>(
    informer: &Informer<K>,
    informers: &Informers,
    own_cache: &Cache<K>,
    eip_of: fn(&K) -> Option<&str>,
    ip_of: fn(&K) -> Option<&str>,
    workers: u16,
) -> Controller<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let by_eip = |cache: &Cache<K>| {
        let cache = cache.clone();
        move |eips: Vec<String>| rules_naming(&cache, &eips, &[], eip_of, ip_of)
    };
    let (on_fip, on_snat, on_dnat, on_eip, by_ip) = (
        by_eip(own_cache),
        by_eip(own_cache),
        by_eip(own_cache),
        by_eip(own_cache),
        own_cache.clone(),
    );
    own(informer, workers)
        .reconcile_on(
            informers
                .ovn_fips
                .changes()
                .map(move |c| on_fip(eips_named(c, fip_eip)), every(own_cache)),
        )
        .reconcile_on(
            informers
                .ovn_snat_rules
                .changes()
                .map(move |c| on_snat(eips_named(c, snat_eip)), every(own_cache)),
        )
        .reconcile_on(
            informers
                .ovn_dnat_rules
                .changes()
                .map(move |c| on_dnat(eips_named(c, dnat_eip)), every(own_cache)),
        )
        .reconcile_on(
            informers
                .ovn_eips
                .changes()
                .map(move |c| on_eip(names_of(c)), every(own_cache)),
        )
        .reconcile_on(informers.ips.changes().map(
            move |c| rules_naming(&by_ip, &[], &names_of(c), eip_of, ip_of),
            every(own_cache),
        ))
        // A VPC (re)created: its router is new and empty, the rules put their rows back.
        .reconcile_on({
            let all = every(own_cache);
            let again = all.clone();
            informers
                .vpcs
                .changes()
                .map(move |c| if c.old.is_none() { all() } else { Vec::new() }, again)
        })
}

impl OvnNat {
    pub fn new(config: &Config, informers: &Informers, stores: &Stores) -> Self {
        // As many at a time as pods (`--pod-workers`), as for Services: a reconcile waits for its
        // northbound write and only writes in flight together share a transaction, so
        // `--worker-num`'s 3 would make 1,000 FIPs some 330 rounds of one transaction each.
        let workers = config.pod_workers;
        let eips = {
            let by_ip = stores.ovn_fips.clone();
            own(&informers.ovn_eips, workers)
                .reconcile_on(informers.ovn_fips.changes().map(
                    |c| {
                        eips_named(c, fip_eip)
                            .iter()
                            .map(|e| ObjectRef::new(e))
                            .collect::<Vec<_>>()
                    },
                    every(&stores.ovn_eips),
                ))
                .reconcile_on(informers.ovn_snat_rules.changes().map(
                    |c| {
                        eips_named(c, snat_eip)
                            .iter()
                            .map(|e| ObjectRef::new(e))
                            .collect::<Vec<_>>()
                    },
                    every(&stores.ovn_eips),
                ))
                .reconcile_on(informers.ovn_dnat_rules.changes().map(
                    |c| {
                        eips_named(c, dnat_eip)
                            .iter()
                            .map(|e| ObjectRef::new(e))
                            .collect::<Vec<_>>()
                    },
                    every(&stores.ovn_eips),
                ))
                .reconcile_on(
                    informers
                        .subnets
                        .changes()
                        .when_all(triggers::subnet_spec, every(&stores.ovn_eips)),
                )
                .reconcile_on(informers.ips.changes().map(
                    move |c| {
                        let ips = names_of(c);
                        by_ip
                            .state()
                            .iter()
                            .filter(|r| fip_ip(r).is_some_and(|i| ips.iter().any(|x| x == i)))
                            .filter_map(|r| fip_eip(r).map(ObjectRef::new))
                            .collect::<Vec<_>>()
                    },
                    every(&stores.ovn_eips),
                ))
        };
        // The ConfigMap's `type` decides `stateless` for FIPs without `spec.type`.
        let fips = nat_rule(
            &informers.ovn_fips,
            informers,
            &stores.ovn_fips,
            fip_eip,
            fip_ip,
            workers,
        )
        .reconcile_on(
            informers
                .external_gw_config
                .changes()
                .when_all(triggers::any, every(&stores.ovn_fips)),
        );
        let snats = nat_rule(
            &informers.ovn_snat_rules,
            informers,
            &stores.ovn_snat_rules,
            snat_eip,
            snat_ip,
            workers,
        )
        .reconcile_on(
            informers
                .subnets
                .changes()
                .when_all(triggers::subnet_spec, every(&stores.ovn_snat_rules)),
        );
        let dnats = nat_rule(
            &informers.ovn_dnat_rules,
            informers,
            &stores.ovn_dnat_rules,
            dnat_eip,
            dnat_ip,
            workers,
        );
        Self {
            eips,
            fips,
            snats,
            dnats,
        }
    }

    pub fn run(self, ctx: Arc<Context>) -> impl Future<Output = ()> {
        let Self {
            eips,
            fips,
            snats,
            dnats,
        } = self;
        async move {
            futures::join!(
                drive(
                    "OvnEip",
                    eips.run(
                        |o, c| instrumented(super::eip::KIND, o, c, super::eip::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "OvnFip",
                    fips.run(
                        |o, c| instrumented(super::fip::KIND, o, c, super::fip::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "OvnSnatRule",
                    snats.run(
                        |o, c| instrumented(super::snat::KIND, o, c, super::snat::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
                drive(
                    "OvnDnatRule",
                    dnats.run(
                        |o, c| instrumented(super::dnat::KIND, o, c, super::dnat::reconcile),
                        error_policy,
                        ctx.clone()
                    )
                ),
            );
        }
    }
}
