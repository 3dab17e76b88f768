//! Transfer benchmark (bgp.md §3.2 method): N IPv4 /32s to a BIRD 2 receiver on loopback, our
//! speaker side by side with gobgpd holding the same routes, in one run; and the RSS of both
//! senders holding 100,000 routes.
//!
//! Everything runs in a network namespace the benchmark creates (fresh `lo`, so port 179 is
//! free): BIRD on 127.0.0.2 with two protocols, `speaker` (us, 127.0.0.3) and `gobgp` (gobgpd,
//! 127.0.0.6), both disabled at start. Each sender is loaded first and passive; then BIRD's
//! protocol is enabled, BIRD connects, and the time from BIRD seeing Established to BIRD
//! having imported all N routes is measured by polling BIRD's control socket every 10 ms
//! directly (no process spawn). Both sides are measured the same way, from BIRD's view.
//!
//! Our speaker runs as a child process (this binary with `KOVN_BENCH_CHILD=N`), so its RSS is a
//! speaker's and not the harness's. gobgpd is loaded with `gobgp mrt inject global` from an MRT
//! TABLE_DUMP_V2 file written here.
//!
//! `cargo bench -p kube-ovn-speaker --bench bgp_transfer` (root; `-- quick` for 100k once).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use kube_ovn_speaker::bgp::fsm::SessionConfig;
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::bgp::wire::Family;
use kube_ovn_speaker::driver::{PeerConfig, Speaker, SpeakerConfig};
use kube_ovn_testkit::{Daemon, Netns, run, wait_until};

const BIRD: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
const OURS: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
const GOBGP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 6);
/// A next hop BIRD and gobgpd accept (gobgpd refuses loopback next hops, bgp.md §2.3).
const NEXT_HOP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 3);

#[path = "../tests/common/birdctl.rs"]
mod birdctl;

use birdctl::BirdCtl;

fn main() -> anyhow::Result<()> {
    if let Ok(n) = std::env::var("KOVN_BENCH_CHILD") {
        return child(n.parse()?);
    }
    let quick = std::env::args().any(|a| a == "quick");
    let plan: &[(u32, usize)] = if quick {
        &[(100_000, 1)]
    } else {
        &[(100_000, 3), (1_000_000, 1)]
    };
    let work = tempfile::Builder::new().prefix("bgp-bench-").tempdir()?;
    println!("BGP transfer to BIRD on loopback (Established at BIRD -> all routes imported)");
    println!(
        "{:>9} {:>4} {:>12} {:>12} {:>8}",
        "routes", "run", "ours ms", "gobgpd ms", "ratio"
    );
    let mut rss = None;
    for &(n, runs) in plan {
        let mrt = work.path().join(format!("{n}.mrt"));
        write_mrt(&mrt, n)?;
        for run_no in 1..=runs {
            let result = one_run(work.path(), &mrt, n)?;
            println!(
                "{n:>9} {run_no:>4} {:>12.1} {:>12.1} {:>8.3}",
                ms(result.ours),
                ms(result.gobgp),
                ms(result.ours) / ms(result.gobgp)
            );
            if n == 100_000 && rss.is_none() {
                rss = Some((result.ours_rss_kib, result.gobgp_rss_kib));
            }
        }
    }
    if let Some((ours, gobgp)) = rss {
        #[allow(clippy::cast_precision_loss, reason = "KiB counts are far below 2^52")]
        let ratio = ours as f64 / gobgp as f64;
        println!("RSS holding 100000 routes: ours {ours} KiB, gobgpd {gobgp} KiB, ratio {ratio:.3}");
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

struct RunResult {
    ours: Duration,
    gobgp: Duration,
    ours_rss_kib: u64,
    gobgp_rss_kib: u64,
}

fn one_run(work: &Path, mrt: &Path, n: u32) -> anyhow::Result<RunResult> {
    let ns = Netns::create("bgpbench")?;
    let dir = tempfile::Builder::new().prefix("run-").tempdir_in(work)?;
    let bird = start_bird(&ns, dir.path())?;
    let mut ctl = BirdCtl::connect(&dir.path().join("bird.ctl"))?;

    // Ours: a child process loads N routes, passive behind a listener on 127.0.0.3:179.
    let exe = std::env::current_exe()?;
    let child_log = dir.path().join("speaker.log");
    let args: Vec<String> = ["netns", "exec", ns.name(), &exe.to_string_lossy()]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let n_text = n.to_string();
    let mut speaker = Daemon::spawn(
        "speaker",
        "ip",
        &args,
        &child_log,
        &[("KOVN_BENCH_CHILD", Path::new(&n_text))],
    )?;
    wait_until("our speaker to load its routes", Duration::from_mins(2), || {
        speaker.check_alive()?;
        Ok(std::fs::read_to_string(&child_log)?.contains("loaded"))
    })?;
    ctl.ask("enable speaker")?;
    let ours = ctl.time_to_import("speaker", n)?;
    let ours_rss_kib = rss_kib(speaker.pid().unwrap_or_default())?;
    if std::env::var_os("KOVN_BENCH_VERBOSE").is_some() {
        let log = std::fs::read_to_string(&child_log)?;
        log.lines()
            .filter(|l| l.contains("established") || l.contains("sending") || l.contains("state"))
            .for_each(|l| println!("  speaker: {l}"));
    }

    // gobgpd: routes injected into its global RIB first, passive until BIRD connects.
    let mut gobgpd = start_gobgpd(&ns, dir.path())?;
    let cli = |args: &[&str]| {
        let mut full = vec![
            "netns",
            "exec",
            ns.name(),
            "gobgp",
            "-u",
            "127.0.0.1",
            "-p",
            "50062",
        ];
        full.extend_from_slice(args);
        run("ip", &full)
    };
    wait_until("gobgpd's API", Duration::from_secs(20), || {
        Ok(cli(&["global"]).is_ok())
    })?;
    cli(&["mrt", "inject", "global", &mrt.to_string_lossy()])?;
    wait_until("gobgpd to hold all routes", Duration::from_mins(10), || {
        gobgpd.check_alive()?;
        Ok(cli(&["global", "rib", "summary", "-a", "ipv4"])?.contains(&format!("Destination: {n},")))
    })?;
    ctl.ask("enable gobgp")?;
    let gobgp = ctl.time_to_import("gobgp", n)?;
    let gobgp_rss_kib = rss_kib(gobgpd.pid().unwrap_or_default())?;

    speaker.stop();
    gobgpd.stop();
    drop(bird);
    ns.delete()?;
    Ok(RunResult {
        ours,
        gobgp,
        ours_rss_kib,
        gobgp_rss_kib,
    })
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("VmRSS")
}

fn start_bird(ns: &Netns, dir: &Path) -> anyhow::Result<Daemon> {
    let conf = dir.join("bird.conf");
    let mut text = format!(
        "router id {BIRD};\nprotocol device {{ scan time 10; }}\n\
         template bgp sender {{\n  local {BIRD} as 65000;\n  strict bind yes;\n  multihop 2;\n  \
         hold time 90;\n  connect delay time 1;\n  connect retry time 1;\n  disabled;\n  \
         ipv4 {{ import all; export none; }};\n}}\n"
    );
    let _ = writeln!(
        text,
        "protocol bgp speaker from sender {{ neighbor {OURS} as 65001; }}"
    );
    let _ = writeln!(
        text,
        "protocol bgp gobgp from sender {{ neighbor {GOBGP} as 65002; }}"
    );
    std::fs::write(&conf, text)?;
    let ctl = dir.join("bird.ctl");
    let args: Vec<String> = [
        "netns",
        "exec",
        ns.name(),
        "bird",
        "-f",
        "-c",
        &conf.to_string_lossy(),
        "-s",
        &ctl.to_string_lossy(),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let bird = Daemon::spawn("bird", "ip", &args, &dir.join("bird.log"), &[])?;
    wait_until("BIRD's control socket", Duration::from_secs(20), || {
        Ok(UnixStream::connect(&ctl).is_ok())
    })?;
    Ok(bird)
}

fn start_gobgpd(ns: &Netns, dir: &Path) -> anyhow::Result<Daemon> {
    let conf = dir.join("gobgpd.toml");
    std::fs::write(
        &conf,
        format!(
            "[global.config]\n  as = 65002\n  router-id = \"{GOBGP}\"\n  port = 179\n  \
             local-address-list = [\"{GOBGP}\"]\n[[neighbors]]\n  [neighbors.config]\n    \
             neighbor-address = \"{BIRD}\"\n    peer-as = 65000\n  [neighbors.transport.config]\n    \
             local-address = \"{GOBGP}\"\n    passive-mode = true\n  [neighbors.ebgp-multihop.config]\n    \
             enabled = true\n    multihop-ttl = 2\n  [[neighbors.afi-safis]]\n    \
             [neighbors.afi-safis.config]\n      afi-safi-name = \"ipv4-unicast\"\n"
        ),
    )?;
    let args: Vec<String> = [
        "netns",
        "exec",
        ns.name(),
        "gobgpd",
        "-f",
        &conf.to_string_lossy(),
        "--api-hosts",
        "127.0.0.1:50062",
        "--pprof-disable",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    Daemon::spawn("gobgpd", "ip", &args, &dir.join("gobgpd.log"), &[])
}

/// An MRT TABLE_DUMP_V2 file (RFC 6396 §4.3): a PEER_INDEX_TABLE, then one RIB_IPV4_UNICAST
/// record per /32 (10.0.0.0 upward) with ORIGIN, an empty AS_PATH and NEXT_HOP. 2,000 copies of
/// the first routes follow: `gobgp mrt inject` 3.10 drops its last partial batch (bgp.md §2.3).
fn write_mrt(path: &Path, n: u32) -> anyhow::Result<()> {
    let mut out = Vec::with_capacity(usize::try_from(n)? * 40);
    let record = |out: &mut Vec<u8>, subtype: u16, body: &[u8]| {
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&13u16.to_be_bytes());
        out.extend_from_slice(&subtype.to_be_bytes());
        out.extend_from_slice(&u32::try_from(body.len()).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(body);
    };
    let mut peers = Vec::new();
    peers.extend_from_slice(&GOBGP.octets()); // collector BGP ID
    peers.extend_from_slice(&0u16.to_be_bytes()); // view name length
    peers.extend_from_slice(&1u16.to_be_bytes()); // peer count
    peers.push(0x02); // IPv4 address, 4-octet AS
    peers.extend_from_slice(&GOBGP.octets());
    peers.extend_from_slice(&GOBGP.octets());
    peers.extend_from_slice(&65002u32.to_be_bytes());
    record(&mut out, 1, &peers);
    let attributes: Vec<u8> = [
        &[0x40, 1, 1, 0][..], // ORIGIN IGP
        &[0x40, 2, 0][..],    // AS_PATH, empty: originated
        &[0x40, 3, 4][..],    // NEXT_HOP
        &NEXT_HOP.octets()[..],
    ]
    .concat();
    let total = n + n.min(2000);
    for seq in 0..total {
        let i = if seq < n { seq } else { seq - n };
        let mut body = Vec::with_capacity(32);
        body.extend_from_slice(&seq.to_be_bytes());
        body.push(32);
        body.extend_from_slice(&Ipv4Addr::from(0x0a00_0000 + i).octets());
        body.extend_from_slice(&1u16.to_be_bytes()); // entry count
        body.extend_from_slice(&0u16.to_be_bytes()); // peer index
        body.extend_from_slice(&0u32.to_be_bytes()); // originated time
        body.extend_from_slice(&u16::try_from(attributes.len())?.to_be_bytes());
        body.extend_from_slice(&attributes);
        record(&mut out, 2, &body);
    }
    std::fs::write(path, out)?;
    Ok(())
}

/// The speaker side, in its own process: N routes loaded into a passive peer, then wait to be
/// killed.
fn child(n: u32) -> anyhow::Result<()> {
    // The driver's own timestamps (established, sending) go to the child's log.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("kube_ovn_speaker=debug"))
        .with_ansi(false)
        .try_init();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let speaker = Speaker::new(SpeakerConfig {
            listen: vec![SocketAddr::new(IpAddr::V4(OURS), 179)],
            allowed_sources: None,
        })?;
        let session = SessionConfig {
            local_as: 65001,
            peer_as: 65000,
            router_id: OURS,
            hold_time: 90,
            connect_retry: Duration::from_secs(1),
            passive: true,
            families: vec![Family::Ipv4Unicast],
            graceful_restart: None,
            restarting: false,
            extended_next_hop: false,
        };
        let peer = speaker.add_peer(PeerConfig {
            local_address: Some(IpAddr::V4(OURS)),
            ttl: Some(2),
            ..PeerConfig::new(IpAddr::V4(BIRD), session)
        })?;
        peer.set_local_addresses(Some(NEXT_HOP), None)?;
        // In batches, as the Kubernetes side hands over what its informers deliver; one
        // command of a million routes would hold ~100 MB of attributes at once.
        for start in (0..n).step_by(10_000) {
            peer.announce_many((start..n.min(start + 10_000)).map(|i| {
                let net = ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a00_0000 + i), 32).unwrap_or_default();
                (net.into(), RouteAttributes::default())
            }))?;
        }
        peer.set_ready()?;
        let n = usize::try_from(n)?;
        peer.wait_for("routes loaded", Duration::from_mins(2), |s| {
            s.prefixes_desired == n
        })
        .await?;
        println!("loaded {n} at {:?}", SystemTime::now());
        let established = peer
            .wait_for("all sent", Duration::from_hours(1), |s| {
                s.prefixes_sent == n && s.out_queue_bytes == 0
            })
            .await?;
        println!("sent: {:?}", established.messages_sent);
        std::future::pending::<()>().await;
        anyhow::Ok(())
    })
}
