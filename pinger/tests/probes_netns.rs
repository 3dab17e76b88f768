//! The pinger's probes against real kernels' answers: ICMP echo over IPv4 and IPv6, TCP and UDP
//! checks, all between two network namespaces this test creates and joins with a veth pair.
//! Needs root (network namespaces): it fails, never skips, without.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, Result};
use kube_ovn_pinger::{icmp, probes};
use kube_ovn_testkit::Netns;
use kube_ovn_testkit::netns::veth_pair;

const A_V4: &str = "10.251.7.1";
const B_V4: &str = "10.251.7.2";
/// In B's subnet, on no host: its ARP goes unanswered, the pings are lost.
const ABSENT_V4: &str = "10.251.7.9";
const A_V6: &str = "fd00:251:7::1";
const B_V6: &str = "fd00:251:7::2";

struct Pair {
    a: Netns,
    b: Netns,
}

fn pair() -> Result<Pair> {
    let a = Netns::create("pinger-a")?;
    let b = Netns::create("pinger-b")?;
    veth_pair(a.name(), "veth-a", b.name(), "veth-b", 1500)?;
    for (ns, dev, v4, v6) in [(&a, "veth-a", A_V4, A_V6), (&b, "veth-b", B_V4, B_V6)] {
        ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev])?;
        // nodad: usable at once, not after duplicate address detection.
        ns.ip(&["addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
        ns.ip(&["link", "set", dev, "up"])?;
    }
    Ok(Pair { a, b })
}

/// Runs `f` on a current-thread runtime inside `ns` (its sockets are opened there).
fn in_netns<T: Send>(ns: &Netns, f: impl AsyncFnOnce() -> T + Send) -> Result<T> {
    ns.run(|| {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok::<T, std::io::Error>(rt.block_on(f()))
    })?
    .context("tokio runtime in the netns")
}

#[test]
fn icmp_tcp_and_udp_probes_between_namespaces() -> Result<()> {
    let Pair { a, b } = pair()?;
    let v4: IpAddr = B_V4.parse()?;
    let v6: IpAddr = B_V6.parse()?;
    let absent: IpAddr = ABSENT_V4.parse()?;

    // What B answers on: a TCP listener and a UDP answerer (the pinger's own, as another
    // pinger's verbose check reaches it); both sockets are opened inside B.
    let (tcp, udp) = b.run(|| -> Result<(std::net::TcpListener, std::net::UdpSocket)> {
        let tcp = std::net::TcpListener::bind((B_V4, 0))?;
        let udp = std::net::UdpSocket::bind((B_V4, tcp.local_addr()?.port()))?;
        tcp.set_nonblocking(true)?;
        udp.set_nonblocking(true)?;
        Ok((tcp, udp))
    })??;
    let port = tcp.local_addr()?.port();
    let answerer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let tcp = tokio::net::TcpListener::from_std(tcp).unwrap();
            let udp = tokio::net::UdpSocket::from_std(udp).unwrap();
            // Serves until the runtime is dropped with the thread at the end of the test.
            let _ = tokio::time::timeout(Duration::from_secs(20), probes::serve_conn_check(tcp, udp)).await;
        });
    });

    let (reachable_v4, reachable_v6, lost, tcp_ok, udp_ok, tcp_closed) = in_netns(&a, async move || {
        let timeout = Duration::from_secs(2);
        let reachable_v4 = icmp::ping(v4, 3, Duration::from_millis(100), timeout).await;
        let reachable_v6 = icmp::ping(v6, 3, Duration::from_millis(100), timeout).await;
        let lost = icmp::ping(absent, 3, Duration::from_millis(100), Duration::from_secs(1)).await;
        let tcp_ok = probes::tcp_check(SocketAddr::new(v4, port)).await;
        let udp_ok = probes::udp_check(SocketAddr::new(v4, port)).await;
        // Nothing listens on the next port: the kernel refuses at once.
        let tcp_closed = probes::tcp_check(SocketAddr::new(v4, port.wrapping_add(1).max(1))).await;
        (reachable_v4, reachable_v6, lost, tcp_ok, udp_ok, tcp_closed)
    })?;

    let stats = reachable_v4.context("ping over IPv4")?;
    assert_eq!((stats.sent, stats.received, stats.lost()), (3, 3, 0), "{stats:?}");
    assert_eq!(stats.rtts.len(), 3);
    let stats = reachable_v6.context("ping over IPv6")?;
    assert_eq!((stats.sent, stats.received, stats.lost()), (3, 3, 0), "{stats:?}");
    let stats = lost.context("ping to an absent host")?;
    assert_eq!((stats.sent, stats.received, stats.lost()), (3, 0, 3), "{stats:?}");
    assert!(stats.avg_rtt_ms().abs() < f64::EPSILON);
    tcp_ok
        .map_err(anyhow::Error::msg)
        .context("TCP check to B's listener")?;
    udp_ok
        .map_err(anyhow::Error::msg)
        .context("UDP check to B's answerer")?;
    let refused = tcp_closed.expect_err("TCP check to a closed port passed");
    assert!(refused.contains("refused"), "{refused}");
    drop(answerer);
    Ok(())
}
