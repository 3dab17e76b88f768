//! `kubectl ko bgp [node] [-o json]` (kube-ovn-rs; Kube-OVN's plugin has no such verb): every
//! speaker's BGP sessions and, per peer, the prefixes it advertises with their attributes. Each
//! speaker pod (`app=kube-ovn-speaker`) serves `/bgp/peers` and `/bgp/routes?peer=` on its
//! metrics port (speaker/src/run/http.rs); they are read through the API server's pod proxy
//! (`kubectl get --raw /api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/...`), as
//! `kube-ovn-speaker routes` does, so only `pods/proxy` RBAC is needed.

use std::fmt::Write as _;
use std::process::ExitCode;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use kube_ovn_speaker::run::routes_view::{self, RouteView, SessionView};

use crate::kubectl;

const SPEAKER_APP: &str = "kube-ovn-speaker";
/// The speaker's `--pprof-port` in deploy/base/speaker.yaml, when its pod names no `metrics` port.
const DEFAULT_PORT: u16 = 10667;

/// Arguments of `kubectl ko bgp`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:\n  kubectl ko bgp\n  kubectl ko bgp node1\n  kubectl ko bgp -o json")]
pub struct BgpArgs {
    /// Only the speaker on this node.
    pub node: Option<String>,
    /// `json`: the same, machine-readable.
    #[arg(short, long, value_enum, env = "KO_BGP_OUTPUT")]
    pub output: Option<Output>,
}

/// Output formats.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Output {
    Json,
}

/// One session, as `/bgp/peers` answers (the speaker's own `SessionView`), with the routes
/// `/bgp/routes?peer=` gives it (the speaker's `RouteView`): one definition of the wire format.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    #[serde(flatten)]
    pub session: SessionView,
    /// Filled from `/bgp/routes?peer=` (not part of `/bgp/peers`).
    #[serde(default)]
    pub routes: Vec<RouteView>,
}

/// One speaker's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Speaker {
    pub pod: String,
    pub node: String,
    pub sessions: Vec<Session>,
    /// Why the speaker could not be read (the others are still shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A speaker pod to ask: name, node, metrics port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpeakerPod {
    pub name: String,
    pub node: String,
    pub port: u16,
}

/// The Running speaker pods (of `node`, when given) with their metrics port (pure).
pub fn speaker_pods(list: &Value, node: Option<&str>) -> Vec<SpeakerPod> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|pod| pod["status"]["phase"] == "Running")
        .filter_map(|pod| {
            let name = pod["metadata"]["name"].as_str()?.to_owned();
            let on = pod["spec"]["nodeName"].as_str().unwrap_or_default().to_owned();
            let port = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .find(|p| p["name"] == "metrics")
                .and_then(|p| p["containerPort"].as_u64())
                .and_then(|p| u16::try_from(p).ok())
                .unwrap_or(DEFAULT_PORT);
            Some(SpeakerPod { name, node: on, port })
        })
        .filter(|p| node.is_none_or(|n| p.node == n))
        .collect()
}

/// The pod-proxy path of one of a speaker's endpoints (`/bgp/peers`, `/bgp/routes?peer=`); an
/// IPv6 peer's colons are escaped in the query.
pub fn proxy_path(namespace: &str, pod: &SpeakerPod, endpoint: &str, peer: Option<&str>) -> String {
    let mut path = format!(
        "/api/v1/namespaces/{namespace}/pods/{}:{}/proxy{endpoint}",
        pod.name, pod.port
    );
    if let Some(peer) = peer {
        let _ = write!(path, "?peer={}", peer.replace(':', "%3A"));
    }
    path
}

fn read_speaker(namespace: &str, pod: &SpeakerPod) -> anyhow::Result<Vec<Session>> {
    let raw = |path: String| kubectl::output(&["get", "--raw", &path]);
    let body = raw(proxy_path(namespace, pod, "/bgp/peers", None))?;
    let mut sessions: Vec<Session> =
        serde_json::from_str(&body).context("the speaker's /bgp/peers is not the sessions' JSON")?;
    for session in &mut sessions {
        let peer = &session.session.peer;
        let body = raw(proxy_path(namespace, pod, "/bgp/routes", Some(peer)))?;
        session.routes = serde_json::from_str(&body)
            .with_context(|| format!("the speaker's /bgp/routes for {peer} is not the routes' JSON"))?;
    }
    Ok(sessions)
}

pub fn run(args: &BgpArgs) -> anyhow::Result<ExitCode> {
    let ns = kubectl::namespace();
    let list = kubectl::json(&["get", "pods", "-n", &ns, "-l", &format!("app={SPEAKER_APP}")])?;
    let pods = speaker_pods(&list, args.node.as_deref());
    if pods.is_empty() {
        let place = args
            .node
            .as_deref()
            .map_or_else(String::new, |n| format!(" on node {n}"));
        anyhow::bail!("no Running speaker pod (app={SPEAKER_APP}) in namespace {ns}{place}");
    }
    let speakers: Vec<Speaker> = pods
        .iter()
        .map(|pod| {
            let (sessions, error) = match read_speaker(&ns, pod) {
                Ok(s) => (s, None),
                Err(e) => (Vec::new(), Some(format!("{e:#}"))),
            };
            Speaker {
                pod: pod.name.clone(),
                node: pod.node.clone(),
                sessions,
                error,
            }
        })
        .collect();
    match args.output {
        Some(Output::Json) => println!("{}", serde_json::to_string_pretty(&speakers)?),
        None => print!("{}", render(&speakers)),
    }
    Ok(if speakers.iter().any(|s| s.error.is_some()) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Left-aligned columns, two spaces apart, as kubectl prints tables; `indent` before each line.
fn columns(out: &mut String, indent: &str, rows: &[Vec<String>]) {
    let count = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..count)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in rows {
        let mut line = indent.to_owned();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

fn dash(value: Option<&str>) -> String {
    value.filter(|v| !v.is_empty()).unwrap_or("-").to_owned()
}

/// The human form: per speaker its sessions, then per peer its routes.
pub fn render(speakers: &[Speaker]) -> String {
    let mut out = String::new();
    for (i, speaker) in speakers.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "Speaker {} (node {})", speaker.pod, speaker.node);
        if let Some(error) = &speaker.error {
            let _ = writeln!(out, "  unreadable: {error}");
            continue;
        }
        if speaker.sessions.is_empty() {
            out.push_str("  no BGP sessions\n");
            continue;
        }
        let mut rows = vec![
            [
                "PEER",
                "BGPPEER",
                "LOCAL-AS",
                "PEER-AS",
                "STATE",
                "LOCAL-ADDRESS",
                "SENT",
                "DESIRED",
                "LAST-ERROR",
            ]
            .map(str::to_owned)
            .to_vec(),
        ];
        for Session { session: s, .. } in &speaker.sessions {
            rows.push(vec![
                s.peer.clone(),
                dash(s.bgp_peer.as_deref()),
                s.local_as.to_string(),
                s.peer_as.to_string(),
                s.state.clone(),
                dash(s.local_address.as_deref()),
                s.prefixes_sent.to_string(),
                s.prefixes_desired.to_string(),
                dash(s.last_error.as_deref()),
            ]);
        }
        columns(&mut out, "  ", &rows);
        for s in &speaker.sessions {
            let _ = writeln!(out, "  Routes to {} ({}):", s.session.peer, s.routes.len());
            if s.routes.is_empty() {
                continue;
            }
            // The speaker's own table (`kube-ovn-speaker routes -o wide`), indented.
            for line in routes_view::table(&s.routes, true).lines() {
                let _ = writeln!(out, "    {line}");
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn speaker_pods_with_their_metrics_port() {
        let list = json!({"items": [
            {"metadata": {"name": "sp-a"}, "spec": {"nodeName": "n1",
              "containers": [{"ports": [{"name": "metrics", "containerPort": 11667}]}]},
             "status": {"phase": "Running"}},
            {"metadata": {"name": "sp-b"}, "spec": {"nodeName": "n2", "containers": [{}]},
             "status": {"phase": "Running"}},
            {"metadata": {"name": "sp-c"}, "spec": {"nodeName": "n3"}, "status": {"phase": "Pending"}}
        ]});
        let all = speaker_pods(&list, None);
        assert_eq!(
            all,
            [
                SpeakerPod {
                    name: "sp-a".into(),
                    node: "n1".into(),
                    port: 11667
                },
                SpeakerPod {
                    name: "sp-b".into(),
                    node: "n2".into(),
                    port: DEFAULT_PORT
                },
            ]
        );
        assert_eq!(speaker_pods(&list, Some("n2")).len(), 1);
        assert!(speaker_pods(&list, Some("n3")).is_empty());
    }

    #[test]
    fn the_endpoints_are_read_through_the_pod_proxy() {
        let pod = SpeakerPod {
            name: "sp-a".into(),
            node: "n1".into(),
            port: 10667,
        };
        assert_eq!(
            proxy_path("kube-system", &pod, "/bgp/peers", None),
            "/api/v1/namespaces/kube-system/pods/sp-a:10667/proxy/bgp/peers"
        );
        assert_eq!(
            proxy_path("kube-system", &pod, "/bgp/routes", Some("2001:db8::1")),
            "/api/v1/namespaces/kube-system/pods/sp-a:10667/proxy/bgp/routes?peer=2001%3Adb8%3A%3A1"
        );
    }

    /// The speaker's JSON as it serves it (camelCase, optional fields absent).
    fn sample() -> Vec<Speaker> {
        let mut sessions: Vec<Session> = serde_json::from_value(json!([
            {"peer": "10.0.0.1", "bgpPeer": "tor", "peerAs": 65001, "localAs": 65000,
             "state": "Established", "localAddress": "10.0.0.10", "prefixesSent": 1, "prefixesDesired": 1},
            {"peer": "10.0.0.2", "peerAs": 65002, "localAs": 65000, "state": "Active",
             "prefixesSent": 0, "prefixesDesired": 1, "lastError": "connection refused"}
        ]))
        .unwrap();
        sessions[0].routes = serde_json::from_value(json!([
            {"prefix": "10.16.0.0/16", "kind": "SubnetCIDRs", "origin": "Subnet ovn-default",
             "nextHop": "10.0.0.10", "communities": ["65000:100", "no-export"], "largeCommunities": [],
             "localPref": null, "med": 10, "asPathPrepend": 2, "sources": ["annotation"]}
        ]))
        .unwrap();
        vec![
            Speaker {
                pod: "sp-a".into(),
                node: "n1".into(),
                sessions,
                error: None,
            },
            Speaker {
                pod: "sp-b".into(),
                node: "n2".into(),
                sessions: vec![],
                error: Some("403 Forbidden".into()),
            },
        ]
    }

    #[test]
    fn sessions_then_each_peers_routes_with_their_attributes() {
        let text = render(&sample());
        let expected = "\
Speaker sp-a (node n1)
  PEER      BGPPEER  LOCAL-AS  PEER-AS  STATE        LOCAL-ADDRESS  SENT  DESIRED  LAST-ERROR
  10.0.0.1  tor      65000     65001    Established  10.0.0.10      1     1        -
  10.0.0.2  -        65000     65002    Active       -              0     1        connection refused
  Routes to 10.0.0.1 (1):
    PREFIX         KIND          COMMUNITIES           LOCALPREF   MED   PREPEND   SOURCES      LARGECOMMUNITIES   NEXTHOP     ORIGIN
    10.16.0.0/16   SubnetCIDRs   65000:100,no-export   -           10    2         annotation   -                  10.0.0.10   Subnet ovn-default
  Routes to 10.0.0.2 (0):

Speaker sp-b (node n2)
  unreadable: 403 Forbidden
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn json_keeps_the_speakers_shapes_with_the_routes_inside() {
        let value = serde_json::to_value(sample()).unwrap();
        assert_eq!(value[0]["sessions"][0]["bgpPeer"], "tor");
        assert_eq!(value[0]["sessions"][0]["routes"][0]["asPathPrepend"], 2);
        assert_eq!(
            value[0]["sessions"][0]["routes"][0]["communities"][1],
            "no-export"
        );
        assert!(value[0].get("error").is_none());
        assert_eq!(value[1]["error"], "403 Forbidden");
    }
}
