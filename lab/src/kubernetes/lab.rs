//! The lab's control plane: one etcd, one kube-apiserver, kube-controller-manager and
//! kube-scheduler, laid out in one directory (the PKI, the kubeconfigs, the audit policy, etcd's
//! data). `kube-ovn-lab up` runs it in the control plane's network namespace (as recorded lab
//! processes); `kube-ovn-lab apiserver` runs etcd and kube-apiserver of it as its children.
//!
//! What follows from the plan is pure (hosts of the serving certificate, command lines, file
//! paths); [`ControlPlane::write_files`] makes the PKI and the files, and the async helpers wait
//! for the API and mint ServiceAccount tokens through it.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use tracing::instrument::WithSubscriber;

use super::flags::{self, ApiServerSpec, AuditFiles, EtcdSpec};
use super::pki::{ClientIdentity, Pki, PkiError};
use super::{Credentials, kubeconfig};

/// The identities of the control plane's own clients (client certificates): kube-controller-
/// manager and kube-scheduler as the users their bootstrap ClusterRoleBindings name.
pub fn control_plane_identities() -> Vec<ClientIdentity> {
    vec![
        ClientIdentity::admin(),
        ClientIdentity::new("kube-controller-manager", "system:kube-controller-manager", None),
        ClientIdentity::new("kube-scheduler", "system:kube-scheduler", None),
        super::kubelet::apiserver_client_identity(),
    ]
}

/// Everything one control plane is: where it keeps its files and what it serves where.
#[derive(Debug, Clone)]
pub struct ControlPlane {
    /// Its directory: `pki/`, `etcd/`, kubeconfigs, the audit policy.
    pub dir: PathBuf,
    /// kube-apiserver's address (also its advertised one, the `kubernetes` Service's endpoint).
    pub api: SocketAddr,
    /// etcd's client and peer ports, on 127.0.0.1 (only kube-apiserver talks to it).
    pub etcd_client_port: u16,
    pub etcd_peer_port: u16,
    /// ClusterIP ranges, one per family (the first is the default family).
    pub service_cidrs: Vec<String>,
    /// The audit log (every request, Metadata level).
    pub audit_log: PathBuf,
    /// More client identities for the PKI (e.g. the lab's agent).
    pub extra_clients: Vec<ClientIdentity>,
}

impl ControlPlane {
    pub fn pki(&self) -> Pki {
        Pki::open(&self.dir.join("pki"))
    }

    /// `https://<api>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.api)
    }

    /// The kubeconfig of a client certificate's `stem` (`admin`, `kube-scheduler`, …).
    pub fn kubeconfig(&self, stem: &str) -> PathBuf {
        self.dir.join(format!("{stem}.kubeconfig"))
    }

    pub fn etcd_client(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.etcd_client_port))
    }

    /// The names kube-apiserver's serving certificate carries: its own address, loopback, the
    /// names and the ClusterIP of the `kubernetes` Service (what pods reach it by), as kubeadm
    /// issues it.
    pub fn serving_hosts(&self) -> Result<Vec<String>, String> {
        let mut hosts = vec![
            self.api.ip().to_string(),
            "127.0.0.1".into(),
            "localhost".into(),
            "kubernetes".into(),
            "kubernetes.default".into(),
            "kubernetes.default.svc".into(),
            "kubernetes.default.svc.cluster.local".into(),
        ];
        let first = self
            .service_cidrs
            .first()
            .ok_or_else(|| "no service CIDR".to_owned())?;
        hosts.push(first_service_ip(first)?.to_string());
        hosts.dedup();
        Ok(hosts)
    }

    /// Makes the PKI, the kubeconfigs of its client certificates and the audit policy.
    pub fn write_files(&self) -> Result<Pki, ControlPlaneError> {
        let hosts = self.serving_hosts().map_err(ControlPlaneError::Plan)?;
        let mut clients = control_plane_identities();
        clients.extend(self.extra_clients.iter().cloned());
        let pki = Pki::create(&self.dir.join("pki"), &hosts, &clients)?;
        for client in &clients {
            let text = kubeconfig(
                &self.url(),
                &pki.ca_cert(),
                &client.user,
                &Credentials::Certificate {
                    cert: pki.client_cert(&client.stem),
                    key: pki.client_key(&client.stem),
                },
            );
            write(&self.kubeconfig(&client.stem), &text)?;
        }
        write(&self.audit_policy(), flags::AUDIT_POLICY)?;
        Ok(pki)
    }

    fn audit_policy(&self) -> PathBuf {
        self.dir.join("audit-policy.yaml")
    }

    pub fn etcd_args(&self) -> Vec<String> {
        flags::etcd_args(&EtcdSpec {
            name: "lab".into(),
            data_dir: self.dir.join("etcd"),
            client: self.etcd_client(),
            peer: SocketAddr::from((Ipv4Addr::LOCALHOST, self.etcd_peer_port)),
        })
    }

    /// kube-apiserver: RBAC and Node authorization, the default admission plugins, the
    /// endpoint reconciler on (it listens on a routable address), the audit log.
    pub fn apiserver_args(&self, extra: &[String]) -> Vec<String> {
        let spec = ApiServerSpec {
            etcd: self.etcd_client(),
            etcd_prefix: "/registry".into(),
            bind: self.api.ip(),
            port: self.api.port(),
            service_cidrs: self.service_cidrs.clone(),
            disabled_admission_plugins: vec![],
            audit: Some(AuditFiles {
                policy: self.audit_policy(),
                log: self.audit_log.clone(),
            }),
            watch_cache: true,
            endpoint_reconciler: !self.api.ip().is_loopback(),
            kubelet_client: true,
        };
        let mut args = flags::apiserver_args(&spec, &self.pki());
        args.extend(extra.iter().cloned());
        args
    }

    /// kube-controller-manager with every controller (`*`: Deployments, ReplicaSets,
    /// EndpointSlices, namespaces, garbage collection, ServiceAccounts and their tokens, node
    /// lifecycle, …).
    pub fn controller_manager_args(&self) -> Vec<String> {
        flags::controller_manager_args(&self.kubeconfig("kube-controller-manager"), &self.pki(), &["*"])
    }

    pub fn scheduler_args(&self) -> Vec<String> {
        flags::scheduler_args(&self.kubeconfig("kube-scheduler"))
    }
}

/// The `kubernetes` Service's ClusterIP: the range's network address plus one, in either family
/// (kube-apiserver's choice).
pub fn first_service_ip(cidr: &str) -> Result<IpAddr, String> {
    let net: ipnet::IpNet = cidr.parse().map_err(|e| format!("service CIDR {cidr:?}: {e}"))?;
    let first = match net.network() {
        IpAddr::V4(a) => u32::from(a)
            .checked_add(1)
            .map(|n| IpAddr::from(Ipv4Addr::from(n))),
        IpAddr::V6(a) => u128::from(a)
            .checked_add(1)
            .map(|n| IpAddr::from(std::net::Ipv6Addr::from(n))),
    };
    first
        .filter(|ip| net.contains(ip))
        .ok_or_else(|| format!("service CIDR {cidr:?} has no addresses"))
}

#[derive(Debug, thiserror::Error)]
pub enum ControlPlaneError {
    #[error("the control plane's plan: {0}")]
    Plan(String),
    #[error(transparent)]
    Pki(#[from] PkiError),
    #[error("writing {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn write(path: &Path, text: &str) -> Result<(), ControlPlaneError> {
    std::fs::write(path, text).map_err(|source| ControlPlaneError::Io {
        path: path.to_owned(),
        source,
    })
}

/// Waits until kube-apiserver's `/readyz` answers `ok` (its post-start hooks done: bootstrap
/// roles, the default namespaces, the ClusterIP allocator), within `timeout`; `alive` is asked
/// between tries and fails the wait at once (the process exited, with its log).
pub async fn wait_ready(
    client: &kube::Client,
    timeout: Duration,
    mut alive: impl FnMut() -> Result<(), String>,
) -> Result<(), String> {
    let deadline = Instant::now() + timeout;
    loop {
        let request = http::Request::get("/readyz")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        // Until it is ready the server answers 500, which the client's trace layer would log
        // as an error on every poll: those answers are expected here, so they are not logged.
        let answer = client
            .request_text(request)
            .with_subscriber(tracing::subscriber::NoSubscriber::default())
            .await;
        let last = match answer {
            Ok(text) if text.trim() == "ok" => return Ok(()),
            Ok(text) => text,
            Err(e) => e.to_string(),
        };
        alive()?;
        if Instant::now() > deadline {
            return Err(format!(
                "kube-apiserver not ready within {timeout:?} (last: {last})"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A token of ServiceAccount `namespace/name` from the TokenRequest API, valid for `valid`: what
/// a pod's projected token would be (the lab's components run outside pods, so `up` writes it
/// into their kubeconfigs).
pub async fn service_account_token(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    valid: Duration,
) -> Result<String, kube::Error> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(i64::try_from(valid.as_secs()).unwrap_or(i64::MAX)),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let made = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await?;
    Ok(made.status.map(|s| s.token).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(api: &str) -> ControlPlane {
        ControlPlane {
            dir: "/lab/cp".into(),
            api: api.parse().unwrap(),
            etcd_client_port: 2379,
            etcd_peer_port: 2380,
            service_cidrs: vec!["10.96.0.0/12".into(), "fd00:10:96::/108".into()],
            audit_log: "/lab/logs/audit.log".into(),
            extra_clients: vec![],
        }
    }

    #[test]
    fn the_serving_certificate_names_the_api_its_service_and_its_cluster_ip() {
        let hosts = plan("172.30.0.2:6443").serving_hosts().unwrap();
        for h in [
            "172.30.0.2",
            "127.0.0.1",
            "localhost",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
            "10.96.0.1",
        ] {
            assert!(hosts.iter().any(|x| x == h), "{h} missing from {hosts:?}");
        }
        assert_eq!(
            first_service_ip("fd00:10:96::/108").unwrap().to_string(),
            "fd00:10:96::1"
        );
        assert!(first_service_ip("10.96.0.0/33").is_err());
        let mut none = plan("172.30.0.2:6443");
        none.service_cidrs.clear();
        assert!(none.serving_hosts().is_err());
    }

    #[test]
    fn the_lab_api_server_authorizes_with_node_and_rbac_and_keeps_the_kubernetes_endpoints() {
        let routable = plan("172.30.0.2:6443");
        let args = routable.apiserver_args(&["--v=1".into()]);
        for expected in [
            "--authorization-mode=Node,RBAC",
            "--bind-address=172.30.0.2",
            "--secure-port=6443",
            "--etcd-servers=http://127.0.0.1:2379",
            "--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/108",
            "--audit-log-path=/lab/logs/audit.log",
            "--client-ca-file=/lab/cp/pki/ca.crt",
            "--v=1",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "{expected} missing from {args:?}"
            );
        }
        // The default admission plugins, and the endpoint reconciler (a routable address).
        assert!(!args.iter().any(|a| a.starts_with("--disable-admission-plugins")));
        assert!(!args.iter().any(|a| a == "--endpoint-reconciler-type=none"));
        // On loopback the `kubernetes` endpoints cannot be kept (EndpointSlices refuse it).
        let local = plan("127.0.0.1:6443").apiserver_args(&[]);
        assert!(local.iter().any(|a| a == "--endpoint-reconciler-type=none"));

        let kcm = routable.controller_manager_args();
        assert!(kcm.iter().any(|a| a == "--controllers=*"), "{kcm:?}");
        assert!(
            kcm.iter()
                .any(|a| a == "--kubeconfig=/lab/cp/kube-controller-manager.kubeconfig")
        );
        let sched = routable.scheduler_args();
        assert!(
            sched
                .iter()
                .any(|a| a == "--kubeconfig=/lab/cp/kube-scheduler.kubeconfig")
        );
        let etcd = routable.etcd_args();
        assert!(etcd.iter().any(|a| a == "--data-dir=/lab/cp/etcd"), "{etcd:?}");
        assert!(
            etcd.iter()
                .any(|a| a == "--listen-client-urls=http://127.0.0.1:2379")
        );
    }

    #[test]
    fn its_files_are_a_pki_and_a_kubeconfig_per_client() {
        let dir = tempfile::tempdir().unwrap();
        let mut cp = plan("127.0.0.1:6443");
        cp.dir = dir.path().to_owned();
        cp.extra_clients = vec![ClientIdentity::new(
            "agent",
            "kube-ovn-lab:agent",
            Some("system:masters"),
        )];
        let pki = cp.write_files().unwrap();
        for f in [
            "ca.crt",
            "apiserver.crt",
            "sa.key",
            "sa.pub",
            "kube-scheduler.crt",
            "agent.key",
        ] {
            assert!(pki.path(f).is_file(), "{f}");
        }
        let kc: kube::config::Kubeconfig = serde_saphyr::from_str(
            &std::fs::read_to_string(cp.kubeconfig("kube-controller-manager")).unwrap(),
        )
        .unwrap();
        assert_eq!(kc.auth_infos[0].name, "system:kube-controller-manager");
        assert!(cp.kubeconfig("agent").is_file());
        assert!(dir.path().join("audit-policy.yaml").is_file());
    }
}
