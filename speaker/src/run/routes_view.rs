//! What the speaker's `/bgp/routes` and `/bgp/peers` answer, and how `kube-ovn-speaker routes`
//! prints it for a person (issue 27, plan §4). Pure: one peer's table from the policy
//! evaluation in, JSON rows and a kubectl-like table out.
//!
//! The attributes shown are the ones on the wire: LOCAL_PREF only toward an internal peer (100
//! when no one set it, as the Adj-RIB-Out sends), the AS-path prepend only toward an external
//! one (RFC 4271 §5.1.5; see `RouteAttributes::as_path_prepend`), so the command agrees with
//! what the ToR shows.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use crate::announce::Origin;
use crate::bgp::rib_out::{DEFAULT_LOCAL_PREF, NextHop};
use crate::crd::format_community;
use crate::policy::{PeerRib, Source};

/// One route to one peer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteView {
    pub prefix: String,
    /// `PodIPs`, `SubnetCIDRs`, ... (`BgpAdvertisement.spec.advertise`'s spelling).
    pub kind: String,
    /// The object behind it: `Pod default/web-0`, `Subnet s1`, ...
    pub origin: String,
    /// The next hop sent, when known (our address on the session for its family).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop: Option<String>,
    /// `A:B` or a well-known name (`no-export`, ...).
    #[serde(default)]
    pub communities: Vec<String>,
    /// `A:B:C`.
    #[serde(default)]
    pub large_communities: Vec<String>,
    /// Internal peers only.
    #[serde(default)]
    pub local_pref: Option<u32>,
    #[serde(default)]
    pub med: Option<u32>,
    /// External peers only.
    #[serde(default)]
    pub as_path_prepend: u8,
    /// `annotation` and/or the names of the advertisements that select it.
    #[serde(default)]
    pub sources: Vec<String>,
}

/// One session of the speaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionView {
    pub peer: String,
    /// The BgpPeer's name; absent for a `--neighbor-address` peer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bgp_peer: Option<String>,
    pub peer_as: u32,
    pub local_as: u32,
    pub state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_address: Option<String>,
    /// Prefixes the peer holds from us.
    pub prefixes_sent: u64,
    /// Prefixes the policy gives it (equal to `prefixesSent` once converged).
    pub prefixes_desired: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The session facts a route's wire attributes depend on.
#[derive(Debug, Clone, Copy)]
pub struct SessionFacts {
    /// Same AS on both ends (iBGP).
    pub internal: bool,
    /// Our address on the Established connection.
    pub local_address: Option<IpAddr>,
}

/// `Pod default/web-0`.
pub fn origin_text(origin: &Origin) -> String {
    match origin {
        Origin::Subnet(n) => format!("Subnet {n}"),
        Origin::Pod(n) => format!("Pod {n}"),
        Origin::Service(n) => format!("Service {n}"),
        Origin::Eip(n) => format!("IptablesEIP {n}"),
        Origin::OvnEip(n) => format!("OvnEip {n}"),
    }
}

fn source_text(source: &Source) -> String {
    match source {
        Source::Annotation => "annotation".to_owned(),
        Source::Advertisement(name) => name.clone(),
    }
}

/// One peer's table as rows.
pub fn routes(rib: &PeerRib, session: SessionFacts) -> Vec<RouteView> {
    rib.iter()
        .map(|(prefix, route)| {
            let a = &route.attributes;
            let next_hop = match a.next_hop {
                NextHop::Address(ip) => Some(ip),
                NextHop::LocalAddress => session
                    .local_address
                    .filter(|l| l.is_ipv4() == prefix.addr().is_ipv4()),
            };
            RouteView {
                prefix: prefix.to_string(),
                kind: route.kind.as_str().to_owned(),
                origin: origin_text(&route.origin),
                next_hop: next_hop.map(|ip| ip.to_string()),
                communities: a.communities.iter().map(|c| format_community(*c)).collect(),
                large_communities: a
                    .large_communities
                    .iter()
                    .map(|l| format!("{}:{}:{}", l.global_admin, l.local_data1, l.local_data2))
                    .collect(),
                local_pref: session
                    .internal
                    .then(|| a.local_pref.unwrap_or(DEFAULT_LOCAL_PREF)),
                med: a.med,
                as_path_prepend: if session.internal { 0 } else { a.as_path_prepend },
                sources: route.sources.iter().map(source_text).collect(),
            }
        })
        .collect()
}

fn or_dash(items: &[String]) -> String {
    if items.is_empty() {
        "-".to_owned()
    } else {
        items.join(",")
    }
}

fn opt(value: Option<u32>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// A kubectl-like table: `PREFIX KIND COMMUNITIES LOCALPREF MED PREPEND SOURCES`, and with
/// `wide` also `LARGECOMMUNITIES NEXTHOP ORIGIN`.
pub fn table(rows: &[RouteView], wide: bool) -> String {
    let mut header = vec![
        "PREFIX",
        "KIND",
        "COMMUNITIES",
        "LOCALPREF",
        "MED",
        "PREPEND",
        "SOURCES",
    ];
    if wide {
        header.extend(["LARGECOMMUNITIES", "NEXTHOP", "ORIGIN"]);
    }
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|h| (*h).to_owned()).collect()];
    for r in rows {
        let mut row = vec![
            r.prefix.clone(),
            r.kind.clone(),
            or_dash(&r.communities),
            opt(r.local_pref),
            opt(r.med),
            r.as_path_prepend.to_string(),
            or_dash(&r.sources),
        ];
        if wide {
            row.extend([
                or_dash(&r.large_communities),
                r.next_hop.clone().unwrap_or_else(|| "-".to_owned()),
                r.origin.clone(),
            ]);
        }
        cells.push(row);
    }
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|i| cells.iter().map(|row| row[i].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}   ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use kube_ovn_api::bgp_advertisement::AdvertiseKind;

    use super::*;
    use crate::bgp::rib_out::RouteAttributes;
    use crate::bgp::wire::LargeCommunity;
    use crate::policy::AdvertisedRoute;

    fn rib() -> PeerRib {
        let mut rib = BTreeMap::new();
        rib.insert(
            "10.16.0.5/32".parse().unwrap(),
            AdvertisedRoute {
                attributes: Arc::new(RouteAttributes {
                    communities: vec![(65000 << 16) + 100, 0xFFFF_FF01],
                    large_communities: vec![LargeCommunity {
                        global_admin: 65000,
                        local_data1: 1,
                        local_data2: 2,
                    }],
                    local_pref: Some(200),
                    med: Some(5),
                    as_path_prepend: 2,
                    ..RouteAttributes::default()
                }),
                kind: AdvertiseKind::PodIps,
                origin: Arc::new(Origin::Pod("default/web".into())),
                sources: vec![Source::Annotation, Source::Advertisement("gold".into())].into(),
            },
        );
        rib
    }

    #[test]
    fn rows_show_what_goes_on_the_wire() {
        let local = Some("198.51.100.2".parse().unwrap());
        let ebgp = routes(
            &rib(),
            SessionFacts {
                internal: false,
                local_address: local,
            },
        );
        assert_eq!(
            serde_json::to_value(&ebgp).unwrap(),
            serde_json::json!([{"prefix": "10.16.0.5/32", "kind": "PodIPs", "origin": "Pod default/web",
                "nextHop": "198.51.100.2", "communities": ["65000:100", "no-export"],
                "largeCommunities": ["65000:1:2"], "localPref": null, "med": 5, "asPathPrepend": 2,
                "sources": ["annotation", "gold"]}])
        );
        let ibgp = routes(
            &rib(),
            SessionFacts {
                internal: true,
                local_address: Some("2001:db8::2".parse().unwrap()),
            },
        );
        assert_eq!((ibgp[0].local_pref, ibgp[0].as_path_prepend), (Some(200), 0));
        assert_eq!(ibgp[0].next_hop, None, "no IPv4 address on an IPv6 session");
    }

    #[test]
    fn the_table_lines_up_like_kubectl() {
        let rows = routes(
            &rib(),
            SessionFacts {
                internal: true,
                local_address: None,
            },
        );
        assert_eq!(
            table(&rows, false),
            "PREFIX         KIND     COMMUNITIES           LOCALPREF   MED   PREPEND   SOURCES\n\
             10.16.0.5/32   PodIPs   65000:100,no-export   200         5     0         annotation,gold\n"
        );
        let wide = table(&rows, true);
        assert!(wide.starts_with("PREFIX "), "{wide}");
        assert!(
            wide.lines()
                .nth(1)
                .unwrap()
                .ends_with("65000:1:2          -         Pod default/web"),
            "{wide}"
        );
    }
}
