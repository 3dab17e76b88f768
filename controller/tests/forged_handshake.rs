//! Issue 21: a pod's own annotations are not a record of what the controller allocated. A tenant
//! can create a pod that already carries the whole handshake (`allocated: "true"`, another
//! tenant's `logical_switch`, an `ip_address` in it, a `mac_address`); the IPAM rebuild at
//! controller start-up (`controller/src/reconcile/ip/ipam_rebuild.rs`) must not reserve that address
//! for the pod, or a restart hands it to the forger and refuses it to its rightful claimant.
//!
//! The forged pod also carries an annotation the controller refuses (`ingress_rate: fast`), so
//! the controller never networks it: nothing but the rebuild could reserve an address for it.
//! It is a live, ordinary pod on purpose: the collection at start releases what IPAM holds for a
//! host-network or finished pod, so with one of those the old rebuild's reservation lasted only
//! until that collection ran; for a live pod it lasted for good.

mod common;
mod netkit;
mod podkit;

use common::{Env, ann};
use netkit::{http_get, subnet_ready, subnet_until};
use podkit::{create_pod, events, ip_cr, lsp_addresses, pods, until, warning};
use serde_json::json;

/// The victim tenant's subnet, bound to its namespace.
const SUBNET: &str = "victim-net";
const CIDR: &str = "10.84.0.0/24";
const VICTIM_NS: &str = "victim";
const ATTACKER_NS: &str = "attacker";
/// The address the attacker's pod names and the victim's pod asks for.
const A: &str = "10.84.0.10";

fn using(s: &kube_ovn_api::crd::Subnet) -> Option<u128> {
    s.status.as_ref()?.v4_using_ips.map(|c| c.0)
}

/// The running controller's `/debug/ipam` (503 until its IPAM is rebuilt).
async fn debug_ipam(env: &Env) -> anyhow::Result<Option<serde_json::Value>> {
    let addr = env.metrics_addr.expect("the controller serves its endpoints");
    let (code, body) = http_get(addr, "/debug/ipam").await?;
    Ok((code == 200).then(|| serde_json::from_str(&body)).transpose()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_handshake_reserves_nothing_across_a_restart() {
    let mut env = Env::start().await;
    env.node("node1", "172.18.0.2").await;
    env.apply_yaml(
        json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": SUBNET},
        "spec": {"cidrBlock": CIDR, "namespaces": [VICTIM_NS]}}),
    )
    .await;
    subnet_until(&env, SUBNET, "ready, nothing in use", |s| {
        subnet_ready(s) && using(s) == Some(0)
    })
    .await;

    // The attacker's pod, created while the controller runs (so its start-up rebuild did not see
    // it), with the handshake written by its author and a rate the controller refuses.
    create_pod(
        &env,
        ATTACKER_NS,
        json!({"metadata": {"name": "forged", "namespace": ATTACKER_NS, "annotations": {
                "ovn.kubernetes.io/allocated": "true",
                "ovn.kubernetes.io/routed": "true",
                "ovn.kubernetes.io/logical_switch": SUBNET,
                "ovn.kubernetes.io/ip_address": A,
                "ovn.kubernetes.io/mac_address": "0a:00:00:00:84:0a",
                "ovn.kubernetes.io/cidr": CIDR,
                "ovn.kubernetes.io/gateway": "10.84.0.1",
                "ovn.kubernetes.io/ingress_rate": "fast"}},
            "spec": {"nodeName": "node1", "containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    warning(
        &env,
        ATTACKER_NS,
        "Pod",
        "forged",
        "ValidatePodNetworkFailed",
        &["ovn.kubernetes.io/ingress_rate", "fast"],
    )
    .await;
    let forged = format!("forged.{ATTACKER_NS}");
    let before = debug_ipam(&env).await.unwrap().expect("IPAM is rebuilt");
    assert!(
        before[SUBNET].get(&forged).is_none(),
        "the running controller holds nothing for {forged}: {}",
        before[SUBNET]
    );

    // A restart: the new controller rebuilds IPAM from its records before anything reconciles.
    env.kill_controller().await;
    env.start_controller();
    until("the restarted controller to have rebuilt IPAM", || async {
        debug_ipam(&env).await
    })
    .await;

    // The victim's pod asks for A and gets it: the handshake, the port and the IP CR say A.
    env.pod(
        VICTIM_NS,
        "honest",
        "node1",
        &[("ovn.kubernetes.io/ip_address", A)],
    )
    .await;
    let refused = until("pod victim/honest to be routed or refused", || async {
        let pod = pods(&env, VICTIM_NS).get("honest").await?;
        if ann(&pod, "routed") == "true" {
            return Ok(Some(None));
        }
        let refusal = events(&env, VICTIM_NS, "honest").await.into_iter().find(|e| {
            e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some("AcquireAddressFailed")
        });
        Ok(refusal.map(|e| Some(e.note.unwrap_or_default())))
    })
    .await;
    if let Some(note) = refused {
        panic!("pod {VICTIM_NS}/honest was refused {A} after the restart: {note}");
    }
    let honest = pods(&env, VICTIM_NS).get("honest").await.unwrap();
    assert_eq!(ann(&honest, "allocated"), "true");
    assert_eq!(ann(&honest, "logical_switch"), SUBNET);
    assert_eq!(ann(&honest, "ip_address"), A);
    let mac = ann(&honest, "mac_address");
    let port = format!("honest.{VICTIM_NS}");
    assert_eq!(
        lsp_addresses(&env, &port).as_deref(),
        Some(format!("{mac} {A}").as_str()),
        "port {port}"
    );
    let ip = ip_cr(&env, &port).await.expect("IP CR honest.victim");
    assert_eq!(ip.spec.v4_ip_address.as_deref(), Some(A));
    assert_eq!(ip.spec.subnet.as_deref(), Some(SUBNET));

    // The forged pod holds nothing of the controller's: no port, no IP CR, no address.
    assert_eq!(lsp_addresses(&env, &forged), None, "no port for {forged}");
    assert!(ip_cr(&env, &forged).await.is_none(), "no IP CR for {forged}");
    let ipam = debug_ipam(&env).await.unwrap().expect("IPAM is rebuilt");
    let holders: Vec<(&String, &serde_json::Value)> = ipam[SUBNET]
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k, &v["ips"])).collect())
        .unwrap_or_default();
    assert_eq!(
        holders,
        [(&port, &json!([A]))],
        "IPAM of {SUBNET} holds the honest pod only"
    );
    subnet_until(&env, SUBNET, "one address in use, the honest pod's", |s| {
        using(s) == Some(1)
    })
    .await;
}
