//! Advertisement policy evaluation (`kube_ovn_speaker::policy::evaluate`) at scale: 100,000
//! prefixes (90,000 pod addresses in 90 subnets, 10,000 LoadBalancer Services), 10
//! advertisements (selectors on subnets, namespaces, Services and peers, communities,
//! LOCAL_PREF, MED, prepends, one aggregating to /24), 4 peers. Pure: no I/O, no daemons.
//!
//! Measures, each the median (and max) of several runs:
//! - a full recompute (what the run loop does on every change);
//! - the same after one object changed (a Service relabelled from one advertisement's selector
//!   to another's): the run loop recomputes in full, so this is the cost of one change;
//! - the annotation path alone (`announce::desired`, today's work per change) for comparison;
//! - heap: the peak during one evaluation and what the result holds, counted by a counting
//!   global allocator (the cluster's objects themselves are not counted: the speaker's watch
//!   caches hold them today already).
//!
//! Run: `cargo bench -p kube-ovn-speaker --bench policy_bench [-- PODS SERVICES RUNS]`.

#![allow(
    unsafe_code,
    reason = "a counting global allocator is the only way to measure heap bytes"
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube_ovn_api::bgp_advertisement::BgpAdvertisement;
use kube_ovn_api::crd::{Ip, Subnet};
use kube_ovn_api::external_ips::ExternalIpCidrs;
use kube_ovn_speaker::announce::{self, Objects, Scope};
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::bgp::wire::Family;
use kube_ovn_speaker::policy::{self, PeerView, PolicyInputs, ValidatedAdvertisement};
use serde_json::{Value, json};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: same layout, same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).expect("fixture object"))
}

struct World {
    pods: Vec<Arc<Pod>>,
    subnets: Vec<Arc<Subnet>>,
    services: Vec<Arc<Service>>,
    ips: Vec<Arc<Ip>>,
    namespaces: Vec<Arc<Namespace>>,
    ads: Vec<ValidatedAdvertisement>,
    peers: Vec<PeerView>,
}

const SUBNET_PODS: usize = 1000;

fn service(i: usize, app: &str) -> Arc<Service> {
    let (hi, lo) = (i / 250, i % 250 + 1);
    obj(
        json!({"metadata": {"name": format!("svc{i}"), "namespace": format!("ns{}", i % 20),
            "labels": {"app": app}, "annotations": {"ovn.kubernetes.io/bgp": "true"}},
        "spec": {"type": "LoadBalancer", "clusterIP": format!("10.96.{hi}.{lo}"),
            "clusterIPs": [format!("10.96.{hi}.{lo}")]},
        "status": {"loadBalancer": {"ingress": [{"ip": format!("100.64.{hi}.{lo}")}]}}}),
    )
}

fn world(pods: usize, services: usize) -> World {
    let subnets = pods.div_ceil(SUBNET_PODS);
    let tier = |i: usize| ["gold", "silver", "bronze"][i % 3];
    let mut w = World {
        pods: Vec::with_capacity(pods),
        subnets: (0..subnets)
            .map(|s| {
                // A third announced by annotation (Kube-OVN's path), the rest only by policy.
                let ann = if s % 3 == 0 {
                    json!({"ovn.kubernetes.io/bgp": "cluster"})
                } else {
                    json!({})
                };
                obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
                    "metadata": {"name": format!("s{s}"), "labels": {"tier": tier(s)}, "annotations": ann},
                    "spec": {"cidrBlock": format!("10.{}.{}.0/22", 100 + s / 64, (s % 64) * 4)},
                    "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            })
            .collect(),
        services: (0..services)
            .map(|i| service(i, if i % 2 == 0 { "web" } else { "api" }))
            .collect(),
        ips: Vec::with_capacity(pods),
        namespaces: (0..20)
            .map(|n| obj(json!({"metadata": {"name": format!("ns{n}"), "labels": {"team": format!("t{}", n % 4)}}})))
            .collect(),
        ads: Vec::new(),
        peers: Vec::new(),
    };
    for i in 0..pods {
        let s = i / SUBNET_PODS;
        let j = i % SUBNET_PODS + 1;
        let addr = format!("10.{}.{}.{}", 100 + s / 64, (s % 64) * 4 + j / 256, j % 256);
        let (name, ns) = (format!("p{i}"), format!("ns{}", i % 20));
        w.ips.push(obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
            "metadata": {"name": format!("{name}.{ns}"), "labels": {"ovn.kubernetes.io/ip_reserved": "false"}},
            "spec": {"podName": name, "namespace": ns, "subnet": format!("s{s}"), "ipAddress": addr,
                "v4IpAddress": addr}})));
        w.pods.push(obj(json!({"metadata": {"name": name, "namespace": ns,
                "annotations": {"ovn.kubernetes.io/ip_address": addr, "ovn.kubernetes.io/logical_switch": format!("s{s}")}},
            "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}})));
    }
    let ad = |name: &str, spec: Value| -> ValidatedAdvertisement {
        let raw: BgpAdvertisement =
            serde_json::from_value(json!({"apiVersion": "bgp.kube-ovn-rs.io/v1alpha1",
            "kind": "BgpAdvertisement", "metadata": {"name": name}, "spec": spec}))
            .expect("advertisement");
        policy::validate(&raw).expect("valid advertisement")
    };
    w.ads = vec![
        ad(
            "gold-pods",
            json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "gold"}},
            "communities": ["65000:1"], "localPref": 200}),
        ),
        ad(
            "silver-pods",
            json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "silver"}},
            "communities": ["65000:2"], "med": 10, "peerSelector": {"matchLabels": {"rack": "r1"}}}),
        ),
        ad(
            "team0-pods",
            json!({"advertise": ["PodIPs"], "namespaceSelector": {"matchLabels": {"team": "t0"}},
            "communities": ["65000:3"], "localPref": 300}),
        ),
        ad(
            "bronze-agg",
            json!({"advertise": ["PodIPs"], "subnetSelector": {"matchLabels": {"tier": "bronze"}},
            "aggregationLengthV4": 24, "largeCommunities": ["65000:0:1"]}),
        ),
        ad(
            "subnets",
            json!({"advertise": ["SubnetCIDRs"], "communities": ["no-export"]}),
        ),
        ad(
            "web",
            json!({"advertise": ["LoadBalancerIPs"], "serviceSelector": {"matchLabels": {"app": "web"}},
            "communities": ["65000:10"], "asPathPrepend": 2}),
        ),
        ad(
            "api",
            json!({"advertise": ["LoadBalancerIPs"], "serviceSelector": {"matchLabels": {"app": "api"}},
            "communities": ["65000:11"], "peerSelector": {"matchLabels": {"rack": "r2"}}}),
        ),
        ad(
            "cluster-ips",
            json!({"advertise": ["ClusterIPs"], "namespaceSelector": {"matchExpressions":
            [{"key": "team", "operator": "In", "values": ["t1", "t2"]}]}, "med": 5}),
        ),
        ad(
            "everything-r2",
            json!({"advertise": ["PodIPs", "SubnetCIDRs", "LoadBalancerIPs"],
            "peerSelector": {"matchLabels": {"rack": "r2"}}, "communities": ["65000:99"], "med": 20}),
        ),
        ad(
            "eips",
            json!({"advertise": ["EIPs"], "communities": ["65000:50"]}),
        ),
    ];
    let peer = |addr: &str, rack: Option<&str>, local_pref: Option<u32>| PeerView {
        address: addr.parse().expect("peer address"),
        name: rack.map(|r| format!("tor-{r}")),
        labels: rack
            .map(|r| [("rack".to_owned(), r.to_owned())].into())
            .unwrap_or_default(),
        defaults: RouteAttributes {
            communities: vec![0xFDE8_FDE8], // 65000:65000
            local_pref,
            ..RouteAttributes::default()
        },
        families: vec![Family::Ipv4Unicast, Family::Ipv6Unicast],
    };
    w.peers = vec![
        peer("192.168.0.1", Some("r1"), Some(150)),
        peer("192.168.0.2", Some("r2"), None),
        peer("192.168.0.3", Some("r3"), None),
        peer("192.168.0.4", None, None),
    ];
    w
}

/// This thread's CPU time (`/proc/thread-self/schedstat`, nanoseconds on a CPU): the machine
/// these run on is shared, and wall time there measures the neighbours as much as the code.
fn cpu() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let ns = text
        .split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Duration::from_nanos(ns)
}

/// Wall and CPU time of `f`.
fn timed<T>(f: impl FnOnce() -> T) -> (Duration, Duration) {
    let (wall, on_cpu) = (Instant::now(), cpu());
    std::hint::black_box(f());
    (wall.elapsed(), cpu().saturating_sub(on_cpu))
}

fn stats(mut times: Vec<Duration>) -> (Duration, Duration) {
    times.sort();
    (times[times.len() / 2], times[times.len() - 1])
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn mib(bytes: usize) -> String {
    format!(
        "{:.1} MiB",
        f64::from(u32::try_from(bytes / 1024).unwrap_or(u32::MAX)) / 1024.0
    )
}

fn main() {
    let args: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let pods = args.first().copied().unwrap_or(90_000);
    let services = args.get(1).copied().unwrap_or(10_000);
    let runs = args.get(2).copied().unwrap_or(7);
    let mut w = world(pods, services);
    let external = ExternalIpCidrs::default();
    let scope = Scope {
        node_name: "n1",
        announce_cluster_ip: false,
        cluster_router: "ovn-cluster",
        external_ip_cidrs: &external,
    };
    let evaluate = |w: &World| {
        let objects = Objects {
            pods: &w.pods,
            subnets: &w.subnets,
            services: &w.services,
            ips: &w.ips,
            ..Objects::default()
        };
        let inputs = PolicyInputs {
            namespaces: &w.namespaces,
            advertisements: &w.ads,
            peers: &w.peers,
        };
        policy::evaluate(&objects, &scope, &inputs)
    };

    // Heap: the peak above the objects during one evaluation, and what its result keeps.
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let result = evaluate(&w);
    let peak = PEAK.load(Ordering::Relaxed) - base;
    let kept = LIVE.load(Ordering::Relaxed) - base;
    let routes: usize = result.peers.values().map(BTreeMap::len).sum();
    let distinct = result
        .peers
        .values()
        .flat_map(|rib| rib.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    drop(result);

    let objects = Objects {
        pods: &w.pods,
        subnets: &w.subnets,
        services: &w.services,
        ips: &w.ips,
        ..Objects::default()
    };
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let desired = announce::desired(&objects, &scope);
    let desired_peak = PEAK.load(Ordering::Relaxed) - base;
    let desired_kept = LIVE.load(Ordering::Relaxed) - base;
    let annotated = desired.prefixes.len();
    drop(desired);
    let split = |v: Vec<(Duration, Duration)>| {
        let (wall, on_cpu): (Vec<_>, Vec<_>) = v.into_iter().unzip();
        (stats(wall), stats(on_cpu))
    };
    let annotation = split(
        (0..runs)
            .map(|_| timed(|| announce::desired(&objects, &scope)))
            .collect(),
    );
    let full = split((0..runs).map(|_| timed(|| evaluate(&w))).collect());
    // One changed object: svc0 moves from `web` to `api` (another advertisement, other peers,
    // other attributes), then back, one evaluation after each change.
    let mut changed = Vec::new();
    for i in 0..runs {
        w.services[0] = service(0, if i % 2 == 0 { "api" } else { "web" });
        changed.push(timed(|| evaluate(&w)));
    }
    let changed = split(changed);

    println!(
        "{pods} pods + {services} Services = {} distinct prefixes, {} advertisements, {} peers: {routes} routes",
        distinct,
        w.ads.len(),
        w.peers.len()
    );
    println!();
    println!("| measure ({runs} runs) | CPU median | CPU max | wall median | wall max |");
    println!("|---|---|---|---|---|");
    let row = |name: String, ((w50, wmax), (c50, cmax)): ((Duration, Duration), (Duration, Duration))| {
        println!(
            "| {name} | {} | {} | {} | {} |",
            ms(c50),
            ms(cmax),
            ms(w50),
            ms(wmax)
        );
    };
    row("full recompute (evaluate)".into(), full);
    row("after one changed Service".into(), changed);
    row(
        format!("annotation path alone (announce::desired, {annotated} prefixes)"),
        annotation,
    );
    println!();
    println!("| heap | evaluate | announce::desired |");
    println!("|---|---|---|");
    println!("| peak during one run | {} | {} |", mib(peak), mib(desired_peak));
    println!("| held by the result | {} | {} |", mib(kept), mib(desired_kept));
}
