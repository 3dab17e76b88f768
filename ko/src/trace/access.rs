//! The cluster's OVN and OVS as `trace` and `diagnose` reach them: commands in the ovn-central
//! pod (its databases' sockets under `/var/run/ovn`, as `deploy/image/start-ovn-central.sh`
//! makes them) and in a node's ovs-ovn pod (container `openvswitch`; ovs-vswitchd's control
//! socket is `/run/openvswitch/ovs-vswitchd.ctl`, given explicitly by `start-ovs.sh`, so
//! `ovs-appctl` must be told it: the default lookup by PID file finds no socket there).

use anyhow::{Context, bail};
use serde_json::Value;

use crate::kubectl;

/// ovn-central's container (Kube-OVN's name too).
pub const CENTRAL_CONTAINER: &str = "ovn-central";
/// The ovs-ovn pod's container.
pub const OVS_CONTAINER: &str = "openvswitch";
/// ovs-vswitchd's control socket in the ovs-ovn pod.
pub const VSWITCHD_CTL: &str = "/run/openvswitch/ovs-vswitchd.ctl";
/// ovsdb-server's (the node's Open_vSwitch database) control socket.
pub const OVSDB_CTL: &str = "/run/openvswitch/ovsdb-server.ctl";
/// The southbound database's socket in ovn-central, for ovn-trace.
pub const SB_SOCKET: &str = "unix:/var/run/ovn/ovnsb_db.sock";

/// Runs `command` in a ready ovn-central pod (any member: reads need no leader).
pub fn central(command: &[&str]) -> anyhow::Result<String> {
    let pod = kubectl::ready_pod("ovn-central", None)?;
    kubectl::exec(&pod.name, CENTRAL_CONTAINER, command)
}

/// `ovn-nbctl --no-leader-only --format=json <args>` in ovn-central.
pub fn nbctl_json(args: &[&str]) -> anyhow::Result<String> {
    let mut all = vec!["ovn-nbctl", "--no-leader-only", "--format=json"];
    all.extend_from_slice(args);
    central(&all)
}

/// Runs `command` in the ready ovs-ovn pod of `node`.
pub fn ovs(node: &str, command: &[&str]) -> anyhow::Result<String> {
    let pod = kubectl::ready_pod("ovs", Some(node))?;
    kubectl::exec(&pod.name, OVS_CONTAINER, command)
}

/// An annotation of an object's JSON, empty when absent.
pub fn annotation<'a>(object: &'a Value, key: &str) -> &'a str {
    object["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_default()
}

/// How [`exec_within`]'s error for a command that took too long begins.
pub const NO_ANSWER: &str = "no answer";

/// Runs `command` in a container of a pod like [`kubectl::exec`], but gives up (and ends the
/// kubectl it started) after `limit`: a node whose network is down (e.g. its uplink on an OVS
/// bridge whose ovs-vswitchd is stopped) leaves `kubectl exec` waiting ~30 s for the API server's
/// dial to the kubelet, and `diagnose` must still answer promptly.
pub fn exec_within(
    pod: &str,
    container: &str,
    command: &[&str],
    limit: std::time::Duration,
) -> anyhow::Result<String> {
    use std::io::Read;
    use std::process::{Command, Stdio};

    let ns = kubectl::namespace();
    let args = kubectl::exec_args(&ns, pod, container, command);
    let program = std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into());
    let mut child = Command::new(&program)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {program} {}", args.join(" ")))?;
    // Read both pipes meanwhile: a large output must not fill a pipe and stall the child.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_string(&mut text);
            }
            text
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "{NO_ANSWER} within {} s from pod {pod} (is its node reachable?)",
                limit.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (stdout, stderr) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
    if !status.success() {
        bail!(
            "{program} {} failed ({status}): {}",
            args.join(" "),
            stderr.trim()
        );
    }
    Ok(stdout)
}
