//! Unit tests of [`super::desired`]: objects as Kube-OVN writes them, prefixes out. Pods come
//! with the IP records the controller writes for them ([`records_for`]); what happens without
//! them, and every other refusal, is in `tests/trust.rs`.

mod ovn_eips;
mod trust;

use std::sync::LazyLock;

use serde_json::{Value, json};

use super::*;

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> Arc<T> {
    Arc::new(serde_json::from_value(v).unwrap())
}

/// The IP record the controller writes for one NIC of a pod (`ip_record.rs`): named like the
/// port, labelled `ip_reserved=false`.
fn record(name: &str, pod: &str, ns: &str, subnet: &str, ips: &str) -> Arc<Ip> {
    let v4 = ips.split(',').find(|a| a.contains('.')).unwrap_or_default();
    let v6 = ips.split(',').find(|a| a.contains(':')).unwrap_or_default();
    obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IP",
        "metadata": {"name": name, "labels": {"ovn.kubernetes.io/subnet": subnet,
            "ovn.kubernetes.io/ip_reserved": "false", subnet: ""}},
        "spec": {"podName": pod, "namespace": ns, "subnet": subnet, "ipAddress": ips,
            "v4IpAddress": v4, "v6IpAddress": v6, "macAddress": "00:00:00:12:34:56"}}))
}

/// The records the controller would have written for these pods' annotations.
fn records_for(pods: &[Arc<Pod>]) -> Vec<Arc<Ip>> {
    let mut out = Vec::new();
    for pod in pods {
        let (name, ns) = (
            pod.metadata.name.as_deref().unwrap(),
            pod.metadata.namespace.as_deref().unwrap(),
        );
        let ann = pod.metadata.annotations.clone().unwrap_or_default();
        for (key, ips) in &ann {
            let Some(provider) = key.strip_suffix(".kubernetes.io/ip_address") else {
                continue;
            };
            let subnet = &ann[&format!("{provider}.kubernetes.io/logical_switch")];
            let port = kube_ovn_api::names::pod_port_name(name, ns, provider);
            out.push(record(&port, name, ns, subnet, ips));
        }
    }
    out
}

fn subnet(name: &str, cidr: &str, bgp: Option<&str>, ready: bool) -> Arc<Subnet> {
    let ann = bgp
        .map(|b| json!({"ovn.kubernetes.io/bgp": b}))
        .unwrap_or(json!({}));
    let status = if ready { "True" } else { "False" };
    obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": name, "annotations": ann},
        "spec": {"cidrBlock": cidr},
        "status": {"conditions": [{"type": "Ready", "status": status}]}}))
}

fn pod(name: &str, node: &str, ann: &Value, phase: &str) -> Arc<Pod> {
    obj(
        json!({"metadata": {"name": name, "namespace": "ns", "annotations": ann},
        "spec": {"nodeName": node, "containers": [], "restartPolicy": "Never"},
        "status": {"phase": phase}}),
    )
}

fn allocated(ip: &str, subnet: &str) -> Value {
    json!({"ovn.kubernetes.io/ip_address": ip, "ovn.kubernetes.io/logical_switch": subnet})
}

fn prefixes(d: &Desired) -> Vec<String> {
    d.prefixes.keys().map(ToString::to_string).collect()
}

/// `--service-external-ip-cidrs` as by default: empty.
static NO_EXTERNAL_IPS: LazyLock<ExternalIpCidrs> = LazyLock::new(ExternalIpCidrs::default);

/// The speaker on n1 with the default flags.
fn here() -> Scope<'static> {
    Scope {
        node_name: "n1",
        announce_cluster_ip: false,
        cluster_router: "ovn-cluster",
        external_ip_cidrs: &NO_EXTERNAL_IPS,
    }
}

#[test]
fn cluster_subnets_announce_cidr_and_pods_from_every_speaker() {
    let subnets = [subnet("s1", "10.16.0.0/16,fd00:16::/64", Some("cluster"), true)];
    let pods = [
        pod("a", "n1", &allocated("10.16.0.5,fd00:16::5", "s1"), "Running"),
        pod("b", "n2", &allocated("10.16.0.6", "s1"), "Running"),
    ];
    let d = desired(
        &Objects {
            pods: &pods,
            subnets: &subnets,
            ips: &records_for(&pods),
            ..Objects::default()
        },
        &here(),
    );
    assert_eq!(
        prefixes(&d),
        [
            "10.16.0.0/16",
            "10.16.0.5/32",
            "10.16.0.6/32",
            "fd00:16::/64",
            "fd00:16::5/128"
        ]
    );
    assert_eq!(
        d.prefixes[&"10.16.0.6/32".parse().unwrap()],
        Origin::Pod("ns/b".into())
    );
}

#[test]
fn local_announces_only_pods_on_this_node_and_no_cidr() {
    let subnets = [subnet("s1", "10.16.0.0/16", Some("local"), true)];
    let pods = [
        pod("a", "n1", &allocated("10.16.0.5", "s1"), "Running"),
        pod("b", "n2", &allocated("10.16.0.6", "s1"), "Running"),
    ];
    let d = desired(
        &Objects {
            pods: &pods,
            subnets: &subnets,
            ips: &records_for(&pods),
            ..Objects::default()
        },
        &here(),
    );
    assert_eq!(prefixes(&d), ["10.16.0.5/32"]);
}

#[test]
fn the_pods_own_policy_wins_and_works_without_a_subnet_policy() {
    let subnets = [
        subnet("s1", "10.16.0.0/16", Some("local"), true),
        subnet("plain", "10.17.0.0/16", None, true),
    ];
    let mut ann = allocated("10.16.0.6", "s1");
    ann["ovn.kubernetes.io/bgp"] = json!("cluster");
    let mut other = allocated("10.17.0.9", "plain");
    other["ovn.kubernetes.io/bgp"] = json!("true");
    let pods = [
        pod("b", "n2", &ann, "Running"),
        pod("c", "n2", &other, "Running"),
        pod("d", "n1", &allocated("10.17.0.10", "plain"), "Running"),
    ];
    let d = desired(
        &Objects {
            pods: &pods,
            subnets: &subnets,
            ips: &records_for(&pods),
            ..Objects::default()
        },
        &here(),
    );
    assert_eq!(prefixes(&d), ["10.16.0.6/32", "10.17.0.9/32"]);
}

#[test]
fn dead_pods_unready_subnets_and_bad_values_are_not_announced() {
    let subnets = [
        subnet("s1", "10.16.0.0/16", Some("cluster"), false),
        subnet("bad", "10.18.0.0/16", Some("yes"), true),
    ];
    let pods = [
        pod("done", "n1", &allocated("10.16.0.5", "s1"), "Succeeded"),
        pod("failed", "n1", &allocated("10.16.0.7", "s1"), "Failed"),
        pod("run", "n1", &allocated("10.16.0.8", "s1"), "Running"),
    ];
    let d = desired(
        &Objects {
            pods: &pods,
            subnets: &subnets,
            ips: &records_for(&pods),
            ..Objects::default()
        },
        &here(),
    );
    assert!(
        prefixes(&d).is_empty(),
        "an unready subnet's CIDR and pods wait: {d:?}"
    );
    let refused: Vec<_> = d.refusals.iter().map(|r| (r.object_name(), r.reason)).collect();
    assert_eq!(refused, [("Pod ns/run".to_owned(), Reason::SubnetNotReady)]);
    assert_eq!(d.skipped.len(), 1);
    assert_eq!(d.skipped[0].object, "Subnet bad");
    assert_eq!(d.skipped[0].error.key, keys::BGP);
}

#[test]
fn attachment_networks_are_announced_under_their_provider() {
    let subnets = [subnet("att", "172.20.0.0/24", Some("cluster"), true)];
    let ann = json!({"net1.ns.ovn.kubernetes.io/ip_address": "172.20.0.4", "net1.ns.ovn.kubernetes.io/logical_switch": "att"});
    let pods = [pod("m", "n2", &ann, "Running")];
    let d = desired(
        &Objects {
            pods: &pods,
            subnets: &subnets,
            ips: &records_for(&pods),
            ..Objects::default()
        },
        &here(),
    );
    assert_eq!(prefixes(&d), ["172.20.0.0/24", "172.20.0.4/32"]);
}

#[test]
fn services_need_the_literal_true_and_cluster_ips_need_the_flag() {
    let svc = |name: &str, bgp: &str| -> Arc<Service> {
        obj(
            json!({"metadata": {"name": name, "namespace": "ns", "annotations": {"ovn.kubernetes.io/bgp": bgp}},
            "spec": {"clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10", "fd00:96::10"], "externalIPs": ["192.0.2.10"]},
            "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7"}]}}}),
        )
    };
    let services = [svc("web", "true"), svc("other", "cluster")];
    let objects = Objects {
        services: &services,
        ..Objects::default()
    };
    let allowed: ExternalIpCidrs = "192.0.2.0/24".parse().unwrap();
    let scope = Scope {
        external_ip_cidrs: &allowed,
        ..here()
    };
    assert_eq!(
        prefixes(&desired(&objects, &scope)),
        ["192.0.2.10/32", "198.51.100.7/32"]
    );
    let with_flag = Scope {
        announce_cluster_ip: true,
        ..scope
    };
    assert_eq!(
        prefixes(&desired(&objects, &with_flag)),
        [
            "10.96.0.10/32",
            "192.0.2.10/32",
            "198.51.100.7/32",
            "fd00:96::10/128"
        ]
    );
}

/// An IptablesEIP as Kube-OVN's controller writes it (labels, spec, status) for gateway gw1.
fn kube_ovn_eip(ready: bool) -> Arc<IptablesEIP> {
    obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "IptablesEIP",
        "metadata": {"name": "eip1", "annotations": {"ovn.kubernetes.io/bgp": "true"},
            "finalizers": ["kubeovn.io/kube-ovn-controller"],
            "labels": {"ovn.kubernetes.io/subnet": "ovn-vpc-external-network",
                "ovn.kubernetes.io/eip_v4_ip": "203.0.113.5",
                "ovn.kubernetes.io/vpc-nat-gw-name": "gw1"}},
        "spec": {"natGwDp": "gw1", "v4ip": "203.0.113.5", "macAddress": "00:00:00:5e:00:01",
            "externalSubnet": "ovn-vpc-external-network"},
        "status": {"ready": ready, "ip": "203.0.113.5", "nat": "fip"}}))
}

/// The gateway's pod as Kube-OVN's StatefulSet makes it: `vpc-nat-gw-<gw>-0`, labels
/// `app=vpc-nat-gw-<gw>` and `ovn.kubernetes.io/vpc-nat-gw=true`, annotation
/// `ovn.kubernetes.io/vpc_nat_gw=<gw>`.
fn kube_ovn_gateway_pod(node: &str, phase: &str) -> Arc<Pod> {
    obj(
        json!({"metadata": {"name": "vpc-nat-gw-gw1-0", "namespace": "kube-system",
            "labels": {"app": "vpc-nat-gw-gw1", "ovn.kubernetes.io/vpc-nat-gw": "true",
                "statefulset.kubernetes.io/pod-name": "vpc-nat-gw-gw1-0"},
            "annotations": {"ovn.kubernetes.io/vpc_nat_gw": "gw1",
                "k8s.v1.cni.cncf.io/networks": "kube-system/ovn-vpc-external-network",
                "ovn.kubernetes.io/logical_switch": "vpc1-subnet1",
                "ovn.kubernetes.io/ip_address": "10.0.1.254"}},
        "spec": {"nodeName": node, "containers": []}, "status": {"phase": phase}}),
    )
}

fn eip_prefixes(pods: &[Arc<Pod>], eips: &[Arc<IptablesEIP>]) -> Vec<String> {
    prefixes(&desired(
        &Objects {
            pods,
            eips,
            ..Objects::default()
        },
        &here(),
    ))
}

#[test]
fn eips_go_out_from_the_node_of_their_nat_gateway() {
    let ready = [kube_ovn_eip(true)];
    assert_eq!(
        eip_prefixes(&[kube_ovn_gateway_pod("n1", "Running")], &ready),
        ["203.0.113.5/32"]
    );
    assert!(
        eip_prefixes(&[kube_ovn_gateway_pod("n2", "Running")], &ready).is_empty(),
        "the gateway runs on another node"
    );
    assert!(
        eip_prefixes(&[kube_ovn_gateway_pod("n1", "Pending")], &ready).is_empty(),
        "the gateway is not running yet"
    );
    assert!(
        eip_prefixes(&[kube_ovn_gateway_pod("n1", "Running")], &[kube_ovn_eip(false)]).is_empty(),
        "the EIP is not ready"
    );
    // The IptablesEIP's own label names the gateway; a pod carrying only that label (and
    // no gateway annotation) is not a gateway pod.
    let impostor: Arc<Pod> = obj(json!({"metadata": {"name": "x", "namespace": "kube-system",
            "labels": {"ovn.kubernetes.io/vpc-nat-gw-name": "gw1"}},
        "spec": {"nodeName": "n1", "containers": []}, "status": {"phase": "Running"}}));
    assert!(eip_prefixes(&[impostor], &ready).is_empty());
}

/// A Ready default-VPC subnet with a centralized gateway whose status names `active` (as the
/// controller writes it: one node, or every gateway comma-separated with ECMP).
fn centralized(name: &str, cidr: &str, bgp: Option<&str>, active: &str) -> Arc<Subnet> {
    let ann = bgp
        .map(|b| json!({"ovn.kubernetes.io/bgp": b}))
        .unwrap_or(json!({}));
    obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
        "metadata": {"name": name, "annotations": ann},
        "spec": {"cidrBlock": cidr, "vpc": "ovn-cluster", "gatewayType": "centralized",
            "gatewayNode": "n1,n2", "natOutgoing": false},
        "status": {"activateGateway": active,
            "conditions": [{"type": "Ready", "status": if active.is_empty() { "False" } else { "True" }}]}}))
}

fn on(node: &'static str) -> Scope<'static> {
    Scope {
        node_name: node,
        ..here()
    }
}

fn desired_on(subnets: &[Arc<Subnet>], pods: &[Arc<Pod>], node: &'static str) -> Vec<String> {
    prefixes(&desired(
        &Objects {
            pods,
            subnets,
            ips: &records_for(pods),
            ..Objects::default()
        },
        &on(node),
    ))
}

#[test]
fn a_centralized_subnet_and_its_pods_go_out_only_from_the_active_gateway() {
    let mut local = allocated("10.30.0.6", "c");
    local["ovn.kubernetes.io/bgp"] = json!("local");
    let pods = [
        pod("a", "n1", &allocated("10.30.0.5", "c"), "Running"),
        // A pod asking for `local` on n3 is still announced from the gateway: its replies
        // leave through the gateway, not through n3.
        pod("b", "n3", &local, "Running"),
    ];
    let all = ["10.30.0.0/16", "10.30.0.5/32", "10.30.0.6/32"];
    let active_n2 = [centralized("c", "10.30.0.0/16", Some("cluster"), "n2")];
    assert_eq!(desired_on(&active_n2, &pods, "n2"), all);
    assert!(desired_on(&active_n2, &pods, "n1").is_empty(), "n1 is a standby");
    assert!(desired_on(&active_n2, &pods, "n3").is_empty(), "n3 is no gateway");
    // Failover: the status names n1; n2 withdraws, n1 announces.
    let active_n1 = [centralized("c", "10.30.0.0/16", Some("cluster"), "n1")];
    assert_eq!(desired_on(&active_n1, &pods, "n1"), all);
    assert!(desired_on(&active_n1, &pods, "n2").is_empty());
}

#[test]
fn with_ecmp_every_gateway_announces_and_without_one_nobody_does() {
    let pods = [pod("a", "n3", &allocated("10.30.0.5", "c"), "Running")];
    let ecmp = [centralized("c", "10.30.0.0/16", Some("true"), "n1,n2")];
    for node in ["n1", "n2"] {
        assert_eq!(desired_on(&ecmp, &pods, node), ["10.30.0.0/16", "10.30.0.5/32"]);
    }
    assert!(desired_on(&ecmp, &pods, "n3").is_empty());
    let none = [centralized("c", "10.30.0.0/16", Some("cluster"), "")];
    for node in ["n1", "n2", "n3"] {
        assert!(desired_on(&none, &pods, node).is_empty(), "{node}");
    }
}

#[test]
fn local_on_a_centralized_subnet_announces_pods_from_the_gateway_and_no_cidr() {
    let pods = [
        pod("a", "n1", &allocated("10.30.0.5", "c"), "Running"),
        pod("b", "n2", &allocated("10.30.0.6", "c"), "Running"),
    ];
    let subnets = [centralized("c", "10.30.0.0/16", Some("local"), "n2")];
    assert_eq!(
        desired_on(&subnets, &pods, "n2"),
        ["10.30.0.5/32", "10.30.0.6/32"]
    );
    assert!(desired_on(&subnets, &pods, "n1").is_empty());
    // A pod's own annotation in a centralized subnet without one follows the gateway too.
    let mut own = allocated("10.31.0.5", "plain");
    own["ovn.kubernetes.io/bgp"] = json!("cluster");
    let pods = [pod("c", "n1", &own, "Running")];
    let subnets = [centralized("plain", "10.31.0.0/16", None, "n2")];
    assert_eq!(desired_on(&subnets, &pods, "n2"), ["10.31.0.5/32"]);
    assert!(desired_on(&subnets, &pods, "n1").is_empty());
}

#[test]
fn an_underlay_subnet_routed_by_the_physical_router_is_announced_with_a_warning() {
    let underlay = |name: &str, cidr: &str, extra: Value| -> Arc<Subnet> {
        let mut spec = json!({"cidrBlock": cidr, "vlan": "vlan100"});
        spec.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        obj(json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
            "metadata": {"name": name, "annotations": {"ovn.kubernetes.io/bgp": "true"}},
            "spec": spec,
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
    };
    let subnets = [
        underlay("plain", "10.100.0.0/24", json!({})),
        underlay("lgw", "10.101.0.0/24", json!({"logicalGateway": true})),
        underlay("u2o", "10.102.0.0/24", json!({"u2oInterconnection": true})),
        subnet("overlay", "10.103.0.0/24", Some("true"), true),
    ];
    let objects = Objects {
        subnets: &subnets,
        ..Objects::default()
    };
    let d = desired(&objects, &here());
    assert_eq!(
        prefixes(&d),
        ["10.100.0.0/24", "10.101.0.0/24", "10.102.0.0/24", "10.103.0.0/24"],
        "every one announced, as Kube-OVN"
    );
    let warned: Vec<_> = d
        .refusals
        .iter()
        .map(|r| (r.object_name(), r.field.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        warned,
        [("Subnet plain".to_owned(), "spec.vlan", "BgpOnUnderlaySubnet")]
    );
    assert!(d.refusals[0].reason.still_announced());
    assert!(
        d.refusals[0].message.contains("10.100.0.0/24"),
        "{}",
        d.refusals[0].message
    );
}
