//! The `ovn-external-gw-config` ConfigMap (Kube-OVN's external gateway of the default VPC): its
//! name, its keys and a pure, typed parse of its data.
//!
//! Kube-OVN reads the keys where it needs them (`pkg/controller/external_gw.go`, `vpc.go`,
//! `pod.go`, `pkg/daemon/gateway_linux.go`) and acts on whatever they hold; here the whole map is
//! checked once, and a value that does not parse is an error naming the key, so that nothing is
//! built from half a configuration. The meanings are Kube-OVN's:
//!
//! | key | value |
//! |---|---|
//! | `enable-external-gw` | `"false"` disables; anything else Kube-OVN takes as enabled — we accept `"true"` or absent |
//! | `type` | `centralized` (also when absent or empty) or `distributed` |
//! | `external-gw-nodes` | comma-separated node names (gateway chassis besides the labelled nodes; ignored with `distributed`) |
//! | `external-gw-nic` | the node NIC put in `br-<external switch>` |
//! | `external-gw-addr` | the physical gateway, `IP` or `IP/len` (the length is ignored) |
//! | `nic-ip` | `IP/len`: the default VPC router's address on the external switch (else an `lrp` OvnEip) |
//! | `nic-mac` | the MAC of that port |

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::annotations::{AnnotationValue, MacAddr};

/// The ConfigMap's name (Kube-OVN's `util.ExternalGatewayConfig`), in the namespace of
/// `--external-gateway-config-ns` (default `kube-system`).
pub const CONFIG_MAP: &str = "ovn-external-gw-config";

pub const KEY_ENABLE: &str = "enable-external-gw";
pub const KEY_TYPE: &str = "type";
pub const KEY_NODES: &str = "external-gw-nodes";
pub const KEY_NIC: &str = "external-gw-nic";
pub const KEY_ADDR: &str = "external-gw-addr";
pub const KEY_NIC_IP: &str = "nic-ip";
pub const KEY_NIC_MAC: &str = "nic-mac";

/// Where the default VPC's NAT runs (`type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GatewayType {
    /// On the gateway chassis (`external-gw-nodes` and the labelled nodes).
    #[default]
    Centralized,
    /// On each pod's node (FIPs are stateless there).
    Distributed,
}

/// The external gateway's address (`external-gw-addr`): the next hop of the default VPC's routes
/// to the outside. Kube-OVN cuts any `/len` and uses the address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayAddr {
    pub ip: IpAddr,
    /// The length written after `/`, if any.
    pub prefix_len: Option<u8>,
}

/// The parsed data of [`CONFIG_MAP`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExternalGwConfig {
    /// `enable-external-gw` is not `"false"`.
    pub enabled: bool,
    pub gateway_type: GatewayType,
    /// `external-gw-nodes`, in the order given, each once.
    pub nodes: Vec<String>,
    /// `external-gw-nic`.
    pub nic: Option<String>,
    /// `external-gw-addr`.
    pub addr: Option<GatewayAddr>,
    /// `nic-ip`: interface addresses (host bits kept), at most one per family.
    pub nic_ip: Vec<IpNet>,
    /// `nic-mac`.
    pub nic_mac: Option<MacAddr>,
}

/// A key of the ConfigMap whose value is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ConfigMap {CONFIG_MAP}: {key} {value:?}: {why}")]
pub struct ConfigError {
    pub key: &'static str,
    pub value: String,
    pub why: String,
}

fn bad(key: &'static str, value: &str, why: impl Into<String>) -> ConfigError {
    ConfigError {
        key,
        value: value.to_owned(),
        why: why.into(),
    }
}

/// A value, with an empty one the same as an absent one (Kube-OVN compares with `""`).
fn get<'a>(data: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    data.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

impl ExternalGwConfig {
    /// Parses the ConfigMap's `data`. Unknown keys are ignored (Kube-OVN's daemon reads more, e.g.
    /// for its own bridge).
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let enabled = match get(data, KEY_ENABLE) {
            None | Some("true") => true,
            Some("false") => false,
            Some(v) => return Err(bad(KEY_ENABLE, v, "must be \"true\" or \"false\"")),
        };
        let gateway_type = match get(data, KEY_TYPE) {
            None | Some("centralized") => GatewayType::Centralized,
            Some("distributed") => GatewayType::Distributed,
            Some(v) => return Err(bad(KEY_TYPE, v, "must be centralized or distributed")),
        };
        let mut nodes: Vec<String> = Vec::new();
        if let Some(list) = get(data, KEY_NODES) {
            for n in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
                if !is_dns_subdomain(n) {
                    return Err(bad(KEY_NODES, list, format!("{n:?} is not a node name")));
                }
                if !nodes.iter().any(|x| x == n) {
                    nodes.push(n.to_owned());
                }
            }
        }
        let nic = match get(data, KEY_NIC) {
            None => None,
            Some(v) if v.len() > 15 || v.contains('/') || v.chars().any(char::is_whitespace) => {
                return Err(bad(
                    KEY_NIC,
                    v,
                    "not a Linux interface name (at most 15 characters, no '/' or whitespace)",
                ));
            }
            Some(v) => Some(v.to_owned()),
        };
        let addr = get(data, KEY_ADDR).map(parse_addr).transpose()?;
        let nic_ip = match get(data, KEY_NIC_IP) {
            None => Vec::new(),
            Some(v) => parse_nic_ip(v)?,
        };
        let nic_mac = get(data, KEY_NIC_MAC)
            .map(|v| MacAddr::parse_value(v).map_err(|p| bad(KEY_NIC_MAC, v, p.to_string())))
            .transpose()?;
        if let Some(mac) = nic_mac
            && mac.0[0] & 1 == 1
        {
            return Err(bad(
                KEY_NIC_MAC,
                &mac.to_string(),
                "a multicast MAC cannot be a port's address",
            ));
        }
        Ok(Self {
            enabled,
            gateway_type,
            nodes,
            nic,
            addr,
            nic_ip,
            nic_mac,
        })
    }
}

fn parse_addr(v: &str) -> Result<GatewayAddr, ConfigError> {
    let (ip, len) = match v.split_once('/') {
        Some((ip, len)) => (ip, Some(len)),
        None => (v, None),
    };
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| bad(KEY_ADDR, v, "not an IP address (IP or IP/len)"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let prefix_len = len
        .map(|l| l.parse::<u8>().ok().filter(|l| *l <= max))
        .map(|l| l.ok_or_else(|| bad(KEY_ADDR, v, format!("the length must be 0..={max}"))))
        .transpose()?;
    Ok(GatewayAddr { ip, prefix_len })
}

fn parse_nic_ip(v: &str) -> Result<Vec<IpNet>, ConfigError> {
    let mut out: Vec<IpNet> = Vec::new();
    for part in v.split(',').map(str::trim) {
        let net: IpNet = part
            .parse()
            .map_err(|_| bad(KEY_NIC_IP, v, format!("{part:?} is not IP/len")))?;
        if out.iter().any(|n| n.addr().is_ipv4() == net.addr().is_ipv4()) {
            return Err(bad(KEY_NIC_IP, v, "at most one address per family"));
        }
        out.push(net);
    }
    Ok(out)
}

/// A Kubernetes object name (RFC 1123 subdomain), as node names are.
fn is_dns_subdomain(n: &str) -> bool {
    n.len() <= 253
        && n.split('.').all(|label| {
            !label.is_empty()
                && label.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label.ends_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
                && label
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_documented_example_parses() {
        let c = ExternalGwConfig::parse(&data(&[
            ("enable-external-gw", "true"),
            ("type", "centralized"),
            ("external-gw-nodes", "node1, node2,node1,"),
            ("external-gw-nic", "eth2"),
            ("external-gw-addr", "10.200.0.1/24"),
            ("nic-ip", "10.200.0.254/24"),
            ("nic-mac", "16:52:f3:13:6a:25"),
        ]))
        .unwrap();
        assert!(c.enabled);
        assert_eq!(c.gateway_type, GatewayType::Centralized);
        assert_eq!(c.nodes, ["node1", "node2"]);
        assert_eq!(c.nic.as_deref(), Some("eth2"));
        assert_eq!(
            c.addr,
            Some(GatewayAddr {
                ip: "10.200.0.1".parse().unwrap(),
                prefix_len: Some(24)
            })
        );
        assert_eq!(c.nic_ip, ["10.200.0.254/24".parse::<IpNet>().unwrap()]);
        assert_eq!(c.nic_ip[0].addr().to_string(), "10.200.0.254", "host bits kept");
        assert_eq!(c.nic_mac.unwrap().to_string(), "16:52:f3:13:6a:25");
    }

    #[test]
    fn kube_ovns_defaults_for_absent_and_empty_keys() {
        // Kube-OVN disables only on a literal "false"; a present ConfigMap is otherwise enabled.
        let c = ExternalGwConfig::parse(&data(&[])).unwrap();
        assert!(c.enabled);
        assert_eq!(c.gateway_type, GatewayType::Centralized);
        assert!(c.nodes.is_empty() && c.nic.is_none() && c.addr.is_none());
        assert!(c.nic_ip.is_empty() && c.nic_mac.is_none());
        let c = ExternalGwConfig::parse(&data(&[("type", ""), ("external-gw-addr", "10.0.0.1")])).unwrap();
        assert_eq!(c.gateway_type, GatewayType::Centralized);
        assert_eq!(c.addr.unwrap().prefix_len, None);
        let c = ExternalGwConfig::parse(&data(&[("enable-external-gw", "false"), ("type", "distributed")]))
            .unwrap();
        assert!(!c.enabled);
        assert_eq!(c.gateway_type, GatewayType::Distributed);
    }

    #[test]
    fn bad_values_name_the_key() {
        for (key, value) in [
            ("enable-external-gw", "yes"),
            ("type", "central"),
            ("external-gw-nodes", "node1,Node_2"),
            ("external-gw-nic", "a-very-long-nic-name"),
            ("external-gw-addr", "10.200.0.300"),
            ("external-gw-addr", "10.200.0.1/33"),
            ("external-gw-addr", "fd00::1/129"),
            ("nic-ip", "10.200.0.254"),
            ("nic-ip", "10.200.0.254/24,10.200.0.253/24"),
            ("nic-mac", "16:52:f3:13:6a"),
            ("nic-mac", "01:00:5e:00:00:01"),
        ] {
            let err = ExternalGwConfig::parse(&data(&[(key, value)])).unwrap_err();
            assert_eq!(err.key, key, "{key}={value}: {err}");
            let text = err.to_string();
            assert!(
                text.starts_with(&format!("ConfigMap ovn-external-gw-config: {key} ")),
                "{text}"
            );
        }
    }
}
