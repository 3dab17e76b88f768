//! HTTPS for the emulator, with kube-apiserver's flags: `--tls-cert-file` and
//! `--tls-private-key-file`, or `--cert-dir` where a self-signed certificate is made (and kept
//! for the next start) when none is given.
//!
//! Why: kubectl (client-go) sends a kubeconfig's token only over TLS, so running it as a
//! ServiceAccount against the emulator (RBAC in the lab) needs HTTPS. The self-signed
//! certificate is not a CA; clients trust it directly (`certificate-authority` in the kubeconfig
//! names the certificate itself).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {what}")]
    Pem { path: PathBuf, what: String },
    #[error("making a self-signed certificate: {0}")]
    Generate(#[from] rcgen::Error),
    #[error("TLS configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// Where the serving certificate and key are.
#[derive(Debug, Clone)]
pub struct ServingCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ServingCert {
    /// `apiserver.crt` / `apiserver.key` in `dir`, made self-signed for `hosts` (IP addresses or
    /// DNS names) when either is missing, as kube-apiserver does in its `--cert-dir`.
    pub fn in_dir(dir: &Path, hosts: &[String]) -> Result<Self, TlsError> {
        let cert = dir.join("apiserver.crt");
        let key = dir.join("apiserver.key");
        if !(cert.exists() && key.exists()) {
            std::fs::create_dir_all(dir).map_err(|source| TlsError::Io {
                path: dir.to_owned(),
                source,
            })?;
            let made = rcgen::generate_simple_self_signed(hosts.to_vec())?;
            write(&key, &made.signing_key.serialize_pem())?;
            write(&cert, &made.cert.pem())?;
        }
        Ok(Self { cert, key })
    }

    /// The rustls configuration serving this certificate (HTTP/1.1 only).
    pub fn server_config(&self) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let pem_err = |path: &Path| {
            let path = path.to_owned();
            move |e: rustls::pki_types::pem::Error| TlsError::Pem {
                path: path.clone(),
                what: e.to_string(),
            }
        };
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&self.cert)
            .map_err(pem_err(&self.cert))?
            .collect::<Result<_, _>>()
            .map_err(pem_err(&self.cert))?;
        if certs.is_empty() {
            return Err(TlsError::Pem {
                path: self.cert.clone(),
                what: "no CERTIFICATE in the file".into(),
            });
        }
        let key = PrivateKeyDer::from_pem_file(&self.key).map_err(pem_err(&self.key))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(certs, key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

fn write(path: &Path, text: &str) -> Result<(), TlsError> {
    std::fs::write(path, text).map_err(|source| TlsError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The names a self-signed certificate for a server listening on `ip` covers: that address
/// (unless it is a wildcard), the loopback addresses and `localhost`.
pub fn default_hosts(ip: IpAddr) -> Vec<String> {
    let mut hosts = vec!["127.0.0.1".to_owned(), "::1".to_owned(), "localhost".to_owned()];
    if !ip.is_unspecified() && !ip.is_loopback() {
        hosts.insert(0, ip.to_string());
    }
    hosts
}

/// Serves `router` over TLS on `listener` until the future is dropped.
pub async fn serve(
    router: axum::Router,
    listener: tokio::net::TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // Out of file descriptors and the like: the next accept may work; the server goes on.
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let stream = match acceptor.accept(tcp).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "TLS handshake failed");
                    return;
                }
            };
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                .with_upgrades()
                .await;
            if let Err(e) = served {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
}
