//! `kube-ovn-lab apiserver`: the Kubernetes API emulator as a process of its own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig, StoreConfig, kubeconfig};

#[derive(clap::Args)]
pub struct ApiserverArgs {
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
}

pub async fn run(args: ApiserverArgs) -> anyhow::Result<std::process::ExitCode> {
    super::init_logs();
    let config = ApiServerConfig {
        store: StoreConfig {
            history_limit: args.history,
            state_file: args.state,
        },
        bookmark_interval: Duration::from_secs(args.bookmark_seconds),
    };
    let server = ApiServer::new(config).context("starting the API emulator")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    if let Some(path) = args.kubeconfig_out {
        write_atomically(&path, &kubeconfig(addr))?;
    }
    tracing::info!(%addr, "API emulator serving");
    // SIGTERM is how the lab and tests stop it; every change is already in the state file
    // (appended and flushed as it commits), so stopping needs no more than exiting.
    tokio::select! {
        r = server.serve(listener) => r.context("serving")?,
        () = kube_ovn_support::shutdown_signal()? => {}
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Writes through a temporary file and a rename, so whoever waits for the file (a test, the lab
/// script) never reads it half-written.
pub fn write_atomically(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming to {}", path.display()))
}
