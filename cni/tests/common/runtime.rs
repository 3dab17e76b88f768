//! A container runtime's side of CNI, as containerd and CRI-O do it: read the conflist from
//! the conf dir, run each plugin binary from `CNI_PATH` with the `CNI_*` environment and the
//! plugin's config (with `name`, `cniVersion` and `prevResult`) on stdin, and keep the result.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

/// One sandbox's attachment.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub pod: String,
    pub namespace: String,
}

/// What a plugin run printed and how it ended.
#[derive(Debug)]
pub struct PluginRun {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl PluginRun {
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout).with_context(|| format!("stdout is not JSON: {:?}", self.stdout))
    }
}

/// A runtime reading one conf dir and one bin dir.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub conf_dir: PathBuf,
    pub bin_dir: PathBuf,
}

impl Runtime {
    /// The first conflist in the conf dir, by name (the runtime's rule).
    pub fn conflist(&self) -> Result<Value> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.conf_dir)
            .with_context(|| format!("read {}", self.conf_dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "conflist"))
            .collect();
        files.sort();
        let file = files
            .first()
            .with_context(|| format!("no conflist in {}", self.conf_dir.display()))?;
        serde_json::from_slice(&std::fs::read(file)?).with_context(|| format!("parse {}", file.display()))
    }

    fn run(
        &self,
        command: &str,
        sandbox: &Sandbox,
        plugin: &Value,
        prev: Option<&Value>,
    ) -> Result<PluginRun> {
        let list = self.conflist()?;
        let mut conf = plugin.clone();
        conf["name"] = list["name"].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        let kind = conf["type"].as_str().context("plugin without type")?.to_owned();
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={}",
            sandbox.namespace, sandbox.pod, sandbox.container_id
        );
        run_plugin(
            &self.bin_dir.join(&kind),
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", &sandbox.container_id),
                ("CNI_NETNS", &sandbox.netns),
                ("CNI_IFNAME", &sandbox.ifname),
                ("CNI_ARGS", &args),
                ("CNI_PATH", &self.bin_dir.display().to_string()),
            ],
            &serde_json::to_vec(&conf)?,
        )
    }

    /// ADD through every plugin of the list; the last result.
    pub fn add(&self, sandbox: &Sandbox) -> Result<Value> {
        let list = self.conflist()?;
        let mut prev: Option<Value> = None;
        for plugin in list["plugins"].as_array().context("conflist without plugins")? {
            let run = self.run("ADD", sandbox, plugin, prev.as_ref())?;
            if !run.success {
                bail!(
                    "ADD {} failed: {}\nstderr: {}",
                    plugin["type"],
                    run.stdout,
                    run.stderr
                );
            }
            prev = Some(run.json()?);
        }
        prev.context("no plugin ran")
    }

    /// ADD, returning the raw run of the first plugin (for tests of failures).
    pub fn add_raw(&self, sandbox: &Sandbox) -> Result<PluginRun> {
        let list = self.conflist()?;
        self.run("ADD", sandbox, &list["plugins"][0], None)
    }

    /// DEL through every plugin, in reverse order, with the ADD result when known.
    pub fn del(&self, sandbox: &Sandbox, prev: Option<&Value>) -> Result<()> {
        let list = self.conflist()?;
        for plugin in list["plugins"]
            .as_array()
            .context("conflist without plugins")?
            .iter()
            .rev()
        {
            let run = self.run("DEL", sandbox, plugin, prev)?;
            if !run.success || !run.stdout.trim().is_empty() {
                bail!(
                    "DEL {} failed (or printed): {}\nstderr: {}",
                    plugin["type"],
                    run.stdout,
                    run.stderr
                );
            }
        }
        Ok(())
    }

    /// CHECK with the ADD result, as the spec requires.
    pub fn check(&self, sandbox: &Sandbox, prev: &Value) -> Result<PluginRun> {
        let list = self.conflist()?;
        self.run("CHECK", sandbox, &list["plugins"][0], Some(prev))
    }

    /// GC with the attachments the runtime still has.
    pub fn gc(&self, keep: &[&Sandbox]) -> Result<PluginRun> {
        let list = self.conflist()?;
        let mut conf = list["plugins"][0].clone();
        conf["name"] = list["name"].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        conf["cni.dev/valid-attachments"] = json!(
            keep.iter()
                .map(|s| json!({"containerID": s.container_id, "ifname": s.ifname}))
                .collect::<Vec<_>>()
        );
        run_plugin(
            &self.bin_dir.join("kube-ovn"),
            &[
                ("CNI_COMMAND", "GC"),
                ("CNI_PATH", &self.bin_dir.display().to_string()),
            ],
            &serde_json::to_vec(&conf)?,
        )
    }
}

/// How long one plugin run may take: above the daemon's own bounds (address and `ovn-installed`
/// waits) in every test, so it only fires when something hangs.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_mins(3);

/// Runs one plugin binary with exactly `env` (no inherited CNI_ variables) and `stdin`.
pub fn run_plugin(binary: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<PluginRun> {
    let mut child = Command::new(binary)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("run {}", binary.display()))?;
    child.stdin.take().context("stdin")?.write_all(stdin)?;
    let out = output_within(child, PLUGIN_TIMEOUT, &binary.display().to_string())?;
    Ok(PluginRun {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The child's output once it exits, or an error naming `what` after `limit`, when a watchdog
/// kills it (by its PID, which stays the child's until it is reaped here). The exit is not
/// polled, so the timing of a run is not rounded up to a poll interval.
pub fn output_within(child: Child, limit: Duration, what: &str) -> Result<Output> {
    let pid = child.id().to_string();
    let (finished, watch) = mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        let timed_out = watch.recv_timeout(limit) == Err(mpsc::RecvTimeoutError::Timeout);
        if timed_out {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
        timed_out
    });
    let out = child.wait_with_output();
    let _ = finished.send(());
    if watchdog.join().unwrap_or(false) {
        bail!("{what} did not finish within {limit:?}; killed");
    }
    Ok(out?)
}
