//! One probe of the matrix: an HTTP GET (netexec's client) to a netexec server, sent from inside a network
//! namespace (a pod's or the outside host's) on a thread that entered it, so the connection is
//! that machine's own.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// Why a probe failed, as the matrix shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeError {
    /// No answer in time (dropped on the way, or no route back).
    Timeout,
    /// Refused or unreachable (an ICMP error came back, or no route here).
    Refused(String),
    /// The server answered something other than 200.
    Http(String),
    /// The namespace could not be entered.
    Netns(String),
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout => f.write_str("no answer"),
            Self::Refused(e) => write!(f, "{e}"),
            Self::Http(status) => write!(f, "HTTP {status}"),
            Self::Netns(e) => write!(f, "cannot enter the namespace: {e}"),
        }
    }
}

/// `GET path` to `to` from inside namespace `netns`; the response body.
pub fn http_get(netns: &Path, to: SocketAddr, path: &str, timeout: Duration) -> Result<String, ProbeError> {
    let ns = kube_ovn_dataplane::Netns::open(netns).map_err(|e| ProbeError::Netns(e.to_string()))?;
    let path = path.to_owned();
    ns.run(move || get(to, &path, timeout))
        .map_err(|e| ProbeError::Netns(e.to_string()))?
}

/// `GET path` to `to` from this thread's namespace (netexec's client): the body of a 200.
pub fn get(to: SocketAddr, path: &str, timeout: Duration) -> Result<String, ProbeError> {
    match kube_ovn_lab::netexec::http_get(to, path, timeout) {
        Ok(answer) if answer.status == 200 => Ok(answer.body.trim().to_owned()),
        Ok(answer) => Err(ProbeError::Http(format!(
            "{}: {}",
            answer.status,
            answer.body.trim()
        ))),
        Err(kube_ovn_lab::netexec::Error::Client { source, .. }) => Err(match source.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ProbeError::Timeout,
            _ => ProbeError::Refused(source.to_string()),
        }),
        Err(e) => Err(ProbeError::Http(e.to_string())),
    }
}
