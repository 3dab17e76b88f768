//! Declarative peers: `BgpPeer` objects whose node selector picks this node become peers
//! beside the flag ones, are replaced when their spec changes and removed when they stop
//! selecting the node or are deleted; each running one reports its session in the object's
//! `status.nodes.<node>`.
//!
//! Every status write that fails (the API server away, a conflict) is tried again on its own,
//! with a doubling delay, not only when something else happens: a session that is stable after
//! an outage would otherwise never be reported.

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
use crate::crd::{AdvertisedCounts, BgpPeer, ValidateSpec, ValidatedPeer};
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
    config.ttl_security = peer.ttl_security.unwrap_or(flags.ttl_security);
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

/// The delay before retry `failures` of a status write: 1 s, doubling, at most 30 s.
fn retry_delay(failures: u32) -> Duration {
    Duration::from_secs(1 << failures.saturating_sub(1).min(5)).min(Duration::from_secs(30))
}

/// Merges `patch` into the status of BgpPeer `name`.
async fn write_status(api: &Api<BgpPeer>, name: &str, patch: &serde_json::Value) -> Result<(), kube::Error> {
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .map(drop)
}

/// Status writes this task owes for BgpPeers that run no session here: `Invalid` with the
/// problem, or removal of this node's entry. Kept until written; written once per change.
#[derive(Default)]
struct Owed {
    /// name → the problem to report (`None`: remove this node's entry).
    due: BTreeMap<String, Option<String>>,
    /// What was last written successfully, so an unchanged report is not written again.
    written: BTreeMap<String, Option<String>>,
    failures: u32,
}

impl Owed {
    fn report(&mut self, name: &str, problem: Option<String>) {
        if self.written.get(name) != Some(&problem) {
            self.due.insert(name.to_owned(), problem);
        }
    }

    /// A running session writes its own status from now on.
    fn forget(&mut self, name: &str) {
        self.due.remove(name);
        self.written.remove(name);
    }

    /// Writes what is due; returns when to try again if something failed.
    async fn flush(&mut self, api: &Api<BgpPeer>, node: &str) -> Option<Duration> {
        let due = std::mem::take(&mut self.due);
        for (name, problem) in due {
            let patch = match &problem {
                Some(p) => {
                    serde_json::json!({"status": {"nodes": {node: {"state": "Invalid", "lastError": p}}}})
                }
                None => crate::crd::remove_node_patch(node),
            };
            match write_status(api, &name, &patch).await {
                Ok(()) => {
                    self.written.insert(name, problem);
                }
                // Gone: nothing to report on.
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    self.written.remove(&name);
                }
                Err(e) => {
                    tracing::warn!(bgp_peer = %name, error = %e, "status not written; will retry");
                    self.due.insert(name, problem);
                }
            }
        }
        if self.due.is_empty() {
            self.failures = 0;
            None
        } else {
            self.failures += 1;
            Some(retry_delay(self.failures))
        }
    }
}

async fn sleep_or_never(delay: Option<Duration>) {
    match delay {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// Keeps the CRD peers in step with the BgpPeers and this node's labels.
pub async fn task(rt: Arc<Runtime>, peers: Arc<PeerSet>, bgp_peers: Watched<BgpPeer>, nodes: Watched<Node>) {
    let (mut p, mut n) = (bgp_peers.changes(), nodes.changes());
    let node_name = rt.config.flags.node_name.clone();
    let api: Api<BgpPeer> = Api::all(rt.kube.clone());
    let mut owed = Owed::default();
    // name → (the spec it was built from, its address)
    let mut running: BTreeMap<String, (crate::crd::BgpPeerSpec, IpAddr)> = BTreeMap::new();
    loop {
        let labels = nodes
            .get(&node_name, None)
            .and_then(|n| n.metadata.labels.clone())
            .unwrap_or_default();
        let mut wanted: BTreeMap<String, (BgpPeer, ValidatedPeer)> = BTreeMap::new();
        let all = bgp_peers.all();
        owed.written
            .retain(|name, _| all.iter().any(|o| o.metadata.name.as_ref() == Some(name)));
        for object in all {
            let name = object.metadata.name.clone().unwrap_or_default();
            match object.spec.validate() {
                Ok(v) if v.selects(&labels) => {
                    wanted.insert(name, ((*object).clone(), v));
                }
                Ok(_) => {}
                Err(e) => {
                    if let Some((_, address)) = running.remove(&name) {
                        // It ran with the spec it had before; that spec is gone.
                        peers.remove(&rt, address).await;
                        tracing::info!(bgp_peer = %name, peer = %address, "peer removed");
                    }
                    if owed.written.get(&name) != Some(&Some(e.to_string())) {
                        tracing::warn!(bgp_peer = %name, error = %e, "invalid BgpPeer");
                    }
                    owed.report(&name, Some(e.to_string()));
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
                owed.report(&name, None);
                tracing::info!(bgp_peer = %name, peer = %address, "peer removed");
            }
        }
        for (name, (object, v)) in wanted {
            if running.contains_key(&name) {
                continue;
            }
            if peers.contains(v.address) {
                let problem = format!("peer {} is already configured on this node", v.address);
                owed.report(&name, Some(problem));
                continue;
            }
            let built = match md5_key(&rt.kube, &v).await {
                Ok(key) => plan(&rt, &name, &v, key),
                Err(e) => Err(e),
            };
            match built {
                Ok(plan) => match peers.add(&rt, plan, Some(name.clone())).await {
                    Ok(()) => {
                        owed.forget(&name);
                        running.insert(name, (object.spec.clone(), v.address));
                    }
                    Err(e) => owed.report(&name, Some(e.to_string())),
                },
                Err(e) => owed.report(&name, Some(e)),
            }
        }
        let retry = owed.flush(&api, &node_name).await;
        tokio::select! {
            _ = p.changed() => {}
            _ = n.changed() => {}
            () = sleep_or_never(retry) => {}
        }
    }
}

/// Writes the session's state and its routes counted by kind (`advertised`) into
/// `status.nodes.<node>` of its BgpPeer as they change (at most
/// once a second, and whenever the state itself changes). A write that fails is tried again
/// after a doubling delay even if the session does not change again; a newer state starts
/// its own retries at the shortest delay.
pub async fn status_task(
    kube: kube::Client,
    name: String,
    node: String,
    mut status: tokio::sync::watch::Receiver<crate::driver::PeerStatus>,
    mut advertised: tokio::sync::watch::Receiver<AdvertisedCounts>,
) {
    type Written = (crate::bgp::fsm::State, usize, Option<String>, AdvertisedCounts);
    let api: Api<BgpPeer> = Api::all(kube);
    let mut last: Option<Written> = None;
    // The state being retried and how often it failed: a newer state starts again at 1 s.
    let mut failing = None;
    let mut failures = 0;
    loop {
        let current = status.borrow_and_update().clone();
        let counts = advertised.borrow_and_update().clone();
        let key = (
            current.state,
            current.prefixes_sent,
            current.last_error.clone(),
            counts.clone(),
        );
        let mut retry = None;
        if last.as_ref() != Some(&key) {
            if failing.as_ref() != Some(&key) {
                failing = Some(key.clone());
                failures = 0;
            }
            let mut patch = crate::crd::status_patch(&node, &current);
            patch["status"]["nodes"][&node]["advertised"] = crate::crd::advertised_entry(&counts);
            match write_status(&api, &name, &patch).await {
                Ok(()) => {
                    last = Some(key);
                    failing = None;
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(bgp_peer = %name, error = %e, failures, "status not written; will retry");
                    retry = Some(retry_delay(failures));
                }
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        tokio::select! {
            changed = status.changed() => if changed.is_err() {
                return;
            },
            changed = advertised.changed() => if changed.is_err() {
                return;
            },
            () = sleep_or_never(retry) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_half_a_minute() {
        let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    }
}
