//! `BgpAdvertisement`s end to end: the `kube-ovn-speaker` binary (as its ServiceAccount, with
//! `deploy/base/rbac.yaml`) against a real kube-apiserver, a BIRD ToR (eBGP) and an FRR ToR
//! (iBGP, another address and port of the same namespace), each a BgpPeer with its own labels.
//! One fixture, in order:
//!
//! - an advertisement's communities, large communities, MED and AS-path prepend reach BIRD
//!   (eBGP); its LOCAL_PREF reaches FRR (iBGP), where the prepend is not sent; a second
//!   advertisement with a lower LOCAL_PREF for the same prefix loses and says `Conflict`;
//! - a Service relabelled from one advertisement's selector to another's: BIRD sees the new
//!   community with no withdraw in between (its import withdraw counter stays), and FRR, which
//!   neither `peerSelector` picks, never learns it;
//! - aggregation announces the covering /24 and not the /32s;
//! - `/bgp/routes`, `/bgp/peers` and `kube-ovn-speaker routes` print the prefixes with their
//!   attributes and sources; the BgpPeers' `status.nodes.n1.advertised` counts them by kind;
//! - an invalid generation: `Accepted=False` and one Warning event naming the field, and the
//!   previous policy stays on the wire; an aggregation length its subnet cannot hold is
//!   `PartiallyApplied` with a Warning event naming the field;
//! - a BgpPeer relabelled into an advertisement's `peerSelector` gets its routes on the same
//!   session.
//!
//! Needs root (namespaces), bird2 and FRR; fails, never skips.

mod common;

use anyhow::{Context, Result, ensure};
use common::k8s::{Cluster, Speaker, speaker_via};
use common::peers::{Bird, Frr, PeerSpec};
use common::{Lab, NODE_AS, NODE_V4, TOR_AS, TOR_V4};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube_ovn_api::bgp_advertisement::BgpAdvertisement;
use kube_ovn_speaker::crd::BgpPeer;
use kube_ovn_testkit::{wait_until, wait_until_async};
use serde_json::{Value, json};

const WAIT: std::time::Duration = std::time::Duration::from_secs(30);
/// The FRR ToR: a second address of the ToR namespace, bgpd on its own port.
const FRR_ADDRESS: &str = "198.51.100.3";
const FRR_PORT: u16 = 1179;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertisements_choose_prefixes_peers_and_attributes() -> Result<()> {
    let lab = Lab::direct()?;
    lab.tor
        .ip(&["addr", "add", &format!("{FRR_ADDRESS}/24"), "dev", "eth1"])?;
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4))?;
    let frr = Frr::start(
        &lab.tor,
        &PeerSpec {
            local_as: NODE_AS,
            listen_port: Some(FRR_PORT),
            ..PeerSpec::new(FRR_ADDRESS.parse::<std::net::IpAddr>()?, NODE_V4)
        },
    )?;
    let cluster = Cluster::start().await?;
    let kube = cluster.kube.clone();
    let dir = tempfile::tempdir()?;
    // As its ServiceAccount with deploy/base/rbac.yaml (namespaces, advertisements, their status
    // and events included); the metrics port reachable from the API server's pod proxy (which
    // refuses loopback) at the host's address.
    let identity = cluster.speaker_identity().await?;
    let speaker = speaker_via(&identity, &lab, dir.path(), &["--metrics-address=0.0.0.0"])?;

    let peers: Api<BgpPeer> = Api::all(kube.clone());
    for (name, address, asn, port, tor) in [
        ("tor-bird", TOR_V4.to_string(), TOR_AS, None, "bird"),
        ("tor-frr", FRR_ADDRESS.to_owned(), NODE_AS, Some(FRR_PORT), "frr"),
    ] {
        let peer: BgpPeer = serde_json::from_value(json!({
            "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer",
            "metadata": {"name": name, "labels": {"tor": tor}},
            "spec": {"peerAddress": address, "peerASN": asn, "port": port}}))?;
        peers.create(&PostParams::default(), &peer).await?;
    }
    bird.wait_established().with_context(|| speaker.log_tail(30))?;
    frr.wait_received("ipv4", 0)
        .with_context(|| speaker.log_tail(30))?;

    // Pods of a labelled subnet, no `bgp` annotation anywhere: only advertisements announce.
    subnet(&cluster, "s1", "10.16.0.0/16", "gold").await?;
    subnet(&cluster, "s2", "10.17.0.0/16", "agg").await?;
    pod(&cluster, "p1", "s1", "10.16.0.5").await?;
    pod(&cluster, "p2", "s2", "10.17.0.5").await?;
    pod(&cluster, "p3", "s2", "10.17.0.6").await?;
    let ads: Api<BgpAdvertisement> = Api::all(kube.clone());
    let gold = json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "gold"}},
        "communities": ["65001:100", "no-export"], "largeCommunities": ["65001:1:2"],
        "localPref": 300, "med": 50, "asPathPrepend": 2});
    advertisement(&ads, "pods-gold", &gold).await?;
    advertisement(
        &ads,
        "pods-silver",
        &json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "gold"}},
            "peerSelector": {"matchLabels": {"tor": "frr"}}, "localPref": 200}),
    )
    .await?;

    // eBGP (BIRD): communities, large community, MED, our AS twice more on the path.
    wait_route(&bird, &speaker, "10.16.0.5/32")?;
    let route = bird.route_all("10.16.0.5/32")?;
    for expected in [
        "BGP.community: (65001,100) (65535,65281)",
        "BGP.large_community: (65001, 1, 2)",
        "BGP.med: 50",
        "BGP.as_path: 65001 65001 65001",
    ] {
        ensure!(route.contains(expected), "{expected} in BIRD's route:\n{route}");
    }
    // iBGP (FRR): LOCAL_PREF, the highest of the two advertisements; no prepend.
    let path = wait_frr_path(&frr, &speaker, "10.16.0.5/32", |_| true)?;
    ensure!(
        path["locPrf"] == 300,
        "LOCAL_PREF 300 (pods-gold wins over pods-silver): {path}"
    );
    ensure!(path["metric"] == 50, "MED: {path}");
    ensure!(path["community"]["string"] == "65001:100 no-export", "{path}");
    ensure!(path["largeCommunity"]["string"] == "65001:1:2", "{path}");
    ensure!(
        path["aspath"]["length"] == 0,
        "no prepend to an internal peer: {path}"
    );
    wait_condition(&ads, "pods-silver", "Conflict", "True", "localPref").await?;
    wait_condition(&ads, "pods-gold", "Accepted", "True", "").await?;

    // A Service moves from one advertisement to the other: the community changes at BIRD by an
    // UPDATE alone (no withdraw counted), and FRR, selected by neither, never has it.
    for (name, service) in [("svc-a", "a"), ("svc-b", "b")] {
        let community = if service == "a" { "65001:1" } else { "65001:2" };
        advertisement(
            &ads,
            name,
            &json!({"advertise": ["LoadBalancerIPs"],
                "serviceSelector": {"matchLabels": {"adv": service}},
                "peerSelector": {"matchLabels": {"tor": "bird"}}, "communities": [community]}),
        )
        .await?;
    }
    let services: Api<Service> = Api::namespaced(kube.clone(), "default");
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"adv": "a"}},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}))?;
    services.create(&PostParams::default(), &svc).await?;
    let lb = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.80"}]}}});
    services
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&lb))
        .await?;
    wait_until("BIRD to hold 203.0.113.80/32 with 65001:1", WAIT, || {
        Ok(bird.route_all("203.0.113.80/32")?.contains("(65001,1)"))
    })
    .with_context(|| speaker.log_tail(20))?;
    let (updates, withdraws) = import_stats(&bird)?;
    let relabel = json!({"metadata": {"labels": {"adv": "b"}}});
    services
        .patch("web", &PatchParams::default(), &Patch::Merge(&relabel))
        .await?;
    let mut gone = None;
    wait_until("BIRD to see 65001:2 on 203.0.113.80/32", WAIT, || {
        let route = bird.route_all("203.0.113.80/32").unwrap_or_default();
        if !route.contains("203.0.113.80/32") {
            gone.get_or_insert(route.clone());
        }
        Ok(route.contains("(65001,2)") && !route.contains("(65001,1)"))
    })
    .with_context(|| speaker.log_tail(20))?;
    ensure!(
        gone.is_none(),
        "the prefix left BIRD's table during the change: {gone:?}"
    );
    let (updates_after, withdraws_after) = import_stats(&bird)?;
    ensure!(
        withdraws_after == withdraws && updates_after > updates,
        "an UPDATE and no withdraw: updates {updates} -> {updates_after}, withdraws {withdraws} -> {withdraws_after}"
    );
    ensure!(
        frr_path(&frr, "203.0.113.80/32")?.is_none(),
        "no peerSelector picks FRR for the Service"
    );

    // Aggregation: the covering /24 of s2's pods, not the /32s.
    advertisement(
        &ads,
        "pods-agg",
        &json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "agg"}},
            "aggregationLengthV4": 24, "communities": ["65001:24"]}),
    )
    .await?;
    wait_route(&bird, &speaker, "10.17.0.0/24")?;
    ensure!(
        bird.route_all("10.17.0.0/24")?.contains("(65001,24)"),
        "the aggregate carries the advertisement's community"
    );
    for member in ["10.17.0.5/32", "10.17.0.6/32"] {
        ensure!(
            !bird.has(member)?,
            "{member} is not announced beside its aggregate"
        );
    }
    wait_frr_path(&frr, &speaker, "10.17.0.0/24", |_| true)?;

    // The routes endpoint and the command, for one peer.
    let routes: Value = serde_json::from_str(&http_get(
        speaker.metrics_port,
        &format!("/bgp/routes?peer={TOR_V4}"),
    )?)?;
    let row = routes
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["prefix"] == "10.16.0.5/32"))
        .with_context(|| format!("10.16.0.5/32 in /bgp/routes: {routes}"))?;
    assert_eq!(
        row,
        &json!({"prefix": "10.16.0.5/32", "kind": "PodIPs", "origin": "Pod default/p1",
            "nextHop": NODE_V4.to_string(), "communities": ["65001:100", "no-export"],
            "largeCommunities": ["65001:1:2"], "localPref": null, "med": 50, "asPathPrepend": 2,
            "sources": ["pods-gold"]})
    );
    let prefixes: Vec<&str> = routes
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| r["prefix"].as_str())
        .collect();
    assert_eq!(prefixes, ["10.16.0.5/32", "10.17.0.0/24", "203.0.113.80/32"]);
    let sessions: Value = serde_json::from_str(&http_get(speaker.metrics_port, "/bgp/peers")?)?;
    let frr_session = sessions
        .as_array()
        .and_then(|s| s.iter().find(|s| s["peer"] == FRR_ADDRESS))
        .with_context(|| format!("{sessions}"))?;
    assert_eq!(frr_session["bgpPeer"], "tor-frr");
    assert_eq!(frr_session["state"], "Established");

    let url = format!("http://127.0.0.1:{}", speaker.metrics_port);
    let table = routes_command(&["--peer", FRR_ADDRESS, "--url", &url])?;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "PREFIX",
            "KIND",
            "COMMUNITIES",
            "LOCALPREF",
            "MED",
            "PREPEND",
            "SOURCES"
        ],
        "{table}"
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        [
            "10.16.0.5/32",
            "PodIPs",
            "65001:100,no-export",
            "300",
            "50",
            "0",
            "pods-gold,pods-silver"
        ],
        "{table}"
    );
    assert_eq!(lines.len(), 3, "two routes to FRR: {table}");
    let json_out: Value = serde_json::from_str(&routes_command(&[
        "--peer",
        &TOR_V4.to_string(),
        "--url",
        &url,
        "-o",
        "json",
    ])?)?;
    assert_eq!(json_out, routes, "-o json prints the endpoint's rows");
    // The same through the API server: the speaker pod of node n1 (the DaemonSet's label), its
    // /bgp/routes read by the pod proxy.
    let host = host_address()?;
    let speaker_pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "kube-ovn-speaker-x1", "namespace": "kube-system",
            "labels": {"app": "kube-ovn-speaker"}},
        "spec": {"nodeName": "n1", "hostNetwork": true, "containers": [{"name": "speaker", "image": "x"}]}}))?;
    cluster.running_pod(&speaker_pod).await?;
    Api::<Pod>::namespaced(kube.clone(), "kube-system")
        .patch_status(
            "kube-ovn-speaker-x1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"podIP": host, "podIPs": [{"ip": host}]}})),
        )
        .await?;
    let kubeconfig = cluster.kubeconfig.display().to_string();
    let port = speaker.metrics_port.to_string();
    let through_api = [
        "--peer",
        FRR_ADDRESS,
        "--kubeconfig",
        &kubeconfig,
        "--port",
        &port,
    ];
    let proxied = routes_command(&[&through_api[..], &["--node", "n1"]].concat())?;
    assert_eq!(proxied, table, "through the pod proxy as directly");
    let wide = routes_command(&[&through_api[..], &["-o", "wide"]].concat())?;
    let header: Vec<&str> = wide
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    ensure!(
        header[7..] == ["LARGECOMMUNITIES", "NEXTHOP", "ORIGIN"]
            && wide.contains("65001:1:2")
            && wide.contains("Pod default/p1"),
        "{wide}"
    );
    let elsewhere = routes_command(&[&through_api[..], &["--node", "n2"]].concat()).unwrap_err();
    ensure!(
        elsewhere
            .to_string()
            .contains("no Running pod labelled app=kube-ovn-speaker in namespace kube-system on node n2"),
        "{elsewhere}"
    );
    let unknown = routes_command(&["--peer", "192.0.2.99", "--url", &url]).unwrap_err();
    ensure!(unknown.to_string().contains("no peer 192.0.2.99"), "{unknown}");

    // Each BgpPeer's status counts its routes by kind.
    for (peer, expected) in [
        ("tor-bird", json!({"PodIPs": 2, "LoadBalancerIPs": 1})),
        ("tor-frr", json!({"PodIPs": 2})),
    ] {
        let advertised = || async {
            let status = serde_json::to_value(peers.get_status(peer).await?.status)?;
            anyhow::Ok(status["nodes"]["n1"]["advertised"].clone())
        };
        let waited = wait_until_async(&format!("{peer}'s advertised counts"), WAIT, || async {
            Ok(advertised().await? == expected)
        })
        .await;
        waited.with_context(|| format!("{peer}: expected {expected}"))?;
    }

    // An invalid generation: Accepted=False naming the field, one Warning event, and the
    // previous policy stays on the wire.
    let mut bad = gold.clone();
    bad["communities"] = json!(["65001:100", "70000:1"]);
    bad["med"] = json!(77);
    ads.patch(
        "pods-gold",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": bad})),
    )
    .await?;
    wait_condition(&ads, "pods-gold", "Accepted", "False", "spec.communities[1]").await?;
    let events: Api<Event> = Api::namespaced(kube.clone(), "default");
    let warnings = || async {
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| {
                e.reason.as_deref() == Some("InvalidBgpAdvertisement")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("pods-gold")
            })
            .filter_map(|e| e.note)
            .collect();
        anyhow::Ok(notes)
    };
    wait_until_async("an InvalidBgpAdvertisement event", WAIT, || async {
        Ok(!warnings().await?.is_empty())
    })
    .await?;
    let warnings = warnings().await?;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    ensure!(warnings[0].contains("spec.communities[1]"), "{warnings:?}");
    let object = ads.get("pods-gold").await?;
    let status = object.status.context("a status")?;
    assert_eq!(status.observed_generation, object.metadata.generation);
    let route = bird.route_all("10.16.0.5/32")?;
    ensure!(
        route.contains("BGP.med: 50") && route.contains("(65001,100) (65535,65281)"),
        "the last accepted spec stays in effect:\n{route}"
    );

    // An aggregation length the allocation cannot hold (a /8 would leave s2's /16): still
    // accepted, its members announced unaggregated, the field named in the condition and in
    // one Warning event.
    advertisement(
        &ads,
        "pods-agg8",
        &json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "agg"}},
            "aggregationLengthV4": 8}),
    )
    .await?;
    wait_condition(
        &ads,
        "pods-agg8",
        "Accepted",
        "True",
        "on node n1: spec.aggregationLengthV4",
    )
    .await?;
    wait_route(&bird, &speaker, "10.17.0.5/32")?;
    ensure!(!bird.has("10.0.0.0/8")?, "no aggregate beyond the subnet");
    wait_until_async("a BgpAggregationRefused event", WAIT, || async {
        Ok(events.list(&ListParams::default()).await?.items.iter().any(|e| {
            e.reason.as_deref() == Some("BgpAggregationRefused")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("spec.aggregationLengthV4"))
        }))
    })
    .await?;

    // A BgpPeer's labels are read at every evaluation: relabelled into the Services'
    // `peerSelector`, FRR gets the Service's address over the same session.
    peers
        .patch(
            "tor-frr",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"tor": "bird"}}})),
        )
        .await?;
    let path = wait_frr_path(&frr, &speaker, "203.0.113.80/32", |_| true)?;
    ensure!(path["community"]["string"] == "65001:2", "{path}");
    let flaps = format!("kube_ovn_speaker_bgp_peer_flap_count{{peer=\"{FRR_ADDRESS}\"}} 0");
    let metrics = speaker.metrics()?;
    ensure!(metrics.contains(&flaps), "the session stayed up: {metrics}");

    let mut speaker = speaker;
    speaker.daemon.check_alive()?;
    Ok(())
}

/// The host's first global IPv4 address: the API server (in the host's namespace) reaches the
/// speaker's metrics port there.
fn host_address() -> Result<String> {
    let out = kube_ovn_testkit::run("ip", &["-j", "-4", "addr", "show", "scope", "global"])?;
    let links: Value = serde_json::from_str(&out)?;
    links
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|l| l["addr_info"].as_array().into_iter().flatten())
        .find_map(|a| a["local"].as_str().map(str::to_owned))
        .context("no global IPv4 address on the host for the API server's pod proxy to reach")
}

/// A Ready subnet labelled `tier=<tier>`, without the `bgp` annotation.
async fn subnet(cluster: &Cluster, name: &str, cidr: &str, tier: &str) -> Result<()> {
    let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "Subnet");
    let (ar, _) = kube::discovery::pinned_kind(&cluster.kube, &gvk).await?;
    let api: Api<DynamicObject> = Api::all_with(cluster.kube.clone(), &ar);
    let obj = json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": name, "labels": {"tier": tier}}, "spec": {"cidrBlock": cidr}});
    api.patch(name, &PatchParams::apply("test").force(), &Patch::Apply(obj))
        .await?;
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// A Running pod on n1 in `default` with its address in `subnet` and the controller's IP record.
async fn pod(cluster: &Cluster, name: &str, subnet: &str, ip: &str) -> Result<()> {
    cluster
        .annotated_pod(name, "n1", ip, &[("ovn.kubernetes.io/logical_switch", subnet)])
        .await?;
    cluster.ip_record(name, subnet, ip).await
}

async fn advertisement(api: &Api<BgpAdvertisement>, name: &str, spec: &Value) -> Result<()> {
    let object: BgpAdvertisement = serde_json::from_value(json!({
        "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpAdvertisement",
        "metadata": {"name": name}, "spec": spec}))?;
    api.create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating BgpAdvertisement {name}"))?;
    Ok(())
}

/// Waits until condition `type_` of advertisement `name` has `status` and a message containing
/// `text`, for the object's current generation.
async fn wait_condition(
    api: &Api<BgpAdvertisement>,
    name: &str,
    type_: &str,
    status: &str,
    text: &str,
) -> Result<()> {
    let waited = wait_until_async(&format!("{name}: {type_}={status}"), WAIT, || async {
        let object = api.get_status(name).await?;
        let generation = object.metadata.generation;
        let now = object.status.unwrap_or_default();
        Ok(now.observed_generation == generation
            && now.conditions.iter().any(|c| {
                c.type_ == type_
                    && serde_json::to_value(c.status).ok() == Some(json!(status))
                    && c.message.as_deref().unwrap_or_default().contains(text)
            }))
    })
    .await;
    if waited.is_err() {
        let last = api.get_status(name).await?.status;
        return waited.with_context(|| format!("last status: {}", json!(last)));
    }
    Ok(())
}

fn wait_route(bird: &Bird, speaker: &Speaker, prefix: &str) -> Result<()> {
    wait_until(&format!("{prefix} at BIRD"), WAIT, || bird.has(prefix)).with_context(|| speaker.log_tail(20))
}

/// FRR's best path for `prefix`, if it has one.
fn frr_path(frr: &Frr, prefix: &str) -> Result<Option<Value>> {
    let out = frr.vtysh(&format!("show bgp ipv4 unicast {prefix} json"))?;
    let json: Value = serde_json::from_str(&out).unwrap_or_default();
    Ok(json["paths"].as_array().and_then(|p| p.first()).cloned())
}

fn wait_frr_path(
    frr: &Frr,
    speaker: &Speaker,
    prefix: &str,
    check: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let mut path = None;
    wait_until(&format!("{prefix} at FRR"), WAIT, || {
        path = frr_path(frr, prefix)?;
        Ok(path.as_ref().is_some_and(&check))
    })
    .with_context(|| format!("{}\nbgpd: {}", speaker.log_tail(20), frr.log_tail()))?;
    path.context("a path")
}

/// BIRD's IPv4 import updates and withdraws received from the speaker (`show protocols all`).
fn import_stats(bird: &Bird) -> Result<(u64, u64)> {
    let text = bird.birdc(&["show", "protocols", "all", "node"])?;
    let first_number = |label: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(label))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{label} in:\n{text}"))
    };
    Ok((
        first_number("Import updates:")?,
        first_number("Import withdraws:")?,
    ))
}

/// GET over HTTP/1.0 from the speaker's metrics port; the body of a 200.
fn http_get(port: u16, path: &str) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    ensure!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{out}"
    );
    Ok(body.to_owned())
}

/// `kube-ovn-speaker routes <args>`: its stdout, or its stderr as the error.
fn routes_command(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-ovn-speaker"))
        .arg("routes")
        .args(args)
        .env_remove("NODE_NAME")
        .env_remove("KUBECONFIG")
        .output()?;
    ensure!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?)
}
