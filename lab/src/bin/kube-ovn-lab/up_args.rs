//! `kube-ovn-lab up`'s flags, apart from `up` so the modules that run its steps (`processes`)
//! take them without depending on `up`.

use std::path::PathBuf;
use std::time::Duration;

use kube_ovn_lab::cluster::state::Install;

use super::TorArg;
use super::containerd::RuntimeArg;

#[derive(clap::Args)]
pub struct UpArgs {
    /// How many nodes (`node1` … `nodeN`).
    #[arg(long, env = "KUBE_OVN_LAB_NODES", default_value_t = 2)]
    pub nodes: usize,
    /// The ToR's routing daemon.
    #[arg(long, env = "KUBE_OVN_LAB_TOR", value_enum, default_value = "bird")]
    pub tor: TorArg,
    /// Objects to apply once the lab runs (`kubectl apply -R -f`); default: the repository's
    /// `examples/lab`.
    #[arg(long, env = "KUBE_OVN_LAB_EXAMPLES")]
    pub examples: Option<PathBuf>,
    /// Apply no examples (an empty cluster).
    #[arg(long, env = "KUBE_OVN_LAB_NO_EXAMPLES", conflicts_with = "examples")]
    pub no_examples: bool,
    /// Where the binaries are (`kube-ovn-controller`, `kube-ovn-daemon`, `kube-ovn`,
    /// `kube-ovn-speaker`); default: beside this one, built first when missing.
    #[arg(long, env = "KUBE_OVN_LAB_BIN_DIR")]
    pub bin_dir: Option<PathBuf>,
    /// Do not run the project's install script (the packages are known to be there).
    #[arg(long, env = "KUBE_OVN_LAB_NO_INSTALL")]
    pub no_install: bool,
    /// Which runtime makes the pods: `direct` (the kubelet stand-in runs the CNI conflist
    /// itself) or `containerd` (one per node; pods are real sandboxes, netexec a container).
    #[arg(long, env = "KUBE_OVN_LAB_RUNTIME", value_enum, default_value = "direct")]
    pub runtime: RuntimeArg,
    /// How our components run: `manifests` (a real kubelet, containerd and kube-proxy per node,
    /// our image built here, `kubectl apply -k deploy/overlays/lab`: installed as users install
    /// it) or `processes` (our binaries as lab processes, the kubelet stand-in making pods:
    /// faster, for development).
    #[arg(long, env = "KUBE_OVN_LAB_INSTALL", value_enum, default_value = "manifests")]
    pub install: InstallArg,
    /// The kustomization `--install manifests` applies (the CRDs from the `crds/` directory
    /// above it); default: the repository's `deploy/overlays/lab`.
    #[arg(long, env = "KUBE_OVN_LAB_MANIFESTS")]
    pub manifests: Option<PathBuf>,
    /// How many `ovn-central` members (`--install manifests`): 1, or 3 or 5 for an OVN RAFT
    /// cluster on the first nodes (`node1` …), each labelled kube-ovn/role=master, with
    /// kube-ovn-config's ovn-central-ips listing them all (`raft.rs`).
    #[arg(
        long,
        env = "KUBE_OVN_LAB_OVN_CENTRAL_REPLICAS",
        default_value = "1",
        value_parser = super::raft::parse_replicas
    )]
    pub ovn_central_replicas: usize,
    /// How long each wait of `up` may take (Go duration).
    #[arg(long, env = "KUBE_OVN_LAB_TIMEOUT", default_value = "120s", value_parser = parse_timeout)]
    pub timeout: Duration,
}

/// How the lab's components run (see `UpArgs::install`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum InstallArg {
    Processes,
    Manifests,
}

impl From<InstallArg> for Install {
    fn from(i: InstallArg) -> Self {
        match i {
            InstallArg::Processes => Install::Processes,
            InstallArg::Manifests => Install::Manifests,
        }
    }
}

fn parse_timeout(text: &str) -> Result<Duration, String> {
    kube_ovn_support::parse_duration(text).map_err(|e| e.to_string())
}
