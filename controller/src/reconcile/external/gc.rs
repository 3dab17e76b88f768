//! Garbage of VPCs' external gateways whose VPC is gone (deleted while no controller ran its
//! finalizer, or by hand): our BFD rows (a root table: nothing drops them) and our switch ports
//! `<subnet>-<vpc>` on external switches. The Gateway_Chassis rows need nothing: only the router
//! port references them, and the server drops them with it.

use std::collections::BTreeSet;

use kube::ResourceExt;
use kube_ovn_ovsdb::Table;
use kube_ovn_ovsdb::tables::nb::{Bfd, LogicalSwitchPort};

use super::port::EXTERNAL_SUBNET_KEY;
use crate::context::Context;
use crate::error::{Doing, Result};
use crate::ovn::plan::{Plan, is_owned_by};
use crate::ovn::topology::remove_switch_port;

/// Removes the external gateway rows of VPCs that no longer exist; returns their VPCs' names.
pub async fn collect(ctx: &Context) -> Result<Vec<String>> {
    // What might be garbage first, the living owners after (an owner created in between is seen).
    let (bfd, ports) = ctx.nb.read(|cache| {
        let bfd = super::bfd::owned_rows(cache);
        let ports: Vec<(String, String)> = cache
            .rows::<LogicalSwitchPort>()
            .unwrap_or_default()
            .into_iter()
            .filter(|p| is_owned_by(&p.external_ids, &[]) && p.external_ids.contains_key(EXTERNAL_SUBNET_KEY))
            .filter_map(|p| p.external_ids.get("vpc").map(|v| (v.clone(), p.name)))
            .collect();
        (bfd, ports)
    });
    let vpcs: BTreeSet<String> = ctx.stores.vpcs.state().iter().map(|v| v.name_any()).collect();
    let mut gone = BTreeSet::new();
    let plan = ctx.nb.read(|cache| {
        let mut plan = Plan::new();
        for (vpc, uuid) in &bfd {
            if !vpcs.contains(vpc) {
                plan.delete(Bfd::NAME, *uuid);
                gone.insert(vpc.clone());
            }
        }
        for (vpc, port) in &ports {
            if !vpcs.contains(vpc) {
                remove_switch_port(&mut plan, cache, port);
                gone.insert(vpc.clone());
            }
        }
        plan
    });
    ctx.nb
        .apply(plan, "vpc-external-gc")
        .await
        .doing("remove the external gateway rows of deleted VPCs")?;
    Ok(gone.into_iter().collect())
}
