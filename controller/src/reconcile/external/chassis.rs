//! Which chassis host a VPC's external gateway port, in which order (pure).
//!
//! Kube-OVN (`handleAddVpcExternalSubnet`, `pkg/controller/vpc.go`): the candidates are the nodes
//! labelled `ovn.kubernetes.io/external-gw=true`, each by the chassis its
//! `ovn.kubernetes.io/chassis` annotation names; they are sorted by the hex SHA-256 of
//! `<vpc><chassis>` ("distribute active gateway chassis across VPCs": each VPC gets its own
//! order, so the active gateways of many VPCs spread over the gateway nodes), and the i-th gets
//! Gateway_Chassis priority `100 - i` (`GwChassisMaxPriority`), the first being where OVN binds
//! the port while it lives.
//!
//! DIVERGE (plan §3.0.5): Kube-OVN only adds rows for chassis not yet listed. Here the rows are
//! reconciled: a node that loses its label loses its row (so removing the label fails the port
//! over), and priorities are rewritten to the order of the nodes labelled now.

use std::collections::BTreeSet;

/// Kube-OVN's `GwChassisMaxPriority`: the first chassis' priority.
pub const MAX_PRIORITY: i64 = 100;

/// A node as the choice of gateway chassis sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayNode {
    pub node: String,
    /// Its `ovn.kubernetes.io/chassis` annotation (empty: the node's daemon has not written it).
    pub chassis: String,
    /// Labelled `ovn.kubernetes.io/external-gw=true` and not being deleted.
    pub labelled: bool,
}

/// Why no gateway chassis can be chosen: every candidate is named, so the message says which
/// node to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoGateway {
    #[error("no node is labelled ovn.kubernetes.io/external-gw=true (Kube-OVN: no external gw nodes)")]
    NoLabelledNode,
    #[error(
        "no node labelled ovn.kubernetes.io/external-gw=true has a chassis in the southbound database yet: {0}"
    )]
    NoChassis(String),
}

/// The chassis a VPC's gateway port may live on: labelled nodes with a chassis annotation whose
/// chassis the southbound database knows. `sb_chassis` is `None` when there is no southbound
/// database to ask (no `--ovn-sb-addr`): the annotation is then taken on trust. A chassis that
/// already has a row (`listed`) stays a candidate while its Chassis row is missing: ovn-controller
/// deletes it on a graceful exit and writes it again when it starts, and a row rewritten at every
/// restart would only churn the northbound database (OVN does not bind the port there meanwhile).
pub fn candidates(
    nodes: &[GatewayNode],
    sb_chassis: Option<&BTreeSet<String>>,
    listed: &BTreeSet<String>,
) -> Result<Vec<String>, NoGateway> {
    let labelled: Vec<&GatewayNode> = nodes.iter().filter(|n| n.labelled).collect();
    if labelled.is_empty() {
        return Err(NoGateway::NoLabelledNode);
    }
    let mut out: Vec<String> = labelled
        .iter()
        .filter(|n| !n.chassis.is_empty())
        .filter(|n| sb_chassis.is_none_or(|sb| sb.contains(&n.chassis)) || listed.contains(&n.chassis))
        .map(|n| n.chassis.clone())
        .collect();
    out.sort();
    out.dedup();
    if out.is_empty() {
        let why: Vec<String> = labelled
            .iter()
            .map(|n| {
                if n.chassis.is_empty() {
                    format!(
                        "node {} has no chassis annotation (kube-ovn-cni not ready)",
                        n.node
                    )
                } else {
                    format!(
                        "node {}'s chassis {} is not in the southbound database",
                        n.node, n.chassis
                    )
                }
            })
            .collect();
        return Err(NoGateway::NoChassis(why.join("; ")));
    }
    Ok(out)
}

/// Kube-OVN's order for VPC `vpc`: by hex SHA-256 of `<vpc><chassis>`, ascending, each with its
/// priority `100 - i`.
pub fn order(vpc: &str, chassis: &[String]) -> Vec<(String, i64)> {
    let mut keyed: Vec<(String, &String)> = chassis
        .iter()
        .map(|c| (sha256_hex(&format!("{vpc}{c}")), c))
        .collect();
    keyed.sort();
    keyed
        .into_iter()
        .zip(0i64..)
        .map(|((_, c), i)| (c.clone(), MAX_PRIORITY - i))
        .collect()
}

/// The Gateway_Chassis row name Kube-OVN gives chassis `chassis` of router port `lrp`.
pub fn row_name(lrp: &str, chassis: &str) -> String {
    format!("{lrp}-{chassis}")
}

fn sha256_hex(s: &str) -> String {
    use std::fmt::Write as _;
    let digest = ring::digest::digest(&ring::digest::SHA256, s.as_bytes());
    digest.as_ref().iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, chassis: &str, labelled: bool) -> GatewayNode {
        GatewayNode {
            node: name.into(),
            chassis: chassis.into(),
            labelled,
        }
    }

    #[test]
    fn sha256_is_the_standard_one() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn order_is_kube_ovns_hash_order_with_falling_priorities() {
        let chassis: Vec<String> = ["c1", "c2", "c3"].map(String::from).to_vec();
        let got = order("vpc1", &chassis);
        let mut want: Vec<(String, String)> = chassis
            .iter()
            .map(|c| (sha256_hex(&format!("vpc1{c}")), c.clone()))
            .collect();
        want.sort();
        assert_eq!(
            got.iter().map(|(c, _)| c.clone()).collect::<Vec<_>>(),
            want.into_iter().map(|(_, c)| c).collect::<Vec<_>>()
        );
        assert_eq!(got.iter().map(|(_, p)| *p).collect::<Vec<_>>(), [100, 99, 98]);
        // The order depends on the VPC: with enough VPCs each chassis is first for some.
        let firsts: BTreeSet<String> = (0..32)
            .map(|i| order(&format!("vpc{i}"), &chassis)[0].0.clone())
            .collect();
        assert_eq!(firsts.len(), 3, "{firsts:?}");
        // The input order does not matter.
        let reversed: Vec<String> = chassis.iter().rev().cloned().collect();
        assert_eq!(order("vpc1", &reversed), got);
    }

    #[test]
    fn candidates_are_labelled_nodes_with_a_known_chassis() {
        let nodes = [
            node("n1", "c1", true),
            node("n2", "c2", true),
            node("n3", "c3", false),
            node("n4", "", true),
        ];
        let sb: BTreeSet<String> = ["c1", "c3"].map(String::from).into();
        let none = BTreeSet::new();
        assert_eq!(candidates(&nodes, Some(&sb), &none).unwrap(), ["c1"]);
        // A listed chassis whose ovn-controller is restarting keeps its row.
        let listed: BTreeSet<String> = ["c2".to_owned()].into();
        assert_eq!(candidates(&nodes, Some(&sb), &listed).unwrap(), ["c1", "c2"]);
        // Without a southbound database the annotation is trusted.
        assert_eq!(candidates(&nodes, None, &none).unwrap(), ["c1", "c2"]);
        assert_eq!(
            candidates(&[node("n3", "c3", false)], Some(&sb), &none),
            Err(NoGateway::NoLabelledNode)
        );
        let err = candidates(&[node("n2", "c2", true), node("n4", "", true)], Some(&sb), &none)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("node n2's chassis c2 is not in the southbound database")
                && err.contains("node n4 has no chassis annotation"),
            "{err}"
        );
    }
}
