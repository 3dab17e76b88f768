//! The `kube-ovn-lab` binary driven as a user drives it, for the lab's end-to-end tests: a lab
//! with a name and labs directory of its own, its verbs, and what `down` must leave behind.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::cluster::state::LabState;

/// Fails unless `up`'s report says its traffic matrix is green. The error names the failed
/// rows and checks only: the whole report is long, the caller prints it, and a CI log keeps
/// just its head and tail, where a repeated report would hide the failure.
pub fn matrix_is_green(report: &str) -> Result<()> {
    if report.contains("checks as expected") && !report.contains("FAIL") {
        return Ok(());
    }
    let mut failed = Vec::new();
    let mut in_summary = false;
    for line in report.lines() {
        if line.contains("checks FAILED:") {
            in_summary = true;
        } else if in_summary && !line.starts_with("    ") {
            in_summary = false;
        }
        if in_summary || line.contains("FAIL") {
            failed.push(line);
        }
    }
    if failed.is_empty() {
        bail!("up's report has no matrix summary (its report is printed above)");
    }
    bail!("the matrix is not green:\n{}", failed.join("\n"))
}

/// A lab of a test's own: its own name and labs directory, taken down when dropped.
pub struct Lab {
    pub name: String,
    pub dir: tempfile::TempDir,
}

impl Lab {
    pub fn new(suffix: &str) -> Self {
        Self {
            name: format!("t{}{suffix}", std::process::id() % 100_000),
            dir: tempfile::Builder::new()
                .prefix("kube-ovn-lab-test")
                .tempdir()
                .expect("a temporary labs directory"),
        }
    }

    pub fn bin() -> &'static str {
        env!("CARGO_BIN_EXE_kube-ovn-lab")
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(Self::bin());
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--labs-dir")
            .arg(self.dir.path())
            .args(args);
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Result<Output> {
        self.command(args)
            .output()
            .with_context(|| format!("running kube-ovn-lab {}", args.join(" ")))
    }

    /// Runs a verb that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.run(args)?;
        ensure!(
            out.status.success(),
            "kube-ovn-lab {} failed ({}):\n{}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `kubectl apply -f path`, again while a pod is refused because its namespace's `default`
    /// ServiceAccount is not there yet (kube-controller-manager makes it moments after the
    /// namespace; the ServiceAccount admission plugin refuses pods until then). Any other
    /// failure, or that one for longer than `super::WAIT`, fails.
    pub fn apply(&self, path: &Path) -> Result<String> {
        let path = path.to_string_lossy().into_owned();
        let deadline = std::time::Instant::now() + super::WAIT;
        loop {
            let out = self.run(&["kubectl", "apply", "-f", &path])?;
            if out.status.success() {
                return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
            }
            let err = String::from_utf8_lossy(&out.stderr);
            ensure!(
                err.contains("serviceaccount \"default\" not found") && std::time::Instant::now() < deadline,
                "kubectl apply -f {path} failed ({}): {err}",
                out.status
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn up(&self, extra: &[&str]) -> Result<String> {
        let bins = Path::new(Self::bin())
            .parent()
            .context("the binary's directory")?
            .to_owned();
        for b in [
            "kube-ovn-controller",
            "kube-ovn-daemon",
            "kube-ovn",
            "kube-ovn-speaker",
        ] {
            ensure!(
                bins.join(b).is_file(),
                "{b} is not in {} (run the tests with `cargo test --workspace`, or `cargo build --workspace --bins` first)",
                bins.display()
            );
        }
        let bin_dir = bins.to_string_lossy().into_owned();
        let mut args = vec!["up", "--no-install", "--bin-dir", &bin_dir];
        // The process mode unless the caller names one: most labs here test our components'
        // behaviour, which it shows in a third of the time (`lab_manifests` installs for real).
        if !extra.contains(&"--install") {
            args.extend(["--install", "processes"]);
        }
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    pub fn state(&self) -> Result<LabState> {
        LabState::load(&self.dir.path().join(&self.name).join("state.json"))?.context("no state file")
    }

    pub fn netns_prefix(&self) -> String {
        format!("kl_{}_", self.name)
    }

    /// The network namespace of one of the lab's hosts (`cp`, `node1`, `outside`, …).
    pub fn netns(&self, host: &str) -> String {
        format!("{}{host}", self.netns_prefix())
    }

    /// The path of one of the lab's hosts' namespace files (`/run/netns/<name>`).
    pub fn netns_path(&self, host: &str) -> PathBuf {
        Path::new("/run/netns").join(self.netns(host))
    }

    /// A path in a node's root, as its pods see `/` (`run/openvswitch/db.sock`, …).
    pub fn node_root(&self, node: &str, path: &str) -> PathBuf {
        self.dir
            .path()
            .join(&self.name)
            .join("nodes")
            .join(node)
            .join("root")
            .join(path)
    }

    pub fn namespaces(&self) -> Result<Vec<String>> {
        let out = String::from_utf8(Command::new("ip").args(["netns", "list"]).output()?.stdout)?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&self.netns_prefix()))
            .map(str::to_owned)
            .collect())
    }

    /// `down`, then nothing of the lab may remain: no namespace, no process, no directory.
    pub fn down_and_check_clean(&self, state: &LabState) -> Result<()> {
        let out = self.ok(&["down"])?;
        ensure!(out.contains("is down"), "{out}");
        ensure!(
            self.namespaces()?.is_empty(),
            "namespaces left: {:?}",
            self.namespaces()?
        );
        let alive: Vec<String> = state
            .processes()
            .filter(|(_, pid, start)| process::alive(*pid, *start))
            .map(|(c, pid, _)| format!("{c} ({pid})"))
            .collect();
        ensure!(alive.is_empty(), "processes left: {alive:?}");
        let dir: PathBuf = self.dir.path().join(&self.name);
        ensure!(!dir.exists(), "{} is still there", dir.display());
        Ok(())
    }
}

impl Drop for Lab {
    /// A failed test still takes its lab down.
    fn drop(&mut self) {
        if self.dir.path().join(&self.name).exists() {
            let _ = self.run(&["down"]);
        }
    }
}
