//! The "containers" the lab runs: for each container whose image is `kube-ovn-lab/netexec`
//! (any tag), the netexec server on every `containerPort` (TCP: HTTP, UDP: UDP; HTTP on 8080 when
//! no TCP port is declared, agnhost netexec's default, so `kubectl create deployment
//! --image=kube-ovn-lab/netexec` serves too), bound inside the pod's network namespace and served
//! from this process, answering with the pod's name.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod};
use kube_ovn_dataplane::Netns;
use tokio::task::JoinSet;

use crate::netexec;

/// The image whose containers run netexec.
pub const NETEXEC_IMAGE: &str = "kube-ovn-lab/netexec";

/// A port a pod's netexec serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ServedPort {
    Tcp(u16),
    Udp(u16),
}

/// Whether `image` is netexec's, with any tag or digest.
pub fn is_netexec(image: &str) -> bool {
    let without_digest = image.split('@').next().unwrap_or_default();
    // A tag is a `:` after the last `/` (before it, a `:` is a registry's port).
    let repo = match without_digest.rsplit_once(':') {
        Some((repo, tag)) if !tag.contains('/') => repo,
        _ => without_digest,
    };
    repo == NETEXEC_IMAGE
}

/// The ports the pod's netexec containers serve, and a complaint per port that cannot be.
pub fn served_ports(pod: &Pod) -> (Vec<ServedPort>, Vec<String>) {
    let mut ports = BTreeSet::new();
    let mut problems = Vec::new();
    let containers = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default();
    for c in containers
        .iter()
        .filter(|c| c.image.as_deref().is_some_and(is_netexec))
    {
        let (mine, complaints) = container_ports(c);
        ports.extend(mine);
        problems.extend(complaints);
    }
    (ports.into_iter().collect(), problems)
}

/// netexec's HTTP port when the container declares none (agnhost's `--http-port` default).
pub const DEFAULT_HTTP_PORT: u16 = 8080;

/// The ports one container serves (its `containerPorts`, TCP and UDP, and
/// [`DEFAULT_HTTP_PORT`] when none is TCP), and a complaint per port that cannot be served.
pub fn container_ports(c: &Container) -> (Vec<ServedPort>, Vec<String>) {
    let mut ports = BTreeSet::new();
    let mut problems = Vec::new();
    for p in c.ports.iter().flatten() {
        let Ok(port) = u16::try_from(p.container_port) else {
            problems.push(format!(
                "container {}: containerPort {} is not a port number",
                c.name, p.container_port
            ));
            continue;
        };
        match p.protocol.as_deref().unwrap_or("TCP") {
            "TCP" => ports.insert(ServedPort::Tcp(port)),
            "UDP" => ports.insert(ServedPort::Udp(port)),
            other => {
                problems.push(format!(
                    "container {}: port {port}/{other}: netexec serves TCP and UDP only",
                    c.name
                ));
                continue;
            }
        };
    }
    if !ports.iter().any(|p| matches!(p, ServedPort::Tcp(_))) {
        ports.insert(ServedPort::Tcp(DEFAULT_HTTP_PORT));
    }
    (ports.into_iter().collect(), problems)
}

/// The sockets of `ports`, bound inside `netns` on every address: dual-stack `[::]`, or
/// `0.0.0.0` where the namespace has no IPv6.
pub async fn bind(netns: &Netns, ports: &[ServedPort]) -> Result<Vec<Bound>, netexec::Error> {
    let ports = ports.to_vec();
    netns
        .run_async(move || {
            ports
                .iter()
                .map(|p| {
                    let any6 = IpAddr::V6(Ipv6Addr::UNSPECIFIED);
                    let any4 = IpAddr::V4(Ipv4Addr::UNSPECIFIED);
                    match *p {
                        ServedPort::Tcp(port) => netexec::bind_tcp(SocketAddr::new(any6, port))
                            .or_else(|_| netexec::bind_tcp(SocketAddr::new(any4, port)))
                            .map(Bound::Tcp),
                        ServedPort::Udp(port) => netexec::bind_udp(SocketAddr::new(any6, port))
                            .or_else(|_| netexec::bind_udp(SocketAddr::new(any4, port)))
                            .map(Bound::Udp),
                    }
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .await?
}

/// A bound socket of a port.
pub enum Bound {
    Tcp(std::net::TcpListener),
    Udp(std::net::UdpSocket),
}

/// Serves the sockets as `hostname`; the servers stop when the set is dropped.
pub fn serve(bound: Vec<Bound>, hostname: &str) -> JoinSet<Result<(), netexec::Error>> {
    let hostname: Arc<str> = Arc::from(hostname);
    let mut set = JoinSet::new();
    for b in bound {
        match b {
            Bound::Tcp(l) => set.spawn(netexec::serve_http(l, hostname.clone())),
            Bound::Udp(s) => set.spawn(netexec::serve_udp(s, hostname.clone())),
        };
    }
    set
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn netexec_images_with_any_tag_serve_their_ports() {
        for image in [
            "kube-ovn-lab/netexec",
            "kube-ovn-lab/netexec:1.0",
            "kube-ovn-lab/netexec@sha256:abc",
        ] {
            assert!(is_netexec(image), "{image}");
        }
        for image in [
            "nginx",
            "kube-ovn-lab/netexec2",
            "registry:5000/kube-ovn-lab/netexec",
            "x/kube-ovn-lab/netexec",
        ] {
            assert!(!is_netexec(image), "{image}");
        }
        let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "kube-ovn-lab/netexec:v1", "ports": [
                {"containerPort": 8080}, {"containerPort": 8081, "protocol": "UDP"},
                {"containerPort": 9, "protocol": "SCTP"}, {"containerPort": 8080}]},
            {"name": "b", "image": "nginx", "ports": [{"containerPort": 80}]},
        ]}}))
        .unwrap();
        let (ports, problems) = served_ports(&pod);
        assert_eq!(ports, [ServedPort::Tcp(8080), ServedPort::Udp(8081)]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].contains("9/SCTP"), "{problems:?}");

        // `kubectl create deployment --image=kube-ovn-lab/netexec` declares no port: HTTP on
        // 8080 as agnhost's; a UDP port alone still gets it.
        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "a", "image": "kube-ovn-lab/netexec"},
            {"name": "b", "image": "kube-ovn-lab/netexec", "ports": [{"containerPort": 53, "protocol": "UDP"}]},
        ]}}))
        .unwrap();
        assert_eq!(
            served_ports(&bare).0,
            [ServedPort::Tcp(8080), ServedPort::Udp(53)]
        );
    }
}
