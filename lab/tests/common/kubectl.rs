//! Upstream kubectl (built with the control plane, `kubernetes::binary("kubectl")`) against a
//! test's API server, with its own discovery cache; every run checked.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// kubectl for the API server whose kubeconfig is `kubeconfig`; fails the test when the
    /// built kubectl is missing, saying how to build it.
    pub fn new(kubeconfig: &Path, cache: &Path) -> Self {
        Self {
            program: kube_ovn_lab::kubernetes::binary("kubectl").unwrap_or_else(|e| panic!("{e}")),
            kubeconfig: kubeconfig.to_owned(),
            cache: cache.to_owned(),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            // Its own discovery cache, so no state is shared with other runs or the user's.
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .current_dir(repo())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs kubectl; its stdout, or a failure with its stderr.
    pub fn run(&self, args: &[&str]) -> String {
        let out = self
            .command(args)
            .output()
            .unwrap_or_else(|e| panic!("kubectl: {e}"));
        assert!(
            out.status.success(),
            "kubectl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs kubectl expecting failure; its stderr.
    pub fn fail(&self, args: &[&str]) -> String {
        let out = self.command(args).output().unwrap();
        assert!(!out.status.success(), "kubectl {} succeeded", args.join(" "));
        String::from_utf8(out.stderr).unwrap()
    }

    /// `kubectl get … -o json`, parsed.
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.run(&all)).unwrap()
    }
}
