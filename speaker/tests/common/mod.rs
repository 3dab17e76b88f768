//! Shared fixtures for the tests against real BGP peers: namespaces joined by veths, the
//! speaker under test run on a tokio runtime whose threads live in the node's namespace, and a
//! few helpers. Peer daemons are in `peers.rs`.
//!
//! Topology ([`Lab::direct`]): `node` 198.51.100.2/24, 2001:db8:100::2/64 ── veth ── `tor`
//! 198.51.100.1, ::1. [`Lab::routed`] puts a `router` netns between them: node on
//! 198.51.100.0/24 and 2001:db8:100::/64, tor on 198.51.101.0/24 and 2001:db8:101::/64 (.2 / ::2),
//! the router .1 / ::1 on both, so the peer is two hops away.

#![allow(dead_code, reason = "each test file uses a part")]

pub mod birdctl;
pub mod frr_zebra;
pub mod gateways;
pub mod k8s;
pub mod ovn_eips;
pub mod peers;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use kube_ovn_speaker::bgp::fsm::{GracefulRestartConfig, SessionConfig};
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::bgp::wire::Family;
use kube_ovn_speaker::driver::{PeerConfig, PeerHandle, Speaker, SpeakerConfig};
use kube_ovn_testkit::Netns;

pub const NODE_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 2);
pub const NODE_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 2);
pub const TOR_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 1);
pub const TOR_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x100, 0, 0, 0, 0, 1);
pub const FAR_TOR_V4: Ipv4Addr = Ipv4Addr::new(198, 51, 101, 2);
pub const NODE_AS: u32 = 65001;
pub const TOR_AS: u32 = 65000;
pub const WAIT: Duration = Duration::from_secs(20);

/// Fails loudly, never skips: these tests need root for namespaces.
pub fn require_root() {
    // The effective UID is the fourth field of /proc/self/status's "Uid:" line.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let euid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .unwrap_or("?")
        .to_owned();
    assert_eq!(
        euid, "0",
        "the BGP peer tests need root (network namespaces); run them as root"
    );
}

pub struct Lab {
    pub node: Netns,
    pub tor: Netns,
    pub router: Option<Netns>,
    /// The ToR's addresses as the node reaches them.
    pub tor_v4: Ipv4Addr,
    pub tor_v6: Ipv6Addr,
}

fn veth(a: &Netns, b: &Netns) -> anyhow::Result<()> {
    a.ip(&[
        "link",
        "add",
        "eth0",
        "type",
        "veth",
        "peer",
        "name",
        "eth1",
        "netns",
        b.name(),
    ])?;
    a.ip(&["link", "set", "eth0", "up"])?;
    b.ip(&["link", "set", "eth1", "up"])?;
    Ok(())
}

/// `nodad`: a tentative IPv6 address cannot be bound, and DAD would make every test wait.
fn addr(ns: &Netns, dev: &str, cidr: &str) -> anyhow::Result<()> {
    let mut args = vec!["addr", "add", cidr, "dev", dev];
    if cidr.contains(':') {
        args.push("nodad");
    }
    ns.ip(&args).map(drop)
}

impl Lab {
    pub fn direct() -> anyhow::Result<Lab> {
        require_root();
        let node = Netns::create("bgpn")?;
        let tor = Netns::create("bgpt")?;
        veth(&node, &tor)?;
        addr(&node, "eth0", "198.51.100.2/24")?;
        addr(&node, "eth0", "2001:db8:100::2/64")?;
        addr(&tor, "eth1", "198.51.100.1/24")?;
        addr(&tor, "eth1", "2001:db8:100::1/64")?;
        Ok(Lab {
            node,
            tor,
            router: None,
            tor_v4: TOR_V4,
            tor_v6: TOR_V6,
        })
    }

    pub fn routed() -> anyhow::Result<Lab> {
        require_root();
        let node = Netns::create("bgpn")?;
        let router = Netns::create("bgpr")?;
        let tor = Netns::create("bgpt")?;
        veth(&node, &router)?;
        // The router's second link: eth0 in the router, eth1 in the ToR.
        router.ip(&[
            "link",
            "add",
            "eth2",
            "type",
            "veth",
            "peer",
            "name",
            "eth1",
            "netns",
            tor.name(),
        ])?;
        router.ip(&["link", "set", "eth2", "up"])?;
        tor.ip(&["link", "set", "eth1", "up"])?;
        addr(&node, "eth0", "198.51.100.2/24")?;
        addr(&node, "eth0", "2001:db8:100::2/64")?;
        addr(&router, "eth1", "198.51.100.1/24")?;
        addr(&router, "eth1", "2001:db8:100::1/64")?;
        addr(&router, "eth2", "198.51.101.1/24")?;
        addr(&router, "eth2", "2001:db8:101::1/64")?;
        addr(&tor, "eth1", "198.51.101.2/24")?;
        addr(&tor, "eth1", "2001:db8:101::2/64")?;
        node.ip(&["route", "add", "default", "via", "198.51.100.1"])?;
        node.ip(&["-6", "route", "add", "default", "via", "2001:db8:100::1"])?;
        tor.ip(&["route", "add", "default", "via", "198.51.101.1"])?;
        tor.ip(&["-6", "route", "add", "default", "via", "2001:db8:101::1"])?;
        router.exec(&[
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
            "net.ipv6.conf.all.forwarding=1",
        ])?;
        Ok(Lab {
            node,
            tor,
            router: Some(router),
            tor_v4: FAR_TOR_V4,
            tor_v6: Ipv6Addr::new(0x2001, 0xdb8, 0x101, 0, 0, 0, 0, 2),
        })
    }

    /// Runs `f` on a thread in the node's namespace with a multi-thread tokio runtime built
    /// there, so its worker threads (and every socket the speaker opens) are in that namespace
    /// too. `f` may block (polling a peer's CLI); the speaker's tasks run on the workers.
    pub fn on_node<T: Send>(&self, f: impl FnOnce(&tokio::runtime::Runtime) -> T + Send) -> T {
        self.node
            .run(|| {
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("tokio runtime");
                f(&rt)
            })
            .expect("code run in the node namespace")
    }
}

/// Our session toward the ToR.
pub fn session(passive: bool) -> SessionConfig {
    SessionConfig {
        local_as: NODE_AS,
        peer_as: TOR_AS,
        router_id: NODE_V4,
        hold_time: 30,
        connect_retry: Duration::from_secs(1),
        passive,
        families: Family::ALL.to_vec(),
        graceful_restart: None,
        restarting: false,
        extended_next_hop: false,
    }
}

/// BIRD on the ToR, and our speaker (to be called on the node's runtime) with the ToR as its
/// one peer over IPv4, both with hold time `hold`.
pub fn tor_and_speaker_with_hold(
    lab: &Lab,
    hold: u16,
) -> anyhow::Result<(peers::Bird, impl FnOnce() -> (Speaker, PeerHandle))> {
    let spec = peers::PeerSpec {
        hold_time: hold,
        ..peers::PeerSpec::new(TOR_V4, NODE_V4)
    };
    let bird = peers::Bird::start(&lab.tor, &spec)?;
    let speaker = move || {
        let speaker = Speaker::new(SpeakerConfig::default()).expect("speaker");
        let mut config = session(false);
        config.hold_time = hold;
        let peer = speaker
            .add_peer(PeerConfig::new(IpAddr::V4(TOR_V4), config))
            .expect("peer");
        (speaker, peer)
    };
    Ok((bird, speaker))
}

pub fn with_gr(mut session: SessionConfig, restarting: bool) -> SessionConfig {
    session.graceful_restart = Some(GracefulRestartConfig {
        restart_time: 120,
        forwarding_preserved: true,
    });
    session.restarting = restarting;
    session
}

/// `n` host routes 10.17.0.0/32, 10.17.0.1/32, ...
pub fn hosts(n: u32) -> Vec<(ipnet::IpNet, RouteAttributes)> {
    (0..n)
        .map(|i| {
            let net = ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a11_0000 + i), 32).unwrap();
            (net.into(), RouteAttributes::default())
        })
        .collect()
}

pub fn host(i: u32) -> ipnet::IpNet {
    ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a11_0000 + i), 32)
        .unwrap()
        .into()
}

pub const V6_PREFIX: &str = "fd00:10:16::/64";

/// 100 IPv4 host routes and one IPv6 prefix, ready to go. IPv6 routes on an IPv4 session need
/// an IPv6 next hop from the caller; IPv4 ones take the session's own source address.
pub fn announce_both_families(peer: &PeerHandle) {
    peer.announce_many(hosts(100)).unwrap();
    peer.announce(v6_prefix(), RouteAttributes::default()).unwrap();
    peer.set_local_addresses(None, Some(NODE_V6)).unwrap();
    peer.set_ready().unwrap();
}

pub fn v6_prefix() -> ipnet::IpNet {
    V6_PREFIX.parse().unwrap()
}

/// Waits for `check` on the speaker's side: a status condition.
pub fn block<T>(rt: &tokio::runtime::Runtime, f: impl Future<Output = T>) -> T {
    rt.block_on(f)
}

/// Sends SIGCONT to `pid` on drop, so a test that stopped a peer never leaves it stopped.
pub struct ContinueOnDrop(pub i32);

impl Drop for ContinueOnDrop {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0),
            nix::sys::signal::Signal::SIGCONT,
        );
    }
}

pub fn ip(v4: Ipv4Addr) -> IpAddr {
    IpAddr::V4(v4)
}

/// Speaker logs on the test's output (`RUST_LOG=kube_ovn_speaker=debug` for more).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("kube_ovn_speaker=info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Prints a latency line for a bench: median, p90, p99 and max of `samples` (sorted in place), in
/// milliseconds.
pub fn print_latency(name: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |p: f64| {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
        samples[i].as_secs_f64() * 1000.0
    };
    println!(
        "{name:<34} median {:>7.2} ms   p90 {:>7.2} ms   p99 {:>7.2} ms   max {:>7.2} ms",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}
