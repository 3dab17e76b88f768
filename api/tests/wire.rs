//! Daemon wire types against JSON literals shaped exactly as Kube-OVN's shim and daemon send
//! them (Go `encoding/json` output: every non-`omitempty` member present, `null` for nil lists).

use kube_ovn_api::wire::{CniRequest, CniResponse, Dns, ErrorResponse, IpConfig, IpProtocol, Route};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// Deserialize `literal` into `T`, serialize it back, and demand the same JSON (same keys,
/// same values, nothing added or dropped).
fn same_json_back<T: DeserializeOwned + Serialize>(literal: &Value) -> T {
    let typed: T = serde_json::from_value(literal.clone()).expect("the literal deserializes");
    assert_eq!(&serde_json::to_value(&typed).unwrap(), literal);
    // And through text, the way it travels over the socket.
    let text = serde_json::to_string(literal).unwrap();
    let from_text: T = serde_json::from_str(&text).unwrap();
    assert_eq!(serde_json::to_value(from_text).unwrap(), *literal);
    typed
}

#[test]
fn add_request_for_the_primary_nic() {
    let literal = json!({
        "cni_type": "kube-ovn",
        "pod_name": "web-0",
        "pod_namespace": "default",
        "container_id": "8f7e6d5c4b3a29180716253443526170",
        "net_ns": "/var/run/netns/cni-0b9d2c3e",
        "if_name": "eth0",
        "provider": "ovn",
        "routes": null,
        "dns": {},
        "vf_driver": "",
        "deviceID": "",
        "vhost_user_socket_volume_name": "",
        "vhost_user_socket_name": "",
        "vhost_user_socket_consumption": ""
    });
    let req: CniRequest = same_json_back(&literal);
    assert_eq!(req.pod_name, "web-0");
    assert_eq!(req.if_name, "eth0");
    assert_eq!(req.routes, None);
    assert_eq!(req.dns, Dns::default());
}

#[test]
fn add_request_with_routes_dns_and_sriov() {
    let literal = json!({
        "cni_type": "kube-ovn",
        "pod_name": "vm-launcher-x",
        "pod_namespace": "ns1",
        "container_id": "abc",
        "net_ns": "/var/run/netns/cni-1",
        "if_name": "net1",
        "provider": "attachnet.ns1.ovn",
        "routes": [{"dst": "10.0.0.0/8", "gw": "10.16.0.1"}, {"gw": "fd00:10:16::1"}],
        "dns": {"nameservers": ["10.96.0.10"], "domain": "cluster.local",
                "search": ["ns1.svc.cluster.local"], "options": ["ndots:5"]},
        "vf_driver": "mlx5_core",
        "deviceID": "0000:3b:00.2",
        "vhost_user_socket_volume_name": "vhost",
        "vhost_user_socket_name": "sock1",
        "vhost_user_socket_consumption": "kubevirt"
    });
    let req: CniRequest = same_json_back(&literal);
    let routes = req.routes.unwrap();
    assert_eq!(
        routes[0],
        Route {
            dst: Some("10.0.0.0/8".parse().unwrap()),
            gw: Some("10.16.0.1".parse().unwrap())
        }
    );
    assert_eq!(routes[1].dst, None, "no dst = default route");
    assert_eq!(req.device_id, "0000:3b:00.2");
    assert_eq!(
        req.dns.nameservers.as_deref(),
        Some(&["10.96.0.10".to_owned()][..])
    );
}

#[test]
fn del_request_from_an_older_shim_without_optional_members() {
    // Members missing altogether (an older or hand-written client) read as empty.
    let req: CniRequest = serde_json::from_value(json!({
        "pod_name": "web-0", "pod_namespace": "default", "container_id": "abc", "if_name": "eth0", "provider": "ovn"
    }))
    .unwrap();
    assert_eq!(req.net_ns, "");
    assert_eq!(req.cni_type, "");
}

#[test]
fn add_response_dual_stack() {
    let literal = json!({
        "ips": [
            {"protocol": "IPv4", "ip": "10.16.0.5", "cidr": "10.16.0.0/16", "gateway": "10.16.0.1"},
            {"protocol": "IPv6", "ip": "fd00:10:16::5", "cidr": "fd00:10:16::/64", "gateway": "fd00:10:16::1"}
        ],
        "mac_address": "0a:58:0a:10:00:05",
        "routes": null,
        "mtu": 1400,
        "nicname": "eth0",
        "dns": {},
        "error": ""
    });
    let resp: CniResponse = same_json_back(&literal);
    let ips = resp.ips.unwrap();
    assert_eq!(ips[0].protocol, IpProtocol::IPv4);
    assert_eq!(
        ips[1],
        IpConfig::new(
            "fd00:10:16::5".parse().unwrap(),
            "fd00:10:16::/64".parse().unwrap(),
            Some("fd00:10:16::1".parse().unwrap())
        )
    );
    assert_eq!(resp.mtu, 1400);
    assert_eq!(resp.nic_name, "eth0");
}

#[test]
fn add_response_for_an_attachment_has_no_gateway() {
    let literal = json!({
        "ips": [{"protocol": "IPv4", "ip": "172.17.0.9", "cidr": "172.17.0.0/24"}],
        "mac_address": "0a:58:ac:11:00:09",
        "routes": [{"dst": "172.18.0.0/16", "gw": "172.17.0.1"}],
        "mtu": 1450,
        "nicname": "net1",
        "dns": {},
        "error": ""
    });
    let resp: CniResponse = same_json_back(&literal);
    assert_eq!(resp.ips.unwrap()[0].gateway, None);
}

#[test]
fn error_bodies() {
    // Kube-OVN's daemon: a whole response with only `error` set.
    let kube_ovn = json!({
        "ips": null, "mac_address": "", "routes": null, "mtu": 0, "nicname": "", "dns": {},
        "error": "no address allocated to pod default/web-0 provider ovn, please see kube-ovn-controller logs to find errors"
    });
    let resp: CniResponse = same_json_back(&kube_ovn);
    assert!(resp.error.starts_with("no address allocated"));

    // Ours: just the error.
    let ours = json!({"error": "route is not ready for pod default/web-0 provider ovn"});
    let err: ErrorResponse = same_json_back(&ours);
    assert_eq!(err.error, "route is not ready for pod default/web-0 provider ovn");
    // A client reading either body as a CniResponse finds the message.
    let as_response: CniResponse = serde_json::from_value(ours).unwrap();
    assert_eq!(as_response.error, err.error);
    assert_eq!(as_response.ips, None);
}

#[test]
fn bad_protocol_or_address_is_rejected() {
    let bad_protocol = json!({"protocol": "ipv4", "ip": "10.16.0.5", "cidr": "10.16.0.0/16"});
    assert!(serde_json::from_value::<IpConfig>(bad_protocol).is_err());
    let bad_ip = json!({"protocol": "IPv4", "ip": "10.16.0.500", "cidr": "10.16.0.0/16"});
    assert!(serde_json::from_value::<IpConfig>(bad_ip).is_err());
}
