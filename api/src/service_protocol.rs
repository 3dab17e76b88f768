//! The transport protocol of a Service port, as the controller's load balancers and the node's
//! ingress rules both name it.

use std::fmt;

/// A Service port's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ServiceProtocol {
    Tcp,
    Udp,
    Sctp,
}

impl ServiceProtocol {
    /// Every protocol, in the order of Kube-OVN's load-balancer names (tcp, udp, sctp).
    pub const ALL: [Self; 3] = [Self::Tcp, Self::Udp, Self::Sctp];

    /// A Service port's `protocol` (absent means TCP, as the API server defaults it); `None` for
    /// anything else.
    pub fn from_service(protocol: Option<&str>) -> Option<Self> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Some(Self::Tcp),
            "UDP" => Some(Self::Udp),
            "SCTP" => Some(Self::Sctp),
            _ => None,
        }
    }

    /// The lower-case name: OVN's `Load_Balancer.protocol` value and nftables' keyword.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tcp => "tcp",
            Self::Udp => "udp",
            Self::Sctp => "sctp",
        }
    }
}

impl fmt::Display for ServiceProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_is_tcp_and_unknown_is_none() {
        assert_eq!(ServiceProtocol::from_service(None), Some(ServiceProtocol::Tcp));
        assert_eq!(
            ServiceProtocol::from_service(Some("UDP")),
            Some(ServiceProtocol::Udp)
        );
        assert_eq!(
            ServiceProtocol::from_service(Some("SCTP")),
            Some(ServiceProtocol::Sctp)
        );
        assert_eq!(ServiceProtocol::from_service(Some("ICMP")), None);
        assert_eq!(ServiceProtocol::Sctp.to_string(), "sctp");
    }
}
