//! `kubectl ko vsctl|ofctl|dpctl|appctl <node> …`: an Open vSwitch tool in the ovs-ovn pod
//! (`app=ovs`, container `openvswitch`) of a node, as Kube-OVN's plugin runs it. The pod's
//! `/run/openvswitch` is the node's, so the tools reach that node's ovsdb-server and
//! ovs-vswitchd by their default sockets.

use std::process::ExitCode;

use crate::kubectl;

/// The ovs-ovn DaemonSet's pod label value and container.
pub const OVS_APP: &str = "ovs";
pub const OVS_CONTAINER: &str = "openvswitch";

/// Arguments of `kubectl ko vsctl|ofctl|dpctl|appctl <node>`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kubectl ko vsctl node1 show\n  kubectl ko ofctl node1 dump-flows br-int table=0\n  kubectl ko dpctl node1 show\n  kubectl ko appctl node1 dpif/show"
)]
pub struct NodeToolArgs {
    /// The node (as `kubectl get nodes` names it).
    pub node: String,
    /// The tool's options and command, passed on unchanged.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// The OVS tool a verb runs.
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    Vsctl,
    Ofctl,
    Dpctl,
    Appctl,
}

impl Tool {
    fn program(self) -> &'static str {
        match self {
            Self::Vsctl => "ovs-vsctl",
            Self::Ofctl => "ovs-ofctl",
            Self::Dpctl => "ovs-dpctl",
            Self::Appctl => "ovs-appctl",
        }
    }
}

/// ovs-vswitchd's control socket as deploy/image/start-ovs.sh names it (`--unixctl`): not the
/// `ovs-vswitchd.<pid>.ctl` that `ovs-appctl` without `-t` looks for.
const VSWITCHD_CTL: &str = "/var/run/openvswitch/ovs-vswitchd.ctl";

/// The command run in the node's ovs-ovn pod. `appctl` without a target of its own goes to
/// ovs-vswitchd's socket (what `ovs-appctl` means without `-t`).
pub fn command(tool: Tool, args: &[String]) -> Vec<String> {
    let mut argv = vec![tool.program().to_owned()];
    let targeted = args
        .iter()
        .any(|a| a == "-t" || a.starts_with("--target") || (a.starts_with("-t") && !a.starts_with("--")));
    if matches!(tool, Tool::Appctl) && !targeted {
        argv.extend(["-t".to_owned(), VSWITCHD_CTL.to_owned()]);
    }
    argv.extend(args.iter().cloned());
    argv
}

pub fn run(tool: Tool, args: &NodeToolArgs) -> anyhow::Result<ExitCode> {
    // A mistyped node gets kubectl's own "nodes \"x\" not found", as Kube-OVN's plugin gives.
    kubectl::output(&["get", "node", &args.node, "-o", "name"])?;
    let pod = kubectl::pod_on_node(OVS_APP, &args.node)?;
    let argv = command(tool, &args.args);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Ok(kubectl::exit_code(kubectl::exec_attached(
        &pod.name,
        OVS_CONTAINER,
        &argv,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: NodeToolArgs,
    }

    #[test]
    fn the_node_comes_first_and_the_rest_goes_to_the_tool() {
        let cli = Cli::parse_from([
            "x",
            "node1",
            "dump-flows",
            "br-int",
            "--names",
            "-O",
            "OpenFlow13",
        ]);
        assert_eq!(cli.args.node, "node1");
        assert_eq!(
            command(Tool::Ofctl, &cli.args.args),
            ["ovs-ofctl", "dump-flows", "br-int", "--names", "-O", "OpenFlow13"]
        );
        assert_eq!(
            command(Tool::Appctl, &["dpif/show".into()]),
            [
                "ovs-appctl",
                "-t",
                "/var/run/openvswitch/ovs-vswitchd.ctl",
                "dpif/show"
            ]
        );
        let own = [
            "-t".to_owned(),
            "/run/ovn/ovnnb_db.ctl".to_owned(),
            "cluster/status".to_owned(),
        ];
        assert_eq!(command(Tool::Appctl, &own)[1..], own);
        let own = ["--target=ovsdb-server".to_owned(), "version".to_owned()];
        assert_eq!(command(Tool::Appctl, &own)[1..], own);
        assert_eq!(command(Tool::Dpctl, &["show".into()]), ["ovs-dpctl", "show"]);
        assert_eq!(command(Tool::Vsctl, &["show".into()]), ["ovs-vsctl", "show"]);
    }
}
