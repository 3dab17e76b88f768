//! containerd with its CRI plugin, as a node's container runtime: our own daemon (own root, state,
//! sockets and config in a temporary directory, stopped by PID), whose CNI bin and conf dirs are
//! whatever the node daemon installed into, and a pause image built here, since these machines
//! reach no registry.
//!
//! Facts about our machines that the config encodes: lowering a process's OOM score is refused
//! (`restrict_oom_score_adj = true`), and `snapshotter = "native"` needs no overlay mounts. The
//! sandboxes' network namespaces go under the state dir (`netns_mounts_under_state_dir`), so two
//! instances never see each other's. The CRI plugin always runs the standard `loopback` plugin
//! before the configured network, so [`Containerd::start`] puts Debian's beside ours.
//!
//! The pause image is `busybox sleep` on a `FROM scratch` image with Debian's static busybox,
//! built with `podman` in a throwaway storage dir, saved as a docker archive, cached between runs
//! (rebuilt when its inputs change) and imported into each instance with `ctr`.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context;

use crate::cri::CriClient;
use crate::{Daemon, run, wait_until};

/// The pause image's name, as `sandbox_image` refers to it.
pub const PAUSE_IMAGE: &str = "localhost/kube-ovn-rs/pause:1";

/// Where Debian's `busybox-static` puts the binary.
const BUSYBOX: &str = "/bin/busybox";
/// Where Debian's `containernetworking-plugins` puts the standard plugins.
pub const STANDARD_CNI_PLUGINS: &str = "/usr/lib/cni";

/// The pause image's Containerfile. PID 1 sleeps; the runtime stops the sandbox with SIGKILL.
const CONTAINERFILE: &str = "FROM scratch\n\
COPY busybox /bin/busybox\n\
ENTRYPOINT [\"/bin/busybox\", \"sleep\", \"2147483647\"]\n";

const WAIT: Duration = Duration::from_secs(30);

/// The pause image as a docker archive, built once per machine and input.
///
/// The cache is a directory holding the inputs (`Containerfile`, `busybox`) beside the archive;
/// it is used only when both equal the current ones. Set `KUBE_OVN_RS_CACHE` to move it (the
/// system temp dir by default).
pub fn pause_image_archive() -> anyhow::Result<PathBuf> {
    // One build at a time in this process; other processes race safely (see below).
    static BUILD: Mutex<()> = Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let busybox = std::fs::read(BUSYBOX).with_context(|| {
        format!("{BUSYBOX} (Debian's busybox-static) for the pause image; run scripts/install-deps.sh")
    })?;
    let root = std::env::var_os("KUBE_OVN_RS_CACHE").map_or_else(std::env::temp_dir, PathBuf::from);
    let cache = root.join("kube-ovn-rs-pause-image");
    let archive = cache.join("pause.tar");
    let fresh = std::fs::read(cache.join("Containerfile")).is_ok_and(|c| c == CONTAINERFILE.as_bytes())
        && std::fs::read(cache.join("busybox")).is_ok_and(|b| b == busybox)
        && archive.exists();
    if fresh {
        return Ok(archive);
    }
    std::fs::create_dir_all(&root)?;
    let work = tempfile::Builder::new()
        .prefix("kube-ovn-rs-pause-build")
        .tempdir_in(&root)?;
    let context = work.path().join("image");
    std::fs::create_dir(&context)?;
    std::fs::write(context.join("Containerfile"), CONTAINERFILE)?;
    std::fs::write(context.join("busybox"), &busybox)?;
    std::fs::set_permissions(
        context.join("busybox"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    // podman's storage in the throwaway dir: nothing lands in the machine's image store.
    let storage = |sub: &str| work.path().join(sub).display().to_string();
    let podman = |args: &[&str]| -> anyhow::Result<String> {
        let mut full = vec![
            "--root".to_owned(),
            storage("storage"),
            "--runroot".to_owned(),
            storage("run"),
            "--storage-driver".to_owned(),
            "vfs".to_owned(),
        ];
        full.extend(args.iter().map(|a| (*a).to_owned()));
        run("podman", &full.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let context_dir = context.display().to_string();
    podman(&["build", "--quiet", "--tag", PAUSE_IMAGE, &context_dir])
        .context("build the pause image (podman, from Debian; run scripts/install-deps.sh)")?;
    let built = context.join("pause.tar");
    podman(&[
        "save",
        "--format",
        "docker-archive",
        "--output",
        &built.display().to_string(),
        PAUSE_IMAGE,
    ])?;
    // The context dir (inputs + archive) becomes the cache by one rename; a process that
    // renamed first wins and its equal result is used.
    let _ = std::fs::remove_dir_all(&cache);
    if std::fs::rename(&context, &cache).is_err() && !cache.join("pause.tar").exists() {
        anyhow::bail!("cannot put the pause image into {}", cache.display());
    }
    Ok(archive)
}

/// Where containerd finds CNI plugins and their config.
#[derive(Debug, Clone)]
pub struct CniDirs {
    /// `bin_dir`: the node daemon installs `kube-ovn` here; `loopback` is copied beside it.
    pub bin_dir: PathBuf,
    /// `conf_dir`: the node daemon writes its conflist here.
    pub conf_dir: PathBuf,
}

/// A running containerd with the CRI plugin.
pub struct Containerd {
    name: String,
    dir: tempfile::TempDir,
    daemon: Daemon,
    socket: PathBuf,
}

impl Containerd {
    /// Writes the config, starts containerd, waits for its socket and imports the pause image.
    /// Fails naming what is missing when containerd, runc, podman or busybox is not installed.
    pub fn start(name: &str, cni: &CniDirs) -> anyhow::Result<Self> {
        let archive = pause_image_archive()?;
        std::fs::create_dir_all(&cni.bin_dir)?;
        std::fs::create_dir_all(&cni.conf_dir)?;
        let loopback = Path::new(STANDARD_CNI_PLUGINS).join("loopback");
        std::fs::copy(&loopback, cni.bin_dir.join("loopback")).with_context(|| {
            format!(
                "{} (Debian's containernetworking-plugins); run scripts/install-deps.sh",
                loopback.display()
            )
        })?;
        let dir = tempfile::Builder::new().prefix("containerd-").tempdir()?;
        let socket = dir.path().join("containerd.sock");
        let config = dir.path().join("config.toml");
        std::fs::write(&config, config_toml(dir.path(), &socket, cni))?;
        let log = dir.path().join("containerd.log");
        let args = vec!["--config".to_owned(), config.display().to_string()];
        let mut daemon = Daemon::spawn(name, "containerd", &args, &log, &[])?;
        wait_until(&format!("{name}: containerd's socket"), WAIT, || {
            daemon.check_alive()?;
            Ok(socket.exists())
        })
        .with_context(|| daemon.log_tail(30))?;
        let address = socket.display().to_string();
        run(
            "ctr",
            &[
                "--address",
                &address,
                "--namespace",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
                &archive.display().to_string(),
            ],
        )
        .with_context(|| format!("{name}: import the pause image"))?;
        Ok(Self {
            name: name.to_owned(),
            dir,
            daemon,
            socket,
        })
    }

    /// The CRI (and containerd) socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// A CRI client on this instance.
    pub async fn client(&self) -> anyhow::Result<CriClient> {
        CriClient::connect(&self.socket).await
    }

    /// The last `n` lines of containerd's log, for failure messages.
    pub fn log_tail(&self, n: usize) -> String {
        self.daemon.log_tail(n)
    }

    /// Stops and removes every sandbox through the CRI (so the network plugin's DEL runs and the
    /// shims exit), then stops containerd by its PID, then any shim still running, by the PID it
    /// wrote into the state dir.
    fn shut_down(&mut self) {
        let socket = self.socket.clone();
        // Drop may run inside a tokio runtime, where blocking on another one panics: a thread.
        let cleaned = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            rt.block_on(async {
                let client = CriClient::connect(&socket).await?;
                for sandbox in client.list_pod_sandboxes().await? {
                    client.stop_and_remove(&sandbox.id).await?;
                }
                anyhow::Ok(())
            })
        })
        .join();
        if !matches!(cleaned, Ok(Ok(()))) {
            eprintln!(
                "{}: could not remove every sandbox before stopping: {cleaned:?}",
                self.name
            );
        }
        self.daemon.stop();
        for pid in shim_pids(&self.dir.path().join("state")) {
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.shut_down();
    }
}

/// PIDs in `shim.pid` files under the runtime v2 state dir (one per sandbox the shims serve).
fn shim_pids(state: &Path) -> Vec<nix::unistd::Pid> {
    let tasks = state.join("io.containerd.runtime.v2.task");
    let mut pids = Vec::new();
    for namespace in std::fs::read_dir(tasks).into_iter().flatten().flatten() {
        for task in std::fs::read_dir(namespace.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(text) = std::fs::read_to_string(task.path().join("shim.pid"))
                && let Ok(pid) = text.trim().parse::<i32>()
            {
                pids.push(nix::unistd::Pid::from_raw(pid));
            }
        }
    }
    pids
}

/// containerd 1.6's config (version 2) for one instance in `dir`.
fn config_toml(dir: &Path, socket: &Path, cni: &CniDirs) -> String {
    let d = dir.display();
    let cri = r#"plugins."io.containerd.grpc.v1.cri""#;
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
# Snapshotters that need kernel features or mounts we do not use.
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.overlayfs",
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
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "native"
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
        socket = socket.display(),
        bin = cni.bin_dir.display(),
        conf = cni.conf_dir.display(),
    )
}
