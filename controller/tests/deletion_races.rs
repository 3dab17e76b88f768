//! Issue 16: a pod deleted at the wrong moment left its port, IP CR and address behind until the
//! next periodic collection (6 minutes by default; here an hour, so none runs). Each test drives
//! one interleaving on purpose — the controller's API traffic held and released by the test
//! (`common::gate`), or a reconcile called by the test with the copy it was handed — and then
//! waits, bounded, for nothing of the pod to remain: no northbound port, no port-group
//! membership, no IP CR, no address in IPAM.

mod common;
mod netkit;

use std::sync::Arc;
use std::time::Duration;

use common::gate::{Traffic, Verb};
use common::{Env, ann, remains_in_cluster, remains_of};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use kube::runtime::reflector::ObjectRef;
use kube_ovn_api::names;
use kube_ovn_controller::context::Context;
use kube_ovn_controller::informer::OwnWrites;
use kube_ovn_controller::metrics::Metrics;
use kube_ovn_controller::ovn::Nb;
use kube_ovn_controller::reconcile::ip::ipam_rebuild::rebuild_ipam;
use kube_ovn_controller::stores::Informers;
use kube_ovn_lab::kubernetes::fixture::ApiServerOptions;
use kube_ovn_support::AbortOnDrop;
use kube_ovn_testkit::wait_until_async;
use netkit::{http_get, metric};

const NS: &str = "race";
const SUBNET: &str = "ovn-default";
/// No periodic collection during a test: what is released is released by the mechanism.
const NO_PERIODIC_GC: &str = "--gc-interval=3600";
/// Well inside the hour, well above a loaded machine's few seconds.
const RELEASED_WITHIN: Duration = Duration::from_secs(30);

/// A routed pod on `n1`, and its address.
async fn routed_pod(env: &Env, name: &str) -> String {
    env.pod(NS, name, "n1", &[]).await;
    let pod = env.routed(NS, name).await;
    ann(&pod, "ip_address").to_owned()
}

/// Deletes the pod for good: with no kubelet to finish a graceful deletion, the test deletes it
/// as the kubelet would once its containers are gone (grace period 0).
async fn delete(env: &Env, name: &str) {
    Api::<Pod>::namespaced(env.kube.clone(), NS)
        .delete(name, &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
}

async fn wait_released(env: &Env, name: &str, ip: &str, why: &str) {
    let key = format!("{name}.{NS}");
    let what = format!("pod {NS}/{name} ({ip}) to be released {why}");
    let released = wait_until_async(&what, RELEASED_WITHIN, || async {
        let left = remains_of(env, &key, SUBNET, ip).await?;
        anyhow::ensure!(left.is_empty(), "left: {}", left.join(", "));
        Ok(true)
    })
    .await;
    if let Err(e) = released {
        panic!("{e:#}");
    }
}

/// The controller starts: its pod cache lists `pa`, and `pa` is deleted before the controller
/// sees the deletion. The start-up collection then runs over a cache that still holds `pa` (it
/// finds `pz`, deleted while no controller ran, so it has passed `pa`: keys are collected in
/// order), and only then does the pod watch deliver the deletion. Before the fix the deletions
/// came from a second watch that listed only after start-up, when `pa` was already gone, so
/// nothing ever reported `pa` deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_the_controller_starts_is_released() {
    let mut env = Env::start_with(&[NO_PERIODIC_GC]).await;
    env.node("n1", "172.18.0.2").await;
    let ip_a = routed_pod(&env, "pa").await;
    let ip_z = routed_pod(&env, "pz").await;
    env.kill_controller().await;
    delete(&env, "pz").await;

    let traffic = Traffic::new(&env);
    // Start-up waits for every cache: the IP CRs' list is held, so the controller waits there.
    let ip_list = traffic.gate(Verb::List, "/apis/kubeovn.io/v1/ips");
    // The pods are listed, but the watch that would report changes since is held.
    let pod_list = traffic.gate(Verb::List, "/api/v1/pods");
    pod_list.open();
    let pod_watch = traffic.gate(Verb::Watch, "/api/v1/pods");
    let controller = env.spawn_controller_on(traffic.client(&env), &[]);
    wait_until_async("the controller to list the pods", RELEASED_WITHIN, || {
        std::future::ready(Ok(pod_list.answered() >= 1))
    })
    .await
    .unwrap();
    delete(&env, "pa").await;
    ip_list.open();
    wait_released(&env, "pz", &ip_z, "by the collection at start").await;
    pod_watch.open();
    wait_released(&env, "pa", &ip_a, "once the watch reports its deletion").await;
    controller.task.abort();
}

/// The pod watch breaks (a dropped connection), `pa` is deleted meanwhile and the server's
/// history is compacted, so watching again gets 410 Gone and the controller lists anew: the
/// deletion never arrives as an event, `pa` is just missing from the new list. Before the fix
/// the reflector swapped its cache and nothing released `pa`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_deleted_while_the_watch_is_down_is_released_after_the_relist() {
    // Watches served straight from etcd, not from the API server's watch cache: a watch resuming
    // from a compacted revision gets 410 Gone, as after a long disconnection.
    let options = ApiServerOptions {
        watch_cache: false,
        ..ApiServerOptions::with_crds()
    };
    let env = Env::start_idle_with(options, &[NO_PERIODIC_GC]).await;
    let traffic = Traffic::new(&env);
    let controller = env.spawn_controller_on(traffic.client(&env), &[]);
    env.node("n1", "172.18.0.2").await;
    let ip_a = routed_pod(&env, "pa").await;
    let ip_b = routed_pod(&env, "pb").await;

    let pod_watch = traffic.gate(Verb::Watch, "/api/v1/pods");
    traffic.cut_watches("/api/v1/pods");
    wait_until_async("the controller to watch the pods again", RELEASED_WITHIN, || {
        std::future::ready(Ok(pod_watch.seen() >= 1))
    })
    .await
    .unwrap();
    delete(&env, "pa").await;
    env.server.etcd().unwrap().compact().unwrap();
    pod_watch.open();
    wait_released(&env, "pa", &ip_a, "after the relist").await;
    // It was a relist: the watch resumed from a compacted revision got 410 Gone, and the pods
    // were listed a second time.
    let lists = env.requests_where(|r| r.starts_with("GET /api/v1/pods?") && !r.contains("watch=true"));
    assert!(lists.len() >= 2, "the pods listed once only: {lists:?}");
    // The pod that stayed keeps everything.
    let mut left = remains_of(&env, &format!("pb.{NS}"), SUBNET, &ip_b)
        .await
        .unwrap();
    left.sort();
    assert_eq!(
        left,
        [
            format!("IP CR pb.{NS}"),
            format!("address {ip_b} held in IPAM of {SUBNET} (status.v4usingIPrange)"),
            format!("membership of port group {}", names::node_port_group("n1")),
            format!(
                "membership of port group {}",
                names::subnet_node_port_group(SUBNET, "n1")
            ),
            format!("northbound port pb.{NS}"),
        ]
    );
    controller.task.abort();
}

/// A reconcile is handed the cache's copy of `pa`; before it gets to run, `pa` is deleted, the
/// cache drops it and its release runs to the end. Then the reconcile runs with its copy. Before
/// the fix it wrote the port and the address back for a pod that no longer existed (the copy
/// already carried every annotation, so no patch failed to tell it), and nothing removed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconcile_holding_a_copy_from_before_the_deletion_writes_nothing_back() {
    let mut env = Env::start_with(&[NO_PERIODIC_GC]).await;
    env.node("n1", "172.18.0.2").await;
    let ip_a = routed_pod(&env, "pa").await;
    env.kill_controller().await;

    // A controller context of the test's own, over watches of its own, and no reconciler: the
    // test decides when the reconcile runs.
    let config = env.flags().validate().unwrap();
    let nb = Nb::new(
        kube_ovn_controller::connect_nb(&config).await.unwrap(),
        Metrics::new(),
    );
    let kube = env.kube.clone();
    let informers = Informers::new(&kube, &config);
    let stores = informers.stores();
    let _watches = AbortOnDrop::spawn(informers.run());
    tokio::time::timeout(Duration::from_mins(1), stores.synced())
        .await
        .expect("the test's caches listed within a minute")
        .unwrap();
    let (ipam, _) = rebuild_ipam(&config, &stores, &nb);
    let ctx = Arc::new(Context::new(
        config,
        kube,
        nb,
        Metrics::new(),
        stores,
        ipam,
        Arc::new(OwnWrites::default()),
    ));
    let key = format!("pa.{NS}");
    let holds = |ctx: &Context| ctx.ipam().keys(SUBNET).contains(&key);
    assert!(holds(&ctx), "IPAM rebuilt with pa's address");

    let pa = ObjectRef::new("pa").within(NS);
    let copy = ctx.stores.pods.get(&pa).unwrap();
    delete(&env, "pa").await;
    wait_until_async("the pod cache to drop pa", Duration::from_secs(30), || async {
        Ok(ctx.stores.pods.get(&pa).is_none())
    })
    .await
    .unwrap();
    kube_ovn_controller::reconcile::pod::deleted(&ctx, &copy)
        .await
        .unwrap();
    assert_eq!(
        remains_in_cluster(&env, &key).await.unwrap(),
        Vec::<String>::new()
    );
    assert!(!holds(&ctx), "the release freed {ip_a}");

    kube_ovn_controller::reconcile::pod::reconcile(copy, ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        remains_in_cluster(&env, &key).await.unwrap(),
        Vec::<String>::new(),
        "the late reconcile wrote pa's records back"
    );
    assert!(!holds(&ctx), "the late reconcile took {ip_a} again");
}

const TXNS: &str = "kube_ovn_controller_ovsdb_transaction_duration_seconds_count";

/// Northbound transactions of `what` that failed, by the controller's metrics.
async fn failed(addr: std::net::SocketAddr, whats: &[&str]) -> anyhow::Result<f64> {
    let text = http_get(addr, "/metrics").await?.1;
    Ok(whats
        .iter()
        .map(|w| metric(&text, TXNS, &["result=\"error\"", &format!("what=\"{w}\"")]))
        .sum())
}

/// A process stopped with SIGSTOP until dropped (SIGCONT), so a failing test never leaves it
/// stopped.
struct Stopped(u32);

impl Stopped {
    fn signal(pid: u32, sig: &str) {
        let status = std::process::Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .expect("kill(1)");
        assert!(status.success(), "kill {sig} {pid}");
    }

    fn new(pid: u32) -> Self {
        Self::signal(pid, "-STOP");
        Self(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        Self::signal(self.0, "-CONT");
    }
}

/// A pod's port write reaches a northbound server too slow to answer within `--ovn-timeout`
/// (stopped with SIGSTOP): the reconcile gives up on it, but the server still holds the
/// transaction and commits it when it resumes. The pod is deleted in between, and its release
/// runs while the server is still stopped. Before the fix the release read the replica (no port
/// yet), removed nothing, deleted the IP CR and freed the address; the late commit then left a
/// port, with an address IPAM could hand to another pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_port_write_the_server_commits_after_the_release_is_removed_too() {
    let env = Env::start_with(&[
        NO_PERIODIC_GC,
        "--ovn-timeout=1",
        // Longer than the server is stopped: the connection stays, the transaction in it too.
        "--ovsdb-inactivity-timeout=120",
    ])
    .await;
    env.node("n1", "172.18.0.2").await;
    env.namespace(NS).await;
    let metrics = env.metrics_addr.unwrap();
    let key = format!("pa.{NS}");
    let ips: Api<kube_ovn_api::crd::Ip> = Api::all(env.kube.clone());

    let stopped = Stopped::new(env.ovn.nb.pid().expect("NB runs"));
    env.pod(NS, "pa", "n1", &[]).await;
    // The port and the IP CR are written together: once the IP CR is there, the port's
    // transaction is with the server; then it times out.
    wait_until_async(
        "pa's IP CR and its port write to time out",
        RELEASED_WITHIN,
        || async {
            Ok(ips.get_opt(&key).await?.is_some() && failed(metrics, &["pod", "batch"]).await? >= 1.0)
        },
    )
    .await
    .unwrap();
    delete(&env, "pa").await;
    // The release has acted while the server is still stopped: it deleted the IP CR (before the
    // fix), or it is waiting for the server to answer what was sent before it.
    wait_until_async("pa's release to act", RELEASED_WITHIN, || async {
        Ok(ips.get_opt(&key).await?.is_none() || failed(metrics, &["barrier"]).await? >= 1.0)
    })
    .await
    .unwrap();
    drop(stopped);
    let released = wait_until_async("pa to be released", RELEASED_WITHIN, || async {
        let mut left = remains_in_cluster(&env, &key).await?;
        let (code, body) = http_get(metrics, "/debug/ipam").await?;
        anyhow::ensure!(code == 200, "/debug/ipam: {code}");
        if body.contains(&format!("\"{key}\"")) {
            left.push(format!("{key} in IPAM (/debug/ipam)"));
        }
        anyhow::ensure!(left.is_empty(), "left: {}", left.join(", "));
        Ok(true)
    })
    .await;
    if let Err(e) = released {
        panic!("{e:#}");
    }
}
