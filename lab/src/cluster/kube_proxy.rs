//! A node's kube-proxy (`up --install manifests`): NodePorts, and ClusterIPs reached from the
//! node's own network namespace, as on a Kube-OVN cluster, which runs kube-proxy beside
//! Kube-OVN for exactly those (Pods reach Services through OVN's load balancers on their logical
//! switch; kube-proxy never sees that traffic). Upstream's binary in nftables mode, run in the
//! node's machine as a node service beside the kubelet, with its own client certificate
//! (`system:kube-proxy`, which kube-apiserver's bootstrap RBAC binds to `system:node-proxier`).

use super::machine;
use super::process::Launch;
use super::topology::{NodePlan, Topology, kube_proxy_identity};

pub fn component(node: &str) -> String {
    format!("{node}-kube-proxy")
}

/// The KubeProxyConfiguration of `node`: nftables mode; NodePorts on the node's fabric address
/// only; conntrack sysctls left alone (a network namespace cannot change the host's table
/// size). No `clusterCIDR`: pods never reach Services through kube-proxy here (OVN's load
/// balancers answer them first), and NodePort traffic is masqueraded whatever its source.
pub fn config_yaml(t: &Topology, node: &NodePlan) -> String {
    format!(
        "\
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: nftables
hostnameOverride: {name}
nodePortAddresses: [\"{ip}/32\"]
clientConnection:
  kubeconfig: {kubeconfig}
healthzBindAddress: {ip}:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
",
        name = node.name,
        ip = node.ip,
        kubeconfig = t
            .control_plane()
            .kubeconfig(&kube_proxy_identity().stem)
            .display(),
    )
}

pub fn config_file(t: &Topology, node: &NodePlan) -> std::path::PathBuf {
    t.node_dir(&node.name).join("kube-proxy.yaml")
}

pub fn launch(t: &Topology, node: &NodePlan) -> Launch {
    machine::launch(
        t,
        node,
        component(&node.name),
        crate::kubernetes::bin_dir().join("kube-proxy"),
        vec![format!("--config={}", config_file(t, node).display())],
    )
}

#[cfg(test)]
mod tests {
    use super::super::topology::TorKind;
    use super::*;

    #[test]
    fn kube_proxy_serves_node_ports_on_the_fabric_address_in_nftables_mode() {
        let t = Topology::new("t", 2, TorKind::Bird, std::path::Path::new("/l")).unwrap();
        let config: serde_json::Value = serde_saphyr::from_str(&config_yaml(&t, &t.nodes[1])).unwrap();
        assert_eq!(config["mode"], "nftables");
        assert_eq!(config["hostnameOverride"], "node2");
        assert_eq!(config["nodePortAddresses"][0], "172.30.0.12/32");
        assert_eq!(
            config["clientConnection"]["kubeconfig"],
            "/l/t/cp/kube-proxy.kubeconfig"
        );
    }
}
