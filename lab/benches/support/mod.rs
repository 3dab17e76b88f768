//! What the lab benchmarks share: the `kube-ovn-lab` binary driven with a lab name and labs
//! directory of the bench's own, from `KUBE_OVN_LAB_BIN_DIR` (default `target/release`; a relative
//! path is taken from the workspace root).

#![allow(dead_code, reason = "each bench uses a part")]

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Result, ensure};

/// A lab of a bench's own.
pub struct Lab {
    pub name: String,
    /// The labs directory (removed when the bench ends).
    pub dir: tempfile::TempDir,
    pub bin_dir: PathBuf,
}

impl Lab {
    /// A lab named `<prefix><pid>` with the binaries of `KUBE_OVN_LAB_BIN_DIR`; an error names
    /// a binary that is missing.
    pub fn new(prefix: &str) -> Result<Self> {
        // Relative to the workspace: cargo runs a bench in its package's directory, where
        // `target/debug` as typed at the workspace root would not be found.
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let bin_dir = workspace.join(
            std::env::var_os("KUBE_OVN_LAB_BIN_DIR")
                .map_or_else(|| PathBuf::from("target/release"), PathBuf::from),
        );
        for b in [
            "kube-ovn-lab",
            "kube-ovn-controller",
            "kube-ovn-daemon",
            "kube-ovn",
            "kube-ovn-speaker",
        ] {
            ensure!(
                bin_dir.join(b).is_file(),
                "{b} is not in {} (cargo build --release --workspace --bins)",
                bin_dir.display()
            );
        }
        Ok(Self {
            name: format!("{prefix}{}", std::process::id() % 10_000),
            dir: tempfile::Builder::new().prefix("kube-ovn-lab-bench").tempdir()?,
            bin_dir,
        })
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(self.bin_dir.join("kube-ovn-lab"));
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--labs-dir")
            .arg(self.dir.path())
            .args(args);
        cmd
    }

    /// Runs a verb that must succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.command(args).output()?;
        ensure!(
            out.status.success(),
            "kube-ovn-lab {} failed:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `up` with the bench's binaries and `extra` arguments.
    pub fn up(&self, extra: &[&str]) -> Result<String> {
        let bins = self.bin_dir.to_string_lossy().into_owned();
        let mut args = vec!["up", "--no-install", "--bin-dir", &bins];
        // The process mode unless the caller names one: most labs here test our components'
        // behaviour, which it shows in a third of the time (`lab_manifests` installs for real).
        if !extra.contains(&"--install") {
            args.extend(["--install", "processes"]);
        }
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    pub fn down(&self) -> Result<()> {
        self.ok(&["down"]).map(drop)
    }

    /// The path of one of the lab's network namespaces (`cp`, `node1`, …).
    pub fn netns(&self, role: &str) -> PathBuf {
        Path::new("/run/netns").join(format!("kl_{}_{role}", self.name))
    }
}

impl Drop for Lab {
    /// A bench that fails midway still takes its lab down (its labs directory, with the state
    /// file `down` works from, goes right after).
    fn drop(&mut self) {
        if self.dir.path().join(&self.name).exists() {
            let _ = self.down();
        }
    }
}
