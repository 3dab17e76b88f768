//! Declarative peers: `BgpPeer` objects whose node selector picks this node become peers
//! beside the flag ones, are replaced when their spec changes and removed when they stop
//! selecting the node or are deleted; each running one reports its session in the object's
//! `status.nodes.<node>`.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_support::Watched;

use super::peers::{PeerPlan, session};
use super::{PeerSet, Runtime};
use crate::bgp::fsm::GracefulRestartConfig;
use crate::bgp::rib_out::RouteAttributes;
use crate::crd::{BgpPeer, ValidatedPeer};
use crate::driver::PeerConfig;

/// The plan for a validated `BgpPeer`; the MD5 key already read from its Secret.
pub fn plan(
    rt: &Runtime,
    name: &str,
    peer: &ValidatedPeer,
    md5_key: Option<Vec<u8>>,
) -> Result<PeerPlan, String> {
    let flags = &rt.config.flags;
    let local_as = peer.local_asn_or(flags.cluster_as).map_err(|e| e.to_string())?;
    let hold = peer
        .hold_time
        .map_or(flags.holdtime, |s| Duration::from_secs(u64::from(s)));
    let mut session = session(
        &rt.config,
        local_as,
        peer.address,
        peer.peer_asn,
        hold,
        peer.passive,
        rt.restarting,
    );
    session.families.clone_from(&peer.families);
    if let Some(gr) = peer.graceful_restart {
        #[allow(clippy::cast_possible_truncation)] // validated to 1..=4095 s
        let restart_time = flags.graceful_restart_time.as_secs().clamp(1, 4095) as u16;
        session.graceful_restart = gr.then_some(GracefulRestartConfig {
            restart_time,
            forwarding_preserved: true,
        });
        session.restarting = gr && rt.restarting;
    }
    let mut config = PeerConfig::new(peer.address, session);
    config.port = peer.port;
    config.md5_key = md5_key;
    config.ttl = peer.ebgp_multihop;
    config.ready_deadline = config
        .session
        .graceful_restart
        .is_some()
        .then_some(flags.graceful_restart_deferral_time);
    config.validate().map_err(|e| e.to_string())?;
    Ok(PeerPlan {
        config,
        attributes: RouteAttributes {
            communities: peer.communities.clone(),
            large_communities: peer.large_communities.clone(),
            local_pref: peer.local_pref,
            med: peer.med,
            ..RouteAttributes::default()
        },
        bfd: peer.bfd,
        source: format!("BgpPeer {name}"),
    })
}

async fn md5_key(kube: &kube::Client, peer: &ValidatedPeer) -> Result<Option<Vec<u8>>, String> {
    let Some(r) = &peer.password else { return Ok(None) };
    let secret = Api::<Secret>::namespaced(kube.clone(), &r.namespace)
        .get(&r.name)
        .await
        .map_err(|e| format!("spec.passwordSecretRef: Secret {}/{}: {e}", r.namespace, r.name))?;
    let value = secret
        .data
        .as_ref()
        .and_then(|d| d.get(&r.key))
        .map(|b| b.0.clone())
        .ok_or_else(|| {
            format!(
                "spec.passwordSecretRef: Secret {}/{} has no key {}",
                r.namespace, r.name, r.key
            )
        })?;
    Ok(Some(value))
}

async fn report(kube: &kube::Client, name: &str, node: &str, problem: &str) {
    let patch = serde_json::json!({"status": {"nodes": {node: {"state": "Invalid", "lastError": problem}}}});
    let api: Api<BgpPeer> = Api::all(kube.clone());
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::warn!(bgp_peer = name, error = %e, "status not written");
    }
}

/// Keeps the CRD peers in step with the BgpPeers and this node's labels.
pub async fn task(rt: Arc<Runtime>, peers: Arc<PeerSet>, bgp_peers: Watched<BgpPeer>, nodes: Watched<Node>) {
    let (mut p, mut n) = (bgp_peers.changes(), nodes.changes());
    let node_name = rt.config.flags.node_name.clone();
    // name → (the spec it was built from, its address)
    let mut running: BTreeMap<String, (crate::crd::BgpPeerSpec, IpAddr)> = BTreeMap::new();
    loop {
        let labels = nodes
            .get(&node_name, None)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let mut wanted: BTreeMap<String, (BgpPeer, ValidatedPeer)> = BTreeMap::new();
        for object in bgp_peers.all() {
            let name = object.metadata.name.clone().unwrap_or_default();
            match object.spec.validate() {
                Ok(v) if v.selects(&labels) => {
                    wanted.insert(name, ((*object).clone(), v));
                }
                Ok(_) => {}
                Err(e) => {
                    if running.remove(&name).is_some() || !wanted.contains_key(&name) {
                        tracing::warn!(bgp_peer = %name, error = %e, "invalid BgpPeer");
                    }
                    report(&rt.kube, &name, &node_name, &e.to_string()).await;
                }
            }
        }
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, (spec, _))| wanted.get(*name).is_none_or(|(o, _)| &o.spec != spec))
            .map(|(name, _)| name.clone())
            .collect();
        for name in stale {
            if let Some((_, address)) = running.remove(&name) {
                peers.remove(&rt, address).await;
                let api: Api<BgpPeer> = Api::all(rt.kube.clone());
                let _ = api
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(&crate::crd::remove_node_patch(&node_name)),
                    )
                    .await;
                tracing::info!(bgp_peer = %name, peer = %address, "peer removed");
            }
        }
        for (name, (object, v)) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            if peers.contains(v.address) {
                report(
                    &rt.kube,
                    &name,
                    &node_name,
                    &format!("peer {} is already configured on this node", v.address),
                )
                .await;
                continue;
            }
            let built = match md5_key(&rt.kube, &v).await {
                Ok(key) => plan(&rt, &name, &v, key),
                Err(e) => Err(e),
            };
            match built {
                Ok(plan) => match peers.add(&rt, plan, Some(name.clone())).await {
                    Ok(()) => {
                        running.insert(name, (object.spec.clone(), v.address));
                    }
                    Err(e) => report(&rt.kube, &name, &node_name, &e.to_string()).await,
                },
                Err(e) => report(&rt.kube, &name, &node_name, &e).await,
            }
        }
        tokio::select! {
            _ = p.changed() => {}
            _ = n.changed() => {}
        }
    }
}

/// Writes the session's state into `status.nodes.<node>` of its BgpPeer as it changes (at most
/// once a second, and whenever the state itself changes).
pub async fn status_task(
    kube: kube::Client,
    name: String,
    node: String,
    mut status: tokio::sync::watch::Receiver<crate::driver::PeerStatus>,
) {
    let api: Api<BgpPeer> = Api::all(kube);
    let mut last: Option<(crate::bgp::fsm::State, usize, Option<String>)> = None;
    loop {
        let current = status.borrow_and_update().clone();
        let key = (current.state, current.prefixes_sent, current.last_error.clone());
        if last.as_ref() != Some(&key) {
            let patch = crate::crd::status_patch(&node, &current);
            match api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => last = Some(key),
                Err(e) => tracing::warn!(bgp_peer = %name, error = %e, "status not written"),
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        if status.changed().await.is_err() {
            return;
        }
    }
}
