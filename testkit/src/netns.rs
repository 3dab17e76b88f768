//! Named network namespaces, for tests and for the lab, and code run inside them.
//!
//! A namespace here is a `/run/netns/NAME` bind mount made with `ip netns add`, so that `ip -n`,
//! `ip netns exec` and the daemons under test can all find it by name. The functions by name
//! ([`add_netns`], [`ip`], [`exec`], [`veth_pair`], [`del_netns`]) serve the lab, whose
//! namespaces outlive the process that made them; a test holds a [`Netns`], whose name carries
//! the PID and a per-process counter, so tests running side by side (threads of one test
//! binary, or several binaries) never share one, and which is deleted on drop.
//!
//! Rust code runs inside a namespace through [`Netns::run`], which is `dataplane::Netns::run`:
//! a fresh thread joins the namespace with `setns(2)`; a network namespace belongs to a thread,
//! so switching the caller's own thread would leak the namespace into whatever that thread (or
//! the test harness) does next.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::command::{CommandError, run};
use crate::wait::wait_until;

/// Whether `/run/netns/NAME` exists.
pub fn netns_exists(name: &str) -> bool {
    Path::new("/run/netns").join(name).exists()
}

/// `ip netns add NAME` with `lo` up (a fresh namespace's loopback is down, and a listener on
/// 127.0.0.1 inside it would be unreachable). If `lo` cannot be brought up, the namespace is
/// deleted again: nothing half-made is left.
pub fn add_netns(name: &str) -> Result<(), CommandError> {
    run("ip", &["netns", "add", name])?;
    if let Err(e) = ip(name, &["link", "set", "lo", "up"]) {
        let _ = run("ip", &["netns", "del", name]);
        return Err(e);
    }
    Ok(())
}

/// Deletes namespace `name` if it exists (its veths go with it, their peers too). Processes
/// still inside keep it alive until they exit, so stop them first.
pub fn del_netns(name: &str) -> Result<(), CommandError> {
    if !netns_exists(name) {
        return Ok(());
    }
    run("ip", &["netns", "del", name]).map(drop)
}

/// `ip -n NS args…`: the `ip` tool inside the namespace, without an extra exec.
pub fn ip(ns: &str, args: &[&str]) -> Result<String, CommandError> {
    let mut full = vec!["-n", ns];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// `program args…` inside `ns` (`ip netns exec`, which also gives it the namespace's `/sys`),
/// returning its stdout.
pub fn exec(ns: &str, program: &str, args: &[&str]) -> Result<String, CommandError> {
    let mut full = vec!["netns", "exec", ns, program];
    full.extend_from_slice(args);
    run("ip", &full)
}

/// A veth pair, `a_dev` in `a_ns` and `b_dev` in `b_ns`, both with `mtu`. One call creates
/// both ends directly in their namespaces, so no name ever exists in the host's namespace
/// (where a parallel test or another lab could hold it). The ends are left down.
pub fn veth_pair(a_ns: &str, a_dev: &str, b_ns: &str, b_dev: &str, mtu: u32) -> Result<(), CommandError> {
    let mtu = mtu.to_string();
    run(
        "ip",
        &[
            "link", "add", a_dev, "netns", a_ns, "mtu", &mtu, "type", "veth", "peer", "name", b_dev, "netns",
            b_ns, "mtu", &mtu,
        ],
    )
    .map(drop)
}

/// Makes `<prefix>-<pid>-<n>`, unique in this process and, through the PID, among processes.
fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{n}", std::process::id())
}

/// A named network namespace, deleted on drop.
pub struct Netns {
    name: String,
    /// False once deleted, so Drop does not delete it twice.
    live: bool,
}

impl Netns {
    /// `ip netns add <prefix>-<pid>-<n>`, with `lo` up (see [`add_netns`]).
    pub fn create(prefix: &str) -> anyhow::Result<Self> {
        let name = unique_name(prefix);
        add_netns(&name)?;
        Ok(Self { name, live: true })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `/run/netns/NAME`, the file `setns(2)` and `ip netns` use.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }

    /// Runs `args` (program first) with `ip netns exec NAME` and returns its stdout; a non-zero
    /// exit is an error that names the command and carries its stderr.
    pub fn exec(&self, args: &[&str]) -> anyhow::Result<String> {
        let (program, args) = args.split_first().context("Netns::exec needs a program")?;
        Ok(exec(&self.name, program, args)?)
    }

    /// `ip -n NAME args...`: the `ip` tool inside the namespace, without an extra exec.
    pub fn ip(&self, args: &[&str]) -> anyhow::Result<String> {
        Ok(ip(&self.name, args)?)
    }

    /// One ping with a 1 s deadline from inside the namespace.
    pub fn ping(&self, ip: impl Into<IpAddr>) -> bool {
        ping_from(&self.path(), ip)
    }

    /// Pings until one answer comes back, or fails after `timeout`. For links that need a moment
    /// (ARP, OVS learning, ovn-controller installing flows), not for links that are expected to be
    /// down.
    pub fn wait_ping(&self, ip: impl Into<IpAddr>, timeout: Duration) -> anyhow::Result<()> {
        wait_ping_from(&self.path(), ip, timeout)
    }

    /// The namespace opened (`dataplane`'s handle), to run code or open netlink sockets in it.
    pub fn handle(&self) -> anyhow::Result<kube_ovn_dataplane::Netns> {
        Ok(kube_ovn_dataplane::Netns::open(self.path())?)
    }

    /// Runs `f` inside the namespace on a dedicated thread ([`kube_ovn_dataplane::Netns::run`])
    /// and returns what it returns; a panic in `f` becomes an error. Sockets `f` opens stay in
    /// the namespace after it returns.
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> anyhow::Result<T> {
        // Opened on the caller's thread, so a missing namespace is reported before any thread
        // exists.
        let ns = self.handle()?;
        let name = &self.name;
        ns.run(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
            .with_context(|| format!("setns into netns {name}"))?
            .map_err(|panic| {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "(non-string panic)".into());
                anyhow::anyhow!("code run in netns {name} panicked: {msg}")
            })
    }

    /// Deletes the namespace now, reporting failure (Drop ignores it). Processes still inside
    /// keep it alive until they exit, so stop them first.
    pub fn delete(mut self) -> anyhow::Result<()> {
        self.live = false;
        Ok(del_netns(&self.name)?)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if self.live {
            let _ = del_netns(&self.name);
        }
    }
}

/// One ping with a 1 s deadline from inside the network namespace mounted at `netns` (ours, or
/// one a container runtime made for a sandbox).
pub fn ping_from(netns: &Path, ip: impl Into<IpAddr>) -> bool {
    let ip = ip.into().to_string();
    let net = format!("--net={}", netns.display());
    run("nsenter", &[&net, "ping", "-c1", "-W1", "-q", &ip]).is_ok()
}

/// [`Netns::wait_ping`] from the namespace mounted at `netns`.
pub fn wait_ping_from(netns: &Path, ip: impl Into<IpAddr>, timeout: Duration) -> anyhow::Result<()> {
    let ip = ip.into();
    // `ping` itself waits up to 1 s per try; the poll interval of wait_until adds little.
    wait_until(
        &format!("{ip} to answer ping from netns {}", netns.display()),
        timeout,
        || Ok(ping_from(netns, ip)),
    )
}

/// Byte `i` of the stream [`tcp_transfer`] sends. 251 is prime, so the pattern never lines up
/// with segment or buffer sizes and a lost, duplicated or reordered chunk shows as a mismatch.
fn pattern(i: usize) -> u8 {
    u8::try_from(i % 251).unwrap_or_default()
}

/// What is left of `deadline`, at least 1 ms: socket timeouts reject zero.
fn remaining(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
}

/// Sends `bytes` bytes of a fixed pattern over TCP from `client` to a listener on
/// `server_ip:port` inside `server`, and checks the server received exactly those bytes, in
/// order, then end of stream. Everything (listen, connect, transfer) must finish within
/// `timeout`; the error then says which side stopped where.
pub fn tcp_transfer(
    server: &Netns,
    server_ip: IpAddr,
    port: u16,
    client: &Netns,
    bytes: usize,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::new(server_ip, port);
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    // Set when the client could not connect, so the server stops waiting for it.
    let client_gone = AtomicBool::new(false);
    let gone = &client_gone;
    std::thread::scope(|s| {
        // `ready_tx` moves into the server, so it is dropped whenever the server returns.
        let serving = s.spawn(move || {
            server
                .run(move || serve(addr, bytes, deadline, &ready_tx, gone))?
                .with_context(|| format!("TCP server on {addr} in netns {}", server.name()))
        });
        // The server drops `ready_tx` on every early return, so this ends as soon as it failed.
        if ready_rx.recv_timeout(remaining(deadline)).is_err() {
            client_gone.store(true, Ordering::Relaxed);
            let err = match serving.join() {
                Ok(Err(e)) => e,
                Ok(Ok(_)) => anyhow::anyhow!("the server ended before it was ready"),
                Err(_) => anyhow::anyhow!("the server thread panicked"),
            };
            return Err(err.context(format!("the TCP listener on {addr} did not start")));
        }
        let sent = client
            .run(|| send(addr, bytes, deadline))
            .and_then(|r| r)
            .with_context(|| {
                format!(
                    "TCP client in netns {} sending {bytes} bytes to {addr}",
                    client.name()
                )
            });
        if sent.is_err() {
            client_gone.store(true, Ordering::Relaxed);
        }
        let received = serving
            .join()
            .map_err(|_| anyhow::anyhow!("the TCP server thread panicked"))?;
        match (received, sent) {
            (Ok(received), Ok(())) => {
                anyhow::ensure!(
                    received == bytes,
                    "server on {addr} received {received} bytes, expected {bytes}"
                );
                Ok(())
            }
            (Err(server), Ok(())) => Err(server),
            (Ok(_), Err(client)) => Err(client),
            // Both views matter: a reset seen by the client is explained by the server's
            // mismatch, a server timeout by the client's failed connect.
            (Err(server), Err(client)) => Err(anyhow::anyhow!("{client:#}; and the server: {server:#}")),
        }
    })
}

/// Listens on `addr`, signals `ready`, accepts one connection and reads it to the end, checking
/// every byte against [`pattern`]. Returns how many bytes came.
fn serve(
    addr: SocketAddr,
    bytes: usize,
    deadline: Instant,
    ready: &mpsc::Sender<()>,
    client_gone: &AtomicBool,
) -> anyhow::Result<usize> {
    let listener = TcpListener::bind(addr).with_context(|| format!("bind {addr}"))?;
    // std has no accept timeout: poll a non-blocking listener so a client that never connects
    // ends the test at the deadline instead of hanging it.
    listener.set_nonblocking(true)?;
    let _ = ready.send(());
    let (mut stream, peer) = loop {
        match listener.accept() {
            Ok(conn) => break conn,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                anyhow::ensure!(!client_gone.load(Ordering::Relaxed), "the client did not connect");
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "no client connected before the deadline"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e).context("accept"),
        }
    };
    stream.set_nonblocking(false)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut received = 0usize;
    loop {
        stream.set_read_timeout(Some(remaining(deadline)))?;
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("read from {peer} after {received} of {bytes} bytes"));
            }
        };
        if let Some(off) = (0..n).find(|&i| buf[i] != pattern(received + i)) {
            anyhow::bail!(
                "byte {} from {peer} is {:#04x}, expected {:#04x}",
                received + off,
                buf[off],
                pattern(received + off)
            );
        }
        received += n;
        anyhow::ensure!(received <= bytes, "{peer} sent more than {bytes} bytes");
    }
    Ok(received)
}

/// Connects to `addr`, writes `bytes` bytes of [`pattern`] and closes the sending side, so the
/// server sees the end of the stream.
fn send(addr: SocketAddr, bytes: usize, deadline: Instant) -> anyhow::Result<()> {
    let mut stream = TcpStream::connect_timeout(&addr, remaining(deadline))
        .with_context(|| format!("connect to {addr}"))?;
    let chunk: Vec<u8> = (0..bytes.min(64 * 1024)).map(pattern).collect();
    let mut sent = 0usize;
    while sent < bytes {
        stream.set_write_timeout(Some(remaining(deadline)))?;
        // Each write continues the pattern where the previous one stopped.
        let start = sent % 251;
        let len = (bytes - sent).min(chunk.len() - start);
        let n = match stream.write(&chunk[start..start + len]) {
            Ok(0) => anyhow::bail!("the connection closed after {sent} of {bytes} bytes"),
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(|| format!("write after {sent} of {bytes} bytes")),
        };
        sent += n;
    }
    stream.shutdown(Shutdown::Write).context("shutdown(write)")?;
    Ok(())
}
