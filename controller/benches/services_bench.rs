//! Services benchmark: the controller (in this process, against a real kube-apiserver on its etcd,
//! `kube_ovn_lab::kubernetes::fixture`, and a real NB/SB + `ovn-northd`) turning Services and
//! EndpointSlices into load-balancer VIPs.
//!
//! 1. N Services × 5 endpoints (selectorless, as user-written EndpointSlices), created 16 requests
//!    at a time: the time from the first create until every VIP is in NB with its 5 backends
//!    (watched through an NB monitor of `Load_Balancer`);
//! 2. the reference: the same N VIPs written by one `ovn-nbctl` invocation (every `lb-add`
//!    chained with `--`) on a fresh NB;
//! 3. an endpoint added to a Service's EndpointSlice, R times: the time from the write's answer
//!    until the VIP's backends in NB hold it (median and p99). The first request answered by the
//!    new backend is not measured here (it needs chassis and pods; see `docs/benchmarks.md`).
//!
//! Run: `cargo bench -p kube-ovn-controller --bench services_bench -- 1000 100` (N, R).

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote, Value};
use kube_ovn_testkit::OvnCentral;
use serde_json::json;

mod support;

const LB: &str = "cluster-tcp-loadbalancer";
/// How long any one step may take before the bench gives up, naming it.
const STEP: Duration = Duration::from_mins(10);

/// The ClusterIP of Service `i`, in the API server's range (10.96.0.0/16) and past 10.96.0.1,
/// which the API server gives its own `default/kubernetes` Service.
fn vip(i: usize) -> String {
    format!("10.96.{}.{}", i / 250 + 1, i % 250 + 1)
}

fn backends(i: usize, n: usize) -> Vec<String> {
    (0..n)
        .map(|e| format!("10.16.{}.{}", i / 40, (i % 40) * 6 + e + 2))
        .collect()
}

fn slice(i: usize, ips: &[String]) -> serde_json::Value {
    let endpoints: Vec<_> = ips.iter().map(|ip| json!({"addresses": [ip]})).collect();
    json!({"metadata": {"name": format!("s{i}-1"), "namespace": "bench",
            "labels": {"kubernetes.io/service-name": format!("s{i}")}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints})
}

/// The `vips` map of the load balancer, from the monitor's replica.
fn vips(nb: &Client) -> Vec<(String, String)> {
    nb.read(|c| {
        let Some(uuid) = c.uuids_by_name("Load_Balancer", LB).first() else {
            return Vec::new();
        };
        match c.row("Load_Balancer", uuid).and_then(|r| r.get("vips")) {
            Some(Value::Map(m)) => m
                .iter()
                .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
                .collect(),
            _ => Vec::new(),
        }
    })
}

async fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + STEP;
    while !ok() {
        assert!(Instant::now() < deadline, "gave up waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn nbctl_one_run(n: usize) -> Duration {
    let ovn = OvnCentral::start().unwrap();
    let mut args = vec![format!("--db={}", ovn.nb_remote())];
    for i in 0..n {
        if i > 0 {
            args.push("--".into());
        }
        args.extend([
            "lb-add".into(),
            LB.into(),
            format!("{}:80", vip(i)),
            backends(i, 5)
                .iter()
                .map(|b| format!("{b}:8080"))
                .collect::<Vec<_>>()
                .join(","),
            "tcp".into(),
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

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let n = args.first().copied().unwrap_or(1000);
    let rounds = args.get(1).copied().unwrap_or(100);

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
    c.monitor = MonitorTables::Only(vec!["Load_Balancer".into()]);
    let nb = Client::connect(c).await.unwrap();
    until("the controller's load balancers", || {
        nb.read(|c| !c.uuids_by_name("Load_Balancer", LB).is_empty())
    })
    .await;
    let ns: k8s_openapi::api::core::v1::Namespace =
        serde_json::from_value(json!({"metadata": {"name": "bench"}})).unwrap();
    Api::all(kube.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(kube.clone(), "bench");
    let slices: Api<EndpointSlice> = Api::namespaced(kube.clone(), "bench");

    // 1. N Services at once.
    let start = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| {
            let (services, slices) = (services.clone(), slices.clone());
            async move {
                let svc: Service = serde_json::from_value(json!({"metadata": {"name": format!("s{i}"), "namespace": "bench"},
                    "spec": {"clusterIP": vip(i), "clusterIPs": [vip(i)], "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}))
                .unwrap();
                services.create(&PostParams::default(), &svc).await.unwrap();
                let s: EndpointSlice = serde_json::from_value(slice(i, &backends(i, 5))).unwrap();
                slices.create(&PostParams::default(), &s).await.unwrap();
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
    let created = start.elapsed();
    until("every VIP with its 5 backends", || {
        // The bench's VIPs (port 80), not the `kubernetes` Service's (443).
        let v: Vec<_> = vips(&nb)
            .into_iter()
            .filter(|(k, _)| k.ends_with(":80"))
            .collect();
        v.len() == n && v.iter().all(|(_, b)| b.matches(',').count() == 4)
    })
    .await;
    let ours = start.elapsed();
    let reference = tokio::task::spawn_blocking(move || nbctl_one_run(n))
        .await
        .unwrap();
    println!(
        "{n} Services x 5 endpoints: API writes done {:.2} s, all VIPs in NB {:.2} s; ovn-nbctl one run {:.2} s; ratio {:.1}",
        created.as_secs_f64(),
        ours.as_secs_f64(),
        reference.as_secs_f64(),
        ours.as_secs_f64() / reference.as_secs_f64()
    );

    // 3. An endpoint added, R times (and removed again between rounds).
    let key = format!("{}:80", vip(0));
    let base = backends(0, 5);
    let mut took = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let extra = format!("10.17.{}.{}", r / 250, r % 250 + 1);
        let mut ips = base.clone();
        ips.push(extra.clone());
        let want = format!("{extra}:8080");
        let patch = Patch::Merge(slice(0, &ips));
        let t = Instant::now();
        slices
            .patch("s0-1", &PatchParams::default(), &patch)
            .await
            .unwrap();
        until("the new endpoint in NB", || {
            vips(&nb).iter().any(|(k, v)| *k == key && v.contains(&want))
        })
        .await;
        took.push(t.elapsed());
        slices
            .patch("s0-1", &PatchParams::default(), &Patch::Merge(slice(0, &base)))
            .await
            .unwrap();
        until("the endpoint gone again", || {
            vips(&nb).iter().any(|(k, v)| *k == key && !v.contains(&want))
        })
        .await;
    }
    took.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "endpoint added -> VIP backends in NB over {rounds}: median {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        ms(took[took.len() / 2]),
        ms(took[(took.len() * 99 / 100).min(took.len() - 1)]),
        ms(took[took.len() - 1])
    );
    controller.abort();
}
