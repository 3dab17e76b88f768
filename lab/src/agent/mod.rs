//! What a real cluster has beyond the control plane, and the lab lacks: `kube-ovn-lab agent`
//! runs it in one process in the control-plane namespace (where the API is reachable). The
//! scheduling, Deployments, EndpointSlices and ClusterIPs are upstream kube-scheduler's and
//! kube-controller-manager's (`up` runs them); the agent keeps:
//!
//! ```text
//!   kubelet × N ─── per node: Node registration and heartbeats (Node status and its Lease in
//!                   kube-node-lease), pod sandboxes through the node's CNI conflist, netexec
//!                   servers, pod status
//!   load balancers ─ LoadBalancer ingress IPs from the lab's pool (MetalLB's job on a cluster)
//! ```
//!
//! Each task watches what it needs and is level-triggered, so a restarted agent converges.

pub mod events;
mod informer;
pub mod kubelet;
pub mod load_balancers;
pub mod names;

use std::collections::BTreeMap;

use crate::cluster::topology::{LOAD_BALANCER_CIDR, Topology};

/// Now, in the seconds-precision RFC 3339 form of `metav1.Time`.
pub fn now() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// What the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub kubelets: Vec<kubelet::KubeletConfig>,
    /// Where LoadBalancer ingress IPs come from; `None`: none are given.
    pub load_balancer_pool: Option<ipnet::IpNet>,
}

impl AgentConfig {
    /// The agent of lab `t`: a kubelet per node, every node labelled for the speaker.
    pub fn for_lab(t: &Topology) -> Self {
        let kubelets = t
            .nodes
            .iter()
            .map(|n| {
                let dir = t.node_dir(&n.name);
                kubelet::KubeletConfig {
                    node_name: n.name.clone(),
                    node_netns: std::path::Path::new("/run/netns").join(&n.netns),
                    internal_ips: vec![n.ip.into()],
                    labels: BTreeMap::from([("ovn.kubernetes.io/bgp".to_owned(), "true".to_owned())]),
                    cni_conf_dir: dir.join("net.d"),
                    cni_bin_dir: dir.join("bin"),
                    netns_prefix: t.pod_netns_prefix(),
                    sandbox_dir: t.sandbox_dir(),
                    runtime: kubelet::PodRuntime::Direct,
                }
            })
            .collect();
        Self {
            kubelets,
            load_balancer_pool: Some(
                LOAD_BALANCER_CIDR
                    .parse()
                    .expect("the lab's load balancer CIDR is valid"),
            ),
        }
    }

    /// The same agent, its kubelets making pods through each node's containerd (`up --runtime
    /// containerd` starts them: [`crate::cluster::containerd`]).
    #[must_use]
    pub fn with_containerd(mut self, t: &Topology) -> Self {
        for k in &mut self.kubelets {
            if let Some(node) = t.node(&k.node_name) {
                k.runtime = kubelet::PodRuntime::Containerd {
                    socket: crate::cluster::containerd::instance(t, node).socket(),
                    log_dir: crate::cluster::containerd::pod_log_dir(t),
                };
            }
        }
        self
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("kubelet of {node}: {source}")]
    Kubelet { node: String, source: kubelet::Error },
    #[error("{task}: {message}")]
    Task { task: &'static str, message: String },
}

/// Runs every task until one fails (or the future is dropped).
pub async fn run(client: kube::Client, config: AgentConfig) -> Result<(), AgentError> {
    let mut tasks = tokio::task::JoinSet::new();
    for k in config.kubelets {
        let client = client.clone();
        tasks.spawn(async move {
            let node = k.node_name.clone();
            kubelet::run(client, k)
                .await
                .map_err(|source| AgentError::Kubelet { node, source })
        });
    }
    if let Some(pool) = config.load_balancer_pool {
        tasks.spawn(async move {
            load_balancers::run(client, pool).await;
            Ok(())
        });
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => {
                return Err(AgentError::Task {
                    task: "agent",
                    message: e.to_string(),
                });
            }
        }
    }
    Ok(())
}
