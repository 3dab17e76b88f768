//! `kubectl ko tcpdump <namespace/pod> [tcpdump options]`: capture a pod's traffic on its node,
//! as Kube-OVN's plugin does. A host-network pod is captured in the node's ovs-ovn pod (host
//! network). Any other pod: its OVS interface (`external_ids:iface-id=<pod>.<namespace>`, the
//! node daemon's) gives the pod's network namespace (`external_ids:pod_netns`, the runtime's
//! path), and tcpdump runs inside it from the node's kube-ovn-cni pod (privileged, host PID,
//! the host's `/var/run/netns`): on `eth0`, or on the OVS interface itself for an
//! `ovn.kubernetes.io/pod_nic_type: internal-port` pod, whose port lives in the pod.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::kubectl;
use crate::node_tools::{OVS_APP, OVS_CONTAINER};

/// The kube-ovn-cni DaemonSet's pod label value and container.
const CNI_APP: &str = "kube-ovn-cni";
const CNI_CONTAINER: &str = "cni-server";

/// Arguments of `kubectl ko tcpdump`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kubectl ko tcpdump default/web-0 -c 10 icmp\n  kubectl ko tcpdump web-0 port 80   (namespace default)\n\nThe image runs tcpdump with -nn; more options follow the pod."
)]
pub struct TcpdumpArgs {
    /// The pod, `namespace/name` (a bare name is in `default`).
    pub pod: String,
    /// tcpdump options and filter, passed on unchanged.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// `namespace/name`, or `name` in `default` (Kube-OVN's reading).
pub fn split_pod(text: &str) -> (String, String) {
    match text.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => ("default".to_owned(), text.to_owned()),
    }
}

/// What tcpdump needs to know of the pod (from its JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub node: String,
    pub host_network: bool,
    pub internal_port: bool,
}

/// The pod's facts; an error when it is not scheduled.
pub fn pod_facts(pod: &Value, shown: &str) -> anyhow::Result<PodFacts> {
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if node.is_empty() {
        bail!("pod {shown} is not on any node (spec.nodeName is empty)");
    }
    Ok(PodFacts {
        node: node.to_owned(),
        host_network: pod["spec"]["hostNetwork"] == true,
        internal_port: pod["metadata"]["annotations"]["ovn.kubernetes.io/pod_nic_type"] == "internal-port",
    })
}

/// The ovs-vsctl command that names the pod's OVS interface.
pub fn find_interface_command(namespace: &str, name: &str) -> Vec<String> {
    let mut argv: Vec<String> = [
        "ovs-vsctl",
        "--data=bare",
        "--no-heading",
        "--columns=name",
        "find",
        "interface",
    ]
    .map(str::to_owned)
    .to_vec();
    argv.push(format!("external-ids:iface-id={name}.{namespace}"));
    argv
}

/// The ovs-vsctl command that gives an interface's pod network namespace.
pub fn netns_command(interface: &str) -> Vec<String> {
    [
        "ovs-vsctl",
        "--data=bare",
        "--no-heading",
        "get",
        "interface",
        interface,
        "external-ids:pod_netns",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The capture command: in the node's network (host-network pod, run in ovs-ovn) or in the
/// pod's namespace (`Some(netns)`, run in kube-ovn-cni) on `interface`.
pub fn capture_command(netns: Option<&str>, interface: &str, args: &[String]) -> Vec<String> {
    let mut argv = Vec::new();
    if let Some(netns) = netns {
        argv.extend(["nsenter".to_owned(), format!("--net={netns}")]);
    }
    argv.extend(["tcpdump".to_owned(), "-nn".to_owned()]);
    if netns.is_some() {
        argv.extend(["-i".to_owned(), interface.to_owned()]);
    }
    argv.extend(args.iter().cloned());
    argv
}

/// One value from `ovs-vsctl --data=bare` (trimmed, unquoted).
pub fn bare_value(text: &str) -> String {
    text.trim().trim_matches('"').to_owned()
}

fn as_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

pub fn run(args: &TcpdumpArgs) -> anyhow::Result<ExitCode> {
    let (namespace, name) = split_pod(&args.pod);
    let shown = format!("{namespace}/{name}");
    let pod = kubectl::json(&["get", "pod", "-n", &namespace, &name])?;
    let facts = pod_facts(&pod, &shown)?;
    let ovs = kubectl::pod_on_node(OVS_APP, &facts.node)?;
    if facts.host_network {
        let argv = capture_command(None, "", &args.args);
        eprintln!("+ tcpdump in {} (node {}, host network)", ovs.name, facts.node);
        return Ok(kubectl::exit_code(kubectl::exec_attached(
            &ovs.name,
            OVS_CONTAINER,
            &as_strs(&argv),
        )?));
    }
    let interface = bare_value(&kubectl::exec(
        &ovs.name,
        OVS_CONTAINER,
        &as_strs(&find_interface_command(&namespace, &name)),
    )?);
    if interface.is_empty() {
        bail!(
            "pod {shown}: no OVS interface with external_ids:iface-id={name}.{namespace} on node {} (is it running on our network?)",
            facts.node
        );
    }
    let netns = bare_value(
        &kubectl::exec(&ovs.name, OVS_CONTAINER, &as_strs(&netns_command(&interface)))
            .with_context(|| format!("pod {shown}: the network namespace of interface {interface}"))?,
    );
    let cni = kubectl::pod_on_node(CNI_APP, &facts.node)?;
    let inside = if facts.internal_port {
        interface.as_str()
    } else {
        "eth0"
    };
    let argv = capture_command(Some(&netns), inside, &args.args);
    eprintln!("+ {} in {} (node {})", argv.join(" "), cni.name, facts.node);
    Ok(kubectl::exit_code(kubectl::exec_attached(
        &cni.name,
        CNI_CONTAINER,
        &as_strs(&argv),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bare_pod_name_is_in_default() {
        assert_eq!(
            split_pod("kube-system/coredns-1"),
            ("kube-system".into(), "coredns-1".into())
        );
        assert_eq!(split_pod("web-0"), ("default".into(), "web-0".into()));
    }

    #[test]
    fn facts_of_a_pod() {
        let pod = json!({"metadata": {"annotations": {"ovn.kubernetes.io/pod_nic_type": "internal-port"}},
                         "spec": {"nodeName": "n1"}});
        assert_eq!(
            pod_facts(&pod, "a/b").unwrap(),
            PodFacts {
                node: "n1".into(),
                host_network: false,
                internal_port: true
            }
        );
        let host = json!({"metadata": {}, "spec": {"nodeName": "n2", "hostNetwork": true}});
        assert!(pod_facts(&host, "a/h").unwrap().host_network);
        let pending = json!({"metadata": {}, "spec": {}});
        let err = pod_facts(&pending, "a/p").unwrap_err().to_string();
        assert!(err.contains("pod a/p is not on any node"), "{err}");
    }

    #[test]
    fn the_interface_is_found_by_the_logical_port_name() {
        assert_eq!(
            find_interface_command("default", "web-0")
                .last()
                .map(String::as_str),
            Some("external-ids:iface-id=web-0.default")
        );
        assert_eq!(netns_command("abc_h")[5], "abc_h");
        assert_eq!(bare_value("\"/var/run/netns/cni-1\"\r\n"), "/var/run/netns/cni-1");
    }

    #[test]
    fn capture_in_the_pods_namespace_or_the_nodes() {
        let args = vec!["-c".to_owned(), "3".to_owned(), "icmp".to_owned()];
        assert_eq!(
            capture_command(Some("/var/run/netns/cni-1"), "eth0", &args),
            [
                "nsenter",
                "--net=/var/run/netns/cni-1",
                "tcpdump",
                "-nn",
                "-i",
                "eth0",
                "-c",
                "3",
                "icmp"
            ]
        );
        assert_eq!(
            capture_command(None, "", &args),
            ["tcpdump", "-nn", "-c", "3", "icmp"]
        );
    }
}
