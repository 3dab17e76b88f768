//! Traffic mirroring on the lab installed from `deploy/` (issue 28): `tcpdump -i mirror0` on the
//! node of a pod annotated `ovn.kubernetes.io/mirror: "true"` sees its ICMP and TCP SYN and
//! nothing of an unannotated pod on the same node; the annotation removed, `mirror0` and the
//! `Mirror` row go.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use kube_ovn_testkit::{Capture, Frame, wait_until};

use super::node_netns;
use crate::{Lab, WAIT, jsonpath};

const MIRROR_PODS: &str = r#"
apiVersion: v1
kind: Namespace
metadata:
  name: mirror
---
apiVersion: v1
kind: Pod
metadata:
  name: mirrored
  namespace: mirror
  annotations: {ovn.kubernetes.io/mirror: "true"}
spec:
  nodeName: NODE
  containers:
    - {name: netexec, image: kube-ovn-lab/netexec, imagePullPolicy: IfNotPresent}
---
apiVersion: v1
kind: Pod
metadata: {name: plain, namespace: mirror}
spec:
  nodeName: NODE
  containers:
    - {name: netexec, image: kube-ovn-lab/netexec, imagePullPolicy: IfNotPresent}
"#;

/// `ip -o link show mirror0` in the node's namespace: `None` when there is no such link, else
/// whether it is up.
fn mirror0(lab: &Lab, node: &str) -> Result<Option<bool>> {
    let out = std::process::Command::new("ip")
        .arg("-n")
        .arg(lab.netns(node))
        .args(["-o", "link", "show", "mirror0"])
        .output()?;
    if !out.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let flags = text
        .split('<')
        .nth(1)
        .and_then(|r| r.split('>').next())
        .unwrap_or_default();
    Ok(Some(flags.split(',').any(|f| f == "UP")))
}

/// The `Mirror` rows of the node's Open_vSwitch database.
fn mirror_rows(lab: &Lab, node: &str) -> Result<String> {
    let db = lab.node_root(node, "run/openvswitch/db.sock");
    let out = std::process::Command::new("ovs-vsctl")
        .arg(format!("--db=unix:{}", db.display()))
        .args(["--bare", "--columns=name", "list", "Mirror"])
        .output()?;
    ensure!(out.status.success(), "ovs-vsctl list Mirror on {node}: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// ICMP and a TCP connection from the node's namespace to `ip`.
fn traffic_to(lab: &Lab, node: &str, ip: &str) -> Result<()> {
    let ping = std::process::Command::new("ip")
        .args(["netns", "exec", &lab.netns(node)])
        .args(["ping", "-c", "2", "-i", "0.2", "-W", "2", ip])
        .output()?;
    ensure!(ping.status.success(), "ping {ip} from {node}: {ping:?}");
    let addr: SocketAddr = format!("{ip}:8080").parse()?;
    let answer = kube_ovn_dataplane::Netns::open(node_netns(lab, node))?
        .run(|| kube_ovn_lab::netexec::http_get(addr, "/hostname", Duration::from_secs(3)))??;
    ensure!(answer.status == 200, "GET {addr}/hostname: {answer:?}");
    Ok(())
}

/// Issue 28: "`tcpdump -i mirror0` sees a mirrored pod's traffic", and nothing of an
/// unmirrored pod's; the annotation removed, nothing is mirrored and `mirror0` is gone (ours
/// removes the port when nothing is mirrored, node/src/mirror.rs; Kube-OVN keeps it).
pub fn mirror_in_the_lab(lab: &Lab, node: &str) -> Result<()> {
    ensure!(
        mirror0(lab, node)?.is_none(),
        "{node} has mirror0 before any pod is annotated"
    );
    let file = lab.dir.path().join("mirror-pods.yaml");
    std::fs::write(&file, MIRROR_PODS.replace("NODE", node))?;
    lab.apply(&file)?;
    lab.ok(&[
        "kubectl",
        "-n",
        "mirror",
        "wait",
        "--for=condition=Ready",
        "pod/mirrored",
        "pod/plain",
        "--timeout=120s",
    ])?;
    let ip = |pod: &str| jsonpath(lab, &["get", "pod", "-n", "mirror", pod], "{.status.podIP}");
    let (mirrored, plain) = (ip("mirrored")?, ip("plain")?);
    wait_until(&format!("mirror0 up on {node}"), WAIT, || {
        Ok(mirror0(lab, node)? == Some(true))
    })?;

    let log = lab.dir.path().join("tcpdump-mirror0.log");
    let mut tcpdump = Capture::start(&lab.netns(node), "mirror0", log)?;
    // The unannotated pod's traffic first: once the mirrored pod's (sent after) is captured,
    // the other's would have been too.
    traffic_to(lab, node, &plain)?;
    traffic_to(lab, node, &mirrored)?;
    let waited = wait_until(
        "the mirrored pod's ICMP and TCP SYN on mirror0",
        Duration::from_secs(15),
        || {
            let f = tcpdump.frames();
            let to_pod = |what| {
                f.iter()
                    .any(|x| x.dst_ip.as_deref() == Some(mirrored.as_str()) && x.line.contains(what))
            };
            Ok(to_pod("ICMP echo request")
                && to_pod("Flags [S],")
                && f.iter().any(|x| {
                    x.src_ip.as_deref() == Some(mirrored.as_str()) && x.line.contains("ICMP echo reply")
                }))
        },
    );
    let (captured, frames) = (tcpdump.raw(), tcpdump.frames());
    tcpdump.stop();
    if let Err(e) = waited {
        bail!("{e}; captured:\n{captured}");
    }
    let of_plain: Vec<&Frame> = frames
        .iter()
        .filter(|f| {
            [&f.src_ip, &f.dst_ip]
                .iter()
                .any(|a| a.as_deref() == Some(plain.as_str()))
        })
        .collect();
    ensure!(
        of_plain.is_empty(),
        "mirror0 carried the unannotated pod's traffic: {of_plain:#?}"
    );
    let of_mirrored = frames
        .iter()
        .filter(|f| {
            [&f.src_ip, &f.dst_ip]
                .iter()
                .any(|a| a.as_deref() == Some(mirrored.as_str()))
        })
        .count();
    println!(
        "tcpdump -i mirror0 on {node}: {of_mirrored} frames of mirror/mirrored ({mirrored}), none of mirror/plain ({plain}), e.g.:\n  {}",
        frames
            .iter()
            .filter(|f| f.line.contains("ICMP echo") || f.line.contains("Flags [S"))
            .take(4)
            .map(|f| f.line.as_str())
            .collect::<Vec<_>>()
            .join("\n  ")
    );

    lab.ok(&[
        "kubectl",
        "-n",
        "mirror",
        "annotate",
        "pod",
        "mirrored",
        "ovn.kubernetes.io/mirror-",
    ])?;
    let removed = Instant::now();
    let last = std::cell::RefCell::new(String::new());
    wait_until(
        &format!("mirror0 and the Mirror row to go from {node}"),
        WAIT,
        || {
            let rows = mirror_rows(lab, node)?;
            let link = mirror0(lab, node)?;
            *last.borrow_mut() = format!("Mirror rows {rows:?}, mirror0 {link:?}");
            Ok(rows.is_empty() && link.is_none())
        },
    )
    .with_context(|| last.borrow().clone())?;
    println!(
        "annotation removed: mirror0 and the Mirror row gone after {:.1} s",
        removed.elapsed().as_secs_f64()
    );
    lab.ok(&["kubectl", "delete", "namespace", "mirror", "--wait=false"])?;
    Ok(())
}
