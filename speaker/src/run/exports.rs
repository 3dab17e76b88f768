//! Each peer's export policy, for the routes task: the `BgpAdvertisement`s in effect
//! ([`super::advertisements`]), the Namespaces their selectors read and the BgpPeers' labels in;
//! [`policy::evaluate`] gives every peer its own table, which is handed to its Adj-RIB-Out whole
//! (`replace_all`: only differences go out, and a prefix whose attributes change is one UPDATE
//! that replaces it, never a withdraw first, RFC 4271 §3.1). The evaluation is also published
//! for `/bgp/routes`, counted by kind for `BgpPeer.status.nodes.<node>.advertised`, and each
//! advertisement's verdict and conflict go to the status task.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kube_ovn_api::bgp_advertisement::BgpAdvertisement;
use kube_ovn_support::Watched;
use tokio::sync::watch;

use super::RunningPeer;
use super::advertisements::{Kept, Report};
use crate::announce;
use crate::crd::{AdvertisedCounts, BgpPeer};
use crate::policy::{self, Evaluation, PeerRib, PeerView, PolicyInputs};

/// The watched kinds the policy reads beside the announced objects.
#[derive(Clone)]
pub struct PolicyObjects {
    pub advertisements: Watched<BgpAdvertisement>,
    pub namespaces: Watched<Namespace>,
    /// For the peers' labels (`peerSelector`): a label change re-evaluates without restarting
    /// the session.
    pub bgp_peers: Watched<BgpPeer>,
}

impl PolicyObjects {
    /// Waits for the first list of each (at most `wait`); names those that did not come.
    pub async fn synced(&self, wait: std::time::Duration) -> Vec<&'static str> {
        let mut late = Vec::new();
        for (synced, what) in [
            (self.advertisements.synced(wait).await, "bgpadvertisements"),
            (self.namespaces.synced(wait).await, "namespaces"),
            (self.bgp_peers.synced(wait).await, "bgppeers"),
        ] {
            if !synced {
                late.push(what);
            }
        }
        late
    }

    /// Wakes when any of them changed since the last call.
    pub async fn changed(&self, receivers: &mut [watch::Receiver<u64>; 3]) {
        let [a, n, p] = receivers;
        tokio::select! {
            _ = a.changed() => {}
            _ = n.changed() => {}
            _ = p.changed() => {}
        }
    }

    /// Receivers for [`PolicyObjects::changed`].
    pub fn changes(&self) -> [watch::Receiver<u64>; 3] {
        [
            self.advertisements.changes(),
            self.namespaces.changes(),
            self.bgp_peers.changes(),
        ]
    }
}

/// The routes task's policy state across passes.
pub struct Exports {
    kept: Kept,
    published: watch::Sender<Arc<Evaluation>>,
    reports: watch::Sender<Arc<Report>>,
}

impl Exports {
    /// With where the evaluations (for `/bgp/routes`) and the reports (for the status task) go.
    pub fn new(published: watch::Sender<Arc<Evaluation>>, reports: watch::Sender<Arc<Report>>) -> Self {
        Exports {
            kept: Kept::default(),
            published,
            reports,
        }
    }

    /// One evaluation over the objects as the caches hold them now.
    pub fn evaluate(
        &mut self,
        objects: &announce::Objects<'_>,
        scope: &announce::Scope<'_>,
        peers: &[Arc<RunningPeer>],
        policy: &PolicyObjects,
    ) -> Arc<Evaluation> {
        let pass = self.kept.update(&policy.advertisements.all());
        for (name, error) in &pass.newly_invalid {
            tracing::warn!(bgp_advertisement = %name, field = %error.field, error = %error.message,
                "invalid BgpAdvertisement: its previously accepted spec, if any, stays in effect");
        }
        let namespaces = policy.namespaces.all();
        let views = peer_views(peers, &policy.bgp_peers);
        let inputs = PolicyInputs {
            namespaces: &namespaces,
            advertisements: &pass.in_effect,
            peers: &views,
        };
        let evaluation = Arc::new(policy::evaluate(objects, scope, &inputs));
        let report = Report {
            verdicts: pass.verdicts,
            conflicts: evaluation.conflicts.clone(),
            refused: evaluation.refused.clone(),
        };
        self.reports.send_if_modified(|old| {
            let changed = **old != report;
            if changed {
                *old = Arc::new(report);
            }
            changed
        });
        self.published.send_replace(evaluation.clone());
        evaluation
    }
}

/// Who each running peer is for `peerSelector`: a BgpPeer's labels as the cache holds them now;
/// a flag peer has none.
pub fn peer_views(peers: &[Arc<RunningPeer>], bgp_peers: &Watched<BgpPeer>) -> Vec<PeerView> {
    peers
        .iter()
        .map(|p| PeerView {
            address: p.plan.config.address,
            name: p.name.clone(),
            labels: p
                .name
                .as_deref()
                .and_then(|n| bgp_peers.get(n, None))
                .and_then(|o| o.metadata.labels.clone())
                .unwrap_or_default(),
            defaults: p.plan.attributes.clone(),
            families: p.plan.config.session.families.clone(),
        })
        .collect()
}

/// Hands every peer its table, marks it ready (the first time: the table and End-of-RIB may
/// go), and updates its counts by kind.
pub fn hand_over(peers: &[Arc<RunningPeer>], evaluation: &Evaluation) {
    let empty = PeerRib::new();
    for peer in peers {
        let address = peer.plan.config.address;
        let rib = evaluation.peers.get(&address).unwrap_or(&empty);
        let routes = rib.iter().map(|(p, r)| (*p, (*r.attributes).clone()));
        if let Err(e) = peer.handle.replace_all(routes) {
            tracing::warn!(peer = %address, error = %e, "routes not handed to the peer");
        }
        if !peer.handle.status().ready
            && let Err(e) = peer.handle.set_ready()
        {
            tracing::warn!(peer = %address, error = %e, "set_ready failed");
        }
        let counts = counts(rib);
        peer.advertised.send_if_modified(|old| {
            let changed = *old != counts;
            if changed {
                old.clone_from(&counts);
            }
            changed
        });
    }
}

/// Routes of a table by kind.
pub fn counts(rib: &PeerRib) -> AdvertisedCounts {
    let mut counts = AdvertisedCounts::new();
    for route in rib.values() {
        *counts.entry(route.kind).or_default() += 1;
    }
    counts
}
