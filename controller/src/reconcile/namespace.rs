//! Namespaces: the annotations Kube-OVN keeps on each (reference §2.3, its `handleAddNamespace`):
//! - `logical_switch`: the subnets bound to the namespace, comma-joined — a custom VPC's
//!   `defaultSubnet` first when the VPC lists the namespace, then subnets whose `spec.namespaces`
//!   name it; with none, the default subnet of the VPC that lists the namespace (its
//!   `status.defaultLogicalSwitch`), else `--default-ls`;
//! - `cidr` and `exclude_ips`: each of those subnets' `cidrBlock` and `excludeIps` (itself a comma
//!   list), joined with `;` in the same order;
//! - `ip_pool`: the IP pools whose `spec.namespaces` name it, comma-joined; removed when none.
//!
//! The annotations are written only when they differ. Pods do not read them back: the pod
//! reconciler derives the same binding from the subnets and pools themselves, so a pod never
//! waits for this reconciler.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use kube_ovn_api::crd::Subnet;
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::{Error, Result};

pub const KIND: &str = "Namespace";

/// Whether a subnet binds the namespace by `spec.namespaces`.
fn binds(subnet: &Subnet, namespace: &str) -> bool {
    subnet
        .spec
        .namespaces
        .as_ref()
        .is_some_and(|n| n.iter().any(|x| x == namespace))
}

/// The subnets bound to a namespace, in the order of its `logical_switch` annotation.
pub fn bound_subnets(ctx: &Context, namespace: &str) -> Vec<Arc<Subnet>> {
    let mut subnets: Vec<Arc<Subnet>> = ctx
        .stores
        .subnets
        .state()
        .into_iter()
        .filter(|s| s.meta().deletion_timestamp.is_none())
        .collect();
    subnets.sort_by_key(|s| s.name_any());
    let vpc_default: Vec<Arc<Subnet>> = ctx
        .stores
        .vpcs
        .state()
        .iter()
        .filter(|v| {
            v.name_any() != ctx.config.cluster_router
                && namespace != "kube-system"
                && v.spec
                    .namespaces
                    .as_ref()
                    .is_some_and(|n| n.iter().any(|x| x == namespace))
        })
        .filter_map(|v| v.spec.default_subnet.clone())
        .filter_map(|d| subnets.iter().find(|s| s.name_any() == d).cloned())
        .collect();
    let mut out = vpc_default;
    for s in subnets.into_iter().filter(|s| binds(s, namespace)) {
        if !out.iter().any(|o| o.name_any() == s.name_any()) {
            out.push(s);
        }
    }
    out
}

/// The subnet of a namespace no subnet binds: the default subnet of the VPC listing it, else
/// the cluster's.
fn fallback_subnet(ctx: &Context, namespace: &str) -> String {
    ctx.stores
        .vpcs
        .state()
        .into_iter()
        .find(|v| {
            v.spec
                .namespaces
                .as_ref()
                .is_some_and(|n| n.iter().any(|x| x == namespace))
        })
        .or_else(|| ctx.stores.vpcs.get(&ObjectRef::new(&ctx.config.cluster_router)))
        .and_then(|v| v.status.as_ref()?.default_logical_switch.clone())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| ctx.config.default_subnet.name.clone())
}

pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    if ns.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let mut subnets = bound_subnets(&ctx, &name);
    if subnets.is_empty() {
        let fallback = fallback_subnet(&ctx, &name);
        let subnet = ctx
            .stores
            .subnets
            .get(&ObjectRef::new(&fallback))
            .ok_or_else(|| Error::NotReady(format!("default subnet {fallback} does not exist yet")))?;
        subnets.push(subnet);
    }
    let switches = subnets.iter().map(|s| s.name_any()).collect::<Vec<_>>().join(",");
    let cidrs = subnets
        .iter()
        .map(|s| s.spec.cidr_block.clone().unwrap_or_default())
        .collect::<Vec<_>>()
        .join(";");
    let excludes = subnets
        .iter()
        .map(|s| s.spec.exclude_ips.clone().unwrap_or_default().join(","))
        .collect::<Vec<_>>()
        .join(";");
    let pools = super::pod_request::namespace_pools(&ctx, &name)
        .iter()
        .map(|p| p.name_any())
        .collect::<Vec<_>>();
    let have = ns.metadata.annotations.clone().unwrap_or_default();
    let mut patch = serde_json::Map::new();
    for (key, want) in [
        (keys::LOGICAL_SWITCH, switches),
        (keys::CIDR, cidrs),
        (keys::EXCLUDE_IPS, excludes),
    ] {
        if have.get(key) != Some(&want) {
            patch.insert(key.to_owned(), json!(want));
        }
    }
    let pool_value = (!pools.is_empty()).then(|| pools.join(","));
    if have.get(keys::IP_POOL) != pool_value.as_ref() {
        patch.insert(
            keys::IP_POOL.to_owned(),
            pool_value.map_or(Value::Null, Value::from),
        );
    }
    if !patch.is_empty() {
        let api: Api<Namespace> = Api::all(ctx.kube.clone());
        api.patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": patch}})),
        )
        .await?;
    }
    Ok(Action::await_change())
}
