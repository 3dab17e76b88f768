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
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::crd::{OvnDnatRule, OvnEip, OvnFip, OvnSnatRule};

use super::rule::Rule;
use crate::config::Config;
use crate::context::Context;
use crate::informer::{Cache, Changes, Informer};
use crate::reconcile::triggers;
use crate::reconcile::{drive, error_policy, instrumented};
use crate::reconcile::{every, own};
use crate::stores::{Informers, Stores};

/// The four controllers, built (and subscribed to their triggers) before the watches start.
pub struct OvnNat {
    eips: Controller<OvnEip>,
    fips: Controller<OvnFip>,
    snats: Controller<OvnSnatRule>,
    dnats: Controller<OvnDnatRule>,
}

/// The EIPs a change of rules names (`spec.ovnEip`, before and after).
fn eips_named<K: Rule>(change: &kube_ovn_support::watch::Change<K>) -> Vec<String> {
    let mut out: Vec<String> = change
        .old
        .iter()
        .chain(change.new.iter())
        .filter_map(|r| r.ovn_eip().filter(|e| !e.is_empty()).map(str::to_owned))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// [`eips_named`], as references to the OvnEips.
fn eip_refs<K: Rule>(change: &kube_ovn_support::watch::Change<K>) -> Vec<ObjectRef<OvnEip>> {
    eips_named(change).iter().map(|e| ObjectRef::new(e)).collect()
}

/// The rules of a cache naming one of `eips`, or (with `ips`) one of those IPs in `spec.ipName`.
fn rules_naming<K: Rule>(cache: &Cache<K>, eips: &[String], ips: &[String]) -> Vec<ObjectRef<K>> {
    cache
        .state()
        .iter()
        .filter(|r| {
            r.ovn_eip().is_some_and(|e| eips.iter().any(|x| x == e))
                || r.ip_name().is_some_and(|i| ips.iter().any(|x| x == i))
        })
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
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
fn nat_rule<K: Rule>(
    informer: &Informer<K>,
    informers: &Informers,
    own_cache: &Cache<K>,
    workers: u16,
) -> Controller<K> {
    /// The rules of `own` naming the EIPs a change of rules of kind `R` names.
    fn on_rules<R: Rule, K: Rule>(
        changes: Changes<R>,
        own: &Cache<K>,
    ) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
        let cache = own.clone();
        changes.map(move |c| rules_naming(&cache, &eips_named(c), &[]), every(own))
    }
    let (on_eip, by_ip) = (own_cache.clone(), own_cache.clone());
    own(informer, triggers::any, workers)
        .reconcile_on(on_rules(informers.ovn_fips.changes(), own_cache))
        .reconcile_on(on_rules(informers.ovn_snat_rules.changes(), own_cache))
        .reconcile_on(on_rules(informers.ovn_dnat_rules.changes(), own_cache))
        .reconcile_on(informers.ovn_eips.changes().map(
            move |c| rules_naming(&on_eip, &names_of(c), &[]),
            every(own_cache),
        ))
        .reconcile_on(
            informers
                .ips
                .changes()
                .map(move |c| rules_naming(&by_ip, &[], &names_of(c)), every(own_cache)),
        )
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
            own(&informers.ovn_eips, triggers::any, workers)
                .reconcile_on(
                    informers
                        .ovn_fips
                        .changes()
                        .map(eip_refs, every(&stores.ovn_eips)),
                )
                .reconcile_on(
                    informers
                        .ovn_snat_rules
                        .changes()
                        .map(eip_refs, every(&stores.ovn_eips)),
                )
                .reconcile_on(
                    informers
                        .ovn_dnat_rules
                        .changes()
                        .map(eip_refs, every(&stores.ovn_eips)),
                )
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
                            .filter(|r| r.ip_name().is_some_and(|i| ips.iter().any(|x| x == i)))
                            .filter_map(|r| r.ovn_eip().map(ObjectRef::new))
                            .collect::<Vec<_>>()
                    },
                    every(&stores.ovn_eips),
                ))
        };
        // The ConfigMap's `type` decides `stateless` for FIPs without `spec.type`.
        let fips = nat_rule(&informers.ovn_fips, informers, &stores.ovn_fips, workers).reconcile_on(
            informers
                .external_gw_config
                .changes()
                .when_all(triggers::any, every(&stores.ovn_fips)),
        );
        let snats = nat_rule(
            &informers.ovn_snat_rules,
            informers,
            &stores.ovn_snat_rules,
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
