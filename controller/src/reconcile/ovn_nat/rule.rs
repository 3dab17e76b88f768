//! What the three rule kinds (OvnFip, OvnSnatRule, OvnDnatRule) do alike, written once: the
//! [`Rule`] view of their common fields, their EIP ([`usable_eip`]), their claim on it
//! ([`may_claim`]), the internal side of a FIP or DNAT rule ([`internal_by_ip`]), Kube-OVN's
//! "not support change" refusals ([`unchanged`]) and their northbound writes
//! ([`write_on_router`]); and, with the OvnEip, the finalizer around a reconcile ([`finalized`]).

use std::sync::Arc;

use kube::api::Api;
use kube::core::ClusterResourceScope;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::condition::Condition;
use kube_ovn_api::crd::ovn_nat::{IpType, NatKind};
use kube_ovn_api::crd::{FINALIZER, OvnDnatRule, OvnFip, OvnSnatRule};
use kube_ovn_ovsdb::tables::nb::LogicalRouter;
use kube_ovn_ovsdb::{DbCache, Table};

use super::plan::pair;
use super::validate::{self, EipFacts, Internal, Refusal, refuse};
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::ovn::plan::Plan;

/// A NAT rule kind, as the code shared by the three reads it.
pub trait Rule:
    Resource<Scope = ClusterResourceScope, DynamicType = ()>
    + Clone
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + Sync
    + 'static
{
    /// Its word in an EIP's `status.nat`.
    const NAT: NatKind;
    /// `spec.ovnEip`.
    fn ovn_eip(&self) -> Option<&str>;
    /// `spec.ipName`.
    fn ip_name(&self) -> Option<&str>;
    /// `status.vpc`: where it was applied.
    fn applied_vpc(&self) -> Option<&str>;
    /// `status.ready`: it was applied.
    fn ready(&self) -> bool;
    /// Applied as a distributed FIP (`status.macAddress` set); other kinds never are.
    fn distributed(&self) -> bool;
    fn conditions(&self) -> Option<&Vec<Condition>>;
    /// `status` as JSON (`{}`-like defaults when absent), to compare with the status wanted.
    fn status_json(&self) -> serde_json::Value;
}

macro_rules! rule {
    ($t:ty, $nat:expr, $distributed:expr) => {
        impl Rule for $t {
            const NAT: NatKind = $nat;
            fn ovn_eip(&self) -> Option<&str> {
                self.spec.ovn_eip.as_deref()
            }
            fn ip_name(&self) -> Option<&str> {
                self.spec.ip_name.as_deref()
            }
            fn applied_vpc(&self) -> Option<&str> {
                self.status.as_ref()?.vpc.as_deref()
            }
            fn ready(&self) -> bool {
                self.status.as_ref().and_then(|s| s.ready) == Some(true)
            }
            fn distributed(&self) -> bool {
                ($distributed)(self)
            }
            fn conditions(&self) -> Option<&Vec<Condition>> {
                self.status.as_ref()?.conditions.as_ref()
            }
            fn status_json(&self) -> serde_json::Value {
                serde_json::to_value(self.status.clone().unwrap_or_default()).unwrap_or_default()
            }
        }
    };
}

rule!(OvnFip, NatKind::Fip, |f: &OvnFip| {
    f.status
        .as_ref()
        .and_then(|s| s.mac_address.as_deref())
        .is_some_and(|m| !m.is_empty())
});
rule!(OvnSnatRule, NatKind::Snat, |_: &OvnSnatRule| false);
rule!(OvnDnatRule, NatKind::Dnat, |_: &OvnDnatRule| false);

/// The kind's name (`OvnFip`, …), as refusals and logs name it.
pub fn kind<K: Rule>() -> String {
    K::kind(&()).into_owned()
}

/// The EIP `spec.ovnEip` names, if this rule may use it ([`validate::usable_eip`]).
pub fn usable_eip<K: Rule>(ctx: &Context, rule: &K) -> Result<EipFacts, Refusal> {
    let named = rule.ovn_eip().unwrap_or_default();
    let facts = super::eip_facts(ctx, named);
    validate::usable_eip(
        &kind::<K>(),
        &rule.name_any(),
        named,
        facts.as_ref(),
        rule.ready(),
    )
    .cloned()
}

/// The rule's claim on its EIP (on VPC `vpc`), refused where the EIP's other users do not
/// allow it ([`validate::may_share`]).
pub fn may_claim<K: Rule>(ctx: &Context, rule: &K, vpc: &str, distributed: bool) -> Result<(), Refusal> {
    let name = rule.name_any();
    let eip = rule.ovn_eip().unwrap_or_default();
    let me = validate::Claim {
        kind: K::NAT,
        name: name.clone(),
        vpc: vpc.to_owned(),
        distributed,
        ready: rule.ready(),
    };
    let others = super::claims_on(ctx, eip, K::NAT, &name, &super::created_of(rule.meta()));
    validate::may_share(&me, eip, &others)
}

/// The spec fields a FIP or DNAT rule names its internal side with.
pub struct Addressed<'a> {
    pub ip_name: Option<&'a str>,
    pub ip_type: Option<&'a str>,
    pub vpc: Option<&'a str>,
    pub v4_ip: Option<&'a str>,
    pub v6_ip: Option<&'a str>,
}

/// The internal side of a FIP or DNAT rule (Kube-OVN's `ovn_fip.go`, `ovn_dnat.go`): the IP
/// CR (or, `ipType: vip`, the Vip CR) `spec.ipName` names, else `spec.vpc` with
/// `spec.v4Ip`/`v6Ip`. `spec.vpc`, when set, must be the IP's VPC, and one address must be
/// known ("no internal ip for fip|dnat <name>").
pub async fn internal_by_ip<K: Rule>(
    ctx: &Context,
    rule: &K,
    s: &Addressed<'_>,
) -> Result<Internal, Refusal> {
    let (kind, name) = (kind::<K>(), rule.name_any());
    let ip_type =
        IpType::parse(s.ip_type).map_err(|e| refuse(validate::INVALID_SPEC, &kind, &name, "ipType", e))?;
    let nonempty = |v: Option<&str>| v.filter(|v| !v.is_empty()).map(str::to_owned);
    let internal = if let Some(ip_name) = nonempty(s.ip_name) {
        super::internal_of(ctx, &kind, &name, &ip_name, ip_type).await?
    } else {
        let vpc = nonempty(s.vpc).ok_or_else(|| {
            refuse(
                validate::INVALID_SPEC,
                &kind,
                &name,
                "vpc",
                "no vpc: set spec.ipName, or spec.vpc with spec.v4Ip/v6Ip",
            )
        })?;
        for (field, v) in [("v4Ip", s.v4_ip), ("v6Ip", s.v6_ip)] {
            if let Some(v) = nonempty(v) {
                validate::parse_ip(&kind, &name, field, &v)?;
            }
        }
        Internal {
            vpc,
            v4: nonempty(s.v4_ip),
            v6: nonempty(s.v6_ip),
            ..Internal::default()
        }
    };
    validate::vpc_agrees(&kind, &name, s.vpc, &internal)?;
    if internal.v4.is_none() && internal.v6.is_none() {
        return Err(refuse(
            validate::IP_NOT_FOUND,
            &kind,
            &name,
            "ipName",
            format_args!("no internal ip for {} {name}", K::NAT.as_str()),
        ));
    }
    Ok(internal)
}

/// Kube-OVN does not move an applied rule: each `(field, what, applied, now)` whose applied
/// value (in the status) is set and differs is refused, "not support change <what> for
/// <fip|dnat|snat> <name>". Nothing is refused before the rule is applied.
pub fn unchanged<K: Rule>(
    rule: &K,
    changes: &[(&str, &str, Option<&str>, Option<&str>)],
) -> Result<(), Refusal> {
    if !rule.ready() {
        return Ok(());
    }
    let name = rule.name_any();
    for (field, what, have, want) in changes {
        if *have != *want && have.is_some_and(|h| !h.is_empty()) {
            return Err(refuse(
                validate::CHANGE_NOT_SUPPORTED,
                &kind::<K>(),
                &name,
                field,
                format_args!("not support change {what} for {} {name}", K::NAT.as_str()),
            ));
        }
    }
    Ok(())
}

/// The EIP's and the internal side's addresses paired for rows ([`pair`]).
pub fn pairs(eip: &EipFacts, internal: &Internal) -> Vec<(String, String)> {
    let (ev4, ev6) = (eip.v4.map(|v| v.to_string()), eip.v6.map(|v| v.to_string()));
    pair(
        ev4.as_deref(),
        ev6.as_deref(),
        internal.v4.as_deref(),
        internal.v6.as_deref(),
    )
}

/// One northbound transaction for the rule, planned by `fill` from the replica: its `what` on
/// VPC `vpc`'s router ("write the <what> of <Kind> <name>"; not ready while that router does
/// not exist yet: the VPC's creation brings the rule back), or with `None` its removal
/// ("remove the <what> …"). `op` names the transaction in logs and metrics.
pub async fn write_on_router<K: Rule>(
    ctx: &Context,
    rule: &K,
    vpc: Option<&str>,
    op: &'static str,
    what: &str,
    fill: impl FnOnce(&mut Plan, &DbCache),
) -> Result<()> {
    let (kind, name) = (kind::<K>(), rule.name_any());
    let plan = ctx.nb.read(|cache| {
        if let Some(vpc) = vpc
            && cache.uuids_by_name(LogicalRouter::NAME, vpc).is_empty()
        {
            return Err(Error::NotReady(format!(
                "{kind} {name}: the router of VPC {vpc} does not exist yet"
            )));
        }
        let mut plan = Plan::new();
        fill(&mut plan, cache);
        Ok(plan)
    })?;
    let verb = if vpc.is_some() { "write" } else { "remove" };
    ctx.nb
        .apply(plan, op)
        .await
        .doing(format_args!("{verb} the {what} of {kind} {name}"))?;
    Ok(())
}

/// A reconcile of an OVN NAT object behind the project's finalizer: `apply` while it lives,
/// `cleanup` once it is deleted (the finalizer goes when that succeeds).
pub async fn finalized<K>(
    obj: Arc<K>,
    ctx: Arc<Context>,
    apply: impl AsyncFnOnce(&K, &Context) -> Result<Action>,
    cleanup: impl AsyncFnOnce(&K, &Context) -> Result<Action>,
) -> Result<Action>
where
    K: Resource<Scope = ClusterResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize,
{
    let name = obj.name_any();
    let api: Api<K> = Api::all(ctx.kube.clone());
    finalizer(&api, FINALIZER, obj, |event| async move {
        match event {
            Finalizer::Apply(o) => apply(&o, &ctx).await,
            Finalizer::Cleanup(o) => cleanup(&o, &ctx).await,
        }
    })
    .await
    .map_err(crate::reconcile::finalizer_error::<K>(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fip(status: &serde_json::Value) -> OvnFip {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeovn.io/v1", "kind": "OvnFip", "metadata": {"name": "f1"},
            "spec": {}, "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn only_an_applied_rule_is_held_to_what_it_applied() {
        let applied =
            fip(&serde_json::json!({"ready": true, "vpc": "vpc1", "macAddress": "0a:00:00:00:00:01"}));
        assert_eq!(applied.applied_vpc(), Some("vpc1"));
        assert!(applied.distributed());
        assert_eq!(
            unchanged(&applied, &[("vpc", "vpc", Some("vpc1"), Some("vpc1"))]),
            Ok(())
        );
        let e = unchanged(&applied, &[("vpc", "vpc", Some("vpc1"), Some("vpc2"))]).unwrap_err();
        assert_eq!(
            (e.reason, e.message.as_str()),
            (
                validate::CHANGE_NOT_SUPPORTED,
                "OvnFip f1: spec.vpc: not support change vpc for fip f1"
            )
        );
        // Nothing applied for that field yet (empty or absent): no change to refuse.
        assert_eq!(
            unchanged(&applied, &[("ipName", "ip", Some(""), Some("10.1.0.5"))]),
            Ok(())
        );
        let fresh = fip(&serde_json::json!({"vpc": "vpc1"}));
        assert!(!fresh.ready() && !fresh.distributed());
        assert_eq!(
            unchanged(&fresh, &[("vpc", "vpc", Some("vpc1"), Some("vpc2"))]),
            Ok(())
        );
    }
}
