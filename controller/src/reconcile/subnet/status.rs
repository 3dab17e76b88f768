//! A subnet's status: Kube-OVN's conditions (`Validated`, `Ready`, `Error` with its reasons, e.g.
//! `ValidateLogicalSwitchFailed`, `SetPrivateLogicalSwitchSuccess`, `NoActiveGatewayFound`),
//! `activateGateway`, `natOutgoingPolicyRules` with their IDs, an underlay subnet's
//! `u2oInterconnectionIP`/`MAC`/`VPC`, and the address counters and
//! ranges, which follow IPAM. Bad input is also a Warning event on the subnet, as Kube-OVN's
//! status writer sends one with every error.
//!
//! Counters change with every pod, not with the subnet, so besides the reconciler a short loop
//! ([`refresh_counters`]) writes them when IPAM and the status disagree; it writes nothing
//! otherwise.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::condition::{Condition, ConditionStatus, ERROR, READY, VALIDATED, set_condition};
use kube_ovn_api::crd::{IpCount, NatOutgoingPolicyRuleStatus, Subnet, SubnetStatus};
use serde_json::json;

use crate::context::Context;
use crate::error::{Doing, Result};
use crate::reconcile::subnet_spec::{Effective, effective};

/// What a reconcile concluded.
#[derive(Debug, Clone)]
pub struct Outcome<'a> {
    pub validated: bool,
    pub ready: bool,
    pub reason: &'a str,
    /// Empty on success; the `Error` condition is true when it is not.
    pub message: &'a str,
    /// `status.activateGateway`; `None` leaves it as it is.
    pub active_gateway: Option<&'a str>,
    /// `status.natOutgoingPolicyRules`; `None` leaves them as they are (bad input keeps the
    /// rules the nodes apply now).
    pub nat_rules: Option<&'a [NatOutgoingPolicyRuleStatus]>,
    /// `status.u2oInterconnectionIP`, `…MAC`, `…VPC` (empty strings clear them, as Kube-OVN
    /// writes them when U2O is off); `None` leaves them as they are.
    pub u2o: Option<U2oStatus>,
}

/// A subnet's U2O interconnection status: the router port's address(es) (comma-joined, v4 first),
/// its MAC and the VPC's router.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct U2oStatus {
    pub ip: String,
    pub mac: String,
    pub vpc: String,
}

impl<'a> Outcome<'a> {
    pub fn ok(reason: &'a str) -> Self {
        Self {
            validated: true,
            ready: true,
            reason,
            message: "",
            active_gateway: None,
            nat_rules: None,
            u2o: None,
        }
    }

    /// The spec is wrong: not validated, not ready.
    pub fn invalid(message: &'a str) -> Self {
        Self {
            validated: false,
            ready: false,
            reason: "ValidateLogicalSwitchFailed",
            message,
            active_gateway: None,
            nat_rules: None,
            u2o: None,
        }
    }
}

/// The counters and ranges IPAM gives for `eff`'s families (absent families stay unset).
fn with_counters(ctx: &Context, name: &str, eff: &Effective, status: &mut SubnetStatus) {
    let Ok(u) = ctx.ipam().subnet_usage(name) else {
        return;
    };
    let v4 = eff.cidrs.iter().find(|c| c.addr().is_ipv4());
    let v6 = eff.cidrs.iter().find(|c| !c.addr().is_ipv4());
    let count = |has: bool, n: u128| has.then_some(IpCount(n));
    let range = |has: bool, r: &str| has.then(|| r.to_owned());
    status.v4_available_ips = count(v4.is_some(), u.v4_available);
    status.v4_using_ips = count(v4.is_some(), u.v4_using);
    status.v6_available_ips = count(v6.is_some(), u.v6_available);
    status.v6_using_ips = count(v6.is_some(), u.v6_using);
    status.v4_available_ip_range = range(v4.is_some(), &u.v4_available_range);
    status.v4_using_ip_range = range(v4.is_some(), &u.v4_using_range);
    status.v6_available_ip_range = range(v6.is_some(), &u.v6_available_range);
    status.v6_using_ip_range = range(v6.is_some(), &u.v6_using_range);
    for (cidr, proto, available, using) in [
        (v4, "IPv4", u.v4_available, u.v4_using),
        (v6, "IPv6", u.v6_available, u.v6_using),
    ] {
        if let Some(cidr) = cidr {
            ctx.metrics
                .subnet_usage(name, proto, &cidr.to_string(), available, using);
        }
    }
}

fn same_counters(a: &SubnetStatus, b: &SubnetStatus) -> bool {
    a.v4_available_ips == b.v4_available_ips
        && a.v4_using_ips == b.v4_using_ips
        && a.v6_available_ips == b.v6_available_ips
        && a.v6_using_ips == b.v6_using_ips
        && a.v4_available_ip_range == b.v4_available_ip_range
        && a.v4_using_ip_range == b.v4_using_ip_range
        && a.v6_available_ip_range == b.v6_available_ip_range
        && a.v6_using_ip_range == b.v6_using_ip_range
}

/// Writes the conditions of `outcome` (and the counters, when `eff` is known); nothing when
/// nothing changed.
pub async fn set_status(
    ctx: &Context,
    subnet: &Subnet,
    eff: Option<&Effective>,
    outcome: Outcome<'_>,
) -> Result<()> {
    let name = subnet.name_any();
    let old = subnet.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let mut conditions = status.conditions.take().unwrap_or_default();
    let of = |b: bool| {
        if b {
            ConditionStatus::True
        } else {
            ConditionStatus::False
        }
    };
    let Outcome {
        validated,
        ready,
        reason,
        message,
        active_gateway,
        nat_rules,
        u2o,
    } = outcome;
    let mut changed = false;
    for (type_, value) in [
        (VALIDATED, validated),
        (READY, ready),
        (ERROR, !message.is_empty()),
    ] {
        changed |= set_condition(
            &mut conditions,
            Condition::new(type_, of(value), reason, message),
            &now,
        );
    }
    status.conditions = Some(conditions);
    if let Some(active) = active_gateway
        && old.activate_gateway.as_deref().unwrap_or_default() != active
    {
        status.activate_gateway = Some(active.to_owned());
        changed = true;
    }
    if let Some(rules) = nat_rules
        && old.nat_outgoing_policy_rules.as_deref() != Some(rules)
    {
        status.nat_outgoing_policy_rules = Some(rules.to_vec());
        changed = true;
    }
    if let Some(u) = u2o {
        let have = U2oStatus {
            ip: old.u2o_interconnection_ip.clone().unwrap_or_default(),
            mac: old.u2o_interconnection_mac.clone().unwrap_or_default(),
            vpc: old.u2o_interconnection_vpc.clone().unwrap_or_default(),
        };
        if have != u {
            status.u2o_interconnection_ip = Some(u.ip);
            status.u2o_interconnection_mac = Some(u.mac);
            status.u2o_interconnection_vpc = Some(u.vpc);
            changed = true;
        }
    }
    if let Some(eff) = eff {
        with_counters(ctx, &name, eff, &mut status);
    }
    if !changed && same_counters(&old, &status) {
        return Ok(());
    }
    crate::reconcile::merge_status::<Subnet>(&ctx.kube, &name, &status).await
}

/// A Warning event on the subnet (reason `reason`, the message naming the field), beside the
/// condition: what `kubectl describe subnet` and `kubectl get events` show.
pub async fn warn(ctx: &Context, subnet: &Subnet, reason: &str, message: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(message.to_owned()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &subnet.object_ref(&())).await {
        tracing::debug!(error = %e, "cannot publish event");
    }
}

/// Writes the address counters of every subnet whose status disagrees with IPAM.
pub async fn refresh_counters(ctx: &Context) -> Result<()> {
    let api: Api<Subnet> = Api::all(ctx.kube.clone());
    for subnet in ctx.stores.subnets.state() {
        let name = subnet.name_any();
        if subnet.meta().deletion_timestamp.is_some() || !ctx.ipam().has_subnet(&name) {
            continue;
        }
        let Ok(eff) = effective(&subnet, &ctx.config.cluster_router) else {
            continue;
        };
        let old = subnet.status.clone().unwrap_or_default();
        let mut status = old.clone();
        with_counters(ctx, &name, &eff, &mut status);
        if same_counters(&old, &status) {
            continue;
        }
        let counters = json!({"status": {
            "v4availableIPs": status.v4_available_ips,
            "v4usingIPs": status.v4_using_ips,
            "v6availableIPs": status.v6_available_ips,
            "v6usingIPs": status.v6_using_ips,
            "v4availableIPrange": status.v4_available_ip_range,
            "v4usingIPrange": status.v4_using_ip_range,
            "v6availableIPrange": status.v6_available_ip_range,
            "v6usingIPrange": status.v6_using_ip_range,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(counters))
            .await
            .doing(format_args!("write the address counters of subnet {name}"))?;
    }
    Ok(())
}
