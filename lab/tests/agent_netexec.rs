//! netexec over real sockets: every HTTP endpoint and UDP command, keep-alive and HTTP/1.0,
//! the standalone `run`, and servers bound inside a network namespace (root) answering there and
//! nowhere else.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use kube_ovn_dataplane::Netns;
use kube_ovn_lab::netexec::{self, NetexecConfig, http_get, udp_request};

const T: Duration = Duration::from_secs(5);

fn local(port: u16) -> SocketAddr {
    (Ipv4Addr::LOCALHOST, port).into()
}

/// An HTTP and a UDP server for `hostname` on loopback ports of this namespace.
fn servers(
    hostname: &str,
) -> (
    SocketAddr,
    SocketAddr,
    tokio::task::JoinSet<Result<(), netexec::Error>>,
) {
    let tcp = netexec::bind_tcp(local(0)).unwrap();
    let udp = netexec::bind_udp(local(0)).unwrap();
    let (http_addr, udp_addr) = (tcp.local_addr().unwrap(), udp.local_addr().unwrap());
    let name: Arc<str> = Arc::from(hostname);
    let mut set = tokio::task::JoinSet::new();
    set.spawn(netexec::serve_http(tcp, name.clone()));
    set.spawn(netexec::serve_udp(udp, name));
    (http_addr, udp_addr, set)
}

async fn get(addr: SocketAddr, path: &str) -> netexec::HttpAnswer {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || http_get(addr, &path, T))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("GET {addr}: {e}"))
}

async fn udp(addr: SocketAddr, message: &str) -> Result<String, netexec::Error> {
    let message = message.to_owned();
    tokio::task::spawn_blocking(move || udp_request(addr, &message, Duration::from_millis(300)))
        .await
        .unwrap()
}

#[tokio::test]
async fn every_endpoint_answers_over_real_sockets() {
    let (http, udp_addr, _servers) = servers("pod-a");
    let answer = get(http, "/hostname").await;
    assert_eq!((answer.status, answer.body.as_str()), (200, "pod-a"));
    let clientip = get(http, "/clientip").await.body;
    let (ip, port) = clientip.rsplit_once(':').unwrap_or_else(|| panic!("{clientip}"));
    assert_eq!(ip, "127.0.0.1");
    assert!(port.parse::<u16>().unwrap() > 0);
    assert_eq!(get(http, "/echo?msg=hello%20there").await.body, "hello there");
    assert_eq!(get(http, "/healthz").await.body, "ok");
    assert!(get(http, "/").await.body.starts_with("NOW: "));
    assert_eq!(get(http, "/nothing").await.status, 404);

    assert_eq!(udp(udp_addr, "hostname").await.unwrap(), "pod-a");
    assert_eq!(udp(udp_addr, "echo a b c").await.unwrap(), "a b c");
    let seen = udp(udp_addr, "clientip").await.unwrap();
    assert!(seen.starts_with("127.0.0.1:"), "{seen}");
    assert!(
        udp(udp_addr, "reboot").await.is_err(),
        "unknown commands get no answer"
    );
}

#[tokio::test]
async fn connections_are_kept_alive_unless_the_client_closes() {
    let (http, _, _servers) = servers("pod-b");
    let raw = tokio::task::spawn_blocking(move || {
        let mut s = TcpStream::connect(http).unwrap();
        s.set_read_timeout(Some(T)).unwrap();
        // Two requests on one connection (the first with a body to skip), then close.
        s.write_all(b"POST /echo?msg=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
            .unwrap();
        s.write_all(b"GET /hostname HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        // HTTP/1.0 closes after one answer.
        let mut old = TcpStream::connect(http).unwrap();
        old.set_read_timeout(Some(T)).unwrap();
        old.write_all(b"GET /echo?msg=10 HTTP/1.0\r\n\r\n").unwrap();
        let mut out10 = String::new();
        old.read_to_string(&mut out10).unwrap();
        (out, out10)
    })
    .await
    .unwrap();
    let (both, one) = raw;
    assert_eq!(both.matches("HTTP/1.1 200 OK").count(), 2, "{both}");
    assert!(
        both.contains("\r\n\r\n1HTTP/1.1") && both.ends_with("pod-b"),
        "{both}"
    );
    assert!(
        one.ends_with("\r\n\r\n10") && one.contains("Connection: close"),
        "{one}"
    );
}

#[tokio::test]
async fn the_standalone_server_serves_its_ports() {
    // Ports just freed; the server binds them again at once.
    let http_port = std::net::TcpListener::bind(local(0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let udp_port = UdpSocket::bind(local(0)).unwrap().local_addr().unwrap().port();
    let server = tokio::spawn(netexec::run(NetexecConfig {
        hostname: "outside".into(),
        http_ports: vec![http_port],
        udp_ports: vec![udp_port],
        address: Ipv4Addr::LOCALHOST.into(),
    }));
    let answer = kube_ovn_testkit::wait_until_async("the standalone server to answer", T, || async {
        let a = tokio::task::spawn_blocking(move || http_get(local(http_port), "/hostname", T)).await?;
        Ok(a.is_ok_and(|a| a.body == "outside"))
    })
    .await;
    answer.unwrap();
    assert_eq!(udp(local(udp_port), "hostname").await.unwrap(), "outside");
    // A port taken: the error names it.
    let taken = std::net::TcpListener::bind(local(0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let err = netexec::run(NetexecConfig {
        hostname: "x".into(),
        http_ports: vec![port],
        udp_ports: vec![],
        address: Ipv4Addr::LOCALHOST.into(),
    })
    .await
    .unwrap_err();
    assert!(err.to_string().contains(&format!("127.0.0.1:{port}")), "{err}");
    server.abort();
}

/// Needs root (a network namespace).
#[tokio::test]
async fn servers_bound_in_a_namespace_answer_there_only() {
    let ns = kube_ovn_testkit::Netns::create("kol-netexec").expect("root: creating a network namespace");
    let handle = Netns::open(ns.path()).unwrap();
    let (tcp, udp_socket) = handle
        .run(|| (netexec::bind_tcp(local(8080)), netexec::bind_udp(local(8081))))
        .unwrap();
    let name: Arc<str> = Arc::from("pod-in-ns");
    let http_task = tokio::spawn(netexec::serve_http(tcp.unwrap(), name.clone()));
    let udp_task = tokio::spawn(netexec::serve_udp(udp_socket.unwrap(), name));
    let answer = netexec::http_get_in(&handle, local(8080), "/hostname", T)
        .await
        .unwrap();
    assert_eq!(answer.body, "pod-in-ns");
    let answer = netexec::udp_request_in(&handle, local(8081), "hostname", T)
        .await
        .unwrap();
    assert_eq!(answer, "pod-in-ns");
    // From this namespace the port is someone else's (or nobody's): never the pod's.
    let here = tokio::task::spawn_blocking(|| http_get(local(8080), "/hostname", Duration::from_millis(300)))
        .await
        .unwrap();
    assert!(here.is_err() || here.is_ok_and(|a| a.body != "pod-in-ns"));
    http_task.abort();
    udp_task.abort();
    // The aborted servers released their sockets: the namespace has nothing listening.
    let _ = http_task.await;
    let _ = udp_task.await;
    let gone = netexec::http_get_in(&handle, local(8080), "/hostname", Duration::from_millis(300)).await;
    assert!(gone.is_err(), "{gone:?}");
    drop(handle);
    ns.delete().unwrap();
}
