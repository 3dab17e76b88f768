//! Services with real traffic: a cluster in network namespaces (real OVN, our controller, two
//! nodes with the real daemon and the userspace datapath) whose pods serve netexec; the test
//! writes Services and their EndpointSlices as kube-controller-manager would, and a client pod
//! asks the ClusterIP which backend answered (`/hostname`). No kube-proxy anywhere: every answer
//! went through the OVN load balancers on the client's switch.

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::egress::serve;
use common::{Cluster, TestPod};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_lab::netexec;
use kube_ovn_testkit::{Netns, wait_until_async};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const VIP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);

fn dp(ns: &Netns) -> Result<kube_ovn_dataplane::Netns> {
    Ok(kube_ovn_dataplane::Netns::open(ns.path())?)
}

/// A backend: netexec over HTTP on 8080 and UDP on 5353, answering its pod's name.
struct Backend {
    pod: TestPod,
    _tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn backend(pod: TestPod) -> Result<Backend> {
    let http = serve(&pod.netns, 8080, &pod.name)?;
    let socket = pod
        .netns
        .run(|| netexec::bind_udp(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 5353))))??;
    let name: Arc<str> = pod.name.as_str().into();
    let udp = tokio::spawn(async move {
        let _ = netexec::serve_udp(socket, name).await;
    });
    Ok(Backend {
        pod,
        _tasks: vec![http, udp],
    })
}

/// Creates or merges a namespaced object.
async fn put<K>(cluster: &Cluster, ns: &str, value: Value) -> Result<()>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::Serialize
        + serde::de::DeserializeOwned,
{
    let obj: K = serde_json::from_value(value)?;
    let api: Api<K> = Api::namespaced(cluster.kube.clone(), ns);
    let name = obj.meta().name.clone().context("a name")?;
    if api.get_opt(&name).await?.is_some() {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&obj))
            .await?;
    } else {
        api.create(&PostParams::default(), &obj).await?;
    }
    Ok(())
}

fn web_service(ns: &str, ip: Ipv4Addr, affinity: &str) -> Value {
    json!({"metadata": {"name": "web", "namespace": ns}, "spec": {"clusterIP": ip.to_string(),
        "clusterIPs": [ip.to_string()], "sessionAffinity": affinity,
        "ports": [{"name": "http", "port": 80, "targetPort": 8080},
                  {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 5353}]}})
}

/// The EndpointSlice of `web` with `ready` backends ready and `unready` not.
fn web_slice(ns: &str, ready: &[&Backend], unready: &[&Backend]) -> Value {
    let ep = |b: &Backend, ok: bool| {
        json!({"addresses": [b.pod.ip().to_string()], "conditions": {"ready": ok},
            "targetRef": {"kind": "Pod", "name": b.pod.name, "namespace": ns}})
    };
    let endpoints: Vec<Value> = ready
        .iter()
        .map(|b| ep(b, true))
        .chain(unready.iter().map(|b| ep(b, false)))
        .collect();
    json!({"metadata": {"name": "web-x", "namespace": ns, "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"},
                  {"name": "dns", "port": 5353, "protocol": "UDP"}]})
}

/// Who answers `GET /hostname` at `vip:80` from `client`, `n` times (a new connection, so a new
/// source port, each time); an error if any request gets no answer.
async fn hostnames(client: &TestPod, vip: IpAddr, n: usize) -> Result<Vec<String>> {
    hostnames_in(&dp(&client.netns)?, &client.name, vip, n).await
}

/// As [`hostnames`], from the namespace `ns` (of the host called `who`).
async fn hostnames_in(
    ns: &kube_ovn_dataplane::Netns,
    who: &str,
    vip: IpAddr,
    n: usize,
) -> Result<Vec<String>> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let answer = netexec::http_get_in(ns, SocketAddr::new(vip, 80), "/hostname", Duration::from_secs(3))
            .await
            .with_context(|| format!("request {i} of {n} from {who} to {vip}:80"))?;
        out.push(answer.body);
    }
    Ok(out)
}

/// Waits until every ovn-controller has the northbound's current state in its flows.
fn synced(cluster: &Cluster) -> Result<()> {
    cluster.ovn.nbctl(&["--wait=hv", "sync"]).map(drop)
}

/// Waits until `lb`'s VIPs satisfy `ok`, then until the chassis have them.
async fn nb_vips_until(cluster: &Cluster, lb: &str, what: &str, ok: impl Fn(&str) -> bool) -> Result<()> {
    let ok = &ok;
    wait_until_async(what, WAIT, || async move {
        Ok(ok(&cluster.ovn.nbctl(&["get", "Load_Balancer", lb, "vips"])?))
    })
    .await?;
    synced(cluster)
}

fn distinct(names: &[String]) -> BTreeSet<&str> {
    names.iter().map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_ip_balances_over_both_nodes_follows_its_endpoints_and_pins_with_affinity() -> Result<()> {
    let cluster = Cluster::start(2, &[]).await?;
    let b1 = backend(cluster.pod("svc", "b1", 0, &[]).await?)?;
    let b2 = backend(cluster.pod("svc", "b2", 1, &[]).await?)?;
    let client = cluster.pod("svc", "client", 1, &[]).await?;
    put::<Service>(&cluster, "svc", web_service("svc", VIP, "None")).await?;
    put::<EndpointSlice>(&cluster, "svc", web_slice("svc", &[&b1, &b2], &[])).await?;
    nb_vips_until(
        &cluster,
        "cluster-tcp-loadbalancer",
        "the VIP with both backends",
        |v| v.contains(&format!("{}:8080", b1.pod.ip())) && v.contains(&format!("{}:8080", b2.pod.ip())),
    )
    .await?;

    // Node 2's pod reaches backends on both nodes.
    let seen = hostnames(&client, VIP.into(), 50).await?;
    ensure!(
        distinct(&seen) == BTreeSet::from(["b1", "b2"]),
        "50 requests were answered by {:?}",
        distinct(&seen)
    );

    // UDP: the same VIP on port 53 answers from the backends' 5353.
    let ns = dp(&client.netns)?;
    let mut udp = BTreeSet::new();
    for _ in 0..30 {
        udp.insert(
            netexec::udp_request_in(
                &ns,
                SocketAddr::new(VIP.into(), 53),
                "hostname",
                Duration::from_secs(3),
            )
            .await?,
        );
    }
    ensure!(
        udp == BTreeSet::from(["b1".to_owned(), "b2".to_owned()]),
        "30 UDP requests were answered by {udp:?}"
    );

    // Scale up: b3 gets traffic. Scale down: b1 (still serving) gets none.
    let b3 = backend(cluster.pod("svc", "b3", 0, &[]).await?)?;
    put::<EndpointSlice>(&cluster, "svc", web_slice("svc", &[&b1, &b2, &b3], &[])).await?;
    nb_vips_until(&cluster, "cluster-tcp-loadbalancer", "b3 added", |v| {
        v.contains(&format!("{}:8080", b3.pod.ip()))
    })
    .await?;
    let seen = hostnames(&client, VIP.into(), 50).await?;
    ensure!(
        distinct(&seen) == BTreeSet::from(["b1", "b2", "b3"]),
        "after scaling up, 50 requests were answered by {:?}",
        distinct(&seen)
    );
    put::<EndpointSlice>(&cluster, "svc", web_slice("svc", &[&b2, &b3], &[&b1])).await?;
    nb_vips_until(&cluster, "cluster-tcp-loadbalancer", "b1 removed", |v| {
        !v.contains(&format!("{}:8080", b1.pod.ip()))
    })
    .await?;
    let seen = hostnames(&client, VIP.into(), 50).await?;
    ensure!(
        !seen.iter().any(|h| h == "b1"),
        "b1 answered after it left: {seen:?}"
    );

    // sessionAffinity ClientIP: one client, one backend, 20 times out of 20.
    put::<Service>(&cluster, "svc", web_service("svc", VIP, "ClientIP")).await?;
    nb_vips_until(
        &cluster,
        "cluster-tcp-session-loadbalancer",
        "the VIP in the session LB",
        |v| v.contains(&format!("{VIP}:80")),
    )
    .await?;
    let seen = hostnames(&client, VIP.into(), 20).await?;
    ensure!(
        distinct(&seen).len() == 1,
        "with ClientIP affinity 20 requests were answered by {:?}",
        distinct(&seen)
    );

    // No ready endpoint: no answer at all, not a stale backend.
    put::<EndpointSlice>(&cluster, "svc", web_slice("svc", &[], &[&b1, &b2, &b3])).await?;
    nb_vips_until(
        &cluster,
        "cluster-tcp-session-loadbalancer",
        "the VIP gone",
        |v| !v.contains(&VIP.to_string()),
    )
    .await?;
    for _ in 0..3 {
        let r = netexec::http_get_in(
            &ns,
            SocketAddr::new(VIP.into(), 80),
            "/hostname",
            Duration::from_secs(1),
        )
        .await;
        ensure!(r.is_err(), "a Service without endpoints answered: {r:?}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_custom_vpcs_service_answers_its_vpc_only() -> Result<()> {
    let cluster = Cluster::start(2, &[]).await?;
    cluster.namespace("nsv").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "vpc1"},
            "spec": {"namespaces": ["nsv"]}}),
        )
        .await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "s1"},
            "spec": {"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv"]}}),
        )
        .await?;
    let b = backend(cluster.pod("nsv", "vb", 0, &[]).await?)?;
    let inside = cluster.pod("nsv", "inside", 1, &[]).await?;
    let outside = cluster.pod("default", "other", 1, &[]).await?;
    let vip = Ipv4Addr::new(10, 96, 0, 30);
    put::<Service>(&cluster, "nsv", web_service("nsv", vip, "None")).await?;
    put::<EndpointSlice>(&cluster, "nsv", web_slice("nsv", &[&b], &[])).await?;
    nb_vips_until(&cluster, "vpc-vpc1-tcp-load", "the VIP in vpc1's LB", |v| {
        v.contains(&format!("{vip}:80"))
    })
    .await?;
    let seen = hostnames(&inside, vip.into(), 5).await?;
    ensure!(distinct(&seen) == BTreeSet::from(["vb"]), "{seen:?}");
    let ns = dp(&outside.netns)?;
    for _ in 0..3 {
        let r = netexec::http_get_in(
            &ns,
            SocketAddr::new(vip.into(), 80),
            "/hostname",
            Duration::from_secs(1),
        )
        .await;
        ensure!(
            r.is_err(),
            "a pod of the default VPC reached vpc1's Service: {r:?}"
        );
    }
    Ok(())
}

/// A pod's IPv6 address from its CNI result.
fn ipv6_of(pod: &TestPod) -> Result<IpAddr> {
    Ok(pod.result["ips"][1]["address"]
        .as_str()
        .context("an IPv6 address in the result")?
        .split('/')
        .next()
        .unwrap_or_default()
        .parse()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_stack_service_answers_on_its_ipv6_cluster_ip() -> Result<()> {
    let cluster = Cluster::start_with(common::Options {
        nodes: 1,
        controller_flags: vec![
            "--default-cidr=10.16.0.0/16,fd00:10:16::/112".into(),
            "--node-switch-cidr=100.64.0.0/16,fd00:100:64::/112".into(),
        ],
        dual_stack: true,
        ..common::Options::default()
    })
    .await?;
    let pod = cluster.pod("ds", "b6", 0, &[]).await?;
    let client = cluster.pod("ds", "c6", 0, &[]).await?;
    // One listener for both families ([::] without IPV6_V6ONLY).
    let listener = pod
        .netns
        .run(|| netexec::bind_tcp(SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, 8080))))??;
    let _server = tokio::spawn(async move {
        let _ = netexec::serve_http(listener, "b6".into()).await;
    });
    let (v4, v6) = (pod.ip(), ipv6_of(&pod)?);
    let vip6: IpAddr = "fd00:10:96::a".parse()?;
    put::<Service>(
        &cluster,
        "ds",
        json!({"metadata": {"name": "web", "namespace": "ds"}, "spec": {"clusterIP": VIP.to_string(),
            "clusterIPs": [VIP.to_string(), vip6.to_string()], "ipFamilies": ["IPv4", "IPv6"],
            "ipFamilyPolicy": "RequireDualStack",
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
    .await?;
    for (name, family, ip) in [("web-4", "IPv4", IpAddr::from(v4)), ("web-6", "IPv6", v6)] {
        put::<EndpointSlice>(
            &cluster,
            "ds",
            json!({"metadata": {"name": name, "namespace": "ds", "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": family, "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [{"addresses": [ip.to_string()], "targetRef": {"kind": "Pod", "name": "b6", "namespace": "ds"}}]}),
        )
        .await?;
    }
    nb_vips_until(&cluster, "cluster-tcp-loadbalancer", "both families' VIPs", |v| {
        v.contains(&format!("[{vip6}]:80"))
            && v.contains(&format!("[{v6}]:8080"))
            && v.contains(&format!("{VIP}:80"))
    })
    .await?;
    for vip in [IpAddr::from(VIP), vip6] {
        let seen = hostnames(&client, vip, 5).await?;
        ensure!(distinct(&seen) == BTreeSet::from(["b6"]), "{vip}: {seen:?}");
    }
    Ok(())
}

/// Who answers `GET /hostname` at `vip:80` from `client` over `n` new connections, each given
/// `timeout`: the answers, and how many got none.
async fn answers_and_silences(
    client: &TestPod,
    vip: IpAddr,
    n: usize,
    timeout: Duration,
) -> Result<(Vec<String>, usize)> {
    let ns = dp(&client.netns)?;
    let (mut answers, mut silent) = (Vec::new(), 0);
    for _ in 0..n {
        match netexec::http_get_in(&ns, SocketAddr::new(vip, 80), "/hostname", timeout).await {
            Ok(answer) => answers.push(answer.body),
            Err(_) => silent += 1,
        }
    }
    Ok((answers, silent))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_policy_toward_a_service_is_judged_by_the_backend_the_load_balancer_chose() -> Result<()> {
    // NetworkPolicy's "egress to a Service": OVN applies the egress ACLs after the load balancer
    // (`apply-after-lb`), so a policy that allows only backend b1 lets the client reach the
    // ClusterIP when b1 is chosen and not when b2 is, although no rule names the ClusterIP.
    let cluster = Cluster::start(2, &[]).await?;
    let b1 = backend(cluster.pod("svc", "b1", 0, &[]).await?)?;
    let b2 = backend(cluster.pod("svc", "b2", 1, &[]).await?)?;
    let client = cluster.pod("cli", "c", 1, &[]).await?;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(cluster.kube.clone(), "svc");
    for b in [&b1, &b2] {
        let labels = json!({"metadata": {"labels": {"app": b.pod.name}}});
        pods.patch(&b.pod.name, &PatchParams::default(), &Patch::Merge(&labels))
            .await?;
    }
    let vip = Ipv4Addr::new(10, 96, 0, 40);
    put::<Service>(&cluster, "svc", web_service("svc", vip, "None")).await?;
    put::<EndpointSlice>(&cluster, "svc", web_slice("svc", &[&b1, &b2], &[])).await?;
    nb_vips_until(
        &cluster,
        "cluster-tcp-loadbalancer",
        "the VIP with both backends",
        |v| v.contains(&format!("{vip}:80")) && v.contains(&b2.pod.ip().to_string()),
    )
    .await?;
    let before = hostnames(&client, vip.into(), 30).await?;
    ensure!(distinct(&before) == BTreeSet::from(["b1", "b2"]), "{before:?}");

    let policy = json!({"metadata": {"name": "only-b1", "namespace": "cli"},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"],
                 "egress": [{"to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"app": "b1"}}}]}]}});
    put::<k8s_openapi::api::networking::v1::NetworkPolicy>(&cluster, "cli", policy).await?;
    // In force once the client cannot reach b2's own address any more.
    let client_ns = dp(&client.netns)?;
    let b2_addr = SocketAddr::new(b2.pod.ip().into(), 8080);
    wait_until_async("the egress policy to keep the client from b2", WAIT, || {
        let client_ns = &client_ns;
        async move {
            Ok(
                netexec::http_get_in(client_ns, b2_addr, "/hostname", Duration::from_millis(500))
                    .await
                    .is_err(),
            )
        }
    })
    .await?;
    // 20 connections through the ClusterIP: those balanced to b1 answer, those to b2 do not
    // (each side missing with probability 2^-20).
    let (answers, silent) = answers_and_silences(&client, vip.into(), 20, Duration::from_millis(700)).await?;
    ensure!(
        distinct(&answers) == BTreeSet::from(["b1"]),
        "only b1 may answer through the ClusterIP: {answers:?}"
    );
    ensure!(
        silent > 0,
        "no connection met b2: it was never chosen, or the policy let it through"
    );
    ensure!(
        netexec::http_get_in(
            &client_ns,
            SocketAddr::new(b1.pod.ip().into(), 8080),
            "/hostname",
            Duration::from_secs(3)
        )
        .await
        .is_ok(),
        "b1 itself stays reachable"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_load_balancer_ip_from_outside_reaches_both_backends_through_either_node() -> Result<()> {
    // What BGP gives a ToR: a route to the LoadBalancer IP through a node. No kube-proxy: the
    // node routes it into ovn0 and masquerades it to its join address, the join switch's load
    // balancer picks a backend, and the reply comes back through the same node.
    let cluster = Cluster::start(2, &[]).await?;
    let outside = common::egress::Outside::attach(&cluster)?;
    let b1 = backend(cluster.pod("svc", "b1", 0, &[]).await?)?;
    let b2 = backend(cluster.pod("svc", "b2", 1, &[]).await?)?;
    let vip = Ipv4Addr::new(10, 96, 0, 50);
    let lb_ip = Ipv4Addr::new(203, 0, 113, 10);
    let mut svc = web_service("svc", vip, "None");
    svc["spec"]["type"] = json!("LoadBalancer");
    put::<Service>(&cluster, "svc", svc).await?;
    Api::<Service>::namespaced(cluster.kube.clone(), "svc")
        .patch_status(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip.to_string()}]}}})),
        )
        .await?;
    put::<EndpointSlice>(&cluster, "svc", web_slice("svc", &[&b1, &b2], &[])).await?;
    nb_vips_until(
        &cluster,
        "cluster-tcp-loadbalancer",
        "the LoadBalancer IP's VIP",
        |v| v.contains(&format!("{lb_ip}:80")) && v.contains(&b2.pod.ip().to_string()),
    )
    .await?;
    let on_join = cluster.ovn.nbctl(&["ls-lb-list", "join"])?;
    ensure!(
        on_join.contains("cluster-tcp-load"),
        "the join switch's LBs: {on_join}"
    );

    let ns = dp(&outside.netns)?;
    let target = SocketAddr::new(lb_ip.into(), 80);
    for node in 0..2 {
        outside.route(&format!("{lb_ip}/32"), common::underlay_ip(node))?;
        wait_until_async(
            &format!("the LoadBalancer IP answered through node {node}"),
            WAIT,
            || {
                let ns = &ns;
                async move {
                    Ok(
                        netexec::http_get_in(ns, target, "/hostname", Duration::from_secs(1))
                            .await
                            .is_ok(),
                    )
                }
            },
        )
        .await?;
        let seen = hostnames_in(&ns, "the outside host", lb_ip.into(), 40).await?;
        ensure!(
            distinct(&seen) == BTreeSet::from(["b1", "b2"]),
            "through node {node}, 40 requests: {seen:?}"
        );
        // The backend saw the node's join address: the masquerade that brings the reply back.
        let client = netexec::http_get_in(&ns, target, "/clientip", Duration::from_secs(3)).await?;
        let from = kube_ovn_lab::cluster::matrix::client_ip(&client.body);
        ensure!(
            from.is_some_and(|ip| ip.to_string().starts_with("100.64.")),
            "through node {node} the backend saw {}",
            client.body
        );
    }
    Ok(())
}
