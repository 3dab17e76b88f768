//! What a node routes and NATs comes only from what the platform allows and the controller
//! established (issue 21), with real traffic, real nft and real `ip rule`s: ingress to a
//! Service's external IP is matched by its ports only, an external IP that is a node's, the
//! ToR's (a BgpPeer) or the API server's is refused with a Warning event and leaves the node's
//! routing alone, a pod annotated with the node's address gets no egress rule, and a restarted
//! daemon never takes its routes away.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::egress::{FAST_GATEWAY, OUTSIDE_IP, OUTSIDE_IP2, Outside, serve, veth_pair};
use common::{Cluster, Options, WAIT};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube_ovn_lab::netexec;
use kube_ovn_testkit::{Netns, run, wait_until_async};
use serde_json::{Value, json};

fn dp(ns: &Netns) -> Result<kube_ovn_dataplane::Netns> {
    Ok(kube_ovn_dataplane::Netns::open(ns.path())?)
}

async fn create<K>(cluster: &Cluster, ns: &str, value: Value) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let obj: K = serde_json::from_value(value)?;
    Api::<K>::namespaced(cluster.kube.clone(), ns)
        .create(&PostParams::default(), &obj)
        .await?;
    Ok(())
}

/// Who answers `GET /hostname` at `target` from `ns` within a second, if anyone.
async fn answer(ns: &kube_ovn_dataplane::Netns, target: SocketAddr) -> Option<String> {
    netexec::http_get_in(ns, target, "/hostname", Duration::from_secs(1))
        .await
        .ok()
        .map(|a| a.body)
}

/// Waits until `target` is answered from `ns` by `who`.
async fn wait_answer(ns: &kube_ovn_dataplane::Netns, target: SocketAddr, who: &str) -> Result<()> {
    wait_until_async(&format!("{target} answered by {who}"), WAIT, || async move {
        Ok(answer(ns, target).await.as_deref() == Some(who))
    })
    .await
}

/// Waits for a Warning event `reason` on the object `name` whose note contains every one of `words`.
async fn wait_event(cluster: &Cluster, reason: &str, name: &str, words: &[&str]) -> Result<()> {
    let events = Api::<Event>::all(cluster.kube.clone());
    let what = format!("a {reason} event on {name} saying {words:?}");
    let found = wait_until_async(&what, WAIT, || {
        let events = events.clone();
        async move {
            Ok(events.list(&ListParams::default()).await?.items.iter().any(|e| {
                e.type_.as_deref() == Some("Warning")
                    && e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                    && e.note
                        .as_deref()
                        .is_some_and(|n| words.iter().all(|w| n.contains(w)))
            }))
        }
    })
    .await;
    if found.is_err() {
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|e| e.note)
            .collect();
        return found.with_context(|| format!("the events: {notes:#?}"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_external_ip_reaches_the_service_on_its_ports_only_and_others_addresses_are_refused()
-> Result<()> {
    // The underlay is allowed too, so that only the guard stands between a tenant and the
    // node's, the ToR's and the API server's addresses there. The controller must allow the
    // address as well, or it makes no VIP of it.
    let allowed = "--service-external-ip-cidrs=198.51.100.0/24,172.30.0.0/24";
    let mut daemon_flags: Vec<String> = FAST_GATEWAY.iter().map(|f| (*f).to_owned()).collect();
    daemon_flags.push(allowed.to_owned());
    let cluster = Cluster::start_with(Options {
        nodes: 2,
        daemon_flags,
        controller_flags: vec![allowed.to_owned()],
        ..Options::default()
    })
    .await?;
    let outside = Outside::attach(&cluster)?;
    let node0 = cluster.nodes[0].ovs.netns();
    let node1_ip = cluster.nodes[1].internal_ip;

    // A host behind node 0's normal routing that owns the external IP and answers on every
    // port: what the address reaches when it is not the Service's.
    let external = Ipv4Addr::new(198, 51, 100, 7);
    let far = Netns::create("far")?;
    let veth = format!("f{}", std::process::id());
    veth_pair(node0.name(), &veth, far.name())?;
    node0.ip(&["addr", "add", "192.0.2.1/30", "dev", &veth])?;
    node0.ip(&["link", "set", &veth, "up"])?;
    far.ip(&["addr", "add", "192.0.2.2/30", "dev", "eth0"])?;
    far.ip(&["addr", "add", &format!("{external}/32"), "dev", "lo"])?;
    far.ip(&["link", "set", "eth0", "up"])?;
    far.ip(&["route", "add", "default", "via", "192.0.2.1"])?;
    node0.ip(&["route", "add", &format!("{external}/32"), "via", "192.0.2.2"])?;
    let _far80 = serve(&far, 80, "far")?;
    let _far8081 = serve(&far, 8081, "far")?;
    outside.route(&format!("{external}/32"), common::underlay_ip(0))?;
    let out = dp(&outside.netns)?;
    wait_answer(&out, SocketAddr::new(external.into(), 8081), "far").await?;

    // The ToR (a BgpPeer) and the API server (the kubernetes Service's endpoints) are the
    // outside host's two addresses, where it serves netexec on port 80.
    let peer: kube_ovn_api::bgp_peer::BgpPeer = serde_json::from_value(
        json!({"apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer", "metadata": {"name": "tor"},
               "spec": {"peerAddress": OUTSIDE_IP.to_string(), "peerASN": 65000}}),
    )?;
    Api::<kube_ovn_api::bgp_peer::BgpPeer>::all(cluster.kube.clone())
        .create(&PostParams::default(), &peer)
        .await?;
    create::<EndpointSlice>(
        &cluster,
        "default",
        json!({"metadata": {"name": "kubernetes", "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"}},
               "addressType": "IPv4", "endpoints": [{"addresses": [OUTSIDE_IP2.to_string()]}],
               "ports": [{"name": "https", "port": 80, "protocol": "TCP"}]}),
    )
    .await?;

    // A tenant's Service on port 80 with the allowed address and the three it may not have.
    let b1 = cluster.pod("tn", "b1", 1, &[]).await?;
    let _b1 = serve(&b1.netns, 8080, "b1")?;
    cluster.namespace("tn").await?;
    create::<Service>(
        &cluster,
        "tn",
        json!({"metadata": {"name": "web", "namespace": "tn"},
               "spec": {"clusterIP": "10.96.0.60", "clusterIPs": ["10.96.0.60"],
                        "externalIPs": [external.to_string(), OUTSIDE_IP.to_string(), node1_ip.to_string(), OUTSIDE_IP2.to_string()],
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await?;
    create::<EndpointSlice>(
        &cluster,
        "tn",
        json!({"metadata": {"name": "web-x", "namespace": "tn", "labels": {"kubernetes.io/service-name": "web"}},
               "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
               "endpoints": [{"addresses": [b1.ip().to_string()], "conditions": {"ready": true}}]}),
    )
    .await?;

    // The Service's port on the allowed address goes into OVN; any other port keeps the
    // node's routing and reaches the host behind it.
    wait_answer(&out, SocketAddr::new(external.into(), 80), "b1")
        .await
        .with_context(|| cluster.nodes[0].daemon.log_tail(30))?;
    for _ in 0..5 {
        ensure!(
            answer(&out, SocketAddr::new(external.into(), 80))
                .await
                .as_deref()
                == Some("b1")
        );
        ensure!(
            answer(&out, SocketAddr::new(external.into(), 8081))
                .await
                .as_deref()
                == Some("far"),
            "port 8081 of the external IP must not reach the Service"
        );
    }

    // Each refusal is a Warning event naming the field and why.
    for (field, why) in [
        ("spec.externalIPs[1]", "BGP peer tor".to_owned()),
        ("spec.externalIPs[2]", format!("node {}", cluster.nodes[1].name)),
        ("spec.externalIPs[3]", "API server".to_owned()),
    ] {
        wait_event(&cluster, "ServiceAddressRefused", "web", &[field, &why]).await?;
    }
    // And the node keeps its routing to them: its own connections to the ToR's and the API
    // server's port 80 reach them, not the Service; nothing in the tables names them.
    let n0 = dp(node0)?;
    for ip in [OUTSIDE_IP, OUTSIDE_IP2] {
        ensure!(
            answer(&n0, SocketAddr::new(ip.into(), 80)).await.as_deref() == Some("outside"),
            "node 0 lost {ip}:80"
        );
    }
    for node in &cluster.nodes {
        for chain in ["OVN-LB-INGRESS", "OVN-LB-INGRESS-OUTPUT"] {
            let rules = node
                .ovs
                .netns()
                .exec(&["nft", "list", "chain", "ip", "kube-ovn", chain])?;
            ensure!(rules.contains(&external.to_string()), "{}: {rules}", node.name);
            for ip in [OUTSIDE_IP, OUTSIDE_IP2, node1_ip] {
                ensure!(
                    !rules.contains(&ip.to_string()),
                    "{} marks {ip}: {rules}",
                    node.name
                );
            }
        }
        let routes = node.ovs.netns().ip(&["route", "show", "table", "all"])?;
        for ip in [OUTSIDE_IP, OUTSIDE_IP2, node1_ip, external] {
            ensure!(
                !routes.contains(&format!("{ip} via 100.64.")),
                "{}: {routes}",
                node.name
            );
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_annotated_with_the_nodes_address_gets_no_egress_rule() -> Result<()> {
    let cluster = Cluster::start(1, &FAST_GATEWAY).await?;
    let node0 = cluster.nodes[0].ovs.netns();
    let node_ip = cluster.nodes[0].internal_ip;
    // The egress router's network, so its table route can be added (no traffic is sent).
    node0.ip(&["link", "add", "egw0", "type", "veth", "peer", "name", "egw1"])?;
    node0.ip(&["addr", "add", "172.31.0.1/24", "dev", "egw0"])?;
    node0.ip(&["link", "set", "egw1", "up"])?;
    node0.ip(&["link", "set", "egw0", "up"])?;
    cluster.namespace("egw").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "egw"},
            "spec": {"cidrBlock": "10.22.0.0/16", "namespaces": ["egw"], "natOutgoing": false,
                     "externalEgressGateway": "172.31.0.254", "policyRoutingPriority": 1000,
                     "policyRoutingTableID": 1000}}),
        )
        .await?;
    let good = cluster.pod("egw", "good", 0, &[]).await?;
    let want = format!("from {} lookup 1000", good.ip());
    wait_until_async("the allocated pod's rule", WAIT, || async {
        Ok(node0.ip(&["rule", "show", "table", "1000"])?.contains(&want))
    })
    .await
    .with_context(|| cluster.nodes[0].daemon.log_tail(30))?;

    // The attacker writes the node's address, the subnet and `allocated` themselves.
    cluster
        .create_pod(
            "egw",
            "forged",
            0,
            &[
                ("ovn.kubernetes.io/ip_address", &node_ip.to_string()),
                ("ovn.kubernetes.io/logical_switch", "egw"),
                ("ovn.kubernetes.io/allocated", "true"),
            ],
        )
        .await?;
    wait_event(
        &cluster,
        "PodAddressRefused",
        "forged",
        &[
            "ovn.kubernetes.io/ip_address",
            &node_ip.to_string(),
            "is an address of node",
        ],
    )
    .await
    .with_context(|| cluster.nodes[0].daemon.log_tail(30))?;
    // The pass that reported it applied too; the next ones (1 s apart) must not add it either.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while tokio::time::Instant::now() < deadline {
        let rules = node0.ip(&["rule"])?;
        ensure!(!rules.contains(&format!("from {node_ip} ")), "{rules}");
        ensure!(rules.contains(&want), "the allocated pod keeps its rule: {rules}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_daemon_never_takes_its_routes_away() -> Result<()> {
    let mut cluster = Cluster::start(1, &FAST_GATEWAY).await?;
    let lb_ip = Ipv4Addr::new(203, 0, 113, 20);
    cluster.namespace("svc").await?;
    create::<Service>(
        &cluster,
        "svc",
        json!({"metadata": {"name": "lb", "namespace": "svc"},
               "spec": {"type": "LoadBalancer", "clusterIP": "10.96.0.70", "clusterIPs": ["10.96.0.70"],
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await?;
    Api::<Service>::namespaced(cluster.kube.clone(), "svc")
        .patch_status(
            "lb",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip.to_string()}]}}})),
        )
        .await?;
    let ns = cluster.nodes[0].ovs.netns().name().to_owned();
    let present = move || -> Result<Vec<&'static str>> {
        let ip = |args: &[&str]| -> Result<String> {
            let mut full = vec!["-n", ns.as_str()];
            full.extend_from_slice(args);
            Ok(run("ip", &full)?)
        };
        let mut missing = Vec::new();
        if !ip(&["route", "show", "dev", "ovn0"])?.contains("10.16.0.0/16 via 100.64.0.1") {
            missing.push("the default subnet's route");
        }
        if !ip(&["route", "show", "table", "4000150"])?.contains("default via 100.64.0.1") {
            missing.push("the LoadBalancer IP's table route");
        }
        if !ip(&["rule"])?.contains("fwmark 0x400000/0x400000 lookup 4000150") {
            missing.push("the LoadBalancer IP's rule");
        }
        let chain = run(
            "ip",
            &[
                "netns",
                "exec",
                ns.as_str(),
                "nft",
                "list",
                "chain",
                "ip",
                "kube-ovn",
                "OVN-LB-INGRESS",
            ],
        )?;
        if !chain.contains(&lb_ip.to_string()) {
            missing.push("the LoadBalancer IP's mark");
        }
        Ok(missing)
    };
    let check = present.clone();
    wait_until_async("the routes and the LoadBalancer IP's rule", WAIT, || {
        let check = check.clone();
        async move { Ok(check()?.is_empty()) }
    })
    .await
    .with_context(|| cluster.nodes[0].daemon.log_tail(30))?;

    // Poll from another thread while the daemon is killed, started again, lists and applies.
    let stop = Arc::new(AtomicBool::new(false));
    let polled = Arc::new(AtomicUsize::new(0));
    let watcher = {
        let (stop, polled) = (stop.clone(), polled.clone());
        std::thread::spawn(move || -> Result<usize> {
            while !stop.load(Ordering::Relaxed) {
                let missing = present()?;
                ensure!(missing.is_empty(), "during the restart, missing: {missing:?}");
                polled.fetch_add(1, Ordering::Relaxed);
                // A poll's pace, not a wait for anything: the poller looks as often as it can.
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(polled.load(Ordering::Relaxed))
        })
    };
    let node = &mut cluster.nodes[0];
    let applied = "egress NAT tables applied";
    let applied_before = node.daemon.log().matches(applied).count();
    node.restart_daemon()?;
    // The restarted daemon's first passes: its gateway task applies its tables once its caches
    // have listed (the node task waits for the same caches); then the poller looks 50 more times
    // (over a second, a gateway interval) while both tasks go on.
    wait_until_async("the restarted daemon's first egress apply", WAIT, || {
        let count = node.daemon.log().matches(applied).count();
        async move { Ok(count > applied_before) }
    })
    .await
    .with_context(|| node.daemon.log_tail(30))?;
    let seen = polled.load(Ordering::Relaxed);
    wait_until_async("50 more polls after the first apply", WAIT, || {
        // A poller that found something missing has ended: join it below for its error.
        let done = polled.load(Ordering::Relaxed) >= seen + 50 || watcher.is_finished();
        async move { Ok(done) }
    })
    .await?;
    node.daemon.check_alive()?;
    stop.store(true, Ordering::Relaxed);
    let polls = watcher
        .join()
        .map_err(|_| anyhow::anyhow!("the poller panicked"))?
        .with_context(|| cluster.nodes[0].daemon.log_tail(40))?;
    ensure!(polls > 10, "only {polls} polls during the restart");
    Ok(())
}
