//! `kube-ovn-lab apiserver`: the Kubernetes API emulator as a process of its own, with
//! kube-apiserver's flags for tokens, RBAC and TLS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use kube_ovn_lab::apiserver::auth::{AuthConfig, AuthorizationMode, parse_token_file};
use kube_ovn_lab::apiserver::tls::{ServingCert, default_hosts};
use kube_ovn_lab::apiserver::{ApiServer, ApiServerConfig, StoreConfig, kubeconfig_for};

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
    /// kube-apiserver's flag: bearer tokens, one CSV line each, `token,user,uid,"group1,group2"`.
    /// Without it every request is anonymous and tokens are ignored.
    #[arg(long, env = "KUBE_OVN_LAB_TOKEN_AUTH_FILE")]
    token_auth_file: Option<PathBuf>,
    /// kube-apiserver's flag: `AlwaysAllow`, or `RBAC` (authorized from the Roles,
    /// ClusterRoles and bindings stored in the emulator; `system:masters` may do anything).
    #[arg(long, env = "KUBE_OVN_LAB_AUTHORIZATION_MODE", default_value = "AlwaysAllow")]
    authorization_mode: AuthorizationMode,
    /// The token the kubeconfig written by `--kubeconfig-out` authenticates with (one of
    /// `--token-auth-file`'s); none when absent.
    #[arg(long, env = "KUBE_OVN_LAB_KUBECONFIG_TOKEN", hide_env_values = true)]
    kubeconfig_token: Option<String>,
    /// kube-apiserver's flag: serve HTTPS with this certificate (PEM; with
    /// `--tls-private-key-file`). kubectl sends tokens only over HTTPS.
    #[arg(long, env = "KUBE_OVN_LAB_TLS_CERT_FILE", requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// kube-apiserver's flag: the key of `--tls-cert-file` (PEM).
    #[arg(long, env = "KUBE_OVN_LAB_TLS_PRIVATE_KEY_FILE", requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// kube-apiserver's flag: serve HTTPS with `apiserver.crt`/`apiserver.key` from this
    /// directory, made self-signed (for the listen address, 127.0.0.1 and localhost) when
    /// absent. The kubeconfig written trusts that certificate.
    #[arg(long, env = "KUBE_OVN_LAB_CERT_DIR", conflicts_with = "tls_cert_file")]
    cert_dir: Option<PathBuf>,
}

pub async fn run(args: ApiserverArgs) -> anyhow::Result<std::process::ExitCode> {
    super::init_logs();
    let tokens = match &args.token_auth_file {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading --token-auth-file {}", path.display()))?;
            parse_token_file(&text).with_context(|| format!("--token-auth-file {}", path.display()))?
        }
        None => std::collections::HashMap::default(),
    };
    if let Some(token) = &args.kubeconfig_token
        && !tokens.contains_key(token)
    {
        anyhow::bail!("--kubeconfig-token is not one of the tokens in --token-auth-file");
    }
    let config = ApiServerConfig {
        store: StoreConfig {
            history_limit: args.history,
            state_file: args.state,
        },
        bookmark_interval: Duration::from_secs(args.bookmark_seconds),
        auth: AuthConfig {
            mode: args.authorization_mode,
            tokens,
        },
    };
    let server = ApiServer::new(config).context("starting the API emulator")?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let cert = match (args.tls_cert_file, args.tls_private_key_file, args.cert_dir) {
        (Some(cert), Some(key), _) => Some(ServingCert { cert, key }),
        (_, _, Some(dir)) => Some(
            ServingCert::in_dir(&dir, &default_hosts(addr.ip()))
                .with_context(|| format!("--cert-dir {}", dir.display()))?,
        ),
        _ => None,
    };
    let tls = cert
        .as_ref()
        .map(ServingCert::server_config)
        .transpose()
        .context("the serving certificate")?;
    if let Some(path) = args.kubeconfig_out {
        let ca = cert.as_ref().map(|c| c.cert.as_path());
        write_atomically(&path, &kubeconfig_for(addr, ca, args.kubeconfig_token.as_deref()))?;
    }
    tracing::info!(%addr, tls = tls.is_some(), authorization_mode = ?args.authorization_mode, "API emulator serving");
    // SIGTERM is how the lab and tests stop it; every change is already in the state file
    // (appended and flushed as it commits), so stopping needs no more than exiting.
    tokio::select! {
        r = async {
            match tls {
                Some(config) => server.serve_tls(listener, config).await,
                None => server.serve(listener).await,
            }
        } => r.context("serving")?,
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
