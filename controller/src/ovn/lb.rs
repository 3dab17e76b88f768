//! A VPC's six OVN load balancers (one per protocol, plain and with session affinity), as
//! Kube-OVN names and configures them, their attachment to the VPC's switches, and the VIP
//! changes of one Service.
//!
//! Pure: no I/O. VIPs are written as `mutate` operations on the `vips` map (delete the keys that
//! change or go, then insert the new values), never by replacing the column: many Services share
//! one load balancer, and their reconciles' plans are merged into one transaction by the
//! batcher, so each must touch only its own keys.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_ovn_ovsdb::tables::nb::{LoadBalancer, LogicalSwitch};
use kube_ovn_ovsdb::{Atom, Condition, DbCache, Mutation, Operation, Table, Uuid, Value};

use super::plan::{Plan, RowRef, owned_ids};

/// What a plain (not session-affine) load balancer hashes to pick a backend (see [`lb_row`]).
pub const PLAIN_SELECTION_FIELDS: [&str; 4] = ["ip_src", "ip_dst", "tp_src", "tp_dst"];

/// Kube-OVN's session-affinity timeout (`affinity_timeout`), Kubernetes' default for
/// `sessionAffinityConfig.clientIP.timeoutSeconds`: three hours.
pub const AFFINITY_TIMEOUT: &str = "10800";

/// The protocols a Service port can have (api's), in the order of [`LbNames`]' fields.
pub use kube_ovn_api::service_protocol::ServiceProtocol as Protocol;

/// Which of a VPC's load balancers: a protocol, plain or session-affine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LbKind {
    pub protocol: Protocol,
    pub session: bool,
}

impl LbKind {
    pub fn all() -> impl Iterator<Item = Self> {
        [false, true].into_iter().flat_map(|session| {
            Protocol::ALL
                .into_iter()
                .map(move |protocol| Self { protocol, session })
        })
    }
}

/// The default VPC's load balancers, named as Kube-OVN's flags name them.
#[derive(Debug, Clone, clap::Args)]
pub struct LbFlags {
    #[arg(
        long,
        env = "CLUSTER_TCP_LOADBALANCER",
        default_value = "cluster-tcp-loadbalancer"
    )]
    pub cluster_tcp_loadbalancer: String,
    #[arg(
        long,
        env = "CLUSTER_UDP_LOADBALANCER",
        default_value = "cluster-udp-loadbalancer"
    )]
    pub cluster_udp_loadbalancer: String,
    #[arg(
        long,
        env = "CLUSTER_SCTP_LOADBALANCER",
        default_value = "cluster-sctp-loadbalancer"
    )]
    pub cluster_sctp_loadbalancer: String,
    #[arg(
        long,
        env = "CLUSTER_TCP_SESSION_LOADBALANCER",
        default_value = "cluster-tcp-session-loadbalancer"
    )]
    pub cluster_tcp_session_loadbalancer: String,
    #[arg(
        long,
        env = "CLUSTER_UDP_SESSION_LOADBALANCER",
        default_value = "cluster-udp-session-loadbalancer"
    )]
    pub cluster_udp_session_loadbalancer: String,
    #[arg(
        long,
        env = "CLUSTER_SCTP_SESSION_LOADBALANCER",
        default_value = "cluster-sctp-session-loadbalancer"
    )]
    pub cluster_sctp_session_loadbalancer: String,
}

impl LbFlags {
    pub fn names(&self) -> LbNames {
        LbNames {
            plain: [
                self.cluster_tcp_loadbalancer.clone(),
                self.cluster_udp_loadbalancer.clone(),
                self.cluster_sctp_loadbalancer.clone(),
            ],
            session: [
                self.cluster_tcp_session_loadbalancer.clone(),
                self.cluster_udp_session_loadbalancer.clone(),
                self.cluster_sctp_session_loadbalancer.clone(),
            ],
        }
    }
}

/// The names of one VPC's six load balancers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LbNames {
    /// `[tcp, udp, sctp]`.
    pub plain: [String; 3],
    pub session: [String; 3],
}

impl LbNames {
    /// A custom VPC's: `vpc-<vpc>-<proto>-load` and `vpc-<vpc>-<proto>-sess-load` (Kube-OVN's
    /// `GenNameWithFormat`-free naming for custom VPCs).
    pub fn custom(vpc: &str) -> Self {
        let name = |p: Protocol, suffix: &str| format!("vpc-{vpc}-{}-{suffix}", p.name());
        Self {
            plain: Protocol::ALL.map(|p| name(p, "load")),
            session: Protocol::ALL.map(|p| name(p, "sess-load")),
        }
    }

    pub fn name(&self, kind: LbKind) -> &str {
        let i = kind.protocol as usize;
        if kind.session {
            &self.session[i]
        } else {
            &self.plain[i]
        }
    }

    /// Every name with its kind.
    pub fn each(&self) -> impl Iterator<Item = (LbKind, &str)> {
        LbKind::all().map(|k| (k, self.name(k)))
    }

    /// The VPC status fields Kube-OVN records them in.
    pub fn status_fields(&self) -> [(&'static str, &str); 6] {
        [
            ("tcpLoadBalancer", &self.plain[0]),
            ("udpLoadBalancer", &self.plain[1]),
            ("sctpLoadBalancer", &self.plain[2]),
            ("tcpSessionLoadBalancer", &self.session[0]),
            ("udpSessionLoadBalancer", &self.session[1]),
            ("sctpSessionLoadBalancer", &self.session[2]),
        ]
    }
}

/// The row of a load balancer of `kind`: Kube-OVN hashes session-affine ones on the client's
/// address and keeps a client's backend for [`AFFINITY_TIMEOUT`]; its plain UDP one flushes
/// conntrack entries of a backend that leaves (`ct_flush`), so a UDP flow does not stick to it.
///
/// Kube-OVN asks for `selection_fields=ip_src,ipv6_src`; OVN 23.03's schema (NB 7.0.0) has no
/// `ipv6_src` and applies `ip_src` to IPv6 VIPs as well, so only `ip_src` is written.
///
/// Plain ones hash on the connection's 5-tuple ([`PLAIN_SELECTION_FIELDS`]) where Kube-OVN leaves
/// the field empty. Empty means OVS's `dp_hash` selection, which picks the backend in a second
/// datapath pass that names the group by number; when the backends change, ovn-controller
/// replaces the group under a new number, and the userspace datapath (OVS 3.1) drops a new
/// connection whose second pass still names the old one: in `lab/benches/endpoint_bench.rs` 18 of
/// 60 rounds lost a SYN (a client waits 1 s to resend it) with `dp_hash`, 0 of 160 with the hash
/// of these fields, which OVS computes in one pass. The spread over backends is the same; the
/// cost is a datapath flow per connection instead of per client.
pub fn lb_row(name: &str, kind: LbKind, vpc: &str) -> LoadBalancer {
    let mut options = BTreeMap::new();
    let mut selection_fields = Vec::new();
    if kind.session {
        selection_fields.push("ip_src".to_owned());
        options.insert("affinity_timeout".to_owned(), AFFINITY_TIMEOUT.to_owned());
    } else {
        selection_fields.extend(PLAIN_SELECTION_FIELDS.map(str::to_owned));
        if kind.protocol == Protocol::Udp {
            options.insert("ct_flush".to_owned(), "true".to_owned());
        }
    }
    LoadBalancer {
        name: name.to_owned(),
        protocol: Some(kind.protocol.name().to_owned()),
        selection_fields,
        options,
        external_ids: owned_ids(&[("vpc", vpc)]),
        ..Default::default()
    }
}

/// Creates or corrects the VPC's six load balancers (never their VIPs, which Services own).
pub fn ensure_lbs(plan: &mut Plan, cache: &DbCache, names: &LbNames, vpc: &str) -> Vec<RowRef> {
    names
        .each()
        .map(|(kind, name)| {
            plan.ensure(
                cache,
                name,
                &lb_row(name, kind, vpc),
                &["protocol", "selection_fields", "options", "external_ids"],
            )
        })
        .collect()
}

/// The load balancers of `names` that exist.
pub fn existing_lbs(cache: &DbCache, names: &LbNames) -> Vec<Uuid> {
    names
        .each()
        .filter_map(|(_, n)| cache.uuids_by_name(LoadBalancer::NAME, n).first().copied())
        .collect()
}

/// Attaches `lbs` to a switch (`enable`), or detaches every load balancer of `all_ours` from it.
/// A switch's other load balancers (someone else's) are left alone.
pub fn attach_to_switch(
    plan: &mut Plan,
    cache: &DbCache,
    switch: &RowRef,
    lbs: &[RowRef],
    all_ours: &[Uuid],
    enable: bool,
) {
    let have: Vec<Uuid> = switch
        .existing()
        .and_then(|u| cache.get::<LogicalSwitch>(&u).ok().flatten())
        .map(|s| s.load_balancer)
        .unwrap_or_default();
    if enable {
        plan.add_members(
            LogicalSwitch::NAME,
            switch,
            "load_balancer",
            |u| have.contains(u),
            lbs,
        );
    } else {
        let attached: Vec<Uuid> = all_ours.iter().filter(|u| have.contains(u)).copied().collect();
        plan.remove_members(LogicalSwitch::NAME, switch, "load_balancer", &attached);
    }
}

/// A VIP key as OVN writes it: `ip:port`, `[ip6]:port`.
pub fn vip_key(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("{v4}:{port}"),
        IpAddr::V6(v6) => format!("[{v6}]:{port}"),
    }
}

/// The address part of a VIP key, as text (`10.96.0.1`, `fd00::1`).
pub fn vip_ip(key: &str) -> &str {
    if let Some(rest) = key.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    key.rsplit_once(':').map_or(key, |(ip, _)| ip)
}

/// The `vips` of a load balancer whose address is one of `ips`, found by a range scan of the
/// sorted map (so a Service's reconcile does not read every Service's VIPs).
pub fn vips_of<'a>(row_vips: Option<&'a Value>, ips: &[String]) -> BTreeMap<&'a str, &'a str> {
    let mut out = BTreeMap::new();
    let Some(Value::Map(map)) = row_vips else {
        return out;
    };
    for ip in ips {
        let prefix = if ip.contains(':') {
            format!("[{ip}]:")
        } else {
            format!("{ip}:")
        };
        for (k, v) in map.range(Atom::string(prefix.clone())..) {
            let (Some(k), Some(v)) = (k.as_str(), v.as_str()) else {
                break;
            };
            if !k.starts_with(&prefix) {
                break;
            }
            out.insert(k, v);
        }
    }
    out
}

/// The operations that make one load balancer's keys for `ips` exactly `want` (`key → backends`):
/// changed and stale keys are deleted, then new values inserted, in one `mutate`.
pub fn sync_vips(
    plan: &mut Plan,
    cache: &DbCache,
    lb: Uuid,
    ips: &[String],
    want: &BTreeMap<String, String>,
) {
    let Some(row) = cache.row(LoadBalancer::NAME, &lb) else {
        return;
    };
    let have = vips_of(row.get("vips"), ips);
    let delete: Vec<&str> = have
        .iter()
        .filter(|(k, v)| want.get(**k).is_none_or(|w| w != **v))
        .map(|(k, _)| *k)
        .collect();
    let insert: Vec<(&String, &String)> = want
        .iter()
        .filter(|(k, v)| have.get(k.as_str()).is_none_or(|h| h != v))
        .collect();
    let mut mutations = Vec::new();
    if !delete.is_empty() {
        mutations.push(Mutation::delete(
            "vips",
            Value::set(delete.iter().map(|k| Atom::string(*k))),
        ));
    }
    if !insert.is_empty() {
        mutations.push(Mutation::insert(
            "vips",
            Value::map(insert.into_iter().map(|(k, v)| (k.as_str(), v.as_str()))),
        ));
    }
    if !mutations.is_empty() {
        plan.push(Operation::mutate(
            LoadBalancer::NAME,
            vec![Condition::uuid(lb)],
            mutations,
        ));
    }
}

/// Deletes from one load balancer every VIP whose address `live` does not know (Services gone,
/// or an address a Service no longer has).
pub fn sweep_vips(plan: &mut Plan, cache: &DbCache, lb: Uuid, live: impl Fn(&str) -> bool) {
    let Some(Value::Map(map)) = cache.row(LoadBalancer::NAME, &lb).and_then(|r| r.get("vips")) else {
        return;
    };
    let stale: Vec<Atom> = map
        .keys()
        .filter(|k| k.as_str().is_some_and(|k| !live(vip_ip(k))))
        .cloned()
        .collect();
    if !stale.is_empty() {
        plan.push(Operation::mutate(
            LoadBalancer::NAME,
            vec![Condition::uuid(lb)],
            vec![Mutation::delete("vips", Value::Set(stale.into_iter().collect()))],
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn custom_vpc_names_and_status_fields_follow_kube_ovn() {
        let n = LbNames::custom("v1");
        assert_eq!(
            n.name(LbKind {
                protocol: Protocol::Udp,
                session: true
            }),
            "vpc-v1-udp-sess-load"
        );
        assert_eq!(n.status_fields()[0], ("tcpLoadBalancer", "vpc-v1-tcp-load"));
        assert_eq!(n.each().count(), 6);
    }

    #[test]
    fn session_lbs_hash_on_the_client_plain_ones_on_the_connection_and_udp_flushes_conntrack() {
        let s = lb_row(
            "x",
            LbKind {
                protocol: Protocol::Tcp,
                session: true,
            },
            "v",
        );
        assert_eq!(s.selection_fields, ["ip_src"]);
        assert_eq!(s.options["affinity_timeout"], "10800");
        let u = lb_row(
            "x",
            LbKind {
                protocol: Protocol::Udp,
                session: false,
            },
            "v",
        );
        assert_eq!(u.options["ct_flush"], "true");
        assert_eq!(u.selection_fields, ["ip_src", "ip_dst", "tp_src", "tp_dst"]);
        assert_eq!(u.protocol.as_deref(), Some("udp"));
    }

    #[test]
    fn vip_keys_bracket_ipv6_and_parse_back() {
        let v6 = vip_key("fd00::10".parse().unwrap(), 80);
        assert_eq!(v6, "[fd00::10]:80");
        assert_eq!(vip_ip(&v6), "fd00::10");
        assert_eq!(vip_ip("10.96.0.1:53"), "10.96.0.1");
    }

    #[test]
    fn vips_of_finds_only_the_services_addresses() {
        let map = Value::map([
            ("10.96.0.1:80", "a"),
            ("10.96.0.10:80", "b"),
            ("10.96.0.1:443", "c"),
            ("[fd00::1]:80", "d"),
        ]);
        let got = vips_of(Some(&map), &["10.96.0.1".into(), "fd00::1".into()]);
        assert_eq!(
            got.into_iter().collect::<Vec<_>>(),
            [
                ("10.96.0.1:443", "c"),
                ("10.96.0.1:80", "a"),
                ("[fd00::1]:80", "d")
            ],
            "10.96.0.10 is another Service"
        );
    }
}
