//! OVN NAT benchmark: the controller (in this process, against a real kube-apiserver and a real
//! NB/SB + `ovn-northd`) turning N OvnFips into `dnat_and_snat` rows on a VPC router, against one
//! chained `ovn-nbctl lr-nat-add … -- …` run of the same rows.
//!
//! 1. Set-up, not timed: Subnet `external` (10.200.0.0/20, in the default VPC: IPAM is all the
//!    EIPs need of it), Vpc `vpc1`, N OvnEips, each ready with its address.
//! 2. Timed: N OvnFips (`vpc: vpc1`, `v4Ip` 10.1.x.y, one per EIP), created 16 requests at a
//!    time; from the first create until an NB monitor of `NAT` shows N `dnat_and_snat` rows.
//! 3. The reference: the same N rows by one `ovn-nbctl` invocation on a fresh NB whose router
//!    `vpc1` exists. Ratio = ours / that.
//!
//! Run: `cargo bench -p kube-ovn-controller --bench nat_bench -- 1000` (N).

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, PostParams};
use kube_ovn_api::crd::OvnEip;
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote, Value};
use kube_ovn_testkit::OvnCentral;
use serde_json::json;

mod support;

/// How long any one step may take before the bench gives up, naming it.
const STEP: Duration = Duration::from_mins(10);

fn internal(i: usize) -> String {
    format!("10.1.{}.{}", i / 250, i % 250 + 2)
}

/// The `dnat_and_snat` rows' (external, logical) addresses, from the monitor's replica.
fn fip_rows(nb: &Client) -> usize {
    nb.read(|c| {
        c.table("NAT")
            .filter(
                |(_, r)| matches!(r.get("type"), Some(Value::Atom(a)) if a.as_str() == Some("dnat_and_snat")),
            )
            .count()
    })
}

async fn until(what: &str, mut ok: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !ok().await {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn nbctl_one_run(eips: &[String]) -> Duration {
    let ovn = OvnCentral::start().unwrap();
    let db = format!("--db={}", ovn.nb_remote());
    let out = std::process::Command::new("ovn-nbctl")
        .args([&db, "lr-add", "vpc1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut args = vec![db];
    for (i, eip) in eips.iter().enumerate() {
        if i > 0 {
            args.push("--".into());
        }
        args.extend([
            "lr-nat-add".into(),
            "vpc1".into(),
            "dnat_and_snat".into(),
            eip.clone(),
            internal(i),
        ]);
    }
    let start = Instant::now();
    let out = std::process::Command::new("ovn-nbctl")
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    start.elapsed()
}

async fn create_all(kube: &kube::Client, kind: &str, n: usize, spec: impl Fn(usize) -> serde_json::Value) {
    let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", kind);
    let (ar, _) = kube::discovery::pinned_kind(kube, &gvk).await.unwrap();
    let api: Api<kube::api::DynamicObject> = Api::all_with(kube.clone(), &ar);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let mut obj = kube::api::DynamicObject::new(&format!("{}{i}", kind.to_lowercase()), &ar);
            obj.data = json!({"spec": spec(i)});
            async move {
                api.create(&PostParams::default(), &obj).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1000);
    let (api, ovn) = tokio::join!(support::KubeApi::start(), support::ovn());
    let kube = api.kube.clone();
    let flags = <kube_ovn_controller::config::Flags as clap::Parser>::try_parse_from([
        "kube-ovn-controller".to_owned(),
        format!("--ovn-nb-addr={}", ovn.nb_remote()),
        "--bind-address=127.0.0.1".into(),
        "--pprof-port=0".into(),
        "--leader-elect=false".into(),
    ])
    .unwrap();
    let config = flags.validate().unwrap();
    let controller_kube = kube.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let controller = tokio::spawn(async move {
        let _ =
            kube_ovn_controller::run_with_listener(config, controller_kube, listener, std::future::pending())
                .await;
    });
    let mut c = ClientConfig::new(Remote::parse_list(&ovn.nb_remote()).unwrap(), "OVN_Northbound");
    c.monitor = MonitorTables::Only(vec!["NAT".into(), "Logical_Router".into()]);
    let nb = Client::connect(c).await.unwrap();

    // 1. Set-up.
    for (kind, name, spec) in [
        (
            "Subnet",
            "external",
            json!({"cidrBlock": "10.200.0.0/20", "gateway": "10.200.0.1"}),
        ),
        ("Vpc", "vpc1", json!({})),
    ] {
        let gvk = kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", kind);
        let (ar, _) = kube::discovery::pinned_kind(&kube, &gvk).await.unwrap();
        let mut obj = kube::api::DynamicObject::new(name, &ar);
        obj.data = json!({"spec": spec});
        Api::<kube::api::DynamicObject>::all_with(kube.clone(), &ar)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap();
    }
    until("router vpc1", async || {
        nb.read(|c| !c.uuids_by_name("Logical_Router", "vpc1").is_empty())
    })
    .await;
    let t = Instant::now();
    create_all(&kube, "OvnEip", n, |_| json!({"externalSubnet": "external"})).await;
    let eips: Api<OvnEip> = Api::all(kube.clone());
    let mut addrs: Vec<String> = Vec::new();
    until("every OvnEip ready", async || {
        let list = eips.list(&kube::api::ListParams::default()).await.unwrap().items;
        let ready = list
            .iter()
            .filter(|e| e.status.as_ref().and_then(|s| s.ready) == Some(true))
            .count();
        if ready == n {
            let mut by_index: Vec<(usize, String)> = list
                .iter()
                .map(|e| {
                    let i = e.metadata.name.as_deref().unwrap()["ovneip".len()..]
                        .parse()
                        .unwrap();
                    (i, e.status.as_ref().unwrap().v4_ip.clone().unwrap())
                })
                .collect();
            by_index.sort();
            addrs = by_index.into_iter().map(|(_, a)| a).collect();
        }
        ready == n
    })
    .await;
    let eips_ready = t.elapsed();

    // 2. N OvnFips.
    let start = Instant::now();
    create_all(
        &kube,
        "OvnFip",
        n,
        |i| json!({"ovnEip": format!("ovneip{i}"), "vpc": "vpc1", "v4Ip": internal(i)}),
    )
    .await;
    let created = start.elapsed();
    until("every FIP's row in NB", async || fip_rows(&nb) == n).await;
    let ours = start.elapsed();
    let reference = tokio::task::spawn_blocking(move || nbctl_one_run(&addrs))
        .await
        .unwrap();
    println!(
        "{n} OvnEips ready {:.2} s (set-up); {n} OvnFips: API writes done {:.2} s, all rows in NB {:.2} s; ovn-nbctl one run {:.2} s; ratio {:.1}",
        eips_ready.as_secs_f64(),
        created.as_secs_f64(),
        ours.as_secs_f64(),
        reference.as_secs_f64(),
        ours.as_secs_f64() / reference.as_secs_f64()
    );
    controller.abort();
}
