//! OVN central as Kube-OVN's ovn-central runs it: NB and SB `ovsdb-server`s and `ovn-northd`,
//! and `ovn-trace` as a test oracle for what the logical network does with a packet.

use std::path::Path;
use std::time::Duration;

use crate::daemon::Daemon;
use crate::ovsdb::{NB_SCHEMA, OvsdbServer, SB_SCHEMA};
use crate::run;
use crate::wait::wait_until;

pub struct OvnCentral {
    pub nb: OvsdbServer,
    pub sb: OvsdbServer,
    northd: Option<Daemon>,
}

impl OvnCentral {
    /// NB and SB (standalone databases) and `ovn-northd` between them.
    pub fn start() -> anyhow::Result<Self> {
        let nb = OvsdbServer::standalone(NB_SCHEMA)?;
        let sb = OvsdbServer::standalone(SB_SCHEMA)?;
        nb.nbctl(&["init"])?;
        run("ovn-sbctl", &[&format!("--db={}", sb.remote()), "init"])?;
        let mut central = Self { nb, sb, northd: None };
        central.start_northd()?;
        Ok(central)
    }

    /// Starts `ovn-northd` (after [`OvnCentral::stop_northd`]) and waits until it processed the
    /// northbound database (it creates a missing NB_Global row first).
    pub fn start_northd(&mut self) -> anyhow::Result<()> {
        let dir = self.nb.dir().to_owned();
        let args = vec![
            format!("--ovnnb-db={}", self.nb.remote()),
            format!("--ovnsb-db={}", self.sb.remote()),
            format!("--unixctl={}", dir.join("northd.ctl").display()),
            "-vconsole:info".into(),
        ];
        let envs = [
            ("OVS_RUNDIR", dir.as_path()),
            ("OVS_DBDIR", dir.as_path()),
            ("OVS_LOGDIR", dir.as_path()),
        ];
        let mut northd = Daemon::spawn("ovn-northd", "ovn-northd", &args, &dir.join("northd.log"), &envs)?;
        wait_until(
            "ovn-northd to process the northbound database",
            Duration::from_secs(20),
            || {
                northd.check_alive()?;
                Ok(self.nb.nbctl(&["--wait=sb", "--timeout=5", "sync"]).is_ok())
            },
        )?;
        self.northd = Some(northd);
        Ok(())
    }

    /// Stops `ovn-northd` (by its PID), as an ovn-central that has not started it yet.
    pub fn stop_northd(&mut self) {
        if let Some(mut northd) = self.northd.take() {
            northd.stop();
        }
    }

    pub fn nb_remote(&self) -> String {
        self.nb.remote()
    }

    pub fn sb_remote(&self) -> String {
        self.sb.remote()
    }

    /// `ovn-nbctl` against NB.
    pub fn nbctl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.nb.nbctl(args)
    }

    /// `ovn-sbctl` against SB.
    pub fn sbctl(&self, args: &[&str]) -> anyhow::Result<String> {
        let db = format!("--db={}", self.sb.remote());
        let mut full = vec![db.as_str(), "--timeout=20"];
        full.extend_from_slice(args);
        Ok(run("ovn-sbctl", &full)?)
    }

    /// Waits until ovn-northd has turned everything in NB into SB logical flows.
    pub fn sync(&self) -> anyhow::Result<()> {
        self.nb.nbctl(&["--wait=sb", "sync"]).map(|_| ())
    }

    /// `ovn-trace --minimal` of `flow` entering `datapath` (after [`OvnCentral::sync`]).
    pub fn trace(&self, datapath: &str, flow: &str) -> anyhow::Result<Trace> {
        self.sync()?;
        let db = format!("--db={}", self.sb.remote());
        let out = run("ovn-trace", &[&db, "--minimal", datapath, flow])?;
        Trace::parse(&out)
    }

    /// [`OvnCentral::trace`] with extra `ovn-trace` options, e.g. `--ct=new` so that stateful ACLs
    /// judge a flow's first packet (by default ovn-trace assumes `ct_state=est|trk`, which an
    /// `allow-related` switch lets through before its ACLs).
    pub fn trace_with(&self, datapath: &str, flow: &str, options: &[&str]) -> anyhow::Result<Trace> {
        self.sync()?;
        let db = format!("--db={}", self.sb.remote());
        let mut args = vec![db.as_str(), "--minimal"];
        args.extend_from_slice(options);
        args.extend([datapath, flow]);
        let out = run("ovn-trace", &args)?;
        Trace::parse(&out)
    }

    pub fn northd_log(&self) -> String {
        self.northd.as_ref().map(Daemon::log).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.nb.dir()
    }
}

/// What `ovn-trace --minimal` says happens to a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    /// The whole output, for failure messages.
    pub text: String,
    /// Logical ports the packet is delivered to (`output("port");`).
    pub outputs: Vec<String>,
}

impl Trace {
    /// ovn-trace exits 0 on errors such as an unknown port; only output that starts with the
    /// `# <microflow>` header is a real trace.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        anyhow::ensure!(text.starts_with("# "), "ovn-trace did not trace: {text}");
        let outputs = text
            .lines()
            .filter_map(|l| {
                l.trim()
                    .strip_prefix("output(\"")?
                    .split('"')
                    .next()
                    .map(str::to_owned)
            })
            .collect();
        Ok(Self {
            text: text.to_owned(),
            outputs,
        })
    }

    pub fn delivers_to(&self, port: &str) -> bool {
        self.outputs.iter().any(|p| p == port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_minimal_traces() {
        let t =
            Trace::parse("# icmp,reg14=0x2\nip.ttl--;\neth.src = 0a:00:00:00:02:01;\noutput(\"pod21\");\n")
                .unwrap();
        assert!(t.delivers_to("pod21") && !t.delivers_to("pod2"));
        let dropped = Trace::parse("# icmp,reg14=0x2\n").unwrap();
        assert!(dropped.outputs.is_empty());
        assert!(Trace::parse("ovn-trace: unknown logical port \"x\"").is_err());
    }
}
