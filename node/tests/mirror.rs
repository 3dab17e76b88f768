//! Traffic mirroring through the real shim, daemon, controller, OVS (userspace datapath) and
//! ovn-controller (see `common`): `tcpdump -i mirror0` in the node's namespace sees the
//! mirrored pods' ICMP and TCP and nothing of the others; the pod annotation
//! `ovn.kubernetes.io/mirror` and `--enable-mirror` decide which. Needs root, tcpdump and the
//! OVS/OVN packages (scripts/install-deps.sh); fails, never skips, without them.

mod common;

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context, Result};
use common::{Cluster, TestNode, TestPod, WAIT};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use kube_ovn_testkit::{Frame, tcp_transfer, wait_until, wait_until_async};
use serde_json::{Value, json};

const MIRROR: &str = "ovn.kubernetes.io/mirror";
const MIRROR0: &str = "mirror0";
/// How long a capture waits for a frame the traffic already produced.
const FRAME_WAIT: Duration = Duration::from_secs(15);
const PING_WAIT: Duration = Duration::from_secs(20);

/// `tcpdump -e -nn -l -U -i mirror0` in the node's namespace (testkit's capture); stopped by
/// PID on drop.
struct Capture(kube_ovn_testkit::Capture);

impl Capture {
    /// Starts tcpdump and returns once it listens (frames from then on are captured).
    fn start(node: &TestNode, tag: &str) -> Result<Self> {
        let log = node.dir.path().join(format!("tcpdump-{tag}.log"));
        Ok(Self(kube_ovn_testkit::Capture::start(
            node.ovs.netns().name(),
            MIRROR0,
            log,
        )?))
    }

    fn frames(&self) -> Vec<Frame> {
        self.0.frames()
    }

    fn raw(&self) -> String {
        self.0.raw()
    }

    /// Waits until a frame between `src` and `dst` whose line contains `what` was captured.
    fn wait_frame(&self, src: Ipv4Addr, dst: Ipv4Addr, what: &str) -> Result<()> {
        let (src, dst) = (src.to_string(), dst.to_string());
        wait_until(&format!("{what} {src} > {dst} on {MIRROR0}"), FRAME_WAIT, || {
            Ok(self.frames().iter().any(|f| {
                f.src_ip.as_deref() == Some(src.as_str())
                    && f.dst_ip.as_deref() == Some(dst.as_str())
                    && f.line.contains(what)
            }))
        })
        .with_context(|| format!("captured:\n{}", self.raw()))
    }

    /// IPv4 frames none of whose addresses is in `mirrored`.
    fn foreign(&self, mirrored: &[Ipv4Addr]) -> Vec<String> {
        let mirrored: Vec<String> = mirrored.iter().map(ToString::to_string).collect();
        self.frames()
            .into_iter()
            .filter(|f| f.ethertype == "IPv4")
            .filter(|f| {
                ![&f.src_ip, &f.dst_ip]
                    .into_iter()
                    .any(|ip| ip.as_ref().is_some_and(|ip| mirrored.contains(ip)))
            })
            .map(|f| f.line)
            .collect()
    }
}

/// `from` pings `to` and opens a TCP connection to it (port 7000, one small transfer).
fn ping_and_connect(from: &TestPod, to: &TestPod) -> Result<()> {
    from.netns
        .wait_ping(to.ip(), PING_WAIT)
        .with_context(|| format!("{} pings {}", from.name, to.name))?;
    tcp_transfer(&to.netns, IpAddr::V4(to.ip()), 7000, &from.netns, 1000, PING_WAIT)
        .with_context(|| format!("{} connects to {}", from.name, to.name))
}

/// Asserts what `capture` shows of `from` pinging and connecting to `to`: the echo request,
/// the reply, and the TCP SYN.
fn saw_ping_and_syn(capture: &Capture, from: &TestPod, to: &TestPod) -> Result<()> {
    capture.wait_frame(from.ip(), to.ip(), "ICMP echo request")?;
    capture.wait_frame(to.ip(), from.ip(), "ICMP echo reply")?;
    capture.wait_frame(from.ip(), to.ip(), "Flags [S],")
}

fn mirror0_up(node: &TestNode) -> bool {
    let Ok(out) = node.ovs.netns().ip(&["-o", "link", "show", MIRROR0]) else {
        return false;
    };
    let flags = out
        .split('<')
        .nth(1)
        .and_then(|r| r.split('>').next())
        .unwrap_or_default();
    flags.split(',').any(|f| f == "UP")
}

fn mirror_column(node: &TestNode, column: &str) -> Result<String> {
    Ok(node
        .ovs
        .vsctl(&[
            "--no-wait",
            "--bare",
            &format!("--columns={column}"),
            "list",
            "Mirror",
        ])?
        .trim()
        .to_owned())
}

fn port_uuid(node: &TestNode, pod: &TestPod) -> Result<String> {
    let nic = format!("{}_h", &pod.sandbox.container_id[..12]);
    Ok(node
        .ovs
        .vsctl(&["--no-wait", "get", "Port", &nic, "_uuid"])?
        .trim()
        .to_owned())
}

/// Waits until nothing is mirrored: no Mirror row, no port, no link.
fn wait_mirror_gone(node: &TestNode, why: &str) -> Result<()> {
    wait_until(&format!("{why}: no Mirror row and no {MIRROR0}"), WAIT, || {
        let ports = node.ovs.vsctl(&["--no-wait", "list-ports", "br-int"])?;
        Ok(node.ovs_rows("Mirror")? == 0
            && !ports.lines().any(|p| p.trim() == MIRROR0)
            && node.ovs.netns().ip(&["link", "show", MIRROR0]).is_err())
    })
    .with_context(|| node.daemon.log_tail(30))
}

async fn annotate(cluster: &Cluster, pod: &str, value: Value) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(cluster.kube.clone(), "default");
    let patch = json!({"metadata": {"annotations": {MIRROR: value}}});
    pods.patch(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Without `--enable-mirror`: pod `a` annotated `"true"` is mirrored onto `mirror0` (its ICMP
/// and TCP both ways), `b` and `c` (`"yes"`: refused with a Warning event, taken as false) are
/// not. The annotation moved from `a` to `c`: `a`'s traffic is no longer seen, `c`'s is. No
/// annotated pod left: the Mirror row, the port and the link are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotated_pods_are_mirrored_onto_mirror0_and_others_are_not() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let a = cluster.pod("default", "a", 0, &[(MIRROR, "true")]).await?;
    let b = cluster.pod("default", "b", 0, &[]).await?;
    let c = cluster.pod("default", "c", 0, &[(MIRROR, "yes")]).await?;

    let events = Api::<Event>::namespaced(cluster.kube.clone(), "default");
    wait_until_async("a MirrorAnnotationInvalid event on pod c", WAIT, || async {
        Ok(events.list(&ListParams::default()).await?.items.iter().any(|e| {
            e.reason.as_deref() == Some("MirrorAnnotationInvalid")
                && e.type_.as_deref() == Some("Warning")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("c")
                && e.note
                    .as_deref()
                    .is_some_and(|n| n.contains("default/c") && n.contains(MIRROR) && n.contains("\"yes\""))
        }))
    })
    .await?;
    wait_until(&format!("{MIRROR0} up"), WAIT, || Ok(mirror0_up(node)))
        .with_context(|| node.daemon.log_tail(30))?;
    assert_eq!(mirror_column(node, "select_all")?, "false");

    let capture = Capture::start(node, "a")?;
    // The unmirrored pods talk first; a's frames, captured after theirs, prove the capture
    // was running while they talked.
    ping_and_connect(&b, &c)?;
    ping_and_connect(&c, &b)?;
    ping_and_connect(&a, &b)?;
    saw_ping_and_syn(&capture, &a, &b)?;
    let foreign = capture.foreign(&[a.ip()]);
    assert!(
        foreign.is_empty(),
        "frames of unmirrored pods on {MIRROR0}:\n{}",
        foreign.join("\n")
    );
    drop(capture);

    // c is now mirrored, then a no longer: mirror0 stays, with c's port only.
    annotate(&cluster, "c", json!("true")).await?;
    annotate(&cluster, "a", Value::Null).await?;
    let c_port = port_uuid(node, &c)?;
    wait_until("the mirror to select c's port only", WAIT, || {
        Ok(mirror_column(node, "select_src_port")? == c_port
            && mirror_column(node, "select_dst_port")? == c_port)
    })
    .with_context(|| node.daemon.log_tail(30))?;
    let capture = Capture::start(node, "c")?;
    ping_and_connect(&a, &b)?;
    ping_and_connect(&c, &a)?;
    saw_ping_and_syn(&capture, &c, &a)?;
    let foreign = capture.foreign(&[c.ip()]);
    assert!(
        foreign.is_empty(),
        "frames of pods no longer mirrored on {MIRROR0}:\n{}",
        foreign.join("\n")
    );
    drop(capture);

    annotate(&cluster, "c", json!("false")).await?;
    wait_mirror_gone(node, "no annotated pod left")?;
    Ok(())
}

/// `--enable-mirror=true`: every pod's traffic is on `mirror0` (`select_all`), no annotation
/// needed. Restarted with `--enable-mirror=false` and no annotated pod, the daemon removes the
/// global mirror it left, and its port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_mirror_sees_every_pod_and_goes_when_the_flag_is_off() -> Result<()> {
    let mut cluster = Cluster::start(1, &["--enable-mirror=true"]).await?;
    let b = cluster.pod("default", "b", 0, &[]).await?;
    let c = cluster.pod("default", "c", 0, &[]).await?;
    let node = &cluster.nodes[0];
    wait_until(&format!("{MIRROR0} up"), WAIT, || Ok(mirror0_up(node)))
        .with_context(|| node.daemon.log_tail(30))?;
    assert_eq!(mirror_column(node, "select_all")?, "true");

    let capture = Capture::start(node, "global")?;
    ping_and_connect(&b, &c)?;
    saw_ping_and_syn(&capture, &b, &c)?;
    drop(capture);

    let node = &mut cluster.nodes[0];
    for arg in &mut node.daemon_args {
        if arg == "--enable-mirror=true" {
            "--enable-mirror=false".clone_into(arg);
        }
    }
    node.restart_daemon()?;
    wait_mirror_gone(node, "restarted with --enable-mirror=false")?;
    // Pods still talk: the mirror's removal took nothing else with it.
    b.netns.wait_ping(c.ip(), PING_WAIT)?;
    Ok(())
}
