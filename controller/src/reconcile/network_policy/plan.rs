//! A NetworkPolicy as OVN rows, with Kube-OVN's names and priorities (its `network_policy.go`
//! and `ovn-nb-acl.go`, as summarised in `reference/kube-ovn-next.md` §5):
//!
//! - a port group `<np>.<ns>` (`-` → `.`, prefixed `np` when the name does not start with a
//!   letter), `external_ids:np=<ns>/<np>`, holding the selected pods' switch ports; where that
//!   name is an older policy's too, a hashed one ([`super::names`]);
//! - per direction in `policyTypes`, a default drop at priority 2000: `outport == @pg && ip`
//!   (ingress, `to-lport`) or `inport == @pg && ip` (egress, `from-lport`, applied after the load
//!   balancer so a Service is judged by the backend it was sent to). Kube-OVN's `lax` enforcement
//!   drops only TCP, UDP and SCTP, so ICMP and the rest pass;
//! - per rule, priority 2001 `allow-related` ACLs: pod and namespace selector peers through an
//!   address set `<pg>.<direction>.allow.<IPv4|IPv6>.<rule>` (`external_ids:np=<ns>/<np>/<direction>`),
//!   each `ipBlock` as its own ACL with its `except` written inline, an empty peer list as "any";
//!   ports as `tcp.dst == N` or `N <= tcp.dst <= M`, named ports resolved through the container
//!   ports of the pods that receive the traffic (a name no pod declares allows nothing);
//! - IPv6 neighbour discovery passes (`allow-stateless` at 2001), else a default deny would cut
//!   the pods off their neighbours.
//!
//! Deviation from Kube-OVN: it also writes a per-rule `…except…` address set shared by all the
//! rule's `ipBlock`s, which over-denies when one block's `except` lies inside another block. We
//! write each block's `except` in its own ACL and no except sets (see `docs/architecture.md`).
//!
//! A pod's addresses are those the controller gave its switch port (`addresses` of the port in
//! the northbound DB, looked up by the caller), never its `ip_address` annotation: a pod's
//! author can write that annotation at creation, and a forged address would let another pod's
//! traffic through an allow set (issue 21). A pod without a port is in no address set yet.
//!
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube_ovn_api::annotations::keys;
use kube_ovn_api::names;
use kube_ovn_api::selector::Selector;

pub use super::names::port_group_name;

use crate::ovn::owned::AclSpec;
use crate::ovn::priority::{ACL_NODE_ALLOW, ACL_NP_ALLOW, ACL_NP_DEFAULT_DROP};

/// What is wrong with a policy, naming the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct PolicyError {
    pub field: String,
    pub problem: String,
}

fn bad(field: impl Into<String>, problem: impl Into<String>) -> PolicyError {
    PolicyError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// The IP families the cluster's ACLs are written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Families {
    pub v4: bool,
    pub v6: bool,
}

impl Families {
    fn each(self) -> impl Iterator<Item = bool> {
        [(true, self.v4), (false, self.v6)]
            .into_iter()
            .filter_map(|(v4, on)| on.then_some(v4))
    }
}

/// An address set a policy owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddressSetSpec {
    pub name: String,
    pub addresses: BTreeSet<String>,
    /// `<direction>`: `ingress` or `egress`, for `external_ids:np=<ns>/<np>/<direction>`.
    pub direction: &'static str,
}

/// Everything a policy needs in OVN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyRows {
    /// `<ns>/<np>`: the `np` external id of every row.
    pub key: String,
    pub port_group: String,
    /// The selected pods' logical switch ports, by name.
    pub ports: BTreeSet<String>,
    pub address_sets: Vec<AddressSetSpec>,
    pub acls: Vec<AclSpec>,
    /// The meters limiting logged ACLs' messages: `(name, packets per second)`.
    pub meters: Vec<(String, i64)>,
}

/// The addresses in a logical switch port's `addresses` entries (`MAC IP...`): what the
/// controller allocated to the pod. Other words (`dynamic`, `router`, the MAC) are skipped.
pub fn port_ips<'a>(addresses: impl IntoIterator<Item = &'a str>) -> Vec<IpAddr> {
    addresses
        .into_iter()
        .flat_map(str::split_whitespace)
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// How the planner learns the addresses the controller allocated to a pod.
pub type PodAddresses<'a> = &'a dyn Fn(&Pod) -> Vec<IpAddr>;

/// Pods a policy can act on: in the overlay (not host network) and not finished.
fn networked(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let host = spec.and_then(|s| s.host_network).unwrap_or(false);
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    !host && !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

/// Whether the policy has a peer selecting namespaces, so namespace labels concern it.
pub fn selects_namespaces(np: &NetworkPolicy) -> bool {
    let Some(spec) = np.spec.as_ref() else {
        return false;
    };
    let ingress = spec
        .ingress
        .iter()
        .flatten()
        .flat_map(|r| r.from.iter().flatten());
    let egress = spec.egress.iter().flatten().flat_map(|r| r.to.iter().flatten());
    ingress.chain(egress).any(|p| p.namespace_selector.is_some())
}

/// Log messages per second a logged policy may cause per direction, unless its
/// `acl_log_meter_rate` says otherwise (our default; OVN would log every packet).
pub const DEFAULT_LOG_RATE: i64 = 1000;

/// Options from the policy's annotations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Logging {
    drops: bool,
    allows: bool,
    rate: i64,
}

fn logging(np: &NetworkPolicy) -> Logging {
    let ann = np.annotations();
    if ann.get(keys::ENABLE_LOG).map(String::as_str) != Some("true") {
        return Logging::default();
    }
    // Kube-OVN logs drops by default; `log_acl_actions` may add `allow`.
    let actions = ann.get(keys::LOG_ACL_ACTIONS).map_or("drop", String::as_str);
    let has = |a: &str| actions.split(',').any(|x| x.trim() == a);
    Logging {
        drops: has("drop"),
        allows: has("allow"),
        rate: ann
            .get(keys::ACL_LOG_METER_RATE)
            .and_then(|r| r.trim().parse::<i64>().ok())
            .filter(|r| (1..=i64::from(u32::MAX)).contains(r))
            .unwrap_or(DEFAULT_LOG_RATE),
    }
}

/// A rule's peers and ports, for either direction.
type Rule = (Option<Vec<NetworkPolicyPeer>>, Option<Vec<NetworkPolicyPort>>);

struct Direction {
    name: &'static str,
    acl: &'static str,
    /// `outport` for ingress (the pod receives), `inport` for egress.
    port: &'static str,
    /// The peer's side of the packet: `src` for ingress, `dst` for egress.
    peer: &'static str,
}

const INGRESS: Direction = Direction {
    name: "ingress",
    acl: "to-lport",
    port: "outport",
    peer: "src",
};
const EGRESS: Direction = Direction {
    name: "egress",
    acl: "from-lport",
    port: "inport",
    peer: "dst",
};

fn v(v4: bool) -> &'static str {
    if v4 { "ip4" } else { "ip6" }
}

/// What a policy's rows are planned from, besides the policy.
pub struct World<'a> {
    pub pods: &'a [std::sync::Arc<Pod>],
    pub namespaces: &'a [std::sync::Arc<Namespace>],
    /// Every policy (for the port group's name).
    pub policies: &'a [std::sync::Arc<NetworkPolicy>],
    /// The allocated addresses of a pod.
    pub addresses: PodAddresses<'a>,
    pub families: Families,
}

/// The rows of `np`, given every pod, namespace and policy of the cluster.
pub fn plan_policy(np: &NetworkPolicy, world: &World<'_>, lax: bool) -> Result<PolicyRows, PolicyError> {
    let (pods, namespaces, families) = (world.pods, world.namespaces, world.families);
    let ns = np.namespace().unwrap_or_default();
    let name = np.name_any();
    let pg = super::names::port_group_of(np, world.policies);
    let spec = np.spec.clone().unwrap_or_default();
    let log = logging(np);
    let selector = Selector::parse(spec.pod_selector.as_ref(), "spec.podSelector")
        .map_err(|e| bad(e.field, e.problem))?;
    let live: Vec<&Pod> = pods.iter().map(|p| &**p).filter(|p| networked(p)).collect();
    let selected: Vec<&Pod> = live
        .iter()
        .copied()
        .filter(|p| p.namespace().as_deref() == Some(ns.as_str()) && selector.matches(p.labels()))
        .collect();
    let ports = selected
        .iter()
        .map(|p| names::pod_port_name(&p.name_any(), &ns, "ovn"))
        .collect();
    let ns_labels: BTreeMap<String, BTreeMap<String, String>> = namespaces
        .iter()
        .map(|n| (n.name_any(), n.labels().clone()))
        .collect();

    // `policyTypes` absent: ingress, and egress when there are egress rules (Kubernetes' rule).
    let types: Vec<String> = spec.policy_types.clone().unwrap_or_else(|| {
        let mut t = vec!["Ingress".to_owned()];
        if spec.egress.is_some() {
            t.push("Egress".to_owned());
        }
        t
    });
    let mut out = PolicyRows {
        key: format!("{ns}/{name}"),
        port_group: pg.clone(),
        ports,
        address_sets: Vec::new(),
        acls: Vec::new(),
        meters: Vec::new(),
    };
    for (i, t) in types.iter().enumerate() {
        let (dir, rules): (&Direction, Vec<Rule>) = match t.as_str() {
            "Ingress" => (
                &INGRESS,
                spec.ingress
                    .iter()
                    .flatten()
                    .map(|r| (r.from.clone(), r.ports.clone()))
                    .collect(),
            ),
            "Egress" => (
                &EGRESS,
                spec.egress
                    .iter()
                    .flatten()
                    .map(|r| (r.to.clone(), r.ports.clone()))
                    .collect(),
            ),
            other => {
                return Err(bad(
                    format!("spec.policyTypes[{i}]"),
                    format!("{other:?} is neither Ingress nor Egress"),
                ));
            }
        };
        let ctx = DirCtx {
            ns: &ns,
            pg: &pg,
            dir,
            live: &live,
            selected: &selected,
            ns_labels: &ns_labels,
            families,
            log,
            addresses: world.addresses,
        };
        ctx.default_drop(lax, &mut out.acls);
        if log.drops || log.allows {
            out.meters.push((meter_name(&pg, dir.acl), log.rate));
        }
        for (r, (peers, l4)) in rules.iter().enumerate() {
            ctx.rule(r, peers.as_deref(), l4.as_deref(), &mut out)?;
        }
    }
    Ok(out)
}

struct DirCtx<'a> {
    ns: &'a str,
    pg: &'a str,
    dir: &'a Direction,
    live: &'a [&'a Pod],
    selected: &'a [&'a Pod],
    ns_labels: &'a BTreeMap<String, BTreeMap<String, String>>,
    families: Families,
    log: Logging,
    addresses: PodAddresses<'a>,
}

impl DirCtx<'_> {
    fn acl(&self, priority: i64, r#match: String, action: &str, logged: bool) -> AclSpec {
        let mut acl = AclSpec::new(self.dir.acl, priority, r#match, action);
        if logged {
            acl.log = true;
            acl.name = Some(acl_name(self.pg));
            acl.severity = Some(if action == "drop" { "warning" } else { "info" }.into());
            acl.meter = Some(meter_name(self.pg, self.dir.acl));
        }
        if self.dir.name == "egress" {
            // Judged after DNAT: a Service's traffic by the backend it goes to.
            acl.options.insert("apply-after-lb".into(), "true".into());
        }
        acl
    }

    fn default_drop(&self, lax: bool, acls: &mut Vec<AclSpec>) {
        let (port, pg) = (self.dir.port, self.pg);
        let r#match = if lax {
            format!("{port} == @{pg} && ip && (tcp || udp || sctp)")
        } else {
            format!("{port} == @{pg} && ip")
        };
        acls.push(self.acl(ACL_NP_DEFAULT_DROP, r#match, "drop", self.log.drops));
        if self.families.v6 {
            acls.push(self.acl(
                ACL_NP_ALLOW,
                format!("{port} == @{pg} && (nd || nd_rs || nd_ra)"),
                "allow-stateless",
                false,
            ));
        }
    }

    /// The pods a selector peer names.
    fn peer_pods(&self, peer: &NetworkPolicyPeer, field: &str) -> Result<Vec<&Pod>, PolicyError> {
        let pods = Selector::parse(peer.pod_selector.as_ref(), &format!("{field}.podSelector"))
            .map_err(|e| bad(e.field, e.problem))?;
        let nss = match &peer.namespace_selector {
            Some(s) => {
                let sel = Selector::parse(Some(s), &format!("{field}.namespaceSelector"))
                    .map_err(|e| bad(e.field, e.problem))?;
                Some(sel)
            }
            None => None,
        };
        Ok(self
            .live
            .iter()
            .copied()
            .filter(|p| {
                let pns = p.namespace().unwrap_or_default();
                let ns_ok = match &nss {
                    // Without a namespace selector, the policy's own namespace.
                    None => pns == self.ns,
                    Some(sel) => self.ns_labels.get(&pns).is_some_and(|l| sel.matches(l)),
                };
                ns_ok && pods.matches(p.labels())
            })
            .collect())
    }

    fn rule(
        &self,
        r: usize,
        peers: Option<&[NetworkPolicyPeer]>,
        l4: Option<&[NetworkPolicyPort]>,
        out: &mut PolicyRows,
    ) -> Result<(), PolicyError> {
        let field = format!("spec.{}[{r}]", self.dir.name);
        let peers = peers.unwrap_or_default();
        // Which pods' container ports name the ports: the receivers.
        let mut peer_pods: Vec<&Pod> = Vec::new();
        let mut blocks: Vec<(IpNet, Vec<IpNet>)> = Vec::new();
        let mut has_selectors = false;
        let peer_field = if self.dir.name == "ingress" { "from" } else { "to" };
        for (j, peer) in peers.iter().enumerate() {
            let pf = format!("{field}.{peer_field}[{j}]");
            if let Some(b) = &peer.ip_block {
                if peer.pod_selector.is_some() || peer.namespace_selector.is_some() {
                    return Err(bad(pf, "ipBlock cannot be combined with selectors"));
                }
                let cidr = parse_cidr(&b.cidr, &format!("{pf}.ipBlock.cidr"))?;
                let mut except = Vec::new();
                for (k, e) in b.except.iter().flatten().enumerate() {
                    let f = format!("{pf}.ipBlock.except[{k}]");
                    let e = parse_cidr(e, &f)?;
                    if e.addr().is_ipv4() != cidr.addr().is_ipv4() || !cidr.contains(&e) {
                        return Err(bad(f, format!("{e} is not inside {cidr}")));
                    }
                    except.push(e);
                }
                blocks.push((cidr, except));
            } else {
                has_selectors = true;
                peer_pods.extend(self.peer_pods(peer, &pf)?);
            }
        }
        let receivers: Vec<&Pod> = if self.dir.name == "ingress" {
            self.selected.to_vec()
        } else if has_selectors && blocks.is_empty() {
            peer_pods.clone()
        } else {
            // Egress to addresses: any pod of the cluster may be behind them.
            self.live.to_vec()
        };
        let l4 = l4_matches(l4.unwrap_or_default(), &receivers, &format!("{field}.ports"))?;
        let (port, pg, side) = (self.dir.port, self.pg, self.dir.peer);
        for v4 in self.families.each() {
            let ipv = v(v4);
            let mut peer_matches: Vec<String> = Vec::new();
            if peers.is_empty() {
                peer_matches.push(ipv.to_owned());
            }
            if has_selectors {
                let set = format!(
                    "{pg}.{}.allow.{}.{r}",
                    self.dir.name,
                    if v4 { "IPv4" } else { "IPv6" }
                );
                let addresses = peer_pods
                    .iter()
                    .flat_map(|p| (self.addresses)(p))
                    .filter(|a| a.is_ipv4() == v4)
                    .map(|a| a.to_string())
                    .collect();
                peer_matches.push(format!("{ipv}.{side} == ${set}"));
                out.address_sets.push(AddressSetSpec {
                    name: set,
                    addresses,
                    direction: self.dir.name,
                });
            }
            for (cidr, except) in blocks.iter().filter(|(c, _)| c.addr().is_ipv4() == v4) {
                let mut m = format!("{ipv}.{side} == {cidr}");
                if !except.is_empty() {
                    let list: Vec<String> = except.iter().map(ToString::to_string).collect();
                    m = format!("{m} && {ipv}.{side} != {{{}}}", list.join(", "));
                }
                peer_matches.push(m);
            }
            for peer in &peer_matches {
                for l in &l4 {
                    let mut m = format!("{port} == @{pg} && {peer}");
                    if let Some(l) = l {
                        m.push_str(" && ");
                        m.push_str(l);
                    }
                    out.acls
                        .push(self.acl(ACL_NP_ALLOW, m, "allow-related", self.log.allows));
                }
            }
        }
        Ok(())
    }
}

fn parse_cidr(s: &str, field: &str) -> Result<IpNet, PolicyError> {
    let net: IpNet = s
        .trim()
        .parse()
        .map_err(|_| bad(field, format!("{s:?} is not a CIDR")))?;
    // OVN refuses a prefix with host bits set; Kubernetes accepts it and means the network.
    Ok(net.trunc())
}

/// The L4 conditions of a rule's `ports`: `None` is "any port" (no ports listed). An entry whose
/// named port no receiver declares contributes nothing, so a rule with only such entries allows
/// nothing.
fn l4_matches(
    ports: &[NetworkPolicyPort],
    receivers: &[&Pod],
    field: &str,
) -> Result<Vec<Option<String>>, PolicyError> {
    if ports.is_empty() {
        return Ok(vec![None]);
    }
    let mut out = BTreeSet::new();
    for (k, p) in ports.iter().enumerate() {
        let f = format!("{field}[{k}]");
        let proto = match p.protocol.as_deref().unwrap_or("TCP") {
            "TCP" => "tcp",
            "UDP" => "udp",
            "SCTP" => "sctp",
            other => {
                return Err(bad(
                    format!("{f}.protocol"),
                    format!("{other:?} is not TCP, UDP or SCTP"),
                ));
            }
        };
        match (&p.port, p.end_port) {
            (None, None) => {
                out.insert(Some(proto.to_owned()));
            }
            (None, Some(_)) => return Err(bad(format!("{f}.endPort"), "needs a port")),
            (Some(IntOrString::Int(n)), end) => {
                let n = port_number(*n, &format!("{f}.port"))?;
                match end {
                    None => out.insert(Some(format!("{proto}.dst == {n}"))),
                    Some(e) => {
                        let e = port_number(e, &format!("{f}.endPort"))?;
                        if e < n {
                            return Err(bad(format!("{f}.endPort"), format!("{e} is below port {n}")));
                        }
                        out.insert(Some(format!("{n} <= {proto}.dst <= {e}")))
                    }
                };
            }
            (Some(IntOrString::String(name)), end) => {
                if end.is_some() {
                    return Err(bad(format!("{f}.endPort"), "cannot go with a named port"));
                }
                let proto_k8s = p.protocol.as_deref().unwrap_or("TCP");
                for n in named_port(receivers, name, proto_k8s) {
                    out.insert(Some(format!("{proto}.dst == {n}")));
                }
            }
        }
    }
    Ok(out.into_iter().collect())
}

fn port_number(n: i32, field: &str) -> Result<u16, PolicyError> {
    u16::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| bad(field, format!("{n} is not a port (1..65535)")))
}

/// The numbers a port name stands for among `pods`' containers, for `protocol`.
fn named_port(pods: &[&Pod], name: &str, protocol: &str) -> BTreeSet<i32> {
    pods.iter()
        .filter_map(|p| p.spec.as_ref())
        .flat_map(|s| s.containers.iter())
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|cp| cp.name.as_deref() == Some(name) && cp.protocol.as_deref().unwrap_or("TCP") == protocol)
        .map(|cp| cp.container_port)
        .collect()
}

/// The meter of a policy's logged ACLs in one direction: `<pg>_<to-lport|from-lport>_meter`.
pub fn meter_name(pg: &str, direction: &str) -> String {
    format!("{pg}_{direction}_meter")
}

/// OVN limits ACL names to 63 characters; Kube-OVN cuts longer ones to 60 and adds `...`.
fn acl_name(name: &str) -> String {
    if name.len() > 63 {
        format!("{}...", &name[..60])
    } else {
        name.to_owned()
    }
}

/// The node ACLs on `node.<node>` (priority 3000): the node's own addresses reach its pods (kubelet
/// probes) and its pods reach it, whatever the policies say. `$<pg>_ip4` is the address set OVN
/// derives from the port group.
pub fn node_acls(node: &str, node_ips: &[IpAddr]) -> Vec<AclSpec> {
    let pg = names::node_port_group(node);
    let mut out = Vec::new();
    for ip in node_ips {
        let (ipv, set) = if ip.is_ipv4() {
            ("ip4", format!("${pg}_ip4"))
        } else {
            ("ip6", format!("${pg}_ip6"))
        };
        out.push(AclSpec::new(
            "to-lport",
            ACL_NODE_ALLOW,
            format!("{ipv}.src == {ip} && {ipv}.dst == {set}"),
            "allow-related",
        ));
        let mut back = AclSpec::new(
            "from-lport",
            ACL_NODE_ALLOW,
            format!("{ipv}.dst == {ip} && {ipv}.src == {set}"),
            "allow-related",
        );
        // In the same stage as the policies' egress drops, which run after the load balancer.
        back.options.insert("apply-after-lb".into(), "true".into());
        out.push(back);
    }
    out
}

#[cfg(test)]
mod tests;
