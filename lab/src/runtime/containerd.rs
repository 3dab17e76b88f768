//! One containerd 1.6 of our own with its CRI plugin: root, state, sockets and config in one
//! directory, its CNI `bin_dir` and `conf_dir` the ones a node daemon installed into.
//!
//! Facts about our machines that the config encodes: lowering a process's OOM score is refused
//! (`restrict_oom_score_adj = true`), and `snapshotter = "native"` needs no overlay mounts. The
//! sandboxes' network namespaces go under the state dir (`netns_mounts_under_state_dir`), so two
//! instances never see each other's and everything an instance makes is under its directory. The
//! CRI plugin always runs the standard `loopback` plugin before the configured network, so
//! [`Instance::prepare`] puts Debian's beside ours.
//!
//! Taking an instance down cleanly: [`remove_all_sandboxes`] through the CRI while the network
//! plugin can still answer DEL, then containerd stopped by its PID, then any shim left, found by
//! the socket it serves ([`Instance::shim_pids`]).

use std::path::{Path, PathBuf};

use super::cri::{CriClient, CriError};
use super::images::PAUSE_IMAGE;
use super::{INSTALL_HINT, RuntimeError, io_err};
use kube_ovn_testkit::run;

/// Where Debian's `containernetworking-plugins` puts the standard plugins.
pub const STANDARD_CNI_PLUGINS: &str = "/usr/lib/cni";
/// The containerd namespace the CRI plugin keeps its images, sandboxes and containers in.
pub const CRI_NAMESPACE: &str = "k8s.io";
/// A unix socket's path must fit `sun_path` (108 bytes with its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Where containerd finds CNI plugins and their config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniDirs {
    /// `bin_dir`: the node daemon installs `kube-ovn` here; `loopback` is copied beside it.
    pub bin_dir: PathBuf,
    /// `conf_dir`: the node daemon writes its conflist here.
    pub conf_dir: PathBuf,
}

/// One containerd's files, all under `dir`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub dir: PathBuf,
    pub cni: CniDirs,
    /// Native (copies, no mounts: the default) or overlayfs (for big images: a container's
    /// root is an overlay mount, not a copy).
    pub snapshotter: Snapshotter,
    /// Sandboxes' network namespaces under the state dir (`netns_mounts_under_state_dir`: two
    /// instances on one host never meet) rather than containerd's default `/var/run/netns`,
    /// where a CNI daemon in a container finds them through its host path (a node's machine
    /// has its own `/var/run`).
    pub netns_under_state_dir: bool,
}

impl Instance {
    pub fn new(dir: impl Into<PathBuf>, cni: CniDirs) -> Self {
        Self {
            dir: dir.into(),
            cni,
            snapshotter: Snapshotter::Native,
            netns_under_state_dir: true,
        }
    }

    /// The same instance as a node's own (in a machine: `crate::cluster::machine`): the
    /// overlayfs snapshotter, network namespaces at containerd's default path.
    #[must_use]
    pub fn for_machine(mut self) -> Self {
        self.snapshotter = Snapshotter::Overlayfs;
        self.netns_under_state_dir = false;
        self
    }

    /// The CRI (and containerd) socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    /// The program and arguments that run this instance.
    pub fn command(&self) -> (String, Vec<String>) {
        (
            "containerd".into(),
            vec!["--config".into(), self.config_path().display().to_string()],
        )
    }

    /// Creates the directories, puts `loopback` beside our plugin and writes the config. Fails
    /// naming what is missing when containerd, runc or the standard plugins are not installed.
    pub fn prepare(&self) -> Result<(), RuntimeError> {
        for program in ["/usr/bin/containerd", "/usr/bin/ctr", "/usr/sbin/runc"] {
            if !Path::new(program).is_file() {
                return Err(RuntimeError::Missing {
                    what: format!("{program} (Debian's containerd and runc)"),
                    hint: INSTALL_HINT,
                });
            }
        }
        let socket = self.socket().display().to_string();
        if socket.len() + ".ttrpc".len() > MAX_SOCKET_PATH {
            return Err(RuntimeError::Other {
                what: format!("containerd's socket {socket}"),
                reason: format!(
                    "longer than a unix socket path may be ({MAX_SOCKET_PATH} bytes with .ttrpc)"
                ),
            });
        }
        for dir in [&self.dir, &self.cni.bin_dir, &self.cni.conf_dir] {
            std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        let loopback = Path::new(STANDARD_CNI_PLUGINS).join("loopback");
        if !loopback.is_file() {
            return Err(RuntimeError::Missing {
                what: format!("{} (Debian's containernetworking-plugins)", loopback.display()),
                hint: INSTALL_HINT,
            });
        }
        let to = self.cni.bin_dir.join("loopback");
        std::fs::copy(&loopback, &to).map_err(io_err("copying loopback to", &to))?;
        std::fs::write(self.config_path(), self.config_toml()).map_err(io_err("writing", self.config_path()))
    }

    /// containerd 1.6's config (version 2) for this instance.
    pub fn config_toml(&self) -> String {
        let d = self.dir.display();
        let cri = r#"plugins."io.containerd.grpc.v1.cri""#;
        format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
# Snapshotters that need kernel features or mounts we do not use.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",{overlay}
]

[grpc]
  address = "{socket}"
[ttrpc]
  address = "{socket}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = {netns_under_state_dir}
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "{snapshotter}"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        Root = "{d}/runc"
  [{cri}.cni]
    bin_dir = "{bin}"
    conf_dir = "{conf}"
    max_conf_num = 1
"#,
            socket = self.socket().display(),
            bin = self.cni.bin_dir.display(),
            conf = self.cni.conf_dir.display(),
            snapshotter = self.snapshotter.name(),
            netns_under_state_dir = self.netns_under_state_dir,
            overlay = if self.snapshotter == Snapshotter::Overlayfs {
                ""
            } else {
                "\n  \"io.containerd.snapshotter.v1.overlayfs\","
            },
        )
    }

    /// The PIDs of this instance's shims (one per sandbox): the `containerd-shim-*` processes
    /// whose `-address` is this instance's socket, so another instance's are never touched.
    pub fn shim_pids(&self) -> Vec<u32> {
        let socket = self.socket().display().to_string();
        let mut pids = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
                continue;
            };
            if is_shim_of(&cmdline, &socket) {
                pids.push(pid);
            }
        }
        pids
    }
}

/// Whether a `/proc/<pid>/cmdline` is a containerd shim's serving the containerd at `socket`.
fn is_shim_of(cmdline: &[u8], socket: &str) -> bool {
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let program = args
        .first()
        .map(|a| String::from_utf8_lossy(a))
        .unwrap_or_default();
    let is_shim = Path::new(program.as_ref())
        .file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("containerd-shim"));
    is_shim
        && args
            .windows(2)
            .any(|w| w[0] == b"-address" && w[1] == socket.as_bytes())
}

/// Which snapshotter `ctr images import` unpacks an image for: the one the runtime's CRI plugin
/// creates containers with (an image unpacked for another is there but cannot be run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Snapshotter {
    /// Plain copies: needs no mounts (this module's [`Instance`]).
    Native,
    /// Overlay mounts, containerd's default (a kubelet's containerd).
    Overlayfs,
}

impl Snapshotter {
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Overlayfs => "overlayfs",
        }
    }
}

/// Loads a docker archive into the containerd at `socket`, in the CRI plugin's namespace and
/// unpacked for `snapshotter`, where the CRI plugin (and so a kubelet) finds it. The image gets
/// every name the archive carries, normalized as a kubelet normalizes a pod's image
/// (`kube-ovn-rs:dev` is `docker.io/library/kube-ovn-rs:dev`); our archives carry the
/// normalized names and, for the existing callers, the `localhost/` ones.
pub fn import(socket: &Path, archive: &Path, snapshotter: Snapshotter) -> Result<(), RuntimeError> {
    let address = socket.display().to_string();
    run(
        "ctr",
        &[
            "--address",
            &address,
            "--namespace",
            CRI_NAMESPACE,
            "images",
            "import",
            "--snapshotter",
            snapshotter.name(),
            &archive.display().to_string(),
        ],
    )?;
    Ok(())
}

/// Stops and removes every sandbox of the instance at `socket` through the CRI (so the network
/// plugin's DEL runs and the shims exit); how many there were.
pub async fn remove_all_sandboxes(socket: &Path) -> Result<usize, CriError> {
    let client = CriClient::connect(socket).await?;
    let mut sandboxes = client.list_pod_sandboxes().await?;
    // Pods in kube-system last: the CNI daemon that answers the others' DEL is one of them.
    sandboxes.sort_by_key(|s| s.metadata.as_ref().is_some_and(|m| m.namespace == "kube-system"));
    for sandbox in &sandboxes {
        client.stop_and_remove(&sandbox.id).await?;
    }
    Ok(sandboxes.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_keeps_everything_under_the_instance_dir() {
        let instance = Instance::new(
            "/lab/nodes/node1/containerd",
            CniDirs {
                bin_dir: "/lab/nodes/node1/bin".into(),
                conf_dir: "/lab/nodes/node1/net.d".into(),
            },
        );
        let toml = instance.config_toml();
        for line in [
            r#"root = "/lab/nodes/node1/containerd/root""#,
            r#"state = "/lab/nodes/node1/containerd/state""#,
            r#"address = "/lab/nodes/node1/containerd/containerd.sock""#,
            r#"bin_dir = "/lab/nodes/node1/bin""#,
            r#"conf_dir = "/lab/nodes/node1/net.d""#,
            "restrict_oom_score_adj = true",
            "netns_mounts_under_state_dir = true",
            r#"snapshotter = "native""#,
        ] {
            assert!(toml.contains(line), "{line} not in\n{toml}");
        }
        assert_eq!(
            instance.command().1,
            ["--config", "/lab/nodes/node1/containerd/config.toml"]
        );
        assert!(instance.shim_pids().is_empty());
    }

    #[test]
    fn snapshotters_have_containerds_names() {
        assert_eq!(Snapshotter::Native.name(), "native");
        assert_eq!(Snapshotter::Overlayfs.name(), "overlayfs");
    }

    #[test]
    fn a_shim_is_known_by_the_socket_it_serves() {
        let line = b"/usr/bin/containerd-shim-runc-v2\0-namespace\0k8s.io\0-id\0abc\0-address\0/l/c.sock\0";
        assert!(is_shim_of(line, "/l/c.sock"));
        assert!(!is_shim_of(line, "/other/c.sock"));
        assert!(!is_shim_of(
            b"/usr/bin/containerd\0-address\0/l/c.sock\0",
            "/l/c.sock"
        ));
    }
}
