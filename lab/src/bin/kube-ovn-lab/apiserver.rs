//! `kube-ovn-lab apiserver`: upstream etcd and kube-apiserver as one process's children, our
//! CRDs served, an administrator's kubeconfig written once the API is ready; both stopped on
//! SIGTERM (and killed by the kernel if this process dies first). For tests and scripts that
//! need a Kubernetes API in a process of its own.
//!
//! There is no kube-controller-manager, so the `ServiceAccount` admission plugin is off (it
//! would refuse every pod of a namespace whose `default` ServiceAccount nobody makes), as in the
//! tests' fixture. Its files (PKI, etcd's data, the logs) live in a temporary directory removed
//! when it exits.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_ovn_lab::kubernetes::fixture::{SERVICE_CIDRS, START_TIMEOUT};
use kube_ovn_lab::kubernetes::lab::ControlPlane;
use kube_ovn_lab::kubernetes::{binary, fixture};
use kube_ovn_testkit::Daemon;

#[derive(clap::Args)]
pub struct ApiserverArgs {
    /// Address to listen on (use an address other network namespaces can reach); port 0 picks a
    /// free one (the kubeconfig written says which).
    #[arg(long, env = "KUBE_OVN_LAB_LISTEN", default_value = "127.0.0.1:6443")]
    listen: SocketAddr,
    /// Write the administrator's kubeconfig (a client certificate in `system:masters`) here,
    /// once the API is ready with our CRDs served.
    #[arg(long, env = "KUBE_OVN_LAB_KUBECONFIG_OUT")]
    kubeconfig_out: Option<PathBuf>,
    /// kube-apiserver's flag, passed through: bearer tokens, one CSV line each,
    /// `token,user,uid,"group1,group2"`.
    #[arg(long, env = "KUBE_OVN_LAB_TOKEN_AUTH_FILE")]
    token_auth_file: Option<PathBuf>,
}

pub async fn run(args: ApiserverArgs) -> anyhow::Result<std::process::ExitCode> {
    super::init_logs();
    let dir = tempfile::Builder::new()
        .prefix("kube-ovn-lab-apiserver-")
        .tempdir()?;
    let port = match args.listen.port() {
        0 => free_port(args.listen.ip())?,
        p => p,
    };
    let cp = ControlPlane {
        dir: dir.path().to_owned(),
        api: SocketAddr::new(args.listen.ip(), port),
        etcd_client_port: kube_ovn_testkit::free_port()?,
        etcd_peer_port: kube_ovn_testkit::free_port()?,
        service_cidrs: SERVICE_CIDRS.iter().map(|c| (*c).to_owned()).collect(),
        audit_log: dir.path().join("audit.log"),
        extra_clients: vec![],
    };
    cp.write_files()?;
    let mut extra = vec!["--disable-admission-plugins=ServiceAccount".to_owned()];
    if let Some(file) = &args.token_auth_file {
        anyhow::ensure!(
            file.is_file(),
            "--token-auth-file {}: no such file",
            file.display()
        );
        extra.push(format!("--token-auth-file={}", file.display()));
    }
    let mut etcd = spawn(&cp, "etcd", &cp.etcd_args())?;
    let mut apiserver = spawn(&cp, "kube-apiserver", &cp.apiserver_args(&extra))?;
    let admin = kube_ovn_support::kube_client(Some(&cp.kubeconfig("admin"))).await?;
    kube_ovn_lab::kubernetes::lab::wait_ready(&admin, START_TIMEOUT, || {
        apiserver
            .check_alive()
            .and_then(|()| etcd.check_alive())
            .map_err(|e| format!("{e:#}"))
    })
    .await
    .map_err(anyhow::Error::msg)?;
    let crds: Vec<CustomResourceDefinition> = kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
        .collect();
    fixture::install_crds(&admin, &crds).await?;
    if let Some(path) = &args.kubeconfig_out {
        let text = std::fs::read_to_string(cp.kubeconfig("admin"))?;
        write_atomically(path, &text)?;
    }
    tracing::info!(url = %cp.url(), dir = %dir.path().display(), "kube-apiserver ready, our CRDs served");
    // Until SIGTERM (how tests and scripts stop it), or until one of the two dies.
    let mut check = tokio::time::interval(Duration::from_millis(500));
    let signal = kube_ovn_support::shutdown_signal()?;
    tokio::pin!(signal);
    let result = loop {
        tokio::select! {
            () = &mut signal => break Ok(()),
            _ = check.tick() => {
                if let Err(e) = apiserver.check_alive().and_then(|()| etcd.check_alive()) {
                    break Err(e);
                }
            }
        }
    };
    apiserver.stop();
    etcd.stop();
    result?;
    Ok(std::process::ExitCode::SUCCESS)
}

fn spawn(cp: &ControlPlane, name: &str, args: &[String]) -> anyhow::Result<Daemon> {
    let program = binary(name)?;
    Daemon::spawn(
        name,
        program.to_str().context("the binary's path")?,
        args,
        &cp.dir.join(format!("{name}.log")),
        &[],
    )
}

/// A free TCP port on `ip` (the kernel's pick; closed before the server binds it).
fn free_port(ip: IpAddr) -> anyhow::Result<u16> {
    Ok(TcpListener::bind((ip, 0))
        .with_context(|| format!("binding {ip}:0"))?
        .local_addr()?
        .port())
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
