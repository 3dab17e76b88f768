//! BIRD's control socket spoken directly (no `birdc` process per question), for benches that
//! poll it often.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

/// BIRD's control socket: a line per request, replies end at a line `NNNN ` (code and space).
pub struct BirdCtl {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl BirdCtl {
    pub fn connect(path: &PathBuf) -> anyhow::Result<Self> {
        let stream = UnixStream::connect(path)?;
        let mut ctl = BirdCtl {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        };
        ctl.read_reply()?; // greeting
        Ok(ctl)
    }

    fn read_reply(&mut self) -> anyhow::Result<String> {
        let mut out = String::new();
        loop {
            let mut line = String::new();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("BIRD closed its control socket");
            }
            let done = line.len() > 5
                && line.as_bytes()[..4].iter().all(u8::is_ascii_digit)
                && line.as_bytes()[4] == b' ';
            out.push_str(&line);
            if done {
                return Ok(out);
            }
        }
    }

    pub fn ask(&mut self, command: &str) -> anyhow::Result<String> {
        writeln!(self.writer, "{command}")?;
        self.read_reply()
    }

    /// Polls every 10 ms; returns the time from the first poll that saw Established to the
    /// first that saw `n` routes imported.
    pub fn time_to_import(&mut self, protocol: &str, n: u32) -> anyhow::Result<Duration> {
        let deadline = Instant::now() + Duration::from_mins(10);
        let mut established = None;
        while Instant::now() < deadline {
            let reply = self.ask(&format!("show protocols all {protocol}"))?;
            let now = Instant::now();
            if established.is_none() && reply.contains("Established") {
                established = Some(now);
            }
            let imported: u32 = reply
                .lines()
                .find_map(|l| l.trim().strip_prefix("Routes:"))
                .and_then(|r| r.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            if let Some(at) = established
                && imported >= n
            {
                return Ok(now - at);
            }
            // BIRD's control socket has no "tell me when" for imports: poll it, until the
            // deadline. The 10 ms step bounds the bench's timing error.
            std::thread::sleep(Duration::from_millis(10));
        }
        bail!("BIRD protocol {protocol} did not import {n} routes in time")
    }
}
