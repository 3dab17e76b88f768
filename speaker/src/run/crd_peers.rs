//! Declarative peers: `BgpPeer` objects whose node selector picks this node become peers
//! beside the flag ones, are replaced when their spec changes and removed when they stop
//! selecting the node or are deleted; each running one reports its session in the object's
//! `status.nodes.<node>`.
//!
//! Every status write that fails (the API server away, a conflict) is tried again on its own,
//! with a doubling delay, not only when something else happens: a session that is stable after
//! an outage would otherwise never be reported.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube_ovn_support::{AbortOnDrop, Watched};

use super::peers::PeerPlan;
use super::{PeerSet, Runtime};
use crate::crd::{AdvertisedCounts, BgpPeer, PeerTarget, ValidateSpec, ValidatedPeer};
use crate::driver::unnumbered::{self, Neighbour};

/// The plan for a validated `BgpPeer` toward `address`; the MD5 key already read from its
/// Secret.
pub fn plan(
    rt: &Runtime,
    name: &str,
    peer: &ValidatedPeer,
    address: IpAddr,
    md5_key: Option<Vec<u8>>,
) -> Result<PeerPlan, String> {
    super::peers::from_bgp_peer(&rt.config, rt.restarting, name, peer, address, md5_key)
}

/// How soon a BgpPeer whose `peerInterface` is missing is tried again.
const INTERFACE_RETRY: Duration = Duration::from_secs(10);

/// The routers heard on the interfaces of unnumbered BgpPeers (`spec.peerInterface`), one
/// listener per interface, each waking the task when its router's address changes.
#[derive(Default)]
struct Unnumbered {
    interfaces: BTreeMap<String, (Neighbour, AbortOnDrop<()>)>,
    changed: Arc<tokio::sync::Notify>,
}

impl Unnumbered {
    /// The router's address on `interface`, listening there from now on; an error when the
    /// interface cannot be listened on (it does not exist).
    async fn address(&mut self, rt: &Runtime, interface: &str) -> Result<Option<IpAddr>, String> {
        if let Some((n, _)) = self.interfaces.get(interface) {
            return Ok(n.address().map(IpAddr::V6));
        }
        let name = interface.to_owned();
        let neighbour = super::on_bgp(&rt.place, move || {
            Neighbour::start(&name, unnumbered::ADVERTISEMENT_PERIOD)
        })
        .await
        .map_err(|e| format!("spec.peerInterface: {interface}: {e}"))?;
        let mut watch = neighbour.watch();
        let changed = self.changed.clone();
        // Supervised like every helper of the run loop: a panic fails /livez.
        let forward = rt
            .supervisor
            .spawn_owned(format!("unnumbered {interface}"), async move {
                while watch.changed().await.is_ok() {
                    changed.notify_one();
                }
            });
        let address = neighbour.address().map(IpAddr::V6);
        self.interfaces.insert(interface.to_owned(), (neighbour, forward));
        Ok(address)
    }

    /// Stops listening on interfaces no wanted peer names.
    fn retain(&mut self, wanted: &BTreeSet<String>) {
        self.interfaces.retain(|i, _| wanted.contains(i));
    }
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

/// `status.nodes.<node>.state` of a BgpPeer whose spec cannot be used here.
const INVALID: &str = "Invalid";
/// ... and of an unnumbered BgpPeer whose router has not been heard yet.
const DISCOVERING: &str = "Discovering";

/// Status writes this task owes for BgpPeers that run no session here: `Invalid` with the
/// problem, `Discovering` while an unnumbered peer is not heard, or removal of this node's
/// entry. Kept until written; written once per change.
#[derive(Default)]
struct Owed {
    /// name → the state and message to report (`None`: remove this node's entry).
    due: BTreeMap<String, Option<(&'static str, String)>>,
    /// What was last written successfully, so an unchanged report is not written again.
    written: BTreeMap<String, Option<(&'static str, String)>>,
    failures: u32,
}

impl Owed {
    /// `Invalid` with `problem`, or (`None`) removal of the entry.
    fn report(&mut self, name: &str, problem: Option<String>) {
        self.report_state(name, problem.map(|p| (INVALID, p)));
    }

    fn report_state(&mut self, name: &str, report: Option<(&'static str, String)>) {
        if self.written.get(name) != Some(&report) {
            self.due.insert(name.to_owned(), report);
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
                Some((state, p)) => {
                    serde_json::json!({"status": {"nodes": {node: {"state": state, "lastError": p}}}})
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
    let mut unnumbered = Unnumbered::default();
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
                    if owed.written.get(&name) != Some(&Some((INVALID, e.to_string()))) {
                        tracing::warn!(bgp_peer = %name, error = %e, "invalid BgpPeer");
                    }
                    owed.report(&name, Some(e.to_string()));
                }
            }
        }
        // Where each wanted peer is now: its address, or the router heard on its interface.
        let interfaces: BTreeSet<String> = wanted
            .values()
            .filter_map(|(_, v)| match &v.target {
                PeerTarget::Interface(i) => Some(i.clone()),
                PeerTarget::Address(_) => None,
            })
            .collect();
        unnumbered.retain(&interfaces);
        let mut addresses: BTreeMap<String, Result<Option<IpAddr>, String>> = BTreeMap::new();
        for (name, (_, v)) in &wanted {
            let address = match &v.target {
                PeerTarget::Address(a) => Ok(Some(*a)),
                PeerTarget::Interface(i) => unnumbered.address(&rt, i).await,
            };
            addresses.insert(name.clone(), address);
        }
        // An interface that cannot be listened on (not there yet) makes no event when it
        // appears: look again after a while.
        let interface_missing = addresses.values().any(Result::is_err);
        // A changed spec, or an unnumbered router that came back with another address.
        let stale: Vec<String> = running
            .iter()
            .filter(|(name, (spec, address))| {
                wanted.get(*name).is_none_or(|(o, _)| &o.spec != spec)
                    || addresses.get(*name) != Some(&Ok(Some(*address)))
            })
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
            let address = match addresses.remove(&name) {
                Some(Ok(Some(a))) => a,
                Some(Ok(None)) => {
                    let waiting = format!(
                        "{}: no IPv6 Router Advertisement heard yet; waiting for the peer",
                        v.target
                    );
                    owed.report_state(&name, Some((DISCOVERING, waiting)));
                    continue;
                }
                Some(Err(e)) => {
                    owed.report(&name, Some(e));
                    continue;
                }
                None => continue,
            };
            if peers.contains(address) {
                let problem = format!("peer {address} is already configured on this node");
                owed.report(&name, Some(problem));
                continue;
            }
            let built = match md5_key(&rt.kube, &v).await {
                Ok(key) => plan(&rt, &name, &v, address, key),
                Err(e) => Err(e),
            };
            match built {
                Ok(plan) => match peers.add(&rt, plan, Some(name.clone())).await {
                    Ok(()) => {
                        owed.forget(&name);
                        running.insert(name, (object.spec.clone(), address));
                    }
                    Err(e) => owed.report(&name, Some(e.to_string())),
                },
                Err(e) => owed.report(&name, Some(e)),
            }
        }
        let mut retry = owed.flush(&api, &node_name).await;
        if interface_missing {
            retry = Some(retry.map_or(INTERFACE_RETRY, |r| r.min(INTERFACE_RETRY)));
        }
        tokio::select! {
            _ = p.changed() => {}
            _ = n.changed() => {}
            () = unnumbered.changed.notified() => {}
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
