//! The controller's southbound replica ([`kube_ovn_controller::sb`]) against real OVN central:
//! ovn-northd makes the `cr-<lrp>` Port_Binding for a router port with a Gateway_Chassis, a
//! chassis claims it (written here with `ovn-sbctl`, as ovn-controller writes it), and the
//! replica says which chassis holds the port, and tells its subscribers, each time it moves; the
//! pods' bindings are not replicated.
//! And a controller whose southbound database is unreachable still starts and serves.

mod common;
mod netkit;

use std::time::Duration;

use clap::Parser;
use common::{Env, WAIT};
use kube_ovn_controller::config::Flags;
use kube_ovn_controller::sb::{GatewayChanges, Sb};
use kube_ovn_testkit::{OvnCentral, free_port, wait_until_async};

/// Sets `cr-<lrp>`'s chassis to the chassis named `name`, as the claiming ovn-controller does.
fn claim(ovn: &OvnCentral, lrp: &str, name: &str) {
    let uuid = ovn
        .sbctl(&[
            "--bare",
            "--columns=_uuid",
            "find",
            "Chassis",
            &format!("name={name}"),
        ])
        .unwrap();
    let uuid = uuid.trim();
    assert!(!uuid.is_empty(), "chassis {name} exists");
    ovn.sbctl(&[
        "set",
        "Port_Binding",
        &format!("cr-{lrp}"),
        &format!("chassis={uuid}"),
    ])
    .unwrap();
}

/// The next gateway change the subscription reports, within a bound.
async fn next_change(changes: &mut kube_ovn_controller::sb::SbChanges) -> GatewayChanges {
    tokio::time::timeout(WAIT, changes.recv())
        .await
        .expect("a gateway change within a minute")
        .expect("the client still runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_replica_follows_the_chassis_that_holds_a_gateway_port() {
    common::init_logging();
    let ovn = tokio::task::spawn_blocking(OvnCentral::start)
        .await
        .unwrap()
        .unwrap();
    let config = Flags::try_parse_from([
        "kube-ovn-controller".to_owned(),
        format!("--ovn-nb-addr={}", ovn.nb_remote()),
        format!("--ovn-sb-addr={}", ovn.sb_remote()),
    ])
    .unwrap()
    .validate()
    .unwrap();
    let sb = Sb::start(&config);
    sb.wait_ready(WAIT).await.unwrap();
    let mut changes = sb.subscribe();

    for (name, ip) in [("chassis-a", "127.0.0.11"), ("chassis-b", "127.0.0.12")] {
        ovn.sbctl(&["chassis-add", name, "geneve", ip]).unwrap();
    }
    ovn.nbctl(&["lr-add", "vpc1"]).unwrap();
    ovn.nbctl(&[
        "lrp-add",
        "vpc1",
        "vpc1-external",
        "00:00:00:aa:00:01",
        "10.200.0.101/24",
    ])
    .unwrap();
    for (name, prio) in [("chassis-a", "100"), ("chassis-b", "99")] {
        ovn.nbctl(&["lrp-set-gateway-chassis", "vpc1-external", name, prio])
            .unwrap();
    }
    // A pod's port: a Port_Binding the controller does not keep.
    ovn.nbctl(&["ls-add", "vpc1-net"]).unwrap();
    ovn.nbctl(&["lsp-add", "vpc1-net", "p1.ns1"]).unwrap();
    ovn.sync().unwrap();

    // ovn-northd made cr-vpc1-external; nobody claims it yet.
    let made = next_change(&mut changes).await;
    let mut seen = made.clone();
    while !seen.ports.contains("cr-vpc1-external") {
        let more = next_change(&mut changes).await;
        seen.ports.extend(more.ports);
        seen.chassis |= more.chassis;
    }
    assert!(seen.chassis, "the new chassis were reported: {seen:?}");
    assert_eq!(
        sb.chassis_names().into_iter().collect::<Vec<_>>(),
        ["chassis-a", "chassis-b"]
    );
    assert_eq!(sb.gateway_chassis("vpc1-external"), None, "not claimed yet");
    let all = ovn
        .sbctl(&["--bare", "--columns=logical_port", "list", "Port_Binding"])
        .unwrap();
    assert!(all.contains("p1.ns1") && all.contains("vpc1-external"), "{all}");
    assert_eq!(sb.port_binding_rows(), 1, "only cr-vpc1-external is replicated");
    assert_eq!(sb.gateway_chassis("no-such-port"), None);

    // Claimed, then moved (a failover): each move is one change naming the port.
    for holder in ["chassis-a", "chassis-b", "chassis-a"] {
        let started = std::time::Instant::now();
        claim(&ovn, "vpc1-external", holder);
        let change = next_change(&mut changes).await;
        assert_eq!(
            change.ports.into_iter().collect::<Vec<_>>(),
            ["cr-vpc1-external"],
            "the move to {holder}"
        );
        assert_eq!(sb.gateway_chassis("vpc1-external").as_deref(), Some(holder));
        eprintln!(
            "SB claim by {holder} seen by the replica in {:?}",
            started.elapsed()
        );
    }

    // The chassis goes (ovn-controller's graceful exit deletes its Chassis row): the port has
    // no holder until another claims it.
    ovn.sbctl(&["chassis-del", "chassis-a"]).unwrap();
    wait_until_async("the replica to drop chassis-a", WAIT, || {
        let sb = sb.clone();
        async move { Ok(sb.gateway_chassis("vpc1-external").is_none()) }
    })
    .await
    .unwrap();
    assert_eq!(sb.chassis_names().into_iter().collect::<Vec<_>>(), ["chassis-b"]);
}

/// The southbound database is optional for everything but the gateway ports: a controller whose
/// `--ovn-sb-addr` answers nothing still becomes ready and reconciles (here: the default
/// subnet), and says why the SB is missing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_southbound_database_stops_nothing_else() {
    // The environment's flags replace the harness's SB remote.
    let nowhere = format!("--ovn-sb-addr=tcp:127.0.0.1:{}", free_port().unwrap());
    let env = Env::start_idle(&[&nowhere, "--ovsdb-con-timeout=1"]).await;
    let c = env.spawn_controller(&[]);
    env.subnet_ready("ovn-default").await;
    wait_until_async("/readyz to answer 200", WAIT, || async {
        Ok(netkit::http_get(c.metrics_addr, "/readyz").await?.0 == 200)
    })
    .await
    .unwrap();

    let config = env.flags().validate().unwrap();
    assert!(nowhere.ends_with(&config.sb_remotes[0].to_string()), "{nowhere}");
    let sb = Sb::start(&config);
    assert!(sb.wait_ready(Duration::from_secs(2)).await.is_err());
    let why = sb.readiness().unwrap_err();
    assert!(why.contains("OVN_Southbound"), "says which database: {why}");
    assert_eq!(sb.gateway_chassis("vpc1-external"), None);
}
