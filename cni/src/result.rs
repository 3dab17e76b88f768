//! The ADD result the runtime reads, built from the daemon's answer in the config's version.
//!
//! Shape, as Kube-OVN's shim builds it: one interface (the pod NIC, in the sandbox), one `ips`
//! entry per address pointing at it, the daemon's routes or else a default route per family
//! via that family's gateway, and the daemon's DNS. Version differences: before 1.0.0 every
//! `ips` entry carries `version` ("4"/"6"); `interfaces[].mtu` exists from 1.1.0.

use std::net::IpAddr;

use ipnet::IpNet;
use kube_ovn_api::wire::{CniResponse, Dns, Route};
use serde::Serialize;

use crate::version::CniVersion;

#[derive(Debug, Serialize)]
struct Interface {
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    mac: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    mtu: Option<u32>,
    #[serde(skip_serializing_if = "String::is_empty")]
    sandbox: String,
}

#[derive(Debug, Serialize)]
struct IpEntry {
    #[serde(skip_serializing_if = "Option::is_none")]
    version: Option<&'static str>,
    address: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    gateway: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    interface: Option<usize>,
}

#[derive(Debug, Serialize)]
struct AddResult {
    #[serde(rename = "cniVersion")]
    cni_version: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    interfaces: Option<Vec<Interface>>,
    ips: Vec<IpEntry>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    routes: Vec<Route>,
    dns: Dns,
}

/// The ADD result as JSON. `ipam_only` leaves out the interface (an IPAM plugin's result has
/// none; the main plugin adds its own); `netns` is the sandbox path.
pub fn add_result(resp: &CniResponse, version: CniVersion, netns: &str, ipam_only: bool) -> String {
    let interfaces = (!ipam_only).then(|| {
        vec![Interface {
            name: resp.nic_name.clone(),
            mac: resp.mac_address.clone(),
            mtu: (version >= CniVersion::V1_1_0 && resp.mtu != 0).then_some(resp.mtu),
            sandbox: netns.to_owned(),
        }]
    });
    let ips_in = resp.ips.as_deref().unwrap_or_default();
    let ips = ips_in
        .iter()
        .map(|ip| IpEntry {
            version: (version < CniVersion::V1_0_0).then_some(if ip.ip.is_ipv4() { "4" } else { "6" }),
            address: format!("{}/{}", ip.ip, ip.cidr.prefix_len()),
            gateway: ip.gateway,
            interface: (!ipam_only).then_some(0),
        })
        .collect();
    let routes = match resp.routes.as_deref() {
        Some(routes) if !routes.is_empty() => routes.to_vec(),
        _ => ips_in
            .iter()
            .filter_map(|ip| {
                let gw = ip.gateway?;
                let dst = if gw.is_ipv4() {
                    IpNet::V4(ipnet::Ipv4Net::default())
                } else {
                    IpNet::V6(ipnet::Ipv6Net::default())
                };
                Some(Route {
                    dst: Some(dst),
                    gw: Some(gw),
                })
            })
            .collect(),
    };
    let result = AddResult {
        cni_version: version.as_str(),
        interfaces,
        ips,
        routes,
        dns: resp.dns.clone(),
    };
    // Only strings, numbers and addresses: serialization cannot fail.
    serde_json::to_string(&result).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use kube_ovn_api::wire::IpConfig;
    use serde_json::{Value, json};

    use super::*;

    fn dual_stack() -> CniResponse {
        CniResponse {
            ips: Some(vec![
                IpConfig::new(
                    "10.16.0.5".parse().unwrap(),
                    "10.16.0.0/16".parse().unwrap(),
                    Some("10.16.0.1".parse().unwrap()),
                ),
                IpConfig::new(
                    "fd00:10:16::5".parse().unwrap(),
                    "fd00:10:16::/64".parse().unwrap(),
                    Some("fd00:10:16::1".parse().unwrap()),
                ),
            ]),
            mac_address: "00:00:00:12:34:56".into(),
            mtu: 1400,
            nic_name: "eth0".into(),
            ..CniResponse::default()
        }
    }

    fn json_of(s: &str) -> Value {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn v1_1_has_mtu_and_default_routes() {
        let got = json_of(&add_result(
            &dual_stack(),
            CniVersion::V1_1_0,
            "/var/run/netns/p",
            false,
        ));
        assert_eq!(
            got,
            json!({
                "cniVersion": "1.1.0",
                "interfaces": [{"name": "eth0", "mac": "00:00:00:12:34:56", "mtu": 1400, "sandbox": "/var/run/netns/p"}],
                "ips": [
                    {"address": "10.16.0.5/16", "gateway": "10.16.0.1", "interface": 0},
                    {"address": "fd00:10:16::5/64", "gateway": "fd00:10:16::1", "interface": 0}
                ],
                "routes": [{"dst": "0.0.0.0/0", "gw": "10.16.0.1"}, {"dst": "::/0", "gw": "fd00:10:16::1"}],
                "dns": {}
            })
        );
    }

    /// Each version's whole result for the same answer. The differences, from the spec's
    /// upgrade notes and each version's SPEC.md: up to 0.4.0 every `ips` entry has `version`
    /// (1.0.0 drops it); `interfaces[].mtu` first exists in 1.1.0; 0.3.0, 0.3.1 and 0.4.0 share
    /// one result format (0.4.0 changed verbs, not results). Everything else is common: the
    /// interface in the sandbox, `ips[].interface` as its index, routes, dns.
    #[test]
    fn every_version_has_its_shape() {
        let interface = |mtu: bool| {
            let mut i = json!({"name": "eth0", "mac": "00:00:00:12:34:56", "sandbox": "/var/run/netns/p"});
            if mtu {
                i["mtu"] = json!(1400);
            }
            i
        };
        let ips = |version: bool| {
            let mut v4 = json!({"address": "10.16.0.5/16", "gateway": "10.16.0.1", "interface": 0});
            let mut v6 = json!({"address": "fd00:10:16::5/64", "gateway": "fd00:10:16::1", "interface": 0});
            if version {
                v4["version"] = json!("4");
                v6["version"] = json!("6");
            }
            json!([v4, v6])
        };
        let routes = json!([{"dst": "0.0.0.0/0", "gw": "10.16.0.1"}, {"dst": "::/0", "gw": "fd00:10:16::1"}]);
        for version in crate::version::SUPPORTED {
            let before_1_0 = version < CniVersion::V1_0_0;
            let expected = json!({
                "cniVersion": version.as_str(),
                "interfaces": [interface(version == CniVersion::V1_1_0)],
                "ips": ips(before_1_0),
                "routes": routes,
                "dns": {}
            });
            let got = json_of(&add_result(&dual_stack(), version, "/var/run/netns/p", false));
            assert_eq!(got, expected, "{version}");
        }
    }

    #[test]
    fn v0_3_1_has_ip_versions_and_no_mtu() {
        let got = json_of(&add_result(&dual_stack(), CniVersion::V0_3_1, "/n", false));
        assert_eq!(got["ips"][0]["version"], "4");
        assert_eq!(got["ips"][1]["version"], "6");
        assert!(got["interfaces"][0].get("mtu").is_none());
    }

    #[test]
    fn ipam_only_has_no_interfaces_and_daemon_routes_win() {
        let mut resp = dual_stack();
        resp.routes = Some(vec![Route {
            dst: Some("10.0.0.0/8".parse().unwrap()),
            gw: Some("10.16.0.254".parse().unwrap()),
        }]);
        let got = json_of(&add_result(&resp, CniVersion::V1_0_0, "/n", true));
        assert!(got.get("interfaces").is_none());
        assert!(got["ips"][0].get("interface").is_none());
        assert_eq!(got["routes"], json!([{"dst": "10.0.0.0/8", "gw": "10.16.0.254"}]));
    }
}
