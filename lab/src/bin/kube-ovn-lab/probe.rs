//! One probe of the matrix: an HTTP GET to a netexec server, sent from inside a network
//! namespace (a pod's or the outside host's) on a thread that entered it, so the connection is
//! that machine's own.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
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

fn classify(e: &std::io::Error) -> ProbeError {
    match e.kind() {
        std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => ProbeError::Timeout,
        _ => ProbeError::Refused(e.to_string()),
    }
}

/// `GET path` to `to` from this thread's namespace.
pub fn get(to: SocketAddr, path: &str, timeout: Duration) -> Result<String, ProbeError> {
    let mut stream = TcpStream::connect_timeout(&to, timeout).map_err(|e| classify(&e))?;
    stream.set_read_timeout(Some(timeout)).map_err(|e| classify(&e))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(|e| classify(&e))?;
    let host = match to {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    };
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| classify(&e))?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response).map_err(|e| classify(&e))?;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.lines().next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if code != "200" {
        return Err(ProbeError::Http(format!("{status}: {}", body.trim())));
    }
    // netexec answers small bodies with Content-Length; the connection is closed after it.
    Ok(body.trim().to_owned())
}
