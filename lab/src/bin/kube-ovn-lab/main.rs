//! `kube-ovn-lab`: the lab's command line. `apiserver` runs the Kubernetes API emulator.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig, StoreConfig, kubeconfig};

#[derive(Parser)]
#[command(
    version,
    about = "The kube-ovn-rs lab (test and lab infrastructure, not for production)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the Kubernetes API emulator over HTTP.
    Apiserver {
        /// Address to listen on (use an address other network namespaces can reach).
        #[arg(long, env = "KUBE_OVN_LAB_LISTEN", default_value = "127.0.0.1:6443")]
        listen: SocketAddr,
        /// Persist objects in this file, so a restart keeps them.
        #[arg(long, env = "KUBE_OVN_LAB_STATE")]
        state: Option<PathBuf>,
        /// Write a kubeconfig for this server here.
        #[arg(long, env = "KUBE_OVN_LAB_KUBECONFIG_OUT")]
        kubeconfig_out: Option<PathBuf>,
        /// Changes kept for watches; older resourceVersions get 410 Expired.
        #[arg(long, env = "KUBE_OVN_LAB_HISTORY", default_value_t = 10_000)]
        history: usize,
        /// Seconds between watch bookmarks.
        #[arg(long, env = "KUBE_OVN_LAB_BOOKMARK_SECONDS", default_value_t = 10)]
        bookmark_seconds: u64,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match Cli::parse().command {
        Command::Apiserver {
            listen,
            state,
            kubeconfig_out,
            history,
            bookmark_seconds,
        } => {
            let config = ApiServerConfig {
                store: StoreConfig {
                    history_limit: history,
                    state_file: state,
                },
                bookmark_interval: Duration::from_secs(bookmark_seconds),
            };
            let server = ApiServer::new(config).context("starting the API emulator")?;
            let listener = tokio::net::TcpListener::bind(listen)
                .await
                .with_context(|| format!("binding {listen}"))?;
            let addr = listener.local_addr()?;
            if let Some(path) = kubeconfig_out {
                write_atomically(&path, &kubeconfig(addr))?;
            }
            tracing::info!(%addr, "API emulator serving");
            // SIGTERM is how the lab and tests stop it; every change is already in the state
            // file (appended and flushed as it commits), so stopping needs no more than exiting.
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .context("installing the SIGTERM handler")?;
            tokio::select! {
                r = server.serve(listener) => r.context("serving")?,
                _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
                _ = term.recv() => tracing::info!("terminated; stopping"),
            }
            Ok(())
        }
    }
}

/// Writes through a temporary file and a rename, so whoever waits for the file (a test, the lab
/// script) never reads it half-written.
fn write_atomically(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}
