//! The command lines of etcd and the Kubernetes control plane, as pure functions of what they
//! serve and where: the lab's `up`, `kube-ovn-lab apiserver` and the tests' fixture all start
//! them from here, so they run the same configuration.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use super::pki::Pki;

/// kube-apiserver's ServiceAccount issuer (and so the tokens' default audience), as kubeadm
/// sets it.
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// One etcd member, alone in its cluster.
#[derive(Debug, Clone)]
pub struct EtcdSpec {
    pub name: String,
    pub data_dir: PathBuf,
    pub client: SocketAddr,
    pub peer: SocketAddr,
}

pub fn etcd_args(spec: &EtcdSpec) -> Vec<String> {
    let client = format!("http://{}", spec.client);
    let peer = format!("http://{}", spec.peer);
    vec![
        format!("--name={}", spec.name),
        format!("--data-dir={}", spec.data_dir.display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster={}={peer}", spec.name),
        // The lab's and the tests' data are thrown away with them; fsync would only make every
        // write wait for the disk (etcd's own flag for this case).
        "--unsafe-no-fsync".into(),
        "--log-level=warn".into(),
    ]
}

/// What a kube-apiserver serves and where.
#[derive(Debug, Clone)]
pub struct ApiServerSpec {
    pub etcd: SocketAddr,
    /// The key prefix of this API server's objects in etcd: API servers with different prefixes
    /// share one etcd without seeing each other's objects.
    pub etcd_prefix: String,
    pub bind: IpAddr,
    pub port: u16,
    /// ClusterIP ranges, one per family (two for dual stack).
    pub service_cidrs: Vec<String>,
    /// Admission plugins switched off (kube-apiserver's default set otherwise).
    pub disabled_admission_plugins: Vec<String>,
    /// Where the audit log goes (every request at Metadata level), if anywhere.
    pub audit: Option<AuditFiles>,
    /// kube-apiserver's watch cache (on by default, as on every cluster).
    pub watch_cache: bool,
    /// Whether this server keeps the `kubernetes` Service's endpoints (it cannot when it
    /// listens on a loopback address: EndpointSlices refuse loopback addresses).
    pub endpoint_reconciler: bool,
    /// Whether it reaches kubelets (`kubectl exec`, `logs`): with the client certificate
    /// `apiserver-kubelet-client` of the PKI, at their InternalIP.
    pub kubelet_client: bool,
}

#[derive(Debug, Clone)]
pub struct AuditFiles {
    pub policy: PathBuf,
    pub log: PathBuf,
}

pub fn apiserver_args(spec: &ApiServerSpec, pki: &Pki) -> Vec<String> {
    let p = |f: &str| pki.path(f).display().to_string();
    let mut args = vec![
        format!("--etcd-servers=http://{}", spec.etcd),
        format!("--etcd-prefix={}", spec.etcd_prefix),
        format!("--bind-address={}", spec.bind),
        format!("--advertise-address={}", spec.bind),
        format!("--secure-port={}", spec.port),
        format!("--tls-cert-file={}", p("apiserver.crt")),
        format!("--tls-private-key-file={}", p("apiserver.key")),
        format!("--client-ca-file={}", p("ca.crt")),
        format!("--service-account-issuer={SERVICE_ACCOUNT_ISSUER}"),
        format!("--service-account-key-file={}", p("sa.pub")),
        format!("--service-account-signing-key-file={}", p("sa.key")),
        format!("--service-cluster-ip-range={}", spec.service_cidrs.join(",")),
        "--authorization-mode=Node,RBAC".into(),
        // Our daemon, OVS and the speaker run privileged (as Kube-OVN's DaemonSets do).
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        format!("--watch-cache={}", spec.watch_cache),
    ];
    if !spec.disabled_admission_plugins.is_empty() {
        args.push(format!(
            "--disable-admission-plugins={}",
            spec.disabled_admission_plugins.join(",")
        ));
    }
    if !spec.endpoint_reconciler {
        args.push("--endpoint-reconciler-type=none".into());
    }
    if spec.kubelet_client {
        args.push(format!(
            "--kubelet-client-certificate={}",
            p("apiserver-kubelet-client.crt")
        ));
        args.push(format!(
            "--kubelet-client-key={}",
            p("apiserver-kubelet-client.key")
        ));
        // Nodes' names are not in any DNS here (nor on many bare-metal clusters).
        args.push("--kubelet-preferred-address-types=InternalIP,Hostname".into());
    }
    if let Some(audit) = &spec.audit {
        args.push(format!("--audit-policy-file={}", audit.policy.display()));
        args.push(format!("--audit-log-path={}", audit.log.display()));
        // Written as each request completes, so a test or `status` reading it sees every
        // request made before it looked.
        args.push("--audit-log-mode=blocking".into());
    }
    args
}

/// kube-controller-manager with `controllers` (its `--controllers` list: `*` for all).
pub fn controller_manager_args(kubeconfig: &Path, pki: &Pki, controllers: &[&str]) -> Vec<String> {
    let p = |f: &str| pki.path(f).display().to_string();
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--authentication-kubeconfig={}", kubeconfig.display()),
        format!("--authorization-kubeconfig={}", kubeconfig.display()),
        format!("--controllers={}", controllers.join(",")),
        // Each controller acts as its own ServiceAccount, so RBAC sees who did what.
        "--use-service-account-credentials=true".into(),
        format!("--service-account-private-key-file={}", p("sa.key")),
        format!("--root-ca-file={}", p("ca.crt")),
        format!("--cluster-signing-cert-file={}", p("ca.crt")),
        format!("--cluster-signing-key-file={}", p("ca.key")),
        "--leader-elect=false".into(),
        // Its health endpoint is not used; no port of its own to collide with another lab's.
        "--secure-port=0".into(),
        "--profiling=false".into(),
    ]
}

pub fn scheduler_args(kubeconfig: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--authentication-kubeconfig={}", kubeconfig.display()),
        format!("--authorization-kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--secure-port=0".into(),
        "--profiling=false".into(),
    ]
}

/// The audit policy: every request, with who made it and how it was answered (the Metadata
/// level), not its body.
pub const AUDIT_POLICY: &str = "\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apiserver_flags_name_each_file_of_the_pki() {
        let pki = Pki::open(Path::new("/pki"));
        let spec = ApiServerSpec {
            etcd: "127.0.0.1:2379".parse().unwrap(),
            etcd_prefix: "/t1".into(),
            bind: "127.0.0.1".parse().unwrap(),
            port: 6443,
            service_cidrs: vec!["10.96.0.0/16".into(), "fd00:10:96::/112".into()],
            disabled_admission_plugins: vec!["ServiceAccount".into()],
            audit: None,
            watch_cache: true,
            endpoint_reconciler: false,
            kubelet_client: false,
        };
        let args = apiserver_args(&spec, &pki);
        for expected in [
            "--etcd-servers=http://127.0.0.1:2379",
            "--etcd-prefix=/t1",
            "--client-ca-file=/pki/ca.crt",
            "--service-account-signing-key-file=/pki/sa.key",
            "--service-cluster-ip-range=10.96.0.0/16,fd00:10:96::/112",
            "--authorization-mode=Node,RBAC",
            "--disable-admission-plugins=ServiceAccount",
            "--endpoint-reconciler-type=none",
        ] {
            assert!(
                args.iter().any(|a| a == expected),
                "{expected} missing from {args:?}"
            );
        }
        assert!(!args.iter().any(|a| a.starts_with("--audit")));
    }
}
