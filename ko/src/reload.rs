//! `kubectl ko reload`: restart the components one after the other, each waited for before the
//! next, in Kube-OVN's order (ovn-central, ovs-ovn, kube-ovn-controller, kube-ovn-cni,
//! kube-ovn-pinger, kube-ovn-monitor) with our kube-ovn-speaker after the cni. A workload that
//! is not installed is skipped.
//!
//! Kube-OVN's plugin deletes the pods and waits for `rollout status`, and only marks ovs-ovn
//! for restart (`rollout restart` on its `OnDelete` DaemonSet replaces no pod). Here each
//! workload is restarted by `kubectl rollout restart` and waited for with `rollout status`;
//! an `OnDelete` DaemonSet (our ovs-ovn: restarting OVS cuts the node's pods off briefly) is
//! restarted node by node, in place: ovs-vswitchd is asked to exit (`ovs-appctl exit`), on
//! which the container's entry point (deploy/image/start-ovs.sh: a daemon gone takes the
//! container with it) stops the other daemons and ends, and the kubelet starts the container
//! again, awaited ready with one more restart before the next node. (Not a signal to the
//! entry point: the pod shares the host's PID namespace, PID 1 there is the node's init.) Not
//! by deleting the pod: a node whose own address is on an OVS bridge (an uplink moved into OVS,
//! as the lab's nodes and `exchangeLinkName` underlays have it) loses the API server with OVS,
//! so its kubelet could neither confirm the deletion nor learn of the replacement, and the node
//! stayed cut off (seen on the lab).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::bail;
use serde_json::Value;

use crate::kubectl;

/// Arguments of `kubectl ko reload`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  kubectl ko reload\n\nEach workload gets --timeout to become ready again; reload stops at the first that does not."
)]
pub struct ReloadArgs {
    /// How long to wait for each workload (each ovs-ovn node) to be ready again, in seconds.
    #[arg(long, env = "KO_RELOAD_TIMEOUT", default_value_t = 300)]
    pub timeout: u64,
}

/// A workload's kind as kubectl names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Deployment,
    DaemonSet,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Self::Deployment => "deployment",
            Self::DaemonSet => "daemonset",
        }
    }
}

/// The workloads, in restart order: kind, name, its pods' `app` label.
pub const ORDER: [(Kind, &str, &str); 7] = [
    (Kind::Deployment, "ovn-central", "ovn-central"),
    (Kind::DaemonSet, "ovs-ovn", "ovs"),
    (Kind::Deployment, "kube-ovn-controller", "kube-ovn-controller"),
    (Kind::DaemonSet, "kube-ovn-cni", "kube-ovn-cni"),
    (Kind::DaemonSet, "kube-ovn-speaker", "kube-ovn-speaker"),
    (Kind::DaemonSet, "kube-ovn-pinger", "kube-ovn-pinger"),
    (Kind::Deployment, "kube-ovn-monitor", "kube-ovn-monitor"),
];

/// `rollout restart` then `rollout status` of a workload.
pub fn rollout_commands(kind: Kind, name: &str, namespace: &str, timeout: u64) -> [Vec<String>; 2] {
    let target = format!("{}/{name}", kind.as_str());
    let base = |verb: &str| {
        vec![
            "rollout".to_owned(),
            verb.to_owned(),
            "-n".to_owned(),
            namespace.to_owned(),
            target.clone(),
        ]
    };
    let mut status = base("status");
    status.push(format!("--timeout={timeout}s"));
    [base("restart"), status]
}

/// The container of an `OnDelete` DaemonSet's pods that `reload` restarts in place, by app.
fn container_of(app: &str) -> Option<&'static str> {
    (app == crate::node_tools::OVS_APP).then_some(crate::node_tools::OVS_CONTAINER)
}

/// Asks ovs-vswitchd in a pod's container to exit: its container ends and the kubelet starts it
/// again.
pub fn stop_command(namespace: &str, pod: &str, container: &str) -> Vec<String> {
    let command = ["ovs-appctl", "-t", crate::trace::access::VSWITCHD_CTL, "exit"];
    kubectl::exec_args(namespace, pod, container, &command)
        .into_iter()
        .map(str::to_owned)
        .collect()
}

/// Whether a workload's JSON says its pods are replaced only when deleted.
pub fn is_on_delete(workload: &Value) -> bool {
    workload["spec"]["updateStrategy"]["type"] == "OnDelete"
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn run_step(argv: &[String]) -> anyhow::Result<()> {
    let status = kubectl::attached(&strs(argv))?;
    if !status.success() {
        bail!("kubectl {} failed ({status})", argv.join(" "));
    }
    Ok(())
}

/// Restarts an `OnDelete` DaemonSet's containers node by node, in place.
fn node_by_node(app: &str, namespace: &str, timeout: u64) -> anyhow::Result<()> {
    let Some(container) = container_of(app) else {
        bail!("no container of app={app} to restart in place");
    };
    for old in kubectl::component_pods(app)? {
        println!(
            "restarting {} on node {} (container {container})",
            old.name, old.node
        );
        // The exec may end with the container it stopped, with an error: what counts is the
        // restart observed below.
        let _ = kubectl::attached(&strs(&stop_command(namespace, &old.name, container)));
        let deadline = Instant::now() + Duration::from_secs(timeout);
        loop {
            let pods = kubectl::component_pods(app)?;
            if let Some(again) = pods
                .iter()
                .find(|p| p.name == old.name && p.ready && p.restarts > old.restarts)
            {
                println!(
                    "{} ready again on node {} ({} restarts)",
                    again.name, again.node, again.restarts
                );
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} on node {} is not ready again {timeout} s after its ovs-vswitchd was asked to exit",
                    old.name,
                    old.node
                );
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    Ok(())
}

pub fn run(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    let ns = kubectl::namespace();
    for (kind, name, app) in ORDER {
        let workload = match kubectl::json(&["get", kind.as_str(), "-n", &ns, name]) {
            Ok(w) => w,
            Err(e) if format!("{e:#}").contains("NotFound") => {
                println!("{} {name} is not installed: skipped", kind.as_str());
                continue;
            }
            Err(e) => return Err(e),
        };
        if kind == Kind::DaemonSet && is_on_delete(&workload) {
            node_by_node(app, &ns, args.timeout)?;
        } else {
            for argv in rollout_commands(kind, name, &ns, args.timeout) {
                run_step(&argv)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_order_is_kube_ovns_with_the_speaker_after_the_cni() {
        let names: Vec<&str> = ORDER.iter().map(|(_, n, _)| *n).collect();
        assert_eq!(
            names,
            [
                "ovn-central",
                "ovs-ovn",
                "kube-ovn-controller",
                "kube-ovn-cni",
                "kube-ovn-speaker",
                "kube-ovn-pinger",
                "kube-ovn-monitor"
            ]
        );
    }

    #[test]
    fn a_rollout_is_restarted_then_awaited() {
        let [restart, status] = rollout_commands(Kind::Deployment, "ovn-central", "kube-system", 300);
        assert_eq!(
            strs(&restart),
            [
                "rollout",
                "restart",
                "-n",
                "kube-system",
                "deployment/ovn-central"
            ]
        );
        assert_eq!(
            strs(&status),
            [
                "rollout",
                "status",
                "-n",
                "kube-system",
                "deployment/ovn-central",
                "--timeout=300s"
            ]
        );
    }

    #[test]
    fn an_on_delete_daemonset_restarts_in_place_node_by_node() {
        assert!(is_on_delete(
            &json!({"spec": {"updateStrategy": {"type": "OnDelete"}}})
        ));
        assert!(!is_on_delete(
            &json!({"spec": {"updateStrategy": {"type": "RollingUpdate"}}})
        ));
        assert_eq!(container_of("ovs"), Some("openvswitch"));
        assert_eq!(
            strs(&stop_command("kube-system", "ovs-ovn-x", "openvswitch")),
            [
                "exec",
                "-n",
                "kube-system",
                "ovs-ovn-x",
                "-c",
                "openvswitch",
                "--",
                "ovs-appctl",
                "-t",
                "/run/openvswitch/ovs-vswitchd.ctl",
                "exit"
            ]
        );
    }
}
