//! `spec.exchangeLinkName` against a real kube-apiserver, real OVS (userspace datapath) and a
//! real kernel in network namespaces: the NIC `eth1` is renamed `br-<pn>` and joins a bridge
//! called `eth1`, which holds the node's addresses and routes (Kube-OVN
//! `ovsInitProviderNetwork` / `changeProviderNicName`); the give-back renames it back with its
//! addresses and routes exactly as they were; switching the field on a live network converges;
//! a failure at each new step is undone to the original names; a crash after the rename is
//! finished at the next pass. Needs root and the OVS packages (scripts/install-deps.sh);
//! fails, never skips, without them.

#[path = "common/provider_rig.rs"]
mod rig;

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube_ovn_api::crd::ProviderNetwork;
use kube_ovn_lab::kubernetes::fixture::ApiServer;
use kube_ovn_node::provider_network::mover::FailPoint;
use kube_ovn_testkit::wait_until_async;
use rig::{
    Rig, WAIT, create_node_and_pod, echo, err_mesg, labels, ping_counts, rig, start_ping, stop_ping, warnings,
};
use serde_json::json;

const NODE_IP: Ipv4Addr = Ipv4Addr::new(172, 31, 0, 11);

async fn create_exchanged_pn(kube: &kube::Client, name: &str, nic: &str) -> Result<()> {
    let api: Api<ProviderNetwork> = Api::all(kube.clone());
    let pn = json!({"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
        "metadata": {"name": name}, "spec": {"defaultInterface": nic, "exchangeLinkName": true}});
    api.create(&PostParams::default(), &serde_json::from_value(pn)?)
        .await?;
    Ok(())
}

fn link_exists(rig: &Rig, name: &str) -> bool {
    rig.node.netns().ip(&["link", "show", "dev", name]).is_ok()
}

fn bridge_id(rig: &Rig, bridge: &str, key: &str) -> Result<String> {
    Ok(rig
        .node
        .vsctl(&[
            "--no-wait",
            "get",
            "Bridge",
            bridge,
            &format!("external_ids:{key}"),
        ])?
        .trim()
        .trim_matches('"')
        .to_owned())
}

/// `provider_network_moves_total{result}` as the rig's registry says.
fn moves(rig: &Rig, result: &str) -> u64 {
    let line = format!("provider_network_moves_total{{result=\"{result}\"}} ");
    rig.metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&line).and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

async fn wait_ready(kube: &kube::Client, pn: &str, what: &str) -> Result<()> {
    wait_until_async(what, WAIT, || async {
        Ok(labels(kube, "n1", pn)
            .await?
            .contains(&("ready".into(), "true".into())))
    })
    .await
}

/// The end state of an exchanged move: the bridge `eth1` holds the node's addresses and routes,
/// the NIC is `br-<pn>` inside it, the mapping says `<pn>:eth1`.
fn assert_exchanged(rig: &Rig, pn: &str) -> Result<()> {
    let link = format!("br-{pn}");
    assert!(rig.has_bridge("eth1"), "no OVS bridge eth1");
    assert!(!rig.has_bridge(&link), "an OVS bridge {link} exists");
    assert_eq!(
        rig.node.vsctl(&["--no-wait", "port-to-br", &link])?.trim(),
        "eth1"
    );
    assert_eq!(bridge_id(rig, "eth1", "exchange-link-name")?, "true");
    assert_eq!(bridge_id(rig, "eth1", "kube-ovn-rs/provider-nic")?, "eth1");
    let on_bridge = rig.dump("eth1")?;
    for needle in [
        "172.31.0.11",
        // The secondary address keeps its label: the bridge has the NIC's old name.
        "\"label\":\"eth1:sec\"",
        "fd00:31::11",
        "\"dst\":\"10.55.0.0/24\"",
        "\"onlink\"",
        "\"dst\":\"fd00:99::/64\"",
    ] {
        assert!(
            on_bridge.iter().any(|l| l.contains(needle)),
            "{needle} not on the bridge eth1: {on_bridge:#?}"
        );
    }
    let on_nic = rig.dump(&link)?;
    assert!(
        !on_nic
            .iter()
            .any(|l| l.contains("172.31.0.11") || l.contains("fd00:31::11")),
        "{on_nic:#?}"
    );
    let static_route = rig.node.netns().ip(&["route", "show", "10.77.0.0/24"])?;
    assert!(
        static_route.contains("dev eth1 proto static scope link metric 50 mtu 1400"),
        "{static_route}"
    );
    assert_eq!(rig.mappings()?, format!("other:br-other,{pn}:eth1"));
    Ok(())
}

/// Into the bridge with exchanged names and back exactly, the node reachable before and after
/// (the rename takes the NIC down: the blip is counted), then exchangeLinkName switched off and
/// on again on the live network: each switch gives the NIC back and moves it with the new
/// names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanged_names_move_in_give_back_exactly_and_switch_both_ways() -> Result<()> {
    let server = ApiServer::start().await?;
    let kube = server.client().await?;
    let rig = rig("kovn-pnx").await?;
    create_node_and_pod(&kube, "n1").await?;
    let before = rig.dump("eth1")?;

    let listener = rig.node.netns().run(|| TcpListener::bind("172.31.0.11:7000"))??;
    let mut client = rig.peer.run(|| TcpStream::connect("172.31.0.11:7000"))??;
    let (mut conn, _) = listener.accept()?;
    for s in [&client, &conn] {
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
    }
    echo(&mut client, &mut conn, 1)?;
    let dir = tempfile::tempdir()?;
    let ping_out = dir.path().join("ping.txt");
    let ping = start_ping(&rig.peer, "172.31.0.11", &ping_out)?;
    rig.peer.wait_ping(NODE_IP, WAIT)?;

    create_exchanged_pn(&kube, "pn1", "eth1").await?;
    let task = rig.task(&kube, "n1", None).await?;
    wait_ready(&kube, "pn1", "pn1 ready on n1").await?;
    let l = labels(&kube, "n1", "pn1").await?;
    // Kube-OVN labels the NIC's original name.
    assert!(l.contains(&("interface".into(), "eth1".into())), "{l:?}");
    assert!(l.contains(&("mtu".into(), "1500".into())), "{l:?}");
    assert_exchanged(&rig, "pn1")?;
    assert_eq!(moves(&rig, "moved"), 1, "{}", rig.metrics.encode());
    rig.peer.wait_ping(NODE_IP, WAIT)?;
    echo(&mut client, &mut conn, 2)?;

    // Deleted: the NIC takes its name back with its addresses and routes, bridge and mapping go.
    let pns: Api<ProviderNetwork> = Api::all(kube.clone());
    pns.delete("pn1", &DeleteParams::default()).await?;
    wait_until_async("pn1 labels removed", WAIT, || async {
        Ok(labels(&kube, "n1", "pn1").await?.is_empty())
    })
    .await?;
    assert!(!rig.has_bridge("eth1"));
    assert!(!link_exists(&rig, "br-pn1"));
    // IPv6 addresses come back through DAD unless flagged nodad: wait for it to settle.
    wait_until_async("eth1 given back as it was", WAIT, || async {
        Ok(rig.dump("eth1")? == before)
    })
    .await
    .with_context(|| format!("before {before:#?}\nafter {:#?}", rig.dump("eth1")))?;
    assert_eq!(rig.mappings()?, "other:br-other");
    assert_eq!(moves(&rig, "given_back"), 1, "{}", rig.metrics.encode());
    assert_eq!(
        moves(&rig, "moved"),
        1,
        "passes with nothing to do are not counted"
    );
    rig.peer.wait_ping(NODE_IP, WAIT)?;
    echo(&mut client, &mut conn, 3)?;
    let summary = stop_ping(ping, &ping_out)?;
    let (sent, received) = ping_counts(&summary).context(summary.clone())?;
    assert!(!summary.contains("DUP!"), "duplicate replies: {summary}");
    // Two renames (in and back), each a link down and up: a short break, not a lasting one.
    eprintln!(
        "exchangeLinkName: {} of {sent} pings (10 ms apart) lost over a move in and a give-back",
        sent - received
    );
    assert!(
        sent >= 10 && sent - received <= 100,
        "lost {} of {sent}: {summary}",
        sent - received
    );

    // Switched on a live network: off → on → off, each converging to the new names.
    rig::create_pn(&kube, "pn1", "eth1").await?;
    wait_until_async("pn1 in br-pn1", WAIT, || async {
        Ok(rig.has_bridge("br-pn1") && rig.mappings()? == "other:br-other,pn1:br-pn1")
    })
    .await?;
    let switch = |on: bool| json!({"spec": {"exchangeLinkName": on}});
    pns.patch("pn1", &PatchParams::default(), &Patch::Merge(switch(true)))
        .await?;
    wait_until_async("pn1 moved with exchanged names", WAIT, || async {
        Ok(rig.has_bridge("eth1") && rig.mappings()? == "other:br-other,pn1:eth1")
    })
    .await?;
    wait_ready(&kube, "pn1", "pn1 ready after the switch on").await?;
    assert_exchanged(&rig, "pn1")?;
    rig.peer.wait_ping(NODE_IP, WAIT)?;
    echo(&mut client, &mut conn, 4)?;
    pns.patch("pn1", &PatchParams::default(), &Patch::Merge(switch(false)))
        .await?;
    wait_until_async("pn1 moved back to br-pn1", WAIT, || async {
        Ok(rig.has_bridge("br-pn1")
            && !rig.has_bridge("eth1")
            && rig.mappings()? == "other:br-other,pn1:br-pn1")
    })
    .await?;
    assert_eq!(
        rig.node.vsctl(&["--no-wait", "port-to-br", "eth1"])?.trim(),
        "br-pn1"
    );
    assert!(rig.dump("br-pn1")?.iter().any(|l| l.contains("172.31.0.11")));
    rig.peer.wait_ping(NODE_IP, WAIT)?;
    echo(&mut client, &mut conn, 5)?;
    // Each switch converged in one pass: no failure was reported on the way.
    let failures = warnings(&kube, "pn1").await?;
    assert!(
        failures.is_empty(),
        "pn1's switches reported failures: {failures:?}"
    );
    pns.delete("pn1", &DeleteParams::default()).await?;
    wait_until_async("br-pn1 removed", WAIT, || async { Ok(!rig.has_bridge("br-pn1")) }).await?;
    wait_until_async("eth1 given back as it was after the switches", WAIT, || async {
        Ok(rig.dump("eth1")? == before)
    })
    .await
    .with_context(|| format!("before {before:#?}\nafter {:#?}", rig.dump("eth1")))?;
    task.abort();
    Ok(())
}

/// A failure at each step the exchange adds (the rename, the ports) and at one after the
/// addresses went onto the bridge is undone to the original names; a daemon killed right after
/// the rename leaves the NIC called `br-<pn>`, and the next one finishes the move from the
/// bridge's record; the give-back then restores it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanged_failures_roll_back_to_the_original_names_and_a_crash_is_finished() -> Result<()> {
    let server = ApiServer::start().await?;
    let kube = server.client().await?;
    let rig = rig("kovn-pnxf").await?;
    create_node_and_pod(&kube, "n1").await?;
    let before = rig.dump("eth1")?;
    let pns: Api<ProviderNetwork> = Api::all(kube.clone());

    // Steps of a fresh exchanged move: 0 record, 1 rename, 2 ports, 3 arp_ignore, 4 bridge up,
    // 5-7 addresses onto the bridge, 8.. routes.
    for step in [1, 2, 8] {
        let pn = format!("pnf{step}");
        create_exchanged_pn(&kube, &pn, "eth1").await?;
        let failing = rig
            .task(&kube, "n1", Some(FailPoint { step, crash: false }))
            .await?;
        // The annotation is written before the event is published: wait for both.
        wait_until_async(&format!("{pn}: the injected failure"), WAIT, || async {
            Ok(err_mesg(&kube, "n1", &pn)
                .await?
                .is_some_and(|e| e.contains("injected failure"))
                && !warnings(&kube, &pn).await?.is_empty())
        })
        .await?;
        failing.abort();
        let _ = failing.await;
        let message = err_mesg(&kube, "n1", &pn).await?.unwrap_or_default();
        assert!(message.contains("(rolled back)"), "step {step}: {message}");
        // The event names the NIC by its original name.
        let notes = warnings(&kube, &pn).await?;
        assert!(
            notes.iter().any(
                |n| n.starts_with("Failed to initialize provider network: node=n1 interface=eth1 error=")
            ),
            "{notes:?}"
        );
        assert!(!rig.has_bridge("eth1"), "step {step}: bridge eth1 left");
        assert!(
            !link_exists(&rig, &format!("br-{pn}")),
            "step {step}: the NIC is still renamed"
        );
        // The rename took the link down: its link-local address goes through DAD again.
        wait_until_async(&format!("step {step} undone"), WAIT, || async {
            Ok(rig.dump("eth1")? == before)
        })
        .await
        .with_context(|| format!("before {before:#?}\nafter {:#?}", rig.dump("eth1")))?;
        pns.delete(&pn, &DeleteParams::default()).await?;
    }
    // A link already called br-<pn>: refused before anything is done, naming the field.
    rig.node
        .netns()
        .ip(&["link", "add", "br-pnt", "type", "veth", "peer", "name", "pnt-p"])?;
    create_exchanged_pn(&kube, "pnt", "eth1").await?;
    let task = rig.task(&kube, "n1", None).await?;
    wait_until_async("pnt refused", WAIT, || async {
        Ok(err_mesg(&kube, "n1", "pnt").await?.is_some_and(|e| {
            e.contains("spec.exchangeLinkName") && e.contains("a link called br-pnt exists")
        }))
    })
    .await?;
    task.abort();
    let _ = task.await;
    assert!(!rig.has_bridge("eth1"));
    assert_eq!(rig.dump("eth1")?, before, "touched while refused");
    pns.delete("pnt", &DeleteParams::default()).await?;
    rig.node.netns().ip(&["link", "del", "br-pnt"])?;
    assert!(moves(&rig, "rolled_back") >= 3, "{}", rig.metrics.encode());
    assert_eq!(moves(&rig, "moved"), 0);
    assert_eq!(moves(&rig, "failed"), 0);

    // Killed right after the rename (before the ports): the NIC is br-pn1, the bridge eth1
    // exists with the record and no port.
    create_exchanged_pn(&kube, "pn1", "eth1").await?;
    let crashing = rig
        .task(&kube, "n1", Some(FailPoint { step: 2, crash: true }))
        .await?;
    wait_until_async("the crash after the rename", WAIT, || async {
        Ok(err_mesg(&kube, "n1", "pn1")
            .await?
            .is_some_and(|e| e.contains("crash")))
    })
    .await?;
    crashing.abort();
    let _ = crashing.await;
    assert!(link_exists(&rig, "br-pn1"), "the NIC was not renamed");
    // A crash undoes nothing: counted as failed, not rolled back.
    assert!(moves(&rig, "failed") >= 1, "{}", rig.metrics.encode());
    assert!(rig.has_bridge("eth1"));
    assert_eq!(bridge_id(&rig, "eth1", "exchange-link-name")?, "true");
    let task = rig.task(&kube, "n1", None).await?;
    wait_ready(&kube, "pn1", "pn1 ready after the restart").await?;
    assert_exchanged(&rig, "pn1")?;
    rig.peer.wait_ping(NODE_IP, WAIT)?;
    wait_until_async("err_mesg cleared", WAIT, || async {
        Ok(err_mesg(&kube, "n1", "pn1").await?.is_none())
    })
    .await?;
    pns.delete("pn1", &DeleteParams::default()).await?;
    wait_until_async("bridge eth1 removed", WAIT, || async {
        Ok(!rig.has_bridge("eth1"))
    })
    .await?;
    wait_until_async("eth1 given back as it was", WAIT, || async {
        Ok(rig.dump("eth1")? == before)
    })
    .await
    .with_context(|| format!("before {before:#?}\nafter {:#?}", rig.dump("eth1")))?;
    task.abort();
    let _ = task.await;

    // Killed after the rename again, and the network deleted while no daemon runs: the next
    // one undoes it from the bridge's record alone (the NIC renamed back, bridge removed).
    create_exchanged_pn(&kube, "pn2", "eth1").await?;
    let crashing = rig
        .task(&kube, "n1", Some(FailPoint { step: 2, crash: true }))
        .await?;
    wait_until_async("the second crash after the rename", WAIT, || async {
        Ok(err_mesg(&kube, "n1", "pn2")
            .await?
            .is_some_and(|e| e.contains("crash")))
    })
    .await?;
    crashing.abort();
    let _ = crashing.await;
    assert!(link_exists(&rig, "br-pn2"), "the NIC was not renamed");
    pns.delete("pn2", &DeleteParams::default()).await?;
    let task = rig.task(&kube, "n1", None).await?;
    wait_until_async("bridge eth1 of pn2 removed", WAIT, || async {
        Ok(!rig.has_bridge("eth1"))
    })
    .await?;
    assert!(!link_exists(&rig, "br-pn2"));
    wait_until_async("eth1 given back from the record", WAIT, || async {
        Ok(rig.dump("eth1")? == before)
    })
    .await
    .with_context(|| format!("before {before:#?}\nafter {:#?}", rig.dump("eth1")))?;
    task.abort();
    Ok(())
}
