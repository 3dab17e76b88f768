//! FRR with zebra in the ToR namespace, for the session tests against FRR (`frr_sessions.rs`,
//! `frr_unnumbered.rs`): bgpd's CLI is the oracle for what it accepted, and zebra installs it in
//! the ToR's kernel, where `ip route` shows it. Also how the speaker makes a `BgpPeer` into a
//! driver peer, for those tests.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::config::{Config, Flags};
use kube_ovn_speaker::crd::{BgpPeerSpec, ValidateSpec};
use kube_ovn_speaker::driver::PeerConfig;
use kube_ovn_speaker::run::peers::from_bgp_peer;
use kube_ovn_testkit::{Daemon, Netns, run, wait_until};
use serde_json::Value;

use super::WAIT;

/// FRR's zebra and bgpd in one namespace, as user `frr` (FRR drops to it), with their sockets,
/// PID files and logs in a directory of the test's.
pub struct Frr {
    // Dropped first: bgpd before the zebra it talks to.
    pub bgpd: Daemon,
    pub zebra: Daemon,
    pub dir: tempfile::TempDir,
}

impl Frr {
    /// `zebra_extra` and `bgpd` are configuration text (bgpd's after the defaults line).
    pub fn start(ns: &Netns, zebra_extra: &str, bgpd: &str) -> anyhow::Result<Frr> {
        let dir = tempfile::Builder::new().prefix("frr-z-").tempdir()?;
        // FRR runs as user frr: it must be able to write its sockets and logs here.
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777))?;
        let d = dir.path().to_string_lossy().into_owned();
        std::fs::write(
            dir.path().join("zebra.conf"),
            format!("hostname tor\nlog file {d}/zebra.log informational\n!\n{zebra_extra}"),
        )?;
        std::fs::write(
            dir.path().join("bgpd.conf"),
            format!("frr defaults datacenter\nhostname tor\nlog file {d}/bgpd.log informational\n!\n{bgpd}"),
        )?;
        let zserv = format!("{d}/zserv.api");
        let launch = |daemon: &str, extra: &[&str]| -> anyhow::Result<Daemon> {
            let mut args: Vec<String> = ["netns", "exec", ns.name(), &format!("/usr/lib/frr/{daemon}")]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            for a in [
                "-f",
                &format!("{d}/{daemon}.conf"),
                "-i",
                &format!("{d}/{daemon}.pid"),
                "-z",
                &zserv,
                "--vty_socket",
                &d,
                "-P",
                "0",
            ]
            .iter()
            .chain(extra)
            {
                args.push((*a).to_owned());
            }
            Daemon::spawn(
                daemon,
                "ip",
                &args,
                &dir.path().join(format!("{daemon}.out")),
                &[],
            )
        };
        let zebra = launch("zebra", &[])?;
        wait_until("zebra's API socket", WAIT, || Ok(Path::new(&zserv).exists()))?;
        // -p 0: bgpd still listens (179) for the sessions; 0 only turns off its vty port.
        let bgpd = launch("bgpd", &[])?;
        let frr = Frr { bgpd, zebra, dir };
        wait_until("bgpd's vty socket", WAIT, || {
            Ok(frr.vtysh("bgpd", "show bgp summary").is_ok())
        })?;
        Ok(frr)
    }

    pub fn vtysh(&self, daemon: &str, command: &str) -> anyhow::Result<String> {
        let dir = self.dir.path().to_string_lossy();
        Ok(run(
            "vtysh",
            &["--vty_socket", &dir, "-d", daemon, "-c", command],
        )?)
    }

    pub fn json(&self, command: &str) -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&self.vtysh("bgpd", command)?)?)
    }

    /// (state, prefixes received) of neighbour `peer` (an address or, unnumbered, an
    /// interface) in one family.
    pub fn summary(&self, family: &str, peer: &str) -> anyhow::Result<(String, u64)> {
        let json = self.json(&format!("show bgp {family} unicast summary json"))?;
        let peer = &json["peers"][peer];
        Ok((
            peer["state"].as_str().unwrap_or_default().to_owned(),
            peer["pfxRcd"].as_u64().unwrap_or(0),
        ))
    }

    pub fn wait_received(&self, family: &str, peer: &str, n: u64) -> anyhow::Result<()> {
        wait_until(
            &format!("bgpd to hold {n} {family} prefixes from {peer}"),
            WAIT,
            || Ok(self.summary(family, peer)? == ("Established".to_owned(), n)),
        )
        .with_context(|| format!("bgpd log:\n{}", self.log_tail()))
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("bgpd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

/// The speaker's flags as a node would have them (AS 65001, router ID the node's address).
pub fn flags(extra: &[&str]) -> Config {
    let mut args = vec![
        "kube-ovn-speaker",
        "--node-name=node",
        "--cluster-as=65001",
        "--pod-ips=198.51.100.2",
        "--holdtime=30s",
    ];
    args.extend_from_slice(extra);
    Flags::try_parse_from(args).unwrap().validate().unwrap()
}

/// The driver settings the speaker makes of BgpPeer `spec` toward `address`.
pub fn bgp_peer(config: &Config, spec: Value, address: IpAddr) -> PeerConfig {
    let validated = serde_json::from_value::<BgpPeerSpec>(spec)
        .unwrap()
        .validate()
        .unwrap();
    let mut peer = from_bgp_peer(config, false, "tor", &validated, address, None)
        .unwrap()
        .config;
    // FRR is passive or slow to connect here: our retries decide how soon the session is up.
    peer.session.connect_retry = Duration::from_secs(1);
    peer
}

/// `n` host routes in `10.<second>.0.0/16`.
pub fn host_routes(second: u8, n: u8) -> Vec<(ipnet::IpNet, RouteAttributes)> {
    (0..n)
        .map(|i| {
            let net = ipnet::Ipv4Net::new(Ipv4Addr::new(10, second, 0, i), 32).unwrap();
            (net.into(), RouteAttributes::default())
        })
        .collect()
}

/// The ToR's kernel route to `dest`, once it mentions `want`.
pub fn wait_kernel_route(tor: &Netns, dest: &str, want: &str) -> anyhow::Result<String> {
    let mut last = String::new();
    wait_until(
        &format!("the ToR's kernel route to {dest} with {want:?}"),
        WAIT,
        || {
            let family = if dest.contains(':') { "-6" } else { "-4" };
            last = tor.ip(&[family, "route", "show", dest])?;
            Ok(last.contains(want))
        },
    )
    .with_context(|| format!("last: {last:?}"))?;
    Ok(last)
}
