//! The policy cases of the NetworkPolicy truth table (`network_policy.rs`): each case's policies
//! and the verdicts Kubernetes' rules give, written by hand as a closure over (source,
//! destination, probe), independent of the controller's planner. Namespaces are `np1`..`np3`
//! (index 0..2; `np2` and `np3` have `env=prod`), pods `a`, `b`, `c` (index 0..2, label `app`).

use serde_json::{Value, json};

use super::policy::{Ep, PROBES, Probe};

pub fn ns_of(e: Ep) -> Option<usize> {
    match e {
        Ep::Pod(n, _) => Some(n),
        Ep::Outside => None,
    }
}

pub fn app_of(e: Ep) -> Option<usize> {
    match e {
        Ep::Pod(_, a) => Some(a),
        Ep::Outside => None,
    }
}

/// A policy case: the policies (namespace, name, spec), the expected verdicts, and which probes
/// `ovn-trace` checks.
pub struct Case {
    pub name: &'static str,
    pub policies: Vec<(&'static str, &'static str, Value)>,
    pub expect: Box<dyn Fn(Ep, Ep, Probe) -> bool>,
    /// Annotations of every policy of the case.
    pub annotations: Value,
    /// The probes tried (and traced): TCP 80 unless the case is about ports or protocols.
    pub probes: &'static [Probe],
}

pub fn cases(except: &str) -> Vec<Case> {
    let deny_ingress = json!({"podSelector": {}, "policyTypes": ["Ingress"]});
    let from_np2 = json!({"podSelector": {}, "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"name": "np2"}}}]}]});
    vec![
        Case {
            name: "default deny ingress",
            // Logged: its drops must show in ovn-controller's log, rate-limited by a meter.
            annotations: json!({"ovn.kubernetes.io/enable_log": "true"}),
            policies: vec![("np1", "deny", deny_ingress.clone())],
            expect: Box::new(|_, d, _| ns_of(d) != Some(0)),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "lax default deny ingress",
            // Kube-OVN's lax enforcement drops TCP, UDP and SCTP only: the probes as above,
            // and ping passes (checked below).
            annotations: json!({"ovn.kubernetes.io/network_policy_enforcement": "lax"}),
            policies: vec![("np1", "deny-lax", deny_ingress)],
            expect: Box::new(|_, d, _| ns_of(d) != Some(0)),
            probes: &[Probe::Tcp80, Probe::Udp80],
        },
        Case {
            name: "default deny egress",
            annotations: json!({}),
            policies: vec![(
                "np1",
                "deny-out",
                json!({"podSelector": {}, "policyTypes": ["Egress"]}),
            )],
            expect: Box::new(|s, _, _| ns_of(s) != Some(0)),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "allow from a namespace",
            annotations: json!({}),
            policies: vec![("np1", "from-np2", from_np2.clone())],
            expect: Box::new(|s, d, _| ns_of(d) != Some(0) || ns_of(s) == Some(1)),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "allow from pods of the namespace",
            annotations: json!({}),
            policies: vec![(
                "np1",
                "from-a",
                json!({"podSelector": {}, "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "a"}}}]}]}),
            )],
            expect: Box::new(|s, d, _| ns_of(d) != Some(0) || s == Ep::Pod(0, 0)),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "namespace and pod selectors",
            annotations: json!({}),
            policies: vec![(
                "np1",
                "prod-b-to-a",
                json!({"podSelector": {"matchLabels": {"app": "a"}}, "ingress": [{"from": [{
                    "namespaceSelector": {"matchLabels": {"env": "prod"}},
                    "podSelector": {"matchLabels": {"app": "b"}}}]}]}),
            )],
            expect: Box::new(|s, d, _| {
                d != Ep::Pod(0, 0) || (ns_of(s).is_some_and(|n| n > 0) && app_of(s) == Some(1))
            }),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "ipBlock with except",
            annotations: json!({}),
            policies: vec![(
                "np1",
                "pods-but-one",
                json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.16.0.0/16", "except": [except]}}]}]}),
            )],
            expect: Box::new(|s, d, _| ns_of(d) != Some(0) || (s != Ep::Outside && s != Ep::Pod(1, 2))),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "named port",
            annotations: json!({}),
            policies: vec![(
                "np1",
                "web",
                json!({"podSelector": {}, "ingress": [{"ports": [{"port": "web"}]}]}),
            )],
            expect: Box::new(|_, d, p| ns_of(d) != Some(0) || p == Probe::Tcp81),
            probes: &PROBES,
        },
        Case {
            name: "unknown named port allows nothing",
            annotations: json!({}),
            policies: vec![(
                "np1",
                "nope",
                json!({"podSelector": {}, "ingress": [{"ports": [{"port": "nope"}]}]}),
            )],
            expect: Box::new(|_, d, _| ns_of(d) != Some(0)),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "port range",
            annotations: json!({}),
            policies: vec![(
                "np2",
                "tcp-80-81",
                json!({"podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"ports": [{"protocol": "TCP", "port": 80, "endPort": 81}]}]}),
            )],
            expect: Box::new(|s, _, p| ns_of(s) != Some(1) || p != Probe::Udp80),
            probes: &PROBES,
        },
        Case {
            name: "egress to an outside CIDR",
            annotations: json!({}),
            policies: vec![(
                "np3",
                "outside-only",
                json!({"podSelector": {}, "policyTypes": ["Egress"],
                    "egress": [{"to": [{"ipBlock": {"cidr": "172.30.0.0/24"}}]}]}),
            )],
            expect: Box::new(|s, d, _| ns_of(s) != Some(2) || d == Ep::Outside),
            probes: &[Probe::Tcp80],
        },
        Case {
            name: "two policies unioned",
            annotations: json!({}),
            policies: vec![
                ("np1", "from-np2", from_np2),
                (
                    "np1",
                    "from-np3-a",
                    json!({"podSelector": {}, "ingress": [{"from": [{
                        "namespaceSelector": {"matchLabels": {"name": "np3"}},
                        "podSelector": {"matchLabels": {"app": "a"}}}]}]}),
                ),
            ],
            expect: Box::new(|s, d, _| ns_of(d) != Some(0) || ns_of(s) == Some(1) || s == Ep::Pod(2, 0)),
            probes: &[Probe::Tcp80],
        },
    ]
}
