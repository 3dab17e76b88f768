//! `kubectl-ko` against a real kube-apiserver through the upstream kubectl (lab::kubernetes),
//! with none of our components running: each verb must find out through the real API what is
//! missing and say so (kubectl's own NotFound for a node or pod, ours for a component), and
//! `reload` must recognise the real NotFound of every workload and skip it. What the verbs run
//! inside pods is unit-tested in the crate; docs/operations.md ("kubectl ko") says which verbs
//! were tried on a lab.

use std::path::Path;
use std::process::{Command, Output};

use kube_ovn_lab::kubernetes::binary;
use kube_ovn_lab::kubernetes::fixture::ApiServer;

fn ko(kubeconfig: &Path, args: &[&str]) -> Output {
    let kubectl = binary("kubectl").expect("the upstream kubectl (scripts/build-kubernetes.sh)");
    Command::new(env!("CARGO_BIN_EXE_kubectl-ko"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECTL", kubectl)
        .env_remove("KUBE_OVN_NS")
        .output()
        .expect("running kubectl-ko")
}

fn kubectl(kubeconfig: &Path, args: &[&str]) {
    let out = Command::new(binary("kubectl").expect("the upstream kubectl"))
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .expect("running kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The verb failed and its stderr says `expected`.
fn fails_saying(out: &Output, expected: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a failure, got {out:?}");
    assert!(stderr.contains(expected), "stderr lacks {expected:?}: {stderr}");
}

const NODE: &str = "apiVersion: v1
kind: Node
metadata:
  name: node1
";

#[tokio::test(flavor = "multi_thread")]
async fn verbs_on_a_cluster_without_our_components_say_what_is_missing() {
    let server = ApiServer::start().await.expect("kube-apiserver");
    let config = server.admin_kubeconfig();
    let config = config.as_path();
    let dir = tempfile::tempdir().unwrap();
    let node = dir.path().join("node.yaml");
    std::fs::write(&node, NODE).unwrap();
    kubectl(config, &["create", "-f", node.to_str().unwrap()]);
    // Pending for ever: no scheduler, no kubelet.
    kubectl(
        config,
        &[
            "run",
            "ovn-central-0",
            "-n",
            "kube-system",
            "--image=kube-ovn-rs:dev",
            "--labels=app=ovn-central",
        ],
    );

    // A node that is not there is kubectl's NotFound; one that is, without our pod, is ours.
    fails_saying(
        &ko(config, &["vsctl", "nosuch", "show"]),
        "nodes \"nosuch\" not found",
    );
    fails_saying(
        &ko(config, &["ofctl", "node1", "dump-flows", "br-int"]),
        "no pod with app=ovs on node node1 in namespace kube-system (pods: none)",
    );
    fails_saying(
        &ko(config, &["nbctl", "show"]),
        "no ready ovn-central pod (app=ovn-central) in namespace kube-system",
    );
    fails_saying(
        &ko(config, &["sb", "status"]),
        "no ready ovn-central pod (app=ovn-central) in namespace kube-system",
    );
    fails_saying(&ko(config, &["nb", "restore"]), "restore is not offered");
    fails_saying(
        &ko(config, &["tcpdump", "default/nosuch"]),
        "pods \"nosuch\" not found",
    );
    fails_saying(
        &ko(config, &["tcpdump", "kube-system/ovn-central-0"]),
        "pod kube-system/ovn-central-0 is not on any node",
    );
    fails_saying(
        &ko(config, &["bgp"]),
        "no Running speaker pod (app=kube-ovn-speaker) in namespace kube-system",
    );
    fails_saying(
        &ko(config, &["env-check"]),
        "no kube-ovn-cni pod (app=kube-ovn-cni)",
    );

    // Nothing of ours is installed: every workload is skipped, in Kube-OVN's order.
    let out = ko(config, &["reload"]);
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let skipped: Vec<&str> = stdout
        .lines()
        .filter_map(|l| l.strip_suffix(" is not installed: skipped"))
        .collect();
    assert_eq!(
        skipped,
        [
            "deployment ovn-central",
            "daemonset ovs-ovn",
            "deployment kube-ovn-controller",
            "daemonset kube-ovn-cni",
            "daemonset kube-ovn-speaker",
            "daemonset kube-ovn-pinger",
            "deployment kube-ovn-monitor"
        ],
        "{stdout}"
    );

    // No pods to collect from: the folder is made and nothing fails.
    let logs = dir.path().join("logs");
    let out = ko(config, &["log", "all", "--dir", logs.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert!(logs.is_dir());
}
