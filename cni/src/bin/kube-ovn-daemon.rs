//! `kube-ovn-daemon`: flags with Kube-OVN's names, JSON logs, then the node daemon.

use anyhow::Context as _;
use clap::Parser;
use kube_ovn_cni::daemon::config::Flags;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let config = Flags::parse().validate()?;
    let kube = match &config.flags.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading {}", path.display()))?;
            let options = kube::config::KubeConfigOptions::default();
            kube::Client::try_from(kube::Config::from_custom_kubeconfig(kc, &options).await?)?
        }
        None => kube::Client::try_default()
            .await
            .context("in-cluster Kubernetes configuration")?,
    };
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let shutdown = async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
            _ = terminate.recv() => tracing::info!("terminated; stopping"),
        }
    };
    kube_ovn_cni::daemon::run(config, kube, shutdown).await?;
    Ok(())
}
