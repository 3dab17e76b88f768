//! Every `ovn.kubernetes.io/*` annotation and label key Kube-OVN uses, as constants, with the
//! objects it appears on, who writes it and who reads it.
//!
//! Roles: *ctl* = kube-ovn-controller, *cni* = the node daemon behind the CNI shim, *spk* = the
//! BGP speaker, *user* = whoever writes the object. Keys marked *per provider* also exist for
//! attachment networks under `<provider>.kubernetes.io/<name>`: build those with
//! [`super::provider_key`] from the constant here (the primary network's provider is `ovn`).
//! Value formats and their types are in the parent module.

/// Prefix of every primary-network key.
pub const PREFIX: &str = "ovn.kubernetes.io/";

// ===== Pod annotations (most also per provider) =====

/// Pod: the NIC's address(es), `v4`, `v6` or `v4,v6` ([`super::IpPair`]); written by the user to
/// request static addresses, otherwise by ctl; read by ctl, cni, spk. Node: the node's join
/// address(es), written by ctl, read by cni. Per provider.
pub const IP_ADDRESS: &str = "ovn.kubernetes.io/ip_address";
/// Pod: the NIC's MAC ([`super::MacAddr`]), user (static) or ctl; read by ctl, cni. Node: the
/// `ovn0` MAC, ctl → cni. Per provider.
pub const MAC_ADDRESS: &str = "ovn.kubernetes.io/mac_address";
/// Pod: the subnet's `cidrBlock` ([`super::CidrPair`]), ctl → cni. Namespace: `;`-joined
/// `cidrBlock`s of the bound subnets ([`super::CidrBlocks`]), ctl → ctl. Node: the join subnet's
/// CIDR, ctl → cni. Per provider.
pub const CIDR: &str = "ovn.kubernetes.io/cidr";
/// Pod: the subnet's gateway(s) ([`super::IpPair`]), ctl → cni. Node: the join gateway, ctl →
/// cni. Per provider.
pub const GATEWAY: &str = "ovn.kubernetes.io/gateway";
/// Pod: subnet name; the user may set it to pin the subnet (highest priority), otherwise ctl
/// writes it; read by ctl, cni, spk. Namespace: comma list of bound subnets
/// ([`super::NameList`]), ctl → ctl. Node: `join`, ctl. Per provider.
pub const LOGICAL_SWITCH: &str = "ovn.kubernetes.io/logical_switch";
/// Pod: the VPC router of the NIC (overlay, logical gateway or u2o subnets), written by ctl.
/// Per provider.
pub const LOGICAL_ROUTER: &str = "ovn.kubernetes.io/logical_router";
/// Pod and node: literal `"true"` once IPAM, the logical switch port and the IP CR exist
/// ([`super::TrueFlag`]); ctl → ctl, cni. ctl waits for every node's before starting pod
/// workers. Per provider.
pub const ALLOCATED: &str = "ovn.kubernetes.io/allocated";
/// Pod: literal `"true"` once port groups and policy routes are in place; ctl → cni, which waits
/// for it on NICs that carry the default route. Per provider.
pub const ROUTED: &str = "ovn.kubernetes.io/routed";
/// Pod: extra routes, JSON `[{"dst":"CIDR","gw":"IP"}]` ([`super::Routes`]); user or ctl → cni.
/// Per provider.
pub const ROUTES: &str = "ovn.kubernetes.io/routes";
/// Pod: static address list or one IPPool name ([`super::IpPoolAnnotation`]), user → ctl.
/// Namespace: comma list of IPPools bound to it ([`super::NameList`]), ctl → ctl. Per provider.
pub const IP_POOL: &str = "ovn.kubernetes.io/ip_pool";
/// Pod: `ipv4` or `ipv6` to take a single family on a dual-stack subnet ([`super::IpFamily`]),
/// user → ctl. Per provider.
pub const IP_FAMILY: &str = "ovn.kubernetes.io/ip_family";
/// Pod: VLAN ID of an underlay subnet, ctl → cni. Per provider.
pub const VLAN_ID: &str = "ovn.kubernetes.io/vlan_id";
/// Pod: ProviderNetwork of an underlay subnet, ctl → cni. Per provider.
pub const PROVIDER_NETWORK: &str = "ovn.kubernetes.io/provider_network";
/// Pod: `veth-pair`, `offload-port`, `dpdk-port` or `sriov`; ctl (or cni for SR-IOV) → cni.
/// Per provider.
pub const POD_NIC_TYPE: &str = "ovn.kubernetes.io/pod_nic_type";
/// Pod: traffic into the pod limited to this many Mbit/s ([`super::Mbps`]), user → cni. Node:
/// the same for the `node-<node>` port. Per provider.
pub const INGRESS_RATE: &str = "ovn.kubernetes.io/ingress_rate";
/// Pod: traffic out of the pod limited to this many Mbit/s ([`super::Mbps`]), user → cni. Node:
/// as for `ingress_rate`. Per provider.
pub const EGRESS_RATE: &str = "ovn.kubernetes.io/egress_rate";
/// Pod: burst in Mbit for `ingress_rate` ([`super::Mbit`]; unset = 80 % of the rate), user → cni.
/// Per provider.
pub const INGRESS_BURST: &str = "ovn.kubernetes.io/ingress_burst";
/// Pod: burst in Mbit for `egress_rate` ([`super::Mbit`]), user → cni. Per provider.
pub const EGRESS_BURST: &str = "ovn.kubernetes.io/egress_burst";
/// Pod: netem delay in ms ([`super::Milliseconds`]), user → cni. Per provider.
pub const LATENCY: &str = "ovn.kubernetes.io/latency";
/// Pod: netem queue limit in packets ([`super::Packets`]), user → cni. Per provider.
pub const LIMIT: &str = "ovn.kubernetes.io/limit";
/// Pod: netem loss in percent ([`super::LossPercent`]), user → cni. Per provider.
pub const LOSS: &str = "ovn.kubernetes.io/loss";
/// Pod: netem jitter in ms ([`super::Milliseconds`]), user → cni. Per provider.
pub const JITTER: &str = "ovn.kubernetes.io/jitter";
/// Pod: `"true"` sets the port's `port_security` to its MAC and IPs (and VIPs), user → ctl.
/// Per provider.
pub const PORT_SECURITY: &str = "ovn.kubernetes.io/port_security";
/// Pod: comma list of SecurityGroup names ([`super::NameList`]), user → ctl. Per provider.
pub const SECURITY_GROUPS: &str = "ovn.kubernetes.io/security_groups";
/// Pod: name of a Vip CR whose address the pod takes, user → ctl.
pub const VIP: &str = "ovn.kubernetes.io/vip";
/// Pod: Vip names used as allowed-address-pairs, user → ctl.
pub const AAPS: &str = "ovn.kubernetes.io/aaps";
/// Pod: `"true"` adds `unknown` to the port's addresses, user → ctl. Per provider.
pub const LAYER2_FORWARD: &str = "ovn.kubernetes.io/layer2_forward";
/// Pod: whether this provider's NIC carries the default route (default: the `eth0` NIC),
/// user → cni. Per provider.
pub const DEFAULT_ROUTE: &str = "ovn.kubernetes.io/default_route";
/// Pod: an EIP for the pod on `ovn-cluster` (default VPC, `--enable-eip-snat`), user → ctl.
pub const EIP: &str = "ovn.kubernetes.io/eip";
/// Pod: an SNAT address for the pod on `ovn-cluster`, user → ctl.
pub const SNAT: &str = "ovn.kubernetes.io/snat";
/// OvnFip, OvnSnatRule, OvnDnatRule: the name of the OvnEip the rule uses, ctl.
pub const VPC_EIP: &str = "ovn.kubernetes.io/vpc_eip";
/// OvnEip: the name of the last rule that used it, ctl.
pub const VPC_NAT: &str = "ovn.kubernetes.io/vpc_nat";
/// Pod: next hop for the pod's north-bound traffic (policy route priority 29250), user → ctl.
pub const NORTH_GATEWAY: &str = "ovn.kubernetes.io/north_gateway";
/// BGP announcement policy ([`super::BgpPolicy`]). Pod and Subnet: `true`/`cluster`/`local`,
/// user → spk. Service: only `"true"` is honoured (ClusterIP, with `--announce-cluster-ip`).
/// IptablesEIP: `"true"` for the NAT-gateway speaker. OvnEip: `"true"` announces the address
/// from the node where it lives (ours; Kube-OVN announces no OvnEip). Node label: `"true"`
/// selects speaker nodes.
pub const BGP: &str = "ovn.kubernetes.io/bgp";
/// Pod: the KubeVirt VM owning the pod (its name keys IPAM), ctl → ctl, cni. Per provider.
pub const VIRTUAL_MACHINE: &str = "ovn.kubernetes.io/virtualmachine";
/// Pod: KubeVirt live-migration activation strategy, user → ctl, cni.
pub const ACTIVATION_STRATEGY: &str = "ovn.kubernetes.io/activation_strategy";
/// Pod: `"true"` mirrors the pod's traffic to the mirror port, user → cni. Per provider.
pub const MIRROR: &str = "ovn.kubernetes.io/mirror";
/// Pod: per-port DHCPv4 options, user → ctl. Per provider.
pub const DHCP_V4_OPTIONS: &str = "ovn.kubernetes.io/dhcp-v4-options";
/// Pod: per-port DHCPv6 options, user → ctl. Per provider.
pub const DHCP_V6_OPTIONS: &str = "ovn.kubernetes.io/dhcp-v6-options";
/// Pod: SR-IOV VF representor plugged into `br-int`, cni → cni. Per provider.
pub const VF_REPRESENTOR: &str = "ovn.kubernetes.io/vf_representor";
/// Pod: SR-IOV VF index, cni → cni. Per provider.
pub const VF: &str = "ovn.kubernetes.io/vf";
/// Pod: the VpcNatGateway this pod implements, ctl → ctl, spk (which node announces its EIPs).
pub const VPC_NAT_GW: &str = "ovn.kubernetes.io/vpc_nat_gw";
/// Pod: NAT gateway initialised, ctl → ctl.
pub const VPC_NAT_GW_INIT: &str = "ovn.kubernetes.io/vpc_nat_gw_init";
/// Pod: NAT gateway container restarted (rules must be redone), ctl → ctl.
pub const VPC_NAT_GW_CONTAINER_RESTARTED: &str = "ovn.kubernetes.io/vpc_nat_gw_container_restarted";
/// Pod: NAT gateway activated, ctl → ctl.
pub const VPC_NAT_GW_ACTIVATED: &str = "ovn.kubernetes.io/vpc_nat_gw_activated";
/// Workload template: opt into hash-based static IP generation, user → ctl.
pub const GENERATE_HASH: &str = "ovn.kubernetes.io/generate-hash";
/// Pod: provider of an attachment that should be treated as Kube-OVN's, user → ctl.
pub const ATTACHMENT_PROVIDER: &str = "ovn.kubernetes.io/attachmentprovider";

// ===== Namespace annotations (written by ctl from Subnets, Vpcs and IPPools) =====

/// Namespace: `;`-joined `excludeIps` of the bound subnets, each a comma list
/// ([`super::ExcludeIpLists`]), ctl → ctl.
pub const EXCLUDE_IPS: &str = "ovn.kubernetes.io/exclude_ips";

// ===== Node annotations =====

/// Node: name of the node's join port, `node-<node>`, ctl → cni.
pub const PORT_NAME: &str = "ovn.kubernetes.io/port_name";
/// Node: the OVS system-id (chassis name), cni → ctl.
pub const CHASSIS: &str = "ovn.kubernetes.io/chassis";
/// Node: interface carrying the Geneve tunnel, user → cni.
pub const TUNNEL_INTERFACE: &str = "ovn.kubernetes.io/tunnel_interface";
/// Node: networks of a multi-plane setup (JSON), user → cni.
pub const NODE_NETWORKS: &str = "ovn.kubernetes.io/node_networks";

// ===== Subnet, Service and NAT annotations =====

/// Subnet and Service: the VPC the object belongs to, ctl → ctl. Also a label on IPs and
/// Services. (Same key as [`VPC_LABEL`].)
pub const VPC: &str = "ovn.kubernetes.io/vpc";
/// Service: switch load-balancer VIP, ctl → ctl.
pub const SWITCH_LB_VIP: &str = "ovn.kubernetes.io/switch_lb_vip";
/// Service: router load-balancer VIP, ctl → ctl.
pub const ROUTER_LB_VIP: &str = "ovn.kubernetes.io/router_lb_vip";
/// Service: subnet to take LoadBalancer external IPs from, user → ctl.
pub const SERVICE_EXTERNAL_IP_FROM_SUBNET: &str = "ovn.kubernetes.io/service_external_ip_from_subnet";
/// Service: `"false"` disables OVN load-balancer health checks, user → ctl.
pub const SERVICE_HEALTH_CHECK: &str = "ovn.kubernetes.io/service_health_check";
/// Service: image of the LoadBalancer-service pod (`--enable-lb-svc`), user → ctl.
pub const LB_SVC_IMG: &str = "ovn.kubernetes.io/lb_svc_img";

// ===== NetworkPolicy annotations =====

/// NetworkPolicy: `"true"` logs matching ACLs, user → ctl.
pub const ENABLE_LOG: &str = "ovn.kubernetes.io/enable_log";
/// NetworkPolicy: ACL actions to log, comma list of `allow`, `drop`, `pass`, user → ctl.
pub const LOG_ACL_ACTIONS: &str = "ovn.kubernetes.io/log_acl_actions";
/// NetworkPolicy: ACL log meter rate, user → ctl.
pub const ACL_LOG_METER_RATE: &str = "ovn.kubernetes.io/acl_log_meter_rate";
/// NetworkPolicy: `standard` or `lax`, user → ctl.
pub const NETWORK_POLICY_ENFORCEMENT: &str = "ovn.kubernetes.io/network_policy_enforcement";
/// NetworkPolicy: providers the policy applies to, `ovn` or `<ns>/<nad>` list, user → ctl.
pub const NETWORK_POLICY_FOR: &str = "ovn.kubernetes.io/network_policy_for";

// ===== Labels =====

/// Node label: `"true"` marks gateway chassis for OVN EIPs; ctl writes it from the
/// `ovn-external-gw-config` ConfigMap.
pub const EXTERNAL_GW_LABEL: &str = "ovn.kubernetes.io/external-gw";
/// Node label: node external gateway, user → ctl.
pub const NODE_EXT_GW_LABEL: &str = "ovn.kubernetes.io/node-ext-gw";
/// Node label: OVN interconnection gateway node, user → ctl.
pub const IC_GW_LABEL: &str = "ovn.kubernetes.io/ic-gw";
/// Node label: `userspace` for DPDK nodes, user → cni.
pub const OVS_DP_TYPE_LABEL: &str = "ovn.kubernetes.io/ovs_dp_type";
/// Node label placing the OVN central databases (`master`), user → deployment.
pub const ROLE_LABEL: &str = "kube-ovn/role";
/// Label on IPs, IptablesEIPs, OvnEips (their external subnet) and workloads: the subnet, ctl.
pub const SUBNET_LABEL: &str = "ovn.kubernetes.io/subnet";
/// Label on IPs, Services and OvnEips in use by a rule (the rule's VPC): the VPC, ctl. (Same key
/// as [`VPC`].)
pub const VPC_LABEL: &str = "ovn.kubernetes.io/vpc";
/// Label on IPs: the node, ctl.
pub const NODE_NAME_LABEL: &str = "ovn.kubernetes.io/node-name";
/// Label on IPs: `"true"` for user-reserved IP CRs (kept after the pod goes), ctl.
pub const IP_RESERVED_LABEL: &str = "ovn.kubernetes.io/ip_reserved";
/// Label `"true"` on NAT gateway pods (beside `app=vpc-nat-gw-<gw>`), ctl → spk.
pub const VPC_NAT_GW_LABEL: &str = "ovn.kubernetes.io/vpc-nat-gw";
/// Label on IptablesEIPs and their FIP/SNAT/DNAT rules (not on pods): their VpcNatGateway;
/// Kube-OVN's speaker inside a gateway pod (`--nat-gw-mode`) selects its EIPs on it. ctl.
pub const VPC_NAT_GW_NAME_LABEL: &str = "ovn.kubernetes.io/vpc-nat-gw-name";
/// Label on VPC egress gateway workloads, ctl.
pub const VPC_EGRESS_GATEWAY_LABEL: &str = "ovn.kubernetes.io/vpc-egress-gateway";
/// Label on VPC load-balancer workloads, ctl.
pub const VPC_LB_LABEL: &str = "ovn.kubernetes.io/vpc_lb";
/// Label on VPC DNS workloads, ctl.
pub const VPC_DNS_LABEL: &str = "ovn.kubernetes.io/vpc-dns";
/// Label on OvnEips: their type (`lrp`, `lsp`, `nat`), ctl.
pub const OVN_EIP_TYPE_LABEL: &str = "ovn.kubernetes.io/ovn_eip_type";
/// Label on IptablesEIPs, OvnEips and the OVN NAT rules using one: the EIP's IPv4 address, ctl.
/// On the rules it is how an OvnEip finds its users (Kube-OVN's selector).
pub const EIP_V4_IP_LABEL: &str = "ovn.kubernetes.io/eip_v4_ip";
/// Label on EIPs and the OVN NAT rules using one: the EIP's IPv6 address in a label's
/// alphabet ([`ipv6_label_value`]), ctl.
pub const EIP_V6_IP_LABEL: &str = "ovn.kubernetes.io/eip_v6_ip";
/// Label on DNAT rules: the external port, ctl (read by the port-conflict check).
pub const VPC_DNAT_EPORT_LABEL: &str = "ovn.kubernetes.io/vpc_dnat_eport";
/// Label on EIPs and NAT gateways: the QoSPolicy, ctl.
pub const QOS_LABEL: &str = "ovn.kubernetes.io/qos";

// ===== Multus keys Kube-OVN reads (not in the ovn.kubernetes.io namespace) =====

/// Pod: `ns/nad` replacing the primary network.
pub const MULTUS_DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";
/// Pod: attachment networks.
pub const MULTUS_NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
/// NetworkAttachmentDefinition: device-plugin resource.
pub const MULTUS_RESOURCE_NAME: &str = "k8s.v1.cni.cncf.io/resourceName";

/// Every `ovn.kubernetes.io/` key above (labels included; each key string once).
pub const ALL: &[&str] = &[
    IP_ADDRESS,
    MAC_ADDRESS,
    CIDR,
    GATEWAY,
    LOGICAL_SWITCH,
    LOGICAL_ROUTER,
    ALLOCATED,
    ROUTED,
    ROUTES,
    IP_POOL,
    IP_FAMILY,
    VLAN_ID,
    PROVIDER_NETWORK,
    POD_NIC_TYPE,
    INGRESS_RATE,
    EGRESS_RATE,
    INGRESS_BURST,
    EGRESS_BURST,
    LATENCY,
    LIMIT,
    LOSS,
    JITTER,
    PORT_SECURITY,
    SECURITY_GROUPS,
    VIP,
    AAPS,
    LAYER2_FORWARD,
    DEFAULT_ROUTE,
    EIP,
    SNAT,
    VPC_EIP,
    VPC_NAT,
    NORTH_GATEWAY,
    BGP,
    VIRTUAL_MACHINE,
    ACTIVATION_STRATEGY,
    MIRROR,
    DHCP_V4_OPTIONS,
    DHCP_V6_OPTIONS,
    VF_REPRESENTOR,
    VF,
    VPC_NAT_GW,
    VPC_NAT_GW_INIT,
    VPC_NAT_GW_CONTAINER_RESTARTED,
    VPC_NAT_GW_ACTIVATED,
    GENERATE_HASH,
    ATTACHMENT_PROVIDER,
    EXCLUDE_IPS,
    PORT_NAME,
    CHASSIS,
    TUNNEL_INTERFACE,
    NODE_NETWORKS,
    VPC,
    SWITCH_LB_VIP,
    ROUTER_LB_VIP,
    SERVICE_EXTERNAL_IP_FROM_SUBNET,
    SERVICE_HEALTH_CHECK,
    LB_SVC_IMG,
    ENABLE_LOG,
    LOG_ACL_ACTIONS,
    ACL_LOG_METER_RATE,
    NETWORK_POLICY_ENFORCEMENT,
    NETWORK_POLICY_FOR,
    EXTERNAL_GW_LABEL,
    NODE_EXT_GW_LABEL,
    IC_GW_LABEL,
    OVS_DP_TYPE_LABEL,
    SUBNET_LABEL,
    NODE_NAME_LABEL,
    IP_RESERVED_LABEL,
    VPC_NAT_GW_LABEL,
    VPC_NAT_GW_NAME_LABEL,
    VPC_EGRESS_GATEWAY_LABEL,
    VPC_LB_LABEL,
    VPC_DNS_LABEL,
    OVN_EIP_TYPE_LABEL,
    EIP_V4_IP_LABEL,
    EIP_V6_IP_LABEL,
    VPC_DNAT_EPORT_LABEL,
    QOS_LABEL,
];

/// An IPv6 address as a label value (Kube-OVN's `IPv6ToLabelValue`, `pkg/util/ip.go`): every `:`
/// becomes `-`, and a value that would start or end with `-` (`::1`, `fd00::`) gets a `0` there,
/// since a label value must begin and end with an alphanumeric. Empty stays empty (no label).
pub fn ipv6_label_value(ip: &str) -> String {
    let mut v = ip.replace(':', "-");
    if v.starts_with('-') {
        v.insert(0, '0');
    }
    if v.ends_with('-') {
        v.push('0');
    }
    v
}

/// Label `<provider-network>.provider-network.kubernetes.io/<name>` that the daemon puts on
/// nodes for a ProviderNetwork; `name` is one of [`PROVIDER_NETWORK_LABELS`].
pub fn provider_network_label(provider_network: &str, name: &str) -> String {
    format!("{provider_network}.provider-network.kubernetes.io/{name}")
}

/// The node labels' names for a ProviderNetwork (Kube-OVN's): `ready` ("true" once the NIC is in
/// the bridge), `interface` (the NIC), `mtu` (the NIC's), `exclude` ("true" on excluded nodes),
/// `vlan_interfaces`.
pub const PROVIDER_NETWORK_LABELS: [&str; 5] = ["ready", "interface", "mtu", "exclude", "vlan_interfaces"];

/// Annotation on the node daemon's own pod with why a ProviderNetwork failed on its node
/// (`<pn>.provider-network.kubernetes.io/err_mesg`, Kube-OVN's spelling); the controller copies it
/// into the ProviderNetwork's status.
pub fn provider_network_error_annotation(provider_network: &str) -> String {
    provider_network_label(provider_network, "err_mesg")
}

/// The localnet port of an underlay subnet's logical switch: `localnet.<subnet>`.
pub fn localnet_port(subnet: &str) -> String {
    format!("localnet.{subnet}")
}

/// The patch port ovn-controller makes on br-int for an underlay subnet's localnet port once the
/// bridge mapping exists: `patch-localnet.<subnet>-to-br-int`.
pub fn localnet_patch_port(subnet: &str) -> String {
    format!("patch-{}-to-br-int", localnet_port(subnet))
}

/// The IP CR and IPAM key of a subnet's U2O interconnection address:
/// `u2o-interconnection.<vpc>.<subnet>`.
pub fn u2o_interconnection_name(vpc: &str, subnet: &str) -> String {
    format!("u2o-interconnection.{vpc}.{subnet}")
}

/// The address set of the nodes' addresses an underlay subnet's U2O policies exclude:
/// `<subnet>.u2o_exclude_ip.<ip4|ip6>`, every `-` turned into `.` (Kube-OVN's naming).
pub fn u2o_exclude_ip_set(subnet: &str, family: &str) -> String {
    format!("{subnet}.u2o_exclude_ip.{family}").replace('-', ".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unique_and_prefixed() {
        let mut seen = std::collections::BTreeSet::new();
        for key in ALL {
            assert!(key.starts_with(PREFIX), "{key}");
            assert!(key.len() > PREFIX.len(), "{key}");
            assert!(seen.insert(*key), "{key} listed twice");
        }
        assert_eq!(VPC, VPC_LABEL);
    }

    #[test]
    fn ipv6_label_values_are_kube_ovns() {
        assert_eq!(ipv6_label_value("fd00:10:16::5"), "fd00-10-16--5");
        assert_eq!(ipv6_label_value("::1"), "0--1");
        assert_eq!(ipv6_label_value("fd00::"), "fd00--0");
        assert_eq!(ipv6_label_value("::"), "0--0");
        assert_eq!(ipv6_label_value(""), "");
        // Every value is a valid label value: alphanumeric at both ends, `-` inside.
        for ip in ["::1", "fd00::", "2001:db8::a:1", "::ffff:10.0.0.1"] {
            let v = ipv6_label_value(ip);
            let ends = [v.chars().next(), v.chars().last()];
            assert!(
                ends.iter().all(|c| c.is_some_and(|c| c.is_ascii_alphanumeric())),
                "{ip}: {v}"
            );
            assert!(
                v.len() <= 63
                    && v.chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'),
                "{ip}: {v}"
            );
        }
    }

    #[test]
    fn provider_network_labels() {
        assert_eq!(
            provider_network_label("net1", "ready"),
            "net1.provider-network.kubernetes.io/ready"
        );
        assert_eq!(
            provider_network_error_annotation("net1"),
            "net1.provider-network.kubernetes.io/err_mesg"
        );
    }

    #[test]
    fn underlay_names_are_kube_ovns() {
        assert_eq!(localnet_port("vlan-sub"), "localnet.vlan-sub");
        assert_eq!(localnet_patch_port("s1"), "patch-localnet.s1-to-br-int");
        assert_eq!(
            u2o_interconnection_name("ovn-cluster", "s1"),
            "u2o-interconnection.ovn-cluster.s1"
        );
        assert_eq!(
            u2o_exclude_ip_set("vlan-sub", "ip4"),
            "vlan.sub.u2o_exclude_ip.ip4"
        );
    }
}
