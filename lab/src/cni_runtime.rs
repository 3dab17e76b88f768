//! A container runtime's side of CNI, as containerd and CRI-O do it: read the conflist from
//! the conf dir, run each plugin binary from `CNI_PATH` with the `CNI_*` environment and the
//! plugin's config (with `name`, `cniVersion` and `prevResult`) on stdin, and keep the result.
//!
//! A runtime runs its plugins in its host's network namespace: the bridge a plugin makes, the
//! host end of a veth, the daemon socket it dials are all the host's. In the lab a node is a
//! network namespace, so [`Runtime::in_netns`] starts every plugin from a thread that entered
//! the node's namespace (the child inherits the namespace of the thread that forked it).
//!
//! Blocking: every call waits for the plugin processes. Async callers use `spawn_blocking`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kube_ovn_dataplane::Netns;
use serde_json::{Value, json};

/// What can go wrong running plugins; every message names the file, plugin or binary.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading CNI conf dir {}: {source}", dir.display())]
    ConfDir { dir: PathBuf, source: std::io::Error },
    #[error("no .conflist in CNI conf dir {}", dir.display())]
    NoConflist { dir: PathBuf },
    #[error("CNI conflist {}: {reason}", file.display())]
    Conflist { file: PathBuf, reason: String },
    #[error("running CNI plugin {}: {source}", binary.display())]
    Spawn { binary: PathBuf, source: std::io::Error },
    #[error("entering the runtime's network namespace: {0}")]
    Netns(#[from] kube_ovn_dataplane::Error),
    #[error("{what} did not finish within {limit:?}; killed")]
    Timeout { what: String, limit: Duration },
    #[error("{what}: {source}")]
    Io { what: String, source: std::io::Error },
    #[error("CNI {command} of plugin {plugin} failed: {stdout}\nstderr: {stderr}")]
    PluginFailed {
        command: String,
        plugin: String,
        stdout: String,
        stderr: String,
    },
    #[error("CNI plugin {plugin}: stdout is not JSON ({source}): {stdout:?}")]
    NotJson {
        plugin: String,
        stdout: String,
        source: serde_json::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One sandbox's attachment.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Sandbox {
    pub container_id: String,
    /// The path of the sandbox's network namespace (`/run/netns/NAME`).
    pub netns: String,
    pub ifname: String,
    pub pod: String,
    pub namespace: String,
}

/// What a plugin run printed and how it ended.
#[derive(Debug)]
pub struct PluginRun {
    /// Which plugin (its `type`), for messages.
    pub plugin: String,
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl PluginRun {
    pub fn json(&self) -> Result<Value> {
        serde_json::from_str(&self.stdout).map_err(|source| Error::NotJson {
            plugin: self.plugin.clone(),
            stdout: self.stdout.clone(),
            source,
        })
    }
}

/// A runtime reading one conf dir and one bin dir.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub conf_dir: PathBuf,
    pub bin_dir: PathBuf,
    /// The namespace plugins run in; `None`: this process's.
    pub netns: Option<Netns>,
}

impl Runtime {
    pub fn new(conf_dir: impl Into<PathBuf>, bin_dir: impl Into<PathBuf>) -> Self {
        Self {
            conf_dir: conf_dir.into(),
            bin_dir: bin_dir.into(),
            netns: None,
        }
    }

    /// The same runtime, running its plugins in `netns` (the node's namespace).
    #[must_use]
    pub fn in_netns(mut self, netns: Netns) -> Self {
        self.netns = Some(netns);
        self
    }

    /// The first conflist in the conf dir, by name (the runtime's rule).
    pub fn conflist(&self) -> Result<Value> {
        let dir_error = |source| Error::ConfDir {
            dir: self.conf_dir.clone(),
            source,
        };
        let mut files: Vec<PathBuf> = std::fs::read_dir(&self.conf_dir)
            .map_err(dir_error)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "conflist"))
            .collect();
        files.sort();
        let file = files.first().ok_or_else(|| Error::NoConflist {
            dir: self.conf_dir.clone(),
        })?;
        let invalid = |reason: String| Error::Conflist {
            file: file.clone(),
            reason,
        };
        let bytes = std::fs::read(file).map_err(|e| invalid(e.to_string()))?;
        let list: Value = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if list["plugins"].as_array().is_none_or(Vec::is_empty) {
            return Err(invalid("no plugins".into()));
        }
        if let Some(i) = list["plugins"]
            .as_array()
            .into_iter()
            .flatten()
            .position(|p| !p["type"].is_string())
        {
            return Err(invalid(format!("plugins[{i}] has no type")));
        }
        Ok(list)
    }

    fn plugins(list: &Value) -> &[Value] {
        // `conflist` checked that this is a non-empty array.
        list["plugins"].as_array().map_or(&[], Vec::as_slice)
    }

    fn run(
        &self,
        list: &Value,
        command: &str,
        sandbox: &Sandbox,
        plugin: &Value,
        prev: Option<&Value>,
    ) -> Result<PluginRun> {
        let mut conf = plugin.clone();
        conf["name"] = list["name"].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        if let Some(prev) = prev {
            conf["prevResult"] = prev.clone();
        }
        let kind = conf["type"].as_str().unwrap_or_default().to_owned();
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={}",
            sandbox.namespace, sandbox.pod, sandbox.container_id
        );
        self.run_plugin(
            &kind,
            &[
                ("CNI_COMMAND", command),
                ("CNI_CONTAINERID", &sandbox.container_id),
                ("CNI_NETNS", &sandbox.netns),
                ("CNI_IFNAME", &sandbox.ifname),
                ("CNI_ARGS", &args),
                ("CNI_PATH", &self.bin_dir.display().to_string()),
            ],
            &conf,
        )
    }

    fn run_plugin(&self, kind: &str, env: &[(&str, &str)], conf: &Value) -> Result<PluginRun> {
        let stdin = serde_json::to_vec(conf).unwrap_or_default();
        let mut run = run_plugin_in(self.netns.as_ref(), &self.bin_dir.join(kind), env, &stdin)?;
        kind.clone_into(&mut run.plugin);
        Ok(run)
    }

    /// ADD through every plugin of the list; the last result.
    pub fn add(&self, sandbox: &Sandbox) -> Result<Value> {
        let list = self.conflist()?;
        let mut prev: Option<Value> = None;
        for plugin in Self::plugins(&list) {
            let run = self.run(&list, "ADD", sandbox, plugin, prev.as_ref())?;
            if !run.success {
                return Err(Error::PluginFailed {
                    command: "ADD".into(),
                    plugin: run.plugin,
                    stdout: run.stdout,
                    stderr: run.stderr,
                });
            }
            prev = Some(run.json()?);
        }
        // `conflist` refuses an empty list, so some plugin ran.
        Ok(prev.unwrap_or(Value::Null))
    }

    /// ADD, returning the raw run of the first plugin (for tests of failures).
    pub fn add_raw(&self, sandbox: &Sandbox) -> Result<PluginRun> {
        let list = self.conflist()?;
        self.run(&list, "ADD", sandbox, &Self::plugins(&list)[0], None)
    }

    /// DEL through every plugin, in reverse order, with the ADD result when known.
    pub fn del(&self, sandbox: &Sandbox, prev: Option<&Value>) -> Result<()> {
        let list = self.conflist()?;
        for plugin in Self::plugins(&list).iter().rev() {
            let run = self.run(&list, "DEL", sandbox, plugin, prev)?;
            // A DEL that succeeds prints nothing (the spec); anything else is a failure.
            if !run.success || !run.stdout.trim().is_empty() {
                return Err(Error::PluginFailed {
                    command: "DEL".into(),
                    plugin: run.plugin,
                    stdout: run.stdout,
                    stderr: run.stderr,
                });
            }
        }
        Ok(())
    }

    /// CHECK with the ADD result, as the spec requires (first plugin only).
    pub fn check(&self, sandbox: &Sandbox, prev: &Value) -> Result<PluginRun> {
        let list = self.conflist()?;
        self.run(&list, "CHECK", sandbox, &Self::plugins(&list)[0], Some(prev))
    }

    /// GC (first plugin only) with the attachments the runtime still has.
    pub fn gc(&self, keep: &[&Sandbox]) -> Result<PluginRun> {
        let list = self.conflist()?;
        let mut conf = Self::plugins(&list)[0].clone();
        conf["name"] = list["name"].clone();
        conf["cniVersion"] = list["cniVersion"].clone();
        conf["cni.dev/valid-attachments"] = json!(
            keep.iter()
                .map(|s| json!({"containerID": s.container_id, "ifname": s.ifname}))
                .collect::<Vec<_>>()
        );
        let kind = conf["type"].as_str().unwrap_or_default().to_owned();
        self.run_plugin(
            &kind,
            &[
                ("CNI_COMMAND", "GC"),
                ("CNI_PATH", &self.bin_dir.display().to_string()),
            ],
            &conf,
        )
    }
}

/// How long one plugin run may take: above the kube-ovn daemon's own bounds (address and
/// `ovn-installed` waits), so it only fires when something hangs.
pub const PLUGIN_TIMEOUT: Duration = Duration::from_mins(3);

/// Runs one plugin binary with exactly `env` (no inherited CNI_ variables) and `stdin`, in this
/// process's network namespace.
pub fn run_plugin(binary: &Path, env: &[(&str, &str)], stdin: &[u8]) -> Result<PluginRun> {
    run_plugin_in(None, binary, env, stdin)
}

/// [`run_plugin`] in `netns` when given: the process is forked from a thread that entered it.
pub fn run_plugin_in(
    netns: Option<&Netns>,
    binary: &Path,
    env: &[(&str, &str)],
    stdin: &[u8],
) -> Result<PluginRun> {
    let mut command = Command::new(binary);
    command
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let spawned = match netns {
        Some(ns) => ns.run(|| command.spawn())?,
        None => command.spawn(),
    };
    let mut child = spawned.map_err(|source| Error::Spawn {
        binary: binary.to_owned(),
        source,
    })?;
    let what = binary.display().to_string();
    // A plugin that exits without reading its stdin closes the pipe: that is its answer, not
    // ours to report, so a broken pipe here is ignored and its output read below.
    if let Some(mut input) = child.stdin.take()
        && let Err(e) = input.write_all(stdin)
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        return Err(Error::Io {
            what: format!("writing the config to {what}"),
            source: e,
        });
    }
    let out = output_within(child, PLUGIN_TIMEOUT, &what)?;
    Ok(PluginRun {
        plugin: binary
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
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
        return Err(Error::Timeout {
            what: what.to_owned(),
            limit,
        });
    }
    out.map_err(|source| Error::Io {
        what: format!("waiting for {what}"),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf_dir(content: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("10-x.conflist"), content).unwrap();
        dir
    }

    #[test]
    fn a_conflist_without_plugins_or_types_is_refused_naming_the_file() {
        for (content, why) in [
            ("{", "EOF"),
            (r#"{"name":"n","plugins":[]}"#, "no plugins"),
            (
                r#"{"name":"n","plugins":[{"type":"a"},{}]}"#,
                "plugins[1] has no type",
            ),
        ] {
            let dir = conf_dir(content);
            let err = Runtime::new(dir.path(), "/nonexistent").conflist().unwrap_err();
            let text = err.to_string();
            assert!(text.contains("10-x.conflist") && text.contains(why), "{text}");
        }
        let empty = tempfile::tempdir().unwrap();
        let err = Runtime::new(empty.path(), "/x").conflist().unwrap_err();
        assert!(matches!(err, Error::NoConflist { .. }), "{err}");
    }

    #[test]
    fn the_first_conflist_by_name_wins() {
        let dir = conf_dir(r#"{"name":"second","plugins":[{"type":"a"}]}"#);
        std::fs::write(
            dir.path().join("01-first.conflist"),
            r#"{"name":"first","plugins":[{"type":"a"}]}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join("00-not-a-list.conf"), "{}").unwrap();
        let list = Runtime::new(dir.path(), "/x").conflist().unwrap();
        assert_eq!(list["name"], "first");
    }

    #[test]
    fn a_plugin_gets_the_environment_and_config_and_its_failure_is_reported() {
        // A shell "plugin" that echoes what it was given as its result.
        let bin = tempfile::tempdir().unwrap();
        let script = bin.path().join("echo-plugin");
        std::fs::write(
            &script,
            "#!/bin/sh\nread conf\nif [ \"$CNI_COMMAND\" = DEL ]; then exit 0; fi\n\
             if [ \"$CNI_COMMAND\" = CHECK ]; then echo '{\"code\":99,\"msg\":\"nope\"}'; exit 1; fi\n\
             printf '{\"cmd\":\"%s\",\"ns\":\"%s\",\"conf\":%s}' \"$CNI_COMMAND\" \"$CNI_NETNS\" \"$conf\"\n",
        )
        .unwrap();
        Command::new("chmod")
            .args(["+x", &script.display().to_string()])
            .status()
            .unwrap();
        let dir = conf_dir(r#"{"name":"net","cniVersion":"1.0.0","plugins":[{"type":"echo-plugin","x":1}]}"#);
        let runtime = Runtime::new(dir.path(), bin.path());
        let sandbox = Sandbox {
            container_id: "c1".into(),
            netns: "/run/netns/p".into(),
            ifname: "eth0".into(),
            pod: "p".into(),
            namespace: "default".into(),
        };
        let result = runtime.add(&sandbox).unwrap();
        assert_eq!(result["cmd"], "ADD");
        assert_eq!(result["ns"], "/run/netns/p");
        assert_eq!(
            result["conf"],
            json!({"type":"echo-plugin","x":1,"name":"net","cniVersion":"1.0.0"})
        );
        runtime.del(&sandbox, Some(&result)).unwrap();
        let check = runtime.check(&sandbox, &result).unwrap();
        assert!(!check.success && check.json().unwrap()["code"] == 99);
        let missing = Runtime::new(dir.path(), "/nonexistent-bin")
            .add(&sandbox)
            .unwrap_err();
        assert!(
            matches!(missing, Error::Spawn { ref binary, .. } if binary.ends_with("echo-plugin")),
            "{missing}"
        );
    }
}
