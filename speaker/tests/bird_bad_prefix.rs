//! The driver against BIRD: a full reconcile (`PeerHandle::replace_all`) holding one multicast
//! prefix hands the rest of the set over all the same, so one bad prefix from the cluster cannot
//! stop new routes nor withdrawals (issue 21: a `239.1.1.1` pod froze every speaker's table).
//! The bad prefix is named in the error. Needs root and bird2; fails, never skips.

mod common;

use std::net::IpAddr;

use common::peers::{Bird, PeerSpec};
use common::*;
use kube_ovn_speaker::bgp::rib_out::{RibOutError, RouteAttributes};
use kube_ovn_speaker::driver::{DriverError, PeerConfig, Speaker, SpeakerConfig};

#[test]
fn one_multicast_prefix_is_left_out_alone() {
    init_tracing();
    let lab = Lab::direct().unwrap();
    let bird = Bird::start(&lab.tor, &PeerSpec::new(TOR_V4, NODE_V4)).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let speaker = Speaker::new(SpeakerConfig::default()).unwrap();
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(TOR_V4), session(false)))
            .unwrap();
        peer.replace_all([(host(1), RouteAttributes::default())]).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        bird.wait_count("master4", 1).unwrap();

        // host(1) goes, host(2) comes, 239.1.1.1/32 is refused.
        let multicast: ipnet::IpNet = "239.1.1.1/32".parse().unwrap();
        let result = peer.replace_all([
            (multicast, RouteAttributes::default()),
            (host(2), RouteAttributes::default()),
        ]);
        assert!(
            matches!(
                result,
                Err(DriverError::Route {
                    source: RibOutError::NotUnicast { prefix },
                    ..
                }) if prefix == multicast
            ),
            "{result:?}"
        );
        kube_ovn_testkit::wait_until("host(2) learned, host(1) withdrawn", WAIT, || {
            Ok(bird.has(&host(2).to_string())? && !bird.has(&host(1).to_string())?)
        })
        .unwrap();
        assert!(!bird.has("239.1.1.1/32").unwrap());
    });
}
