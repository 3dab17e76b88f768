//! JSON the CNI shim and the node daemon exchange over the daemon's unix socket
//! ([`DAEMON_SOCKET`]), compatible with Kube-OVN's so either side can be swapped.
//!
//! - `POST /api/v1/add` with a [`CniRequest`]: `200` and a [`CniResponse`] on success; `400` or
//!   `500` with an error body otherwise.
//! - `POST /api/v1/del` with a [`CniRequest`]: `204 No Content` on success; an error status with
//!   an error body otherwise.
//!
//! Kube-OVN's daemon answers errors with a whole `CniResponse` whose `error` is set and other
//! members zero; [`ErrorResponse`] (`{"error":"..."}`) is what we send, and [`CniResponse`]
//! reads both. Members Kube-OVN always writes (Go fields without `omitempty`) are always
//! written here too, including `null` for an absent list, so a literal captured from Kube-OVN
//! serializes back unchanged.

use std::net::IpAddr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

pub use crate::annotations::Route;

/// Default path of the daemon's socket (Kube-OVN's `--bind-socket`).
pub const DAEMON_SOCKET: &str = "/run/openvswitch/kube-ovn-daemon.sock";
/// Path of the ADD endpoint.
pub const ADD_PATH: &str = "/api/v1/add";
/// Path of the DEL endpoint.
pub const DEL_PATH: &str = "/api/v1/del";
/// Path of the CHECK endpoint (ours: Kube-OVN's shim does only ADD and DEL; a shim that gets
/// `404` here treats CHECK as passed).
pub const CHECK_PATH: &str = "/api/v1/check";
/// Path of the STATUS endpoint (ours).
pub const STATUS_PATH: &str = "/api/v1/status";
/// Path of the GC endpoint (ours).
pub const GC_PATH: &str = "/api/v1/gc";

/// What the shim sends for ADD and DEL.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CniRequest {
    /// The plugin `type` from the network config (`kube-ovn`, or another plugin using our IPAM).
    #[serde(default)]
    pub cni_type: String,
    /// `K8S_POD_NAME` from `CNI_ARGS`.
    #[serde(default)]
    pub pod_name: String,
    /// `K8S_POD_NAMESPACE` from `CNI_ARGS`.
    #[serde(default)]
    pub pod_namespace: String,
    /// `CNI_CONTAINERID`.
    #[serde(default)]
    pub container_id: String,
    /// `CNI_NETNS`.
    #[serde(default)]
    pub net_ns: String,
    /// `CNI_IFNAME`.
    #[serde(default)]
    pub if_name: String,
    /// Network provider (`ovn` for the primary network).
    #[serde(default)]
    pub provider: String,
    /// Routes from the network config; `null` when it has none.
    #[serde(default)]
    pub routes: Option<Vec<Route>>,
    /// DNS settings from the network config.
    #[serde(default)]
    pub dns: Dns,
    /// SR-IOV VF driver.
    #[serde(default)]
    pub vf_driver: String,
    /// SR-IOV device (PCI address).
    #[serde(rename = "deviceID", default)]
    pub device_id: String,
    /// DPDK: volume shared with the pod for the vhost-user socket.
    #[serde(default)]
    pub vhost_user_socket_volume_name: String,
    /// DPDK: vhost-user socket name.
    #[serde(default)]
    pub vhost_user_socket_name: String,
    /// DPDK: who creates the socket.
    #[serde(default)]
    pub vhost_user_socket_consumption: String,
}

/// The CNI DNS object (spec `dns`): every member omitted when empty.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Dns {
    /// Name servers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nameservers: Option<Vec<String>>,
    /// Local domain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Search domains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<Vec<String>>,
    /// Resolver options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<Vec<String>>,
}

/// `IPv4` or `IPv6`, the `protocol` of an [`IpConfig`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IpProtocol {
    /// IPv4.
    IPv4,
    /// IPv6.
    IPv6,
}

/// One address of the pod NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpConfig {
    /// Family of `ip`.
    pub protocol: IpProtocol,
    /// The address, without prefix length.
    pub ip: IpAddr,
    /// The subnet's CIDR (gives the prefix length).
    pub cidr: IpNet,
    /// Gateway; only on the NIC that carries the default route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<IpAddr>,
}

impl IpConfig {
    /// An entry for `ip` in `cidr`, with the protocol taken from `ip`.
    pub fn new(ip: IpAddr, cidr: IpNet, gateway: Option<IpAddr>) -> Self {
        let protocol = if ip.is_ipv4() {
            IpProtocol::IPv4
        } else {
            IpProtocol::IPv6
        };
        Self {
            protocol,
            ip,
            cidr,
            gateway,
        }
    }
}

/// The daemon's answer to ADD (and, with only `error` set, to a failed ADD or DEL).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CniResponse {
    /// Addresses, one per family; `null` in an error answer.
    #[serde(default)]
    pub ips: Option<Vec<IpConfig>>,
    /// MAC of the pod NIC.
    #[serde(default)]
    pub mac_address: String,
    /// Routes to install in the pod; `null` when none.
    #[serde(default)]
    pub routes: Option<Vec<Route>>,
    /// MTU of the pod NIC.
    #[serde(default)]
    pub mtu: u32,
    /// Name of the NIC inside the pod (the request's `if_name`).
    #[serde(rename = "nicname", default)]
    pub nic_name: String,
    /// DNS settings to report.
    #[serde(default)]
    pub dns: Dns,
    /// Error text; empty on success.
    #[serde(default)]
    pub error: String,
}

/// The body of a failed request: `{"error":"..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ErrorResponse {
    /// What went wrong.
    pub error: String,
}
