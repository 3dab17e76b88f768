//! Underlay subnets and U2O interconnection on real OVN and a real API server (Kube-OVN's
//! `pkg/controller/subnet.go` behaviour): the localnet port per Vlan, the router port removed,
//! kept (`logicalGateway`) or on the U2O address, the U2O policies and exclude address sets, the
//! Vlan checks, and what ovn-trace says packets do.
//!
//! The Vlan and ProviderNetwork reconcilers are not under test here: each test writes the Vlan and
//! ProviderNetwork status fields the subnet reconciler reads (`pn.status.vlans`, `vlan.status.conflict`).

mod common;
mod netkit;
mod podkit;
mod underlaykit;

use common::{Env, ann};
use kube::api::{Api, Patch, PatchParams};
use kube_ovn_api::crd::{ConditionStatus, Ip, Subnet, Vlan};
use kube_ovn_testkit::wait_until_async;
use netkit::{delete_subnet, icmp_to, lrp_mac, nb_until, port, subnet_condition, subnet_until};
use serde_json::json;
use underlaykit::{
    GW_MAC, column, exists, localnet, policies_until, provider_network, subnet, subnet_policies, vlan,
    warnings_absent,
};

/// A plain underlay subnet in the default VPC: its localnet port follows the Vlan (tag, no tag
/// for ID 0, the provider), it has no router port, no gateway policies and no node port groups;
/// its pods are told their Vlan and no router, and their traffic to the outside leaves through
/// the localnet port untouched. `logicalGateway` brings OVN's router port back; Kube-OVN's old
/// `ln-<subnet>` port goes; an underlay subnet may hold node addresses; deletion takes the
/// localnet port with the switch, and turning the subnet overlay removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_underlay_subnet_sits_on_its_vlan_without_a_router_port() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    provider_network(&env, "pn1", &["v100"]).await;
    provider_network(&env, "pn2", &["v100"]).await;
    vlan(&env, "v100", 100, "pn1").await;
    subnet(
        &env,
        "ul",
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "namespaces": ["nsu"]}),
    )
    .await;
    env.subnet_ready("ul").await;
    let row = localnet(&env, "ul");
    assert_eq!(column(&row, "type"), "localnet", "{row}");
    assert_eq!(column(&row, "addresses"), "[unknown]", "{row}");
    assert_eq!(column(&row, "options"), "{network_name=pn1}", "{row}");
    assert_eq!(column(&row, "tag"), "100", "{row}");
    let ids = column(&row, "external_ids");
    for want in ["ipv4_network=\"172.17.0.0/24\"", "ls=ul", "vendor=kube-ovn"] {
        assert!(ids.contains(want), "{want} in {ids}");
    }
    assert!(!exists(&env, "Logical_Router_Port", "ovn-cluster-ul"));
    assert!(!exists(&env, "Logical_Switch_Port", "ul-ovn-cluster"));
    assert!(subnet_policies(&env, "ovn-cluster", "ul").is_empty());
    let pgs = env
        .ovn
        .nbctl(&["--bare", "--columns=name", "list", "Port_Group"])
        .unwrap();
    assert!(!pgs.lines().any(|l| l.starts_with("ul.")), "{pgs}");

    env.pod("nsu", "u1", "node1", &[]).await;
    let u1 = env.routed("nsu", "u1").await;
    assert_eq!(ann(&u1, "vlan_id"), "100");
    assert_eq!(ann(&u1, "provider_network"), "pn1");
    assert_eq!(
        ann(&u1, "logical_router"),
        "",
        "the physical router is the gateway"
    );
    assert_eq!(ann(&u1, "gateway"), "172.17.0.254");
    // The pod's tenant writes a router into it (a Service's VPC is read from its pods'
    // logical_router): the handshake gives none here, so the controller removes it.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(env.kube.clone(), "nsu");
    let forged = json!({"metadata": {"annotations": {"ovn.kubernetes.io/logical_router": "vpc-x"}}});
    pods.patch("u1", &PatchParams::default(), &Patch::Merge(forged))
        .await
        .unwrap();
    wait_until_async(
        "the tenant's logical_router on u1 to be removed",
        common::WAIT,
        || {
            let pods = pods.clone();
            async move {
                let p = pods.get("u1").await?;
                Ok(p.metadata
                    .annotations
                    .is_some_and(|a| !a.contains_key("ovn.kubernetes.io/logical_router")))
            }
        },
    )
    .await
    .unwrap();
    let t = env.ovn.trace("ul", &icmp_to(&u1, GW_MAC, "8.8.8.8")).unwrap();
    assert!(t.delivers_to("localnet.ul"), "{}", t.text);
    assert!(
        !t.text.contains("ip.ttl--") && !t.text.contains("eth.src ="),
        "untouched by a router: {}",
        t.text
    );

    // Kube-OVN's old name for the localnet port goes on the next reconcile.
    env.ovn
        .nbctl(&[
            "lsp-add",
            "ul",
            "ln-ul",
            "--",
            "lsp-set-type",
            "ln-ul",
            "localnet",
        ])
        .unwrap();
    vlan(&env, "v100", 200, "pn1").await;
    nb_until(
        &env,
        &["list", "Logical_Switch_Port", "localnet.ul"],
        "retagged",
        |o| column(o, "tag") == "200",
    )
    .await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Switch_Port"],
        "ln-ul gone",
        |o| !o.lines().any(|l| l.trim() == "ln-ul"),
    )
    .await;
    vlan(&env, "v100", 0, "pn1").await;
    nb_until(
        &env,
        &["list", "Logical_Switch_Port", "localnet.ul"],
        "untagged",
        |o| column(o, "tag") == "[]",
    )
    .await;
    vlan(&env, "v100", 0, "pn2").await;
    nb_until(
        &env,
        &["list", "Logical_Switch_Port", "localnet.ul"],
        "on pn2",
        |o| column(o, "options") == "{network_name=pn2}",
    )
    .await;

    subnet(
        &env,
        "ul",
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "namespaces": ["nsu"], "logicalGateway": true}),
    )
    .await;
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "ovn-cluster-ul", "networks"],
        "OVN's router port on the gateway",
        |o| o.contains("172.17.0.254/24"),
    )
    .await;
    assert!(exists(&env, "Logical_Switch_Port", "ul-ovn-cluster"));
    subnet(
        &env,
        "ul",
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "namespaces": ["nsu"], "logicalGateway": false}),
    )
    .await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Router_Port"],
        "router port gone",
        |o| !o.lines().any(|l| l.trim() == "ovn-cluster-ul"),
    )
    .await;
    assert!(!exists(&env, "Logical_Switch_Port", "ul-ovn-cluster"));

    // The nodes' own network may be an underlay subnet (Kube-OVN checks overlay subnets only).
    subnet(
        &env,
        "nodes",
        json!({"cidrBlock": "172.18.0.0/24", "vlan": "v100"}),
    )
    .await;
    env.subnet_ready("nodes").await;

    // Deleted: the localnet port goes with the switch.
    delete_subnet(&env, "nodes").await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Switch_Port"],
        "localnet gone with its subnet",
        |o| !o.lines().any(|l| l.trim() == "localnet.nodes"),
    )
    .await;
    assert!(!exists(&env, "Logical_Switch", "nodes"));

    // Back to overlay: no localnet port, OVN's router port on the gateway.
    subnet(
        &env,
        "ul",
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "",
            "namespaces": ["nsu"], "logicalGateway": false}),
    )
    .await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Logical_Switch_Port"],
        "localnet gone with the vlan",
        |o| !o.lines().any(|l| l.trim() == "localnet.ul") && o.lines().any(|l| l.trim() == "ul-ovn-cluster"),
    )
    .await;
}

/// U2O in the default VPC: the router port on the allocated U2O address (a static one honoured)
/// with its MAC, Kube-OVN's three policies and the exclude set of node addresses (following the
/// nodes), the IP CR, status fields; underlay and overlay pods reach each other through the
/// router. U2O off removes it all; refusals name the field; the U2O address does not hold up
/// deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn u2o_joins_the_underlay_to_the_default_vpc_and_leaves_no_trace_when_off() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    provider_network(&env, "pn1", &["v100"]).await;
    vlan(&env, "v100", 100, "pn1").await;
    let spec = |u2o: bool, ip: &str| {
        json!({"cidrBlock": "172.17.0.0/24", "gateway": "172.17.0.254", "vlan": "v100",
            "namespaces": ["nsu"], "u2oInterconnection": u2o, "u2oInterconnectionIP": ip})
    };
    subnet(&env, "ul", spec(true, "")).await;
    let s = subnet_until(&env, "ul", "a U2O address", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            .is_some_and(|i| !i.is_empty())
    })
    .await;
    let st = s.status.unwrap();
    let u2o_ip = st.u2o_interconnection_ip.unwrap();
    let u2o_mac = st.u2o_interconnection_mac.unwrap();
    assert_eq!(st.u2o_interconnection_vpc.as_deref(), Some("ovn-cluster"));
    assert!(
        u2o_ip.starts_with("172.17.0.") && u2o_ip != "172.17.0.254",
        "{u2o_ip}"
    );
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "ovn-cluster-ul", "networks"],
        "the router port on the U2O address",
        |o| o.contains(&format!("{u2o_ip}/24")),
    )
    .await;
    assert_eq!(lrp_mac(&env, "ovn-cluster-ul"), u2o_mac);
    let ip = Api::<Ip>::all(env.kube.clone())
        .get("u2o-interconnection.ovn-cluster.ul")
        .await
        .unwrap();
    assert_eq!(ip.spec.namespace.as_deref(), Some("default"));
    assert_eq!(ip.spec.v4_ip_address.as_deref(), Some(u2o_ip.as_str()));
    let want = [
        "29000 ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
        "29400 ip4.dst == 172.17.0.0/24 allow  true",
        "31000 ip4.dst == $ul.u2o_exclude_ip.ip4 && ip4.src == 172.17.0.0/24 reroute 172.17.0.254 true",
    ];
    policies_until(&env, "ovn-cluster", "ul", "the three U2O policies", &want).await;
    nb_until(
        &env,
        &["get", "Address_Set", "ul.u2o_exclude_ip.ip4", "addresses"],
        "the node's address excluded",
        |o| o.trim() == "[\"172.18.0.2\"]",
    )
    .await;

    nb_until(
        &env,
        &["get", "Logical_Router", "ovn-cluster", "options"],
        "the router learns from ARP requests (Kube-OVN's vpc.go)",
        |o| !o.contains("always_learn_from_arp_request"),
    )
    .await;

    // A restart leaves the router's row alone: start-up used to write the options of a VPC
    // without U2O and the VPC's reconcile to take ARP learning back, a flip of the router's flows
    // in northd and every chassis at each controller start. Any write changes `_version`.
    let version = |env: &Env| {
        let select = r#"["OVN_Northbound",{"op":"select","table":"Logical_Router","where":[["name","==","ovn-cluster"]],"columns":["_version"]}]"#;
        let out = std::process::Command::new("ovsdb-client")
            .args(["transact", &env.ovn.nb_remote(), select])
            .output()
            .unwrap();
        assert!(out.status.success(), "ovsdb-client: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let before = version(&env);
    env.kill_controller().await;
    env.start_controller();

    // Underlay ↔ overlay through the router (pods the restarted controller wires).
    env.pod("nsu", "u1", "node1", &[]).await;
    env.pod("nso", "o1", "node1", &[]).await;
    let (u1, o1) = (env.routed("nsu", "u1").await, env.routed("nso", "o1").await);
    assert_eq!(
        version(&env),
        before,
        "the restarted controller rewrote the cluster router"
    );
    assert_eq!(ann(&u1, "logical_router"), "ovn-cluster");
    assert_eq!(ann(&u1, "vlan_id"), "100");
    let to_overlay = icmp_to(&u1, &u2o_mac, ann(&o1, "ip_address"));
    let t = env.ovn.trace("ul", &to_overlay).unwrap();
    assert!(
        t.delivers_to(&port(&o1)) && t.text.contains("ip.ttl--"),
        "{}",
        t.text
    );
    let to_underlay = icmp_to(
        &o1,
        &lrp_mac(&env, "ovn-cluster-ovn-default"),
        ann(&u1, "ip_address"),
    );
    let t = env.ovn.trace("ovn-default", &to_underlay).unwrap();
    assert!(t.delivers_to(&port(&u1)), "overlay → underlay: {}", t.text);

    // Kube-OVN's "should drop ARP/ND request from localnet port to LRP": the physical gateway
    // asking for the U2O address through the localnet port gets no answer (every chassis would
    // give one), while its requests for a pod's address still reach the pod.
    let arp_from_vlan = |tpa: &str| {
        format!(
            "inport == \"localnet.ul\" && eth.src == 02:00:00:00:00:fe && eth.dst == ff:ff:ff:ff:ff:ff && \
             arp.op == 1 && arp.sha == 02:00:00:00:00:fe && arp.spa == 172.17.0.254 && \
             arp.tha == 00:00:00:00:00:00 && arp.tpa == {tpa}"
        )
    };
    let t = env.ovn.trace("ul", &arp_from_vlan(&u2o_ip)).unwrap();
    assert!(
        t.outputs.is_empty(),
        "ARP for the U2O address from the VLAN: {}",
        t.text
    );
    let t = env
        .ovn
        .trace("ul", &arp_from_vlan(ann(&u1, "ip_address")))
        .unwrap();
    assert!(
        t.delivers_to(&port(&u1)),
        "ARP for a pod from the VLAN: {}",
        t.text
    );

    // The exclude set follows the nodes.
    env.node("node2", "172.18.0.3").await;
    nb_until(
        &env,
        &["get", "Address_Set", "ul.u2o_exclude_ip.ip4", "addresses"],
        "node2 excluded too",
        |o| o.contains("172.18.0.2") && o.contains("172.18.0.3"),
    )
    .await;

    // Refusals: outside the CIDR, the gateway, logicalGateway with U2O, overlay-only routing
    // without U2O.
    let mut first = true;
    for (bad, words) in [
        (
            spec(true, "172.18.0.9"),
            vec!["spec.u2oInterconnectionIP", "is not in subnet ul cidr"],
        ),
        (
            spec(true, "172.17.0.254"),
            vec!["conflicts with subnet gateway 172.17.0.254"],
        ),
        (
            {
                let mut s = spec(true, "");
                s["logicalGateway"] = json!(true);
                s
            },
            vec!["logicalGateway and u2oInterconnection can't be opened at the same time"],
        ),
        (
            {
                let mut s = spec(false, "");
                s["u2oFeatures"] = json!({"overlayOnlyRouting": true});
                s
            },
            vec![
                "spec.u2oFeatures.overlayOnlyRouting",
                "u2oFeatures.overlayOnlyRouting can only be enabled when u2OInterconnection is true",
            ],
        ),
    ] {
        subnet(&env, "ul", bad).await;
        let s = subnet_until(&env, "ul", "refused", |s| {
            subnet_condition(s, "Validated").is_some_and(|c| {
                c.status == ConditionStatus::False
                    && words
                        .iter()
                        .all(|w| c.message.as_deref().unwrap_or_default().contains(w))
            })
        })
        .await;
        assert_eq!(
            s.status.unwrap().u2o_interconnection_ip.as_deref(),
            Some(u2o_ip.as_str()),
            "nothing changed"
        );
        if first {
            // kube's event recorder folds later events of the same reason into the first's series
            // (same note), so only the first refusal's words are in an event.
            podkit::warning(
                &env,
                "default",
                "Subnet",
                "ul",
                "ValidateLogicalSwitchFailed",
                &words,
            )
            .await;
            first = false;
        }
    }
    assert_eq!(lrp_mac(&env, "ovn-cluster-ul"), u2o_mac, "the router port stays");

    // A static address is honoured (the old one is released).
    subnet(&env, "ul", spec(true, "172.17.0.100")).await;
    subnet_until(&env, "ul", "the static U2O address", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            == Some("172.17.0.100")
    })
    .await;
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "ovn-cluster-ul", "networks"],
        "the router port on the static address",
        |o| o.contains("172.17.0.100/24"),
    )
    .await;

    // The U2O address is the subnet's, not a gone pod's: the collection at start (which finds
    // the pod deleted while no controller ran) leaves its IP CR alone.
    let ips: Api<Ip> = Api::all(env.kube.clone());
    let u2o_uid = ips
        .get("u2o-interconnection.ovn-cluster.ul")
        .await
        .unwrap()
        .metadata
        .uid;
    // (`zz.nsu` sorts after the U2O key: the collection has passed that key once it is gone.)
    env.pod("nsu", "zz", "node1", &[]).await;
    env.routed("nsu", "zz").await;
    env.kill_controller().await;
    netkit::delete_pod(&env, "nsu", "zz").await;
    env.start_controller();
    wait_until_async(
        "the collection at start to take zz's IP CR",
        common::WAIT,
        || async { Ok(ips.get_opt("zz.nsu").await?.is_none()) },
    )
    .await
    .unwrap();
    let kept = ips.get_opt("u2o-interconnection.ovn-cluster.ul").await.unwrap();
    assert_eq!(kept.and_then(|i| i.metadata.uid), u2o_uid, "the same U2O IP CR");

    // U2O off: no router port, no policies, no address set, no IP CR, status cleared.
    subnet(&env, "ul", spec(false, "")).await;
    let s = subnet_until(&env, "ul", "U2O status cleared", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_ip.as_deref())
            == Some("")
    })
    .await;
    let st = s.status.unwrap();
    assert_eq!(st.u2o_interconnection_mac.as_deref(), Some(""));
    assert_eq!(st.u2o_interconnection_vpc.as_deref(), Some(""));
    assert_eq!(s.spec.u2o_interconnection_ip.as_deref(), Some(""));
    assert!(!exists(&env, "Logical_Router_Port", "ovn-cluster-ul"));
    assert!(subnet_policies(&env, "ovn-cluster", "ul").is_empty());
    assert!(!exists(&env, "Address_Set", "ul.u2o_exclude_ip.ip4"));
    wait_until_async("the U2O IP CR to go", common::WAIT, || async {
        Ok(Api::<Ip>::all(env.kube.clone())
            .get_opt("u2o-interconnection.ovn-cluster.ul")
            .await?
            .is_none())
    })
    .await
    .unwrap();

    // Back on, then deleted: the U2O address does not hold the finalizer.
    subnet(&env, "ul", spec(true, "")).await;
    nb_until(
        &env,
        &["--bare", "--columns=name", "list", "Address_Set"],
        "the set back",
        |o| o.lines().any(|l| l.trim() == "ul.u2o_exclude_ip.ip4"),
    )
    .await;
    netkit::delete_pod(&env, "nsu", "u1").await;
    delete_subnet(&env, "ul").await;
    wait_until_async("subnet ul to be gone", common::WAIT, || async {
        Ok(Api::<Subnet>::all(env.kube.clone())
            .get_opt("ul")
            .await?
            .is_none())
    })
    .await
    .unwrap();
    assert!(!exists(&env, "Address_Set", "ul.u2o_exclude_ip.ip4"));
    assert!(subnet_policies(&env, "ovn-cluster", "ul").is_empty());
    wait_until_async("the U2O IP CR to go with the subnet", common::WAIT, || async {
        Ok(Api::<Ip>::all(env.kube.clone())
            .get_opt("u2o-interconnection.ovn-cluster.ul")
            .await?
            .is_none())
    })
    .await
    .unwrap();
}

/// The Vlan checks (missing: not ready and a Warning; its ProviderNetwork missing: not ready,
/// quietly; in conflict: refused with Kube-OVN's message), and U2O in a custom VPC: policy3, the
/// common allow and the source route to the physical gateway, and the router learning from ARP
/// requests while it has such a subnet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vlan_checks_and_u2o_in_a_custom_vpc() {
    let env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    let spec = json!({"cidrBlock": "172.19.0.0/24", "vlan": "v300", "vpc": "vpc1",
        "u2oInterconnection": true});
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Vpc", "metadata": {"name": "vpc1"},
        "spec": {}}),
    )
    .await;
    netkit::vpc_until(&env, "vpc1", "a router", |v| {
        v.status.as_ref().and_then(|s| s.router.as_deref()) == Some("vpc1")
    })
    .await;
    subnet(&env, "cul", spec.clone()).await;
    let s = subnet_until(&env, "cul", "not ready: no vlan", |s| {
        subnet_condition(s, "Ready").is_some_and(|c| c.reason.as_deref() == Some("VlanNotFound"))
    })
    .await;
    assert!(!netkit::subnet_ready(&s));
    podkit::warning(
        &env,
        "default",
        "Subnet",
        "cul",
        "VlanNotFound",
        &["spec.vlan", "v300"],
    )
    .await;
    assert!(!exists(&env, "Logical_Switch", "cul"), "nothing applied");

    // The Vlan's ProviderNetwork does not exist yet: not ready, no Warning.
    vlan(&env, "v300", 300, "pn3").await;
    subnet_until(&env, "cul", "waiting for the vlan", |s| {
        subnet_condition(s, "Ready").is_some_and(|c| c.reason.as_deref() == Some("VlanNotReady"))
    })
    .await;
    let events = podkit::events(&env, "default", "cul").await;
    assert!(warnings_absent(&events, "VlanNotReady"), "{events:#?}");
    assert!(!exists(&env, "Logical_Switch", "cul"));

    provider_network(&env, "pn3", &["v300"]).await;
    env.subnet_ready("cul").await;
    let row = localnet(&env, "cul");
    assert_eq!(column(&row, "tag"), "300", "{row}");
    let s = subnet_until(&env, "cul", "a U2O address", |s| {
        s.status
            .as_ref()
            .and_then(|s| s.u2o_interconnection_vpc.as_deref())
            .is_some_and(|v| v == "vpc1")
    })
    .await;
    let u2o_ip = s.status.unwrap().u2o_interconnection_ip.unwrap();
    nb_until(
        &env,
        &["get", "Logical_Router_Port", "vpc1-cul", "networks"],
        "the router port on the U2O address",
        |o| o.contains(&format!("{u2o_ip}/24")),
    )
    .await;
    assert!(
        Api::<Ip>::all(env.kube.clone())
            .get_opt("u2o-interconnection.vpc1.cul")
            .await
            .unwrap()
            .is_some()
    );
    let want = [
        "29000 ip4.src == 172.19.0.0/24 reroute 172.19.0.1 true",
        "31000 ip4.dst == 172.19.0.0/24 allow  false",
    ];
    policies_until(&env, "vpc1", "cul", "policy3 and the common allow", &want).await;
    let routes = nb_until(&env, &["lr-route-list", "vpc1"], "the source route", |o| {
        o.contains("172.19.0.0/24") && o.contains("172.19.0.1") && o.contains("src-ip")
    })
    .await;
    assert!(
        !env.ovn
            .nbctl(&["--bare", "--columns=name", "list", "Address_Set"])
            .unwrap()
            .contains("cul."),
        "{routes}"
    );
    nb_until(
        &env,
        &["get", "Logical_Router", "vpc1", "options"],
        "the router learns from ARP requests",
        |o| !o.contains("always_learn_from_arp_request"),
    )
    .await;

    // A conflicting Vlan is refused with Kube-OVN's message.
    vlan(&env, "v300b", 300, "pn3").await;
    Api::<Vlan>::all(env.kube.clone())
        .patch_status(
            "v300b",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conflict": true}})),
        )
        .await
        .unwrap();
    let mut conflicting = spec.clone();
    conflicting["vlan"] = json!("v300b");
    subnet(&env, "cul", conflicting).await;
    subnet_until(&env, "cul", "refused", |s| {
        subnet_condition(s, "Validated")
            .is_some_and(|c| c.message.as_deref() == Some("subnet cul has invalid conflict vlan v300b"))
    })
    .await;
    podkit::warning(
        &env,
        "default",
        "Subnet",
        "cul",
        "ValidateLogicalSwitchFailed",
        &["subnet cul has invalid conflict vlan v300b"],
    )
    .await;
    assert_eq!(column(&localnet(&env, "cul"), "tag"), "300", "nothing changed");

    // U2O off: the router port goes, and the router stops learning from every ARP request.
    let mut off = spec.clone();
    off["u2oInterconnection"] = json!(false);
    subnet(&env, "cul", off).await;
    nb_until(
        &env,
        &["get", "Logical_Router", "vpc1", "options"],
        "ARP learning off again",
        |o| o.contains("always_learn_from_arp_request=\"false\""),
    )
    .await;
    nb_until(&env, &["lr-route-list", "vpc1"], "the source route gone", |o| {
        !o.contains("172.19.0.0/24")
    })
    .await;
    assert!(subnet_policies(&env, "vpc1", "cul").is_empty());
    assert!(!exists(&env, "Logical_Router_Port", "vpc1-cul"));
}
