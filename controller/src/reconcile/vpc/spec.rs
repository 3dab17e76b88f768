//! A VPC's spec as northbound rows: `staticRoutes`, `policyRoutes` and `vpcPeerings`, checked
//! field by field so a bad entry names itself and nothing of the VPC is applied.
//!
//! Pure: no I/O.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ipnet::IpNet;
use kube_ovn_api::crd::{PolicyRoute, StaticRoute, VpcPeering, VpcSpec};

use crate::ovn::owned::{PolicySpec, RouteSpec};

/// Kube-OVN's `ecmpMode` value for routes that keep a flow's replies on the path it came in by;
/// OVN spells it as a route option.
pub const ECMP_SYMMETRIC_REPLY: &str = "ecmp_symmetric_reply";

/// The rows a VPC's spec asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VpcRows {
    pub routes: Vec<RouteSpec>,
    pub policies: Vec<PolicySpec>,
    /// Remote VPC and the local port's addresses (`localConnectIP`, CIDR form).
    pub peerings: Vec<(String, Vec<String>)>,
}

/// What is wrong with a VPC spec: the field (`spec.staticRoutes[1].nextHopIP`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub field: String,
    pub why: String,
}

impl std::fmt::Display for SpecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.why)
    }
}

fn err(field: String, why: impl Into<String>) -> SpecError {
    SpecError {
        field,
        why: why.into(),
    }
}

/// A prefix or a bare address (OVN and Kube-OVN take both as a route's `cidr`).
fn prefix(field: &str, value: &str) -> Result<IpNet, SpecError> {
    value
        .parse::<IpNet>()
        .or_else(|_| value.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| {
            err(
                field.to_owned(),
                format!("{value:?} is neither a CIDR nor an IP address"),
            )
        })
}

fn address(field: &str, value: &str) -> Result<IpAddr, SpecError> {
    value
        .trim()
        .parse()
        .map_err(|_| err(field.to_owned(), format!("{value:?} is not an IP address")))
}

fn static_route(i: usize, r: &StaticRoute) -> Result<RouteSpec, SpecError> {
    let field = |f: &str| format!("spec.staticRoutes[{i}].{f}");
    let policy = match r.policy.as_deref().unwrap_or_default() {
        "" | "policyDst" => "dst-ip",
        "policySrc" => "src-ip",
        other => {
            return Err(err(
                field("policy"),
                format!("{other:?} is neither policyDst nor policySrc"),
            ));
        }
    };
    let cidr = r
        .cidr
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| err(field("cidr"), "is required"))?;
    let net = prefix(&field("cidr"), cidr)?;
    let hop = r
        .next_hop_ip
        .as_deref()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| err(field("nextHopIP"), "is required"))?;
    let hop_ip = address(&field("nextHopIP"), hop)?;
    if hop_ip.is_ipv4() != net.addr().is_ipv4() {
        return Err(err(
            field("nextHopIP"),
            format!("{hop_ip} is not of the family of {cidr}"),
        ));
    }
    if r.bfd_id.as_deref().is_some_and(|b| !b.is_empty()) {
        // BFD belongs with external gateways (enableExternal/enableBfd), which come later.
        return Err(err(field("bfdId"), "BFD-guarded routes are not supported yet"));
    }
    let mut options = BTreeMap::new();
    match r.ecmp_mode.as_deref().unwrap_or_default() {
        "" => {}
        ECMP_SYMMETRIC_REPLY => {
            options.insert(ECMP_SYMMETRIC_REPLY.to_owned(), "true".to_owned());
        }
        other => {
            return Err(err(
                field("ecmpMode"),
                format!("{other:?} is not {ECMP_SYMMETRIC_REPLY:?}"),
            ));
        }
    }
    Ok(RouteSpec {
        ip_prefix: cidr.to_owned(),
        nexthop: hop_ip.to_string(),
        policy: Some(policy.to_owned()),
        route_table: r.route_table.clone().unwrap_or_default(),
        options,
    })
}

fn policy_route(i: usize, p: &PolicyRoute) -> Result<PolicySpec, SpecError> {
    let field = |f: &str| format!("spec.policyRoutes[{i}].{f}");
    let priority = p.priority.unwrap_or_default();
    if !(0..=32767).contains(&priority) {
        return Err(err(field("priority"), format!("{priority} is outside 0..32767")));
    }
    let r#match = p
        .match_
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .ok_or_else(|| err(field("match"), "is required"))?;
    let action = p.action.as_deref().unwrap_or_default();
    let nexthops = match action {
        // Kube-OVN clears a next hop given with any other action; it means nothing there.
        "allow" | "drop" => Vec::new(),
        "reroute" => {
            let hops = p.next_hop_ip.as_deref().unwrap_or_default();
            let list = hops
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .map(|h| address(&field("nextHopIP"), h).map(|ip| ip.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            if list.is_empty() {
                return Err(err(field("nextHopIP"), "is required for action reroute"));
            }
            list
        }
        other => {
            return Err(err(
                field("action"),
                format!("{other:?} is not one of allow, drop, reroute"),
            ));
        }
    };
    Ok(PolicySpec {
        priority: i64::from(priority),
        r#match: r#match.to_owned(),
        action: action.to_owned(),
        nexthops,
    })
}

fn peering(vpc: &str, i: usize, p: &VpcPeering) -> Result<(String, Vec<String>), SpecError> {
    let field = |f: &str| format!("spec.vpcPeerings[{i}].{f}");
    let remote = p
        .remote_vpc
        .as_deref()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| err(field("remoteVpc"), "is required"))?;
    if remote == vpc {
        return Err(err(field("remoteVpc"), "a VPC cannot peer with itself"));
    }
    let ips = p
        .local_connect_ip
        .as_deref()
        .filter(|r| !r.is_empty())
        .ok_or_else(|| err(field("localConnectIP"), "is required"))?;
    let networks = ips
        .split(',')
        .map(str::trim)
        .map(|n| {
            n.parse::<IpNet>().map(|net| net.to_string()).map_err(|_| {
                err(
                    field("localConnectIP"),
                    format!("{n:?} is not in CIDR form (address/prefix)"),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((remote.to_owned(), networks))
}

/// Checks and translates a VPC's spec.
pub fn vpc_rows(vpc: &str, spec: &VpcSpec) -> Result<VpcRows, SpecError> {
    let routes = spec
        .static_routes
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, r)| static_route(i, r))
        .collect::<Result<_, _>>()?;
    let policies = spec
        .policy_routes
        .iter()
        .flatten()
        .enumerate()
        .map(|(i, p)| policy_route(i, p))
        .collect::<Result<_, _>>()?;
    let mut peerings: Vec<(String, Vec<String>)> = Vec::new();
    for (i, p) in spec.vpc_peerings.iter().flatten().enumerate() {
        let (remote, networks) = peering(vpc, i, p)?;
        if peerings.iter().any(|(r, _)| *r == remote) {
            return Err(err(
                format!("spec.vpcPeerings[{i}].remoteVpc"),
                format!("VPC {remote} is listed twice"),
            ));
        }
        peerings.push((remote, networks));
    }
    Ok(VpcRows {
        routes,
        policies,
        peerings,
    })
}

/// The default VPC's routes to the join subnet's gateway (`0.0.0.0/0`, `::/0`), one per route
/// table in use: Kube-OVN's catch-all that lets traffic for outside the cluster through routing,
/// so the gateway policies (priority 29000) can then send it to a node.
pub fn join_default_routes(join_gateways: &[IpAddr], user_routes: &[RouteSpec]) -> Vec<RouteSpec> {
    let mut tables: Vec<String> = vec![String::new()];
    for r in user_routes {
        if !tables.contains(&r.route_table) {
            tables.push(r.route_table.clone());
        }
    }
    let mut out = Vec::new();
    for gw in join_gateways {
        let any = if gw.is_ipv4() { "0.0.0.0/0" } else { "::/0" };
        for table in &tables {
            out.push(RouteSpec {
                ip_prefix: any.into(),
                nexthop: gw.to_string(),
                policy: Some("dst-ip".into()),
                route_table: table.clone(),
                options: BTreeMap::new(),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: serde_json::Value) -> VpcSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn static_routes_translate_policy_and_options() {
        let rows = vpc_rows(
            "vpc1",
            &spec(json!({"staticRoutes": [
                {"cidr": "10.2.0.0/16", "nextHopIP": "169.254.0.2"},
                {"policy": "policySrc", "cidr": "10.1.0.0/24", "nextHopIP": "10.1.0.254", "routeTable": "rt1",
                 "ecmpMode": "ecmp_symmetric_reply"}]})),
        )
        .unwrap();
        assert_eq!(rows.routes[0].policy.as_deref(), Some("dst-ip"));
        assert_eq!(rows.routes[0].route_table, "");
        assert_eq!(rows.routes[1].policy.as_deref(), Some("src-ip"));
        assert_eq!(rows.routes[1].route_table, "rt1");
        assert_eq!(
            rows.routes[1]
                .options
                .get(ECMP_SYMMETRIC_REPLY)
                .map(String::as_str),
            Some("true")
        );
    }

    #[test]
    fn bad_entries_name_their_field() {
        let e = vpc_rows(
            "v",
            &spec(json!({"staticRoutes": [{"cidr": "10.2.0.0/16", "nextHopIP": "nope"}]})),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.staticRoutes[0].nextHopIP");
        let e = vpc_rows(
            "v",
            &spec(json!({"staticRoutes": [{"cidr": "10.2.0.0/16", "nextHopIP": "fd00::1"}]})),
        )
        .unwrap_err();
        assert!(e.why.contains("family"), "{e}");
        let e = vpc_rows(
            "v",
            &spec(json!({"policyRoutes": [{"priority": 10, "match": "ip4", "action": "reroute"}]})),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.policyRoutes[0].nextHopIP");
        let e = vpc_rows(
            "v",
            &spec(json!({"policyRoutes": [{"priority": 40000, "match": "ip4", "action": "drop"}]})),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.policyRoutes[0].priority");
        let e = vpc_rows(
            "v",
            &spec(json!({"vpcPeerings": [{"remoteVpc": "w", "localConnectIP": "169.254.0.1"}]})),
        )
        .unwrap_err();
        assert_eq!(e.field, "spec.vpcPeerings[0].localConnectIP");
        let e = vpc_rows(
            "v",
            &spec(json!({"vpcPeerings": [{"remoteVpc": "v", "localConnectIP": "1.1.1.1/30"}]})),
        )
        .unwrap_err();
        assert!(e.why.contains("itself"));
    }

    #[test]
    fn policy_routes_drop_next_hops_unless_rerouting() {
        let rows = vpc_rows(
            "v",
            &spec(json!({"policyRoutes": [
                {"priority": 100, "match": "ip4.dst == 1.1.1.1", "action": "drop", "nextHopIP": "10.0.0.1"},
                {"priority": 200, "match": "ip4.src == 10.0.0.0/24", "action": "reroute", "nextHopIP": "10.0.0.9, 10.0.0.10"}]})),
        )
        .unwrap();
        assert!(rows.policies[0].nexthops.is_empty());
        assert_eq!(rows.policies[1].nexthops, ["10.0.0.9", "10.0.0.10"]);
    }

    #[test]
    fn join_routes_cover_every_route_table() {
        let user = vec![RouteSpec {
            ip_prefix: "1.1.1.0/24".into(),
            nexthop: "100.64.0.9".into(),
            policy: None,
            route_table: "rt".into(),
            options: BTreeMap::new(),
        }];
        let routes = join_default_routes(&["100.64.0.1".parse().unwrap()], &user);
        let tables: Vec<_> = routes.iter().map(|r| r.route_table.as_str()).collect();
        assert_eq!(tables, ["", "rt"]);
        assert!(routes.iter().all(|r| r.ip_prefix == "0.0.0.0/0"));
    }
}
