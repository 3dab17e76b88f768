//! The node's kernel routes toward pods, planned without I/O: which routes `ovn0` should carry
//! (Kube-OVN's `reconcileRouters` in `pkg/daemon/controller_linux.go`), and what to delete and
//! add to get there from what the kernel has.
//!
//! Kube-OVN's route set, which this follows:
//! - `<cidr> via <join gateway> dev ovn0 src <node InternalIP>` for every CIDR of every
//!   validated subnet of the default VPC that is overlay, or underlay with `logicalGateway`
//!   (or with `u2oInterconnection` where load balancing is off). The source is the node's
//!   InternalIP of the CIDR's family, so node → pod traffic (kubelet probes) leaves from the
//!   address the NetworkPolicy node ACL matches rather than from the join address; a family the
//!   node has no InternalIP of gets routes without a source.
//! - The join CIDR as a link route (no gateway): IPv4 with `src <join IP>`, IPv6 without a source
//!   and with metric 256, the kernel's own prefix routes; they are added only when missing, so the
//!   kernel's stay as they are.
//! - No route to a CIDR that contains one of the node's InternalIPs (the node reaches its own
//!   network directly; a route through `ovn0` would take it away).
//!
//! LoadBalancer IPs are no routes here: only the Service's ports on them go into `ovn0`, by mark
//! and policy routing (`crate::lb_ingress`, `kube_ovn_gateway::ingress`).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;
use kube_ovn_api::crd::Subnet;
use kube_ovn_dataplane::Route;

use crate::join::JoinAddress;

/// The kernel's metric for an IPv6 prefix route (what it gives the join CIDR's own route).
const IPV6_PREFIX_ROUTE_METRIC: u32 = 256;

/// What the route plan reads.
#[derive(Debug, Clone, Copy)]
pub struct RouteInputs<'a> {
    /// Every subnet.
    pub subnets: &'a [Arc<Subnet>],
    /// `ovn0`'s addresses and the join gateways, from the Node's annotations.
    pub join: &'a JoinAddress,
    /// The node's first InternalIP of each family: `(IPv4, IPv6)`.
    pub node_ips: (Option<IpAddr>, Option<IpAddr>),
    /// The default VPC's router (`--cluster-router`).
    pub cluster_router: &'a str,
    /// The join subnet (`--node-switch`).
    pub node_switch: &'a str,
    /// `ovn0`'s interface index.
    pub ovn0: u32,
}

/// Whether the node routes `subnet` through `ovn0` (Kube-OVN's filter in `reconcileRouters`).
fn routed_through_ovn0(subnet: &Subnet, cluster_router: &str) -> bool {
    let spec = &subnet.spec;
    let vpc = spec.vpc.as_deref().unwrap_or_default();
    if !vpc.is_empty() && vpc != cluster_router {
        return false;
    }
    let underlay = spec.vlan.as_deref().is_some_and(|v| !v.is_empty());
    // Kube-OVN's controller fills `enableLb` from its `--enable-lb` (true by default); ours
    // writes it only when the flag is off (`false`), so unset reads as on.
    let lb = spec.enable_lb != Some(false);
    if underlay && spec.logical_gateway != Some(true) && (spec.u2o_interconnection != Some(true) || lb) {
        return false;
    }
    // Only once the controller has validated it (a CIDR overlapping a node is refused there).
    kube_ovn_gateway::is_validated(subnet)
}

/// Subnets whose spec the controller refused (no longer `Validated`) are replaced by their last
/// validated version (same UID) from `last_validated`, which is updated: the controller leaves
/// OVN as it was when it refuses a change, so the node keeps the routes (and the egress NAT,
/// `kube_ovn_gateway`) too, and traffic to the subnet's pods keeps flowing.
pub fn with_last_validated(
    subnets: &[Arc<Subnet>],
    last_validated: &mut std::collections::BTreeMap<String, Arc<Subnet>>,
) -> Vec<Arc<Subnet>> {
    let mut kept = std::collections::BTreeMap::new();
    let out = subnets
        .iter()
        .map(|subnet| {
            let name = subnet.metadata.name.clone().unwrap_or_default();
            let validated = kube_ovn_gateway::is_validated(subnet);
            let chosen = match last_validated.get(&name) {
                Some(old) if !validated && old.metadata.uid == subnet.metadata.uid => old.clone(),
                _ => subnet.clone(),
            };
            if kube_ovn_gateway::is_validated(&chosen) {
                kept.insert(name, chosen.clone());
            }
            chosen
        })
        .collect();
    *last_validated = kept;
    out
}

/// The routes `ovn0` should carry.
pub fn desired_routes(inputs: &RouteInputs<'_>) -> BTreeSet<Route> {
    let (node_v4, node_v6) = inputs.node_ips;
    let mut routes = BTreeSet::new();
    for subnet in inputs.subnets {
        if !routed_through_ovn0(subnet, inputs.cluster_router) {
            continue;
        }
        let is_join = subnet.metadata.name.as_deref() == Some(inputs.node_switch);
        for cidr in subnet.spec.cidr_block.as_deref().unwrap_or_default().split(',') {
            let Ok(dst) = cidr.trim().parse::<IpNet>() else {
                continue;
            };
            let dst = dst.trunc();
            if [node_v4, node_v6]
                .into_iter()
                .flatten()
                .any(|ip| dst.contains(&ip))
            {
                continue;
            }
            let v4 = dst.addr().is_ipv4();
            let route = if is_join {
                Route {
                    dst,
                    gateway: None,
                    dev: inputs.ovn0,
                    src: if v4 {
                        inputs
                            .join
                            .addresses
                            .iter()
                            .map(IpNet::addr)
                            .find(|a| dst.contains(a))
                    } else {
                        None
                    },
                    metric: (!v4).then_some(IPV6_PREFIX_ROUTE_METRIC),
                }
            } else {
                // Without a join gateway of the family the CIDR is unreachable through ovn0.
                let Some(gateway) = inputs.join.gateways.iter().find(|g| g.is_ipv4() == v4) else {
                    continue;
                };
                Route {
                    dst,
                    gateway: Some(*gateway),
                    dev: inputs.ovn0,
                    src: if v4 { node_v4 } else { node_v6 },
                    metric: None,
                }
            };
            routes.insert(route);
        }
    }
    routes
}

/// A source address the plan needs that the host does not have (the kernel would refuse the
/// route): the Node's InternalIP is not this host's.
pub fn foreign_source(desired: &BTreeSet<Route>, local: &[IpAddr]) -> Option<IpAddr> {
    desired
        .iter()
        .filter(|r| r.gateway.is_some())
        .filter_map(|r| r.src)
        .find(|src| !local.contains(src))
}

/// What to change on `ovn0`: deletions first, then additions (each added with replace), link
/// routes before routes with a next hop.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct RouteChanges {
    /// Routes with a next hop on `ovn0` to a destination no subnet wants.
    pub delete: Vec<Route>,
    /// Desired routes the kernel lacks, or has with another next hop or source.
    pub add: Vec<Route>,
}

/// Compares the routes on `ovn0` with the plan. A link route counts as present when the kernel
/// has any link route to that destination (the kernel's own join prefix route, whatever its
/// metric or protocol); a route with a next hop must match next hop and source. Metrics are
/// not compared: the kernel reports its IPv6 default (1024) for routes added without one.
/// Link routes are never deleted: they are the kernel's, made with `ovn0`'s addresses.
pub fn route_changes(existing: &[Route], desired: &BTreeSet<Route>) -> RouteChanges {
    let wanted_dsts: BTreeSet<IpNet> = desired.iter().map(|r| r.dst).collect();
    let delete = existing
        .iter()
        .filter(|r| r.gateway.is_some() && !wanted_dsts.contains(&r.dst))
        .cloned()
        .collect();
    // Link routes first: a next hop is accepted only once a link route reaches it, so with the
    // join CIDR's route gone the others could not come back before it.
    let mut add: Vec<Route> = desired
        .iter()
        .filter(|want| {
            !existing.iter().any(|have| {
                have.dst == want.dst
                    && have.gateway == want.gateway
                    && (want.gateway.is_none() || have.src == want.src)
            })
        })
        .cloned()
        .collect();
    add.sort_by_key(|r| r.gateway.is_some());
    RouteChanges { delete, add }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube_ovn_api::annotations::MacAddr;

    fn subnet(name: &str, cidr: &str, extra: &serde_json::Value, validated: bool) -> Arc<Subnet> {
        let mut spec = serde_json::json!({"cidrBlock": cidr});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let status = if validated { "True" } else { "False" };
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": name},
                "spec": spec,
                "status": {"conditions": [{"type": "Validated", "status": status}]}
            }))
            .unwrap(),
        )
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn dual_join() -> JoinAddress {
        JoinAddress {
            addresses: vec![
                "100.64.0.2/16".parse().unwrap(),
                "fd00:100:64::2/112".parse().unwrap(),
            ],
            gateways: vec![ip("100.64.0.1"), ip("fd00:100:64::1")],
            mac: MacAddr([0x0a, 0, 0, 0x64, 0, 2]),
        }
    }

    fn plan(
        subnets: &[Arc<Subnet>],
        join: &JoinAddress,
        node_ips: (Option<IpAddr>, Option<IpAddr>),
    ) -> Vec<String> {
        let inputs = RouteInputs {
            subnets,
            join,
            node_ips,
            cluster_router: "ovn-cluster",
            node_switch: "join",
            ovn0: 7,
        };
        desired_routes(&inputs)
            .iter()
            .map(|r| {
                assert_eq!(r.dev, 7);
                let via = r.gateway.map(|gw| format!(" via {gw}")).unwrap_or_default();
                let src = r.src.map(|ip| format!(" src {ip}")).unwrap_or_default();
                let metric = r.metric.map(|m| format!(" metric {m}")).unwrap_or_default();
                format!("{}{via}{src}{metric}", r.dst)
            })
            .collect()
    }

    #[test]
    fn a_refused_spec_keeps_the_last_validated_routes() {
        let none = serde_json::json!({});
        let mut cache = std::collections::BTreeMap::new();
        let good = subnet("s", "10.16.0.0/16", &none, true);
        let kept = with_last_validated(std::slice::from_ref(&good), &mut cache);
        assert_eq!(kept[0].spec.cidr_block.as_deref(), Some("10.16.0.0/16"));
        // The controller refuses a new CIDR: the routes stay on the old one.
        let refused = subnet("s", "10.99.0.0/16", &none, false);
        let kept = with_last_validated(&[refused], &mut cache);
        assert_eq!(kept[0].spec.cidr_block.as_deref(), Some("10.16.0.0/16"));
        // Gone, then back unvalidated: nothing is remembered any more.
        with_last_validated(&[], &mut cache);
        let refused = subnet("s", "10.99.0.0/16", &none, false);
        let kept = with_last_validated(&[refused], &mut cache);
        assert_eq!(kept[0].spec.cidr_block.as_deref(), Some("10.99.0.0/16"));
    }

    #[test]
    fn dual_stack_routes_take_the_node_ip_of_their_family() {
        let none = serde_json::json!({});
        let subnets = vec![
            subnet("join", "100.64.0.0/16,fd00:100:64::/112", &none, true),
            subnet(
                "ovn-default",
                "10.16.0.0/16,fd00:10:16::/64",
                &serde_json::json!({"vpc": "ovn-cluster"}),
                true,
            ),
        ];
        let routes = plan(
            &subnets,
            &dual_join(),
            (Some(ip("172.18.0.2")), Some(ip("fd00:172:18::2"))),
        );
        assert_eq!(
            routes,
            [
                "10.16.0.0/16 via 100.64.0.1 src 172.18.0.2",
                "100.64.0.0/16 src 100.64.0.2",
                "fd00:10:16::/64 via fd00:100:64::1 src fd00:172:18::2",
                "fd00:100:64::/112 metric 256",
            ]
        );
        // A family without an InternalIP gets its routes without a source, as in Kube-OVN.
        let v4_only = plan(&subnets, &dual_join(), (Some(ip("172.18.0.2")), None));
        assert!(
            v4_only.contains(&"fd00:10:16::/64 via fd00:100:64::1".to_owned()),
            "{v4_only:?}"
        );
        assert!(v4_only.contains(&"10.16.0.0/16 via 100.64.0.1 src 172.18.0.2".to_owned()));
    }

    #[test]
    fn only_validated_default_vpc_overlay_subnets_that_do_not_hold_the_node() {
        let none = serde_json::json!({});
        let underlay = serde_json::json!({"vlan": "v1"});
        let subnets = vec![
            subnet(
                "tenant",
                "10.18.0.0/16",
                &serde_json::json!({"vpc": "vpc1"}),
                true,
            ),
            subnet("underlay", "10.19.0.0/16", &underlay, true),
            subnet(
                "underlay-lgw",
                "10.20.0.0/16",
                &serde_json::json!({"vlan": "v1", "logicalGateway": true}),
                true,
            ),
            subnet(
                "underlay-u2o",
                "10.21.0.0/16",
                &serde_json::json!({"vlan": "v1", "u2oInterconnection": true}),
                true,
            ),
            subnet(
                "underlay-u2o-nolb",
                "10.22.0.0/16",
                &serde_json::json!({"vlan": "v1", "u2oInterconnection": true, "enableLb": false}),
                true,
            ),
            subnet("not-validated", "10.23.0.0/16", &none, false),
            // The node's own network: routing it through ovn0 would cut the node off.
            subnet("holds-node", "172.18.0.0/16", &none, true),
            // No IPv6 join gateway on this node: the IPv6 half has no way through ovn0.
            subnet("dual", "10.24.0.0/16,fd00:24::/64", &none, true),
        ];
        let join = JoinAddress {
            addresses: vec!["100.64.0.2/16".parse().unwrap()],
            gateways: vec![ip("100.64.0.1")],
            mac: MacAddr([0x0a, 0, 0, 0x64, 0, 2]),
        };
        let routes = plan(&subnets, &join, (Some(ip("172.18.0.2")), None));
        assert_eq!(
            routes,
            [
                "10.20.0.0/16 via 100.64.0.1 src 172.18.0.2",
                "10.22.0.0/16 via 100.64.0.1 src 172.18.0.2",
                "10.24.0.0/16 via 100.64.0.1 src 172.18.0.2",
            ]
        );
    }

    fn route(dst: &str, gateway: Option<&str>, src: Option<&str>, metric: Option<u32>) -> Route {
        Route {
            dst: dst.parse().unwrap(),
            gateway: gateway.map(ip),
            dev: 7,
            src: src.map(ip),
            metric,
        }
    }

    #[test]
    fn a_source_the_host_lacks_is_named() {
        let desired: BTreeSet<Route> = [
            route("100.64.0.0/16", None, Some("100.64.0.2"), None),
            route("10.16.0.0/16", Some("100.64.0.1"), Some("172.18.0.2"), None),
        ]
        .into();
        assert_eq!(
            foreign_source(&desired, &[ip("100.64.0.2")]),
            Some(ip("172.18.0.2"))
        );
        assert_eq!(
            foreign_source(&desired, &[ip("100.64.0.2"), ip("172.18.0.2")]),
            None
        );
    }

    #[test]
    fn changes_fix_the_source_keep_the_kernels_link_routes_and_drop_strays() {
        let desired: BTreeSet<Route> = [
            route("10.16.0.0/16", Some("100.64.0.1"), Some("172.18.0.2"), None),
            route("100.64.0.0/16", None, Some("100.64.0.2"), None),
            route("fd00:10:16::/64", Some("fd00:100:64::1"), Some("fd00::2"), None),
            route("fd00:100:64::/112", None, None, Some(256)),
        ]
        .into();
        let existing = [
            // As the earlier daemon left it: no source.
            route("10.16.0.0/16", Some("100.64.0.1"), None, None),
            // The kernel's own prefix route (metric 0, source the join address).
            route("100.64.0.0/16", None, Some("100.64.0.2"), None),
            // Right, with the kernel's IPv6 default metric.
            route(
                "fd00:10:16::/64",
                Some("fd00:100:64::1"),
                Some("fd00::2"),
                Some(1024),
            ),
            // A deleted subnet.
            route("10.17.0.0/16", Some("100.64.0.1"), Some("172.18.0.2"), None),
            // IPv6 link-local: the kernel's, never touched.
            route("fe80::/64", None, None, Some(256)),
        ];
        let changes = route_changes(&existing, &desired);
        assert_eq!(
            changes,
            RouteChanges {
                delete: vec![route(
                    "10.17.0.0/16",
                    Some("100.64.0.1"),
                    Some("172.18.0.2"),
                    None
                )],
                add: vec![
                    route("fd00:100:64::/112", None, None, Some(256)),
                    route("10.16.0.0/16", Some("100.64.0.1"), Some("172.18.0.2"), None),
                ],
            }
        );
        let applied: Vec<Route> = desired.iter().cloned().collect();
        assert_eq!(
            route_changes(&applied, &desired),
            RouteChanges::default(),
            "in step: nothing to do"
        );
    }
}
