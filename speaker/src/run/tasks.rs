//! The run loop's long-lived tasks: routes (watches → every peer's Adj-RIB-Out, refusals →
//! Warning events), BFD → BGP, and the metrics endpoint.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube_ovn_api::crd::{Ip, IptablesEIP, OvnEip, Subnet};
use kube_ovn_support::Watched;
use tokio::sync::watch;
use tokio::time::Instant;

use super::exports::{self, Exports, PolicyObjects};
use super::{PeerSet, Runtime};
use crate::announce::refusal::RefusalKey;
use crate::announce::report::ReportOnce;
use crate::announce::{self, Refusal, Scope};
use crate::bfd::BfdHandle;
use crate::config::Config;
use crate::driver::PeerHandle;
use crate::metrics::Snapshot;

/// The watched kinds announcements come from.
pub struct Objects {
    pub pods: Watched<Pod>,
    pub subnets: Watched<Subnet>,
    pub services: Watched<Service>,
    pub eips: Watched<IptablesEIP>,
    /// IP records: what the controller allocated to which pod.
    pub ips: Watched<Ip>,
    /// OvnEips: where each lives (`status.activateGateway`, the controller's).
    pub ovn_eips: Watched<OvnEip>,
    /// EndpointSlices: where a `Local` Service's ready endpoints are.
    pub endpoint_slices: Watched<EndpointSlice>,
}

/// Recomputes every peer's table on every change of a watched kind (or of the peer set, the
/// advertisements, Namespaces or BgpPeers: [`exports`]) and hands each peer its whole table;
/// the Adj-RIB-Out sends only the difference. A burst of events
/// is one pass: the tick receivers only say "changed since you last looked". Nothing is
/// marked ready (so no End-of-RIB goes out) before every cache has its first list.
/// `tables_handed` turns true after that first pass (`/readyz`). Each refusal that lasts is
/// logged and published as a Warning event on its object once ([`Reported`]).
pub async fn routes(
    config: Config,
    kube: kube::Client,
    peers: Arc<PeerSet>,
    objects: Objects,
    policy: PolicyObjects,
    mut exports: Exports,
    tables_handed: Arc<AtomicBool>,
) {
    let Objects {
        pods,
        subnets,
        services,
        eips,
        ips,
        ovn_eips,
        endpoint_slices,
    } = objects;
    let mut pod_changes = pods.changes();
    let mut subnet_changes = subnets.changes();
    let mut service_changes = services.changes();
    let mut eip_changes = eips.changes();
    let mut ip_changes = ips.changes();
    let mut ovn_eip_changes = ovn_eips.changes();
    let mut slice_changes = endpoint_slices.changes();
    let mut reported = Reported::new(kube, &config.flags.node_name);
    let mut peer_changes = peers.changes();
    let mut policy_changes = policy.changes();
    let wait = Duration::from_hours(1);
    for (synced, what) in [
        (pods.synced(wait).await, "pods"),
        (subnets.synced(wait).await, "subnets"),
        (services.synced(wait).await, "services"),
        (eips.synced(wait).await, "iptables-eips"),
        (ips.synced(wait).await, "ips"),
        (ovn_eips.synced(wait).await, "ovn-eips"),
        (endpoint_slices.synced(wait).await, "endpointslices"),
    ] {
        if !synced {
            tracing::warn!(what, "cache not filled within an hour; announcing what is there");
        }
    }
    for what in policy.synced(wait).await {
        tracing::warn!(what, "cache not filled within an hour; announcing what is there");
    }
    let mut first = true;
    loop {
        let (pods_now, subnets_now, services_now, eips_now, ips_now, ovn_eips_now) = (
            pods.all(),
            subnets.all(),
            services.all(),
            eips.all(),
            ips.all(),
            ovn_eips.all(),
        );
        let slices_now = endpoint_slices.all();
        let objects = announce::Objects {
            pods: &pods_now,
            subnets: &subnets_now,
            services: &services_now,
            eips: &eips_now,
            ips: &ips_now,
            ovn_eips: &ovn_eips_now,
            endpoint_slices: &slices_now,
        };
        let scope = Scope {
            node_name: &config.flags.node_name,
            announce_cluster_ip: config.flags.announce_cluster_ip,
            cluster_router: &config.flags.cluster_router,
            external_ip_cidrs: &config.flags.service_external_ip_cidrs,
        };
        let running = peers.all();
        let evaluation = exports.evaluate(&objects, &scope, &running, &policy);
        let desired = &evaluation.desired;
        for skipped in &desired.skipped {
            tracing::warn!(object = %skipped.object, error = %skipped.error, "not announced");
        }
        exports::hand_over(&running, &evaluation);
        let report_due = reported.report(&desired.refusals).await;
        if first {
            tracing::info!(
                annotated = desired.prefixes.len(),
                routes = evaluation.peers.values().map(BTreeMap::len).sum::<usize>(),
                "caches synced; initial table handed to every peer"
            );
            tables_handed.store(true, Ordering::Relaxed);
            first = false;
        }
        tokio::select! {
            _ = pod_changes.changed() => {}
            _ = subnet_changes.changed() => {}
            _ = service_changes.changed() => {}
            _ = eip_changes.changed() => {}
            _ = ip_changes.changed() => {}
            _ = ovn_eip_changes.changed() => {}
            _ = slice_changes.changed() => {}
            _ = peer_changes.changed() => {}
            () = policy.changed(&mut policy_changes) => {}
            () = tokio::time::sleep(config.flags.resync_period) => {}
            () = tokio::time::sleep_until(report_due.unwrap_or_else(Instant::now)), if report_due.is_some() => {}
        }
    }
}

/// How long a refusal must last before it is reported (see [`announce::report`]): the pod
/// and IP watches may show an honest pod's address a moment before its record.
const REPORT_AFTER: Duration = Duration::from_secs(5);

/// Publishes refusals as Warning events (and log lines), each once after it lasted
/// [`REPORT_AFTER`]. Each speaker reports what it would have announced itself (a `local` pod's
/// refusal only on its node), so a bad object makes at most one event per speaker, field and
/// reason.
struct Reported {
    recorder: Recorder,
    node: String,
    once: ReportOnce<RefusalKey>,
}

impl Reported {
    fn new(kube: kube::Client, node: &str) -> Self {
        let reporter = Reporter {
            controller: "kube-ovn-speaker".into(),
            instance: Some(node.to_owned()),
        };
        Reported {
            recorder: Recorder::new(kube, reporter),
            node: node.to_owned(),
            once: ReportOnce::new(REPORT_AFTER),
        }
    }

    /// Reports this pass's refusals that are due; returns when the next waiting one will be.
    async fn report(&mut self, refusals: &[Refusal]) -> Option<Instant> {
        let keys: Vec<RefusalKey> = refusals.iter().map(Refusal::key).collect();
        let due = self.once.pass(&keys, std::time::Instant::now());
        for i in due.now {
            self.publish(&refusals[i]).await;
        }
        due.next.map(Instant::from_std)
    }

    async fn publish(&self, refusal: &Refusal) {
        let object = refusal.object_name();
        let outcome = if refusal.reason.still_announced() {
            "announced, with a warning"
        } else {
            "not announced"
        };
        tracing::warn!(%object, field = %refusal.field, reason = %refusal.reason, message = %refusal.message, "{outcome}");
        let event = Event {
            type_: EventType::Warning,
            reason: refusal.reason.as_str().into(),
            note: Some(format!(
                "speaker on {}: {}: {}",
                self.node, refusal.field, refusal.message
            )),
            action: "Announce".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &refusal.object).await {
            tracing::debug!(%object, error = %e, "cannot publish event");
        }
    }
}

/// Ties a peer's BGP session to its BFD session: BFD failing brings the session down (Cease
/// 6/10, routes withdrawn by the peer); BFD Up again lets it reconnect.
pub async fn bfd(handle: PeerHandle, peer: IpAddr, mut status: watch::Receiver<crate::bfd::Status>) {
    let mut last = *status.borrow();
    while status.changed().await.is_ok() {
        let now = *status.borrow();
        if now.is_failure_after(&last) {
            tracing::warn!(%peer, diag = ?now.diag, "BFD down: bringing the BGP session down");
            let _ = handle.bfd_down();
        } else if now.state == crate::bfd::State::Up && last.state != crate::bfd::State::Up {
            tracing::info!(%peer, "BFD up");
            let _ = handle.bfd_up();
        }
        last = now;
    }
}

/// `/metrics` (refreshed from every peer at each scrape), `/healthz`, `/livez`, and `/readyz`
/// (ready once the caches synced and every peer was handed its initial table).
pub fn metrics_endpoints(
    rt: Arc<Runtime>,
    peers: Arc<PeerSet>,
    tables_handed: Arc<AtomicBool>,
) -> kube_ovn_support::endpoints::Endpoints {
    let scrape = move || {
        let (rt, peers) = (rt.clone(), peers.clone());
        async move {
            // Reading the namespace's counters enters it on a short-lived thread and joins it:
            // blocking work, kept off the async workers.
            let netns = rt.place.netns.clone();
            let md5 = tokio::task::spawn_blocking(move || {
                kube_ovn_dataplane::tcp_md5::Md5Counters::read_in(&netns)
            })
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
            let all = peers.all();
            let snapshot = Snapshot {
                peers: all
                    .iter()
                    .map(|p| {
                        (
                            p.plan.config.address,
                            p.handle.status(),
                            p.bfd.as_ref().map(BfdHandle::status),
                        )
                    })
                    .collect(),
                md5,
                bfd_server: all
                    .iter()
                    .any(|p| p.bfd.is_some())
                    .then(|| rt.bfd.counters().into()),
                bfd_sessions: all
                    .iter()
                    .filter_map(|p| {
                        p.bfd
                            .as_ref()
                            .map(|b| (p.plan.config.address, b.counters().into()))
                    })
                    .collect(),
            };
            rt.metrics.refresh(&snapshot);
            rt.metrics.encode()
        }
    };
    kube_ovn_support::endpoints::Endpoints::new(scrape, move || {
        if tables_handed.load(Ordering::Relaxed) {
            Ok(())
        } else {
            Err("caches not synced yet: no routes handed to the peers".to_owned())
        }
    })
}
