//! The kubectl built with the control plane (`kube_ovn_lab::kubernetes::binary("kubectl")`, the
//! same release as the API server) against one test's API server, with its own discovery cache;
//! every run checked.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::Value;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The built kubectl; a missing one fails the test, naming the script that builds it.
pub fn program() -> PathBuf {
    kube_ovn_lab::kubernetes::binary("kubectl").unwrap_or_else(|e| panic!("{e}"))
}

/// `kubectl kustomize deploy/<dir>` (no server needed), as YAML.
pub fn kustomize(dir: &str) -> String {
    let out = Command::new(program())
        .arg("kustomize")
        .arg(repo().join("deploy").join(dir))
        .stdin(Stdio::null())
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("kustomize writes UTF-8")
}

pub struct Kubectl {
    program: PathBuf,
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// kubectl as the user of `kubeconfig`, caching discovery in `cache`.
    pub fn new(kubeconfig: &Path, cache: &Path) -> Self {
        Self {
            program: program(),
            kubeconfig: kubeconfig.to_owned(),
            cache: cache.to_owned(),
        }
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            // Its own discovery cache: nothing shared with other tests or the user's.
            .arg("--cache-dir")
            .arg(&self.cache)
            .args(args)
            .current_dir(repo())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null());
        cmd
    }

    pub fn output(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("kubectl runs")
    }

    /// Runs kubectl; its stdout, or a failure with its stderr. A warning from the server (a
    /// CRD schema it finds fault with, a field it dropped) fails the test too.
    #[track_caller]
    pub fn run(&self, args: &[&str]) -> String {
        let out = self.output(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "kubectl {} failed ({}): {stderr}",
            args.join(" "),
            out.status,
        );
        assert!(
            !stderr.contains("Warning"),
            "kubectl {}: the server warned: {stderr}",
            args.join(" ")
        );
        String::from_utf8(out.stdout).expect("kubectl writes UTF-8")
    }

    /// Runs kubectl expecting failure; its stderr.
    #[track_caller]
    pub fn fail(&self, args: &[&str]) -> String {
        let out = self.output(args);
        assert!(
            !out.status.success(),
            "kubectl {} succeeded: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// `kubectl get … -o json`, parsed.
    #[track_caller]
    pub fn get_json(&self, args: &[&str]) -> Value {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.run(&all)).expect("kubectl -o json writes JSON")
    }
}
