//! IP pools: a named pool in its subnet's IPAM (carved out of the default pool; pools may not
//! overlap), and status counters.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube_ovn_api::annotations::{IpRange, parse};
use kube_ovn_api::crd::{FINALIZER, IPPool, IpCount};
use serde_json::json;

use crate::context::Context;
use crate::error::{Error, Result};

pub const KIND: &str = "IPPool";

pub async fn reconcile(pool: Arc<IPPool>, ctx: Arc<Context>) -> Result<Action> {
    let api: Api<IPPool> = Api::all(ctx.kube.clone());
    let c = ctx.clone();
    finalizer(&api, FINALIZER, pool, |event| async move {
        match event {
            Finalizer::Apply(p) => apply(&p, &c).await,
            Finalizer::Cleanup(p) => {
                c.ipam()
                    .remove_pool(p.spec.subnet.as_deref().unwrap_or_default(), &p.name_any());
                Ok(Action::await_change())
            }
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Invalid(format!("finalizer: {other}")),
    })
}

async fn apply(pool: &IPPool, ctx: &Context) -> Result<Action> {
    let name = pool.name_any();
    let subnet = pool.spec.subnet.as_deref().unwrap_or_default();
    let ranges = pool
        .spec
        .ips
        .iter()
        .flatten()
        .map(|r| parse::<IpRange>("spec.ips", r))
        .collect::<Result<Vec<_>, _>>()?;
    if !ctx.ipam().has_subnet(subnet) {
        return Err(Error::NotReady(format!(
            "subnet {subnet} of IP pool {name} is not ready"
        )));
    }
    ctx.ipam().add_or_update_pool(subnet, &name, &ranges)?;
    let u = ctx.ipam().pool_usage(subnet, &name)?;
    let status = json!({"status": {
        "v4AvailableIPs": IpCount(u.v4_available), "v4UsingIPs": IpCount(u.v4_using),
        "v6AvailableIPs": IpCount(u.v6_available), "v6UsingIPs": IpCount(u.v6_using),
        "v4AvailableIPRange": u.v4_available_range, "v4UsingIPRange": u.v4_using_range,
        "v6AvailableIPRange": u.v6_available_range, "v6UsingIPRange": u.v6_using_range,
    }});
    let api: Api<IPPool> = Api::all(ctx.kube.clone());
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(Action::requeue(Duration::from_secs(10)))
}
