//! Which addresses a node never routes into `ovn0` for a Service, whoever asks.
//!
//! An ingress address is taken from the node's normal routing for the Service's ports: were it
//! the address of a node, a BGP peer (the ToR), a pod or subnet, a Service's ClusterIP, the join
//! subnet or the API server, the node would send that traffic into OVN instead — kubelets lose
//! the API server, speakers their sessions, pods their peers. A tenant writes `spec.externalIPs`;
//! the platform's LoadBalancer allocator writes `status.loadBalancer.ingress`, but an allocator
//! misconfigured with a pool overlapping the fabric is no better. So both pass this guard. An
//! address that is not unicast (multicast, broadcast, unspecified, loopback, link-local) is no
//! destination a Service can own either. Pure: no I/O.

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube_ovn_api::bgp_peer::BgpPeer;
use kube_ovn_api::crd::Subnet;

/// Whose an address is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Owner {
    /// A Node's InternalIP or ExternalIP.
    Node(String),
    /// A `BgpPeer`'s `spec.peerAddress`.
    BgpPeer(String),
    /// A peer the speakers are given by flag (`--neighbor-address`, `--neighbor-ipv6-address`).
    BgpNeighbor,
    /// Inside a Subnet's CIDR (its pods, its gateway).
    Subnet(String),
    /// Inside the join subnet (the nodes' `ovn0` addresses).
    Join,
    /// A Service's ClusterIP.
    ClusterIp(String),
    /// Inside `--service-cluster-ip-range`.
    ServiceCidr,
    /// The API server (the `kubernetes` Service's endpoints, or the daemon's own kubeconfig).
    ApiServer,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Node(name) => write!(f, "is an address of node {name}"),
            Self::BgpPeer(name) => write!(f, "is the address of BGP peer {name}"),
            Self::BgpNeighbor => {
                f.write_str("is the address of a BGP peer of the speakers (--neighbor-address)")
            }
            Self::Subnet(name) => write!(f, "lies in subnet {name}"),
            Self::Join => f.write_str("lies in the join subnet"),
            Self::ClusterIp(service) => write!(f, "is the ClusterIP of Service {service}"),
            Self::ServiceCidr => f.write_str("lies in the Service CIDR (--service-cluster-ip-range)"),
            Self::ApiServer => f.write_str("is an address of the API server"),
        }
    }
}

/// Why an address is refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Refused {
    /// Not a unicast address a Service could own.
    NotUnicast(&'static str),
    /// Someone else's.
    Owned(Owner),
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotUnicast(kind) => write!(f, "is not a unicast address ({kind})"),
            Self::Owned(owner) => owner.fmt(f),
        }
    }
}

/// Every protected prefix with its owner.
#[derive(Debug, Clone, Default)]
pub struct Protected(Vec<(IpNet, Owner)>);

/// What the protected set is built from.
#[derive(Debug, Clone, Copy)]
pub struct ProtectedInputs<'a> {
    pub nodes: &'a [Arc<Node>],
    pub peers: &'a [Arc<BgpPeer>],
    /// The speakers' peers given by flag.
    pub neighbors: &'a [IpAddr],
    pub subnets: &'a [Arc<Subnet>],
    /// The join subnet's name (`--node-switch`).
    pub node_switch: &'a str,
    /// The join CIDRs from this Node's annotations (the join Subnet may not be cached yet).
    pub join_cidrs: &'a [IpNet],
    pub services: &'a [Arc<Service>],
    pub service_cidrs: &'a [IpNet],
    /// The API server's addresses ([`api_server_endpoints`] and the kubeconfig's).
    pub api_server: &'a [IpAddr],
}

/// A Node's InternalIPs and ExternalIPs.
pub fn node_addresses(node: &Node) -> impl Iterator<Item = IpAddr> + '_ {
    node.status
        .as_ref()
        .and_then(|s| s.addresses.as_deref())
        .unwrap_or_default()
        .iter()
        .filter(|a| a.type_ == "InternalIP" || a.type_ == "ExternalIP")
        .filter_map(|a| a.address.parse().ok())
}

/// The ready-or-not addresses of the `kubernetes` Service's EndpointSlices (in `default`): where
/// the API servers are.
pub fn api_server_endpoints(slices: &[Arc<EndpointSlice>]) -> Vec<IpAddr> {
    slices
        .iter()
        .filter(|s| s.metadata.namespace.as_deref() == Some("default"))
        .filter(|s| {
            s.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubernetes.io/service-name"))
                .is_some_and(|n| n == "kubernetes")
        })
        .flat_map(|s| s.endpoints.iter())
        .flat_map(|e| e.addresses.iter())
        .filter_map(|a| a.parse().ok())
        .collect()
}

fn cidrs(text: Option<&str>) -> impl Iterator<Item = IpNet> + '_ {
    text.unwrap_or_default()
        .split(',')
        .filter_map(|c| c.trim().parse::<IpNet>().ok())
        .map(|n| n.trunc())
}

impl Protected {
    /// The protected prefixes of the cluster as `inputs` describes it.
    pub fn new(inputs: &ProtectedInputs<'_>) -> Self {
        let mut out = Vec::new();
        for node in inputs.nodes {
            let name = node.metadata.name.clone().unwrap_or_default();
            out.extend(node_addresses(node).map(|ip| (IpNet::from(ip), Owner::Node(name.clone()))));
        }
        for peer in inputs.peers {
            if let Ok(ip) = peer.spec.peer_address.parse::<IpAddr>() {
                let name = peer.metadata.name.clone().unwrap_or_default();
                out.push((IpNet::from(ip), Owner::BgpPeer(name)));
            }
        }
        out.extend(
            inputs
                .neighbors
                .iter()
                .map(|ip| (IpNet::from(*ip), Owner::BgpNeighbor)),
        );
        out.extend(inputs.join_cidrs.iter().map(|c| (c.trunc(), Owner::Join)));
        for subnet in inputs.subnets {
            let name = subnet.metadata.name.clone().unwrap_or_default();
            let owner = if name == inputs.node_switch {
                Owner::Join
            } else {
                Owner::Subnet(name)
            };
            out.extend(cidrs(subnet.spec.cidr_block.as_deref()).map(|c| (c, owner.clone())));
        }
        for service in inputs.services {
            let key = format!(
                "{}/{}",
                service.metadata.namespace.as_deref().unwrap_or_default(),
                service.metadata.name.as_deref().unwrap_or_default()
            );
            let spec = service.spec.as_ref();
            let ips = spec
                .and_then(|s| s.cluster_ips.clone())
                .into_iter()
                .flatten()
                .chain(spec.and_then(|s| s.cluster_ip.clone()));
            for ip in ips.filter_map(|ip| ip.parse::<IpAddr>().ok()) {
                out.push((IpNet::from(ip), Owner::ClusterIp(key.clone())));
            }
        }
        out.extend(
            inputs
                .service_cidrs
                .iter()
                .map(|c| (c.trunc(), Owner::ServiceCidr)),
        );
        out.extend(
            inputs
                .api_server
                .iter()
                .map(|ip| (IpNet::from(*ip), Owner::ApiServer)),
        );
        // Most specific first: an address inside a Subnet that is also a node's is the node's.
        out.sort_by_key(|(net, _)| std::cmp::Reverse(net.prefix_len()));
        Self(out)
    }

    /// Whose `ip` is, if anyone's.
    pub fn owner(&self, ip: IpAddr) -> Option<&Owner> {
        self.0.iter().find(|(net, _)| net.contains(&ip)).map(|(_, o)| o)
    }

    /// Why `ip` may not be routed into `ovn0`, or `Ok` when it may.
    pub fn check(&self, ip: IpAddr) -> Result<(), Refused> {
        if let Some(kind) = not_unicast(ip) {
            return Err(Refused::NotUnicast(kind));
        }
        match self.owner(ip) {
            Some(owner) => Err(Refused::Owned(owner.clone())),
            None => Ok(()),
        }
    }
}

/// What kind of non-unicast address `ip` is (RFC 1122 §3.2.1.3, RFC 3927, RFC 4291 §2.4).
pub fn not_unicast(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => Some("unspecified"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast"),
        IpAddr::V4(v4) if v4.is_multicast() => Some("multicast"),
        IpAddr::V4(v4) if v4.is_loopback() => Some("loopback"),
        IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
        // 240.0.0.0/4 (RFC 1112's class E), never routed.
        IpAddr::V4(v4) if v4.octets()[0] >= 240 => Some("reserved"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("unspecified"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("multicast"),
        IpAddr::V6(v6) if v6.is_loopback() => Some("loopback"),
        IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local"),
        // IPv4-mapped (::ffff:0:0/96): an IPv4 address in disguise, never on the wire.
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some() => Some("IPv4-mapped"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<T> {
        Arc::new(serde_json::from_value(value).unwrap())
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    struct World {
        nodes: Vec<Arc<Node>>,
        peers: Vec<Arc<BgpPeer>>,
        subnets: Vec<Arc<Subnet>>,
        services: Vec<Arc<Service>>,
        slices: Vec<Arc<EndpointSlice>>,
    }

    fn world() -> World {
        World {
            nodes: vec![obj(json!({"metadata": {"name": "n1"}, "status": {"addresses": [
                {"type": "InternalIP", "address": "172.30.0.1"},
                {"type": "ExternalIP", "address": "198.51.100.1"},
                {"type": "Hostname", "address": "n1"}]}}))],
            peers: vec![obj(
                json!({"apiVersion": "bgp.kube-ovn-rs.io/v1alpha1", "kind": "BgpPeer",
                "metadata": {"name": "tor"}, "spec": {"peerAddress": "172.30.0.254", "peerASN": 65000}}),
            )],
            subnets: vec![
                obj(
                    json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "ovn-default"},
                    "spec": {"cidrBlock": "10.16.0.0/16,fd00:10:16::/64"}}),
                ),
                obj(
                    json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "join"},
                    "spec": {"cidrBlock": "100.64.0.0/16"}}),
                ),
                obj(
                    json!({"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "tenant"},
                    "spec": {"cidrBlock": "192.168.10.0/24", "vpc": "vpc1"}}),
                ),
            ],
            services: vec![obj(
                json!({"metadata": {"name": "dns", "namespace": "kube-system"},
                "spec": {"clusterIP": "172.20.0.10", "clusterIPs": ["172.20.0.10"]}}),
            )],
            slices: vec![
                obj(json!({"metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "kubernetes"}}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["192.0.2.50"]}]})),
                // Another Service's slice, and one in another namespace that claims the label.
                obj(json!({"metadata": {"name": "web", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["192.0.2.60"]}]})),
                obj(json!({"metadata": {"name": "kubernetes", "namespace": "tenant",
                    "labels": {"kubernetes.io/service-name": "kubernetes"}}, "addressType": "IPv4",
                    "endpoints": [{"addresses": ["192.0.2.70"]}]})),
            ],
        }
    }

    fn protected(w: &World, api: &[IpAddr]) -> Protected {
        Protected::new(&ProtectedInputs {
            nodes: &w.nodes,
            peers: &w.peers,
            neighbors: &[ip("172.30.0.253")],
            subnets: &w.subnets,
            node_switch: "join",
            join_cidrs: &["100.64.0.0/16".parse().unwrap()],
            services: &w.services,
            service_cidrs: &["10.96.0.0/12".parse().unwrap()],
            api_server: api,
        })
    }

    #[test]
    fn each_class_of_address_is_refused_with_its_owner() {
        let w = world();
        let mut api = api_server_endpoints(&w.slices);
        assert_eq!(api, vec![ip("192.0.2.50")], "only default/kubernetes's slices");
        api.push(ip("192.0.2.51")); // the kubeconfig's server
        let p = protected(&w, &api);
        let owned = |a: &str| p.check(ip(a)).unwrap_err().to_string();
        assert_eq!(owned("172.30.0.1"), "is an address of node n1");
        assert_eq!(owned("198.51.100.1"), "is an address of node n1");
        assert_eq!(owned("172.30.0.254"), "is the address of BGP peer tor");
        assert_eq!(
            owned("172.30.0.253"),
            "is the address of a BGP peer of the speakers (--neighbor-address)"
        );
        assert_eq!(owned("10.16.3.4"), "lies in subnet ovn-default");
        assert_eq!(owned("fd00:10:16::9"), "lies in subnet ovn-default");
        assert_eq!(owned("192.168.10.4"), "lies in subnet tenant", "any VPC's");
        assert_eq!(owned("100.64.0.2"), "lies in the join subnet");
        assert_eq!(
            owned("172.20.0.10"),
            "is the ClusterIP of Service kube-system/dns"
        );
        assert_eq!(
            owned("10.96.0.1"),
            "lies in the Service CIDR (--service-cluster-ip-range)"
        );
        assert_eq!(owned("192.0.2.50"), "is an address of the API server");
        assert_eq!(owned("192.0.2.51"), "is an address of the API server");
        for (a, kind) in [
            ("239.1.1.1", "multicast"),
            ("255.255.255.255", "broadcast"),
            ("0.0.0.0", "unspecified"),
            ("127.0.0.1", "loopback"),
            ("169.254.169.254", "link-local"),
            ("240.0.0.1", "reserved"),
            ("ff02::1", "multicast"),
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("::ffff:203.0.113.1", "IPv4-mapped"),
        ] {
            assert_eq!(p.check(ip(a)), Err(Refused::NotUnicast(kind)), "{a} is {kind}");
        }
        // Nobody's: routable.
        for a in ["203.0.113.10", "192.0.2.60", "192.0.2.70", "2001:db8::10"] {
            assert_eq!(p.check(ip(a)), Ok(()), "{a}");
        }
    }

    #[test]
    fn the_most_specific_owner_is_named() {
        let mut w = world();
        // A node address inside a subnet (a controller refuses such a subnet; the guard still
        // names the node).
        w.nodes
            .push(obj(json!({"metadata": {"name": "n2"}, "status": {"addresses": [
            {"type": "InternalIP", "address": "10.16.0.200"}]}})));
        let p = protected(&w, &[]);
        assert_eq!(p.owner(ip("10.16.0.200")), Some(&Owner::Node("n2".into())));
        assert_eq!(
            p.owner(ip("10.16.0.201")),
            Some(&Owner::Subnet("ovn-default".into()))
        );
    }
}
