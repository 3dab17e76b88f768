//! Host veth names on one node, through the real `kube-ovn` shim and daemon, real OVS and
//! ovn-controller (see `common`). Needs root and the OVS/OVN packages
//! (scripts/install-deps.sh); fails, never skips, without them.

mod common;

use std::time::Duration;

use anyhow::Result;
use common::{Cluster, WAIT};
use kube_ovn_node::plan::{host_nic_name, legacy_host_nic_name};
use kube_ovn_testkit::wait_until;

/// What KubeVirt (v1.0 and later) names a VM's secondary interface in its launcher pod: `pod`
/// and 11 hex digits of sha256 of the network's name, so every VM on that network has it.
const KUBEVIRT_IFNAME: &str = "podb1e4f6c8a1f";

/// Two VMs with a secondary interface on the same network, on one node: the ADD of the second
/// used to get the first's host veth name (the container ID was cut away for interface names
/// of 12 bytes or more) and delete the first's veth and OVS port. Both now keep working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_vms_with_the_same_long_ifname_keep_their_own_ports() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let mut pods = Vec::new();
    for name in ["vm-a", "vm-b"] {
        cluster.create_pod("default", name, 0, &[]).await?;
        let (netns, mut sandbox) = Cluster::sandbox("default", name)?;
        sandbox.ifname = KUBEVIRT_IFNAME.into();
        let runtime = node.runtime.clone();
        let sb = sandbox.clone();
        let result = tokio::task::spawn_blocking(move || runtime.add(&sb)).await??;
        pods.push((netns, sandbox, result));
    }
    let nics: Vec<String> = pods
        .iter()
        .map(|(_, sb, _)| host_nic_name(&sb.container_id, KUBEVIRT_IFNAME))
        .collect();
    let ports = node.pod_ports()?;
    for (nic, pod) in nics.iter().zip(["vm-a", "vm-b"]) {
        assert!(ports.contains(nic), "{nic} missing from {ports:?}");
        assert_eq!(
            node.iface_column(nic, "external_ids:iface-id")?,
            format!("{pod}.default")
        );
        assert_eq!(node.iface_column(nic, "external_ids:ovn-installed")?, "true");
    }
    assert_eq!(node.pod_veths()?.len(), 2, "{:?}", node.pod_veths()?);
    assert_ne!(nics[0], nics[1]);
    // Both pods work: each reaches the other over its interface.
    let ip = |result: &serde_json::Value| -> std::net::Ipv4Addr {
        let cidr = result["ips"][0]["address"].as_str().unwrap_or_default();
        cidr.split('/').next().unwrap_or_default().parse().unwrap()
    };
    pods[0].0.wait_ping(ip(&pods[1].2), Duration::from_secs(10))?;
    pods[1].0.wait_ping(ip(&pods[0].2), Duration::from_secs(10))?;

    // DEL of one leaves the other's port alone.
    node.runtime.del(&pods[1].1, Some(&pods[1].2))?;
    wait_until("vm-b's port removed", WAIT, || {
        Ok(!node.pod_ports()?.contains(&nics[1]))
    })?;
    assert!(node.pod_ports()?.contains(&nics[0]));
    pods[0]
        .0
        .wait_ping(std::net::Ipv4Addr::new(10, 16, 0, 1), Duration::from_secs(10))?;
    Ok(())
}

/// A multibyte interface name used to panic the daemon's request handler (a byte slice cut
/// inside a character); it is now a CNI error naming CNI_IFNAME, nothing is made, and the
/// daemon goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multibyte_ifname_is_a_cni_error_and_makes_nothing() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    cluster.create_pod("default", "mb", 0, &[]).await?;
    let (_netns, mut sandbox) = Cluster::sandbox("default", "mb")?;
    // 13 bytes, under the shim's 16-byte limit; the old name cut it inside an `é`.
    sandbox.ifname = "aéééééé".into();
    let runtime = node.runtime.clone();
    let sb = sandbox.clone();
    let run = tokio::task::spawn_blocking(move || runtime.add_raw(&sb)).await??;
    assert!(!run.success, "ADD succeeded: {}", run.stdout);
    let error = run.json()?;
    assert_eq!(error["code"], 7, "{error}");
    let msg = error["msg"].as_str().unwrap_or_default();
    assert!(
        msg.contains("CNI_IFNAME") && msg.contains("is not ASCII"),
        "{error}"
    );
    assert!(node.pod_ports()?.is_empty(), "{:?}", node.pod_ports()?);
    assert!(node.pod_veths()?.is_empty(), "{:?}", node.pod_veths()?);

    // The daemon still serves: a pod with a proper name gets its network.
    let ok = cluster.pod("default", "fine", 0, &[]).await?;
    ok.netns
        .wait_ping(std::net::Ipv4Addr::new(10, 16, 0, 1), Duration::from_secs(10))?;
    Ok(())
}

/// A node upgraded with a VM running: its secondary NIC's port has the name the old daemon
/// gave (`_podb1e4f6c8a_h`, shared by every VM on that network). DEL removes it when its
/// `external_ids` say it is this pod's sandbox, and leaves it when it is another pod's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn del_removes_a_legacy_named_port_only_when_it_is_the_pods() -> Result<()> {
    let cluster = Cluster::start(1, &[]).await?;
    let node = &cluster.nodes[0];
    let (_ns_a, mut vm_a) = Cluster::sandbox("default", "vm-a")?;
    vm_a.ifname = KUBEVIRT_IFNAME.into();
    let (_ns_b, mut vm_b) = Cluster::sandbox("default", "vm-b")?;
    vm_b.ifname = "net1".into();
    let legacy = |sb: &common::runtime::Sandbox| {
        legacy_host_nic_name(&sb.container_id, &sb.ifname).expect("a legacy name")
    };
    let (shared, b_port) = (legacy(&vm_a), legacy(&vm_b));
    let port = |name: &str, pod: &str, netns: &str| -> Vec<String> {
        [
            "--",
            "add-port",
            "br-int",
            name,
            "--",
            "set",
            "interface",
            name,
            "type=internal",
            "external_ids:vendor=kube-ovn",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain([
            format!("external_ids:iface-id={pod}.default"),
            format!("external_ids:pod_name={pod}"),
            "external_ids:pod_namespace=default".to_owned(),
            format!("external_ids:pod_netns={netns}"),
        ])
        .collect()
    };
    // One transaction: the shared name held by another VM's port, and vm-b's own port.
    let mut args = port(&shared, "vm-other", &vm_a.netns);
    args.extend(port(&b_port, "vm-b", &vm_b.netns));
    node.ovs
        .vsctl(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
    // vm-b's DEL removes its own legacy port (retried until the daemon's replica has the
    // transaction, as a runtime retries DEL)...
    wait_until("vm-b's legacy port removed by its DEL", WAIT, || {
        node.runtime.del(&vm_b, None)?;
        Ok(!node.pod_ports()?.contains(&b_port))
    })?;
    // ...so the daemon knows the other port too: vm-a's DEL leaves it, it is not vm-a's.
    node.runtime.del(&vm_a, None)?;
    assert!(
        node.pod_ports()?.contains(&shared),
        "another pod's port was removed"
    );
    node.ovs.vsctl(&[
        "set",
        "interface",
        &shared,
        "external_ids:pod_name=vm-a",
        "external_ids:iface-id=vm-a.default",
    ])?;
    wait_until("vm-a's legacy port removed by its DEL", WAIT, || {
        node.runtime.del(&vm_a, None)?;
        Ok(!node.pod_ports()?.contains(&shared))
    })?;
    Ok(())
}
