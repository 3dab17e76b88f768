//! Namespaces: the annotations Kube-OVN keeps on each — `logical_switch` (the subnets bound to it,
//! or the default subnet), `cidr` and `exclude_ips` (`;`-joined, one entry per subnet), and
//! `ip_pool` (IP pools bound to it; removed when there are none).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use kube_ovn_api::annotations::keys;
use serde_json::{Value, json};

use crate::context::Context;
use crate::error::Result;

pub const KIND: &str = "Namespace";

pub async fn reconcile(ns: Arc<Namespace>, ctx: Arc<Context>) -> Result<Action> {
    if ns.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let name = ns.name_any();
    let mut subnets: Vec<_> = ctx
        .stores
        .subnets
        .state()
        .into_iter()
        .filter(|s| {
            s.meta().deletion_timestamp.is_none()
                && s.spec.namespaces.as_ref().is_some_and(|n| n.contains(&name))
        })
        .collect();
    subnets.sort_by_key(|s| s.name_any());
    let (switches, cidrs, excludes) = if subnets.is_empty() {
        let d = &ctx.config.default_subnet;
        let exclude = ctx
            .stores
            .subnets
            .get(&kube::runtime::reflector::ObjectRef::new(&d.name))
            .and_then(|s| s.spec.exclude_ips.clone())
            .unwrap_or_default()
            .join(",");
        (d.name.clone(), d.cidr_block(), exclude)
    } else {
        (
            subnets.iter().map(|s| s.name_any()).collect::<Vec<_>>().join(","),
            subnets
                .iter()
                .map(|s| s.spec.cidr_block.clone().unwrap_or_default())
                .collect::<Vec<_>>()
                .join(";"),
            subnets
                .iter()
                .map(|s| s.spec.exclude_ips.clone().unwrap_or_default().join(","))
                .collect::<Vec<_>>()
                .join(";"),
        )
    };
    let mut pools: Vec<String> = ctx
        .stores
        .ippools
        .state()
        .iter()
        .filter(|p| p.spec.namespaces.as_ref().is_some_and(|n| n.contains(&name)))
        .map(|p| p.name_any())
        .collect();
    pools.sort();
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
