//! `kube-ovn-daemon`: flags with Kube-OVN's names (its other flags and klog's accepted, and named
//! once as ignored where they have no effect here), JSON logs, then the node daemon.

use anyhow::Context as _;
use kube_ovn_node::config::Flags;
use kube_ovn_support::kube_ovn_flags;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (mut flags, ignored) = kube_ovn_flags::parse::<Flags>(kube_ovn_flags::tables::DAEMON);
    flags.klog.init_logs_with("kube-ovn-daemon", &ignored);
    if flags.node_name.is_empty() {
        // Kube-OVN's DaemonSet gives the node's name as `NODE_NAME` (the downward API), and its
        // daemon falls back to the host name.
        flags.node_name = kube_ovn_node_name();
    }
    let config = flags.validate()?;
    let kube = kube_ovn_support::kube_client(config.flags.kubeconfig.as_deref()).await?;
    // A clean stop removes the socket, so the shim reports "daemon not running" at once.
    let shutdown = kube_ovn_support::shutdown_signal().context("installing the SIGTERM handler")?;
    kube_ovn_node::run(config, kube, shutdown).await?;
    Ok(())
}

/// `NODE_NAME`, else the host name, lower-cased as Kubernetes names nodes; empty when neither is
/// known (`validate` then names the flag).
fn kube_ovn_node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.is_empty())
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|n| n.trim().to_lowercase())
        .unwrap_or_default()
}
