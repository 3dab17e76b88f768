//! `kube-ovn-controller`: flags with Kube-OVN's names (its other flags and klog's accepted, and
//! named once as ignored where they have no effect here), JSON logs, then the controller.

use anyhow::Context as _;
use kube_ovn_controller::config::Flags;
use kube_ovn_support::kube_ovn_flags;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let (flags, ignored) = kube_ovn_flags::parse::<Flags>(kube_ovn_flags::tables::CONTROLLER);
    flags.klog.init_logs_with("kube-ovn-controller", &ignored);
    let config = flags.validate()?;
    let kube = kube_ovn_support::kube_client(config.kubeconfig.as_deref()).await?;
    // Kubernetes stops a pod with SIGTERM: a clean stop, which releases the leader lease so a
    // follower takes over at once instead of waiting for the lease to expire.
    let shutdown = kube_ovn_support::shutdown_signal().context("installing the SIGTERM handler")?;
    kube_ovn_controller::run(config, kube, shutdown).await?;
    Ok(())
}
