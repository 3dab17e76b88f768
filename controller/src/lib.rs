//! kube-ovn-controller: translates Kubernetes objects into OVN's northbound database and hands
//! each pod its address, compatible with Kube-OVN.
//!
//! - [`config`]: flags (Kube-OVN's names) and their validation;
//! - [`ipam`]: pure address management;
//! - [`ovn`]: plans over the northbound replica (pure) and their application;
//! - [`reconcile`]: one reconciler per kind, start-up and garbage collection;
//! - [`sb`]: the southbound replica (which chassis holds each gateway port);
//! - [`run`]: the whole controller, for the binary and for in-process tests.

pub mod config;
pub mod context;
pub mod crash_point;
pub mod debug_ipam;
pub mod error;
pub mod informer;
pub mod ipam;
pub mod metrics;
pub mod ovn;
pub mod reconcile;
pub mod sb;
pub mod stores;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables};

use crate::config::Config;
use crate::context::Context;
use crate::error::{Doing, Error, Result};
use crate::informer::OwnWrites;
use crate::metrics::Metrics;
use crate::ovn::Nb;
use crate::reconcile::controllers::Controllers;
use crate::stores::Informers;
use kube_ovn_support::AbortOnDrop;
use kube_ovn_support::endpoints::Endpoints;

/// The northbound tables the controller reads and writes.
const NB_TABLES: &[&str] = &[
    "NB_Global",
    "Logical_Switch",
    "Logical_Switch_Port",
    "Logical_Router",
    "Logical_Router_Port",
    "Logical_Router_Static_Route",
    "Logical_Router_Policy",
    "ACL",
    "Address_Set",
    "Port_Group",
    "Gateway_Chassis",
    "NAT",
    "BFD",
    "Load_Balancer",
    "Meter",
    "Meter_Band",
];

/// The northbound client's settings: the configured remotes and timeouts.
fn nb_client_config(config: &Config) -> ClientConfig {
    let mut c = ClientConfig::new(config.nb_remotes.clone(), "OVN_Northbound").monitor(MonitorTables::Only(
        NB_TABLES.iter().map(|t| (*t).to_owned()).collect(),
    ));
    c.connect_timeout = config.ovsdb_connect_timeout;
    c.inactivity_probe = config.ovsdb_inactivity_probe;
    c.request_timeout = config.ovn_timeout;
    c
}

/// Connects to the northbound database with the configured remotes and timeouts.
pub async fn connect_nb(config: &Config) -> Result<Client> {
    Client::connect(nb_client_config(config))
        .await
        .doing("connect to the OVN northbound database")
}

/// Runs the controller until `shutdown` resolves (or leadership is lost, which ends it with an
/// error, as Kube-OVN's controller exits: a fresh process re-campaigns). Serves `/metrics` and
/// the health endpoints on `--bind-address`:`--pprof-port`.
pub async fn run(config: Config, kube: kube::Client, shutdown: impl Future<Output = ()>) -> Result<()> {
    let addr = config.metrics_addr;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Listen { addr, source })?;
    run_with_listener(config, kube, listener, shutdown).await
}

/// [`run`] with the metrics and health endpoints on a listener the caller bound (tests bind
/// port 0 and read the address before starting the controller).
pub async fn run_with_listener(
    config: Config,
    kube: kube::Client,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<()> {
    let metrics = Metrics::new();
    let ready = Arc::new(AtomicBool::new(false));
    let ipam_view = debug_ipam::IpamView::default();
    let debug = debug_ipam::router(ipam_view.clone(), ready.clone());
    // Started before the endpoints, so that readiness can say why there is no session.
    let nb = Client::start(nb_client_config(&config));
    // The southbound database is optional and not waited for: readiness does not depend on it,
    // and while it is unreachable only the gateway ports' chassis are unknown (logged).
    let sb = sb::Sb::start(&config);
    let _sb_log = AbortOnDrop::spawn(sb.clone().log_connection());
    // The long-lived tasks outside the run future (the northbound batcher): one that panics
    // fails /livez. The work in the run future needs none: a panic there ends the process.
    let supervisor = kube_ovn_support::Supervisor::new();
    let endpoints = {
        let (metrics, ready, nb) = (metrics.clone(), ready.clone(), nb.clone());
        let endpoints = Endpoints::new(
            move || {
                let metrics = metrics.clone();
                async move { metrics.encode() }
            },
            move || {
                // Without a northbound session nothing this replica decides reaches OVN.
                nb.readiness()?;
                // A follower is alive (`/healthz`) but idle; readiness says which replica works.
                if ready.load(Ordering::Relaxed) {
                    Ok(())
                } else {
                    Err("not the leader, or the caches are not synced yet".to_owned())
                }
            },
        );
        let endpoints = endpoints.supervised(&supervisor);
        if config.enable_metrics {
            endpoints
        } else {
            endpoints.without_metrics()
        }
    };
    // Dies with this future, also when it is aborted.
    let _server = AbortOnDrop::spawn(async move {
        if let Err(e) = endpoints.serve_with(listener, debug).await {
            tracing::error!(error = %e, "metrics endpoint failed");
        }
    });
    let mut shutdown = std::pin::pin!(shutdown);
    let nb = tokio::select! {
        r = nb.wait_ready(config.ovn_timeout) => {
            r.doing("connect to the OVN northbound database")?;
            Nb::supervised(nb, metrics.clone(), &supervisor)
        }
        () = &mut shutdown => return Ok(()),
    };
    let mut leadership = if config.leader_elect {
        tokio::select! {
            l = reconcile::leader::campaign(&config, &kube) => Some(l?),
            () = &mut shutdown => return Ok(()),
        }
    } else {
        None
    };
    let lost = async {
        match leadership.as_mut() {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        r = Box::pin(run_inner(config, kube, nb, sb, metrics, ready, ipam_view)) => r,
        () = lost => Err(Error::Lease("leadership lost".into())),
        () = &mut shutdown => Ok(()),
    };
    if let (Ok(()), Some(l)) = (&result, leadership) {
        l.release().await;
    }
    result
}

async fn run_inner(
    config: Config,
    kube: kube::Client,
    nb: Nb,
    sb: sb::Sb,
    metrics: Metrics,
    ready: Arc<AtomicBool>,
    ipam_view: debug_ipam::IpamView,
) -> Result<()> {
    // Start-up is idempotent and converges (each step looks before it writes), so an error (the
    // API server's 500 under load, a role not yet in the authorizer's cache) is retried here
    // rather than ending the process: a restart would only add the kubelet's back-off.
    while let Err(e) = reconcile::startup::init(&config, &kube, &nb).await {
        let delay = reconcile::retry_after(&e);
        tracing::warn!(error = %e, retry_in = ?delay, "start-up failed");
        tokio::time::sleep(delay).await;
    }

    let informers = Informers::new(&kube, &config);
    let stores = informers.stores();
    // Everything that acts on changes subscribes now, before the watches start, so it misses
    // nothing; what arrives before it runs waits in its queue (or, past the queue's bound, turns
    // into "look at everything", which the first run does anyway).
    let pod_writes = Arc::new(OwnWrites::default());
    let controllers = Controllers::new(&config, &informers, &stores, pod_writes.clone());
    let (pod_deletions, node_deletions) = (informers.pods.changes(), informers.nodes.changes());
    let np_deletions = informers.network_policies.changes();
    let work = async move {
        // A reconciler reading a cache still filling would take "absent" for "gone", and IPAM
        // must hold every recorded address before anyone allocates or releases.
        stores.synced().await?;
        let (ipam, _) = reconcile::ip::ipam_rebuild::rebuild_ipam(&config, &stores, &nb);
        let ctx = Arc::new(Context::new(config, kube, nb, metrics, stores, ipam, pod_writes).with_sb(sb));
        let weak = Arc::downgrade(&ctx);
        let _ = ipam_view.set(Box::new(move || {
            weak.upgrade()
                .map(|ctx| ctx.ipam().allocations())
                .unwrap_or_default()
        }));
        ready.store(true, Ordering::Relaxed);
        tracing::info!("kube-ovn-controller running");
        let c = ctx.clone();
        let gc_loop = async move {
            // At start, always: deletions made while no controller watched are found only here.
            let mut backoff = std::time::Duration::from_secs(1);
            while let Err(e) = reconcile::gc::collect(&c).await {
                tracing::warn!(error = %e, "garbage collection at start failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(std::time::Duration::from_secs(30));
            }
            let Some(every) = c.config.gc_interval else {
                return std::future::pending::<()>().await;
            };
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            loop {
                tick.tick().await;
                if let Err(e) = reconcile::gc::collect(&c).await {
                    tracing::warn!(error = %e, "garbage collection failed");
                }
            }
        };
        let c = ctx.clone();
        let counters_loop = async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Err(e) = reconcile::subnet::status::refresh_counters(&c).await {
                    tracing::debug!(error = %e, "subnet counters not refreshed");
                }
            }
        };
        futures::join!(
            controllers.run(ctx.clone()),
            reconcile::gc::watch_deletions(ctx.clone(), pod_deletions, node_deletions),
            reconcile::network_policy::watch_deletions(ctx.clone(), np_deletions),
            gc_loop,
            counters_loop,
        );
        Ok(())
    };
    // Boxed: the joined controllers are a large future, kept off the caller's stack.
    tokio::select! {
        () = informers.run() => Err(Error::NotReady("the watches ended".into())),
        r = Box::pin(work) => r,
    }
}
