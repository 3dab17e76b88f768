//! `IP` (`ips.kubeovn.io`): the record of one address allocation, named like the logical switch
//! port it belongs to (`<pod>.<ns>[.<provider>]`, or `node-<node>` for a node's join address;
//! see [`crate::names`]).
//!
//! Kube-OVN registers this kind without any status: the controller writes the spec after the
//! logical switch port exists and the daemon fills in `nodeName` on CNI ADD. A user-created IP
//! whose name matches a future pod reserves an address for it.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::{ExtraFields, spec_absent_is_default};

/// An IP allocation record (Kube-OVN kind `IP`; the Rust type is named [`Ip`]).
// Each `printcolumn(...)` repeats keys such as `type_ = "string"`, which clippy takes for a
// duplicated attribute.
#[allow(
    clippy::duplicated_attributes,
    reason = "kube-derive printcolumn arguments repeat by design"
)]
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "kubeovn.io",
    version = "v1",
    kind = "IP",
    root = "Ip",
    singular = "ip",
    plural = "ips",
    shortname = "ip",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A Kube-OVN IP record: the address(es) and MAC allocated to one pod or node interface.",
    printcolumn(name = "V4IP", type_ = "string", json_path = ".spec.v4IpAddress"),
    printcolumn(name = "V6IP", type_ = "string", json_path = ".spec.v6IpAddress"),
    printcolumn(name = "Mac", type_ = "string", json_path = ".spec.macAddress"),
    printcolumn(name = "Node", type_ = "string", json_path = ".spec.nodeName"),
    printcolumn(name = "Subnet", type_ = "string", json_path = ".spec.subnet")
)]
#[serde(rename_all = "camelCase", remote = "Self")]
pub struct IpSpec {
    /// Addresses on attachment networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_ips: Option<Vec<String>>,
    /// MACs on attachment networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_macs: Option<Vec<String>>,
    /// Subnets of attachment networks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attach_subnets: Option<Vec<String>>,
    /// Container (sandbox) ID.
    #[serde(rename = "containerID", default, skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    /// Legacy combined `v4,v6` address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    /// MAC address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// Namespace of the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Node the pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// Pod (or VM, or node) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    /// `""`, `StatefulSet`, `VirtualMachine`, ...: decides whether the address outlives the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_type: Option<String>,
    /// Subnet the address comes from (immutable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet: Option<String>,
    /// IPv4 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v4_ip_address: Option<String>,
    /// IPv6 address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub v6_ip_address: Option<String>,
    /// Members this version does not model (see [`ExtraFields`]).
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: ExtraFields,
}
spec_absent_is_default!(IpSpec);

impl IpSpec {
    /// The addresses the record gives: `v4IpAddress` and `v6IpAddress`, else the combined
    /// `ipAddress` (`v4,v6`), as the controller writes all three. Unparsable entries are left out:
    /// a record proves only what it says plainly.
    pub fn addresses(&self) -> std::collections::BTreeSet<std::net::IpAddr> {
        let parse = |v: &Option<String>| {
            v.as_deref()
                .unwrap_or_default()
                .split(',')
                .filter_map(|a| a.trim().parse().ok())
                .collect::<Vec<std::net::IpAddr>>()
        };
        let mut out: std::collections::BTreeSet<_> = parse(&self.v4_ip_address)
            .into_iter()
            .chain(parse(&self.v6_ip_address))
            .collect();
        if out.is_empty() {
            out.extend(parse(&self.ip_address));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_come_from_the_family_fields_else_the_combined_one() {
        let spec = IpSpec {
            v4_ip_address: Some("10.16.0.5".into()),
            v6_ip_address: Some("fd00::5".into()),
            ip_address: Some("10.16.0.9,fd00::9".into()),
            ..IpSpec::default()
        };
        let got: Vec<String> = spec.addresses().iter().map(ToString::to_string).collect();
        assert_eq!(got, ["10.16.0.5", "fd00::5"]);
        let combined = IpSpec {
            ip_address: Some("10.16.0.9,fd00::9".into()),
            ..IpSpec::default()
        };
        assert_eq!(combined.addresses().len(), 2);
        let garbage = IpSpec {
            v4_ip_address: Some("10.16.0.300".into()),
            ..IpSpec::default()
        };
        assert!(garbage.addresses().is_empty());
    }
}
