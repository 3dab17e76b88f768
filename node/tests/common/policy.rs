//! What the NetworkPolicy truth table adds to a [`Cluster`]: pods with labels and named container
//! ports serving netexec on TCP 80, TCP 81 and UDP 80, probes of every pair with real
//! connections, the same pairs judged by `ovn-trace`, and the northbound row counts a policy
//! must leave as it found them.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::Api;
use kube::api::PostParams;
use kube_ovn_api::annotations::keys;
use kube_ovn_lab::netexec;
use kube_ovn_testkit::{Netns, run};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{Cluster, TestPod};

/// What a probe tries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Probe {
    Tcp80,
    Tcp81,
    Udp80,
}

pub const PROBES: [Probe; 3] = [Probe::Tcp80, Probe::Tcp81, Probe::Udp80];

/// A probe's end: pod `app` (index) of namespace `ns` (index), or the outside host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Ep {
    Pod(usize, usize),
    Outside,
}

/// A connection's verdict per (source, destination, probe).
pub type Matrix = BTreeMap<(Ep, Ep, Probe), bool>;

/// How long a blocked probe waits before it counts as blocked.
const PROBE_TIMEOUT: Duration = Duration::from_millis(1500);

fn dp(ns: &Netns) -> Result<kube_ovn_dataplane::Netns> {
    Ok(kube_ovn_dataplane::Netns::open(ns.path())?)
}

/// Serves netexec on TCP 80 and 81 and UDP 80 in `ns`.
pub fn serve_all(ns: &Netns, name: &str) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut out = vec![
        super::egress::serve(ns, 80, name)?,
        super::egress::serve(ns, 81, name)?,
    ];
    let udp = ns.run(|| netexec::bind_udp(SocketAddr::from((Ipv4Addr::UNSPECIFIED, 80))))??;
    let name: std::sync::Arc<str> = name.into();
    out.push(tokio::spawn(async move {
        let _ = netexec::serve_udp(udp, name).await;
    }));
    Ok(out)
}

/// The next client port: every probe of a test run has its own, so no 5-tuple is ever reused and
/// no probe meets the conntrack entry of an earlier one (ovs-vswitchd 3.1.0's userspace conntrack
/// has aborted on `conn_update_state()` assertions when a closed connection's tuple came back).
fn next_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    20000 + u16::try_from(n % 40000).expect("below 40000")
}

/// Whether `probe` from `from` to `to` gets netexec's answer, from a client port no other probe
/// used.
pub async fn probe(from: &Netns, to: IpAddr, probe: Probe) -> Result<bool> {
    let ns = dp(from)?;
    let local = SocketAddr::new(IpAddr::from(Ipv4Addr::UNSPECIFIED), next_port());
    Ok(match probe {
        Probe::Tcp80 | Probe::Tcp81 => {
            let port = if probe == Probe::Tcp80 { 80 } else { 81 };
            // The socket is made inside the namespace; connecting it needs no more of it.
            let socket = ns
                .run_async(move || -> std::io::Result<tokio::net::TcpSocket> {
                    let s = tokio::net::TcpSocket::new_v4()?;
                    s.bind(local)?;
                    Ok(s)
                })
                .await??;
            let exchange = async move {
                let mut stream = socket.connect(SocketAddr::new(to, port)).await?;
                stream
                    .write_all(b"GET /hostname HTTP/1.0\r\nHost: probe\r\n\r\n")
                    .await?;
                let mut answer = Vec::new();
                stream.read_to_end(&mut answer).await?;
                Ok::<_, std::io::Error>(
                    answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200"),
                )
            };
            matches!(tokio::time::timeout(PROBE_TIMEOUT, exchange).await, Ok(Ok(true)))
        }
        Probe::Udp80 => ns
            .run_async(move || {
                let s = std::net::UdpSocket::bind(local)?;
                s.set_read_timeout(Some(PROBE_TIMEOUT))?;
                s.send_to(b"hostname", SocketAddr::new(to, 80))?;
                let mut buf = [0u8; 512];
                s.recv(&mut buf).map(|n| n > 0)
            })
            .await?
            .unwrap_or(false),
    })
}

/// A namespace with labels (created, or its labels replaced).
pub async fn labelled_namespace(cluster: &Cluster, name: &str, labels: serde_json::Value) -> Result<()> {
    let api = Api::<Namespace>::all(cluster.kube.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}}))?;
    if api.get_opt(name).await?.is_some() {
        api.patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await?;
    } else {
        api.create(&PostParams::default(), &ns).await?;
    }
    Ok(())
}

/// A pod labelled `app=<app>` whose container names port 80 `http` and port 81 `web`, attached
/// through the shim on `node`.
pub async fn labelled_pod(
    cluster: &Cluster,
    ns: &str,
    name: &str,
    app: &str,
    node: usize,
) -> Result<TestPod> {
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"app": app}},
        "spec": {"nodeName": cluster.nodes[node].name, "containers": [{"name": "c", "image": "x",
            "ports": [{"name": "http", "containerPort": 80}, {"name": "web", "containerPort": 81}]}]}}))?;
    Api::<Pod>::namespaced(cluster.kube.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    let (netns, sandbox) = Cluster::sandbox(ns, name)?;
    let runtime = cluster.nodes[node].runtime.clone();
    let sb = sandbox.clone();
    let result = tokio::task::spawn_blocking(move || runtime.add(&sb))
        .await?
        .with_context(|| cluster.nodes[node].daemon.log_tail(30))?;
    Ok(TestPod {
        name: name.into(),
        namespace: ns.into(),
        netns,
        sandbox,
        result,
    })
}

/// A pod's MAC as the controller annotated it.
pub async fn pod_mac(cluster: &Cluster, ns: &str, name: &str) -> Result<String> {
    let pod = Api::<Pod>::namespaced(cluster.kube.clone(), ns).get(name).await?;
    pod.metadata
        .annotations
        .and_then(|a| a.get(keys::MAC_ADDRESS).cloned())
        .with_context(|| format!("pod {ns}/{name} has no MAC annotation"))
}

/// One end of a trace: the pod's port, MAC and address.
#[derive(Debug, Clone)]
pub struct TraceEnd {
    pub port: String,
    pub mac: String,
    pub ip: Ipv4Addr,
}

/// Whether `ovn-trace` delivers a new connection's first packet from `src` to `dst` on `switch`
/// (`--ct=new`: stateful ACLs judge it as the first packet of a connection).
pub fn trace_allows(sb: &str, switch: &str, src: &TraceEnd, dst: &TraceEnd, probe: Probe) -> Result<bool> {
    let l4 = match probe {
        Probe::Tcp80 => "tcp && tcp.src == 40000 && tcp.dst == 80",
        Probe::Tcp81 => "tcp && tcp.src == 40000 && tcp.dst == 81",
        Probe::Udp80 => "udp && udp.src == 40000 && udp.dst == 80",
    };
    let flow = format!(
        "inport == \"{}\" && eth.src == {} && eth.dst == {} && ip4.src == {} && ip4.dst == {} && ip.ttl == 64 && {l4}",
        src.port, src.mac, dst.mac, src.ip, dst.ip
    );
    let db = format!("--db={sb}");
    // One `--ct=new` per ct action on the path (dataplane.md: the rest default to est|trk).
    let out = run(
        "ovn-trace",
        &[
            &db,
            "--minimal",
            "--ct=new",
            "--ct=new",
            "--ct=new",
            "--ct=new",
            switch,
            &flow,
        ],
    )?;
    let trace = kube_ovn_testkit::Trace::parse(&out)?;
    Ok(trace.delivers_to(&dst.port))
}

/// How many rows the northbound tables a policy writes hold.
pub fn nb_counts(cluster: &Cluster) -> Result<[usize; 3]> {
    let count = |table: &str| -> Result<usize> {
        let out = cluster.ovn.nbctl(&["--bare", "--columns=_uuid", "list", table])?;
        Ok(out.lines().filter(|l| !l.trim().is_empty()).count())
    };
    Ok([count("Port_Group")?, count("Address_Set")?, count("ACL")?])
}

/// The differences between two matrices, one line each, for a failure message.
pub fn differences(got: &Matrix, want: &Matrix) -> Vec<String> {
    want.iter()
        .filter(|(k, v)| got.get(k) != Some(v))
        .map(|((s, d, p), v)| format!("{s:?} -> {d:?} {p:?}: want {v}, got {:?}", got.get(&(*s, *d, *p))))
        .collect()
}
