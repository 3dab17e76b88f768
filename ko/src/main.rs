//! `kubectl ko`: Kube-OVN's kubectl plugin (`dist/images/kubectl-ko`), for clusters running
//! kube-ovn-rs from `deploy/`. Same verbs and argument shapes as Kube-OVN's, plus `ko bgp`.
//! Installed as a binary named `kubectl-ko` on the PATH, kubectl runs it for `kubectl ko …`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bgp;
mod cluster_status;
mod complete;
mod completion;
mod db;
mod diagnose;
mod env_check;
mod kubectl;
mod log;
mod node_tools;
mod reload;
mod tcpdump;
mod trace;

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-ko",
    bin_name = "kubectl ko",
    version,
    about = "Kube-OVN's kubectl plugin verbs for kube-ovn-rs"
)]
struct Cli {
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, Subcommand)]
enum Verb {
    /// ovn-nbctl in the ovn-central pod of the northbound database's RAFT leader.
    Nbctl(db::CtlArgs),
    /// ovn-sbctl in the ovn-central pod of the southbound database's RAFT leader.
    Sbctl(db::CtlArgs),
    /// Northbound database: status, kick, backup, dbstatus (restore: see its --help).
    Nb(db::DbArgs),
    /// Southbound database: status, kick, backup, dbstatus.
    Sb(db::DbArgs),
    /// ovs-vsctl in the ovs-ovn pod of a node.
    Vsctl(node_tools::NodeToolArgs),
    /// ovs-ofctl in the ovs-ovn pod of a node.
    Ofctl(node_tools::NodeToolArgs),
    /// ovs-dpctl in the ovs-ovn pod of a node.
    Dpctl(node_tools::NodeToolArgs),
    /// ovs-appctl in the ovs-ovn pod of a node.
    Appctl(node_tools::NodeToolArgs),
    /// tcpdump in a pod's network namespace (namespace/pod), from its node.
    Tcpdump(tcpdump::TcpdumpArgs),
    /// Trace a packet from a pod through OVN (ovn-trace) and OVS (ofproto/trace).
    Trace(trace::TraceArgs),
    /// Check the cluster's network: all, a node, a subnet, or targets from every pinger (IPPorts).
    Diagnose(diagnose::DiagnoseArgs),
    /// Check each node's environment (CNI files, sysctls, checksum errors, DNS, firewalls).
    EnvCheck(env_check::EnvCheckArgs),
    /// Collect logs (kube-ovn, ovn, ovs, linux or all) into ./kubectl-ko-log/<node>/.
    Log(log::LogArgs),
    /// Restart every component in order, each awaited (ovs-ovn node by node).
    Reload(reload::ReloadArgs),
    /// kube-ovn-rs: every speaker's BGP sessions and, per peer, the prefixes it advertises.
    Bgp(bgp::BgpArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completion(completion::CompletionArgs),
    /// The words of `kubectl ko <TAB>` for kubectl's plugin completion (`kubectl_complete-ko`).
    #[command(name = "__complete", hide = true)]
    Complete(complete::CompleteArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.verb {
        Verb::Nbctl(args) => db::ctl(db::Database::Northbound, &args),
        Verb::Sbctl(args) => db::ctl(db::Database::Southbound, &args),
        Verb::Nb(args) => db::db(db::Database::Northbound, &args),
        Verb::Sb(args) => db::db(db::Database::Southbound, &args),
        Verb::Vsctl(args) => node_tools::run(node_tools::Tool::Vsctl, &args),
        Verb::Ofctl(args) => node_tools::run(node_tools::Tool::Ofctl, &args),
        Verb::Dpctl(args) => node_tools::run(node_tools::Tool::Dpctl, &args),
        Verb::Appctl(args) => node_tools::run(node_tools::Tool::Appctl, &args),
        Verb::Tcpdump(args) => tcpdump::run(&args),
        Verb::Trace(args) => trace::run(&args),
        Verb::Diagnose(args) => diagnose::run(&args),
        Verb::EnvCheck(args) => env_check::run(&args),
        Verb::Log(args) => log::run(&args),
        Verb::Reload(args) => reload::run(&args),
        Verb::Bgp(args) => bgp::run(&args),
        Verb::Completion(args) => completion::run(&args),
        Verb::Complete(args) => Ok(complete::run(&args)),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kubectl ko: {e:#}");
            ExitCode::FAILURE
        }
    }
}
