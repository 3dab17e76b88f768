//! `kube-ovn-daemon`: flags with Kube-OVN's names, JSON logs, then the node daemon.

use anyhow::Context as _;
use clap::Parser;
use kube_ovn_node::config::Flags;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kube_ovn_support::init_json_logs();
    let config = Flags::parse().validate()?;
    let kube = kube_ovn_support::kube_client(config.flags.kubeconfig.as_deref()).await?;
    // A clean stop removes the socket, so the shim reports "daemon not running" at once.
    let shutdown = kube_ovn_support::shutdown_signal().context("installing the SIGTERM handler")?;
    kube_ovn_node::run(config, kube, shutdown).await?;
    Ok(())
}
