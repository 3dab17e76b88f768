//! The machine's `kubectl` against an emulator, with its own discovery cache; every run checked.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The oldest kubectl the tests accept: 1.27 validates fields on the server (it finds
/// `fieldValidation` in the OpenAPI v3 document) where older ones validate on the client from an
/// OpenAPI v2 document in protobuf, which the emulator does not serve.
pub const MIN_MINOR: u32 = 27;

pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub struct Kubectl {
    kubeconfig: PathBuf,
    cache: PathBuf,
}

impl Kubectl {
    /// kubectl for the emulator whose kubeconfig is `kubeconfig`; fails the test when kubectl is
    /// missing or older than 1.[`MIN_MINOR`], saying what to install.
    pub fn new(kubeconfig: &Path, cache: &Path) -> Self {
        let kubectl = Self {
            kubeconfig: kubeconfig.to_owned(),
            cache: cache.to_owned(),
        };
        let minor = kubectl.client_minor();
        assert!(
            minor >= MIN_MINOR,
            "kubectl 1.{minor} is too old: these tests need kubectl 1.{MIN_MINOR} or newer (server-side \
             field validation through OpenAPI v3). Debian 12's kubernetes-client package is 1.20 and does \
             not pass; scripts/install-deps.sh installs kubectl 1.32 as /usr/local/bin/kubectl when the \
             one on PATH is older: run it, and put /usr/local/bin first on PATH"
        );
        kubectl
    }

    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("kubectl");
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
        let out = self.command(args).output().unwrap_or_else(|e| {
            panic!("kubectl: {e}: install kubectl 1.{MIN_MINOR} or newer with scripts/install-deps.sh")
        });
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

    /// kubectl's minor version. A cloud SDK's version dispatcher reports its own (1.32 here) and
    /// runs the release that matches the server's version (1.33 for the emulator).
    fn client_minor(&self) -> u32 {
        let v: Value = serde_json::from_str(&self.run(&["version", "--client", "-o", "json"])).unwrap();
        v["clientVersion"]["minor"]
            .as_str()
            .and_then(|m| m.trim_end_matches('+').parse().ok())
            .unwrap_or_else(|| panic!("no client minor version in {v}"))
    }
}
