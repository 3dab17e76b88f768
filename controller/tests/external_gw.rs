//! A custom VPC's external gateway (`Vpc.spec.enableExternal`, issue 26) on real OVN and a real
//! kube-apiserver: the lrp OvnEip, the patch ports, Gateway_Chassis in Kube-OVN's order, what a
//! pod's packet to the outside does (ovn-trace), refusals, and removal; then, with two real
//! chassis (ovn-controller on the userspace datapath), the node that holds the gateway port in
//! the OvnEip's `status.activateGateway`, its move when that chassis leaves, BFD rows, and a
//! restart that writes nothing.

mod common;
mod externalkit;
mod netkit;
mod podkit;
mod underlaykit;

use std::time::{Duration, Instant};

use common::{Env, WAIT, ann};
use externalkit::{
    active_gateway, eip_until, external_network, gateway_chassis, gateway_chassis_until, kube_ovn_order,
    learnt_port, mark_node, sb_holder, two_chassis,
};
use kube_ovn_api::crd::ConditionStatus;
use kube_ovn_testkit::{Daemon, Netns, wait_until_async};
use netkit::{icmp_to, lrp_mac, nb_get, port, vpc_condition, vpc_until};
use serde_json::json;
use underlaykit::exists;

const GW_LABEL: &str = "ovn.kubernetes.io/external-gw";
const CHASSIS: &str = "ovn.kubernetes.io/chassis";

async fn vpc(env: &Env, spec: serde_json::Value) {
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "vpc1"}, "spec": spec}),
    )
    .await;
}

/// vpc1 (namespace `nsv`) with subnet s1 (10.1.0.0/24) and pod `a` on node1.
async fn vpc1_with_a_pod(env: &Env, spec: serde_json::Value) -> k8s_openapi::api::core::v1::Pod {
    let mut spec = spec;
    spec["namespaces"] = json!(["nsv"]);
    vpc(env, spec).await;
    underlaykit::subnet(
        env,
        "s1",
        json!({"vpc": "vpc1", "cidrBlock": "10.1.0.0/24", "namespaces": ["nsv"]}),
    )
    .await;
    env.subnet_ready("s1").await;
    env.pod("nsv", "a", "node1", &[]).await;
    env.routed("nsv", "a").await
}

fn router_option(env: &Env, router: &str, key: &str) -> String {
    env.ovn
        .nbctl(&[
            "--if-exists",
            "get",
            "Logical_Router",
            router,
            &format!("options:{key}"),
        ])
        .unwrap_or_default()
        .trim()
        .trim_matches('"')
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vpcs_external_gateway_rows_order_refusal_and_removal() {
    // A collection every second: the rows of a VPC deleted behind the controller's back go.
    let env = Env::start_with(&["--gc-interval=1"]).await;
    for (node, ip, chassis, encap) in [
        ("node1", "172.18.0.2", "ch-node1", "127.0.0.11"),
        ("node2", "172.18.0.3", "ch-node2", "127.0.0.12"),
    ] {
        env.node(node, ip).await;
        env.ovn.sbctl(&["chassis-add", chassis, "geneve", encap]).unwrap();
        mark_node(&env, node, json!({}), json!({CHASSIS: chassis})).await;
    }
    external_network(&env, "external", "10.200.0").await;
    let a = vpc1_with_a_pod(&env, json!({"enableExternal": true})).await;

    // No node labelled as an external gateway: refused whole, naming the field.
    let v = vpc_until(&env, "vpc1", "refused for want of a gateway node", |v| {
        vpc_condition(v, "Ready").is_some_and(|c| c.reason.as_deref() == Some("NoExternalGatewayNode"))
    })
    .await;
    let ready = vpc_condition(&v, "Ready").unwrap();
    assert_eq!(ready.status, ConditionStatus::False);
    podkit::warning(
        &env,
        "default",
        "Vpc",
        "vpc1",
        "NoExternalGatewayNode",
        &["Vpc vpc1: spec.enableExternal", GW_LABEL],
    )
    .await;
    assert!(
        !exists(&env, "Logical_Router_Port", "vpc1-external"),
        "nothing written"
    );
    assert!(!exists(&env, "Logical_Switch_Port", "external-vpc1"));
    assert!(
        eip_until(&env, "vpc1-external", "absent", |e| e.is_none())
            .await
            .is_none(),
        "no lrp EIP allocated"
    );

    // Both nodes labelled: the lrp EIP, the patch pair, the chassis in Kube-OVN's order.
    for node in ["node1", "node2"] {
        mark_node(&env, node, json!({GW_LABEL: "true"}), json!({})).await;
    }
    let order = kube_ovn_order("vpc1", &["ch-node1", "ch-node2"]);
    gateway_chassis_until(&env, "vpc1-external", &order).await;
    let eip = eip_until(&env, "vpc1-external", "ready", |e| {
        e.and_then(|e| e.status.as_ref()).and_then(|s| s.ready) == Some(true)
    })
    .await
    .unwrap();
    let status = eip.status.clone().unwrap();
    assert_eq!(
        status.v4_ip.as_deref(),
        Some("10.200.0.100"),
        "the first address after the excluded ones"
    );
    assert_eq!(status.type_.as_deref(), Some("lrp"));
    assert_eq!(eip.spec.type_.as_deref(), Some("lrp"));
    assert_eq!(eip.spec.external_subnet.as_deref(), Some("external"));
    let labels = eip.metadata.labels.clone().unwrap();
    assert_eq!(labels["ovn.kubernetes.io/subnet"], "external");
    assert_eq!(labels["ovn.kubernetes.io/ovn_eip_type"], "lrp");
    assert_eq!(labels["ovn.kubernetes.io/eip_v4_ip"], "10.200.0.100");
    let mac = lrp_mac(&env, "vpc1-external");
    assert_eq!(
        status.mac_address.as_deref(),
        Some(mac.as_str()),
        "the port's MAC is the EIP's"
    );
    assert_eq!(
        nb_get(&env, "Logical_Router_Port", "vpc1-external", "networks"),
        "[\"10.200.0.100/24\"]"
    );
    let lsp = env
        .ovn
        .nbctl(&["list", "Logical_Switch_Port", "external-vpc1"])
        .unwrap();
    for want in ["type                : router", "addresses           : [router]"] {
        assert!(lsp.contains(want), "{want}: {lsp}");
    }
    assert!(
        lsp.contains("router-port=vpc1-external") && lsp.contains("nat-addresses=router"),
        "{lsp}"
    );
    let on_switch = env.ovn.nbctl(&["lsp-list", "external"]).unwrap();
    assert!(
        on_switch.contains("(external-vpc1)") && on_switch.contains("(localnet.external)"),
        "{on_switch}"
    );
    let gc = env
        .ovn
        .nbctl(&[
            "--bare",
            "--columns=external_ids",
            "find",
            "Gateway_Chassis",
            &format!("name=vpc1-external-{}", order[0].0),
        ])
        .unwrap();
    assert!(gc.contains("lrp=vpc1-external"), "{gc}");
    let v = vpc_until(&env, "vpc1", "status says external", |v| {
        v.status.as_ref().and_then(|s| s.enable_external) == Some(true)
    })
    .await;
    let st = v.status.unwrap();
    assert_eq!(st.enable_bfd, Some(false));
    assert_eq!(st.extra_external_subnets, None);
    assert_ne!(
        router_option(&env, "vpc1", "always_learn_from_arp_request"),
        "false",
        "the router learns the external network's addresses"
    );

    // ovn-trace: without a route the outside is unreachable; with the user's default route to
    // the external gateway the packet leaves through the gateway port and the localnet port.
    let flow = icmp_to(&a, &lrp_mac(&env, "vpc1-s1"), "198.51.100.10");
    let trace = env.ovn.trace("s1", &flow).unwrap();
    assert!(
        !trace.delivers_to("localnet.external"),
        "no route yet: {}",
        trace.text
    );
    vpc(
        &env,
        json!({"namespaces": ["nsv"], "enableExternal": true,
            "staticRoutes": [{"cidr": "0.0.0.0/0", "nextHopIP": "10.200.0.1", "policy": "policyDst"}]}),
    )
    .await;
    let leaves = wait_until_async("the trace to leave through localnet.external", WAIT, || async {
        Ok(env.ovn.trace("s1", &flow)?.delivers_to("localnet.external"))
    })
    .await;
    let trace = env.ovn.trace("s1", &flow).unwrap();
    assert!(leaves.is_ok(), "{}", trace.text);
    // Through the gateway port: the router resolves the next hop 10.200.0.1 from the lrp EIP's
    // address and MAC (ovn-trace --minimal shows the ARP it sends).
    for want in [
        format!("eth.src = {mac}"),
        "arp.spa = 0xac80064".to_owned(),
        "arp.tpa = 0xac80001".to_owned(),
    ] {
        assert!(trace.text.contains(&want), "{want}: {}", trace.text);
    }
    assert!(!trace.delivers_to(&port(&a)));

    // The first chassis' node loses its label: its row goes, the other is first at 100.
    let first_node = if order[0].0 == "ch-node1" {
        "node1"
    } else {
        "node2"
    };
    mark_node(&env, first_node, json!({GW_LABEL: null}), json!({})).await;
    gateway_chassis_until(&env, "vpc1-external", &[(order[1].0.clone(), 100)]).await;
    mark_node(&env, first_node, json!({GW_LABEL: "true"}), json!({})).await;
    gateway_chassis_until(&env, "vpc1-external", &order).await;

    // extraExternalSubnets replaces the default subnet (Kube-OVN).
    external_network(&env, "external2", "10.201.0").await;
    vpc(
        &env,
        json!({"namespaces": ["nsv"], "enableExternal": true, "extraExternalSubnets": ["external2"]}),
    )
    .await;
    gateway_chassis_until(&env, "vpc1-external2", &order).await;
    eip_until(&env, "vpc1-external", "deleted with its port", |e| e.is_none()).await;
    let eip2 = eip_until(&env, "vpc1-external2", "ready", |e| {
        e.and_then(|e| e.status.as_ref()).and_then(|s| s.ready) == Some(true)
    })
    .await
    .unwrap();
    assert_eq!(eip2.status.unwrap().v4_ip.as_deref(), Some("10.201.0.100"));
    assert!(!exists(&env, "Logical_Router_Port", "vpc1-external"));
    assert!(!exists(&env, "Logical_Switch_Port", "external-vpc1"));
    vpc_until(&env, "vpc1", "status lists the extra subnet", |v| {
        v.status.as_ref().and_then(|s| s.extra_external_subnets.clone()) == Some(vec!["external2".into()])
    })
    .await;

    // enableExternal off: every row and the lrp EIP go, its address is free again.
    vpc(
        &env,
        json!({"namespaces": ["nsv"], "enableExternal": false, "extraExternalSubnets": ["external2"]}),
    )
    .await;
    eip_until(&env, "vpc1-external2", "deleted", |e| e.is_none()).await;
    netkit::nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Router_Port"],
        "no external port",
        |o| !o.contains("vpc1-external"),
    )
    .await;
    assert!(!exists(&env, "Logical_Switch_Port", "external2-vpc1"));
    assert!(gateway_chassis(&env, "vpc1-external2").is_empty());
    let gcs = env
        .ovn
        .nbctl(&["--bare", "--columns=name", "list", "Gateway_Chassis"])
        .unwrap();
    assert!(gcs.trim().is_empty(), "no Gateway_Chassis row left: {gcs}");
    let freed = wait_until_async("10.201.0.100 released in IPAM", WAIT, || async {
        let s = env.subnet_ready("external2").await;
        Ok(!s
            .status
            .unwrap()
            .v4_using_ip_range
            .unwrap_or_default()
            .contains("10.201.0.100"))
    })
    .await;
    assert!(freed.is_ok(), "{freed:?}");
    let v = vpc_until(&env, "vpc1", "status says not external", |v| {
        v.status.as_ref().and_then(|s| s.enable_external) == Some(false)
    })
    .await;
    assert_eq!(v.status.unwrap().extra_external_subnets, None);

    // Rows of a VPC that is gone (deleted while no controller ran its finalizer) are collected:
    // a BFD row and a switch port marked as that VPC's.
    let ghost_ids = "external_ids={vendor=kube-ovn,vpc=ghost,external_subnet=external}";
    env.ovn
        .nbctl(&[
            "--",
            "--id=@b",
            "create",
            "BFD",
            "logical_port=ghost-external",
            "dst_ip=10.200.0.1",
            "external_ids={vendor=kube-ovn,vpc=ghost}",
        ])
        .unwrap();
    env.ovn
        .nbctl(&[
            "lsp-add",
            "external",
            "external-ghost",
            "--",
            "set",
            "Logical_Switch_Port",
            "external-ghost",
            ghost_ids,
        ])
        .unwrap();

    // Deleting the VPC (its subnet first) removes its connection and its lrp EIP.
    vpc(&env, json!({"namespaces": ["nsv"], "enableExternal": true})).await;
    eip_until(&env, "vpc1-external", "ready again", |e| {
        e.and_then(|e| e.status.as_ref()).and_then(|s| s.ready) == Some(true)
    })
    .await;
    netkit::delete_pod(&env, "nsv", &a.metadata.name.clone().unwrap()).await;
    netkit::delete_subnet(&env, "s1").await;
    netkit::delete_vpc(&env, "vpc1").await;
    eip_until(&env, "vpc1-external", "deleted with the VPC", |e| e.is_none()).await;
    netkit::nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Switch_Port"],
        "no external-vpc1, no ghost port",
        |o| !o.contains("external-vpc1") && !o.contains("external-ghost"),
    )
    .await;
    netkit::nb_until(
        &env,
        &["--bare", "--columns=logical_port", "list", "BFD"],
        "no ghost BFD row",
        |o| o.trim().is_empty(),
    )
    .await;
    let _ = ann(&a, "ip_address");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_active_gateway_follows_the_chassis_that_holds_the_port() {
    let mut env = Env::start().await;
    let outside = Netns::create("xgw-o").unwrap();
    let chassis = tokio::task::block_in_place(|| two_chassis(&env, &outside));
    let names: Vec<String> = chassis.iter().map(|c| c.name().to_owned()).collect();
    for (node, (ip, ch)) in ["node1", "node2"]
        .iter()
        .zip([("172.18.0.2", &names[0]), ("172.18.0.3", &names[1])])
    {
        env.node(node, ip).await;
        mark_node(&env, node, json!({GW_LABEL: "true"}), json!({CHASSIS: ch})).await;
    }
    let node_of = |ch: &str| if ch == names[0] { "node1" } else { "node2" };
    external_network(&env, "external", "10.200.0").await;
    vpc1_with_a_pod(&env, json!({"enableExternal": true, "enableBfd": true})).await;
    let order = kube_ovn_order("vpc1", &[&names[0], &names[1]]);
    gateway_chassis_until(&env, "vpc1-external", &order).await;

    // The top chassis claims the port; its node is the EIP's active gateway.
    let first = node_of(&order[0].0);
    let eip = eip_until(&env, "vpc1-external", &format!("activateGateway {first}"), |e| {
        active_gateway(e).as_deref() == Some(first)
    })
    .await;
    assert_eq!(sb_holder(&env, "vpc1-external"), order[0].0);
    assert_eq!(eip.unwrap().status.unwrap().ready, Some(true));
    // The external L2 learnt the port's MAC on the holder's link (its announcements).
    let mac = lrp_mac(&env, "vpc1-external");
    let link_of = |ch: &str| format!("xo{}", chassis.iter().position(|c| c.name() == ch).unwrap());
    let learnt = wait_until_async(
        "the external L2 to learn the port's MAC from the holder",
        WAIT,
        || async { Ok(learnt_port(&outside, &mac) == link_of(&order[0].0)) },
    )
    .await;
    assert!(learnt.is_ok(), "{learnt:?}: {:?}", learnt_port(&outside, &mac));

    // BFD toward the external gateway, with the flags' timers.
    let bfd = netkit::nb_until(
        &env,
        &[
            "--bare",
            "--columns=logical_port,dst_ip,min_tx,min_rx,detect_mult,external_ids",
            "list",
            "BFD",
        ],
        "the BFD row",
        |o| !o.trim().is_empty(),
    )
    .await;
    let fields: Vec<&str> = bfd.lines().map(str::trim).collect();
    assert_eq!(
        &fields[..5],
        ["vpc1-external", "10.200.0.1", "100", "100", "3"],
        "{bfd}"
    );
    assert!(fields[5].contains("vpc=vpc1"), "{bfd}");
    let v = vpc_until(&env, "vpc1", "status enableBfd", |v| {
        v.status.as_ref().and_then(|s| s.enable_bfd) == Some(true)
    })
    .await;
    assert_eq!(v.status.unwrap().enable_external, Some(true));

    // OVN 23.03 runs a BFD session only for a row that a static route's `bfd` references
    // (ovn-northd sets the others `admin_down`): Kube-OVN's enableBfd row alone stays inert.
    // (Measured by hand on this fixture: with the user's route to 10.200.0.1 referencing the row
    // and BIRD as the peer in `outside`, it comes up in ~0.8 s and goes down ~3 s after BIRD.)
    netkit::nb_until(
        &env,
        &["--bare", "--columns=status", "list", "BFD"],
        "ovn-northd to mark the unreferenced BFD row admin_down",
        |o| o.trim() == "admin_down",
    )
    .await;

    // enableBfd off: the BFD row goes.
    vpc(&env, json!({"namespaces": ["nsv"], "enableExternal": true})).await;
    netkit::nb_until(
        &env,
        &["--bare", "--columns=_uuid", "list", "BFD"],
        "no BFD row",
        |o| o.trim().is_empty(),
    )
    .await;
    vpc_until(&env, "vpc1", "status enableBfd false", |v| {
        v.status.as_ref().and_then(|s| s.enable_bfd) == Some(false)
    })
    .await;

    // Graceful exit of the active chassis' ovn-controller (it deletes its Chassis row, R3): the
    // other claims the port, the status follows (timed from the SB claim to the status), and
    // the new holder's gratuitous ARPs (nat-addresses=router) move the port's MAC on the
    // external L2 without any traffic.
    // A NAT address on the router (as an OvnSnatRule writes it): the holder announces it too.
    env.ovn
        .nbctl(&["lr-nat-add", "vpc1", "snat", "10.200.0.150", "10.1.0.0/24"])
        .unwrap();
    env.ovn.sync().unwrap();
    let second = node_of(&order[1].0);
    let active = chassis.iter().position(|c| c.name() == order[0].0).unwrap();
    // What the new holder's link carries: ARP only.
    let dir = tempfile::tempdir().unwrap();
    let capture_log = dir.path().join("tcpdump.log");
    let link = link_of(&order[1].0);
    let mut capture = Daemon::spawn(
        "tcpdump",
        "ip",
        &[
            "netns",
            "exec",
            outside.name(),
            "tcpdump",
            "-l",
            "-n",
            "-i",
            &link,
            "arp",
        ]
        .map(String::from),
        &capture_log,
        &[],
    )
    .unwrap();
    let listening = wait_until_async("tcpdump to listen", WAIT, || {
        let up = capture.log().contains("listening on");
        async move { Ok(up) }
    })
    .await;
    assert!(listening.is_ok(), "{listening:?}: {}", capture.log());
    let started = Instant::now();
    chassis[active].ovn_appctl(&["exit"]).unwrap();
    let api: kube::Api<kube_ovn_api::crd::OvnEip> = kube::Api::all(env.kube.clone());
    let (mut claimed, mut patched, mut relearnt, mut nat_announced) = (None, None, None, None);
    let deadline = Instant::now() + WAIT;
    while (claimed.is_none() || patched.is_none() || relearnt.is_none() || nat_announced.is_none())
        && Instant::now() < deadline
    {
        let garp = |log: &str| log.contains("tell 10.200.0.150") || log.contains("Reply 10.200.0.150 is-at");
        if nat_announced.is_none() && garp(&capture.log()) {
            nat_announced = Some(started.elapsed());
        }
        if relearnt.is_none() && learnt_port(&outside, &mac) == link_of(&order[1].0) {
            relearnt = Some(started.elapsed());
        }
        if claimed.is_none() && sb_holder(&env, "vpc1-external") == order[1].0 {
            claimed = Some(started.elapsed());
        }
        if patched.is_none()
            && active_gateway(api.get_opt("vpc1-external").await.unwrap().as_ref()).as_deref() == Some(second)
        {
            patched = Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    capture.stop();
    let (Some(claimed), Some(patched), Some(relearnt), Some(nat_announced)) =
        (claimed, patched, relearnt, nat_announced)
    else {
        panic!(
            "after ovn-controller exit: claimed {claimed:?}, status {patched:?}, MAC relearnt {relearnt:?}, NAT address announced {nat_announced:?}; SB holder {:?}\ncapture:\n{}\n{}",
            sb_holder(&env, "vpc1-external"),
            capture.log(),
            chassis.iter().map(|c| c.logs_tail(15)).collect::<String>()
        );
    };
    eprintln!(
        "failover: SB claim by the standby {claimed:?} after ovn-controller exit, status.activateGateway {patched:?} (SB claim → status: {:?}), the external L2 relearnt the port's MAC {relearnt:?}, the NAT address announced {nat_announced:?}",
        patched.saturating_sub(claimed)
    );
    // The chassis that left keeps its Gateway_Chassis row (it comes back on restart).
    assert_eq!(gateway_chassis(&env, "vpc1-external"), order);

    // The label removed from the new holder's node: its row goes, the port has no live chassis
    // left (the other's ovn-controller is gone), and the status says nobody holds it.
    let started = Instant::now();
    mark_node(&env, second, json!({GW_LABEL: null}), json!({})).await;
    let cleared = eip_until(&env, "vpc1-external", "activateGateway removed", |e| {
        e.is_some_and(|e| active_gateway(Some(e)).is_none())
    })
    .await;
    eprintln!(
        "label removed from the holder's node → status.activateGateway removed in {:?}",
        started.elapsed()
    );
    assert_eq!(sb_holder(&env, "vpc1-external"), "", "nobody holds the port");
    assert_eq!(
        gateway_chassis(&env, "vpc1-external"),
        [(order[0].0.clone(), 100)]
    );
    assert_eq!(cleared.unwrap().status.unwrap().ready, Some(true));

    // A restart with nothing changed writes nothing to the northbound database.
    let txns = |m: &str| {
        netkit::metric(
            m,
            "kube_ovn_controller_ovsdb_transaction_duration_seconds_count",
            &[],
        )
    };
    env.kill_controller().await;
    env.start_controller();
    let port = env.metrics_addr.unwrap().port();
    wait_until_async(
        "the VPCs and subnets reconciled after the restart",
        WAIT,
        || async move {
            let m = netkit::metrics(port).await?;
            Ok(netkit::reconciles(&m, "Vpc") >= 2.0 && netkit::reconciles(&m, "Subnet") >= 4.0)
        },
    )
    .await
    .unwrap();
    let m = netkit::metrics(port).await.unwrap();
    let writes = txns(&m);
    assert!(writes == 0.0, "northbound writes after a restart: {writes}");
    let eip = eip_until(&env, "vpc1-external", "still held by nobody", |e| {
        e.is_some_and(|e| active_gateway(Some(e)).is_none())
    })
    .await;
    assert_eq!(
        eip.unwrap().status.unwrap().v4_ip.as_deref(),
        Some("10.200.0.100"),
        "the same address"
    );
    drop(chassis);
}

/// Neither an unreachable southbound database nor `--enable-eip-snat=false` holds up a VPC that
/// asks for no external gateway; one that asks is refused naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vpc_without_external_gateway_needs_neither_the_southbound_nor_the_flag() {
    let nowhere = format!(
        "--ovn-sb-addr=tcp:127.0.0.1:{}",
        kube_ovn_testkit::free_port().unwrap()
    );
    let env = Env::start_with(&[&nowhere, "--ovsdb-con-timeout=1", "--enable-eip-snat=false"]).await;
    env.node("node1", "172.18.0.2").await;
    vpc1_with_a_pod(&env, json!({})).await;
    let v = vpc_until(&env, "vpc1", "ready", |v| {
        vpc_condition(v, "Ready").is_some_and(|c| c.status == ConditionStatus::True)
    })
    .await;
    assert_eq!(
        v.status.unwrap().enable_external,
        Some(false),
        "Kube-OVN's mirror of the spec"
    );
    vpc(&env, json!({"namespaces": ["nsv"], "enableExternal": true})).await;
    vpc_until(&env, "vpc1", "refused", |v| {
        vpc_condition(v, "Ready").is_some_and(|c| c.reason.as_deref() == Some("ExternalSubnetNotFound"))
    })
    .await;
    podkit::warning(
        &env,
        "default",
        "Vpc",
        "vpc1",
        "ExternalSubnetNotFound",
        &["Vpc vpc1: spec.enableExternal", "--enable-eip-snat=false"],
    )
    .await;
}
