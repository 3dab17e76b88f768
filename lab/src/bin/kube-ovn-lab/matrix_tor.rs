//! The matrix's checks made at the ToR (`cluster::matrix::bgp_policy`): a Service's outside
//! address as the ToR learnt it (the communities of its BGP paths) and routes it (its kernel
//! route's next hops), read with the ToR's own CLI and `ip route`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use kube_ovn_lab::cluster::matrix::{self, Check, Expect, Kind, ServiceTarget, bgp_policy};
use kube_ovn_lab::cluster::topology::{Topology, TorKind};

/// How long a ToR check may keep reading until it sees what it expects (routes follow the API
/// within moments, but the matrix reads once every other wait is over), and the pause between
/// reads.
const SETTLE: Duration = Duration::from_secs(3);
const PAUSE: Duration = Duration::from_millis(200);

/// The ToR's answer for `check` about `svc`: retried for [`SETTLE`] until it is the expected one.
pub fn probe(t: &Topology, check: &Check, svc: &ServiceTarget) -> Result<String, String> {
    let Some(ip) = svc.outside_ip else {
        return Err(format!("{} has no outside address", svc.label()));
    };
    let start = Instant::now();
    loop {
        let answer = read(t, check.kind, ip);
        let good = answer
            .as_ref()
            .is_ok_and(|a| matrix::judge(&check.expect, Some(a)));
        if good || start.elapsed() >= SETTLE {
            return answer;
        }
        std::thread::sleep(PAUSE);
    }
}

fn read(t: &Topology, kind: Kind, ip: IpAddr) -> Result<String, String> {
    let prefix = format!("{ip}/{}", if ip.is_ipv4() { 32 } else { 128 });
    match kind {
        Kind::TorNextHops => kube_ovn_lab::cluster::net::ip(&t.tor_netns(), &["route", "show", &prefix])
            .map(|route| bgp_policy::next_hops_answer(&bgp_policy::next_hops(&route)))
            .map_err(|e| e.to_string()),
        Kind::TorCommunities => {
            let family = if ip.is_ipv4() { "ipv4" } else { "ipv6" };
            let command: Vec<String> = match t.tor_kind {
                TorKind::Bird => vec!["birdc".into(), format!("show route for {ip} all")],
                TorKind::Frr => vec![
                    "vtysh".into(),
                    "-c".into(),
                    format!("show bgp {family} unicast {prefix} json"),
                ],
            };
            let text = super::verbs::tor_output(t, &command).map_err(|e| format!("{e:#}"))?;
            let paths = match t.tor_kind {
                TorKind::Bird => bgp_policy::bird_communities(&text),
                TorKind::Frr => bgp_policy::frr_communities(&serde_json::from_str(&text).unwrap_or_default()),
            };
            Ok(bgp_policy::communities_answer(&paths))
        }
        _ => Err(format!("{kind:?} is no ToR check")),
    }
}

/// Whether `check` is made at the ToR.
pub fn is_tor_check(check: &Check) -> bool {
    matches!(check.expect, Expect::NextHops(_) | Expect::Communities(_))
}
