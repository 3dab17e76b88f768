//! `kube-ovn-lab`: the whole system on one machine (`up`, `status`, `down` and the verbs that
//! poke at it), and the pieces it runs (`apiserver`: upstream etcd + kube-apiserver, `agent`,
//! `netexec`).

mod apiserver;
mod containerd;
mod down;
mod failover;
mod install;
mod matrix;
mod matrix_nat;
mod matrix_services;
mod matrix_tor;
mod prepare;
mod probe;
mod processes;
mod raft;
mod record;
mod status;
mod up;
mod up_args;
mod verbs;
mod vlan_fabric;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use kube_ovn_lab::cluster::topology::TorKind;

#[derive(Parser)]
#[command(
    version,
    about = "The kube-ovn-rs lab: the whole system on one machine, in network namespaces (test and lab infrastructure, not for production)"
)]
struct Cli {
    /// The lab's name: part of every namespace it makes, so labs (and tests) can coexist.
    #[arg(long, global = true, env = "KUBE_OVN_LAB_NAME", default_value = "lab")]
    name: String,
    /// Where labs keep their state, logs and sockets (one directory per lab). Not under /run:
    /// the ToR's daemons see a /run of their own.
    #[arg(
        long = "labs-dir",
        global = true,
        env = "KUBE_OVN_LAB_DIR",
        default_value = "/var/lib/kube-ovn-lab"
    )]
    run_dir: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Bring a lab up: namespaces, OVN, the controller, N nodes with their daemons and
    /// speakers, a BGP ToR, an outside host; apply the examples; print a connectivity matrix.
    Up(up_args::UpArgs),
    /// Say which components run and which are unhealthy, and why.
    Status,
    /// Remove everything the lab made (processes by PID, namespaces, its directory).
    Down,
    /// Run the connectivity matrix again and print it.
    Matrix,
    /// Move a VPC's external gateway off its node and back (label removed, restored) while the
    /// outside host requests an EIP; print how long the ToR's route and the requests took.
    Failover(failover::FailoverArgs),
    /// kubectl against the lab's API.
    #[command(allow_hyphen_values = true, trailing_var_arg = true)]
    Kubectl { args: Vec<String> },
    /// A command in a pod's network namespace: `exec NAMESPACE/POD -- CMD…`.
    Exec {
        pod: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A command on a node (its namespace, its OVS/OVN sockets): `node node1 -- ovs-vsctl show`.
    Node {
        node: String,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A command on the ToR: `tor -- birdc show route` (or `vtysh -c 'show ip route'`).
    Tor {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A command on the outside host: `outside -- curl http://<pod ip>/hostname`.
    Outside {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A command in the control plane (its OVN sockets): `cp -- ovn-nbctl show`.
    Cp {
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// A component's log (`controller`, `agent`, `kube-apiserver`, `node1-daemon`, `tor-bird`, …;
    /// with no name, the list).
    Logs { component: Option<String> },
    /// Run upstream etcd and kube-apiserver (our CRDs served) until SIGTERM; write an
    /// administrator's kubeconfig.
    Apiserver(apiserver::ApiserverArgs),
    /// The lab's kubelet stand-ins and LoadBalancer IP allocator (run by `up`).
    Agent(AgentArgs),
    /// The server behind the image `kube-ovn-lab/netexec` (as agnhost's `netexec`).
    Netexec(NetexecArgs),
}

#[derive(clap::Args)]
struct AgentArgs {
    /// The lab's API (a kubeconfig written by `up`).
    #[arg(long, env = "KUBECONFIG")]
    kubeconfig: PathBuf,
    /// Which runtime the kubelets make pods with (`up --runtime` starts the agent with it).
    #[arg(long, env = "KUBE_OVN_LAB_RUNTIME", value_enum, default_value = "direct")]
    runtime: containerd::RuntimeArg,
    /// No kubelet stand-ins (the nodes run real kubelets: `up --install manifests`).
    #[arg(long, env = "KUBE_OVN_LAB_NO_KUBELETS")]
    no_kubelets: bool,
}

#[derive(clap::Args)]
struct NetexecArgs {
    /// What `/hostname` answers [default: the system's hostname, in a pod the pod's name].
    #[arg(long, env = "NETEXEC_HOSTNAME")]
    hostname: Option<String>,
    /// TCP ports to serve HTTP on (repeat or comma-separate).
    #[arg(
        long = "http-port",
        env = "NETEXEC_HTTP_PORTS",
        value_delimiter = ',',
        default_value = "8080"
    )]
    http_ports: Vec<u16>,
    /// UDP ports to answer on.
    #[arg(long = "udp-port", env = "NETEXEC_UDP_PORTS", value_delimiter = ',')]
    udp_ports: Vec<u16>,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Apiserver(args) => runtime().and_then(|rt| rt.block_on(apiserver::run(args))),
        Command::Agent(args) => runtime().and_then(|rt| rt.block_on(agent(&cli.name, &cli.run_dir, args))),
        Command::Netexec(args) => runtime().and_then(|rt| rt.block_on(netexec(args))),
        Command::Up(args) => up::up(&cli.name, &cli.run_dir, &args),
        Command::Status => status::status(&cli.name, &cli.run_dir),
        Command::Down => down::down(&cli.name, &cli.run_dir),
        Command::Matrix => matrix::run_verb(&cli.name, &cli.run_dir),
        Command::Failover(args) => failover::run_verb(&cli.name, &cli.run_dir, &args),
        Command::Kubectl { args } => verbs::kubectl(&cli.name, &cli.run_dir, &args),
        Command::Exec { pod, command } => verbs::exec_pod(&cli.name, &cli.run_dir, &pod, &command),
        Command::Node { node, command } => verbs::node(&cli.name, &cli.run_dir, &node, &command),
        Command::Tor { command } => verbs::tor(&cli.name, &cli.run_dir, &command),
        Command::Outside { command } => verbs::outside(&cli.name, &cli.run_dir, &command),
        Command::Cp { command } => verbs::cp(&cli.name, &cli.run_dir, &command),
        Command::Logs { component } => verbs::logs(&cli.name, &cli.run_dir, component.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kube-ovn-lab: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

fn init_logs() {
    kube_ovn_support::init_json_logs();
}

async fn agent(
    name: &str,
    run_dir: &std::path::Path,
    args: AgentArgs,
) -> anyhow::Result<std::process::ExitCode> {
    init_logs();
    let topology = verbs::topology_of(name, run_dir)?;
    let client = kube_ovn_support::kube_client(Some(&args.kubeconfig)).await?;
    let mut config = kube_ovn_lab::agent::AgentConfig::for_lab(&topology);
    if args.runtime == containerd::RuntimeArg::Containerd {
        config = config.with_containerd(&topology);
    }
    if args.no_kubelets {
        config.kubelets.clear();
    }
    tokio::select! {
        r = kube_ovn_lab::agent::run(client, config) => r?,
        () = kube_ovn_support::shutdown_signal()? => {}
    }
    Ok(std::process::ExitCode::SUCCESS)
}

async fn netexec(args: NetexecArgs) -> anyhow::Result<std::process::ExitCode> {
    init_logs();
    let config = kube_ovn_lab::netexec::NetexecConfig {
        hostname: args
            .hostname
            .unwrap_or_else(kube_ovn_lab::netexec::system_hostname),
        http_ports: args.http_ports,
        udp_ports: args.udp_ports,
        address: std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    };
    tokio::select! {
        r = kube_ovn_lab::netexec::run(config) => r?,
        () = kube_ovn_support::shutdown_signal()? => {}
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Which ToR a new lab gets.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum TorArg {
    Bird,
    Frr,
}

impl From<TorArg> for TorKind {
    fn from(t: TorArg) -> Self {
        match t {
            TorArg::Bird => TorKind::Bird,
            TorArg::Frr => TorKind::Frr,
        }
    }
}
