//! Operating the controller: leader election between replicas (a crashed leader is replaced once
//! its lease runs out, a stopped one at once), the metrics and health endpoints, and the life of a
//! node (join address, port, policy route, port group, IP CR — and all of it gone with the node).

#![allow(
    clippy::float_cmp,
    reason = "the counters and gauges compared here are whole numbers, exact in an f64"
)]

mod common;
mod netkit;

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use common::process::Binary;
use common::{Env, WAIT, ann};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::{Ip, Subnet};
use kube_ovn_testkit::wait_until_async;
use netkit::{http_get, metric, nb_get, nb_until, subnet_until};
use serde_json::json;

const LEASE_NS: &str = "kube-system";
const LEASE: &str = "kube-ovn-controller";
const TXNS: &str = "kube_ovn_controller_ovsdb_transaction_duration_seconds_count";

/// Leader-election flags with a short lease, so a test waits seconds, not half a minute.
fn elect(lease_secs: u64, renew_secs: u64) -> [String; 4] {
    [
        "--leader-elect=true".into(),
        format!("--leader-elect-lease-duration={lease_secs}s"),
        format!("--leader-elect-renew-deadline={renew_secs}s"),
        "--leader-elect-retry-period=1s".into(),
    ]
}

async fn status_of(addr: SocketAddr, path: &str) -> u16 {
    http_get(addr, path).await.unwrap().0
}

async fn metrics_of(addr: SocketAddr) -> String {
    let (code, body) = http_get(addr, "/metrics").await.unwrap();
    assert_eq!(code, 200, "/metrics: {body}");
    body
}

fn leases(env: &Env) -> Api<Lease> {
    Api::namespaced(env.kube.clone(), LEASE_NS)
}

fn holder(lease: Option<&Lease>) -> Option<String> {
    lease?.spec.as_ref()?.holder_identity.clone()
}

/// Waits until the Lease is held by one of `candidates`, and returns the holder.
async fn wait_holder(env: &Env, candidates: &[&str], within: Duration) -> String {
    let api = &leases(env);
    let seen = &std::sync::Mutex::new(None);
    let waited = wait_until_async(
        &format!("one of {candidates:?} to hold the lease"),
        within,
        || async move {
            let h = holder(api.get_opt(LEASE).await?.as_ref());
            let ok = h.as_deref().is_some_and(|h| candidates.contains(&h));
            *seen.lock().unwrap() = h;
            Ok(ok)
        },
    )
    .await;
    let seen = seen.lock().unwrap().clone();
    if let Err(e) = waited {
        panic!("{e}; the holder is {seen:?}");
    }
    seen.unwrap()
}

/// `<mac> <ip>` of a switch port, or empty when there is no such port.
fn port_addresses(env: &Env, port: &str) -> String {
    let name = format!("name={port}");
    env.ovn
        .nbctl(&[
            "--bare",
            "--columns=addresses",
            "find",
            "Logical_Switch_Port",
            &name,
        ])
        .unwrap()
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_writes_and_a_follower_takes_over_after_a_crash() {
    const LEASE_SECS: u64 = 5;
    let flags = elect(LEASE_SECS, 3);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let env = Env::start_idle(&flags).await;
    env.namespace(LEASE_NS).await;
    // Both campaign at once; exactly one wins.
    let mut a = Some(env.spawn_controller(&["--pod-name=ctl-a"]));
    let mut b = Some(env.spawn_controller(&["--pod-name=ctl-b"]));
    let leader_name = wait_holder(&env, &["ctl-a", "ctl-b"], WAIT).await;
    let (leader, follower) = if leader_name == "ctl-a" {
        (a.take().unwrap(), b.take().unwrap())
    } else {
        (b.take().unwrap(), a.take().unwrap())
    };
    let follower_name = if leader_name == "ctl-a" { "ctl-b" } else { "ctl-a" };
    env.node("n1", "172.18.0.2").await;
    env.pod("ops", "before", "n1", &[]).await;
    let before = env.routed("ops", "before").await;
    assert_eq!(
        port_addresses(&env, "before.ops"),
        format!("{} {}", ann(&before, "mac_address"), ann(&before, "ip_address"))
    );
    // The leader did that; the follower wrote nothing and says it is not ready.
    assert!(metric(&metrics_of(leader.metrics_addr).await, TXNS, &[]) > 0.0);
    assert_eq!(status_of(leader.metrics_addr, "/readyz").await, 200);
    let follower_txns = metric(&metrics_of(follower.metrics_addr).await, TXNS, &[]);
    assert!(
        follower_txns == 0.0,
        "the follower wrote to NB: {follower_txns} transactions"
    );
    assert_eq!(status_of(follower.metrics_addr, "/readyz").await, 503);
    assert_eq!(status_of(follower.metrics_addr, "/healthz").await, 200);
    assert_eq!(
        holder(leases(&env).get_opt(LEASE).await.unwrap().as_ref()).as_deref(),
        Some(leader_name.as_str()),
        "the lease changed hands with both replicas up"
    );

    // A crash: the leader's task is aborted, nothing is released.
    leader.task.abort();
    let _ = tokio::time::timeout(WAIT, leader.task)
        .await
        .expect("the aborted leader's task to end");
    let killed = Instant::now();
    let last = leases(&env).get(LEASE).await.unwrap().spec.unwrap();
    assert_eq!(last.holder_identity.as_deref(), Some(leader_name.as_str()));
    // Work that arrives while nobody leads.
    env.pod("ops", "after1", "n1", &[]).await;
    env.pod("ops", "after2", "n1", &[]).await;
    // The follower takes over once the lease has run out: within its duration, plus its retry
    // period and the lease manager's random pause (up to 1 s) before it grabs an expired lease.
    let bound = Duration::from_secs(LEASE_SECS + 3);
    wait_holder(&env, &[follower_name], bound + Duration::from_secs(2)).await;
    let took = killed.elapsed();
    assert!(
        took <= bound,
        "the follower took over after {took:?} (lease {LEASE_SECS}s)"
    );
    // ... and not before the crashed leader's lease had expired.
    let now = leases(&env).get(LEASE).await.unwrap().spec.unwrap();
    let renewed = last.renew_time.expect("renewTime").0;
    let acquired = now.acquire_time.expect("acquireTime").0;
    let expired_at = renewed + Duration::from_secs(LEASE_SECS);
    assert!(
        acquired >= expired_at,
        "taken over at {acquired} while the old lease ran until {expired_at}"
    );
    for name in ["after1", "after2"] {
        let pod = env.routed("ops", name).await;
        assert_eq!(
            port_addresses(&env, &format!("{name}.ops")),
            format!("{} {}", ann(&pod, "mac_address"), ann(&pod, "ip_address")),
            "{name}'s port"
        );
        assert_ne!(ann(&pod, "ip_address"), ann(&before, "ip_address"));
    }
    assert_eq!(status_of(follower.metrics_addr, "/readyz").await, 200);
    assert!(metric(&metrics_of(follower.metrics_addr).await, TXNS, &[]) > 0.0);
    follower.task.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_stop_hands_the_lease_over_at_once() {
    // A long lease: a follower that waited for it to run out would take 20 s.
    const LEASE_SECS: u64 = 20;
    let flags = elect(LEASE_SECS, 15);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let env = Env::start_idle(&[]).await;
    env.namespace(LEASE_NS).await;
    let mut bin = Binary::new(&env, &flags);
    let a = bin.spawn("ctl-a", &[]).await;
    wait_holder(&env, &["ctl-a"], WAIT).await;
    let mut b = bin.spawn("ctl-b", &[]).await;
    env.node("n1", "172.18.0.2").await;
    assert_eq!(status_of(b.metrics_addr, "/readyz").await, 503);
    // SIGTERM, as Kubernetes stops a pod: the process releases the lease and exits.
    let pid = a.pid();
    let stopping = Instant::now();
    a.stop(Duration::from_secs(10));
    eprintln!("ctl-a (pid {pid}) exited after {:?}", stopping.elapsed());
    let fast = Duration::from_secs(5);
    wait_holder(&env, &["ctl-b"], fast).await;
    let took = stopping.elapsed();
    assert!(
        took < Duration::from_secs(LEASE_SECS / 2),
        "ctl-b took over after {took:?}"
    );
    env.pod("ops", "p", "n1", &[]).await;
    let pod = env.routed("ops", "p").await;
    assert_eq!(
        port_addresses(&env, "p.ops"),
        format!("{} {}", ann(&pod, "mac_address"), ann(&pod, "ip_address"))
    );
    assert!(b.is_running(), "ctl-b exited:\n{}", b.log_tail(20));
    assert_eq!(status_of(b.metrics_addr, "/readyz").await, 200);
    b.stop(Duration::from_secs(10));
    let released = leases(&env).get(LEASE).await.unwrap();
    assert_eq!(
        holder(Some(&released)),
        None,
        "ctl-b kept the lease after a clean stop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_endpoints() {
    let flags = elect(5, 3);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let env = Env::start_idle(&flags).await;
    // Someone else leads: this controller is alive but not ready, and writes nothing.
    env.namespace(LEASE_NS).await;
    let now = k8s_openapi::jiff::Timestamp::now();
    let lease: Lease = serde_json::from_value(json!({"metadata": {"name": LEASE, "namespace": LEASE_NS},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 3600,
                 "acquireTime": now.to_string(), "renewTime": now.to_string()}}))
    .unwrap();
    leases(&env).create(&PostParams::default(), &lease).await.unwrap();
    let c = env.spawn_controller(&["--pod-name=ctl"]);
    let addr = c.metrics_addr;
    wait_until_async("/healthz to answer 200", WAIT, || async move {
        Ok(http_get(addr, "/healthz").await?.0 == 200)
    })
    .await
    .unwrap();
    // Two retry periods, looking all the time: never ready, no transaction.
    let watching = Instant::now();
    while watching.elapsed() < Duration::from_secs(2) {
        assert_eq!(status_of(addr, "/readyz").await, 503, "ready without the lease");
        assert!(
            metric(&metrics_of(addr).await, TXNS, &[]) == 0.0,
            "wrote without the lease"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The other leader lets go (as a clean stop does): this one leads within a retry period or so.
    leases(&env)
        .patch(
            LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"holderIdentity": null, "renewTime": null,
                "acquireTime": null, "leaseDurationSeconds": null}})),
        )
        .await
        .unwrap();
    wait_until_async("/readyz to answer 200", Duration::from_secs(10), || async move {
        Ok(http_get(addr, "/readyz").await?.0 == 200)
    })
    .await
    .unwrap();
    assert_eq!(status_of(addr, "/healthz").await, 200);

    env.node("n1", "172.18.0.2").await;
    env.namespace("nsm").await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "met"},
        "spec": {"cidrBlock": "10.70.0.0/24", "namespaces": ["nsm"]}}),
    )
    .await;
    env.subnet_ready("met").await;
    for p in ["x", "y", "z"] {
        env.pod("nsm", p, "n1", &[]).await;
        env.routed("nsm", p).await;
    }
    // A pod naming a subnet that does not exist: a failed reconcile.
    env.pod(
        "nsm",
        "bad",
        "n1",
        &[("ovn.kubernetes.io/logical_switch", "nope")],
    )
    .await;
    let errors = "kube_ovn_controller_reconcile_errors_total";
    wait_until_async("a Pod reconcile error to be counted", WAIT, || async move {
        Ok(metric(&http_get(addr, "/metrics").await?.1, errors, &["kind=\"Pod\""]) >= 1.0)
    })
    .await
    .unwrap();
    // The subnet's status and its gauges agree (the status is written from the same IPAM).
    let status = subnet_until(&env, "met", "three addresses in use", |s| {
        s.status.as_ref().and_then(|st| st.v4_using_ips).map(|c| c.0) == Some(3)
    })
    .await
    .status
    .unwrap();
    let m = wait_gauge(addr, "subnet_used_ip_count", "met", 3.0).await;
    let available = status.v4_available_ips.unwrap().0;
    assert_eq!(available, 250, "253 usable minus 3");
    let labels = [
        "subnet_name=\"met\"",
        "protocol=\"IPv4\"",
        "subnet_cidr=\"10.70.0.0/24\"",
    ];
    assert!(metric(&m, "subnet_available_ip_count", &labels) == 250.0, "{m}");
    assert!(metric(&m, "subnet_used_ip_count", &labels) == 3.0, "{m}");
    // Reconciles, their errors and latency per kind.
    let reconciles = "kube_ovn_controller_reconcile_total";
    let latency = "kube_ovn_controller_reconcile_duration_seconds";
    for kind in ["Pod", "Subnet", "Node", "Namespace", "Vpc"] {
        let k = format!("kind=\"{kind}\"");
        let n = metric(&m, reconciles, &[&k]);
        assert!(n >= 1.0, "no {kind} reconciles counted");
        assert!(
            metric(&m, &format!("{latency}_count"), &[&k]) == n,
            "{kind}: every reconcile is timed"
        );
        assert!(metric(&m, &format!("{latency}_sum"), &[&k]) > 0.0);
        assert!(
            metric(&m, &format!("{latency}_bucket"), &[&k, "le=\"+Inf\""]) == n,
            "{kind}: latency histogram buckets"
        );
    }
    assert!(metric(&m, reconciles, &["kind=\"Pod\""]) >= 4.0);
    // Northbound transactions: a latency histogram per purpose and result.
    let txns = metric(&m, TXNS, &["result=\"ok\""]);
    assert!(txns > 0.0, "no northbound transactions counted");
    let txn_buckets = metric(
        &m,
        "kube_ovn_controller_ovsdb_transaction_duration_seconds_bucket",
        &["result=\"ok\"", "le=\"+Inf\""],
    );
    assert!(txn_buckets == txns, "{txn_buckets} vs {txns}");
    // A deleted subnet's gauges go with it.
    for p in ["x", "y", "z", "bad"] {
        netkit::delete_pod(&env, "nsm", p).await;
    }
    Api::<Subnet>::all(env.kube.clone())
        .delete("met", &DeleteParams::default())
        .await
        .unwrap();
    wait_until_async("the deleted subnet's gauges to go", WAIT, || async move {
        Ok(!http_get(addr, "/metrics")
            .await?
            .1
            .contains("subnet_name=\"met\""))
    })
    .await
    .unwrap();
    c.task.abort();
}

/// Waits until the gauge of `subnet` reads `value`; returns the metrics text.
async fn wait_gauge(addr: SocketAddr, gauge: &str, subnet: &str, value: f64) -> String {
    let label = &format!("subnet_name=\"{subnet}\"");
    let last = &std::sync::Mutex::new(String::new());
    let waited = wait_until_async(
        &format!("{gauge} of {subnet} to be {value}"),
        WAIT,
        || async move {
            let text = http_get(addr, "/metrics").await?.1;
            let ok = metric(&text, gauge, &[label]) == value;
            *last.lock().unwrap() = text;
            Ok(ok)
        },
    )
    .await;
    let text = last.lock().unwrap().clone();
    if let Err(e) = waited {
        panic!("{e}; metrics:\n{text}");
    }
    text
}

/// A node's join address, checked against what Kube-OVN writes for it.
fn joined(env: &Env, node: &Node) -> Ipv4Addr {
    let name = node.name_any();
    let a = |k: &str| {
        node.annotations()
            .get(&format!("ovn.kubernetes.io/{k}"))
            .cloned()
            .unwrap_or_default()
    };
    let ip: Ipv4Addr = a("ip_address").parse().expect("ip_address");
    assert!(
        "100.64.0.0/16".parse::<ipnet::Ipv4Net>().unwrap().contains(&ip)
            && ip != Ipv4Addr::new(100, 64, 0, 1),
        "join address {ip}"
    );
    assert_eq!(a("cidr"), "100.64.0.0/16");
    assert_eq!(a("gateway"), "100.64.0.1");
    assert_eq!(a("logical_switch"), "join");
    assert_eq!(a("allocated"), "true");
    assert_eq!(a("port_name"), format!("node-{name}"));
    assert_eq!(
        port_addresses(env, &format!("node-{name}")),
        format!("{} {ip}", a("mac_address"))
    );
    ip
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_gets_its_join_port_route_and_group_and_loses_them_when_deleted() {
    let env = Env::start().await;
    let node = env.node("worker-1", "172.18.0.2").await;
    let other = env.node("worker-2", "172.18.0.3").await;
    let ip = joined(&env, &node);
    let other_ip = joined(&env, &other);
    assert_ne!(ip, other_ip);
    let ports = env.ovn.nbctl(&["lsp-list", "join"]).unwrap();
    assert!(ports.contains("(node-worker-1)"), "{ports}");
    let routes = ["lr-policy-list", "ovn-cluster"];
    nb_until(&env, &routes, "the node's 30000 policy", |o| {
        policy(o, "172.18.0.2", ip)
    })
    .await;
    // Port group `node.<node>` (dashes become dots), holding the node's port.
    let lsp_uuid = nb_get(&env, "Logical_Switch_Port", "node-worker-1", "_uuid");
    let pg = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=ports,external_ids",
            "find",
            "Port_Group",
            "name=node.worker.1",
        ])
        .unwrap();
    assert!(pg.contains(&lsp_uuid), "port group node.worker.1: {pg}");
    assert!(pg.contains("node=worker-1"), "{pg}");
    // Its IP CR.
    let ips: Api<Ip> = Api::all(env.kube.clone());
    let cr = ips.get("node-worker-1").await.unwrap();
    assert_eq!(cr.spec.v4_ip_address, Some(ip.to_string()));
    assert_eq!(cr.spec.subnet.as_deref(), Some("join"));
    assert_eq!(cr.spec.node_name.as_deref(), Some("worker-1"));
    let join_uses = |want: bool| {
        let ip = ip.to_string();
        move |s: &Subnet| {
            let range = s.status.as_ref().and_then(|st| st.v4_using_ip_range.clone());
            range.is_some_and(|r| ranges_contain(&r, &ip)) == want
        }
    };
    subnet_until(&env, "join", "the node's address in use", join_uses(true)).await;

    Api::<Node>::all(env.kube.clone())
        .delete("worker-1", &DeleteParams::default())
        .await
        .unwrap();
    let port_gone = {
        let env = &env;
        move || async move { Ok(port_addresses(env, "node-worker-1").is_empty()) }
    };
    wait_until_async("the node's port to go", WAIT, port_gone)
        .await
        .unwrap();
    nb_until(&env, &routes, "the node's policy to go", |o| {
        !o.contains("172.18.0.2") && policy(o, "172.18.0.3", other_ip)
    })
    .await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Port_Group"],
        "its port group to go",
        |o| !o.contains("node.worker.1") && o.contains("node.worker.2"),
    )
    .await;
    let cr_gone = {
        let ips = ips.clone();
        move || {
            let ips = ips.clone();
            async move { Ok(ips.get_opt("node-worker-1").await?.is_none()) }
        }
    };
    wait_until_async("the node's IP CR to go", WAIT, cr_gone)
        .await
        .unwrap();
    subnet_until(&env, "join", "the node's address released", join_uses(false)).await;
    // The other node keeps everything.
    assert!(ips.get_opt("node-worker-2").await.unwrap().is_some());
    let other = Api::<Node>::all(env.kube.clone()).get("worker-2").await.unwrap();
    assert_eq!(joined(&env, &other), other_ip);
}

/// Whether `lr-policy-list` shows the priority-30000 reroute of `node_ip` to `join`.
fn policy(out: &str, node_ip: &str, join: Ipv4Addr) -> bool {
    out.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.first() == Some(&"30000")
            && l.contains(&format!("ip4.dst == {node_ip} "))
            && f.contains(&"reroute")
            && f.last() == Some(&join.to_string().as_str())
    })
}

/// Whether a status range list (`a-b,c`) contains `ip`.
fn ranges_contain(ranges: &str, ip: &str) -> bool {
    let ip: Ipv4Addr = ip.parse().unwrap();
    ranges.split(',').filter(|p| !p.is_empty()).any(|part| {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        match (a.parse::<Ipv4Addr>(), b.parse::<Ipv4Addr>()) {
            (Ok(a), Ok(b)) => (a..=b).contains(&ip),
            _ => false,
        }
    })
}
