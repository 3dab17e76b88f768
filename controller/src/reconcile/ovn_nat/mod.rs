//! OVN-native NAT on VPC routers (Kube-OVN's `ovn_eip.go`, `ovn_fip.go`, `ovn_snat.go`,
//! `ovn_dnat.go`): OvnEip ([`eip`]: an address on the external subnet), OvnFip ([`fip`]: a
//! `dnat_and_snat` row), OvnSnatRule ([`snat`]: `snat` rows), OvnDnatRule ([`dnat`]: a load
//! balancer VIP on the router).
//!
//! ```text
//!   OvnEip ─ IPAM on spec.externalSubnet (key = name) ─ labels, status (v4Ip, v6Ip, macAddress,
//!            type, ready, nat) ─ finalizer: held while a rule uses it (reason EipInUse)
//!   rule   ─ finalizer ─ validate (validate.rs, from the caches) ─ one NB plan (plan.rs)
//!            ─ labels + annotation ─ status ─ its EIP looks again (controllers.rs trigger)
//! ```
//!
//! The steps the three rule kinds take alike are written once, in [`rule`] (their EIP, their
//! claim on it, a FIP's or DNAT's internal side, the NB write, the finalizer), and here
//! ([`refused`], [`write_rule`]).
//!
//! A rule is validated whole before anything is written; a refusal is a condition
//! (`Validated=False`, and `Ready=False` unless the rule was applied before), a Warning event
//! naming `Kind name` and the field, and a log line; a rule already applied keeps its rows.
//! An EIP's users are the rules naming it in `spec.ovnEip` that are applied (`status.ready`);
//! Kube-OVN finds them by the `eip_v4_ip` label the same reconcile writes.

pub mod dnat;
pub mod eip;
pub mod fip;
pub mod gc;
pub mod plan;
pub mod rule;
pub mod snat;
pub mod validate;
pub mod wiring;

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, READY, VALIDATED, set_condition};
use kube_ovn_api::crd::ovn_nat::{IpType, NatKind, OvnEipType};
use kube_ovn_api::crd::{OvnEip, Vip};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Result};
use crate::informer::Cache;
use rule::Rule;
use validate::{Claim, EipFacts, IP_NOT_FOUND, Internal, Refusal, refuse};

/// What a rule needs of its EIP, from the cache.
pub fn eip_facts(ctx: &Context, name: &str) -> Option<EipFacts> {
    let e = ctx
        .stores
        .ovn_eips
        .get(&kube::runtime::reflector::ObjectRef::new(name))?;
    let status = e.status.clone().unwrap_or_default();
    Some(EipFacts {
        name: name.to_owned(),
        type_: OvnEipType::parse(e.spec.type_.as_deref()).unwrap_or(OvnEipType::Nat),
        v4: status.v4_ip.as_deref().and_then(|v| v.parse().ok()),
        v6: status.v6_ip.as_deref().and_then(|v| v.parse().ok()),
        ready: status.ready == Some(true),
        deleting: e.metadata.deletion_timestamp.is_some(),
    })
}

/// One rule naming an EIP, as [`claims_on`] reads it: kind, name, `spec.ovnEip`, applied VPC,
/// whether applied and distributed, and when it was created.
struct Named {
    claim: Claim,
    eip: String,
    deleting: bool,
    /// Its `Validated` condition is `False`: refused, it claims nothing.
    refused: bool,
    created: (Option<Time>, String),
}

fn is_refused(conditions: Option<&Vec<Condition>>) -> bool {
    conditions
        .and_then(|c| kube_ovn_api::crd::condition::find_condition(c, VALIDATED))
        .is_some_and(|c| c.status == ConditionStatus::False)
}

/// The rules of every kind whose `spec.ovnEip` is `eip`.
fn named(ctx: &Context, eip: &str) -> Vec<Named> {
    let mut out = named_in(&ctx.stores.ovn_fips, eip);
    out.extend(named_in(&ctx.stores.ovn_snat_rules, eip));
    out.extend(named_in(&ctx.stores.ovn_dnat_rules, eip));
    out
}

/// The rules of one kind whose `spec.ovnEip` is `eip`.
fn named_in<K: Rule>(cache: &Cache<K>, eip: &str) -> Vec<Named> {
    cache
        .state()
        .iter()
        .filter(|r| r.ovn_eip() == Some(eip))
        .map(|r| Named {
            claim: Claim {
                kind: K::NAT,
                name: r.name_any(),
                vpc: r.applied_vpc().unwrap_or_default().to_owned(),
                distributed: r.distributed(),
                ready: r.ready(),
            },
            eip: r.ovn_eip().unwrap_or_default().to_owned(),
            deleting: r.meta().deletion_timestamp.is_some(),
            refused: is_refused(r.conditions()),
            created: created_of(r.meta()),
        })
        .collect()
}

/// The claims on `eip` other than `me`'s: the applied rules, and for a FIP also the FIPs created
/// before it that are not applied yet and not refused, so two new FIPs on one EIP agree which
/// one goes first whichever is reconciled first.
pub fn claims_on(
    ctx: &Context,
    eip: &str,
    me: NatKind,
    name: &str,
    created: &(Option<Time>, String),
) -> Vec<Claim> {
    named(ctx, eip)
        .into_iter()
        .filter(|n| n.eip == eip && !(n.claim.kind == me && n.claim.name == name))
        .filter(|n| {
            n.claim.ready
                || (me == NatKind::Fip
                    && n.claim.kind == NatKind::Fip
                    && !n.deleting
                    && !n.refused
                    && n.created < *created)
        })
        .map(|n| n.claim)
        .collect()
}

/// The applied rules using `eip`.
pub fn users_of(ctx: &Context, eip: &str) -> Vec<Claim> {
    named(ctx, eip)
        .into_iter()
        .filter(|n| n.eip == eip && n.claim.ready)
        .map(|n| n.claim)
        .collect()
}

/// A rule's creation time and name, as [`claims_on`] orders them.
pub fn created_of(meta: &kube::core::ObjectMeta) -> (Option<Time>, String) {
    (
        meta.creation_timestamp.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

/// The internal side named by `spec.ipName` (an IP CR, or a Vip CR with `ipType: vip`): its
/// addresses, its subnet's VPC, and for an IP CR the MAC, port and node.
pub async fn internal_of(
    ctx: &Context,
    kind: &str,
    rule: &str,
    ip_name: &str,
    ip_type: IpType,
) -> Result<Internal, Refusal> {
    let missing = |why: String| refuse(IP_NOT_FOUND, kind, rule, "ipName", why);
    let vpc_of = |subnet: Option<&str>| -> Result<String, Refusal> {
        let subnet = subnet.unwrap_or_default();
        let s = ctx
            .stores
            .subnets
            .get(&kube::runtime::reflector::ObjectRef::new(subnet))
            .ok_or_else(|| missing(format!("{ip_name}: subnet {subnet:?} not found")))?;
        Ok(crate::reconcile::triggers::subnet_vpc_name(&ctx.config.cluster_router, &s).to_owned())
    };
    let nonempty = |v: Option<String>| v.filter(|v| !v.is_empty());
    match ip_type {
        IpType::Ip => {
            let ip = ctx
                .stores
                .ips
                .get(&kube::runtime::reflector::ObjectRef::new(ip_name))
                .ok_or_else(|| missing(format!("IP {ip_name} not found")))?;
            let s = &ip.spec;
            Ok(Internal {
                vpc: vpc_of(s.subnet.as_deref())?,
                v4: nonempty(s.v4_ip_address.clone()),
                v6: nonempty(s.v6_ip_address.clone()),
                mac: nonempty(s.mac_address.clone()),
                port: Some(ip_name.to_owned()),
                node: nonempty(s.node_name.clone()),
            })
        }
        IpType::Vip => {
            // No cache of Vips: a FIP or DNAT to a Vip is rare, and read once per reconcile.
            let vip = Api::<Vip>::all(ctx.kube.clone())
                .get_opt(ip_name)
                .await
                .ok()
                .flatten()
                .ok_or_else(|| missing(format!("Vip {ip_name} not found")))?;
            let st = vip.status.clone().unwrap_or_default();
            Ok(Internal {
                vpc: vpc_of(vip.spec.subnet.as_deref())?,
                v4: nonempty(st.v4ip).or_else(|| nonempty(vip.spec.v4ip.clone())),
                v6: nonempty(st.v6ip).or_else(|| nonempty(vip.spec.v6ip.clone())),
                ..Internal::default()
            })
        }
    }
}

/// The EIP's addresses as rule labels (`eip_v4_ip`, and `eip_v6_ip` unless `v4_only`).
pub fn eip_labels(eip: &EipFacts, v4_only: bool) -> BTreeMap<String, Option<String>> {
    let mut labels = BTreeMap::new();
    labels.insert(keys::EIP_V4_IP_LABEL.to_owned(), eip.v4.map(|v| v.to_string()));
    if !v4_only {
        labels.insert(
            keys::EIP_V6_IP_LABEL.to_owned(),
            eip.v6.map(|v| keys::ipv6_label_value(&v.to_string())),
        );
    }
    labels
}

/// Writes `labels` and `annotations` (a `None` value removes the key) where they differ from
/// `obj`'s.
pub async fn patch_meta<K>(
    ctx: &Context,
    obj: &K,
    labels: &BTreeMap<String, Option<String>>,
    annotations: &BTreeMap<String, Option<String>>,
) -> Result<()>
where
    K: Resource<Scope = kube::core::ClusterResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let differs = |have: &BTreeMap<String, String>, want: &BTreeMap<String, Option<String>>| {
        want.iter().any(|(k, v)| have.get(k) != v.as_ref())
    };
    if !differs(obj.labels(), labels) && !differs(obj.annotations(), annotations) {
        return Ok(());
    }
    let name = obj.name_any();
    Api::<K>::all(ctx.kube.clone())
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": labels, "annotations": annotations}})),
        )
        .await
        .doing(format_args!("label {} {name}", K::kind(&())))?;
    Ok(())
}

/// The conditions after an outcome: `Validated` and `Ready` true, or `Validated=False` with the
/// refusal's reason and `Ready=False` unless `applied` (rows from before stay, and so does the
/// readiness they give). Returns them and whether anything changed.
pub fn conditions_after(
    old: Option<&Vec<Condition>>,
    outcome: Result<(), &Refusal>,
    applied: bool,
) -> (Vec<Condition>, bool) {
    let mut conditions = old.cloned().unwrap_or_default();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let changed = match outcome {
        Ok(()) => {
            let a = set_condition(
                &mut conditions,
                Condition::new(VALIDATED, ConditionStatus::True, "Validated", ""),
                &now,
            );
            let b = set_condition(
                &mut conditions,
                Condition::new(READY, ConditionStatus::True, "Applied", ""),
                &now,
            );
            a | b
        }
        Err(r) => {
            let a = set_condition(
                &mut conditions,
                Condition::new(VALIDATED, ConditionStatus::False, r.reason, &r.message),
                &now,
            );
            let b = !applied
                && set_condition(
                    &mut conditions,
                    Condition::new(READY, ConditionStatus::False, r.reason, &r.message),
                    &now,
                );
            a | b
        }
    };
    (conditions, changed)
}

/// A refusal's Warning event (named `reason`, the message naming object and field) and log line.
pub async fn warn<K>(ctx: &Context, obj: &K, refusal: &Refusal)
where
    K: Resource<DynamicType = ()>,
{
    tracing::warn!(reason = refusal.reason, message = %refusal.message, "refused");
    let event = Event {
        type_: EventType::Warning,
        reason: refusal.reason.into(),
        note: Some(refusal.message.clone()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// A refusal: conditions (and a Warning when they change), then the error that keeps the rule
/// queued for another look later (its EIP, IP or subnet changing brings it back sooner).
pub async fn refused<K: Rule>(
    ctx: &Context,
    obj: &K,
    refusal: Refusal,
) -> Result<kube::runtime::controller::Action> {
    let (conditions, changed) = conditions_after(obj.conditions(), Err(&refusal), obj.ready());
    if changed {
        warn(ctx, obj, &refusal).await;
        crate::reconcile::merge_status::<K>(&ctx.kube, &obj.name_any(), &json!({"conditions": conditions}))
            .await?;
    }
    Err(crate::error::Error::Invalid(refusal.message))
}

/// Kube-OVN's `vpc_eip` annotation and the rule's labels, then its status, each only if changed.
pub async fn write_rule<K: Rule>(
    ctx: &Context,
    obj: &K,
    labels: BTreeMap<String, Option<String>>,
    eip: &str,
    mut status: serde_json::Value,
) -> Result<()> {
    let annotations = BTreeMap::from([(keys::VPC_EIP.to_owned(), Some(eip.to_owned()))]);
    patch_meta(ctx, obj, &labels, &annotations).await?;
    let (conditions, changed) = conditions_after(obj.conditions(), Ok(()), true);
    let old_status = obj.status_json();
    let differs = status.as_object().is_some_and(|m| {
        m.iter()
            .any(|(k, v)| old_status.get(k).unwrap_or(&serde_json::Value::Null) != v)
    });
    if changed || differs {
        status["conditions"] = serde_json::to_value(conditions).unwrap_or_default();
        crate::reconcile::merge_status::<K>(&ctx.kube, &obj.name_any(), &status).await?;
    }
    Ok(())
}

/// The OvnEip named `name`, from the cache.
pub fn cached_eip(ctx: &Context, name: &str) -> Option<Arc<OvnEip>> {
    ctx.stores
        .ovn_eips
        .get(&kube::runtime::reflector::ObjectRef::new(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_applied_rule_stays_ready_through_a_refusal() {
        let refusal = Refusal {
            reason: validate::VPC_MISMATCH,
            message: "OvnFip f1: spec.vpc: x".into(),
        };
        let (ok, _) = conditions_after(None, Ok(()), false);
        let (after, changed) = conditions_after(Some(&ok), Err(&refusal), true);
        assert!(changed);
        let get = |t: &str| after.iter().find(|c| c.type_ == t).unwrap();
        assert_eq!(get(READY).status, ConditionStatus::True);
        assert_eq!(get(VALIDATED).status, ConditionStatus::False);
        assert_eq!(get(VALIDATED).reason.as_deref(), Some(validate::VPC_MISMATCH));
        let (fresh, _) = conditions_after(None, Err(&refusal), false);
        assert_eq!(
            fresh.iter().find(|c| c.type_ == READY).unwrap().status,
            ConditionStatus::False
        );
        let (_, again) = conditions_after(Some(&after), Err(&refusal), true);
        assert!(
            !again,
            "the same refusal again changes nothing (one Warning, not one per retry)"
        );
    }
}
