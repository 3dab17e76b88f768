//! Namespaces: the annotations Kube-OVN keeps on each — `logical_switch` (the subnets bound to it
//! by name, label selector or VPC, see [`super::binding`]; or the default subnet), `cidr` and
//! `exclude_ips` (`;`-joined, one entry per subnet), and `ip_pool` (IP pools bound to it; removed
//! when there are none).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use serde_json::{Value, json};

use super::binding::{bound_subnets, fallback_subnet};
use crate::context::Context;
use crate::error::{Doing, Result};

pub const KIND: &str = "Namespace";

pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    if ns.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let all_subnets = ctx.stores.subnets.state();
    let vpcs = ctx.stores.vpcs.state();
    let labels = ns.metadata.labels.clone().unwrap_or_default();
    let mut bound = bound_subnets(&name, &labels, &all_subnets, &vpcs, &ctx.config.cluster_router);
    if bound.is_empty() {
        bound.push(fallback_subnet(&name, &vpcs, &ctx.config.default_subnet.name));
    }
    let subnet = |n: &String| all_subnets.iter().find(|s| s.name_any() == *n).cloned();
    let (switches, cidrs, excludes) = (
        bound.join(","),
        bound
            .iter()
            .map(|n| {
                subnet(n)
                    .and_then(|s| s.spec.cidr_block.clone())
                    .unwrap_or_else(|| default_cidr(&ctx, n))
            })
            .collect::<Vec<_>>()
            .join(";"),
        bound
            .iter()
            .map(|n| {
                subnet(n)
                    .and_then(|s| s.spec.exclude_ips.clone())
                    .unwrap_or_default()
                    .join(",")
            })
            .collect::<Vec<_>>()
            .join(";"),
    );
    let pools = super::pod::request::namespace_pools(&ctx.stores.ippools.state(), &name)
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
        .await
        .doing(format_args!("patch the annotations of namespace {name}"))?;
    }
    Ok(Action::await_change())
}

/// The default subnet's CIDR from the flags, while its CR is not in the cache yet.
fn default_cidr(ctx: &Context, subnet: &str) -> String {
    let d = &ctx.config.default_subnet;
    if subnet == d.name {
        d.cidr_block()
    } else {
        String::new()
    }
}
