//! Start-up shared by the daemons (`kube-ovn-controller`, `kube-ovn-daemon`,
//! `kube-ovn-speaker`): JSON logs with the current span in every line, a Kubernetes client from a
//! kubeconfig file or the in-cluster configuration, the stop signal Kubernetes sends, flag errors
//! and Go-syntax durations ([`parse_duration`]), the metrics and health endpoints
//! ([`endpoints`]), tasks that die with their owner and per-key locks ([`AbortOnDrop`],
//! [`KeyLocks`]), background tasks whose end fails `/livez` ([`Supervisor`]), and the one watched
//! cache ([`watch`]): a cache per kind with its changes (deletions included), its sync signal and
//! a generation counter that lets a task wait for "it changed", whose watch stops when its
//! [`Watched`] handle is dropped.

use std::path::{Path, PathBuf};

mod duration;
pub mod endpoints;
pub mod klog;
pub mod kube_ovn_flags;
mod supervisor;
mod tasks;
pub mod watch;

pub use duration::{DurationError, DurationProblem, parse_duration};
pub use supervisor::{Supervisor, TaskFailure};
pub use tasks::{AbortOnDrop, KeyGuard, KeyLocks};

pub use watch::{Watch, Watched};

/// Why the Kubernetes client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The kubeconfig file is unreadable or invalid.
    #[error("kubeconfig {}: {source}", path.display())]
    Kubeconfig {
        /// The file given.
        path: PathBuf,
        /// kube's error.
        source: kube::config::KubeconfigError,
    },
    /// No kubeconfig was given and the in-cluster configuration is missing.
    #[error("in-cluster Kubernetes configuration: {0}")]
    InCluster(#[source] kube::config::InferConfigError),
    /// The client could not be made from the configuration.
    #[error("Kubernetes client: {0}")]
    Client(#[from] kube::Error),
}

/// JSON logs on stdout, filtered by `RUST_LOG` (default `info`). Every line carries the fields
/// of the span it was logged in (pod, peer, object).
pub fn init_json_logs() {
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(true)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
}

/// A client from `kubeconfig` when given, else from the in-cluster configuration.
pub async fn kube_client(kubeconfig: Option<&Path>) -> Result<kube::Client, ClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let fail = |source| ClientError::Kubeconfig {
                path: path.to_owned(),
                source,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(fail)?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(fail)?
        }
        None => kube::Config::infer().await.map_err(ClientError::InCluster)?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// A flag with a bad value, or a bad combination of flags: the daemons stop at start with it.
#[derive(Debug, thiserror::Error)]
#[error("--{flag}: {problem}")]
pub struct FlagError {
    /// The flag's name.
    pub flag: &'static str,
    /// What is wrong.
    pub problem: String,
}

/// A [`FlagError`] for `flag`.
pub fn flag_error(flag: &'static str, problem: impl Into<String>) -> FlagError {
    FlagError {
        flag,
        problem: problem.into(),
    }
}

/// Completes on SIGTERM (how Kubernetes stops a pod) or Ctrl-C, logging which.
pub fn shutdown_signal() -> std::io::Result<impl Future<Output = ()>> {
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => tracing::info!("interrupted; stopping"),
            _ = terminate.recv() => tracing::info!("terminated; stopping"),
        }
    })
}
