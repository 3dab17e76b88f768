//! `externalTrafficPolicy: Local` on the node's data path, with real traffic: two nodes (real
//! OVN, our controller and daemon, the userspace datapath), a backend on each, an outside host
//! on the underlay that reaches the LoadBalancer IP through one node or the other (what a ToR
//! does with the speakers' routes). The node DNATs to its own ready endpoint without
//! masquerading: the pod sees the outside host's address, and its reply returns through the
//! same node. A node without a ready endpoint drops the traffic; `Cluster` masquerades as before;
//! toward a centralized-gateway subnet `Local` masquerades too (the endpoint stays local).

mod common;

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::egress::{OUTSIDE_IP, Outside, serve};
use common::{Cluster, TestPod};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube_ovn_lab::cluster::matrix::client_ip;
use kube_ovn_lab::netexec;
use kube_ovn_testkit::wait_until_async;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const NS: &str = "loc";
const LB_IP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 20);
/// The LoadBalancer IP of the Service whose endpoint is in a centralized-gateway subnet.
const CENTRAL_LB_IP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 21);

fn dp(ns: &kube_ovn_testkit::Netns) -> Result<kube_ovn_dataplane::Netns> {
    Ok(kube_ovn_dataplane::Netns::open(ns.path())?)
}

/// The EndpointSlice of Service `service` in the backends' namespace, each backend `(pod, node
/// name, ready)`.
fn slice(service: &str, backends: &[(&TestPod, &str, bool)]) -> Value {
    let ns = backends.first().map_or(NS, |b| b.0.namespace.as_str());
    let endpoints: Vec<Value> = backends
        .iter()
        .map(|(pod, node, ready)| {
            json!({"addresses": [pod.ip().to_string()], "conditions": {"ready": ready},
                "nodeName": node, "targetRef": {"kind": "Pod", "name": pod.name, "namespace": ns}})
        })
        .collect();
    json!({"metadata": {"name": format!("{service}-x"), "namespace": ns, "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4", "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

async fn put_slice(cluster: &Cluster, value: Value) -> Result<()> {
    let slice: EndpointSlice = serde_json::from_value(value)?;
    let (ns, name) = (
        slice.metadata.namespace.clone().unwrap_or_default(),
        slice.metadata.name.clone().unwrap_or_default(),
    );
    let api: Api<EndpointSlice> = Api::namespaced(cluster.kube.clone(), &ns);
    if api.get_opt(&name).await?.is_some() {
        api.patch(&name, &PatchParams::default(), &Patch::Merge(&slice))
            .await?;
    } else {
        api.create(&PostParams::default(), &slice).await?;
    }
    Ok(())
}

/// A `Local` LoadBalancer Service `namespace/name`, port 80 to 8080, with ingress IP `lb_ip`.
async fn local_service(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    cluster_ip: &str,
    lb_ip: Ipv4Addr,
) -> Result<()> {
    let services: Api<Service> = Api::namespaced(cluster.kube.clone(), namespace);
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local", "clusterIP": cluster_ip,
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))?;
    services.create(&PostParams::default(), &svc).await?;
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": lb_ip.to_string()}]}}});
    services
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await?;
    Ok(())
}

/// `GET path` at `lb_ip:80` from the outside host, `timeout` each.
async fn get(outside: &Outside, lb_ip: Ipv4Addr, path: &str, timeout: Duration) -> Result<String> {
    let answer = netexec::http_get_in(
        &dp(&outside.netns)?,
        SocketAddr::new(lb_ip.into(), 80),
        path,
        timeout,
    )
    .await
    .with_context(|| format!("GET {path} at {lb_ip}:80 from the outside host"))?;
    Ok(answer.body)
}

/// Who answers, and from which address they saw the request, over `n` new connections.
async fn answers(
    outside: &Outside,
    lb_ip: Ipv4Addr,
    n: usize,
) -> Result<(BTreeSet<String>, BTreeSet<IpAddr>)> {
    let (mut names, mut seen) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..n {
        names.insert(get(outside, lb_ip, "/hostname", Duration::from_secs(3)).await?);
        let body = get(outside, lb_ip, "/clientip", Duration::from_secs(3)).await?;
        seen.insert(client_ip(&body).with_context(|| format!("an ip:port, not {body:?}"))?);
    }
    Ok((names, seen))
}

/// Sends the outside host's traffic for `lb_ip` through `node` and waits until something
/// answers there.
async fn through(cluster: &Cluster, outside: &Outside, lb_ip: Ipv4Addr, node: usize) -> Result<()> {
    outside.route(&format!("{lb_ip}/32"), common::underlay_ip(node))?;
    wait_until_async(
        &format!("an answer at {lb_ip} through node {node}"),
        WAIT,
        || async move {
            Ok(get(outside, lb_ip, "/hostname", Duration::from_secs(1))
                .await
                .is_ok())
        },
    )
    .await
    .with_context(|| cluster.nodes[node].daemon.log_tail(30))
}

/// Node `node`'s `OVN-LB-INGRESS` chain, as nft lists it.
fn ingress_chain(cluster: &Cluster, node: usize) -> Result<String> {
    cluster.nodes[node]
        .ovs
        .netns()
        .exec(&["nft", "list", "chain", "ip", "kube-ovn", "OVN-LB-INGRESS"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_keeps_the_client_address_and_only_local_endpoints_answer() -> Result<()> {
    let cluster = Cluster::start(2, &[]).await?;
    let outside = Outside::attach(&cluster)?;
    let b1 = cluster.pod(NS, "b1", 0, &[]).await?;
    let b2 = cluster.pod(NS, "b2", 1, &[]).await?;
    let _servers = [serve(&b1.netns, 8080, "b1")?, serve(&b2.netns, 8080, "b2")?];
    let (n0, n1) = (cluster.nodes[0].name.clone(), cluster.nodes[1].name.clone());
    local_service(&cluster, NS, "web", "10.96.0.60", LB_IP).await?;
    put_slice(&cluster, slice("web", &[(&b1, &n0, true), (&b2, &n1, true)])).await?;

    // Through each node: only that node's backend, and it sees the outside host itself.
    for (node, own) in [(0, "b1"), (1, "b2")] {
        through(&cluster, &outside, LB_IP, node).await?;
        let (names, seen) = answers(&outside, LB_IP, 10).await?;
        ensure!(
            names == BTreeSet::from([own.to_owned()]),
            "through node {node}, 10 requests were answered by {names:?}"
        );
        ensure!(
            seen == BTreeSet::from([IpAddr::from(OUTSIDE_IP)]),
            "through node {node} the backend saw {seen:?}, not the outside host {OUTSIDE_IP}"
        );
    }

    // b2 not ready: node 1 has no local endpoint and drops, it does not hand the traffic to b1.
    put_slice(&cluster, slice("web", &[(&b1, &n0, true), (&b2, &n1, false)])).await?;
    wait_until_async("node 1 to drop the Local port", WAIT, || async {
        Ok(ingress_chain(&cluster, 1)?.contains("tcp dport 80 drop"))
    })
    .await?;
    for i in 0..3 {
        let r = get(&outside, LB_IP, "/hostname", Duration::from_secs(1)).await;
        ensure!(
            r.is_err(),
            "request {i} through node 1 without a local endpoint: {r:?}"
        );
    }
    through(&cluster, &outside, LB_IP, 0).await?;
    let (names, seen) = answers(&outside, LB_IP, 5).await?;
    ensure!(
        names == BTreeSet::from(["b1".to_owned()]) && seen == BTreeSet::from([IpAddr::from(OUTSIDE_IP)]),
        "through node 0 after b2 left: {names:?} seen from {seen:?}"
    );

    // Cluster again: through node 1 both backends answer, masqueraded to node 1's join address.
    put_slice(&cluster, slice("web", &[(&b1, &n0, true), (&b2, &n1, true)])).await?;
    Api::<Service>::namespaced(cluster.kube.clone(), NS)
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"externalTrafficPolicy": "Cluster"}})),
        )
        .await?;
    wait_until_async("node 1 to route the port into ovn0 again", WAIT, || async {
        Ok(ingress_chain(&cluster, 1)?.contains("0x00400000"))
    })
    .await?;
    through(&cluster, &outside, LB_IP, 1).await?;
    let (names, seen) = answers(&outside, LB_IP, 20).await?;
    ensure!(
        names == BTreeSet::from(["b1".to_owned(), "b2".to_owned()]),
        "Cluster through node 1, 20 requests: {names:?}"
    );
    ensure!(
        seen.iter().all(|ip| ip.to_string().starts_with("100.64.")),
        "Cluster: the backends saw {seen:?}, not a join address"
    );

    // An endpoint in a centralized-gateway subnet (gateway node 0) on node 1: its reply would
    // leave OVN through node 0, so node 1 masquerades to its join address (Kube-OVN's rule for
    // `Local` traffic to such a subnet), and only node 1's endpoint answers.
    cluster.namespace("central").await?;
    cluster
        .apply(
            json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "central"},
            "spec": {"cidrBlock": "10.20.0.0/16", "namespaces": ["central"], "natOutgoing": true,
                     "gatewayType": "centralized", "gatewayNode": n0}}),
        )
        .await?;
    let c1 = cluster.pod("central", "c1", 1, &[]).await?;
    let _central_server = serve(&c1.netns, 8080, "c1")?;
    local_service(&cluster, "central", "web", "10.96.0.61", CENTRAL_LB_IP).await?;
    put_slice(&cluster, slice("web", &[(&c1, &n1, true)])).await?;
    through(&cluster, &outside, CENTRAL_LB_IP, 1).await?;
    let (names, seen) = answers(&outside, CENTRAL_LB_IP, 5).await?;
    ensure!(
        names == BTreeSet::from(["c1".to_owned()]),
        "centralized: {names:?}"
    );
    ensure!(
        seen.iter().all(|ip| ip.to_string().starts_with("100.64.")),
        "centralized: the endpoint saw {seen:?}, not node 1's join address"
    );
    Ok(())
}
