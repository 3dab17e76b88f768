//! Garbage collection of OVN NAT (Kube-OVN collects none of it): our NAT rows (`ovn_fip`,
//! `ovn_snat`) and DNAT load balancers (`ovn_dnat`) whose rule no longer exists, e.g. deleted
//! with its finalizer removed by hand while no controller ran; and the IPAM keys of OvnEips,
//! which the pod collector must leave alone ([`is_eip_key`]).

use std::collections::{BTreeMap, BTreeSet};

use kube::ResourceExt;
use kube_ovn_ovsdb::tables::nb::{LoadBalancer, LogicalRouter, Nat};
use kube_ovn_ovsdb::{DbCache, Table, Uuid};

use super::plan::{DNAT_KEY, FIP_KEY, SNAT_KEY};
use crate::context::Context;
use crate::error::{Doing, Result};
use crate::ovn::plan::{Plan, RowRef, VENDOR, VENDOR_KEY};

/// Whether an IPAM key is an OvnEip's (the EIP's name on its external subnet).
pub fn is_eip_key(ctx: &Context, key: &str) -> bool {
    ctx.stores
        .ovn_eips
        .get(&kube::runtime::reflector::ObjectRef::new(key))
        .is_some()
}

/// The rules that exist, by kind.
pub struct Living {
    pub fips: BTreeSet<String>,
    pub snats: BTreeSet<String>,
    pub dnats: BTreeSet<String>,
}

/// Our rows in the replica, each with its rule.
#[derive(Debug, Default)]
pub struct Owned {
    /// (router, NAT row, key `ovn_fip`/`ovn_snat`, rule).
    pub nat: Vec<(Uuid, Uuid, &'static str, String)>,
    /// (load balancer, rule, the routers holding it).
    pub lbs: Vec<(Uuid, String, Vec<Uuid>)>,
}

/// Reads our NAT rows and DNAT load balancers (pure).
pub fn owned(cache: &DbCache) -> Owned {
    let ours = |ids: &BTreeMap<String, String>| ids.get(VENDOR_KEY).is_some_and(|v| v == VENDOR);
    let routers = cache.rows::<LogicalRouter>().unwrap_or_default();
    let mut out = Owned::default();
    for lb in cache.rows::<LoadBalancer>().unwrap_or_default() {
        if ours(&lb.external_ids)
            && let Some(rule) = lb.external_ids.get(DNAT_KEY)
        {
            let holders = routers
                .iter()
                .filter(|r| r.load_balancer.contains(&lb.uuid))
                .map(|r| r.uuid)
                .collect();
            out.lbs.push((lb.uuid, rule.clone(), holders));
        }
    }
    for router in &routers {
        for nat in router
            .nat
            .iter()
            .filter_map(|u| cache.get::<Nat>(u).ok().flatten())
        {
            if !ours(&nat.external_ids) {
                continue;
            }
            for key in [FIP_KEY, SNAT_KEY] {
                if let Some(rule) = nat.external_ids.get(key) {
                    out.nat.push((router.uuid, nat.uuid, key, rule.clone()));
                }
            }
        }
    }
    out
}

/// The plan that removes the rows of `owned` whose rule is not in `living` (pure).
pub fn orphans(owned: &Owned, living: &Living) -> Plan {
    let mut plan = Plan::new();
    for (router, nat, key, rule) in &owned.nat {
        let alive = if *key == FIP_KEY {
            &living.fips
        } else {
            &living.snats
        };
        if !alive.contains(rule) {
            plan.remove_members(LogicalRouter::NAME, &RowRef::Existing(*router), "nat", &[*nat]);
        }
    }
    for (lb, rule, holders) in &owned.lbs {
        if !living.dnats.contains(rule) {
            for r in holders {
                plan.remove_members(
                    LogicalRouter::NAME,
                    &RowRef::Existing(*r),
                    "load_balancer",
                    &[*lb],
                );
            }
            plan.delete(LoadBalancer::NAME, *lb);
        }
    }
    plan
}

/// Removes the rows of rules that are gone; returns how many operations it took. The rows are
/// read before the rules (owners last): a rule's rows are written only after the cache holds
/// the rule, so a row seen here belongs to a rule the later read still finds, unless deleted.
pub async fn collect(ctx: &Context) -> Result<usize> {
    let owned = ctx.nb.read(owned);
    let living = Living {
        fips: ctx.stores.ovn_fips.state().iter().map(|f| f.name_any()).collect(),
        snats: ctx
            .stores
            .ovn_snat_rules
            .state()
            .iter()
            .map(|s| s.name_any())
            .collect(),
        dnats: ctx
            .stores
            .ovn_dnat_rules
            .state()
            .iter()
            .map(|d| d.name_any())
            .collect(),
    };
    let plan = orphans(&owned, &living);
    let ops = plan.len();
    if ops > 0 {
        ctx.nb
            .apply(plan, "ovn-nat-gc")
            .await
            .doing("remove the NAT rows and load balancers of deleted OVN NAT rules")?;
        tracing::info!(ops, "OVN NAT rows of deleted rules collected");
    }
    Ok(ops)
}
