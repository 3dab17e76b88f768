//! `up`'s step for the ToR's VLAN fabric (`cluster::tor_vlan`): its ovsdb-server, the database
//! initialised, its ovs-vswitchd, then the bridge, the trunks, the external network's access
//! ports and the gateways' addresses. It
//! runs beside the rest of `up` (it needs only the wires), so the lab takes no longer to come up.

use std::time::Duration;

use anyhow::Context;
use kube_ovn_lab::cluster::net::run;
use kube_ovn_lab::cluster::topology::Topology;
use kube_ovn_lab::cluster::tor_vlan;

use super::record::{Recorder, wait_serving};

pub async fn start(t: Topology, rec: Recorder, timeout: Duration) -> anyhow::Result<()> {
    tor_vlan::make_dir(&t).with_context(|| format!("making {}", t.tor_ovs_dir().display()))?;
    let create = tor_vlan::create_db_args(&t);
    run(
        "ovsdb-tool",
        &create.iter().map(String::as_str).collect::<Vec<_>>(),
    )?;
    let [db, vswitchd] = tor_vlan::ovs_launches(&t);
    let started = rec.start(&db)?;
    wait_serving(&db, started, tor_vlan::db_socket(&t), timeout).await?;
    let init = tor_vlan::init_args(&t);
    run("ovs-vsctl", &init.iter().map(String::as_str).collect::<Vec<_>>())?;
    rec.start(&vswitchd)?;
    tokio::task::spawn_blocking(move || tor_vlan::configure(&t))
        .await?
        .context("the ToR's VLAN fabric (bridge tor-vlan, its trunks, access ports and gateways)")?;
    Ok(())
}
