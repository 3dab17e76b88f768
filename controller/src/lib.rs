//! kube-ovn-controller: translates Kubernetes objects into OVN's northbound database and hands
//! each pod its address, compatible with Kube-OVN.
//!
//! - [`config`]: flags (Kube-OVN's names) and their validation;
//! - [`ipam`]: pure address management;
//! - [`ovn`]: plans over the northbound replica (pure) and their application;
//! - [`reconcile`]: one reconciler per kind, start-up and garbage collection;
//! - [`run`]: the whole controller, for the binary and for in-process tests.

pub mod config;
pub mod context;
pub mod error;
pub mod ipam;
pub mod metrics;
pub mod ovn;
pub mod reconcile;
pub mod server;
pub mod stores;
pub mod task;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{WatchStreamExt, watcher};
use kube_ovn_api::crd::{IPPool, Ip, Subnet, Vpc};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables};

use crate::config::Config;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::metrics::Metrics;
use crate::ovn::Nb;
use crate::reconcile::{all_refs, controller, drive, error_policy, instrumented};
use crate::stores::Stores;
use crate::task::AbortOnDrop;

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
];

/// Connects to the northbound database with the configured remotes and timeouts.
pub async fn connect_nb(config: &Config) -> Result<Client> {
    let mut c = ClientConfig::new(config.nb_remotes.clone(), "OVN_Northbound").monitor(MonitorTables::Only(
        NB_TABLES.iter().map(|t| (*t).to_owned()).collect(),
    ));
    c.connect_timeout = config.ovsdb_connect_timeout;
    c.inactivity_probe = config.ovsdb_inactivity_probe;
    c.request_timeout = config.ovn_timeout;
    Ok(Client::connect(c).await?)
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
    let health = server::Health {
        metrics: metrics.clone(),
        ready: ready.clone(),
        enable_metrics: config.enable_metrics,
    };
    // Dies with this future, also when it is aborted.
    let _server = AbortOnDrop::spawn(async move {
        if let Err(e) = server::serve(listener, health).await {
            tracing::error!(error = %e, "metrics endpoint failed");
        }
    });
    let mut shutdown = std::pin::pin!(shutdown);
    let nb = tokio::select! {
        nb = connect_nb(&config) => Nb::new(nb?, metrics.clone()),
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
        r = Box::pin(run_inner(config, kube, nb, metrics, ready)) => r,
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
    metrics: Metrics,
    ready: Arc<AtomicBool>,
) -> Result<()> {
    reconcile::startup::init(&config, &kube, &nb).await?;

    let workers = config.worker_num;
    let (vpcs, vpcs_synced) = controller::<Vpc>(&kube, workers);
    let (subnets, subnets_synced) = controller::<Subnet>(&kube, workers);
    let (ippools, ippools_synced) = controller::<IPPool>(&kube, workers);
    let (namespaces, namespaces_synced) = controller::<Namespace>(&kube, workers);
    let (nodes, nodes_synced) = controller::<Node>(&kube, workers);
    let (pods, pods_synced) = controller::<Pod>(&kube, config.pod_workers);
    let (ips_ctl, ips_synced) = controller::<Ip>(&kube, 1);
    let (subnet_nodes, subnet_nodes_writer) = kube::runtime::reflector::store::<Node>();
    let stores = Stores {
        pods: pods.store(),
        nodes: nodes.store(),
        subnet_nodes,
        namespaces: namespaces.store(),
        subnets: subnets.store(),
        vpcs: vpcs.store(),
        ippools: ippools.store(),
        ips: ips_ctl.store(),
        synced: vec![
            vpcs_synced,
            subnets_synced,
            ippools_synced,
            namespaces_synced,
            nodes_synced,
            pods_synced,
            ips_synced,
        ],
    };
    let ctx = Arc::new(Context::new(config, kube.clone(), nb, metrics, stores.clone()));

    // Relations: who must look again when something else changes.
    let (s2, s3, s4, s5) = (
        stores.subnets.clone(),
        stores.namespaces.clone(),
        stores.namespaces.clone(),
        stores.namespaces.clone(),
    );
    // A VPC's status lists its subnets, and its deletion waits for them.
    let cluster_router = ctx.config.cluster_router.clone();
    let vpcs = vpcs.watches(
        kube::Api::<Subnet>::all(kube.clone()),
        watcher::Config::default(),
        move |subnet| Some(reconcile::vpc::vpc_of_subnet(&cluster_router, &subnet)),
    );
    // Every subnet looks again when a node changes (gateways, node port groups), reading nodes
    // from the cache this very watch fills first.
    let node_changes = kube::runtime::reflector(
        subnet_nodes_writer,
        watcher(
            kube::Api::<Node>::all(kube.clone()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff(),
    )
    .touched_objects()
    .filter_map(|r| std::future::ready(r.ok().map(|_: Node| ())));
    let subnets = subnets.reconcile_all_on(node_changes).watches(
        kube::Api::<Vpc>::all(kube.clone()),
        watcher::Config::default(),
        move |_| all_refs(&s2),
    );
    let namespaces = namespaces
        .watches(
            kube::Api::<Subnet>::all(kube.clone()),
            watcher::Config::default(),
            move |_| all_refs(&s3),
        )
        .watches(
            kube::Api::<IPPool>::all(kube.clone()),
            watcher::Config::default(),
            move |_| all_refs(&s4),
        )
        .watches(
            kube::Api::<Vpc>::all(kube.clone()),
            watcher::Config::default(),
            move |_| all_refs(&s5),
        );
    let pods_by_subnet = stores.pods.clone();
    let pods = pods.watches(
        kube::Api::<Subnet>::all(kube.clone()),
        watcher::Config::default(),
        move |subnet| {
            // Pods waiting for this subnet (their logical_switch names it, or none is set yet).
            let name = subnet.name_any();
            pods_by_subnet
                .state()
                .iter()
                .filter(|p| {
                    let ls = p
                        .annotations()
                        .get(kube_ovn_api::annotations::keys::LOGICAL_SWITCH);
                    ls.is_none_or(|l| *l == name)
                        && p.annotations()
                            .get(kube_ovn_api::annotations::keys::ROUTED)
                            .is_none()
                })
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        },
    );

    let c = ctx.clone();
    let gc_loop = async move {
        // A collection over caches still filling would take every pod for gone.
        if c.ready().await.is_err() {
            return;
        }
        ready.store(true, Ordering::Relaxed);
        tracing::info!("kube-ovn-controller running");
        let Some(every) = c.config.gc_interval else {
            return std::future::pending::<()>().await;
        };
        let mut tick = tokio::time::interval(every);
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
            if let Err(e) = reconcile::subnet_status::refresh_counters(&c).await {
                tracing::debug!(error = %e, "subnet counters not refreshed");
            }
        }
    };
    let controllers = async {
        futures::join!(
            drive(
                "Vpc",
                vpcs.run(
                    |o, c| instrumented(reconcile::vpc::KIND, o, c, reconcile::vpc::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            drive(
                "Subnet",
                subnets.run(
                    |o, c| instrumented(reconcile::subnet::KIND, o, c, reconcile::subnet::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            drive(
                "IPPool",
                ippools.run(
                    |o, c| instrumented(reconcile::ippool::KIND, o, c, reconcile::ippool::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            drive(
                "Namespace",
                namespaces.run(
                    |o, c| instrumented(reconcile::namespace::KIND, o, c, reconcile::namespace::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            drive(
                "Node",
                nodes.run(
                    |o, c| instrumented(reconcile::node::KIND, o, c, reconcile::node::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            drive(
                "Pod",
                pods.run(
                    |o, c| instrumented(reconcile::pod::KIND, o, c, reconcile::pod::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            drive(
                "IP",
                ips_ctl.run(
                    |o, c| instrumented(reconcile::ip_cr::KIND, o, c, reconcile::ip_cr::reconcile),
                    error_policy,
                    ctx.clone()
                )
            ),
            reconcile::gc::watch_deletions(ctx.clone()),
            gc_loop,
            counters_loop,
        );
    };
    // Boxed: the joined controllers are a large future, kept off the caller's stack.
    Box::pin(controllers).await;
    Ok(())
}
