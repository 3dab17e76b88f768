//! A measured matrix: judging answers, and the text a person reads.

use std::fmt::Write as _;
use std::net::IpAddr;

use super::external::{EipTarget, EipUse};
use super::{Attachment, Check, Expect, Kind, ServiceTarget, Target};

/// Whether `answer` (or its absence) is what `expect` asked for.
pub fn judge(expect: &Expect, answer: Option<&str>) -> bool {
    match (expect, answer) {
        (Expect::Answer(want), Some(got)) => want == got,
        (Expect::AnswerIn(any), Some(got)) => any.iter().any(|want| want == got),
        (Expect::ClientIp(ip), Some(got)) => client_ip(got) == Some(*ip),
        (Expect::ClientIpIn(ips), Some(got)) => client_ip(got).is_some_and(|ip| ips.contains(&ip)),
        (Expect::Blocked, None) => true,
        (Expect::NextHops(_) | Expect::Communities(_), Some(got)) => {
            super::bgp_policy::judge(expect, got).unwrap_or(false)
        }
        _ => false,
    }
}

/// The address in netexec's `/clientip` answer (`ip:port`, `[v6]:port`).
pub fn client_ip(answer: &str) -> Option<IpAddr> {
    let host = answer.rsplit_once(':').map_or(answer, |(h, _)| h);
    host.trim_matches(|c| c == '[' || c == ']').parse().ok()
}

/// A measured check.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub check: Check,
    /// The answer, or why there was none.
    pub answer: Result<String, String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        judge(&self.check.expect, self.answer.as_ref().ok().map(String::as_str))
    }
}

/// The measured matrix.
#[derive(Debug, Clone)]
pub struct Report {
    pub targets: Vec<Target>,
    pub services: Vec<ServiceTarget>,
    pub eips: Vec<EipTarget>,
    /// How many NetworkPolicies the expectations followed.
    pub policies: usize,
    pub outcomes: Vec<Outcome>,
}

impl Report {
    pub fn healthy(&self) -> bool {
        self.outcomes.iter().all(Outcome::passed)
    }

    pub fn failures(&self) -> Vec<&Outcome> {
        self.outcomes.iter().filter(|o| !o.passed()).collect()
    }

    fn cell(&self, kind: Kind, from: Option<usize>, to: Option<usize>) -> &'static str {
        let Some(o) = self
            .outcomes
            .iter()
            .find(|o| o.check.kind == kind && o.check.from == from && o.check.to == to)
        else {
            return "";
        };
        match (&o.check.expect, o.passed()) {
            (Expect::Blocked, true) => "blocked",
            (_, true) => "ok",
            (Expect::Blocked, false) => "LEAKS",
            (_, false) => "FAIL",
        }
    }

    /// The source address the outside host saw from pod `i` (`kind`: over IPv4 or IPv6), when it
    /// answered.
    fn seen_by_outside(&self, i: usize, kind: Kind) -> Option<IpAddr> {
        self.outcomes
            .iter()
            .find(|o| o.check.kind == kind && o.check.from == Some(i))
            .and_then(|o| o.answer.as_ref().ok())
            .and_then(|a| client_ip(a))
    }

    /// The label of a check's end: `to` of a Service check names a Service.
    fn label(&self, kind: Kind, i: Option<usize>, is_to: bool) -> String {
        match i {
            None if matches!(kind, Kind::OutsideToPod6 | Kind::PodToOutside6) => "outside (IPv6)".to_owned(),
            None if matches!(kind, Kind::TorCommunities | Kind::TorNextHops) => "the ToR".to_owned(),
            None => "outside".to_owned(),
            Some(i)
                if is_to
                    && matches!(
                        kind,
                        Kind::PodToService
                            | Kind::OutsideToService
                            | Kind::TorCommunities
                            | Kind::TorNextHops
                    ) =>
            {
                self.services[i].label()
            }
            Some(k) if is_to && kind == Kind::OutsideToEip => {
                format!("{} {}:{}", self.eips[k].label, self.eips[k].ip, self.eips[k].port)
            }
            Some(i) => self.targets[i].label(),
        }
    }

    /// The matrix as text: pod → pod as a grid (rows from, columns to), then the outside host's
    /// rows, then every failure with what was seen.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let n = self.targets.len();
        let width = self
            .targets
            .iter()
            .map(|t| t.label().len())
            .max()
            .unwrap_or(7)
            .max(9);
        let _ = writeln!(
            out,
            "connectivity, measured with real traffic (HTTP to each pod's netexec server):"
        );
        let _ = writeln!(out, "  pods ({n} with a server):");
        for (i, t) in self.targets.iter().enumerate() {
            let _ = writeln!(
                out,
                "    [{i}] {:width$} {:15} {:6} subnet {} (vpc {}){}{}{}{}",
                t.label(),
                t.ip,
                t.node,
                t.subnet,
                t.vpc,
                if t.announced { ", announced" } else { "" },
                if t.nat_outgoing { ", natOutgoing" } else { "" },
                match t.attachment {
                    Attachment::Overlay => "",
                    Attachment::Underlay { u2o: false } => ", underlay",
                    Attachment::Underlay { u2o: true } => ", underlay (u2o)",
                },
                t.ip6.map(|ip| format!(", IPv6 {ip}")).unwrap_or_default(),
            );
        }
        let _ = write!(out, "  pod → pod (row → column):\n    {:>5}", "");
        for j in 0..n {
            let _ = write!(out, " {:>8}", format!("[{j}]"));
        }
        out.push('\n');
        for i in 0..n {
            let _ = write!(out, "    {:>5}", format!("[{i}]"));
            for j in 0..n {
                let cell = if i == j {
                    "-"
                } else {
                    self.cell(Kind::PodToPod, Some(i), Some(j))
                };
                let _ = write!(out, " {cell:>8}");
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "  outside host ↔ pods (in: BGP routes through the ToR, or an underlay pod's VLAN; out: the node's NAT, a custom VPC's EIP, or the pod's own announced or underlay address):"
        );
        for i in 0..n {
            let _ = writeln!(
                out,
                "    {:width$}  outside → pod: {:8}  pod → outside: {:8}{}",
                self.targets[i].label(),
                self.cell(Kind::OutsideToPod, None, Some(i)),
                self.cell(Kind::PodToOutside, Some(i), None),
                self.seen_by_outside(i, Kind::PodToOutside)
                    .map(|ip| format!(" (the outside saw {ip})"))
                    .unwrap_or_default(),
            );
        }
        let dual: Vec<usize> = (0..n)
            .filter(|&i| {
                self.outcomes
                    .iter()
                    .any(|o| o.check.kind == Kind::OutsideToPod6 && o.check.to == Some(i))
            })
            .collect();
        if !dual.is_empty() {
            let _ = writeln!(
                out,
                "  outside host ↔ pods over IPv6 ({} ↔ the pods' IPv6 addresses, BGP routes over the IPv6 sessions):",
                super::super::topology::Topology::outside_ip6()
            );
            for i in dual {
                let _ = writeln!(
                    out,
                    "    {:width$}  outside → pod (IPv6): {:8}  pod → outside (IPv6): {:8}{}",
                    self.targets[i].label(),
                    self.cell(Kind::OutsideToPod6, None, Some(i)),
                    self.cell(Kind::PodToOutside6, Some(i), None),
                    self.seen_by_outside(i, Kind::PodToOutside6)
                        .map(|ip| format!(" (the outside saw {ip})"))
                        .unwrap_or_default(),
                );
            }
        }
        if !self.services.is_empty() {
            let _ = writeln!(
                out,
                "  pods → Services (ClusterIP through the VPC's OVN load balancers, no kube-proxy):"
            );
            for (k, svc) in self.services.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "    [s{k}] {} {}:{} (vpc {}), backends {}",
                    svc.label(),
                    svc.ip,
                    svc.port,
                    svc.vpc,
                    if svc.backends.is_empty() {
                        "none ready".to_owned()
                    } else {
                        svc.backends.join(", ")
                    }
                );
            }
            let _ = write!(out, "    {:width$}", "");
            for k in 0..self.services.len() {
                let _ = write!(out, " {:>8}", format!("[s{k}]"));
            }
            out.push('\n');
            for i in 0..n {
                let _ = write!(out, "    {:width$}", self.targets[i].label());
                for k in 0..self.services.len() {
                    let _ = write!(out, " {:>8}", self.cell(Kind::PodToService, Some(i), Some(k)));
                }
                out.push('\n');
            }
            let reachable: Vec<(usize, IpAddr)> = self
                .services
                .iter()
                .enumerate()
                .filter_map(|(k, svc)| Some((k, svc.outside_ip?)))
                .collect();
            if !reachable.is_empty() {
                let _ = writeln!(
                    out,
                    "  outside host → Services (LoadBalancer IPs over BGP through the ToR):"
                );
                for (k, ip) in reachable {
                    let _ = writeln!(
                        out,
                        "    [s{k}] {} at {ip}:{}: {}",
                        self.services[k].label(),
                        self.services[k].port,
                        self.cell(Kind::OutsideToService, None, Some(k)),
                    );
                }
            }
        }
        let tor: Vec<&Outcome> = self
            .outcomes
            .iter()
            .filter(|o| matches!(o.check.kind, Kind::TorCommunities | Kind::TorNextHops))
            .collect();
        if !tor.is_empty() {
            let _ = writeln!(
                out,
                "  the ToR's BGP routes for Services (BgpAdvertisement communities, externalTrafficPolicy Local):"
            );
            for o in tor {
                let Some(svc) = o.check.to.and_then(|k| self.services.get(k)) else {
                    continue;
                };
                let what = match &o.check.expect {
                    Expect::Communities(c) => format!("communities {}", c.join(" ")),
                    Expect::NextHops(h) => format!(
                        "next hops only the endpoints' nodes {}",
                        super::bgp_policy::next_hops_answer(h)
                    ),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "    {} at {}: {what}: {}",
                    svc.label(),
                    svc.outside_ip.map(|ip| ip.to_string()).unwrap_or_default(),
                    if o.passed() { "ok" } else { "FAIL" },
                );
            }
        }
        if !self.eips.is_empty() {
            let _ = writeln!(
                out,
                "  outside host → custom VPC pods (OVN FIPs and DNAT rules on the external network):"
            );
            for (k, eip) in self.eips.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "    {} at {}:{} → {}{}: {}",
                    eip.label,
                    eip.ip,
                    eip.port,
                    self.targets[eip.backend].label(),
                    match (eip.kind, eip.listening) {
                        (EipUse::Dnat, false) => " (nothing listens on its internal port)",
                        _ => "",
                    },
                    self.cell(Kind::OutsideToEip, None, Some(k)),
                );
            }
        }
        if self.policies > 0 {
            let _ = writeln!(
                out,
                "  {} NetworkPolicies in force: the expectations follow Kubernetes' rules for them",
                self.policies
            );
        }
        let failures = self.failures();
        let total = self.outcomes.len();
        if failures.is_empty() {
            let _ = writeln!(out, "  all {total} checks as expected");
        } else {
            let _ = writeln!(out, "  {} of {total} checks FAILED:", failures.len());
            for o in failures {
                let _ = writeln!(
                    out,
                    "    {} → {} {}: expected {:?}, got {}",
                    self.label(o.check.kind, o.check.from, false),
                    self.label(o.check.kind, o.check.to, true),
                    o.check.path,
                    o.check.expect,
                    match &o.answer {
                        Ok(a) => format!("answer {a:?}"),
                        Err(e) => e.clone(),
                    }
                );
            }
        }
        out
    }
}
