//! Our BFD against real peers, BIRD 2 (`protocol bfd` with `neighbor` statements) and FRR's
//! `bfdd`, each run by hand in a network namespace the test creates and joined to ours by a
//! veth pair, over IPv4 and IPv6 at once. Shown for each: both sessions come Up and the peer
//! sees them Up; when the peer freezes (SIGSTOP of its PID) ours go Down with "control
//! detection time expired" (the time it took is reported); after SIGCONT they come back Up.
//!
//! Needs root (network namespaces) and the `bird2` and `frr` packages
//! (`scripts/install-deps.sh`); without them the tests fail, they never skip.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube_ovn_speaker::bfd::{Bfd, BfdHandle, Diagnostic, State, Status, Timers};
use kube_ovn_testkit::{Daemon, Netns, run, wait_until};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const US_V4: &str = "10.51.0.2";
const PEER_V4: &str = "10.51.0.1";
const US_V6: &str = "fd51::2";
const PEER_V6: &str = "fd51::1";

fn addr(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn timers() -> Timers {
    Timers {
        desired_min_tx: Duration::from_millis(100),
        required_min_rx: Duration::from_millis(100),
        detect_mult: 3,
    }
}

/// 3 × max(our 100 ms RX, the peer's 100 ms TX).
const DETECTION: Duration = Duration::from_millis(300);

fn require(program: &str, package: &str) {
    let found = if program.contains('/') {
        Path::new(program).exists()
    } else {
        std::env::var_os("PATH")
            .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).exists()))
    };
    assert!(
        found,
        "{program} not found: install {package} (scripts/install-deps.sh)"
    );
}

/// Two namespaces joined by a veth pair, both families on it (IPv6 without DAD so the
/// addresses are usable at once).
struct Link {
    us: Netns,
    peer: Netns,
    dir: tempfile::TempDir,
}

fn link(prefix: &str) -> anyhow::Result<Link> {
    let us = Netns::create(&format!("{prefix}-us")).context("creating network namespaces needs root")?;
    let peer = Netns::create(&format!("{prefix}-peer"))?;
    run(
        "ip",
        &[
            "link",
            "add",
            "bfd0",
            "netns",
            us.name(),
            "type",
            "veth",
            "peer",
            "name",
            "bfd1",
            "netns",
            peer.name(),
        ],
    )?;
    for (ns, dev, v4, v6) in [(&us, "bfd0", US_V4, US_V6), (&peer, "bfd1", PEER_V4, PEER_V6)] {
        ns.ip(&["addr", "add", &format!("{v4}/24"), "dev", dev])?;
        ns.ip(&["addr", "add", &format!("{v6}/64"), "dev", dev, "nodad"])?;
        ns.ip(&["link", "set", dev, "up"])?;
    }
    us.wait_ping(addr(PEER_V4), Duration::from_secs(5))?;
    let dir = tempfile::tempdir()?;
    // FRR drops to its own user; it must be able to write its sockets and pid file here.
    run("chmod", &["0777", &dir.path().display().to_string()])?;
    Ok(Link { us, peer, dir })
}

/// A BFD peer daemon and how to ask it for its view of the sessions.
struct Peer {
    daemon: Daemon,
    show: Box<dyn Fn() -> anyhow::Result<String> + Send + Sync>,
}

impl Peer {
    fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.daemon.pid().unwrap()).unwrap())
    }

    /// Both our sessions are shown Up by the peer itself.
    fn sees_up(&self) -> anyhow::Result<bool> {
        let out = (self.show)()?;
        Ok([US_V4, US_V6].iter().all(|us| {
            out.lines()
                .any(|l| l.contains(us) && l.to_ascii_lowercase().split_whitespace().any(|w| w == "up"))
        }))
    }
}

fn bird(link: &Link) -> anyhow::Result<Peer> {
    require("bird", "bird2");
    require("birdc", "bird2");
    let dir = link.dir.path();
    let conf = dir.join("bird.conf");
    let sock = dir.join("bird.ctl");
    std::fs::write(
        &conf,
        format!(
            "router id {PEER_V4};\n\
             protocol device {{ }}\n\
             protocol bfd {{\n\
             \x20 interface \"*\" {{ min rx interval 100 ms; min tx interval 100 ms; multiplier 3; }};\n\
             \x20 neighbor {US_V4} local {PEER_V4};\n\
             \x20 neighbor {US_V6} local {PEER_V6};\n\
             }}\n"
        ),
    )?;
    let args: Vec<String> = ["netns", "exec", link.peer.name(), "bird", "-f", "-c"]
        .into_iter()
        .map(String::from)
        .chain([
            conf.display().to_string(),
            "-s".into(),
            sock.display().to_string(),
        ])
        .chain(["-P".into(), dir.join("bird.pid").display().to_string()])
        .collect();
    let mut daemon = Daemon::spawn("bird", "ip", &args, &dir.join("bird.log"), &[])?;
    wait_until("BIRD's control socket", Duration::from_secs(10), || {
        daemon.check_alive()?;
        Ok(sock.exists())
    })?;
    let sock = sock.display().to_string();
    Ok(Peer {
        daemon,
        show: Box::new(move || Ok(run("birdc", &["-s", &sock, "show", "bfd", "sessions"])?)),
    })
}

fn frr(link: &Link) -> anyhow::Result<Peer> {
    let bfdd = "/usr/lib/frr/bfdd";
    require(bfdd, "frr");
    require("vtysh", "frr");
    let dir = link.dir.path();
    let conf = dir.join("bfdd.conf");
    let peer = |us: &str, local: &str| {
        format!(
            " peer {us} local-address {local}\n  receive-interval 100\n  transmit-interval 100\n  \
             detect-multiplier 3\n !\n"
        )
    };
    let text = format!("bfd\n{}{}!\n", peer(US_V4, PEER_V4), peer(US_V6, PEER_V6));
    std::fs::write(&conf, text)?;
    let path = |name: &str| dir.join(name).display().to_string();
    // Foreground (no -d), so the PID we hold is bfdd's; its own sockets and pid file live in
    // the test directory, and no zebra is needed for single-hop sessions with a local address.
    let args: Vec<String> = vec![
        "netns".into(),
        "exec".into(),
        link.peer.name().into(),
        bfdd.into(),
        "-f".into(),
        path("bfdd.conf"),
        "-i".into(),
        path("bfdd.pid"),
        "--vty_socket".into(),
        path(""),
        "-z".into(),
        path("zserv.api"),
        "--bfdctl".into(),
        path("bfdd.sock"),
        "--log".into(),
        "stdout".into(),
    ];
    let mut daemon = Daemon::spawn("bfdd", "ip", &args, &dir.join("bfdd.log"), &[])?;
    let vty = dir.join("bfdd.vty");
    wait_until("bfdd's vty socket", Duration::from_secs(10), || {
        daemon.check_alive()?;
        Ok(vty.exists())
    })?;
    let vty_dir = path("");
    Ok(Peer {
        daemon,
        show: Box::new(move || {
            Ok(run(
                "vtysh",
                &[
                    "--vty_socket",
                    &vty_dir,
                    "-d",
                    "bfdd",
                    "-c",
                    "show bfd peers brief",
                ],
            )?)
        }),
    })
}

async fn wait_state(h: &BfdHandle, want: State, within: Duration) -> anyhow::Result<Status> {
    wait_status(h, &format!("{want:?}"), within, |s| s.state == want).await
}

async fn wait_status(
    h: &BfdHandle,
    what: &str,
    within: Duration,
    check: impl Fn(&Status) -> bool,
) -> anyhow::Result<Status> {
    let mut rx = h.subscribe();
    match tokio::time::timeout(within, rx.wait_for(|s| check(s))).await {
        Ok(Ok(s)) => Ok(*s),
        Ok(Err(_)) => bail!("session to {} ended", h.peer()),
        Err(_) => bail!(
            "session to {} not {what} within {within:?}: {:?}",
            h.peer(),
            h.status()
        ),
    }
}

/// The scenario of the module doc against `peer`, our side running inside `link.us`.
fn up_freeze_detect_resume(link: &Link, peer: &Peer) -> anyhow::Result<()> {
    link.us.run(|| -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async {
            let bfd = Bfd::new();
            let sessions = [
                bfd.add_session(addr(PEER_V4), addr(US_V4), timers())?,
                bfd.add_session(addr(PEER_V6), addr(US_V6), timers())?,
            ];
            for h in &sessions {
                wait_state(h, State::Up, Duration::from_secs(15)).await?;
            }
            // The peer agrees, asked through its own CLI: it has nothing to await, so it is
            // polled (every 100 ms, at most 10 s) with the runtime's sleep, which lets the BFD
            // tasks run on this single-threaded runtime meanwhile.
            let deadline = Instant::now() + Duration::from_secs(10);
            while !peer.sees_up()? {
                if Instant::now() > deadline {
                    bail!("the peer does not show both sessions Up:\n{}", (peer.show)()?);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            eprintln!("the peer's view:\n{}", (peer.show)()?);
            // Our Poll to 100 ms answered, and the peer's TX at 100 ms: the 300 ms detection
            // time is in force before the peer is frozen.
            for h in &sessions {
                wait_status(h, "the fast rate both ways", Duration::from_secs(10), |s| {
                    s.state == State::Up
                        && !s.poll_in_progress
                        && s.tx_interval == Some(Duration::from_millis(100))
                        && s.detection_time == Some(DETECTION)
                })
                .await?;
            }
            let before: Vec<Status> = sessions.iter().map(BfdHandle::status).collect();

            kill(peer.pid(), Signal::SIGSTOP)?;
            let frozen = Instant::now();
            for (h, before) in sessions.iter().zip(&before) {
                let after = wait_state(h, State::Down, Duration::from_secs(5)).await?;
                let took = frozen.elapsed();
                eprintln!("{}: Down {took:?} after the peer froze", h.peer());
                assert_eq!(
                    after.diag,
                    Diagnostic::ControlDetectionTimeExpired,
                    "{}",
                    h.peer()
                );
                // The detection timer fired (the diagnostic says so); the time it took is reported
                // above, not asserted (a loaded machine delays wake-ups; the session's timing is
                // unit-tested on a virtual clock).
                assert!(after.is_failure_after(before), "{}: {after:?}", h.peer());
            }

            kill(peer.pid(), Signal::SIGCONT)?;
            for h in &sessions {
                wait_state(h, State::Up, Duration::from_secs(15)).await?;
            }
            Ok(())
        })
    })?
}

#[test]
fn bird_session_up_down_on_freeze_up_again() -> anyhow::Result<()> {
    let link = link("bfdbird")?;
    let mut peer = bird(&link)?;
    let result = up_freeze_detect_resume(&link, &peer);
    let _ = kill(peer.pid(), Signal::SIGCONT);
    peer.daemon.check_alive()?;
    peer.daemon.stop();
    result.with_context(|| format!("BIRD log:\n{}", peer.daemon.log_tail(30)))
}

#[test]
fn frr_bfdd_session_up_down_on_freeze_up_again() -> anyhow::Result<()> {
    let link = link("bfdfrr")?;
    let mut peer = frr(&link)?;
    let result = up_freeze_detect_resume(&link, &peer);
    let _ = kill(peer.pid(), Signal::SIGCONT);
    peer.daemon.check_alive()?;
    peer.daemon.stop();
    result.with_context(|| format!("bfdd log:\n{}", peer.daemon.log_tail(30)))
}
