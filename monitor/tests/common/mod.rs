//! kube-ovn-monitor run as a process by PID (testkit's `Daemon`), scraped over HTTP on loopback.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use kube_ovn_testkit::{Daemon, free_port, wait_until};

pub const WAIT: Duration = Duration::from_secs(20);

pub struct Monitor {
    daemon: Daemon,
    pub port: u16,
}

impl Monitor {
    /// Starts the binary with `args` and `env` (besides `METRICS_PORT`, a free port), its output
    /// in `log`.
    pub fn start(name: &str, args: &[String], env: &[(&str, String)], log: &Path) -> Result<Self> {
        let port = free_port()?;
        let port_s = port.to_string();
        let mut envs: Vec<(&str, &Path)> = vec![("METRICS_PORT", Path::new(&port_s))];
        envs.extend(env.iter().map(|(k, v)| (*k, Path::new(v.as_str()))));
        let daemon = Daemon::spawn(name, env!("CARGO_BIN_EXE_kube-ovn-monitor"), args, log, &envs)?;
        Ok(Self { daemon, port })
    }

    /// `GET path`: the status code and body.
    pub fn get(&self, path: &str) -> Result<(u16, String)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port))?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        let code = out
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("no HTTP status in {out:?}"))?;
        let body = out
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((code, body))
    }

    pub fn scrape(&self) -> Result<String> {
        let (code, body) = self.get("/metrics")?;
        anyhow::ensure!(code == 200, "/metrics answered {code}: {body}");
        Ok(body)
    }

    /// Waits until `/readyz` answers 200 (the first collection is in), failing early if the
    /// process died.
    pub fn wait_ready(&mut self) -> Result<()> {
        let port = self.port;
        let daemon = &mut self.daemon;
        wait_until(
            &format!("kube-ovn-monitor on port {port} to be ready"),
            WAIT,
            || {
                daemon.check_alive()?;
                let probe = Monitor::probe(port, "/readyz");
                Ok(probe.is_ok_and(|code| code == 200))
            },
        )
        .with_context(|| self.daemon.log_tail(30))
    }

    fn probe(port: u16, path: &str) -> Result<u16> {
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        write!(s, "GET {path} HTTP/1.0\r\n\r\n")?;
        let mut out = String::new();
        s.read_to_string(&mut out)?;
        out.split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .context("no status")
    }

    /// Waits until `check` holds for a scrape, naming `what` and showing the last scrape.
    pub fn wait_metrics(&self, what: &str, check: impl Fn(&str) -> bool) -> Result<String> {
        let mut last = String::new();
        let result = wait_until(what, WAIT, || {
            last = self.scrape()?;
            Ok(check(&last))
        });
        result
            .with_context(|| format!("last scrape:\n{last}\nmonitor log:\n{}", self.daemon.log_tail(20)))?;
        Ok(last)
    }
}

/// The value of the sample of `name` whose labels include every `(key, value)` of `labels`.
pub fn gauge(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (set, value) = rest.rsplit_once("} ")?;
        labels
            .iter()
            .all(|(k, v)| has(set, k, v))
            .then(|| value.trim().parse().ok())?
    })
}

/// How many samples of `name` there are.
pub fn samples(text: &str, name: &str) -> usize {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|r| r.starts_with('{')))
        .count()
}

/// A label's value in the first sample of `name` matching `labels`.
pub fn label(text: &str, name: &str, labels: &[(&str, &str)], key: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?.strip_prefix('{')?;
        let (set, _) = rest.rsplit_once("} ")?;
        if !labels.iter().all(|(k, v)| has(set, k, v)) {
            return None;
        }
        let start = if set.starts_with(&format!("{key}=\"")) {
            key.len() + 2
        } else {
            set.find(&format!(",{key}=\""))? + key.len() + 3
        };
        let end = set[start..].find('"')?;
        Some(set[start..start + end].to_owned())
    })
}

/// Whether a label set (the text between the braces) has `key="value"`.
fn has(set: &str, key: &str, value: &str) -> bool {
    let pair = format!("{key}=\"{value}\"");
    set.starts_with(&pair) || set.contains(&format!(",{pair}"))
}
