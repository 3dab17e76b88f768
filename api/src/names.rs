//! Names Kube-OVN gives OVN objects and IP CRs. External tools (`kubectl ko`) and upgrades
//! from Kube-OVN rely on them, so they are part of the compatibility contract.
//!
//! Port groups and address sets replace every `-` with `.` in the whole name, because OVN
//! derives `$<name>_ip4` address-set references from port-group names and `-` is not allowed
//! there.

use crate::annotations::provider::PRIMARY_PROVIDER;

/// Logical switch port of a pod NIC, and the name of its IP CR: `<pod>.<ns>` on the primary
/// network (provider `ovn`), `<pod>.<ns>.<provider>` on an attachment network.
pub fn pod_port_name(pod: &str, namespace: &str, provider: &str) -> String {
    if provider == PRIMARY_PROVIDER {
        format!("{pod}.{namespace}")
    } else {
        format!("{pod}.{namespace}.{provider}")
    }
}

/// Logical switch port on the join subnet for a node's `ovn0`, and its IP CR: `node-<node>`.
pub fn node_port_name(node: &str) -> String {
    format!("node-{node}")
}

fn dotted(name: &str) -> String {
    name.replace('-', ".")
}

/// Per-subnet, per-node port group of a distributed-gateway subnet: `<subnet>.<node>`, `-` → `.`.
pub fn subnet_node_port_group(subnet: &str, node: &str) -> String {
    dotted(&format!("{subnet}.{node}"))
}

/// Port group of the pods on one node (for the node-to-pod allow ACLs): `node.<node>`, `-` → `.`.
pub fn node_port_group(node: &str) -> String {
    dotted(&format!("node.{node}"))
}

/// Port group of a NetworkPolicy: `<policy>.<ns>`, `-` → `.`.
pub fn network_policy_port_group(policy: &str, namespace: &str) -> String {
    dotted(&format!("{policy}.{namespace}"))
}

/// OVN address set of an IPPool with `enableAddressSet`: the pool name, `-` → `.`.
pub fn ippool_address_set_name(pool: &str) -> String {
    dotted(pool)
}

/// Router side of a router/switch patch pair: logical router port `<router>-<subnet>`.
pub fn router_port_name(router: &str, subnet: &str) -> String {
    format!("{router}-{subnet}")
}

/// Switch side of a router/switch patch pair: logical switch port `<subnet>-<router>`.
pub fn switch_router_port_name(subnet: &str, router: &str) -> String {
    format!("{subnet}-{router}")
}

/// Localnet port connecting an underlay subnet's switch to its provider network.
pub fn localnet_port_name(subnet: &str) -> String {
    format!("localnet.{subnet}")
}

/// OVS bridge of a provider network on each node: `br-<provider network>`.
pub fn provider_bridge_name(provider_network: &str) -> String {
    format!("br-{provider_network}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pod_ports() {
        assert_eq!(pod_port_name("web-0", "default", "ovn"), "web-0.default");
        assert_eq!(
            pod_port_name("web-0", "default", "attachnet.ns1.ovn"),
            "web-0.default.attachnet.ns1.ovn"
        );
        assert_eq!(node_port_name("kube-node-1"), "node-kube-node-1");
    }

    #[test]
    fn port_groups_replace_every_dash() {
        assert_eq!(
            subnet_node_port_group("ovn-default", "kube-node-1"),
            "ovn.default.kube.node.1"
        );
        assert_eq!(node_port_group("kube-node-1"), "node.kube.node.1");
        assert_eq!(network_policy_port_group("allow-web", "my-ns"), "allow.web.my.ns");
        assert_eq!(ippool_address_set_name("pool-a"), "pool.a");
    }

    #[test]
    fn patch_and_bridge_ports() {
        assert_eq!(router_port_name("ovn-cluster", "net1"), "ovn-cluster-net1");
        assert_eq!(switch_router_port_name("net1", "ovn-cluster"), "net1-ovn-cluster");
        assert_eq!(localnet_port_name("underlay"), "localnet.underlay");
        assert_eq!(provider_bridge_name("net1"), "br-net1");
    }
}
