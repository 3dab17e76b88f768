//! The lab's overlay (deploy/overlays/lab) against the lab itself: the components start with the
//! values the lab's process mode passes them as flags (lab/src/cluster/components.rs), from its
//! topology (lab/src/cluster/topology.rs).

use std::path::Path;

use clap::Parser as _;
use kube_ovn_lab::cluster::topology::{
    CLUSTER_AS, EXTERNAL_IP_CIDR, JOIN_CIDR, SERVICE_CIDR, TOR_AS, Topology, TorKind,
};

use kube_ovn_controller::config::comma_joined;

use super::common::kubectl::kustomize;
use super::flags;
use super::{documents, find};

/// The lab's overlay starts the components with what the lab's process mode passes as flags
/// (lab/src/cluster/components.rs), from the lab's topology.
#[test]
fn the_lab_overlay_configures_the_components_as_the_lab_s_process_mode_does() {
    let docs = documents(&kustomize("overlays/lab"));
    let lab = Topology::new("deploy", 2, TorKind::Bird, Path::new("/var/lib/kube-ovn-lab")).unwrap();
    let node1 = lab.node("node1").unwrap().ip;
    let argv = |binary: &str| -> Vec<String> {
        flags::command_lines(&docs)
            .unwrap()
            .into_iter()
            .find(|l| l.binary == binary)
            .unwrap_or_else(|| panic!("no {binary}"))
            .argv
    };
    let ctl = kube_ovn_controller::config::Flags::try_parse_from(argv("kube-ovn-controller"))
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(comma_joined(&ctl.nb_remotes), format!("tcp:{node1}:6641"));
    assert_eq!(comma_joined(&ctl.sb_remotes), format!("tcp:{node1}:6642"));
    assert_eq!(ctl.default_subnet.cidr_block(), "10.16.0.0/16");
    assert_eq!(ctl.node_subnet.cidr_block(), JOIN_CIDR);
    let external: std::net::IpAddr = EXTERNAL_IP_CIDR.replace(".0/24", ".7").parse().unwrap();
    assert!(ctl.service_external_ip_cidrs.allows(external));

    let daemon = kube_ovn_node::config::Flags::try_parse_from(argv("kube-ovn-daemon"))
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(daemon.ovn_remote, format!("tcp:{node1}:6642"));
    assert_eq!(daemon.datapath, kube_ovn_node::config::Datapath::Netdev);
    assert_eq!(daemon.default_mtu, 1400);
    assert_eq!(daemon.flags.network_type, "geneve");
    assert_eq!(daemon.flags.service_cluster_ip_range, SERVICE_CIDR);
    assert!(daemon.flags.service_external_ip_cidrs.allows(external));
    // The dual-stack fabric: the ToR over IPv4 and over IPv6.
    let tor = [
        std::net::IpAddr::from(Topology::tor_ip()),
        std::net::IpAddr::from(Topology::tor_ip6()),
    ];
    assert_eq!(daemon.bgp_neighbors, tor);

    let speaker = kube_ovn_speaker::config::Flags::try_parse_from(argv("kube-ovn-speaker"))
        .unwrap()
        .validate()
        .unwrap();
    assert_eq!(speaker.flags.cluster_as, CLUSTER_AS);
    assert_eq!(speaker.flags.neighbor_as, TOR_AS);
    assert_eq!(speaker.neighbors, tor);
    assert!(speaker.flags.graceful_restart);
    // The process mode's --router-id and --node-ips are the node's address; with host
    // networking the pod's address (POD_IPS, the downward API's placeholder here) is that.
    assert_eq!(speaker.router_id.to_string(), "192.0.2.21");
    assert!(speaker.flags.service_external_ip_cidrs.allows(external));

    // ovs-ovn: the userspace datapath with eth0 on br-ul, as `up` builds each node.
    let config = find(&docs, "ConfigMap", "kube-ovn-config");
    assert_eq!(config["data"]["ovs-datapath-type"], "netdev");
    assert_eq!(config["data"]["ovs-netdev-uplink"], "eth0");
    let ovs = &find(&docs, "DaemonSet", "ovs-ovn")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(ovs["image"], "kube-ovn-rs:dev");

    // No kube-proxy to route the `kubernetes` ClusterIP from the host network yet: the
    // components that use the API are given kube-apiserver's own address.
    let api = Topology::api_addr();
    for (kind, name) in [
        ("Deployment", "kube-ovn-controller"),
        ("DaemonSet", "kube-ovn-cni"),
        ("DaemonSet", "kube-ovn-speaker"),
    ] {
        let c = &find(&docs, kind, name)["spec"]["template"]["spec"]["containers"][0];
        let var = |n: &str| {
            c["env"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["name"] == n)
                .map(|e| e["value"].clone())
        };
        assert_eq!(
            var("KUBERNETES_SERVICE_HOST"),
            Some(api.ip().to_string().into()),
            "{name}"
        );
        assert_eq!(
            var("KUBERNETES_SERVICE_PORT"),
            Some(api.port().to_string().into()),
            "{name}"
        );
    }
}
