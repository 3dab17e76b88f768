//! Upstream Kubernetes, the only Kubernetes the lab and the tests know: etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kubelet, kube-proxy and kubectl, built from source by
//! `scripts/build-kubernetes.sh` (the Go module in `kubernetes/`, which pins the release) into
//! `/opt/kube-ovn-rs/kubernetes-<version>/`.
//!
//! - [`pki`]: the CA, serving and client certificates and the ServiceAccount key;
//! - [`flags`]: the command lines, as pure functions;
//! - [`audit`]: the API server's audit log read back (who was refused what);
//! - [`fixture`]: etcd shared by a test process and an API server per test;
//! - [`kubelet`]: a node's kubelet configuration and command line;
//! - [`lab`]: the lab's control plane (`up`, `kube-ovn-lab apiserver`).

pub mod audit;
pub mod fixture;
pub mod flags;
pub mod kubelet;
pub mod lab;
pub mod pki;

use std::path::{Path, PathBuf};

/// The Go module that builds the binaries; its `k8s.io/kubernetes` requirement is the version.
const GO_MOD: &str = include_str!("../../../kubernetes/go.mod");

/// The programs the build puts in the version's directory.
pub const BINARIES: [&str; 7] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kube-proxy",
    "kubectl",
];

#[derive(Debug, thiserror::Error)]
pub enum KubernetesError {
    #[error(
        "{path} is missing: build Kubernetes {version} with scripts/install-deps.sh (or scripts/build-kubernetes.sh)"
    )]
    Missing { path: PathBuf, version: &'static str },
}

/// The pinned Kubernetes release, `vX.Y.Z`.
pub fn version() -> &'static str {
    GO_MOD
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("k8s.io/kubernetes"))
                .then(|| words.next())
                .flatten()
                .filter(|v| v.starts_with('v'))
        })
        .expect("kubernetes/go.mod requires k8s.io/kubernetes")
}

/// Where the binaries are: `KUBE_OVN_RS_KUBERNETES_DIR`, else under `KUBE_OVN_RS_K8S_ROOT`
/// (default `/opt/kube-ovn-rs`), as the build script puts them.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KUBE_OVN_RS_KUBERNETES_DIR") {
        return dir.into();
    }
    let root = std::env::var_os("KUBE_OVN_RS_K8S_ROOT").unwrap_or_else(|| "/opt/kube-ovn-rs".into());
    Path::new(&root).join(format!("kubernetes-{}", version()))
}

/// The path of one of [`BINARIES`], checked to exist.
pub fn binary(name: &str) -> Result<PathBuf, KubernetesError> {
    let path = bin_dir().join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(KubernetesError::Missing {
            path,
            version: version(),
        })
    }
}

/// How a kubeconfig's user authenticates.
#[derive(Debug, Clone)]
pub enum Credentials {
    /// A client certificate and its key (files).
    Certificate { cert: PathBuf, key: PathBuf },
    /// A bearer token (a ServiceAccount's, from the TokenRequest API).
    Token(String),
}

/// A kubeconfig for `server` (an `https://` URL) trusting `ca`, as `user`.
pub fn kubeconfig(server: &str, ca: &Path, user: &str, credentials: &Credentials) -> String {
    let auth = match credentials {
        Credentials::Certificate { cert, key } => format!(
            "    client-certificate: {}\n    client-key: {}\n",
            cert.display(),
            key.display()
        ),
        Credentials::Token(token) => format!("    token: {token}\n"),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: lab\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: {user}\n  user:\n{auth}contexts:\n- name: lab\n  context:\n    cluster: lab\n    user: {user}\ncurrent-context: lab\n",
        ca = ca.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_the_go_modules_kubernetes_requirement() {
        let v = version();
        assert!(v.starts_with("v1."), "{v}");
        if std::env::var_os("KUBE_OVN_RS_KUBERNETES_DIR").is_none() {
            assert!(bin_dir().ends_with(format!("kubernetes-{v}")));
        }
    }

    #[test]
    fn a_kubeconfig_reads_back_with_its_credentials() {
        let ca = Path::new("/pki/ca.crt");
        let token = kubeconfig(
            "https://127.0.0.1:6443",
            ca,
            "cni",
            &Credentials::Token("t0k".into()),
        );
        let kc: kube::config::Kubeconfig = serde_saphyr::from_str(&token).unwrap();
        assert_eq!(kc.current_context.as_deref(), Some("lab"));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert!(user.token.is_some() && user.client_certificate.is_none());
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority.as_deref(), Some("/pki/ca.crt"));
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));

        let cert = Credentials::Certificate {
            cert: "/pki/admin.crt".into(),
            key: "/pki/admin.key".into(),
        };
        let kc: kube::config::Kubeconfig =
            serde_saphyr::from_str(&kubeconfig("https://[::1]:6443", ca, "admin", &cert)).unwrap();
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate.as_deref(), Some("/pki/admin.crt"));
        assert_eq!(user.client_key.as_deref(), Some("/pki/admin.key"));
        assert!(user.token.is_none());
    }
}
