//! Reading the traces back into one sentence a person can act on: where `ovn-trace` (its detailed
//! output) says the packet went, or which stage dropped it and, for an ACL, which ACL and which
//! NetworkPolicy that ACL belongs to; and what `ofproto/trace` says OVS does with it. Pure.
//!
//! ovn-trace prints each logical flow it follows as `N. <stage> (<source>): <match>, priority P,
//! uuid U` with its actions indented below; `/* output to "<port>", type "<type>" */` where the
//! packet leaves a datapath (`patch` to the next one), `LOG: ACL name=<n>, …, verdict=drop` for a
//! logged ACL, and `no match (implicit drop)` when no flow of a stage matched.

use std::collections::BTreeMap;

/// A logical flow ovn-trace followed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Flow {
    pub stage: String,
    pub r#match: String,
    pub priority: Option<i64>,
}

/// What happened to the packet in OVN's logical pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OvnVerdict {
    /// Output to these ports of a switch (VIFs: pods, nodes' ports).
    Delivered(Vec<String>),
    /// Leaves OVN through a port of this type (localnet: the underlay; l3gateway, …).
    LeftThrough { port: String, kind: String },
    /// Dropped (or rejected) by an ACL; the flow is the ACL's, the name from its log when logged.
    DroppedByAcl {
        flow: Flow,
        name: Option<String>,
        action: String,
    },
    /// Dropped by a stage that is not an ACL's.
    Dropped { flow: Flow, why: String },
    /// None of the above: the last flow followed.
    Unknown(Option<Flow>),
}

/// Whether a stage evaluates ACLs (not the pre-/hint stages around them): `ls_in_acl`,
/// `ls_out_acl`, `ls_in_acl_after_lb`, and OVN ≥ 23.06's `*_acl_eval`.
fn is_acl_stage(stage: &str) -> bool {
    stage.contains("_acl")
        && !stage.contains("pre_acl")
        && !stage.contains("acl_hint")
        && !stage.contains("acl_action")
        && !stage.contains("acl_sample")
}

/// Parses a flow line: ` 4. ls_out_acl (northd.c:6543): <match>, priority 3000, uuid 7c0f4df1`.
fn parse_flow(line: &str) -> Option<Flow> {
    let t = line.trim_start();
    let (num, rest) = t.split_once(". ")?;
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if let Some((stage, _)) = rest.split_once(": no match") {
        return Some(Flow {
            stage: stage.trim().to_owned(),
            r#match: "no match (implicit drop)".into(),
            priority: None,
        });
    }
    let (head, tail) = rest.split_once("): ")?;
    let stage = head.split(" (").next()?.trim().to_owned();
    let (m, prio) = match tail.rsplit_once(", priority ") {
        Some((m, p)) => (
            m.to_owned(),
            p.split(',').next().and_then(|p| p.trim().parse().ok()),
        ),
        None => (tail.to_owned(), None),
    };
    Some(Flow {
        stage,
        r#match: m,
        priority: prio,
    })
}

/// `LOG: ACL name=deny.demo, direction=OUT, verdict=drop, …` → (`deny.demo`, `drop`).
fn parse_log(line: &str) -> Option<(Option<String>, String)> {
    let rest = line.trim_start().strip_prefix("LOG: ACL ")?;
    let mut name = None;
    let mut verdict = String::new();
    for part in rest.split(", ") {
        if let Some(n) = part.strip_prefix("name=") {
            let n = n.trim_matches('"');
            if n != "<unnamed>" {
                name = Some(n.to_owned());
            }
        } else if let Some(v) = part.strip_prefix("verdict=") {
            v.clone_into(&mut verdict);
        }
    }
    Some((name, verdict))
}

/// `/* output to "b.demo", type "" */` → (`b.demo`, ``).
fn parse_output(line: &str) -> Option<(String, String)> {
    let rest = line.trim().strip_prefix("/* output to \"")?;
    let (port, rest) = rest.split_once('"')?;
    let kind = rest
        .split_once("type \"")
        .and_then(|(_, k)| k.split_once('"'))
        .map_or("", |(k, _)| k);
    Some((port.to_owned(), kind.to_owned()))
}

/// The verdict of ovn-trace's detailed output.
pub fn ovn_verdict(trace: &str) -> OvnVerdict {
    let mut current: Option<Flow> = None;
    let mut last_acl: Option<Flow> = None;
    let mut logged: Option<Option<String>> = None;
    let mut delivered = Vec::new();
    let mut left = None;
    let mut dropped = None;
    for line in trace.lines() {
        if let Some(flow) = parse_flow(line) {
            if is_acl_stage(&flow.stage) {
                last_acl = Some(flow.clone());
            }
            if flow.priority.is_none() && dropped.is_none() {
                dropped = Some(OvnVerdict::Dropped {
                    flow: flow.clone(),
                    why: "no logical flow matched".into(),
                });
            }
            current = Some(flow);
            continue;
        }
        if let Some((name, verdict)) = parse_log(line) {
            if verdict == "drop" || verdict == "reject" {
                logged = Some(name);
            }
            continue;
        }
        if let Some((port, kind)) = parse_output(line) {
            match kind.as_str() {
                "patch" => {}
                "" | "localport" | "virtual" | "external" => delivered.push(port),
                _ => left = Some(OvnVerdict::LeftThrough { port, kind }),
            }
            continue;
        }
        let action = line.trim();
        let drop_action = action == "drop;" || action.starts_with("reject");
        if drop_action && dropped.is_none() {
            let flow = current.clone().unwrap_or_default();
            let acl_related = is_acl_stage(&flow.stage) || flow.stage.contains("acl_action");
            dropped = Some(if acl_related {
                OvnVerdict::DroppedByAcl {
                    flow: last_acl.clone().unwrap_or(flow),
                    name: logged.clone().flatten(),
                    action: action
                        .trim_end_matches(';')
                        .split_whitespace()
                        .next()
                        .unwrap_or("drop")
                        .to_owned(),
                }
            } else {
                OvnVerdict::Dropped {
                    flow,
                    why: "its action is drop".into(),
                }
            });
        }
    }
    // A logged ACL's drop prints the log and then nothing (OVN 23.03): no `drop;` follows.
    if dropped.is_none()
        && delivered.is_empty()
        && let Some(name) = logged
    {
        dropped = Some(OvnVerdict::DroppedByAcl {
            flow: last_acl.clone().or(current.clone()).unwrap_or_default(),
            name,
            action: "drop".into(),
        });
    }
    if !delivered.is_empty() {
        delivered.dedup();
        return OvnVerdict::Delivered(delivered);
    }
    if let Some(d) = dropped {
        return d;
    }
    left.unwrap_or(OvnVerdict::Unknown(current))
}

/// An NB ACL, as `ovn-nbctl list ACL` gives it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NbAcl {
    pub name: Option<String>,
    /// `from-lport` or `to-lport`.
    pub direction: String,
    pub priority: i64,
    pub r#match: String,
    pub action: String,
}

/// Who owns an ACL that dropped the packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    pub acl: Option<NbAcl>,
    /// `namespace/name` of the NetworkPolicy whose port group the ACL matches on.
    pub policy: Option<String>,
}

/// The port groups an OVN match names (`@deny.demo`).
pub fn port_groups_in(m: &str) -> Vec<String> {
    m.split('@')
        .skip(1)
        .map(|s| {
            s.chars()
                .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                .collect::<String>()
        })
        .filter(|s| !s.is_empty())
        .collect()
}

/// The NB ACL behind a logical flow (northd puts the ACL's match in the flow's, in parentheses,
/// at the ACL's priority plus 1000), and the NetworkPolicy its port group belongs to
/// (`external_ids:np=<ns>/<name>` on the port group, as Kube-OVN marks it).
pub fn attribute(
    flow: &Flow,
    logged_name: Option<&str>,
    acls: &[NbAcl],
    policies_by_group: &BTreeMap<String, String>,
) -> Attribution {
    let candidates = acls.iter().filter(|a| {
        !a.r#match.is_empty()
            && flow.r#match.contains(&a.r#match)
            && flow.priority.is_none_or(|p| p == a.priority + 1000)
    });
    let acl = candidates
        .clone()
        .find(|a| logged_name.is_some() && a.name.as_deref() == logged_name)
        .or_else(|| {
            candidates
                .clone()
                .find(|a| a.action == "drop" || a.action == "reject")
        })
        .or_else(|| candidates.clone().next())
        .cloned();
    let in_match = acl.as_ref().map_or(&flow.r#match, |a| &a.r#match);
    let policy = port_groups_in(in_match)
        .iter()
        .chain(logged_name.map(str::to_owned).iter())
        .find_map(|g| policies_by_group.get(g).cloned());
    Attribution { acl, policy }
}

/// What `ofproto/trace` ends with: `Datapath actions: …`.
pub fn datapath_actions(trace: &str) -> Option<String> {
    trace
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("Datapath actions: "))
        .map(str::to_owned)
}

/// One line about what OVS does with the packet.
pub fn ovs_verdict(trace: &str, node: &str) -> String {
    match datapath_actions(trace) {
        Some(a) if a == "drop" => format!("OVS on {node} drops the packet (Datapath actions: drop)"),
        Some(a) if a.contains("tnl_push") || a.contains("set(tunnel(") => {
            // The userspace datapath's ofproto/trace says where: "-> tunneling to 172.30.0.12 via
            // br-ul".
            let to = trace
                .lines()
                .rev()
                .find_map(|l| l.trim().strip_prefix("-> tunneling to "))
                .and_then(|r| r.split_whitespace().next())
                // The kernel datapath's: set(tunnel(tun_id=…,dst=172.30.0.12,…)).
                .or_else(|| {
                    a.split_once("tunnel(")
                        .and_then(|(_, t)| t.split_once("dst="))
                        .and_then(|(_, d)| d.split([',', ')']).next())
                })
                .map_or_else(String::new, |ip| format!(" at {ip}"));
            // The actions (conntrack, the whole encapsulation header) are in the raw trace above.
            format!("OVS on {node} sends the packet through a tunnel to the node{to}")
        }
        Some(a) => format!("OVS on {node} forwards the packet (Datapath actions: {a})"),
        None => format!("OVS on {node}: ofproto/trace printed no datapath actions"),
    }
}

#[cfg(test)]
mod tests;
