//! `kubectl ko log kube-ovn|ovn|ovs|linux|all [--dir kubectl-ko-log]`: collect logs and node
//! state into a folder, one sub-folder per node, as Kube-OVN's plugin lays it out
//! (`kubectl-ko-log/<node>/{kube-ovn,ovn,openvswitch,linux}/`).
//!
//! Where ours differ: our components log to their standard output (no `/var/log/kube-ovn`), so
//! `kube-ovn` is each pod's `kubectl logs` (and the previous container's, after a restart):
//! kube-ovn-controller, kube-ovn-cni, kube-ovn-speaker, kube-ovn-pinger, kube-ovn-monitor, each
//! under the node it runs on. `ovn` and `ovs` copy `/var/log/ovn` and `/var/log/openvswitch`
//! out of each node's ovs-ovn pod (the node's directories, ovn-central's logs included on its
//! nodes). `linux` runs read-only commands in each node's kube-ovn-cni pod (host network and
//! PID): the same files as Kube-OVN's where our image has the tool, `nftables` in place of the
//! iptables dumps (our dataplane is nftables), `sockets` (ss) in place of netstat.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::Value;

use crate::kubectl;
use crate::node_tools::{OVS_APP, OVS_CONTAINER};

/// Arguments of `kubectl ko log`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kubectl ko log all\n  kubectl ko log kube-ovn --dir /tmp/ko-logs\n\nLayout: <dir>/<node>/kube-ovn/<pod>.log, <dir>/<node>/ovn/, <dir>/<node>/openvswitch/,\n<dir>/<node>/linux/<what>.log"
)]
pub struct LogArgs {
    /// What to collect.
    #[arg(value_enum)]
    pub component: Component,
    /// The folder to write (created; files already there are overwritten).
    #[arg(long, env = "KO_LOG_DIR", default_value = "kubectl-ko-log")]
    pub dir: PathBuf,
}

/// Kube-OVN's components of `log`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Component {
    KubeOvn,
    Ovn,
    Ovs,
    Linux,
    All,
}

/// The pods whose standard output is `kube-ovn`'s logs, by `app` label.
pub const KUBE_OVN_APPS: [&str; 5] = [
    "kube-ovn-controller",
    "kube-ovn-cni",
    "kube-ovn-speaker",
    "kube-ovn-pinger",
    "kube-ovn-monitor",
];

/// `linux`: file name and the shell command writing it (run by `sh -c` in kube-ovn-cni).
pub const LINUX: [(&str, &str); 12] = [
    ("dmesg", "dmesg -T"),
    ("nftables", "nft list ruleset"),
    ("route", "ip -4 route show table all; ip -6 route show table all"),
    ("rule", "ip -4 rule; ip -6 rule"),
    ("link", "ip -d -s link show"),
    ("neigh", "ip -4 neigh; ip -6 neigh"),
    ("addr", "ip addr show"),
    (
        "xfrm",
        "echo '*** policy'; ip xfrm policy; echo '*** state'; ip xfrm state",
    ),
    ("memory", "free -m"),
    ("top", "top -b -n 1"),
    ("sysctl", "sysctl -a"),
    (
        "sockets",
        "ss -tunlp; echo '*** /proc/net/sockstat'; cat /proc/net/sockstat",
    ),
];

/// A pod whose logs are collected: name, node, and its containers with their restart counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogPod {
    pub name: String,
    pub node: String,
    pub containers: Vec<(String, u64)>,
}

/// The pods of a list with their containers (pure).
pub fn log_pods(list: &Value) -> Vec<LogPod> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pod| {
            let restarts = |container: &str| {
                pod["status"]["containerStatuses"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|s| s["name"] == container)
                    .and_then(|s| s["restartCount"].as_u64())
                    .unwrap_or(0)
            };
            Some(LogPod {
                name: pod["metadata"]["name"].as_str()?.to_owned(),
                node: pod["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or("unscheduled")
                    .to_owned(),
                containers: pod["spec"]["containers"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["name"].as_str())
                    .map(|c| (c.to_owned(), restarts(c)))
                    .collect(),
            })
        })
        .collect()
}

/// The `kubectl logs` runs for a pod: (file name, arguments) — each container's log, and the
/// previous container's when it restarted.
pub fn logs_commands(namespace: &str, pod: &LogPod) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (container, restarts) in &pod.containers {
        let base = vec![
            "logs".to_owned(),
            "-n".to_owned(),
            namespace.to_owned(),
            pod.name.clone(),
            "-c".to_owned(),
            container.clone(),
            "--timestamps".to_owned(),
        ];
        let file = if pod.containers.len() == 1 {
            pod.name.clone()
        } else {
            format!("{}.{container}", pod.name)
        };
        if *restarts > 0 {
            let mut previous = base.clone();
            previous.push("--previous".to_owned());
            out.push((format!("{file}.previous.log"), previous));
        }
        out.push((format!("{file}.log"), base));
    }
    out
}

/// `kubectl cp` of a directory of a node's ovs-ovn pod into `<dir>/<node>/<name>`.
pub fn copy_command(namespace: &str, pod: &str, from: &str, to: &Path) -> Vec<String> {
    vec![
        "cp".to_owned(),
        "-n".to_owned(),
        namespace.to_owned(),
        "-c".to_owned(),
        OVS_CONTAINER.to_owned(),
        format!("{pod}:{from}"),
        to.display().to_string(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn mkdir(path: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))
}

fn pods_of(app: &str) -> anyhow::Result<Vec<LogPod>> {
    Ok(log_pods(&kubectl::json(&[
        "get",
        "pods",
        "-n",
        &kubectl::namespace(),
        "-l",
        &format!("app={app}"),
    ])?))
}

/// A failure to collect one thing is reported and the rest still collected.
fn note(failures: &mut usize, what: &str, result: anyhow::Result<()>) {
    if let Err(e) = result {
        *failures += 1;
        eprintln!("kubectl ko log: {what}: {e:#}");
    }
}

pub fn run(args: &LogArgs) -> anyhow::Result<ExitCode> {
    let ns = kubectl::namespace();
    let wanted = |c: Component| args.component == c || args.component == Component::All;
    let mut failures = 0;
    mkdir(&args.dir)?;
    if wanted(Component::KubeOvn) {
        println!("Collecting kube-ovn logs");
        for app in KUBE_OVN_APPS {
            for pod in pods_of(app)? {
                let dir = args.dir.join(&pod.node).join("kube-ovn");
                mkdir(&dir)?;
                for (file, argv) in logs_commands(&ns, &pod) {
                    let result = kubectl::output_to_file(&strs(&argv), &dir.join(&file));
                    note(&mut failures, &format!("logs of {}", pod.name), result);
                }
            }
        }
    }
    for (component, from, name) in [
        (Component::Ovn, "/var/log/ovn", "ovn"),
        (Component::Ovs, "/var/log/openvswitch", "openvswitch"),
    ] {
        if !wanted(component) {
            continue;
        }
        println!("Collecting {name} logs");
        for pod in pods_of(OVS_APP)? {
            let dir = args.dir.join(&pod.node).join(name);
            mkdir(&dir)?;
            let argv = copy_command(&ns, &pod.name, from, &dir);
            let result = kubectl::output(&strs(&argv)).map(drop);
            note(&mut failures, &format!("{from} of {}", pod.name), result);
        }
    }
    if wanted(Component::Linux) {
        println!("Collecting linux state");
        for pod in pods_of("kube-ovn-cni")? {
            let dir = args.dir.join(&pod.node).join("linux");
            mkdir(&dir)?;
            for (file, script) in LINUX {
                let argv = kubectl::exec_args(&ns, &pod.name, "cni-server", &["sh", "-c", script]);
                let result = kubectl::output_to_file(&argv, &dir.join(format!("{file}.log")));
                note(&mut failures, &format!("{file} on {}", pod.node), result);
            }
        }
    }
    println!(
        "Collected files have been saved in the directory {}",
        args.dir.display()
    );
    Ok(if failures == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("kubectl ko log: {failures} item(s) could not be collected (above)");
        ExitCode::FAILURE
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_container_and_the_previous_one_after_a_restart() {
        let list = json!({"items": [
            {"metadata": {"name": "kube-ovn-cni-x"}, "spec": {"nodeName": "n1", "containers": [{"name": "cni-server"}]},
             "status": {"containerStatuses": [{"name": "cni-server", "restartCount": 2}]}},
            {"metadata": {"name": "two"}, "spec": {"nodeName": "n2", "containers": [{"name": "a"}, {"name": "b"}]},
             "status": {}}
        ]});
        let pods = log_pods(&list);
        assert_eq!(pods[0].containers, [("cni-server".to_owned(), 2)]);
        let runs = logs_commands("kube-system", &pods[0]);
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].0, "kube-ovn-cni-x.previous.log");
        assert_eq!(
            strs(&runs[0].1),
            [
                "logs",
                "-n",
                "kube-system",
                "kube-ovn-cni-x",
                "-c",
                "cni-server",
                "--timestamps",
                "--previous"
            ]
        );
        assert_eq!(runs[1].0, "kube-ovn-cni-x.log");
        let names: Vec<String> = logs_commands("kube-system", &pods[1])
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(names, ["two.a.log", "two.b.log"]);
    }

    #[test]
    fn ovn_and_ovs_logs_are_copied_from_the_nodes_ovs_pod() {
        let argv = copy_command(
            "kube-system",
            "ovs-ovn-x",
            "/var/log/ovn",
            Path::new("kubectl-ko-log/n1/ovn"),
        );
        assert_eq!(
            strs(&argv),
            [
                "cp",
                "-n",
                "kube-system",
                "-c",
                "openvswitch",
                "ovs-ovn-x:/var/log/ovn",
                "kubectl-ko-log/n1/ovn"
            ]
        );
    }

    #[test]
    fn linux_files_have_distinct_names() {
        let mut names: Vec<&str> = LINUX.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), LINUX.len());
    }
}
