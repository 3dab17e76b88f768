//! Real BGP peers from Debian, each run in the ToR namespace with a config written by the test
//! into its own temporary directory, and stopped by PID: BIRD 2 (`bird`/`birdc`), FRR's bgpd
//! (`vtysh`), gobgpd (`gobgp`). Their CLIs are the oracle for what the speaker sent.

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;

use anyhow::Context;
use kube_ovn_testkit::{Daemon, Netns, run, wait_until};

use super::{NODE_AS, TOR_AS, WAIT};

/// What the peer's configuration says about us.
#[derive(Debug, Clone)]
pub struct PeerSpec {
    /// The ToR's router ID (its IPv4 address).
    pub router_id: IpAddr,
    /// Our address, as the peer's neighbor.
    pub neighbor: IpAddr,
    pub password: Option<String>,
    /// The peer only listens (we connect) ...
    pub passive: bool,
    /// ... or it connects to us.
    pub multihop: Option<u8>,
    pub hold_time: u16,
    /// BIRD only: run BFD (100 ms, multiplier 3) for this session.
    pub bfd: bool,
    /// BIRD only: GTSM (`ttl security on`, RFC 5082).
    pub ttl_security: bool,
    /// BIRD only: install the IPv4 routes it learns into the ToR's kernel table, so traffic
    /// through the ToR follows them.
    pub kernel_export: bool,
    /// FRR only: the ToR's AS (`NODE_AS` makes the session internal); default `TOR_AS`.
    pub local_as: u32,
    /// FRR only: the port bgpd listens on (beside another daemon on 179); default 179.
    pub listen_port: Option<u16>,
}

impl PeerSpec {
    pub fn new(router_id: impl Into<IpAddr>, neighbor: impl Into<IpAddr>) -> Self {
        PeerSpec {
            router_id: router_id.into(),
            neighbor: neighbor.into(),
            password: None,
            passive: true,
            multihop: None,
            hold_time: 30,
            bfd: false,
            ttl_security: false,
            kernel_export: false,
            local_as: TOR_AS,
            listen_port: None,
        }
    }
}

fn program_in(ns: &Netns, program: &str, args: &[String]) -> Vec<String> {
    let mut full = vec![
        "netns".to_owned(),
        "exec".to_owned(),
        ns.name().to_owned(),
        program.to_owned(),
    ];
    full.extend_from_slice(args);
    full
}

fn count_routes(text: &str) -> usize {
    // "N of M routes for K networks in table T": N is what is counted as imported.
    text.lines()
        .find_map(|l| l.split_whitespace().next().filter(|_| l.contains(" routes for ")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

pub struct Bird {
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
    ctl: PathBuf,
}

impl Bird {
    pub fn start(ns: &Netns, spec: &PeerSpec) -> anyhow::Result<Bird> {
        let dir = tempfile::Builder::new().prefix("bird-").tempdir()?;
        let mut text = format!(
            "log \"{}\" all;\nrouter id {};\nprotocol device {{ scan time 10; }}\n\
             protocol direct {{ ipv4; ipv6; }}\nprotocol bgp node {{\n  local as {TOR_AS};\n  \
             neighbor {} as {NODE_AS};\n  hold time {};\n  connect delay time 1;\n  \
             connect retry time 1;\n  error wait time 1, 5;\n  graceful restart on;\n",
            dir.path().join("bird.log").display(),
            spec.router_id,
            spec.neighbor,
            spec.hold_time,
        );
        if spec.passive {
            text.push_str("  passive on;\n");
        }
        if let Some(hops) = spec.multihop {
            let _ = writeln!(text, "  multihop {hops};");
        }
        if let Some(password) = &spec.password {
            let _ = writeln!(text, "  password \"{password}\";");
        }
        if spec.bfd {
            text.push_str("  bfd on;\n");
        }
        if spec.ttl_security {
            text.push_str("  ttl security on;\n");
        }
        text.push_str("  ipv4 { import all; export none; };\n  ipv6 { import all; export none; };\n}\n");
        if spec.kernel_export {
            text.push_str("protocol kernel { ipv4 { export all; }; }\n");
        }
        if spec.bfd {
            text.push_str(
                "protocol bfd {\n  interface \"*\" { min rx interval 100 ms; min tx interval 100 ms; multiplier 3; };\n}\n",
            );
        }
        Self::launch(ns, dir, &text)
    }

    /// BIRD with the configuration `text` (written to `dir`), once its control socket answers.
    pub fn launch(ns: &Netns, dir: tempfile::TempDir, text: &str) -> anyhow::Result<Bird> {
        let conf = dir.path().join("bird.conf");
        let ctl = dir.path().join("bird.ctl");
        std::fs::write(&conf, text)?;
        run("bird", &["-p", "-c", &conf.to_string_lossy()]).context("BIRD config check")?;
        let args: Vec<String> = ["-f", "-c", &conf.to_string_lossy(), "-s", &ctl.to_string_lossy()]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let daemon = Daemon::spawn(
            "bird",
            "ip",
            &program_in(ns, "bird", &args),
            &dir.path().join("stdout.log"),
            &[],
        )?;
        let bird = Bird { daemon, dir, ctl };
        wait_until("BIRD's control socket", WAIT, || {
            Ok(bird.birdc(&["show", "status"]).is_ok())
        })?;
        Ok(bird)
    }

    pub fn birdc(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut full = vec!["-s", self.ctl.to_str().unwrap_or_default()];
        full.extend_from_slice(args);
        Ok(run("birdc", &full)?)
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.daemon.pid().unwrap_or_default()).unwrap_or_default()
    }

    pub fn established(&self) -> anyhow::Result<bool> {
        Ok(self
            .birdc(&["show", "protocols", "node"])?
            .contains("Established"))
    }

    pub fn count(&self, table: &str) -> anyhow::Result<usize> {
        Ok(count_routes(&self.birdc(&[
            "show", "route", "table", table, "protocol", "node", "count",
        ])?))
    }

    /// Routes from us in `table` that pass BIRD's filter expression `condition`.
    pub fn count_where(&self, table: &str, condition: &str) -> anyhow::Result<usize> {
        let mut args = vec!["show", "route", "table", table, "protocol", "node", "where"];
        args.extend(condition.split_whitespace());
        args.push("count");
        Ok(count_routes(&self.birdc(&args)?))
    }

    #[allow(
        clippy::unnecessary_wraps,
        reason = "the same shape as the other checks, for wait_until"
    )]
    pub fn has(&self, prefix: &str) -> anyhow::Result<bool> {
        let table = if prefix.contains(':') {
            "master6"
        } else {
            "master4"
        };
        // birdc exits 1 on "Network not found".
        let out = self.birdc(&["show", "route", "table", table, prefix]);
        Ok(out.is_ok_and(|out| out.lines().any(|l| l.starts_with(prefix))))
    }

    pub fn route_all(&self, prefix: &str) -> anyhow::Result<String> {
        self.birdc(&["show", "route", "all", prefix])
    }

    pub fn wait_count(&self, table: &str, n: usize) -> anyhow::Result<()> {
        wait_until(&format!("{n} routes in BIRD's {table}"), WAIT, || {
            Ok(self.count(table)? == n)
        })
        .with_context(|| {
            let protocol = self
                .birdc(&["show", "protocols", "all", "node"])
                .unwrap_or_default();
            format!("BIRD: {protocol}\nlog tail:\n{}", self.log_tail())
        })
    }

    pub fn wait_established(&self) -> anyhow::Result<()> {
        wait_until("BIRD to see the session Established", WAIT, || self.established())
            .with_context(|| format!("BIRD log tail:\n{}", self.log_tail()))
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("bird.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

pub struct Frr {
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
    neighbor: IpAddr,
}

impl Frr {
    pub fn start(ns: &Netns, spec: &PeerSpec) -> anyhow::Result<Frr> {
        let dir = tempfile::Builder::new().prefix("frr-").tempdir()?;
        let conf = dir.path().join("bgpd.conf");
        let n = spec.neighbor;
        let mut text = format!(
            "frr defaults datacenter\nhostname tor\nlog file {}/bgpd.log informational\n!\n\
             router bgp {}\n bgp router-id {}\n no bgp ebgp-requires-policy\n \
             bgp graceful-restart\n neighbor {n} remote-as {NODE_AS}\n \
             neighbor {n} timers {} {}\n neighbor {n} timers connect 1\n",
            dir.path().display(),
            spec.local_as,
            spec.router_id,
            (spec.hold_time / 3).max(1),
            spec.hold_time,
        );
        if spec.passive {
            let _ = writeln!(text, " neighbor {n} passive");
        }
        if let Some(password) = &spec.password {
            let _ = writeln!(text, " neighbor {n} password {password}");
        }
        if let Some(hops) = spec.multihop {
            let _ = writeln!(text, " neighbor {n} ebgp-multihop {hops}");
        }
        for family in ["ipv4", "ipv6"] {
            let _ = write!(
                text,
                " address-family {family} unicast\n  neighbor {n} activate\n exit-address-family\n"
            );
        }
        std::fs::write(&conf, text)?;
        let d = dir.path().to_string_lossy().into_owned();
        let port = spec.listen_port.unwrap_or(179).to_string();
        let args: Vec<String> = [
            "-p",
            &port,
            "-Z",
            "-S",
            "-f",
            &conf.to_string_lossy(),
            "-i",
            &format!("{d}/bgpd.pid"),
            "--vty_socket",
            &d,
            "-P",
            "0",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let daemon = Daemon::spawn(
            "bgpd",
            "ip",
            &program_in(ns, "/usr/lib/frr/bgpd", &args),
            &dir.path().join("stdout.log"),
            &[],
        )?;
        let frr = Frr {
            daemon,
            dir,
            neighbor: spec.neighbor,
        };
        wait_until("bgpd's vty socket", WAIT, || {
            Ok(frr.vtysh("show bgp summary").is_ok())
        })?;
        Ok(frr)
    }

    pub fn vtysh(&self, command: &str) -> anyhow::Result<String> {
        let dir = self.dir.path().to_string_lossy();
        Ok(run(
            "vtysh",
            &["--vty_socket", &dir, "-d", "bgpd", "-c", command],
        )?)
    }

    /// (state, prefixes received) of our session in one address family.
    pub fn summary(&self, family: &str) -> anyhow::Result<(String, u64)> {
        let json: serde_json::Value =
            serde_json::from_str(&self.vtysh(&format!("show bgp {family} unicast summary json"))?)?;
        let peer = &json["peers"][self.neighbor.to_string()];
        Ok((
            peer["state"].as_str().unwrap_or_default().to_owned(),
            peer["pfxRcd"].as_u64().unwrap_or(0),
        ))
    }

    pub fn wait_received(&self, family: &str, n: u64) -> anyhow::Result<()> {
        wait_until(&format!("bgpd to hold {n} {family} prefixes"), WAIT, || {
            Ok(self.summary(family)? == ("Established".to_owned(), n))
        })
        .with_context(|| format!("bgpd log:\n{}", self.log_tail()))
    }

    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("bgpd.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

pub struct Gobgp {
    pub daemon: Daemon,
    pub dir: tempfile::TempDir,
    ns: String,
    neighbor: IpAddr,
}

impl Gobgp {
    pub fn start(ns: &Netns, spec: &PeerSpec) -> anyhow::Result<Gobgp> {
        let dir = tempfile::Builder::new().prefix("gobgp-").tempdir()?;
        let conf = dir.path().join("gobgpd.toml");
        let mut text = format!(
            "[global.config]\n  as = {TOR_AS}\n  router-id = \"{}\"\n  port = 179\n\
             [[neighbors]]\n  [neighbors.config]\n    neighbor-address = \"{}\"\n    peer-as = {NODE_AS}\n",
            spec.router_id, spec.neighbor
        );
        if let Some(password) = &spec.password {
            let _ = writeln!(text, "    auth-password = \"{password}\"");
        }
        let _ = write!(
            text,
            "  [neighbors.timers.config]\n    connect-retry = 1\n    hold-time = {}\n    \
             keepalive-interval = {}\n  [neighbors.transport.config]\n    passive-mode = {}\n  \
             [neighbors.graceful-restart.config]\n    enabled = true\n",
            spec.hold_time,
            (spec.hold_time / 3).max(1),
            spec.passive
        );
        if let Some(hops) = spec.multihop {
            let _ = write!(
                text,
                "  [neighbors.ebgp-multihop.config]\n    enabled = true\n    multihop-ttl = {hops}\n"
            );
        }
        for family in ["ipv4-unicast", "ipv6-unicast"] {
            let _ = write!(
                text,
                "  [[neighbors.afi-safis]]\n    [neighbors.afi-safis.config]\n      afi-safi-name = \"{family}\"\n    \
                 [neighbors.afi-safis.mp-graceful-restart.config]\n      enabled = true\n"
            );
        }
        std::fs::write(&conf, text)?;
        let args: Vec<String> = [
            "-f",
            &conf.to_string_lossy(),
            "--api-hosts",
            "127.0.0.1:50051",
            "--pprof-disable",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let daemon = Daemon::spawn(
            "gobgpd",
            "ip",
            &program_in(ns, "gobgpd", &args),
            &dir.path().join("gobgpd.log"),
            &[],
        )?;
        let gobgp = Gobgp {
            daemon,
            dir,
            ns: ns.name().to_owned(),
            neighbor: spec.neighbor,
        };
        wait_until("gobgpd's API", WAIT, || Ok(gobgp.cli(&["global"]).is_ok()))?;
        Ok(gobgp)
    }

    pub fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut full = vec![
            "netns",
            "exec",
            &self.ns,
            "gobgp",
            "-u",
            "127.0.0.1",
            "-p",
            "50051",
        ];
        full.extend_from_slice(args);
        Ok(run("ip", &full)?)
    }

    pub fn established(&self) -> anyhow::Result<bool> {
        let out = self.cli(&["neighbor", &self.neighbor.to_string(), "-j"])?;
        let json: serde_json::Value = serde_json::from_str(&out)?;
        let state = &json["state"]["session_state"];
        Ok(state.as_str() == Some("established") || state.as_u64() == Some(6))
    }

    /// Prefixes in gobgpd's global RIB of `family` ("ipv4" / "ipv6").
    pub fn prefixes(&self, family: &str) -> anyhow::Result<Vec<String>> {
        let out = self.cli(&["global", "rib", "-a", family, "-j"])?;
        let json: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
        Ok(json
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default())
    }

    pub fn wait_count(&self, family: &str, n: usize) -> anyhow::Result<()> {
        wait_until(&format!("gobgpd to hold {n} {family} prefixes"), WAIT, || {
            Ok(self.prefixes(family)?.len() == n)
        })
        .with_context(|| format!("gobgpd log:\n{}", self.daemon.log_tail(15)))
    }
}
