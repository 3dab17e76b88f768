//! The server behind the image `kube-ovn-lab/netexec`, answering as Kubernetes' e2e
//! `agnhost netexec` does, so connectivity checks read the same:
//!
//! - HTTP `GET /hostname`: the pod's name; `/clientip`: the `ip:port` the server saw the request
//!   come from (`[v6]:port` for IPv6); `/echo?msg=X`: X; `/healthz`: `ok`; `/`: `NOW: <time>`.
//! - UDP datagrams `hostname`, `echo X` and `clientip`, answered with one datagram each.
//!
//! The servers take listeners and sockets that are already bound, so the kubelet stand-in binds
//! them inside a pod's network namespace (a socket stays in the namespace it was made in) and
//! serves them from its own runtime. [`run`] is the standalone process (the lab's outside host).
//! The client helpers ([`http_get`], [`udp_request`]) are blocking, so callers run them inside a
//! namespace with `Netns::run`, or use [`http_get_in`] / [`udp_request_in`].
//!
//! HTTP is a hand-written HTTP/1.1 subset: GET (any method answers the same), keep-alive unless
//! the client says `Connection: close` or speaks HTTP/1.0, bodies with `Content-Length` skipped.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use kube_ovn_dataplane::Netns;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::task::JoinSet;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("netexec: binding {proto} {addr}: {source}")]
    Bind {
        proto: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("netexec: serving {proto} {addr}: {source}")]
    Serve {
        proto: &'static str,
        addr: String,
        source: std::io::Error,
    },
    #[error("{what} {addr}: {source}")]
    Client {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("HTTP GET {addr}{path}: bad answer: {why}")]
    BadAnswer {
        addr: SocketAddr,
        path: String,
        why: String,
    },
    #[error("entering the namespace: {0}")]
    Netns(#[from] kube_ovn_dataplane::Error),
}

/// The standalone server.
#[derive(Debug, Clone)]
pub struct NetexecConfig {
    /// What `/hostname` answers.
    pub hostname: String,
    pub http_ports: Vec<u16>,
    pub udp_ports: Vec<u16>,
    /// The address to listen on (`0.0.0.0`, `::` or one address).
    pub address: IpAddr,
}

/// What `/hostname` answers when not told: the system's hostname, which in a pod is the pod's
/// name (the kubelet sets it, as agnhost's netexec relies on); `localhost` if none can be read.
pub fn system_hostname() -> String {
    ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .into_iter()
        .filter_map(|path| std::fs::read_to_string(path).ok())
        .map(|name| name.trim().to_owned())
        .find(|name| !name.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Binds every port of `config` and serves them until one server fails or the future is dropped.
pub async fn run(config: NetexecConfig) -> Result<(), Error> {
    let hostname: Arc<str> = Arc::from(config.hostname.as_str());
    let mut servers = JoinSet::new();
    for port in &config.http_ports {
        let addr = SocketAddr::new(config.address, *port);
        let listener = bind_tcp(addr)?;
        servers.spawn(serve_http(listener, hostname.clone()));
    }
    for port in &config.udp_ports {
        let addr = SocketAddr::new(config.address, *port);
        let socket = bind_udp(addr)?;
        servers.spawn(serve_udp(socket, hostname.clone()));
    }
    tracing::info!(hostname = %config.hostname, http = ?config.http_ports, udp = ?config.udp_ports, "netexec serving");
    while let Some(done) = servers.join_next().await {
        if let Ok(Err(e)) = done {
            return Err(e);
        }
    }
    Ok(())
}

/// A TCP listener on `addr`, non-blocking as tokio wants it. Called inside a pod's namespace.
pub fn bind_tcp(addr: SocketAddr) -> Result<std::net::TcpListener, Error> {
    let bind_error = |source| Error::Bind {
        proto: "TCP",
        addr,
        source,
    };
    let listener = std::net::TcpListener::bind(addr).map_err(bind_error)?;
    listener.set_nonblocking(true).map_err(bind_error)?;
    Ok(listener)
}

/// A UDP socket on `addr`, non-blocking. Called inside a pod's namespace.
pub fn bind_udp(addr: SocketAddr) -> Result<UdpSocket, Error> {
    let bind_error = |source| Error::Bind {
        proto: "UDP",
        addr,
        source,
    };
    let socket = UdpSocket::bind(addr).map_err(bind_error)?;
    socket.set_nonblocking(true).map_err(bind_error)?;
    Ok(socket)
}

/// The address a peer is reported as: an IPv4 peer of a dual-stack (`::`) listener arrives as
/// `::ffff:a.b.c.d`, which agnhost (listening on separate sockets) would show as `a.b.c.d`.
fn peer(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// The answer to an HTTP request for `target` (path and query) from `client`: status and body.
pub fn http_answer(target: &str, hostname: &str, client: SocketAddr) -> (u16, String) {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    match path {
        "/hostname" => (200, hostname.to_owned()),
        "/clientip" => (200, peer(client).to_string()),
        "/echo" => {
            let msg = form_urlencoded::parse(query.as_bytes())
                .find(|(k, _)| k == "msg")
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default();
            (200, msg)
        }
        "/healthz" => (200, "ok".into()),
        "/" => (200, format!("NOW: {}", jiff::Timestamp::now())),
        other => (404, format!("404 page not found: {other}\n")),
    }
}

/// The answer to a UDP datagram, or `None` for one we do not understand (no reply, so a
/// stray packet cannot make us send to a spoofed source).
pub fn udp_answer(request: &str, hostname: &str, client: SocketAddr) -> Option<String> {
    let request = request.trim_end_matches(['\r', '\n']);
    match request.split_once(' ') {
        Some(("echo", msg)) => Some(msg.to_owned()),
        _ => match request {
            "hostname" => Some(hostname.to_owned()),
            "clientip" => Some(peer(client).to_string()),
            _ => None,
        },
    }
}

/// Serves HTTP on `listener` until it fails or the future is dropped; connections are served by
/// tasks this future owns, so dropping it closes them too.
pub async fn serve_http(listener: std::net::TcpListener, hostname: Arc<str>) -> Result<(), Error> {
    let local = listener
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let serve_error = |source| Error::Serve {
        proto: "HTTP",
        addr: local.clone(),
        source,
    };
    let listener = tokio::net::TcpListener::from_std(listener).map_err(serve_error)?;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, client) = accepted.map_err(serve_error)?;
                connections.spawn(serve_connection(stream, client, hostname.clone()));
            }
            // Reap finished connections so the set does not grow without bound.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// How long a connection may stay idle between requests.
const IDLE: Duration = Duration::from_secs(30);
/// The largest request head we read.
const MAX_HEAD: usize = 16 * 1024;

async fn serve_connection(stream: tokio::net::TcpStream, client: SocketAddr, hostname: Arc<str>) {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        // EOF, idle, a broken or oversized head: the connection ends.
        let Ok(Ok(Some(head))) = tokio::time::timeout(IDLE, read_head(&mut reader)).await else {
            return;
        };
        let mut lines = head.lines();
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split_whitespace();
        let (_method, target, version) = (
            parts.next().unwrap_or_default(),
            parts.next().unwrap_or("/"),
            parts.next().unwrap_or("HTTP/1.0"),
        );
        let mut close = version == "HTTP/1.0";
        let mut body_len = 0usize;
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            if name.eq_ignore_ascii_case("connection") {
                close = value.eq_ignore_ascii_case("close")
                    || (version == "HTTP/1.0" && !value.eq_ignore_ascii_case("keep-alive"));
            } else if name.eq_ignore_ascii_case("content-length") {
                body_len = value.parse().unwrap_or(0);
            }
        }
        // A body is not used by any endpoint; read it so the next request starts where it should.
        if body_len > 0
            && tokio::io::copy(&mut (&mut reader).take(body_len as u64), &mut tokio::io::sink())
                .await
                .is_err()
        {
            return;
        }
        let (code, body) = http_answer(target, &hostname, client);
        let reason = if code == 200 { "OK" } else { "Not Found" };
        let response = format!(
            "HTTP/1.1 {code} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{}\r\n{body}",
            body.len(),
            if close { "Connection: close\r\n" } else { "" },
        );
        if write.write_all(response.as_bytes()).await.is_err() || close {
            return;
        }
    }
}

/// The request line and headers up to the blank line; `None` at EOF before a request.
async fn read_head<R: tokio::io::AsyncBufRead + Unpin>(reader: &mut R) -> std::io::Result<Option<String>> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        let n = reader.read_line(&mut line).await?;
        if n == 0 {
            return Ok(None);
        }
        if line == "\r\n" || line == "\n" {
            if head.is_empty() {
                // Tolerate blank lines before a request line (RFC 9112 §2.2).
                continue;
            }
            return Ok(Some(head));
        }
        head.push_str(&line);
        if head.len() > MAX_HEAD {
            return Err(std::io::Error::other("request head too large"));
        }
    }
}

/// Serves UDP on `socket` until it fails or the future is dropped.
pub async fn serve_udp(socket: UdpSocket, hostname: Arc<str>) -> Result<(), Error> {
    let local = socket
        .local_addr()
        .map_or_else(|_| "?".to_owned(), |a| a.to_string());
    let serve_error = |source| Error::Serve {
        proto: "UDP",
        addr: local.clone(),
        source,
    };
    let socket = tokio::net::UdpSocket::from_std(socket).map_err(serve_error)?;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let (n, from) = socket.recv_from(&mut buf).await.map_err(serve_error)?;
        let request = String::from_utf8_lossy(&buf[..n]);
        if let Some(answer) = udp_answer(&request, &hostname, from) {
            // A reply that cannot be sent (the peer's route went away) is the peer's problem.
            let _ = socket.send_to(answer.as_bytes(), from).await;
        }
    }
}

/// What an HTTP GET got back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpAnswer {
    pub status: u16,
    pub body: String,
}

/// `GET path` from `addr` over a new connection, within `timeout` for the connect and again for
/// the answer. Blocking: run it in a namespace with `Netns::run`, or use [`http_get_in`].
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> Result<HttpAnswer, Error> {
    let client_error = |what| move |source| Error::Client { what, addr, source };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(client_error("HTTP connect to"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(client_error("HTTP to"))?;
    let host = addr.to_string();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kube-ovn-lab\r\nConnection: close\r\n\r\n"
    )
    .map_err(client_error("HTTP request to"))?;
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .map_err(client_error("HTTP answer from"))?;
    parse_answer(&raw).map_err(|why| Error::BadAnswer {
        addr,
        path: path.to_owned(),
        why,
    })
}

/// Status and body of a `Connection: close` answer (the body is what `Content-Length` says, or
/// everything to EOF).
fn parse_answer(raw: &[u8]) -> Result<HttpAnswer, String> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no end of headers in {text:?}"))?;
    let mut lines = head.lines();
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let length = lines.find_map(|l| {
        l.split_once(':')
            .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<usize>().ok())
    });
    let body = match length {
        Some(n) if n <= body.len() => body[..n].to_owned(),
        Some(n) => return Err(format!("body of {} bytes, Content-Length {n}", body.len())),
        None => body.to_owned(),
    };
    Ok(HttpAnswer { status, body })
}

/// Sends `message` to `addr` over UDP and returns the first answer, waiting up to `timeout`.
/// Blocking, like [`http_get`].
pub fn udp_request(addr: SocketAddr, message: &str, timeout: Duration) -> Result<String, Error> {
    let client_error = |what| move |source| Error::Client { what, addr, source };
    let local: SocketAddr = if addr.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local).map_err(client_error("UDP socket for"))?;
    socket.connect(addr).map_err(client_error("UDP connect to"))?;
    socket
        .set_read_timeout(Some(timeout))
        .map_err(client_error("UDP to"))?;
    socket
        .send(message.as_bytes())
        .map_err(client_error("UDP send to"))?;
    let mut buf = vec![0u8; 64 * 1024];
    let n = socket.recv(&mut buf).map_err(client_error("UDP answer from"))?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// [`http_get`] from inside `netns` (a pod's or a host's), awaited without blocking a worker.
pub async fn http_get_in(
    netns: &Netns,
    addr: SocketAddr,
    path: &str,
    timeout: Duration,
) -> Result<HttpAnswer, Error> {
    let path = path.to_owned();
    netns.run_async(move || http_get(addr, &path, timeout)).await?
}

/// [`udp_request`] from inside `netns`.
pub async fn udp_request_in(
    netns: &Netns,
    addr: SocketAddr,
    message: &str,
    timeout: Duration,
) -> Result<String, Error> {
    let message = message.to_owned();
    netns
        .run_async(move || udp_request(addr, &message, timeout))
        .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_hostname_is_the_kernels() {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(system_hostname(), kernel.trim());
    }

    fn client() -> SocketAddr {
        "10.0.0.7:41000".parse().unwrap()
    }

    #[test]
    fn http_endpoints_answer_as_agnhost_does() {
        assert_eq!(http_answer("/hostname", "pod-a", client()), (200, "pod-a".into()));
        assert_eq!(
            http_answer("/clientip", "pod-a", client()),
            (200, "10.0.0.7:41000".into())
        );
        let mapped: SocketAddr = "[::ffff:10.0.0.7]:5".parse().unwrap();
        assert_eq!(http_answer("/clientip", "p", mapped).1, "10.0.0.7:5");
        let v6: SocketAddr = "[fd00::7]:5".parse().unwrap();
        assert_eq!(http_answer("/clientip", "p", v6).1, "[fd00::7]:5");
        assert_eq!(
            http_answer("/echo?msg=hello%20world&x=1", "p", client()),
            (200, "hello world".into())
        );
        assert_eq!(http_answer("/echo", "p", client()), (200, String::new()));
        assert_eq!(http_answer("/healthz", "p", client()), (200, "ok".into()));
        assert!(http_answer("/", "p", client()).1.starts_with("NOW: "));
        assert_eq!(http_answer("/nope", "p", client()).0, 404);
    }

    #[test]
    fn udp_commands_answer_and_unknown_ones_are_ignored() {
        assert_eq!(
            udp_answer("hostname", "pod-a", client()).as_deref(),
            Some("pod-a")
        );
        assert_eq!(
            udp_answer("hostname\n", "pod-a", client()).as_deref(),
            Some("pod-a")
        );
        assert_eq!(udp_answer("echo a b", "p", client()).as_deref(), Some("a b"));
        assert_eq!(
            udp_answer("clientip", "p", client()).as_deref(),
            Some("10.0.0.7:41000")
        );
        assert_eq!(udp_answer("shutdown", "p", client()), None);
    }

    #[test]
    fn answers_parse_with_and_without_a_length() {
        let a = parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nhi").unwrap();
        assert_eq!(
            a,
            HttpAnswer {
                status: 200,
                body: "hi".into()
            }
        );
        let b = parse_answer(b"HTTP/1.0 404 Not Found\r\n\r\nnope").unwrap();
        assert_eq!((b.status, b.body.as_str()), (404, "nope"));
        assert!(parse_answer(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nhi").is_err());
        assert!(parse_answer(b"garbage").is_err());
    }
}
