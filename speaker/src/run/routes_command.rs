//! `kube-ovn-speaker routes --peer <address> [--node <node>] [-o json|wide]`: the routes one
//! speaker sends one peer, with their attributes, for a person (issue 27, plan §4). It finds the
//! speaker pod of the node by the DaemonSet's label and reads its `/bgp/routes` through the API
//! server's pod proxy (`/api/v1/namespaces/<ns>/pods/<pod>:<port>/proxy/bgp/routes`, so only
//! `pods/proxy` RBAC is needed, as for `kubectl get --raw`), or reads `--url` directly (the
//! lab's process mode, the tests).

use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::ListParams;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::routes_view::{self, RouteView};
use crate::config::{RoutesArgs, RoutesOutput};

/// Why the command could not print the routes.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Client(#[from] kube_ovn_support::ClientError),
    #[error("{0}")]
    Kube(#[from] kube::Error),
    /// No speaker pod (or more than one, without `--node`) matched.
    #[error("{0}")]
    Pod(String),
    /// The speaker answered with an error (its message).
    #[error("the speaker answered {status}: {body}")]
    Speaker { status: u16, body: String },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("--url {0:?}: only http://host:port is understood")]
    Url(String),
    #[error("the speaker's answer is not the routes' JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// Runs the command; returns what to print.
pub async fn run(args: &RoutesArgs, kubeconfig: Option<&std::path::Path>) -> Result<String, CommandError> {
    let path = routes_path(args.peer);
    let body = if let Some(url) = &args.url {
        http_get(url, &path).await?
    } else {
        let kube = kube_ovn_support::kube_client(kubeconfig).await?;
        let pod = speaker_pod(&kube, args).await?;
        let proxied = format!(
            "/api/v1/namespaces/{}/pods/{pod}:{}/proxy{path}",
            args.namespace, args.port
        );
        let request = axum::http::Request::get(proxied)
            .body(Vec::new())
            .map_err(|e| CommandError::Pod(e.to_string()))?;
        kube.request_text(request).await?
    };
    let rows: Vec<RouteView> = serde_json::from_str(&body)?;
    Ok(match args.output {
        Some(RoutesOutput::Json) => format!("{}\n", serde_json::to_string_pretty(&rows)?),
        Some(RoutesOutput::Wide) => routes_view::table(&rows, true),
        None => routes_view::table(&rows, false),
    })
}

/// `/bgp/routes?peer=...` with an IPv6 address's colons escaped.
pub fn routes_path(peer: std::net::IpAddr) -> String {
    format!("/bgp/routes?peer={}", peer.to_string().replace(':', "%3A"))
}

/// The Running speaker pod of `--node` (or the only one).
async fn speaker_pod(kube: &kube::Client, args: &RoutesArgs) -> Result<String, CommandError> {
    let pods: Api<Pod> = Api::namespaced(kube.clone(), &args.namespace);
    let mut params = ListParams::default().labels(&args.selector);
    if let Some(node) = &args.node {
        params = params.fields(&format!("spec.nodeName={node}"));
    }
    let found = pods.list(&params).await?;
    let running: Vec<(String, String)> = found
        .items
        .iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
        .filter_map(|p| {
            let node = p.spec.as_ref()?.node_name.clone().unwrap_or_default();
            Some((p.metadata.name.clone()?, node))
        })
        .collect();
    let place = args
        .node
        .as_deref()
        .map_or_else(String::new, |n| format!(" on node {n}"));
    match running.as_slice() {
        [(pod, _)] => Ok(pod.clone()),
        [] => Err(CommandError::Pod(format!(
            "no Running pod labelled {} in namespace {}{place}",
            args.selector, args.namespace
        ))),
        many => {
            let mut nodes = String::new();
            for (_, node) in many {
                let _ = write!(nodes, " {node}");
            }
            Err(CommandError::Pod(format!(
                "{} speaker pods run; say which node with --node (nodes:{nodes})",
                many.len()
            )))
        }
    }
}

/// A GET over plain HTTP/1.0 (the metrics port speaks nothing else): the body of a 200, else
/// the error the speaker gave.
async fn http_get(url: &str, path: &str) -> Result<String, CommandError> {
    let authority = url
        .strip_prefix("http://")
        .map(|rest| rest.trim_end_matches('/'))
        .filter(|a| !a.is_empty() && !a.contains('/'))
        .ok_or_else(|| CommandError::Url(url.to_owned()))?;
    let io = |what: &str| {
        let what = format!("{what} {authority}");
        move |source| CommandError::Io { what, source }
    };
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(io("connecting to"))?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n").as_bytes())
        .await
        .map_err(io("writing to"))?;
    let mut answer = String::new();
    stream
        .read_to_string(&mut answer)
        .await
        .map_err(io("reading from"))?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    if status == 200 {
        Ok(body.to_owned())
    } else {
        Err(CommandError::Speaker {
            status,
            body: body.trim().to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peer_is_escaped_in_the_path() {
        assert_eq!(
            routes_path("10.0.0.1".parse().unwrap()),
            "/bgp/routes?peer=10.0.0.1"
        );
        assert_eq!(
            routes_path("2001:db8::1".parse().unwrap()),
            "/bgp/routes?peer=2001%3Adb8%3A%3A1"
        );
    }
}
