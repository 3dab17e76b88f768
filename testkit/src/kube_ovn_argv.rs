//! Kube-OVN's own argument lists for its binaries, as its latest release's manifests start them
//! (Kube-OVN v1.16.2, tag `v1.16.2`, commit 12506be4b99b03dcd873618771b0a50fa9e666cd:
//! `dist/images/install.sh` with its default settings, and `yamls/speaker.yaml`), recorded as
//! data so that tests start our binaries with exactly them; and the checks those tests share.
//!
//! The wrapper scripts add their own first arguments: `start-controller.sh` passes
//! `--ovn-nb-addr=tcp:[…]:6641 --ovn-sb-addr=tcp:[…]:6642` (from the Services' environment),
//! `start-cniserver.sh` passes `--ovs-socket=/run/openvswitch/db.sock
//! --bind-socket=/run/openvswitch/kube-ovn-daemon.sock`. A test gives those with its fixtures'
//! addresses.

use std::collections::BTreeSet;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use crate::{Daemon, wait_until};

/// The release the lists come from.
pub const RELEASE: &str = "v1.16.2";
/// Its commit.
pub const COMMIT: &str = "12506be4b99b03dcd873618771b0a50fa9e666cd";

/// Where Kube-OVN's manifests put the log files (a hostPath); tests move it with
/// [`with_log_dir`].
pub const LOG_DIR: &str = "/var/log/kube-ovn";

/// `kube-ovn-controller`: install.sh's Deployment, the arguments after
/// `/kube-ovn/start-controller.sh`.
pub const CONTROLLER: &[&str] = &[
    "--default-cidr=10.16.0.0/16",
    "--default-gateway=10.16.0.1",
    "--default-gateway-check=true",
    "--default-logical-gateway=false",
    "--default-u2o-interconnection=false",
    "--default-exclude-ips=",
    "--node-switch-cidr=100.64.0.0/16",
    "--service-cluster-ip-range=10.96.0.0/12",
    "--network-type=geneve",
    "--default-interface-name=",
    "--default-exchange-link-name=false",
    "--default-vlan-id=100",
    "--ls-dnat-mod-dl-dst=true",
    "--ls-ct-skip-dst-lport-ips=true",
    "--pod-nic-type=veth-pair",
    "--enable-lb=true",
    "--enable-np=true",
    "--np-enforcement=standard",
    "--enable-eip-snat=true",
    "--enable-external-vpc=false",
    "--logtostderr=false",
    "--alsologtostderr=true",
    "--gc-interval=360",
    "--inspect-interval=20",
    "--log_file=/var/log/kube-ovn/kube-ovn-controller.log",
    "--log_file_max_size=200",
    "--enable-lb-svc=false",
    "--keep-vm-ip=true",
    "--enable-metrics=true",
    "--node-local-dns-ip=",
    "--skip-conntrack-dst-cidrs=",
    "--enable-ovn-ipsec=false",
    "--cert-manager-ipsec-cert=false",
    "--secure-serving=false",
    "--enable-anp=false",
    "--enable-dns-name-resolver=false",
    "--ovsdb-con-timeout=3",
    "--ovsdb-inactivity-timeout=10",
    "--enable-live-migration-optimize=true",
    "--enable-ovn-lb-prefer-local=false",
    "--image=docker.io/kubeovn/kube-ovn:v1.16.2",
];

/// `kube-ovn-daemon`: install.sh's `kube-ovn-cni` DaemonSet, container `cni-server`, the
/// arguments after `bash /kube-ovn/start-cniserver.sh`.
pub const DAEMON: &[&str] = &[
    "--enable-mirror=false",
    "--enable-arp-detect-ip-conflict=true",
    "--encap-checksum=true",
    "--service-cluster-ip-range=10.96.0.0/12",
    "--iface=",
    "--dpdk-tunnel-iface=br-phy",
    "--network-type=geneve",
    "--default-interface-name=",
    "--logtostderr=false",
    "--alsologtostderr=true",
    "--log_file=/var/log/kube-ovn/kube-ovn-cni.log",
    "--log_file_max_size=200",
    "--enable-metrics=true",
    "--kubelet-dir=/var/lib/kubelet",
    "--enable-tproxy=false",
    "--ovs-vsctl-concurrency=100",
    "--secure-serving=false",
    "--enable-ovn-ipsec=false",
    "--cert-manager-ipsec-cert=false",
    "--ovn-ipsec-cert-duration=63072000",
    "--cert-manager-issuer-name=kube-ovn",
    "--set-vxlan-tx-off=false",
];

/// `kube-ovn-speaker`: `yamls/speaker.yaml` (its example peer and AS numbers).
pub const SPEAKER: &[&str] = &[
    "--logtostderr=false",
    "--alsologtostderr=true",
    "--log_file=/var/log/kube-ovn/kube-ovn-speaker.log",
    "--log_file_max_size=200",
    "--neighbor-address=10.32.32.1",
    "--neighbor-as=65030",
    "--cluster-as=65000",
];

/// `kube-ovn-pinger`: install.sh's DaemonSet (for the pinger's own tests).
pub const PINGER: &[&str] = &[
    "--external-address=1.1.1.1",
    "--external-dns=kube-ovn.io.",
    "--logtostderr=false",
    "--alsologtostderr=true",
    "--log_file=/var/log/kube-ovn/kube-ovn-pinger.log",
    "--log_file_max_size=200",
    "--enable-metrics=true",
];

/// `kube-ovn-monitor`: install.sh's Deployment, the arguments after
/// `/kube-ovn/start-ovn-monitor.sh` (which adds none), for the monitor's own tests.
pub const MONITOR: &[&str] = &[
    "--secure-serving=false",
    "--log_file=/var/log/kube-ovn/kube-ovn-monitor.log",
    "--logtostderr=false",
    "--alsologtostderr=true",
    "--log_file_max_size=200",
    "--enable-metrics=true",
];

/// `argv` with [`LOG_DIR`] moved under `dir` (a test must not write the host's `/var/log`).
#[must_use]
pub fn with_log_dir(argv: &[&str], dir: &Path) -> Vec<String> {
    let moved = format!("{}{LOG_DIR}", dir.display());
    argv.iter().map(|a| a.replace(LOG_DIR, &moved)).collect()
}

/// The flag names (`--name`) of `argv`.
#[must_use]
pub fn flag_names(argv: &[&str]) -> BTreeSet<String> {
    argv.iter()
        .filter(|a| a.starts_with("--"))
        .map(|a| a.split('=').next().unwrap_or(a).to_owned())
        .collect()
}

/// The message of the one line in which a binary names the flags it accepted and ignored.
pub const IGNORED_MESSAGE: &str = "accepted and ignored";

/// The flags named by the "accepted and ignored" lines of `log` (JSON lines), one set per line.
#[must_use]
pub fn ignored_in_log(log: &str) -> Vec<BTreeSet<String>> {
    log.lines()
        .filter(|l| l.contains(IGNORED_MESSAGE))
        .map(|l| {
            let field = l
                .split_once("\"ignored\":\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map_or("", |(value, _)| value);
            field.split_whitespace().map(str::to_owned).collect()
        })
        .collect()
}

/// `GET path` over HTTP/1.0 on loopback: status code and body.
///
/// # Errors
/// When the connection or the answer fails.
pub fn http_get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let code = out.split_whitespace().nth(1).context("no status line")?.parse()?;
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Ok((code, body))
}

/// Waits (`timeout` at most) until `daemon` answers 200 on `/readyz` at `addr`; fails at once
/// if it exits, with its log's tail either way.
///
/// # Errors
/// When it exits or is not ready in time.
pub fn wait_readyz(daemon: &mut Daemon, addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let mut last = String::from("no answer");
    let mut exited = false;
    let waited = wait_until(&format!("{addr}/readyz to answer 200"), timeout, || {
        if !daemon.is_running() {
            // An exited process ends the wait too, and fails below.
            exited = true;
            return Ok(true);
        }
        match http_get(addr, "/readyz") {
            Ok((200, _)) => return Ok(true),
            Ok((code, body)) => last = format!("{code}: {body}"),
            Err(e) => last = e.to_string(),
        }
        Ok(false)
    });
    let waited = if exited {
        Err(anyhow::anyhow!("the process exited before it was ready"))
    } else {
        waited
    };
    waited.with_context(|| format!("last answer: {last}; its log:\n{}", daemon.log_tail(40)))
}

/// The flags of `argv` a binary does not parse (`known`: its long names and aliases, without
/// dashes): those it must name as ignored.
#[must_use]
pub fn expected_ignored(argv: &[&str], known: &BTreeSet<String>) -> BTreeSet<String> {
    flag_names(argv)
        .into_iter()
        .filter(|f| !known.contains(f.trim_start_matches('-')))
        .collect()
}

/// Checks what a binary started with a manifest's klog flags wrote: its stdout (`stdout_log`,
/// `--alsologtostderr=true`) and the log file (`--log_file`) both hold JSON lines, and each names
/// exactly `expected` as ignored in one line (no such line when `expected` is empty).
///
/// # Errors
/// What differs.
pub fn check_logs(stdout_log: &str, log_file: &Path, expected: &BTreeSet<String>) -> anyhow::Result<()> {
    let file = std::fs::read_to_string(log_file)
        .with_context(|| format!("the --log_file {} was not written", log_file.display()))?;
    for (what, text) in [("stdout", stdout_log), ("--log_file", file.as_str())] {
        let json_lines = text.lines().filter(|l| l.starts_with('{')).count();
        if json_lines == 0 {
            anyhow::bail!("no JSON line on {what}:\n{text}");
        }
        let named = ignored_in_log(text);
        // Nothing to ignore: no such line at all.
        let want: Vec<BTreeSet<String>> = if expected.is_empty() {
            vec![]
        } else {
            vec![expected.clone()]
        };
        if named != want {
            anyhow::bail!(
                "{what}: want one line naming {expected:?} as ignored, got {named:?}; log:\n{text}"
            );
        }
    }
    Ok(())
}

/// Starts `program` as a release manifest would (`args`, the pod's environment `pod_envs`), its
/// stdout in `dir/stdout.log`, and waits (`timeout` at most) until `/readyz` on
/// 127.0.0.1:`port` answers 200.
///
/// # Errors
/// When it cannot be spawned, exits, or is not ready in time (with its log's tail).
pub fn start_as_released(
    name: &str,
    program: &str,
    args: &[String],
    pod_envs: &[(&str, &str)],
    dir: &Path,
    port: u16,
    timeout: Duration,
) -> anyhow::Result<Daemon> {
    let envs: Vec<(&str, &Path)> = pod_envs.iter().map(|(k, v)| (*k, Path::new(*v))).collect();
    let mut daemon = Daemon::spawn(name, program, args, &dir.join("stdout.log"), &envs)?;
    wait_readyz(&mut daemon, ([127, 0, 0, 1], port).into(), timeout)?;
    Ok(daemon)
}

/// Where a release argv's `--log_file=/var/log/kube-ovn/<file>` writes once moved under `dir`
/// by [`with_log_dir`].
#[must_use]
pub fn moved_log_file(dir: &Path, file: &str) -> PathBuf {
    dir.join(LOG_DIR.trim_start_matches('/')).join(file)
}
