//! Node start-up: `br-int` and the chassis settings ovn-controller reads (`system-id`, encap
//! type and IP, `ovn-remote`), and the `ovn.kubernetes.io/chassis` annotation on the Node.
//! Run once by `crate::run` before any task starts; not a task itself.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node as K8sNode;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_api::annotations::keys;
use kube_ovn_dataplane::Netlink;

use crate::config::Config;
use crate::error::DaemonError;
use crate::ovs::Ovs;

/// The chassis settings ovn-controller reads, and `br-int`. Waits for the database to be
/// initialized first: the daemon and `ovs-ovn` start side by side, and ovsdb-server
/// serves before `ovs-vsctl init` made its row.
pub async fn init_ovs(
    config: &Config,
    ovs: &Ovs,
    ovs_nl: &Netlink,
    kube: &kube::Client,
) -> Result<String, DaemonError> {
    let flags = &config.flags;
    let mut waited = false;
    while !ovs.initialized() {
        if !waited {
            tracing::info!("waiting for the Open_vSwitch database to be initialized (ovs-vsctl init)");
            waited = true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ovs.ensure_bridge(config.datapath.as_str()).await?;
    // The chassis name OVS already has (ovs-ovn sets it from the node's file in the same
    // transaction as `init`), else the file, else the node's name.
    let system_id = ovs
        .chassis_ids()
        .get("system-id")
        .cloned()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string(&flags.system_id_file)
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| flags.node_name.clone());
    let mut ids = BTreeMap::from([
        ("system-id".to_owned(), system_id.clone()),
        ("hostname".to_owned(), flags.node_name.clone()),
        ("ovn-bridge".to_owned(), flags.ovs_bridge.clone()),
        ("ovn-encap-type".to_owned(), config.encap_type.clone()),
        ("ovn-encap-csum".to_owned(), flags.encap_checksum.to_string()),
        (
            "ovn-bridge-datapath-type".to_owned(),
            config.datapath.as_str().to_owned(),
        ),
    ]);
    if let Some(ip) = encap_ip(config, ovs_nl).await? {
        ids.insert("ovn-encap-ip".into(), ip.to_string());
    }
    if !config.ovn_remote.is_empty() {
        ids.insert("ovn-remote".into(), config.ovn_remote.clone());
    }
    ovs.set_chassis_ids(&ids).await?;
    let patch = serde_json::json!({"metadata": {"annotations": {keys::CHASSIS: system_id}}});
    Api::<K8sNode>::all(kube.clone())
        .patch(&flags.node_name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| DaemonError::Kube {
            op: format!("annotate node {} with its chassis", flags.node_name),
            source: Box::new(source),
        })?;
    Ok(system_id)
}

async fn encap_ip(config: &Config, ovs_nl: &Netlink) -> Result<Option<IpAddr>, DaemonError> {
    if let Some(ip) = config.encap_ip {
        return Ok(Some(ip));
    }
    let iface = &config.flags.iface;
    if iface.is_empty() {
        return Ok(None);
    }
    let link = ovs_nl.require_link(iface).await?;
    let addresses = ovs_nl.addresses(link.index).await?;
    let first = addresses
        .iter()
        .find(|a| a.addr().is_ipv4())
        .or_else(|| addresses.first());
    first.map(|a| Some(a.addr())).ok_or_else(|| {
        DaemonError::BadRequest(format!(
            "--iface {iface} has no address to use as the tunnel endpoint"
        ))
    })
}
