//! `kube-ovn-controller`: flags with Kube-OVN's names, JSON logs, then the controller.

use anyhow::Context as _;
use clap::Parser;
use kube_ovn_controller::config::Flags;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    kube_ovn_support::init_json_logs();
    let config = Flags::parse().validate()?;
    let kube = kube_ovn_support::kube_client(config.kubeconfig.as_deref()).await?;
    // Kubernetes stops a pod with SIGTERM: a clean stop, which releases the leader lease so a
    // follower takes over at once instead of waiting for the lease to expire.
    let shutdown = kube_ovn_support::shutdown_signal().context("installing the SIGTERM handler")?;
    kube_ovn_controller::run(config, kube, shutdown).await?;
    Ok(())
}
