//! A node's kubelet: its configuration file and command line, as pure functions of the node.
//!
//! What the lab's machines need that a kubeadm node would not:
//! - cgroup v1 with the `cgroupfs` driver (no systemd here) and a cgroup root of its own per node
//!   (`/kube-ovn-lab/<lab>/<node>`), so several kubelets on one host never share `kubepods`;
//!   `failCgroupV1: false` says so explicitly (1.35's default refuses cgroup v1);
//! - no eviction and no image garbage collection: the nodes share one disk and one memory, and
//!   a kubelet that saw the host's usage would evict pods another node caused;
//! - no swap check and no `enforceNodeAllocatable` (nothing reserved on a shared host).
//!
//! The rest is a production kubelet: client certificate `system:node:<name>` in `system:nodes`
//! (Node authorization and the NodeRestriction admission plugin apply), x509 and webhook
//! authentication with anonymous requests refused, webhook authorization (kube-apiserver's
//! `kubectl exec`/`logs` go through RBAC), the read-only port off.

use std::net::IpAddr;
use std::path::PathBuf;

use super::pki::ClientIdentity;

/// One node's kubelet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeletSpec {
    /// The Node's name (also its hostname in its machine).
    pub node_name: String,
    /// The InternalIP it reports (the address kube-apiserver reaches it at).
    pub node_ip: IpAddr,
    /// Its configuration file (written from [`Self::config_yaml`]).
    pub config_file: PathBuf,
    /// Its kubeconfig (its client certificate).
    pub kubeconfig: PathBuf,
    /// The cluster CA: client certificates it accepts (kube-apiserver's).
    pub client_ca: PathBuf,
    /// The CRI socket of the node's containerd.
    pub runtime_socket: PathBuf,
    /// `/kube-ovn-lab/<lab>/<node>` (a path in every cgroup hierarchy).
    pub cgroup_root: String,
    /// Labels it registers the Node with.
    pub labels: Vec<(String, String)>,
}

/// The identity of node `name`'s kubelet (`kubelet-<name>.crt` in the PKI).
pub fn identity(node_name: &str) -> ClientIdentity {
    ClientIdentity::new(
        &format!("kubelet-{node_name}"),
        &format!("system:node:{node_name}"),
        Some("system:nodes"),
    )
}

/// The identity kube-apiserver presents to kubelets (`kubectl exec`, `logs`, `port-forward`),
/// bound to `system:kubelet-api-admin` by [`APISERVER_KUBELET_BINDING`].
pub fn apiserver_client_identity() -> ClientIdentity {
    ClientIdentity::new("apiserver-kubelet-client", "kube-apiserver-kubelet-client", None)
}

/// What kubeadm binds for the same user: kube-apiserver may use every kubelet API.
pub const APISERVER_KUBELET_BINDING: &str = "\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: kube-apiserver-kubelet-client
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: system:kubelet-api-admin
subjects:
  - apiGroup: rbac.authorization.k8s.io
    kind: User
    name: kube-apiserver-kubelet-client
";

impl KubeletSpec {
    /// The KubeletConfiguration file.
    pub fn config_yaml(&self) -> String {
        format!(
            "\
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
cgroupRoot: {cgroup_root}
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: true}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: Webhook}}
readOnlyPort: 0
enforceNodeAllocatable: []
evictionHard: {{memory.available: \"0%\", nodefs.available: \"0%\", nodefs.inodesFree: \"0%\", imagefs.available: \"0%\"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
localStorageCapacityIsolation: false
# Status to the API every 10 s, as by default; leases every 10 s (a quarter of 40 s).
nodeStatusUpdateFrequency: 10s
nodeLeaseDurationSeconds: 40
",
            cgroup_root = self.cgroup_root,
            socket = self.runtime_socket.display(),
            ca = self.client_ca.display(),
        )
    }

    /// The command line (paths are the machine's: `/var/lib/kubelet` is the node's own there).
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            format!("--config={}", self.config_file.display()),
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--hostname-override={}", self.node_name),
            format!("--node-ip={}", self.node_ip),
            "--root-dir=/var/lib/kubelet".into(),
            "--cert-dir=/var/lib/kubelet/pki".into(),
        ];
        if !self.labels.is_empty() {
            let labels: Vec<String> = self.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            args.push(format!("--node-labels={}", labels.join(",")));
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> KubeletSpec {
        KubeletSpec {
            node_name: "node2".into(),
            node_ip: "172.30.0.12".parse().unwrap(),
            config_file: "/lab/nodes/node2/kubelet.yaml".into(),
            kubeconfig: "/lab/cp/kubelet-node2.kubeconfig".into(),
            client_ca: "/lab/cp/pki/ca.crt".into(),
            runtime_socket: "/lab/nodes/node2/containerd/containerd.sock".into(),
            cgroup_root: "/kube-ovn-lab/lab/node2".into(),
            labels: vec![("kube-ovn/role".into(), "master".into())],
        }
    }

    #[test]
    fn a_kubelet_runs_as_its_node_with_its_own_cgroup_root() {
        let s = spec();
        let args = s.args();
        for expected in [
            "--hostname-override=node2",
            "--node-ip=172.30.0.12",
            "--kubeconfig=/lab/cp/kubelet-node2.kubeconfig",
            "--node-labels=kube-ovn/role=master",
        ] {
            assert!(args.iter().any(|a| a == expected), "{expected} in {args:?}");
        }
        let config: serde_json::Value = serde_saphyr::from_str(&s.config_yaml()).unwrap();
        assert_eq!(config["cgroupRoot"], "/kube-ovn-lab/lab/node2");
        assert_eq!(config["cgroupDriver"], "cgroupfs");
        assert_eq!(
            config["containerRuntimeEndpoint"],
            "unix:///lab/nodes/node2/containerd/containerd.sock"
        );
        assert_eq!(config["authentication"]["anonymous"]["enabled"], false);
        assert_eq!(config["authorization"]["mode"], "Webhook");
        assert_eq!(config["readOnlyPort"], 0);
        assert_eq!(identity("node2").user, "system:node:node2");
        assert_eq!(identity("node2").group.as_deref(), Some("system:nodes"));
    }
}
