//! How `kubectl ko` reaches the cluster: through the `kubectl` on the PATH (a plugin's own
//! kubectl, as Kube-OVN's plugin does), so the user's kubeconfig, `--context` and credentials
//! apply unchanged. Pods are found by the labels of `deploy/` (the same as Kube-OVN's
//! manifests): `app=ovn-central`, `app=ovs`, `app=kube-ovn-cni`, `app=kube-ovn-speaker`,
//! `app=kube-ovn-pinger`, `app=kube-ovn-monitor`, in the namespace `KUBE_OVN_NS` (kube-system).

use std::process::{Command, ExitStatus, Stdio};

use anyhow::{Context, bail};
use serde_json::Value;

/// The namespace kube-ovn-rs runs in (Kube-OVN's plugin reads `KUBE_OVN_NS` too).
pub fn namespace() -> String {
    std::env::var("KUBE_OVN_NS").unwrap_or_else(|_| "kube-system".into())
}

/// The kubectl program: `KUBECTL` when set (tests, a kubectl not on the PATH), else `kubectl`.
fn program() -> String {
    std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into())
}

/// Runs kubectl with `args` and returns its standard output; a failure carries its stderr.
pub fn output(args: &[&str]) -> anyhow::Result<String> {
    let out = checked(args, Stdio::piped())?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs kubectl with `args`, standard output to `stdout`, stderr captured; fails with that
/// stderr when kubectl does.
fn checked(args: &[&str], stdout: Stdio) -> anyhow::Result<std::process::Output> {
    let out = Command::new(program())
        .args(args)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("running {} {}", program(), args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "{} {} failed ({}): {}",
            program(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out)
}

/// Runs kubectl with `args` attached to this terminal (stdin, stdout, stderr), as an
/// interactive verb does (`nbctl`, `vsctl`, `tcpdump`), and returns its exit status.
pub fn attached(args: &[&str]) -> anyhow::Result<ExitStatus> {
    Command::new(program())
        .args(args)
        .status()
        .with_context(|| format!("running {} {}", program(), args.join(" ")))
}

/// kubectl's JSON for `args` (`-o json` is added).
pub fn json(args: &[&str]) -> anyhow::Result<Value> {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = output(&all)?;
    serde_json::from_str(&text).with_context(|| format!("kubectl {}: not JSON", args.join(" ")))
}

/// A pod of one of our components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ComponentPod {
    pub name: String,
    pub node: String,
    /// Running with every container ready.
    pub ready: bool,
    /// Its containers' restarts, summed.
    pub restarts: u64,
}

/// The pods labelled `app=<app>` in our namespace, from `kubectl get pods -o json`'s items.
pub fn component_pods(app: &str) -> anyhow::Result<Vec<ComponentPod>> {
    let list = json(&["get", "pods", "-n", &namespace(), "-l", &format!("app={app}")])?;
    Ok(parse_pods(&list))
}

/// The pods of a pod list (pure, for tests).
pub fn parse_pods(list: &Value) -> Vec<ComponentPod> {
    let items = list["items"].as_array().cloned().unwrap_or_default();
    items
        .iter()
        .map(|pod| {
            let statuses = pod["status"]["containerStatuses"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            ComponentPod {
                name: pod["metadata"]["name"].as_str().unwrap_or_default().to_owned(),
                node: pod["spec"]["nodeName"].as_str().unwrap_or_default().to_owned(),
                ready: pod["status"]["phase"] == "Running"
                    && !statuses.is_empty()
                    && statuses.iter().all(|s| s["ready"] == true),
                restarts: statuses.iter().filter_map(|s| s["restartCount"].as_u64()).sum(),
            }
        })
        .collect()
}

/// A running, ready pod labelled `app=<app>`; with `node`, the one on that node.
pub fn ready_pod(app: &str, node: Option<&str>) -> anyhow::Result<ComponentPod> {
    let pods = component_pods(app)?;
    let found = pods
        .iter()
        .filter(|p| node.is_none_or(|n| p.node == n))
        .find(|p| p.ready)
        .cloned();
    match (found, node) {
        (Some(pod), _) => Ok(pod),
        (None, Some(node)) => bail!(
            "no ready pod with app={app} on node {node} in namespace {} (pods: {})",
            namespace(),
            describe(&pods)
        ),
        (None, None) => bail!(
            "no ready pod with app={app} in namespace {} (pods: {})",
            namespace(),
            describe(&pods)
        ),
    }
}

fn describe(pods: &[ComponentPod]) -> String {
    if pods.is_empty() {
        return "none".into();
    }
    pods.iter()
        .map(|p| {
            format!(
                "{} on {}{}",
                p.name,
                p.node,
                if p.ready { "" } else { " (not ready)" }
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `kubectl exec -n <ns> <pod> -c <container> -- <command…>`'s arguments.
pub fn exec_args<'a>(
    namespace: &'a str,
    pod: &'a str,
    container: &'a str,
    command: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec!["exec", "-n", namespace, pod, "-c", container, "--"];
    args.extend_from_slice(command);
    args
}

/// Runs `command` in a container of a pod and returns its output.
pub fn exec(pod: &str, container: &str, command: &[&str]) -> anyhow::Result<String> {
    let ns = namespace();
    output(&exec_args(&ns, pod, container, command))
}

/// Runs `command` in a container of a pod, attached to this terminal.
pub fn exec_attached(pod: &str, container: &str, command: &[&str]) -> anyhow::Result<ExitStatus> {
    let ns = namespace();
    let mut args = vec!["exec"];
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        args.push("-it");
    }
    let rest = exec_args(&ns, pod, container, command);
    args.extend_from_slice(&rest[1..]);
    attached(&args)
}

/// The exit code of a kubectl run, for a verb that passes it on (`nbctl`, `vsctl`, `tcpdump`):
/// a signal or a code beyond 255 is a plain failure.
pub fn exit_code(status: ExitStatus) -> std::process::ExitCode {
    status
        .code()
        .and_then(|c| u8::try_from(c).ok())
        .map_or(std::process::ExitCode::FAILURE, std::process::ExitCode::from)
}

/// Runs kubectl with `args`, its standard output written to `path` (a log collected by
/// `kubectl ko log`); a failure carries its stderr.
pub fn output_to_file(args: &[&str], path: &std::path::Path) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    checked(args, file.into()).map(drop)
}

/// The pod labelled `app=<app>` on `node` to exec into: a ready one, else any that is there (a
/// verb such as `vsctl` is most wanted when the pod is not ready).
pub fn pod_on_node(app: &str, node: &str) -> anyhow::Result<ComponentPod> {
    let pods = component_pods(app)?;
    pick_on_node(&pods, node).cloned().ok_or_else(|| {
        anyhow::anyhow!(
            "no pod with app={app} on node {node} in namespace {} (pods: {})",
            namespace(),
            describe(&pods)
        )
    })
}

/// A ready pod on `node`, else any pod there (pure, for tests).
pub fn pick_on_node<'a>(pods: &'a [ComponentPod], node: &str) -> Option<&'a ComponentPod> {
    let mut on_node = pods.iter().filter(|p| p.node == node);
    pods.iter()
        .find(|p| p.node == node && p.ready)
        .or_else(|| on_node.next())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pods_are_ready_only_when_running_with_every_container_ready() {
        let list = json!({"items": [
            {"metadata": {"name": "a"}, "spec": {"nodeName": "n1"},
             "status": {"phase": "Running", "containerStatuses": [{"ready": true}, {"ready": true}]}},
            {"metadata": {"name": "b"}, "spec": {"nodeName": "n2"},
             "status": {"phase": "Running", "containerStatuses": [{"ready": true}, {"ready": false}]}},
            {"metadata": {"name": "c"}, "spec": {"nodeName": "n3"}, "status": {"phase": "Pending"}}
        ]});
        let pods = parse_pods(&list);
        assert_eq!(
            pods.iter()
                .map(|p| (p.name.as_str(), p.node.as_str(), p.ready))
                .collect::<Vec<_>>(),
            vec![("a", "n1", true), ("b", "n2", false), ("c", "n3", false)]
        );
    }

    #[test]
    fn a_node_pod_is_the_ready_one_else_any_there() {
        let pod = |name: &str, node: &str, ready| ComponentPod {
            name: name.into(),
            node: node.into(),
            ready,
            restarts: 0,
        };
        let pods = [
            pod("old", "n1", false),
            pod("new", "n1", true),
            pod("x", "n2", false),
        ];
        assert_eq!(pick_on_node(&pods, "n1").map(|p| p.name.as_str()), Some("new"));
        assert_eq!(pick_on_node(&pods, "n2").map(|p| p.name.as_str()), Some("x"));
        assert_eq!(pick_on_node(&pods, "n3"), None);
    }

    #[test]
    fn exec_runs_the_command_after_a_double_dash_in_the_container() {
        assert_eq!(
            exec_args("kube-system", "ovs-ovn-x", "openvswitch", &["ovs-vsctl", "show"]),
            [
                "exec",
                "-n",
                "kube-system",
                "ovs-ovn-x",
                "-c",
                "openvswitch",
                "--",
                "ovs-vsctl",
                "show"
            ]
        );
    }
}
