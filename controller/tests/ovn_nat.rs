//! OVN-native NAT on a custom VPC: OvnEip, OvnFip, OvnSnatRule, OvnDnatRule against a real
//! kube-apiserver and OVN (NB, SB, northd), checked in the northbound rows, with ovn-trace from
//! the external network's localnet port, and in the objects' labels, status and events.
//!
//! The VPC's external port (`vpc1-external` on switch `external`, with a gateway chassis) is
//! made here with ovn-nbctl, as the external-gateway reconciler makes it: these tests need none
//! of that reconciler. The external network is Kube-OVN's documented one: ProviderNetwork
//! `external`, Vlan `vlan0` (id 0), underlay Subnet `external` (10.200.0.0/24, gateway .1).

mod common;
mod netkit;
mod ovn_natkit;
mod underlaykit;

use common::{WAIT, ann};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube_ovn_api::crd::condition::{ConditionStatus, find_condition};
use kube_ovn_api::crd::{OvnDnatRule, OvnEip, OvnFip, OvnSnatRule};
use kube_ovn_testkit::wait_until_async;
use netkit::{icmp_to, lrp_mac, nb_until};
use ovn_natkit::{
    OUTSIDE_IP, annotation, apply, apply_all, delete, eip_ready, eip_used, eip_v4, from_outside, label,
    nat_columns, nat_line, nb_nat_state, ready, reason, until, until_condition, warned, world, world_with,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eips_fips_snat_and_dnat_on_a_vpc_router() {
    let (env, pod_a, pod_b) = world().await;
    let gw_mac = lrp_mac(&env, "vpc1-external");

    // OvnEips: allocated from the external subnet, a static one honoured, one outside refused,
    // an lsp one gets its bare port and stays not ready.
    apply_all(
        &env,
        &[
            ("OvnEip", "e-fip", json!({"externalSubnet": "external"})),
            ("OvnEip", "e-snat", json!({})),
            ("OvnEip", "e-dnat", json!({"v4Ip": "10.200.0.50"})),
            ("OvnEip", "e-out", json!({"v4Ip": "10.201.0.5"})),
            ("OvnEip", "e-lsp", json!({"type": "lsp"})),
        ],
    )
    .await;
    let e_fip = eip_ready(&env, "e-fip").await;
    let e_snat = eip_ready(&env, "e-snat").await;
    let e_dnat = eip_ready(&env, "e-dnat").await;
    let (fip_ip, snat_ip, dnat_ip) = (eip_v4(&e_fip), eip_v4(&e_snat), eip_v4(&e_dnat));
    assert_eq!(dnat_ip, "10.200.0.50", "spec.v4Ip honoured");
    for ip in [&fip_ip, &snat_ip] {
        assert!(ip.starts_with("10.200.0.") && ip != OUTSIDE_IP, "{ip}");
    }
    assert_ne!(fip_ip, snat_ip);
    let st = e_fip.status.clone().unwrap();
    assert_eq!(st.type_.as_deref(), Some("nat"));
    assert!(st.mac_address.as_deref().is_some_and(|m| m.len() == 17), "{st:?}");
    assert!(
        e_fip
            .finalizers()
            .iter()
            .any(|f| f == "kubeovn.io/kube-ovn-controller")
    );
    assert_eq!(label(&e_fip, "ovn.kubernetes.io/subnet"), Some("external"));
    assert_eq!(label(&e_fip, "ovn.kubernetes.io/ovn_eip_type"), Some("nat"));
    assert_eq!(
        label(&e_fip, "ovn.kubernetes.io/eip_v4_ip"),
        Some(fip_ip.as_str())
    );
    assert_eq!(
        label(&e_snat, "ovn.kubernetes.io/subnet"),
        Some("external"),
        "an empty spec.externalSubnet is --external-gateway-switch, and the label says so"
    );
    let out: OvnEip = until_condition(&env, "e-out", "refused", "Ready", |_, r| {
        r == "EipOutsideExternalSubnet"
    })
    .await;
    assert_eq!(
        out.status.as_ref().and_then(|s| s.v4_ip.clone()),
        None,
        "nothing reserved"
    );
    warned(&env, "OvnEip", "e-out", "EipOutsideExternalSubnet", "v4Ip").await;
    let lsp = until::<OvnEip>(&env, "e-lsp", "allocated", |e| {
        e.and_then(|e| e.status.as_ref())
            .and_then(|s| s.v4_ip.clone())
            .is_some()
    })
    .await
    .unwrap();
    let lsp_st = lsp.status.clone().unwrap();
    assert_eq!(
        lsp_st.ready,
        Some(false),
        "the node side of lsp EIPs is not built"
    );
    let addresses = nb_until(&env, &["lsp-get-addresses", "e-lsp"], "the lsp EIP's port", |o| {
        !o.trim().is_empty()
    })
    .await;
    assert_eq!(
        addresses.trim(),
        format!("{} {}", lsp_st.mac_address.unwrap(), lsp_st.v4_ip.unwrap())
    );
    assert!(
        env.ovn
            .nbctl(&["lsp-list", "external"])
            .unwrap()
            .contains("(e-lsp)")
    );

    // OvnFip to pod a (distributed: the pod's MAC and port), OvnSnatRule for s1, OvnDnatRule
    // tcp 80 → b:8080 and udp 53 → b:5353.
    apply_all(
        &env,
        &[
            ("OvnFip", "f-a", json!({"ovnEip": "e-fip", "ipName": "a.nsv"})),
            ("OvnSnatRule", "s-s1", json!({"ovnEip": "e-snat", "vpcSubnet": "s1"})),
            (
                "OvnDnatRule",
                "d-b",
                json!({"ovnEip": "e-dnat", "ipName": "b.nsv", "protocol": "tcp", "externalPort": "80", "internalPort": "8080"}),
            ),
            (
                "OvnDnatRule",
                "d-b-udp",
                json!({"ovnEip": "e-dnat", "ipName": "b.nsv", "protocol": "udp", "externalPort": "53", "internalPort": "5353"}),
            ),
        ],
    )
    .await;
    let fip: OvnFip = ready(&env, "f-a").await;
    let fs = fip.status.clone().unwrap();
    assert_eq!(fs.vpc.as_deref(), Some("vpc1"));
    assert_eq!(fs.v4_eip.as_ref(), Some(&fip_ip));
    assert_eq!(fs.v4_ip.as_deref(), Some(ann(&pod_a, "ip_address")));
    assert_eq!(label(&fip, "ovn.kubernetes.io/eip_v4_ip"), Some(fip_ip.as_str()));
    assert_eq!(annotation(&fip, "ovn.kubernetes.io/vpc_eip"), Some("e-fip"));
    let row = nat_line(&env, "dnat_and_snat", &fip_ip).expect("the FIP's NAT row");
    assert!(
        row.contains(ann(&pod_a, "ip_address"))
            && row.contains("a.nsv")
            && row.contains(ann(&pod_a, "mac_address")),
        "distributed: the pod's port and MAC: {row}"
    );
    let ids = nat_columns(&env, "external_ids,options", &fip_ip);
    assert!(
        ids.contains("ovn_fip=f-a") && ids.contains("vendor=kube-ovn"),
        "{ids}"
    );
    assert!(
        !ids.contains("stateless"),
        "no spec.type, no ConfigMap: stateful: {ids}"
    );
    let used = eip_used(&env, "e-fip", "fip").await;
    assert_eq!(
        used.status.as_ref().and_then(|s| s.activate_gateway.as_deref()),
        Some("node1"),
        "a distributed FIP's EIP lives on the pod's node"
    );
    assert_eq!(label(&used, "ovn.kubernetes.io/vpc"), Some("vpc1"));
    assert_eq!(annotation(&used, "ovn.kubernetes.io/vpc_nat"), Some("f-a"));

    // Outside → FIP reaches a; a → outside leaves with the FIP.
    let trace = env
        .ovn
        .trace(
            "external",
            &from_outside(ann(&pod_a, "mac_address"), &fip_ip, "icmp4.type==8"),
        )
        .unwrap();
    assert!(trace.delivers_to("a.nsv"), "outside → FIP: {}", trace.text);
    let trace = env
        .ovn
        .trace("s1", &icmp_to(&pod_a, &lrp_mac(&env, "vpc1-s1"), OUTSIDE_IP))
        .unwrap();
    assert!(trace.delivers_to("tor"), "a → outside: {}", trace.text);
    assert!(
        trace.text.contains(&format!("(ip4.src={fip_ip})")),
        "a leaves as the FIP: {}",
        trace.text
    );

    // SNAT: b leaves with e-snat.
    let snat: OvnSnatRule = ready(&env, "s-s1").await;
    let ss = snat.status.clone().unwrap();
    assert_eq!(ss.v4_ip_cidr.as_deref(), Some("10.1.0.0/24"));
    assert_eq!(ss.v4_eip.as_ref(), Some(&snat_ip));
    assert!(nat_line(&env, "snat", &snat_ip).is_some_and(|l| l.contains("10.1.0.0/24")));
    let trace = env
        .ovn
        .trace("s1", &icmp_to(&pod_b, &lrp_mac(&env, "vpc1-s1"), OUTSIDE_IP))
        .unwrap();
    assert!(trace.delivers_to("tor"), "b → outside: {}", trace.text);
    assert!(
        trace.text.contains(&format!("(ip4.src={snat_ip})")),
        "b leaves as the SNAT EIP: {}",
        trace.text
    );

    // DNAT: a load balancer named after the rule on vpc1; TCP eip:80 reaches b:8080.
    ready::<OvnDnatRule>(&env, "d-b").await;
    ready::<OvnDnatRule>(&env, "d-b-udp").await;
    let lb = env
        .ovn
        .nbctl(&[
            "--columns=vips,protocol,options,external_ids",
            "list",
            "Load_Balancer",
            "d-b",
        ])
        .unwrap();
    assert!(
        lb.contains(&format!(
            "\"{dnat_ip}:80\"=\"{}:8080\"",
            ann(&pod_b, "ip_address")
        )) && lb.contains("tcp")
            && lb.contains("ovn_dnat=d-b"),
        "{lb}"
    );
    let udp = env
        .ovn
        .nbctl(&["--columns=protocol,options", "list", "Load_Balancer", "d-b-udp"])
        .unwrap();
    assert!(udp.contains("udp") && udp.contains("ct_flush=\"true\""), "{udp}");
    let attached = env.ovn.nbctl(&["lr-lb-list", "vpc1"]).unwrap();
    assert!(
        attached.contains("d-b") && attached.contains("d-b-udp"),
        "{attached}"
    );
    let trace = env
        .ovn
        .trace_with(
            "external",
            &from_outside(&gw_mac, &dnat_ip, "tcp && tcp.src==40000 && tcp.dst==80"),
            &["--ct=new"],
        )
        .unwrap();
    assert!(trace.delivers_to("b.nsv"), "outside → eip:80: {}", trace.text);
    // The backend's port is the VIP's (the row above); ovn-trace shows the balancing.
    assert!(
        trace.text.contains("ct_lb_mark"),
        "through the rule's load balancer: {}",
        trace.text
    );

    // `type: centralized` (ours, honoured): no pod MAC or port, the FIP lives on the gateway
    // chassis; outside → it through the router's external port reaches b.
    apply(&env, "OvnEip", "e-cen", json!({})).await;
    let cen_ip = eip_v4(&eip_ready(&env, "e-cen").await);
    let spec = json!({"ovnEip": "e-cen", "ipName": "b.nsv", "type": "centralized"});
    apply(&env, "OvnFip", "f-b", spec).await;
    let cen = nb_until(&env, &["lr-nat-list", "vpc1"], "the centralized FIP's row", |o| {
        o.contains(&cen_ip)
    })
    .await;
    let row = cen.lines().find(|l| l.contains(&cen_ip)).unwrap();
    assert!(
        row.contains(ann(&pod_b, "ip_address"))
            && !row.contains("b.nsv")
            && !row.contains(ann(&pod_b, "mac_address")),
        "centralized: neither the pod's port nor its MAC: {row}"
    );
    let trace = env
        .ovn
        .trace("external", &from_outside(&gw_mac, &cen_ip, "icmp4.type==8"))
        .unwrap();
    assert!(
        trace.delivers_to("b.nsv"),
        "outside → centralized FIP: {}",
        trace.text
    );
    let e_cen = eip_used(&env, "e-cen", "fip").await;
    assert_eq!(
        e_cen.status.as_ref().and_then(|s| s.activate_gateway.clone()),
        None,
        "a centralized FIP follows the VPC's gateway chassis (its lrp EIP), not a node of its own"
    );

    // A second rule on the same external port is refused.
    apply(
        &env,
        "OvnDnatRule",
        "d-again",
        json!({"ovnEip": "e-dnat", "ipName": "a.nsv", "protocol": "tcp", "externalPort": "80", "internalPort": "80"}),
    )
    .await;
    let note = warned(
        &env,
        "OvnDnatRule",
        "d-again",
        "ExternalPortConflict",
        "externalPort",
    )
    .await;
    assert!(
        note.contains("eip e-dnat port 80 already used by OvnDnatRule d-b"),
        "{note}"
    );

    // Kube-OVN's e2e 1.1: the VPC's lrp EIP shared by an SNAT, a DNAT and a vip FIP.
    let spec = json!({"type": "lrp", "externalSubnet": "external"});
    apply(&env, "OvnEip", "vpc1-external", spec).await;
    Api::<OvnEip>::all(env.kube.clone())
        .patch_status(
            "vpc1-external",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"v4Ip": "10.200.0.254", "macAddress": "0a:00:00:c8:00:fe", "type": "lrp", "ready": true}})),
        )
        .await
        .unwrap();
    apply_all(
        &env,
        &[
            ("Vip", "v1", json!({"subnet": "s1", "v4ip": "10.1.0.100"})),
            ("OvnSnatRule", "s-lrp", json!({"ovnEip": "vpc1-external", "ipName": "b.nsv"})),
            (
                "OvnDnatRule",
                "d-lrp",
                json!({"ovnEip": "vpc1-external", "ipName": "b.nsv", "externalPort": "2222", "internalPort": "22"}),
            ),
            (
                "OvnFip",
                "f-vip",
                json!({"ovnEip": "vpc1-external", "ipType": "vip", "ipName": "v1"}),
            ),
        ],
    )
    .await;
    let lrp = eip_used(&env, "vpc1-external", "dnat,fip,snat").await;
    assert_eq!(label(&lrp, "ovn.kubernetes.io/vpc"), Some("vpc1"));
    assert_eq!(label(&lrp, "ovn.kubernetes.io/ovn_eip_type"), Some("lrp"));
    assert_eq!(
        lrp.status.as_ref().and_then(|s| s.activate_gateway.clone()),
        None,
        "an lrp EIP's gateway node is the external-gateway reconciler's to write"
    );
    let vip_row = nat_line(&env, "dnat_and_snat", "10.200.0.254").expect("the vip FIP's row");
    assert!(
        vip_row.contains("10.1.0.100") && !vip_row.contains("v1"),
        "centralized, no port: {vip_row}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_whole_deletion_waits_and_a_restart_writes_nothing() {
    // A collection every second: the pod collector must leave the EIPs' addresses alone.
    let (mut env, _a, _b) = world_with(&["--gc-interval=1"]).await;
    apply_all(
        &env,
        &[
            ("OvnEip", "e1", json!({})),
            ("OvnEip", "e2", json!({})),
            ("OvnEip", "e3", json!({})),
            ("OvnEip", "e-lsp", json!({"type": "lsp"})),
        ],
    )
    .await;
    let e1 = eip_v4(&eip_ready(&env, "e1").await);
    eip_ready(&env, "e2").await;
    eip_ready(&env, "e3").await;
    let f_a = json!({"ovnEip": "e1", "ipName": "a.nsv", "type": "distributed"});
    apply(&env, "OvnFip", "f-a", f_a.clone()).await;
    apply(
        &env,
        "OvnSnatRule",
        "s-s1",
        json!({"ovnEip": "e2", "vpcSubnet": "s1"}),
    )
    .await;
    ready::<OvnFip>(&env, "f-a").await;
    ready::<OvnSnatRule>(&env, "s-s1").await;
    let ids = nat_columns(&env, "options", &e1);
    assert!(
        ids.contains("stateless=true"),
        "spec.type distributed: stateless: {ids}"
    );
    let before = nb_nat_state(&env);

    // Each refused whole, naming the object and the field; the northbound database untouched.
    let bad: [(&str, &str, serde_json::Value, &str, &str); 6] = [
        (
            "OvnFip",
            "f-second",
            json!({"ovnEip": "e1", "ipName": "b.nsv"}),
            "EipUsedByOtherFip",
            "ovnEip",
        ),
        (
            "OvnFip",
            "f-vpc",
            json!({"ovnEip": "e3", "ipName": "b.nsv", "vpc": "vpc2"}),
            "VpcMismatch",
            "vpc",
        ),
        (
            "OvnSnatRule",
            "s-vpc2",
            json!({"ovnEip": "e2", "vpc": "vpc2", "v4IpCidr": "10.9.0.0/24"}),
            "EipUsedByOtherVpc",
            "ovnEip",
        ),
        (
            "OvnFip",
            "f-shared",
            json!({"ovnEip": "e2", "ipName": "b.nsv"}),
            "DistributedFipEipShared",
            "ovnEip",
        ),
        (
            "OvnFip",
            "f-missing",
            json!({"ovnEip": "e3", "ipName": "nope.nsv"}),
            "IpNotFound",
            "ipName",
        ),
        (
            "OvnFip",
            "f-lsp",
            json!({"ovnEip": "e-lsp", "ipName": "b.nsv"}),
            "EipTypeLsp",
            "ovnEip",
        ),
    ];
    let specs: Vec<_> = bad.iter().map(|(k, n, s, ..)| (*k, *n, s.clone())).collect();
    apply_all(&env, &specs).await;
    for (kind, name, _, reason, field) in &bad {
        warned(&env, kind, name, reason, field).await;
    }
    let f = Api::<OvnFip>::all(env.kube.clone())
        .get("f-second")
        .await
        .unwrap();
    assert_eq!(
        reason(f.status.as_ref().and_then(|s| s.conditions.as_ref()), "Validated"),
        Some((ConditionStatus::False, "EipUsedByOtherFip".into()))
    );
    assert_eq!(f.status.as_ref().and_then(|s| s.ready), None);
    // An applied rule is not torn down by a later bad edit.
    let moved = json!({"ovnEip": "e1", "ipName": "b.nsv", "type": "distributed"});
    apply(&env, "OvnFip", "f-a", moved).await;
    warned(&env, "OvnFip", "f-a", "ChangeNotSupported", "ipName").await;
    let f = Api::<OvnFip>::all(env.kube.clone()).get("f-a").await.unwrap();
    assert_eq!(f.status.as_ref().and_then(|s| s.ready), Some(true));
    assert_eq!(nb_nat_state(&env), before, "refusals wrote nothing");
    apply(&env, "OvnFip", "f-a", f_a).await;
    until_condition::<OvnFip>(&env, "f-a", "valid again", "Validated", |s, _| {
        s == ConditionStatus::True
    })
    .await;
    for (kind, name, ..) in &bad {
        delete(&env, kind, name).await;
    }

    // A restart with nothing changed writes no northbound transaction; the IPAM rebuild keeps
    // the EIPs' addresses (a new EIP does not get one of them).
    let port = env.metrics_addr.unwrap().port();
    let txns = |m: &str| {
        netkit::metric(
            m,
            "kube_ovn_controller_ovsdb_transaction_duration_seconds_count",
            &[],
        )
    };
    assert!(txns(&netkit::metrics(port).await.unwrap()) > 0.0);
    env.kill_controller().await;
    env.start_controller();
    let port = env.metrics_addr.unwrap().port();
    wait_until_async(
        "the OVN NAT objects reconciled after the restart",
        WAIT,
        || async move {
            let m = netkit::metrics(port).await?;
            Ok(netkit::reconciles(&m, "OvnEip") >= 4.0
                && netkit::reconciles(&m, "OvnFip") >= 1.0
                && netkit::reconciles(&m, "OvnSnatRule") >= 1.0)
        },
    )
    .await
    .unwrap();
    let m = netkit::metrics(port).await.unwrap();
    let writes = txns(&m);
    assert!(writes == 0.0, "northbound writes after a restart: {writes}\n{m}");
    // A whole collection after the reconciles: a row of ours without a rule, made by hand, is
    // removed by the collection's last step, after the pod keys' (which skip OvnEips).
    env.ovn
        .nbctl(&[
            "--id=@n",
            "create",
            "NAT",
            "type=snat",
            "external_ip=10.200.0.99",
            "logical_ip=10.8.0.0/24",
            "external_ids:vendor=kube-ovn",
            "external_ids:ovn_snat=ghost",
            "--",
            "add",
            "Logical_Router",
            "vpc1",
            "nat",
            "@n",
        ])
        .unwrap();
    nb_until(
        &env,
        &["lr-nat-list", "vpc1"],
        "a collection to remove the ghost rule's row",
        |o| !o.contains("10.200.0.99"),
    )
    .await;
    apply(&env, "OvnEip", "e-new", json!({})).await;
    let fresh = eip_v4(&eip_ready(&env, "e-new").await);
    let held: Vec<String> = Api::<OvnEip>::all(env.kube.clone())
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|e| e.name_any() != "e-new")
        .map(eip_v4)
        .collect();
    assert!(!held.contains(&fresh), "{fresh} was another EIP's: {held:?}");

    // Delete order: the EIP waits for its FIP (finalizer, EipInUse), then goes with its address.
    delete(&env, "OvnEip", "e1").await;
    let waiting: OvnEip =
        until_condition(&env, "e1", "waiting for its FIP", "Ready", |_, r| r == "EipInUse").await;
    let message = find_condition(
        waiting.status.as_ref().unwrap().conditions.as_ref().unwrap(),
        "Ready",
    )
    .unwrap()
    .message
    .clone()
    .unwrap();
    assert_eq!(
        message,
        "ovn eip e1 is still being used by NAT rules: f-a, waiting for them to be deleted"
    );
    assert!(
        nat_line(&env, "dnat_and_snat", &e1).is_some(),
        "the FIP still works"
    );
    delete(&env, "OvnFip", "f-a").await;
    until::<OvnEip>(&env, "e1", "gone", |e| e.is_none()).await;
    assert!(nat_line(&env, "dnat_and_snat", &e1).is_none());
    apply(&env, "OvnEip", "e-reuse", json!({"v4Ip": e1})).await;
    assert_eq!(
        eip_v4(&eip_ready(&env, "e-reuse").await),
        e1,
        "the deleted EIP's address was released"
    );

    // A rule deleted while no controller ran (its finalizer removed by hand): its rows are
    // collected at start.
    env.kill_controller().await;
    let snats: Api<OvnSnatRule> = Api::all(env.kube.clone());
    snats
        .patch(
            "s-s1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    snats.delete("s-s1", &DeleteParams::default()).await.unwrap();
    env.start_controller();
    nb_until(
        &env,
        &["lr-nat-list", "vpc1"],
        "the deleted SNAT rule's row collected",
        |o| !o.contains("10.1.0.0/24"),
    )
    .await;
}
