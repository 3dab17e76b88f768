//! IP pools (Kube-OVN's `ippool.go`, reference §3.10a): a named pool in its subnet's IPAM, carved
//! out of the default pool (pools of one subnet may not overlap: a pool that would is refused with
//! a `Ready=False` condition), status counters, and with `enableAddressSet` an OVN address set
//! named after the pool (`-` → `.`, external id `ippool=<name>`) that ACLs can match. Deleting a
//! pool returns its addresses to the subnet's default pool; the namespaces bound to it are
//! re-annotated by the namespace reconciler, which watches pools.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ipnet::{IpNet, IpSubnets};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube_ovn_api::annotations::{IpRange, parse};
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, ERROR, READY, set_condition};
use kube_ovn_api::crd::{FINALIZER, IPPool, IPPoolStatus, IpCount};
use kube_ovn_api::names;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::AddressSet;

use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ovn::plan::{Plan, is_owned_by, owned_ids};

pub const KIND: &str = "IPPool";
const OWNER_KEY: &str = "ippool";
/// Pool counters change as pods come and go; they are refreshed this often (written only when
/// they changed).
const REFRESH: Duration = Duration::from_secs(10);

pub async fn reconcile(pool: Arc<IPPool>, ctx: Arc<Context>) -> Result<Action> {
    let name = pool.name_any();
    let api: Api<IPPool> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, pool, |event| async move {
        match event {
            Finalizer::Apply(p) => apply(&p, &c).await,
            Finalizer::Cleanup(p) => cleanup(&p, &c).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<IPPool>(&name))
}

fn ranges(pool: &IPPool) -> Result<Vec<IpRange>> {
    let name = pool.name_any();
    pool.spec
        .ips
        .iter()
        .flatten()
        .map(|r| {
            parse::<IpRange>("spec.ips", r.trim()).map_err(|e| Error::Invalid(format!("IP pool {name}: {e}")))
        })
        .collect()
}

/// The address set's entries, as Kube-OVN writes them: ranges split into CIDRs, single
/// addresses without `/32` or `/128`, sorted; one family only (an OVN address set limitation).
pub fn address_set_entries(pool: &str, ranges: &[IpRange]) -> Result<Vec<String>> {
    let mut out = BTreeSet::new();
    let mut nets: Vec<IpNet> = Vec::new();
    for r in ranges {
        match r {
            IpRange::Single(a) => nets.push(IpNet::from(*a)),
            IpRange::Cidr(n) => nets.push(n.trunc()),
            IpRange::Range(a, b) => match (a, b) {
                (IpAddr::V4(a), IpAddr::V4(b)) => {
                    nets.extend(IpSubnets::from(ipnet::Ipv4Subnets::new(*a, *b, 0)));
                }
                (IpAddr::V6(a), IpAddr::V6(b)) => {
                    nets.extend(IpSubnets::from(ipnet::Ipv6Subnets::new(*a, *b, 0)));
                }
                _ => {}
            },
        }
    }
    if nets.iter().any(|n| n.addr().is_ipv4()) && nets.iter().any(|n| !n.addr().is_ipv4()) {
        return Err(Error::Invalid(format!(
            "IP pool {pool}: spec.ips mixes IPv4 and IPv6, which one OVN address set cannot hold"
        )));
    }
    for n in nets {
        out.insert(if n.prefix_len() == n.max_prefix_len() {
            n.addr().to_string()
        } else {
            n.to_string()
        });
    }
    Ok(out.into_iter().collect())
}

/// Makes the pool's address set match `entries` (`None`: no address set).
fn address_set_plan(ctx: &Context, pool: &str, entries: Option<&[String]>) -> Plan {
    let as_name = names::ippool_address_set_name(pool);
    ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        match entries {
            Some(entries) => {
                let set = AddressSet {
                    name: as_name.clone(),
                    addresses: entries.to_vec(),
                    external_ids: owned_ids(&[(OWNER_KEY, pool)]),
                    ..Default::default()
                };
                plan.ensure(cache, &as_name, &set, &["addresses", "external_ids"]);
            }
            None => {
                for uuid in cache.uuids_by_name(AddressSet::NAME, &as_name) {
                    let ours = cache
                        .get::<AddressSet>(uuid)
                        .ok()
                        .flatten()
                        .is_some_and(|s| is_owned_by(&s.external_ids, &[(OWNER_KEY, pool)]));
                    if ours {
                        plan.delete(AddressSet::NAME, *uuid);
                    }
                }
            }
        }
        plan
    })
}

async fn apply(pool: &IPPool, ctx: &Context) -> Result<Action> {
    let name = pool.name_any();
    let subnet = pool.spec.subnet.as_deref().unwrap_or_default();
    let outcome = update(pool, ctx, &name, subnet).await;
    let (reason, message) = match &outcome {
        Ok(()) => ("UpdateIPAMSucceeded", String::new()),
        Err(Error::NotReady(_)) => return outcome.map(|()| Action::requeue(REFRESH)),
        Err(e @ Error::Ovn { .. }) => ("ReconcileAddressSetFailed", e.to_string()),
        Err(e) => ("UpdateIPAMFailed", e.to_string()),
    };
    set_status(ctx, pool, reason, &message).await?;
    outcome.map(|()| Action::requeue(REFRESH))
}

/// IPAM and the address set; errors name the pool and field.
async fn update(pool: &IPPool, ctx: &Context, name: &str, subnet: &str) -> Result<()> {
    if subnet.is_empty() {
        return Err(Error::Invalid(format!("IP pool {name}: spec.subnet is required")));
    }
    let ranges = ranges(pool)?;
    if ranges.is_empty() {
        return Err(Error::Invalid(format!("IP pool {name}: spec.ips is required")));
    }
    let entries = if pool.spec.enable_address_set == Some(true) {
        Some(address_set_entries(name, &ranges)?)
    } else {
        None
    };
    if !ctx.ipam().has_subnet(subnet) {
        return Err(Error::NotReady(format!(
            "subnet {subnet} of IP pool {name} is not ready"
        )));
    }
    ctx.ipam()
        .add_or_update_pool(subnet, name, &ranges)
        .map_err(|e| Error::Invalid(format!("IP pool {name}: spec.ips: {e}")))?;
    ctx.nb
        .apply(address_set_plan(ctx, name, entries.as_deref()), "ippool")
        .await
        .doing(format_args!("write the address set of IP pool {name}"))?;
    Ok(())
}

/// Conditions and counters; written only when something changed.
async fn set_status(ctx: &Context, pool: &IPPool, reason: &str, message: &str) -> Result<()> {
    let name = pool.name_any();
    let old = pool.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut conditions = status.conditions.take().unwrap_or_default();
    let ok = message.is_empty();
    let (yes, no) = (ConditionStatus::True, ConditionStatus::False);
    let mut changed = set_condition(
        &mut conditions,
        Condition::new(READY, if ok { yes } else { no }, reason, message),
        &now,
    );
    changed |= set_condition(
        &mut conditions,
        Condition::new(ERROR, if ok { no } else { yes }, reason, message),
        &now,
    );
    status.conditions = Some(conditions);
    if let Ok(u) = ctx
        .ipam()
        .pool_usage(pool.spec.subnet.as_deref().unwrap_or_default(), &name)
    {
        status.v4_available_ips = Some(IpCount(u.v4_available));
        status.v4_using_ips = Some(IpCount(u.v4_using));
        status.v6_available_ips = Some(IpCount(u.v6_available));
        status.v6_using_ips = Some(IpCount(u.v6_using));
        status.v4_available_ip_range = Some(u.v4_available_range);
        status.v4_using_ip_range = Some(u.v4_using_range);
        status.v6_available_ip_range = Some(u.v6_available_range);
        status.v6_using_ip_range = Some(u.v6_using_range);
    }
    if !changed && same_counters(&old, &status) {
        return Ok(());
    }
    crate::reconcile::merge_status::<IPPool>(&ctx.kube, &name, &status).await
}

fn same_counters(a: &IPPoolStatus, b: &IPPoolStatus) -> bool {
    (
        &a.v4_available_ips,
        &a.v4_using_ips,
        &a.v6_available_ips,
        &a.v6_using_ips,
        &a.v4_available_ip_range,
        &a.v4_using_ip_range,
        &a.v6_available_ip_range,
        &a.v6_using_ip_range,
    ) == (
        &b.v4_available_ips,
        &b.v4_using_ips,
        &b.v6_available_ips,
        &b.v6_using_ips,
        &b.v4_available_ip_range,
        &b.v4_using_ip_range,
        &b.v6_available_ip_range,
        &b.v6_using_ip_range,
    )
}

/// Deletion: the address set goes, and the pool's addresses return to the default pool (those
/// in use stay with their pods).
async fn cleanup(pool: &IPPool, ctx: &Context) -> Result<Action> {
    let name = pool.name_any();
    ctx.nb
        .apply(address_set_plan(ctx, &name, None), "ippool-delete")
        .await
        .doing(format_args!("remove the address set of IP pool {name}"))?;
    ctx.ipam()
        .remove_pool(pool.spec.subnet.as_deref().unwrap_or_default(), &name);
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(s: &str) -> IpRange {
        parse("x", s).unwrap()
    }

    #[test]
    fn address_set_entries_are_cidrs_and_bare_addresses() {
        let got = address_set_entries(
            "p",
            &[
                r("10.16.0.1..10.16.0.6"),
                r("10.16.1.0/24"),
                r("10.16.2.9"),
                r("10.16.2.9/32"),
            ],
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "10.16.0.1",
                "10.16.0.2/31",
                "10.16.0.4/31",
                "10.16.0.6",
                "10.16.1.0/24",
                "10.16.2.9"
            ]
        );
        assert!(address_set_entries("p", &[r("10.0.0.1"), r("fd00::1")]).is_err());
        assert_eq!(
            address_set_entries("p", &[r("fd00::1..fd00::2")]).unwrap(),
            ["fd00::1", "fd00::2"]
        );
    }
}
