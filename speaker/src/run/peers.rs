//! The peers this speaker should have, and how each becomes a driver [`PeerConfig`]: from
//! Kube-OVN's flags (one AS for every `--neighbor-address`), with the same transport rules.

use std::net::IpAddr;
use std::time::Duration;

use crate::bgp::fsm::{GracefulRestartConfig, SessionConfig};
use crate::bgp::rib_out::RouteAttributes;
use crate::bgp::wire::Family;
use crate::config::Config;
use crate::crd::{PeerTarget, ValidatedPeer};
use crate::driver::PeerConfig;

/// One desired peer: its driver settings and what its routes carry.
#[derive(Debug, Clone)]
pub struct PeerPlan {
    /// Transport and session.
    pub config: PeerConfig,
    /// Attributes of every route sent to it (communities, local-pref, MED).
    pub attributes: RouteAttributes,
    /// BFD timers, when BFD is on for this peer.
    pub bfd: Option<crate::bfd::Timers>,
    /// Where it came from, for logs (`flags` or `BgpPeer <name>`).
    pub source: String,
}

/// Which families a peer carries: its own address family (Kube-OVN keeps IPv4 and IPv6
/// neighbors apart), or both with extended next hop (RFC 8950).
pub fn families_for(peer: IpAddr, extended_next_hop: bool) -> Vec<Family> {
    if extended_next_hop {
        Family::ALL.to_vec()
    } else if peer.is_ipv4() {
        vec![Family::Ipv4Unicast]
    } else {
        vec![Family::Ipv6Unicast]
    }
}

/// The session settings shared by flag peers and CRD peers.
pub fn session(
    config: &Config,
    local_as: u32,
    peer: IpAddr,
    peer_as: u32,
    hold: Duration,
    passive: bool,
    restarting: bool,
) -> SessionConfig {
    let flags = &config.flags;
    #[allow(clippy::cast_possible_truncation)] // validated to 3..=65535 s and 1..=4095 s
    let graceful_restart = flags.graceful_restart.then_some(GracefulRestartConfig {
        restart_time: flags.graceful_restart_time.as_secs() as u16,
        // Pods keep forwarding while the speaker restarts: OVS and the kernel do not restart with it.
        forwarding_preserved: true,
    });
    #[allow(clippy::cast_possible_truncation)]
    SessionConfig {
        local_as,
        peer_as,
        router_id: config.router_id,
        hold_time: hold.as_secs().min(65535) as u16,
        connect_retry: Duration::from_secs(5),
        passive,
        families: families_for(peer, flags.extended_nexthop),
        restarting: restarting && graceful_restart.is_some(),
        graceful_restart,
        extended_next_hop: flags.extended_nexthop,
    }
}

/// Peers from `--neighbor-address`/`--neighbor-ipv6-address`. `local_address` gives the pinned
/// source for a peer (from `--allowed-source-addresses`), when there is one.
pub fn from_flags(
    config: &Config,
    restarting: bool,
    local_address: impl Fn(IpAddr) -> Option<IpAddr>,
) -> Vec<PeerPlan> {
    let flags = &config.flags;
    config
        .neighbors
        .iter()
        .map(|&peer| {
            let session = session(
                config,
                flags.cluster_as,
                peer,
                flags.neighbor_as,
                flags.holdtime,
                flags.passivemode,
                restarting,
            );
            let mut peer_config = PeerConfig::new(peer, session);
            peer_config.port = flags.bgp_port;
            peer_config.local_address = local_address(peer);
            peer_config.md5_key =
                (!flags.auth_password.is_empty()).then(|| flags.auth_password.as_bytes().to_vec());
            // Kube-OVN: multihop only when the TTL is not 1; eBGP otherwise gets TTL 1.
            peer_config.ttl = (flags.ebgp_multihop != 1).then_some(flags.ebgp_multihop);
            peer_config.ttl_security = flags.ttl_security;
            peer_config.bind_device = vrf_flag(config);
            peer_config.ready_deadline = flags
                .graceful_restart
                .then_some(flags.graceful_restart_deferral_time);
            PeerPlan {
                config: peer_config,
                attributes: RouteAttributes::default(),
                bfd: flags.enable_bfd.then(|| crate::bfd::Timers {
                    desired_min_tx: Duration::from_millis(u64::from(flags.bfd_min_tx)),
                    required_min_rx: Duration::from_millis(u64::from(flags.bfd_min_rx)),
                    detect_mult: flags.bfd_detection_multiplier,
                }),
                source: "flags".into(),
            }
        })
        .collect()
}

/// `--vrf`, when given.
fn vrf_flag(config: &Config) -> Option<String> {
    (!config.flags.vrf.is_empty()).then(|| config.flags.vrf.clone())
}

/// The plan for a validated `BgpPeer` named `name`: the speaker's flags fill what the spec
/// leaves out. `address` is the peer's (`spec.peerAddress`, or for `spec.peerInterface` the
/// link-local address its Router Advertisements came from); `md5_key` is already read from
/// its Secret.
pub fn from_bgp_peer(
    config: &Config,
    restarting: bool,
    name: &str,
    peer: &ValidatedPeer,
    address: IpAddr,
    md5_key: Option<Vec<u8>>,
) -> Result<PeerPlan, String> {
    let flags = &config.flags;
    let local_as = peer.local_asn_or(flags.cluster_as).map_err(|e| e.to_string())?;
    let hold = peer
        .hold_time
        .map_or(flags.holdtime, |s| Duration::from_secs(u64::from(s)));
    let mut session = session(
        config,
        local_as,
        address,
        peer.peer_asn,
        hold,
        peer.passive,
        restarting,
    );
    // RFC 8950: the spec's choice, else the flag's (an interface peer always has it).
    let extended_next_hop = peer.extended_nexthop.unwrap_or(flags.extended_nexthop);
    session.extended_next_hop = extended_next_hop;
    session.families = peer
        .families
        .clone()
        .unwrap_or_else(|| families_for(address, extended_next_hop));
    if let Some(gr) = peer.graceful_restart {
        #[allow(clippy::cast_possible_truncation)] // validated to 1..=4095 s
        let restart_time = flags.graceful_restart_time.as_secs().clamp(1, 4095) as u16;
        session.graceful_restart = gr.then_some(GracefulRestartConfig {
            restart_time,
            forwarding_preserved: true,
        });
        session.restarting = gr && restarting;
    }
    let mut peer_config = PeerConfig::new(address, session);
    peer_config.port = peer.port;
    peer_config.md5_key = md5_key;
    peer_config.ttl = peer.ebgp_multihop;
    peer_config.ttl_security = peer.ttl_security.unwrap_or(flags.ttl_security);
    peer_config.ready_deadline = peer_config
        .session
        .graceful_restart
        .is_some()
        .then_some(flags.graceful_restart_deferral_time);
    if let PeerTarget::Interface(interface) = &peer.target {
        peer_config.interface = Some(interface.clone());
    }
    peer_config.bind_device = peer.vrf.clone().or_else(|| vrf_flag(config));
    peer_config.validate().map_err(|e| e.to_string())?;
    Ok(PeerPlan {
        config: peer_config,
        attributes: RouteAttributes {
            communities: peer.communities.clone(),
            large_communities: peer.large_communities.clone(),
            local_pref: peer.local_pref,
            med: peer.med,
            ..RouteAttributes::default()
        },
        bfd: peer.bfd,
        source: format!("BgpPeer {name}"),
    })
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::config::Flags;

    #[test]
    fn flag_peers_follow_kube_ovn() {
        let config = Flags::try_parse_from([
            "kube-ovn-speaker",
            "--node-name=n1",
            "--cluster-as=65000",
            "--neighbor-as=65001",
            "--neighbor-address=10.0.0.1",
            "--neighbor-ipv6-address=fd00::1",
            "--auth-password=s3cret",
            "--graceful-restart",
            "--ebgp-multihop=3",
            "--holdtime=30s",
            "--enable-bfd",
            "--bfd-min-tx=300",
            "--pod-ips=10.1.0.5",
        ])
        .unwrap()
        .validate()
        .unwrap();
        let peers = from_flags(&config, true, |p| {
            p.is_ipv4().then(|| "10.0.0.2".parse().unwrap())
        });
        assert_eq!(peers.len(), 2);
        let v4 = &peers[0].config;
        assert_eq!(v4.session.families, vec![Family::Ipv4Unicast]);
        assert_eq!(peers[1].config.session.families, vec![Family::Ipv6Unicast]);
        assert_eq!(v4.session.hold_time, 30);
        assert_eq!(v4.session.router_id.to_string(), "10.1.0.5");
        assert!(v4.session.restarting);
        assert_eq!(v4.session.graceful_restart.as_ref().unwrap().restart_time, 90);
        assert_eq!(v4.md5_key.as_deref(), Some(&b"s3cret"[..]));
        assert_eq!(v4.ttl, Some(3));
        assert!(!v4.ttl_security);
        assert_eq!(v4.local_address, Some("10.0.0.2".parse().unwrap()));
        assert_eq!(peers[1].config.local_address, None);
        assert_eq!(v4.ready_deadline, Some(Duration::from_mins(6)));
        assert_eq!(peers[0].bfd.unwrap().desired_min_tx, Duration::from_millis(300));
        v4.validate().unwrap();
    }

    #[test]
    fn no_graceful_restart_means_no_r_bit_and_default_ttl() {
        let config = Flags::try_parse_from([
            "kube-ovn-speaker",
            "--node-name=n1",
            "--cluster-as=65000",
            "--neighbor-as=65000",
            "--neighbor-address=10.0.0.1",
            "--pod-ips=10.1.0.5",
        ])
        .unwrap()
        .validate()
        .unwrap();
        let peers = from_flags(&config, true, |_| None);
        assert!(!peers[0].config.session.restarting && peers[0].config.session.graceful_restart.is_none());
        assert_eq!(
            peers[0].config.ttl, None,
            "iBGP keeps the system TTL; eBGP gets 1 from the driver"
        );
        assert!(peers[0].bfd.is_none() && peers[0].config.md5_key.is_none());
    }

    fn bgp_peer(spec: serde_json::Value) -> ValidatedPeer {
        use crate::crd::ValidateSpec;
        serde_json::from_value::<crate::crd::BgpPeerSpec>(spec)
            .unwrap()
            .validate()
            .unwrap()
    }

    #[test]
    fn a_bgp_peer_takes_extended_next_hop_and_vrf_from_its_spec_or_the_flags() {
        let flags = |extra: &[&str]| {
            let mut args = vec![
                "kube-ovn-speaker",
                "--node-name=n1",
                "--cluster-as=65000",
                "--pod-ips=10.1.0.5",
            ];
            args.extend_from_slice(extra);
            Flags::try_parse_from(args).unwrap().validate().unwrap()
        };
        let v6: IpAddr = "fd00::1".parse().unwrap();
        let plain = bgp_peer(serde_json::json!({ "peerAddress": "fd00::1", "peerASN": 65001 }));
        let built = from_bgp_peer(&flags(&[]), false, "tor", &plain, v6, None).unwrap();
        let s = &built.config.session;
        assert!(!s.extended_next_hop);
        assert_eq!(s.families, vec![Family::Ipv6Unicast]);
        assert_eq!(built.config.bind_device, None);
        let with_flags = flags(&["--extended-nexthop", "--vrf=blue"]);
        let built = from_bgp_peer(&with_flags, false, "tor", &plain, v6, None).unwrap();
        let s = &built.config.session;
        assert!(s.extended_next_hop, "--extended-nexthop is the default");
        assert_eq!(s.families, Family::ALL.to_vec(), "IPv4 rides the IPv6 session");
        assert_eq!(built.config.bind_device.as_deref(), Some("blue"));
        let own = bgp_peer(serde_json::json!({ "peerAddress": "fd00::1", "peerASN": 65001,
            "extendedNexthop": false, "vrf": "red" }));
        let built = from_bgp_peer(&with_flags, false, "tor", &own, v6, None).unwrap();
        assert!(
            !built.config.session.extended_next_hop,
            "the spec overrides the flag"
        );
        assert_eq!(built.config.session.families, vec![Family::Ipv6Unicast]);
        assert_eq!(built.config.bind_device.as_deref(), Some("red"));
        let unnumbered = bgp_peer(serde_json::json!({ "peerInterface": "eth0", "peerASN": 65001 }));
        let ll: IpAddr = "fe80::1".parse().unwrap();
        let built = from_bgp_peer(&flags(&[]), false, "tor", &unnumbered, ll, None).unwrap();
        assert_eq!(built.config.address, ll);
        assert_eq!(built.config.interface.as_deref(), Some("eth0"));
        assert!(built.config.session.extended_next_hop);
        assert_eq!(built.config.session.families, Family::ALL.to_vec());
    }

    #[test]
    fn ttl_security_makes_flag_peers_use_gtsm() {
        let config = Flags::try_parse_from([
            "kube-ovn-speaker",
            "--node-name=n1",
            "--cluster-as=65000",
            "--neighbor-as=65001",
            "--neighbor-address=10.0.0.1",
            "--ttl-security",
            "--pod-ips=10.1.0.5",
        ])
        .unwrap()
        .validate()
        .unwrap();
        let peers = from_flags(&config, false, |_| None);
        let c = &peers[0].config;
        assert!(c.ttl_security);
        assert_eq!((c.effective_ttl(), c.min_ttl()), (Some(255), Some(255)));
    }

    #[test]
    fn vrf_binds_flag_peers_and_extended_next_hop_gives_them_both_families() {
        let config = Flags::try_parse_from([
            "kube-ovn-speaker",
            "--node-name=n1",
            "--cluster-as=65000",
            "--neighbor-as=65001",
            "--neighbor-ipv6-address=fd00::1",
            "--vrf=blue",
            "--extended-nexthop",
            "--pod-ips=10.1.0.5",
        ])
        .unwrap()
        .validate()
        .unwrap();
        let peers = from_flags(&config, false, |_| None);
        let c = &peers[0].config;
        assert_eq!(c.bind_device.as_deref(), Some("blue"));
        assert!(c.session.extended_next_hop);
        assert_eq!(c.session.families, Family::ALL.to_vec());
    }
}
