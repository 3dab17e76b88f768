//! The probes besides ICMP: name resolution, TCP and UDP reachability, the API server, and the
//! TCP/UDP answerers of `--enable-verbose-conn-check` (Kube-OVN's `pkg/util/net.go`).
//!
//! Names are resolved with the system resolver (`getaddrinfo` on tokio's blocking pool), as the
//! pod's other programs resolve them: `/etc/resolv.conf` with the pod's search domains and
//! `ndots`, which is what makes `kubernetes.default` resolve and what a DNS check in a pod should
//! exercise. Kube-OVN's Go resolver reads the same file.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::time::Instant;

/// Kube-OVN's timeouts: 10 s for a lookup, 3 s for a TCP or UDP check, 15 s for the API server.
pub const DNS_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONN_TIMEOUT: Duration = Duration::from_secs(3);
pub const APISERVER_TIMEOUT: Duration = Duration::from_secs(15);

/// What UDP checks send, and what the answerer replies (Kube-OVN's bytes).
const UDP_PAYLOAD: &[u8] = b"health check";

fn ms(elapsed: Duration) -> f64 {
    elapsed.as_secs_f64() * 1000.0
}

/// Resolves `name`: the addresses and the time it took in milliseconds.
pub async fn resolve(name: &str) -> Result<(Vec<SocketAddr>, f64), String> {
    let start = Instant::now();
    match tokio::time::timeout(DNS_TIMEOUT, tokio::net::lookup_host((name, 0))).await {
        Err(_) => Err(format!("resolving {name}: no answer within {DNS_TIMEOUT:?}")),
        Ok(Err(e)) => Err(format!("resolving {name}: {e}")),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(format!("resolving {name}: no address"))
            } else {
                Ok((addrs, ms(start.elapsed())))
            }
        }
    }
}

/// Connects to `addr` (and closes).
pub async fn tcp_check(addr: SocketAddr) -> Result<(), String> {
    match tokio::time::timeout(CONN_TIMEOUT, TcpStream::connect(addr)).await {
        Err(_) => Err(format!("tcp {addr}: no answer within {CONN_TIMEOUT:?}")),
        Ok(Err(e)) => Err(format!("tcp {addr}: {e}")),
        Ok(Ok(_)) => Ok(()),
    }
}

/// Sends a datagram to `addr` and waits for any answer, as Kube-OVN's UDP check does (so the
/// target must answer: the pinger's own answerer does, a DNS server does not to this payload).
pub async fn udp_check(addr: SocketAddr) -> Result<(), String> {
    let check = async {
        let bind: SocketAddr = if addr.is_ipv6() {
            "[::]:0".parse().unwrap_or(addr)
        } else {
            "0.0.0.0:0".parse().unwrap_or(addr)
        };
        let socket = UdpSocket::bind(bind).await?;
        socket.connect(addr).await?;
        socket.send(UDP_PAYLOAD).await?;
        let mut buf = [0u8; 1024];
        socket.recv(&mut buf).await.map(drop)
    };
    match tokio::time::timeout(CONN_TIMEOUT, check).await {
        Err(_) => Err(format!("udp {addr}: no answer within {CONN_TIMEOUT:?}")),
        Ok(Err(e)) => Err(format!("udp {addr}: {e}")),
        Ok(Ok(())) => Ok(()),
    }
}

/// GET /version: the latency in milliseconds.
pub async fn apiserver(kube: &kube::Client) -> Result<f64, String> {
    let start = Instant::now();
    match tokio::time::timeout(APISERVER_TIMEOUT, kube.apiserver_version()).await {
        Err(_) => Err(format!("API server: no answer within {APISERVER_TIMEOUT:?}")),
        Ok(Err(e)) => Err(format!("API server: {e}")),
        Ok(Ok(_)) => Ok(ms(start.elapsed())),
    }
}

/// The answerers the other pingers' verbose checks reach: TCP accepts and closes, UDP replies.
pub async fn serve_conn_check(tcp: TcpListener, udp: UdpSocket) -> std::io::Result<()> {
    let tcp_loop = async {
        loop {
            // Accepting is the answer; the stream closes when dropped.
            match tcp.accept().await {
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "conn-check accept"),
            }
        }
    };
    let udp_loop = async {
        let mut buf = [0u8; 1024];
        loop {
            match udp.recv_from(&mut buf).await {
                Ok((_, from)) => {
                    if let Err(e) = udp.send_to(UDP_PAYLOAD, from).await {
                        tracing::warn!(error = %e, %from, "conn-check reply");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "conn-check receive"),
            }
        }
    };
    tokio::join!(tcp_loop, udp_loop);
    Ok(())
}
