//! The matrix's rows for BGP advertisement policy (issue 27), about announced Services, seen at
//! the ToR rather than with HTTP:
//! - communities: a Service whose outside address (LoadBalancer or external IP) a
//!   `BgpAdvertisement` selects (its `advertise` kind, `serviceSelector` on the Service's labels,
//!   `namespaceSelector` on its Namespace's, `peerSelector` empty so the ToR, a flag peer, is
//!   among its peers) carries each of the advertisement's communities in every path the ToR
//!   learnt for it;
//! - `externalTrafficPolicy: Local`: the ToR's kernel routes the outside address only through the
//!   nodes with a ready endpoint (the speakers elsewhere do not announce it), and the outside host
//!   is seen by the backend with its own address (`super::plan`'s `/clientip` row).
//!
//! The answers are the ToR's own output, made canonical here: next hops from `ip route show`,
//! communities from `birdc show route … all` or FRR's `show bgp ipv4 unicast … json`.

use std::collections::BTreeMap;
use std::net::IpAddr;

use kube_ovn_api::bgp_advertisement::{AdvertiseKind, BgpAdvertisement};
use kube_ovn_api::selector::Selector;

use super::{Check, Expect, Kind, ServiceTarget};

/// A community as `high:low` numbers: `65000:100`, or a well-known name (RFC 1997, RFC 7999,
/// RFC 8326) as its value; `None` when it is neither.
pub fn canonical_community(text: &str) -> Option<String> {
    let known = match text {
        "no-export" => Some((65535, 65281)),
        "no-advertise" => Some((65535, 65282)),
        "no-export-subconfed" | "local-AS" | "local-as" => Some((65535, 65283)),
        "no-peer" => Some((65535, 65284)),
        "blackhole" => Some((65535, 666)),
        "graceful-shutdown" => Some((65535, 0)),
        _ => None,
    };
    if let Some((high, low)) = known {
        return Some(format!("{high}:{low}"));
    }
    let (h, l) = text
        .trim_matches(|c| c == '(' || c == ')')
        .split_once([':', ','])?;
    let (high, low): (u16, u16) = (h.trim().parse().ok()?, l.trim().parse().ok()?);
    Some(format!("{high}:{low}"))
}

/// The communities of each path in `birdc show route for <prefix> all` (its `BGP.community:`
/// lines, `(65000,100) (65535,65281)`), canonical.
pub fn bird_communities(text: &str) -> Vec<Vec<String>> {
    let mut paths: Vec<Vec<String>> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("BGP.origin:") {
            paths.push(Vec::new());
        } else if let Some(list) = line.strip_prefix("BGP.community:")
            && let Some(path) = paths.last_mut()
        {
            path.extend(list.split_whitespace().filter_map(canonical_community));
        }
    }
    paths
}

/// The same from FRR's `show bgp ipv4 unicast <prefix> json` (`paths[].community.string`,
/// space-separated, well-known ones by name).
pub fn frr_communities(json: &serde_json::Value) -> Vec<Vec<String>> {
    json["paths"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| {
            p["community"]["string"]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(canonical_community)
                .collect()
        })
        .collect()
}

/// How a community check's answer is written: each path's communities (`-` for none), paths
/// separated by `|`.
pub fn communities_answer(paths: &[Vec<String>]) -> String {
    paths
        .iter()
        .map(|p| if p.is_empty() { "-".to_owned() } else { p.join(" ") })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The next hops of the kernel route in `ip route show <prefix>` (one `via`, or `nexthop via`
/// lines; `via inet6 <address>` for an IPv6 next hop), sorted.
pub fn next_hops(route: &str) -> Vec<IpAddr> {
    let words: Vec<&str> = route.split_whitespace().collect();
    let mut hops: Vec<IpAddr> = words
        .iter()
        .enumerate()
        .filter(|(_, w)| **w == "via")
        .filter_map(|(i, _)| {
            let next = words.get(i + 1)?;
            let at = if matches!(*next, "inet" | "inet6") {
                i + 2
            } else {
                i + 1
            };
            words.get(at)?.parse().ok()
        })
        .collect();
    hops.sort();
    hops.dedup();
    hops
}

/// How a next-hop check's answer is written.
pub fn next_hops_answer(hops: &[IpAddr]) -> String {
    hops.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// Whether a community or next-hop answer is what `expect` asks for.
pub fn judge(expect: &Expect, answer: &str) -> Option<bool> {
    match expect {
        Expect::NextHops(want) => Some(next_hops_answer(want) == answer),
        Expect::Communities(want) => {
            let paths: Vec<Vec<&str>> = answer
                .split('|')
                .map(|p| p.split_whitespace().collect())
                .collect();
            Some(
                !answer.trim().is_empty()
                    && paths.iter().all(|p| want.iter().all(|c| p.contains(&c.as_str()))),
            )
        }
        _ => None,
    }
}

/// The communities the ToR should see on a Service's outside address: those of every
/// advertisement of `kind` (LoadBalancer or external IPs) selecting the Service (its labels, its
/// Namespace's) for the flag peers (no `peerSelector`, or an empty one), sorted, canonical.
pub fn communities_for(
    advertisements: &[BgpAdvertisement],
    kind: AdvertiseKind,
    service_labels: &BTreeMap<String, String>,
    namespace_labels: &BTreeMap<String, String>,
) -> Option<Vec<String>> {
    let selects = |s: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
                   labels: &BTreeMap<String, String>| {
        Selector::parse(s, "").is_ok_and(|s| s.matches(labels))
    };
    let mut selected = false;
    let mut out: Vec<String> = Vec::new();
    for adv in advertisements {
        let spec = &adv.spec;
        let peers_everyone = spec.peer_selector.as_ref().is_none_or(|p| {
            p.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
                && p.match_expressions.as_ref().is_none_or(Vec::is_empty)
        });
        if spec.advertise.contains(&kind)
            && peers_everyone
            && selects(spec.service_selector.as_ref(), service_labels)
            && selects(spec.namespace_selector.as_ref(), namespace_labels)
        {
            selected = true;
            out.extend(spec.communities.iter().filter_map(|c| canonical_community(c)));
        }
    }
    out.sort();
    out.dedup();
    selected.then_some(out)
}

/// The ToR checks of `services` (`to` indexes them): for each announced one with communities
/// expected, and for each `Local` one, its next hops.
pub fn plan(services: &[ServiceTarget]) -> Vec<Check> {
    let mut checks = Vec::new();
    for (k, svc) in services.iter().enumerate() {
        if svc.outside_ip.is_none() || svc.vpc != super::DEFAULT_VPC || svc.backends.is_empty() {
            continue;
        }
        if !svc.communities.is_empty() {
            checks.push(Check {
                kind: Kind::TorCommunities,
                from: None,
                to: Some(k),
                path: "",
                expect: Expect::Communities(svc.communities.clone()),
            });
        }
        if svc.local {
            checks.push(Check {
                kind: Kind::TorNextHops,
                from: None,
                to: Some(k),
                path: "",
                expect: Expect::NextHops(svc.local_next_hops.clone()),
            });
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn communities_read_from_either_tor_are_canonical() {
        assert_eq!(canonical_community("65000:100").as_deref(), Some("65000:100"));
        assert_eq!(canonical_community("(65000,100)").as_deref(), Some("65000:100"));
        assert_eq!(canonical_community("no-export").as_deref(), Some("65535:65281"));
        assert_eq!(canonical_community("70000:1"), None);
        let bird = "Table master4:\n\
            203.0.113.2/32       unicast [node1 12:00:00.000] * (100) [AS65000i]\n\
            \tvia 172.30.0.11 on fabric\n\
            \tType: BGP univ\n\
            \tBGP.origin: IGP\n\
            \tBGP.as_path: 65000\n\
            \tBGP.community: (65000,100) (65535,65281)\n\
                                 unicast [node2_v6 12:00:00.000] (90) [AS65000i]\n\
            \tvia fd00:172:30::12 on fabric\n\
            \tBGP.origin: IGP\n\
            \tBGP.community: (65000,100)\n";
        let paths = bird_communities(bird);
        assert_eq!(
            paths,
            vec![
                vec!["65000:100".to_owned(), "65535:65281".to_owned()],
                vec!["65000:100".to_owned()]
            ]
        );
        let answer = communities_answer(&paths);
        assert_eq!(answer, "65000:100 65535:65281 | 65000:100");
        assert_eq!(
            judge(&Expect::Communities(vec!["65000:100".into()]), &answer),
            Some(true)
        );
        // One path without the community, or no path at all, fails.
        assert_eq!(
            judge(&Expect::Communities(vec!["65535:65281".into()]), &answer),
            Some(false)
        );
        assert_eq!(
            judge(&Expect::Communities(vec!["65000:100".into()]), ""),
            Some(false)
        );
        let untagged = communities_answer(&[vec![], vec!["65000:100".into()]]);
        assert_eq!(untagged, "- | 65000:100");
        assert_eq!(
            judge(&Expect::Communities(vec!["65000:100".into()]), &untagged),
            Some(false)
        );
        let frr = serde_json::json!({"paths": [
            {"community": {"string": "65000:100 no-export"}},
            {"community": {"string": "65000:100"}}
        ]});
        assert_eq!(communities_answer(&frr_communities(&frr)), answer);
    }

    #[test]
    fn next_hops_are_read_from_single_and_multipath_routes() {
        assert_eq!(
            next_hops("203.0.113.2 via 172.30.0.12 dev fabric proto bird metric 32 \n"),
            vec![ip("172.30.0.12")]
        );
        let ecmp = "203.0.113.2 proto bird metric 32 \n\tnexthop via 172.30.0.12 dev fabric weight 1 \n\tnexthop via 172.30.0.11 dev fabric weight 1 \n";
        assert_eq!(next_hops(ecmp), vec![ip("172.30.0.11"), ip("172.30.0.12")]);
        assert_eq!(
            next_hops("10.66.0.12 via inet6 fd00:172:30::12 dev fabric proto bird metric 32"),
            vec![ip("fd00:172:30::12")]
        );
        assert!(next_hops("").is_empty());
        let want = Expect::NextHops(vec![ip("172.30.0.12")]);
        assert_eq!(judge(&want, &next_hops_answer(&next_hops(ecmp))), Some(false));
        assert_eq!(judge(&want, "172.30.0.12"), Some(true));
        assert_eq!(judge(&Expect::Blocked, ""), None);
    }

    fn advertisement(spec: &serde_json::Value) -> BgpAdvertisement {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "bgp.kube-ovn-rs.io/v1alpha1",
            "kind": "BgpAdvertisement",
            "metadata": {"name": "a"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn the_communities_expected_are_those_of_the_advertisements_selecting_the_service_for_the_tor() {
        let labels = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let advs = [
            advertisement(&serde_json::json!({"advertise": ["LoadBalancerIPs"],
                "serviceSelector": {"matchLabels": {"bgp-policy": "tagged"}},
                "communities": ["65000:100", "no-export"]})),
            // Another peer's: not the ToR's (a flag peer has no labels).
            advertisement(&serde_json::json!({"advertise": ["LoadBalancerIPs"],
                "peerSelector": {"matchLabels": {"rack": "b"}}, "communities": ["65000:200"]})),
            // ClusterIPs only.
            advertisement(&serde_json::json!({"advertise": ["ClusterIPs"], "communities": ["65000:300"]})),
            // Every namespace labelled team=a, no communities: selects, adds none.
            advertisement(&serde_json::json!({"advertise": ["LoadBalancerIPs"],
                "namespaceSelector": {"matchLabels": {"team": "a"}}})),
        ];
        let tagged = labels(&[("bgp-policy", "tagged")]);
        assert_eq!(
            communities_for(&advs, AdvertiseKind::LoadBalancerIps, &tagged, &labels(&[])),
            Some(vec!["65000:100".to_owned(), "65535:65281".to_owned()])
        );
        assert_eq!(
            communities_for(&advs, AdvertiseKind::LoadBalancerIps, &labels(&[]), &labels(&[])),
            None
        );
        assert_eq!(
            communities_for(
                &advs,
                AdvertiseKind::LoadBalancerIps,
                &labels(&[]),
                &labels(&[("team", "a")])
            ),
            Some(vec![])
        );
        assert_eq!(
            communities_for(&advs, AdvertiseKind::ExternalIps, &tagged, &labels(&[])),
            None
        );
    }

    #[test]
    fn a_local_service_is_checked_at_the_tor_and_answers_with_the_clients_address() {
        let svc = ServiceTarget {
            namespace: "demo".into(),
            name: "local".into(),
            ip: ip("10.96.0.20"),
            port: 80,
            vpc: super::super::DEFAULT_VPC.into(),
            backends: vec!["local-1".into()],
            outside_ip: Some(ip("203.0.113.2")),
            ingress_sources: vec![ip("198.51.100.10")],
            local: true,
            local_next_hops: vec![ip("172.30.0.12")],
            communities: vec!["65000:100".into()],
        };
        let checks = super::super::plan(&[], std::slice::from_ref(&svc), &[], &[]);
        let kinds: Vec<(Kind, &'static str, Expect)> = checks
            .iter()
            .map(|c| (c.kind, c.path, c.expect.clone()))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    Kind::OutsideToService,
                    "/clientip",
                    Expect::ClientIp(ip("198.51.100.10"))
                ),
                (
                    Kind::TorCommunities,
                    "",
                    Expect::Communities(vec!["65000:100".into()])
                ),
                (Kind::TorNextHops, "", Expect::NextHops(vec![ip("172.30.0.12")])),
            ]
        );
        // `Cluster`, no advertisement: answered by hostname, no ToR checks.
        let cluster = ServiceTarget {
            local: false,
            communities: vec![],
            ingress_sources: vec![ip("100.64.0.2")],
            ..svc
        };
        let checks = super::super::plan(&[], &[cluster], &[], &[]);
        assert_eq!(checks.len(), 1);
        assert_eq!(
            (checks[0].path, &checks[0].expect),
            ("/hostname", &Expect::AnswerIn(vec!["local-1".into()]))
        );
    }
}
