//! The kubelet stand-in end to end, without OVN: a "node" network namespace, Debian's reference
//! CNI plugins (`bridge` + `host-local` from /usr/lib/cni) in a conflist written for the test,
//! and a real kube-apiserver (the fixture's). The Node is registered Ready with the built
//! Kubernetes' kubelet version and heartbeats: its Lease in `kube-node-lease` is renewed. Pods get sandboxes with addresses, their status says Running and
//! Ready, their netexec servers answer each other over the bridge (HTTP `/hostname` and
//! `/clientip`, UDP `hostname`); deleting a pod (graceful: the API server keeps it until the
//! kubelet deletes it with grace 0) runs DEL (host-local frees the address) and removes its
//! namespace, record and the pod; a kubelet restarted after a pod was force-deleted while it was
//! down tears the orphan down and adopts the others (their servers answer again); a failing ADD is
//! reported as an Event and retried until it works.
//!
//! Needs root (network namespaces) and /usr/lib/cni (`containernetworking-plugins`).

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::agent::{Task, eventually, pod, spawn};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use kube_ovn_dataplane::Netns;
use kube_ovn_lab::agent::kubelet::{self, KubeletConfig, netns_name};
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use kube_ovn_lab::netexec;
use serde_json::json;

const CNI_BIN: &str = "/usr/lib/cni";
const T: Duration = Duration::from_secs(5);

/// A node: its namespace, conf dir and IPAM dir; dropped with the test.
struct TestNode {
    /// Held for its lifetime: dropping it deletes the namespace.
    _netns: kube_ovn_testkit::Netns,
    dir: tempfile::TempDir,
    config: KubeletConfig,
}

impl TestNode {
    fn new(subnet: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        assert!(
            Path::new(CNI_BIN).join("bridge").exists() && Path::new(CNI_BIN).join("host-local").exists(),
            "{CNI_BIN}/bridge and host-local are needed (Debian's containernetworking-plugins)"
        );
        let netns =
            kube_ovn_testkit::Netns::create("kol-kl-node").expect("root: creating the node's namespace");
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("net.d");
        std::fs::create_dir(&conf_dir).unwrap();
        let node = Self {
            config: KubeletConfig {
                node_name: "node1".into(),
                node_netns: netns.path(),
                internal_ips: vec!["172.30.0.11".parse().unwrap()],
                labels: BTreeMap::from([("ovn.kubernetes.io/bgp".into(), "true".into())]),
                cni_conf_dir: conf_dir,
                cni_bin_dir: CNI_BIN.into(),
                netns_prefix: format!(
                    "kol-kt{}x{}-p",
                    std::process::id(),
                    NEXT.fetch_add(1, Ordering::Relaxed)
                ),
                sandbox_dir: dir.path().join("sandboxes"),
                runtime: kubelet::PodRuntime::Direct,
            },
            _netns: netns,
            dir,
        };
        node.write_conflist(subnet);
        node
    }

    fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam")
    }

    fn write_conflist(&self, subnet: &str) {
        let conf = json!({
            "cniVersion": "1.0.0",
            "name": "kol-test",
            "plugins": [{
                "type": "bridge", "bridge": "kolbr0", "isGateway": true, "ipMasq": false,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": subnet}]],
                         "dataDir": self.ipam_dir()},
            }],
        });
        std::fs::write(
            self.config.cni_conf_dir.join("10-kol-test.conflist"),
            serde_json::to_vec_pretty(&conf).unwrap(),
        )
        .unwrap();
    }

    fn start(&self, client: &kube::Client) -> Task {
        spawn("kubelet", kubelet::run(client.clone(), self.config.clone()))
    }

    /// The addresses host-local has handed out (a file per address).
    fn allocated(&self) -> Vec<String> {
        let dir = self.ipam_dir().join("kol-test");
        let mut ips: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.parse::<IpAddr>().is_ok())
                    .collect()
            })
            .unwrap_or_default();
        ips.sort();
        ips
    }

    fn records(&self) -> Vec<String> {
        let mut files: Vec<String> = std::fs::read_dir(&self.config.sandbox_dir)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        files.sort();
        files
    }

    fn pod_netns(&self, pod: &Pod) -> PathBuf {
        Path::new(kubelet::NETNS_DIR).join(netns_name(&self.config.netns_prefix, &pod.uid().unwrap()))
    }
}

/// A failed test leaves no pod namespaces behind (the node's own goes with `_netns`).
impl Drop for TestNode {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(kubelet::NETNS_DIR) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(&self.config.netns_prefix) {
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", &name])
                    .status();
            }
        }
    }
}

fn netexec_pod() -> serde_json::Value {
    json!({"nodeName": "node1", "containers": [{"name": "netexec", "image": "kube-ovn-lab/netexec:1.0",
        "ports": [{"containerPort": 8080}, {"containerPort": 8081, "protocol": "UDP"}]}]})
}

/// Waits until the pod is Running and Ready with an address; returns it.
async fn running(api: &Api<Pod>, name: &str) -> (Pod, IpAddr) {
    eventually(&format!("pod {name} to be Running and Ready"), || async {
        let p = api.get(name).await.map_err(|e| e.to_string())?;
        let status = p.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        match (status.phase.as_deref(), ready, status.pod_ip.as_deref()) {
            (Some("Running"), true, Some(ip)) => {
                Ok((p.clone(), ip.parse::<IpAddr>().map_err(|e| e.to_string())?))
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

async fn gone(what: &str, path: PathBuf) {
    eventually(what, || {
        let path = path.clone();
        async move {
            if path.exists() {
                Err(format!("{} exists", path.display()))
            } else {
                Ok(())
            }
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_sandboxes_answer_each_other_and_are_cleaned_up_also_across_restarts() {
    let node = TestNode::new("10.244.7.0/24");
    let server = ApiServer::start_with(ApiServerOptions::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let kubelet = node.start(&client);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // The Node.
    let registered = eventually("node1 to be registered Ready", || async {
        let n = Api::<Node>::all(client.clone())
            .get("node1")
            .await
            .map_err(|e| e.to_string())?;
        let ready = n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
        if ready { Ok(n) } else { Err("not Ready".into()) }
    })
    .await;
    assert_eq!(registered.labels()["kubernetes.io/hostname"], "node1");
    assert_eq!(registered.labels()["kubernetes.io/os"], "linux");
    assert_eq!(registered.labels()["ovn.kubernetes.io/bgp"], "true");
    let status = registered.status.unwrap();
    let addresses = status.addresses.unwrap();
    assert_eq!(
        (addresses[0].type_.as_str(), addresses[0].address.as_str()),
        ("InternalIP", "172.30.0.11")
    );
    assert_eq!(
        status.node_info.unwrap().kubelet_version,
        kube_ovn_lab::kubernetes::version()
    );
    // Its Lease, held by the node and owned by the Node (gone with it).
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let first_renewal = eventually("node1's Lease", || async {
        let lease = leases.get("node1").await.map_err(|e| e.to_string())?;
        let spec = lease.spec.clone().unwrap_or_default();
        assert_eq!(spec.holder_identity.as_deref(), Some("node1"));
        assert_eq!(spec.lease_duration_seconds, Some(40));
        let owner = &lease.metadata.owner_references.clone().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Node", "node1"));
        spec.renew_time
            .map(|time| time.0)
            .ok_or_else(|| "no renewTime".to_owned())
    })
    .await;

    // Two pods on the bridge.
    pod(&client, "default", "a", json!({}), netexec_pod()).await;
    pod(&client, "default", "b", json!({}), netexec_pod()).await;
    let (a, a_ip) = running(&pods, "a").await;
    let (b, b_ip) = running(&pods, "b").await;
    assert_ne!(a_ip, b_ip);
    for ip in [a_ip, b_ip] {
        assert!(ip.to_string().starts_with("10.244.7."), "{ip}");
    }
    let status = b.status.clone().unwrap();
    assert_eq!(status.host_ip.as_deref(), Some("172.30.0.11"));
    assert_eq!(status.pod_ips.unwrap()[0].ip, b_ip.to_string());
    let container = &status.container_statuses.unwrap()[0];
    assert!(container.ready && container.state.as_ref().unwrap().running.is_some());
    assert_eq!(container.image, "kube-ovn-lab/netexec:1.0");
    assert!(node.pod_netns(&a).exists() && node.pod_netns(&b).exists());
    assert_eq!(node.records().len(), 2, "{:?}", node.records());
    assert_eq!(node.allocated(), {
        let mut v = vec![a_ip.to_string(), b_ip.to_string()];
        v.sort();
        v
    });

    // a asks b, from a's namespace, over the node's bridge.
    let a_ns = Netns::open(node.pod_netns(&a)).unwrap();
    let to_b = SocketAddr::new(b_ip, 8080);
    let answer = netexec::http_get_in(&a_ns, to_b, "/hostname", T).await.unwrap();
    assert_eq!(answer.body, "b");
    let seen = netexec::http_get_in(&a_ns, to_b, "/clientip", T)
        .await
        .unwrap()
        .body;
    assert_eq!(
        seen.rsplit_once(':').unwrap().0,
        a_ip.to_string(),
        "b saw a's address"
    );
    let udp = netexec::udp_request_in(&a_ns, SocketAddr::new(b_ip, 8081), "hostname", T)
        .await
        .unwrap();
    assert_eq!(udp, "b");
    drop(a_ns);

    // A hostNetwork pod: the node's address, no sandbox.
    pod(
        &client,
        "default",
        "host",
        json!({}),
        json!({"nodeName": "node1", "hostNetwork": true}),
    )
    .await;
    let (_, host_ip) = running(&pods, "host").await;
    assert_eq!(host_ip.to_string(), "172.30.0.11");
    assert_eq!(node.records().len(), 2);

    // Deleting a: DEL (host-local frees its address), namespace and record gone.
    pods.delete("a", &DeleteParams::default()).await.unwrap();
    gone("a's namespace to go", node.pod_netns(&a)).await;
    eventually("a's record and address to go", || async {
        let (records, allocated) = (node.records(), node.allocated());
        if records.len() == 1 && allocated == [b_ip.to_string()] {
            Ok(())
        } else {
            Err(format!("records {records:?}, allocated {allocated:?}"))
        }
    })
    .await;

    // A pod held by a finalizer: stopped (sandbox gone, not Ready), then deleted with grace 0.
    let mut held = netexec_pod();
    held["containers"][0]["ports"] = json!([]);
    pod(&client, "default", "held", json!({}), held).await;
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": ["test/hold"]}})),
    )
    .await
    .unwrap();
    let (held_pod, _) = running(&pods, "held").await;
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    gone("held's namespace to go", node.pod_netns(&held_pod)).await;
    eventually("held to be reported not Ready", || async {
        let p = pods.get("held").await.map_err(|e| e.to_string())?;
        let ready = p
            .status
            .unwrap()
            .conditions
            .unwrap()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        if ready.status == "False" {
            Ok(())
        } else {
            Err(ready.status)
        }
    })
    .await;
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();

    // The kubelet goes away; meanwhile b is force-deleted, c created, e replaced by a pod of the same
    // name (another uid); d stays.
    pod(&client, "default", "d", json!({}), netexec_pod()).await;
    let (d, d_ip) = running(&pods, "d").await;
    pod(&client, "default", "e", json!({}), netexec_pod()).await;
    let (old_e, old_e_ip) = running(&pods, "e").await;
    drop(kubelet);
    // With no kubelet to finish a graceful deletion, they are force-deleted (grace 0, as
    // `kubectl delete --force --grace-period=0`): gone from the API at once.
    let force = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    pods.delete("b", &force).await.unwrap();
    pods.delete("e", &force).await.unwrap();
    pod(&client, "default", "e", json!({}), netexec_pod()).await;
    pod(&client, "default", "c", json!({}), netexec_pod()).await;
    assert!(node.pod_netns(&b).exists(), "nobody tore b down yet");
    let _kubelet = node.start(&client);
    gone("the orphan b's namespace to go", node.pod_netns(&b)).await;
    gone("the replaced e's namespace to go", node.pod_netns(&old_e)).await;
    let (c, _) = running(&pods, "c").await;
    let (new_e, _) = running(&pods, "e").await;
    assert!(node.pod_netns(&new_e).exists() && new_e.uid() != old_e.uid());
    eventually("b's and the old e's records and addresses to go", || async {
        let allocated = node.allocated();
        let freed = !allocated.contains(&b_ip.to_string()) && !allocated.contains(&old_e_ip.to_string());
        if freed && allocated.len() == 3 && node.records().len() == 3 {
            Ok(())
        } else {
            Err(format!("records {:?}, allocated {allocated:?}", node.records()))
        }
    })
    .await;
    // d was adopted: same sandbox, its server answers again (from c).
    assert!(node.pod_netns(&d).exists());
    let c_ns = Netns::open(node.pod_netns(&c)).unwrap();
    let answer = eventually("d's server to answer again", || async {
        netexec::http_get_in(&c_ns, SocketAddr::new(d_ip, 8080), "/hostname", T)
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(answer.body, "d");
    assert_eq!(running(&pods, "d").await.1, d_ip, "same address");
    drop(c_ns);

    // Everything goes with its pods.
    for name in ["c", "d", "e", "host"] {
        pods.delete(name, &DeleteParams::default()).await.unwrap();
    }
    gone("c's namespace to go", node.pod_netns(&c)).await;
    gone("d's namespace to go", node.pod_netns(&d)).await;
    gone("e's namespace to go", node.pod_netns(&new_e)).await;
    eventually("every record and address to go", || async {
        if node.records().is_empty() && node.allocated().is_empty() {
            Ok(())
        } else {
            Err(format!("{:?} {:?}", node.records(), node.allocated()))
        }
    })
    .await;
    // The kubelet deleted each pod (grace 0) once its sandbox was gone.
    eventually("every pod to be deleted by the kubelet", || async {
        let left: Vec<String> = pods
            .list(&ListParams::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .map(ResourceExt::name_any)
            .collect();
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("left: {left:?}"))
        }
    })
    .await;
    // The Lease was renewed since (a heartbeat every 10 s, and one at each kubelet start).
    eventually("node1's Lease to be renewed", || async {
        let lease = leases.get("node1").await.map_err(|e| e.to_string())?;
        let renewed = lease.spec.and_then(|s| s.renew_time).map(|time| time.0);
        match renewed {
            Some(time) if time > first_renewal => Ok(()),
            other => Err(format!("renewTime {other:?}, first {first_renewal:?}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_add_is_reported_undone_and_retried_until_it_works() {
    // A /30 with the bridge's gateway on .1 leaves host-local one address: the second pod's ADD
    // fails ("no IP addresses available") until the first pod goes.
    let node = TestNode::new("10.244.8.0/30");
    let server = ApiServer::start_with(ApiServerOptions::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let _kubelet = node.start(&client);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pod(&client, "default", "first", json!({}), netexec_pod()).await;
    let (_, first_ip) = running(&pods, "first").await;
    let second = pod(&client, "default", "second", json!({}), netexec_pod()).await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let message = eventually("a FailedCreatePodSandBox Event for second", || async {
        let list = events
            .list(&ListParams::default().fields("involvedObject.name=second,reason=FailedCreatePodSandBox"))
            .await
            .map_err(|e| e.to_string())?;
        list.items
            .into_iter()
            .find_map(|e| e.message)
            .ok_or_else(|| "none".to_owned())
    })
    .await;
    assert!(
        message.starts_with("Failed to create pod sandbox: CNI ADD"),
        "{message}"
    );
    assert!(message.contains("no IP addresses available"), "{message}");
    // Undone: no namespace, no record beside first's, and still Pending.
    assert!(!node.pod_netns(&second).exists(), "the failed sandbox was undone");
    assert_eq!(node.records().len(), 1, "{:?}", node.records());
    assert_eq!(
        pods.get("second").await.unwrap().status.unwrap().phase.as_deref(),
        Some("Pending")
    );
    // The address comes free: a later attempt (after the backoff) works and gets it.
    pods.delete("first", &DeleteParams::default()).await.unwrap();
    let (_, second_ip) = running(&pods, "second").await;
    assert_eq!(second_ip, first_ip);
    pods.delete("second", &DeleteParams::default()).await.unwrap();
    gone("second's namespace to go", node.pod_netns(&second)).await;
}
