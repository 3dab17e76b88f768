//! The Node object, as a kubelet registers it: created if missing with its labels, then its
//! status written through the `status` subresource (addresses, conditions, capacity, nodeInfo).
//! Conditions other kubelet-owned types (set by others, e.g. `NetworkUnavailable`) are kept.
//!
//! Then the heartbeats, as a kubelet sends them: its Lease `kube-node-lease/<node>` renewed
//! every [`HEARTBEAT`] (kube-controller-manager's node-lifecycle controller reads a node's health
//! from that Lease's `renewTime`, and taints and evicts a node whose Lease is older than its
//! grace period, 40 s by default), and the Node's status posted again with fresh
//! `lastHeartbeatTime`s (the Ready condition).

use std::collections::BTreeMap;
use std::net::IpAddr;

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::KubeletConfig;

/// How often a kubelet renews its Lease and posts its Node's status (the kubelet's
/// `nodeLeaseDurationSeconds` of 40 s divided by four, its default renew interval, and its
/// `nodeStatusUpdateFrequency`).
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// The Lease's `leaseDurationSeconds` (the kubelet's default `nodeLeaseDurationSeconds`).
pub const LEASE_SECONDS: i32 = 40;

/// Where the kubelets' Leases are.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The kubelet version the nodes report: the release the lab's control plane runs (a node
/// newer than its API server is outside Kubernetes' version skew policy).
pub fn kubelet_version() -> &'static str {
    crate::kubernetes::version()
}

/// What the node reports about the machine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostFacts {
    pub kernel_version: String,
    pub os_image: String,
    pub machine_id: String,
    pub boot_id: String,
    pub cpus: usize,
    pub memory_kib: u64,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

impl HostFacts {
    /// This machine's (the lab's nodes share its kernel).
    pub fn of_this_host() -> Self {
        let os_image = read_trimmed("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map_or_else(|| "Linux".into(), |v| v.trim_matches('"').to_owned());
        let memory_kib = read_trimmed("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0);
        Self {
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image,
            machine_id: read_trimmed("/etc/machine-id"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            cpus: std::thread::available_parallelism().map_or(1, usize::from),
            memory_kib,
        }
    }
}

/// Go's name for this architecture, as `kubernetes.io/arch` and nodeInfo spell it.
pub fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

/// The labels the kubelet sets on its Node.
pub fn labels(config: &KubeletConfig) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::from([
        ("kubernetes.io/hostname".to_owned(), config.node_name.clone()),
        ("kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("kubernetes.io/arch".to_owned(), go_arch().to_owned()),
        ("beta.kubernetes.io/os".to_owned(), "linux".to_owned()),
        ("beta.kubernetes.io/arch".to_owned(), go_arch().to_owned()),
    ]);
    labels.extend(config.labels.clone());
    labels
}

/// The Node's status given the current one (for condition transition times) at `now`.
pub fn status(config: &KubeletConfig, current: Option<&Value>, facts: &HostFacts, now: &str) -> Value {
    let mut addresses: Vec<Value> = config
        .internal_ips
        .iter()
        .map(|ip: &IpAddr| json!({"type": "InternalIP", "address": ip.to_string()}))
        .collect();
    addresses.push(json!({"type": "Hostname", "address": config.node_name}));
    let old: Vec<Value> = current
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ours = [
        (
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure",
        ),
        (
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
        ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ];
    let mut conditions: Vec<Value> = old
        .iter()
        .filter(|c| !ours.iter().any(|(t, ..)| c["type"] == *t))
        .cloned()
        .collect();
    for (type_, status, reason, message) in ours {
        let since = old
            .iter()
            .find(|c| c["type"] == type_ && c["status"] == status)
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now));
        conditions.push(
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                               "lastHeartbeatTime": now, "lastTransitionTime": since}),
        );
    }
    let resources = json!({"cpu": facts.cpus.to_string(), "memory": format!("{}Ki", facts.memory_kib),
                           "pods": "110"});
    json!({
        "addresses": addresses,
        "conditions": conditions,
        "capacity": resources,
        "allocatable": resources,
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": facts.machine_id, "systemUUID": facts.machine_id, "bootID": facts.boot_id,
            "kernelVersion": facts.kernel_version, "osImage": facts.os_image,
            "containerRuntimeVersion": format!("kube-ovn-lab://{}", env!("CARGO_PKG_VERSION")),
            "kubeletVersion": kubelet_version(), "kubeProxyVersion": "",
            "operatingSystem": "linux", "architecture": go_arch(),
        },
    })
}

/// The node's Lease, held by the node and owned by its Node (so the garbage collector removes
/// it with the Node, as for a kubelet's), renewed at `renew_time` (`metav1.MicroTime`).
pub fn lease(node: &str, node_uid: &str, renew_time: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}],
        },
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": renew_time,
        },
    })
}

/// Now, as `metav1.MicroTime` (RFC 3339 with microseconds).
fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// Renews (or creates) the node's Lease.
pub async fn renew_lease(client: &Client, node_name: &str) -> Result<(), kube::Error> {
    let nodes: Api<Node> = Api::all(client.clone());
    let uid = nodes.get(node_name).await?.uid().unwrap_or_default();
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let body = lease(node_name, &uid, &now_micro());
    if leases.get_opt(node_name).await?.is_some() {
        leases
            .patch(
                node_name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": body["spec"]})),
            )
            .await?;
    } else {
        let lease: Lease = serde_json::from_value(body).map_err(kube::Error::SerdeError)?;
        leases.create(&PostParams::default(), &lease).await?;
    }
    Ok(())
}

/// Creates or updates the Node: labels on the object, the rest through `status`.
pub async fn register(client: &Client, config: &KubeletConfig) -> Result<(), kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let labels = labels(config);
    let node = if let Some(node) = api.get_opt(&config.node_name).await? {
        node
    } else {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": config.node_name, "labels": labels},
        }))
        .map_err(kube::Error::SerdeError)?;
        match api.create(&PostParams::default(), &node).await {
            Ok(node) => node,
            // Made meanwhile (another kubelet of the same name?): take it as it is.
            Err(kube::Error::Api(s)) if s.code == 409 => api.get(&config.node_name).await?,
            Err(e) => return Err(e),
        }
    };
    let params = PatchParams::default();
    if labels.iter().any(|(k, v)| node.labels().get(k) != Some(v)) {
        api.patch(
            &config.node_name,
            &params,
            &Patch::Merge(json!({"metadata": {"labels": labels}})),
        )
        .await?;
    }
    let current = node.status.as_ref().and_then(|s| serde_json::to_value(s).ok());
    let now = crate::agent::now();
    let status = status(config, current.as_ref(), &HostFacts::of_this_host(), &now);
    api.patch_status(
        &config.node_name,
        &params,
        &Patch::Merge(json!({"status": status})),
    )
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_held_and_owned_by_its_node() {
        let l = lease("node1", "u-1", "2026-01-01T00:00:01.000001Z");
        let parsed: Lease = serde_json::from_value(l.clone()).unwrap();
        let spec = parsed.spec.unwrap();
        assert_eq!(spec.holder_identity.as_deref(), Some("node1"));
        assert_eq!(spec.lease_duration_seconds, Some(LEASE_SECONDS));
        assert!(spec.renew_time.is_some());
        assert_eq!(parsed.metadata.namespace.as_deref(), Some("kube-node-lease"));
        let owner = &parsed.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Node", "node1", "u-1")
        );
        // Renewed well within its duration: a late heartbeat or two does not expire it.
        assert!(HEARTBEAT.as_secs() * 3 < u64::try_from(LEASE_SECONDS).unwrap());
        assert!(now_micro().parse::<jiff::Timestamp>().is_ok());
    }

    fn config() -> KubeletConfig {
        KubeletConfig {
            node_name: "node1".into(),
            node_netns: "/run/netns/x".into(),
            internal_ips: vec!["172.30.0.11".parse().unwrap(), "fd00:30::11".parse().unwrap()],
            labels: BTreeMap::from([("ovn.kubernetes.io/bgp".into(), "true".into())]),
            cni_conf_dir: "/etc/cni/net.d".into(),
            cni_bin_dir: "/opt/cni/bin".into(),
            netns_prefix: "kol-lab-p".into(),
            sandbox_dir: "/tmp/s".into(),
            runtime: super::super::PodRuntime::Direct,
        }
    }

    #[test]
    fn the_node_has_its_labels_addresses_and_ready_condition() {
        let c = config();
        let l = labels(&c);
        assert_eq!(l["kubernetes.io/hostname"], "node1");
        assert_eq!(l["kubernetes.io/os"], "linux");
        assert_eq!(l["ovn.kubernetes.io/bgp"], "true");
        let s = status(&c, None, &HostFacts::default(), "2026-01-01T00:00:01Z");
        assert_eq!(
            s["addresses"],
            json!([{"type": "InternalIP", "address": "172.30.0.11"},
                   {"type": "InternalIP", "address": "fd00:30::11"},
                   {"type": "Hostname", "address": "node1"}])
        );
        let ready = s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Ready")
            .unwrap();
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (&json!("True"), &json!("KubeletReady"))
        );
        // Again later: the transition time stays, the heartbeat moves, others' conditions stay.
        let mut current = s.clone();
        current["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "NetworkUnavailable", "status": "False"}));
        let later = status(&c, Some(&current), &HostFacts::default(), "2026-01-01T00:00:09Z");
        let conditions = later["conditions"].as_array().unwrap();
        let ready = conditions.iter().find(|c| c["type"] == "Ready").unwrap();
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:01Z");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:09Z");
        assert!(conditions.iter().any(|c| c["type"] == "NetworkUnavailable"));
        assert_eq!(later["nodeInfo"]["kubeletVersion"], crate::kubernetes::version());
    }
}
