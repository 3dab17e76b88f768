//! The images the lab installs from `deploy/`, built here with podman (no registry), imported into
//! a containerd with the `overlayfs` snapshotter (a kubelet's), run with `ctr`:
//!
//! - the kube-ovn-rs image from `deploy/Dockerfile` on a debootstrapped Debian 12: its binaries
//!   and Debian's OVS/OVN answer; a second build with the same binaries is the cached archive; a
//!   changed binary makes a new image whose only new layer is the binaries';
//! - the netexec image: a container that names only the image serves HTTP and UDP on 8080, and
//!   `/hostname` answers the container's hostname (in a pod, the pod's name).
//!
//! Needs root, podman, debootstrap, containerd and runc (scripts/install-deps.sh) and the
//! component binaries beside `kube-ovn-lab` (`cargo build --workspace --bins`). The first run
//! debootstraps and installs the packages (minutes); the base and layers are cached under
//! `$KUBE_OVN_RS_CACHE` (default: the temp dir).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, ensure};
use kube_ovn_dataplane::Netns;
use kube_ovn_lab::netexec::{http_get_in, udp_request_in};
use kube_ovn_lab::runtime::component_image::{
    COMPONENT_BINARIES, COMPONENT_IMAGE, COMPONENT_IMAGE_SHORT, component_image_archive,
};
use kube_ovn_lab::runtime::containerd::{self, CRI_NAMESPACE, CniDirs, Instance, Snapshotter};
use kube_ovn_lab::runtime::images::{self, NETEXEC_IMAGE, NETEXEC_IMAGE_NORMALIZED, netexec_image_archive};
use kube_ovn_testkit::{Daemon, run, wait_until};

const WAIT: Duration = Duration::from_secs(30);

/// The directory cargo built `kube-ovn-lab` into, with the component binaries beside it.
fn built_binaries() -> Result<PathBuf> {
    let dir = Path::new(env!("CARGO_BIN_EXE_kube-ovn-lab"))
        .parent()
        .context("the binary's directory")?
        .to_owned();
    for b in COMPONENT_BINARIES {
        ensure!(
            dir.join(b).is_file(),
            "{b} is not in {} (run `cargo build --workspace --bins` first)",
            dir.display()
        );
    }
    Ok(dir)
}

/// The layers of a docker archive, from its `manifest.json`.
fn archive_layers(archive: &Path) -> Result<Vec<String>> {
    let out = Command::new("tar")
        .arg("-xOf")
        .arg(archive)
        .arg("manifest.json")
        .output()?;
    ensure!(out.status.success(), "tar manifest.json of {}", archive.display());
    let manifest: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let layers = manifest[0]["Layers"]
        .as_array()
        .context("manifest.json without Layers")?;
    Ok(layers
        .iter()
        .filter_map(|l| l.as_str().map(str::to_owned))
        .collect())
}

/// The names the CRI plugin of the containerd at `socket` gives the image a pod names as
/// `image`, as a kubelet asks (`ImageStatus`); empty when it has no such image.
async fn cri_image_names(socket: &Path, image: &str) -> Result<Vec<String>> {
    use hyper_util::rt::TokioIo;
    use kube_ovn_lab::runtime::cri::api::image_service_client::ImageServiceClient;
    use kube_ovn_lab::runtime::cri::api::{ImageSpec, ImageStatusRequest};
    let path = socket.to_owned();
    // The URI is required and unused: the connector dials the socket.
    let channel = tonic::transport::Endpoint::from_static("http://[::1]:0")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await?;
    let status = ImageServiceClient::new(channel)
        .image_status(ImageStatusRequest {
            image: Some(ImageSpec {
                image: image.to_owned(),
                ..ImageSpec::default()
            }),
            verbose: false,
        })
        .await?
        .into_inner();
    Ok(status.image.map(|i| i.repo_tags).unwrap_or_default())
}

fn modified(path: &Path) -> Result<SystemTime> {
    Ok(std::fs::metadata(path)?.modified()?)
}

/// A containerd of our own whose CRI plugin uses `overlayfs`, as a kubelet's does.
struct Containerd {
    instance: Instance,
    daemon: Daemon,
    dir: tempfile::TempDir,
}

impl Containerd {
    fn start(name: &str) -> Result<Self> {
        let dir = tempfile::Builder::new().prefix("containerd-").tempdir()?;
        let instance = Instance::new(
            dir.path(),
            CniDirs {
                bin_dir: dir.path().join("cni-bin"),
                conf_dir: dir.path().join("net.d"),
            },
        );
        instance.prepare()?;
        let config = instance
            .config_toml()
            .replace("\"io.containerd.snapshotter.v1.overlayfs\",\n", "")
            .replace("snapshotter = \"native\"", "snapshotter = \"overlayfs\"");
        ensure!(config.contains("snapshotter = \"overlayfs\""), "{config}");
        std::fs::write(instance.config_path(), config)?;
        let (program, args) = instance.command();
        let mut daemon = Daemon::spawn(name, &program, &args, &dir.path().join("containerd.log"), &[])?;
        let socket = instance.socket();
        wait_until(&format!("{name}: containerd's socket"), WAIT, || {
            daemon.check_alive()?;
            Ok(socket.exists())
        })
        .with_context(|| daemon.log_tail(30))?;
        Ok(Self {
            instance,
            daemon,
            dir,
        })
    }

    /// `ctr` on this instance, in the CRI plugin's namespace.
    fn ctr(&self, args: &[&str]) -> Result<String> {
        let out = Command::new("ctr")
            .arg("--address")
            .arg(self.instance.socket())
            .args(["--namespace", CRI_NAMESPACE])
            .args(args)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.success(),
            "ctr {}: {}: {text}",
            args.join(" "),
            out.status
        );
        Ok(text)
    }

    /// `image` run to completion with `command` in a fresh container; its output.
    fn run(&self, image: &str, id: &str, command: &[&str]) -> Result<String> {
        let mut args = vec!["run", "--rm", "--snapshotter", "overlayfs", image, id];
        args.extend_from_slice(command);
        self.ctr(&args)
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        self.daemon.stop();
        for pid in self.instance.shim_pids() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX)),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        // overlayfs snapshots of a container that outlived a failed test.
        let _ = Command::new("umount")
            .args(["--recursive", "--lazy"])
            .arg(self.dir.path().join("state"))
            .stderr(std::process::Stdio::null())
            .status();
    }
}

#[test]
fn the_component_image_is_built_from_deploy_dockerfile_cached_and_runs_in_containerd() -> Result<()> {
    let cache = images::default_cache_root();
    // The binaries in a directory of the test's own, so one can be changed below.
    let bins = tempfile::Builder::new().prefix("kube-ovn-rs-bins-").tempdir()?;
    let built = built_binaries()?;
    for b in COMPONENT_BINARIES {
        std::fs::copy(built.join(b), bins.path().join(b))?;
    }

    // The times are printed for docs/benchmarks.md (`--nocapture`); nothing asserts on them.
    let clock = Instant::now();
    let archive = component_image_archive(&cache, bins.path())?;
    eprintln!("component image: built in {:?}", clock.elapsed());
    let first_layers = archive_layers(&archive)?;
    let first_modified = modified(&archive)?;
    // The same binaries: the cached archive, not rewritten.
    let clock = Instant::now();
    let again = component_image_archive(&cache, bins.path())?;
    eprintln!("component image: cached in {:?}", clock.elapsed());
    ensure!(again == archive, "{} then {}", archive.display(), again.display());
    ensure!(
        modified(&again)? == first_modified,
        "the second build with the same binaries rewrote the archive"
    );
    // A changed binary (a byte more, ignored by the loader): a new archive whose layers are the
    // first's but the last, the binaries'.
    let shim = bins.path().join("kube-ovn");
    let mut bytes = std::fs::read(&shim)?;
    bytes.push(0);
    std::fs::write(&shim, bytes)?;
    let clock = Instant::now();
    let rebuilt = component_image_archive(&cache, bins.path())?;
    eprintln!(
        "component image: rebuilt after a binary changed in {:?}, archive {} MB",
        clock.elapsed(),
        std::fs::metadata(&rebuilt)?.len() / 1_000_000
    );
    ensure!(
        modified(&rebuilt)? != first_modified,
        "a changed binary gave the cached archive"
    );
    let layers = archive_layers(&rebuilt)?;
    ensure!(
        layers.len() == first_layers.len()
            && layers[..layers.len() - 1] == first_layers[..first_layers.len() - 1]
            && layers.last() != first_layers.last(),
        "only the binaries' layer should be new:\nbefore {first_layers:?}\nafter {layers:?}"
    );

    let runtime = Containerd::start("containerd-images")?;
    let clock = Instant::now();
    containerd::import(&runtime.instance.socket(), &rebuilt, Snapshotter::Overlayfs)?;
    eprintln!("component image: imported (overlayfs) in {:?}", clock.elapsed());
    let listed = runtime.ctr(&["images", "list", "--quiet"])?;
    ensure!(
        listed.lines().any(|l| l == COMPONENT_IMAGE),
        "{COMPONENT_IMAGE} not in\n{listed}"
    );
    // What a kubelet asks for the manifests' `image: kube-ovn-rs:dev`.
    let names = tokio::runtime::Runtime::new()?
        .block_on(cri_image_names(&runtime.instance.socket(), COMPONENT_IMAGE_SHORT))?;
    ensure!(
        names.iter().any(|n| n == COMPONENT_IMAGE),
        "the CRI has {COMPONENT_IMAGE_SHORT} as {names:?}"
    );
    let help = runtime.run(
        COMPONENT_IMAGE,
        "kube-ovn-help",
        &["kube-ovn-controller", "--help"],
    )?;
    ensure!(
        help.contains("--ovn-nb-addr"),
        "kube-ovn-controller --help:\n{help}"
    );
    for (id, command) in [
        ("vswitchd-version", ["ovs-vswitchd", "--version"]),
        ("northd-version", ["ovn-northd", "--version"]),
    ] {
        let out = runtime.run(COMPONENT_IMAGE, id, &command)?;
        ensure!(
            out.contains("Open vSwitch") || out.contains("Open Virtual Network"),
            "{}: {out}",
            command.join(" ")
        );
    }
    // The layout of the Dockerfile's final stage: binaries and start scripts in /kube-ovn, the
    // binaries on PATH.
    let listing = runtime.run(
        COMPONENT_IMAGE,
        "layout",
        &[
            "sh",
            "-c",
            "ls -l /kube-ovn/ /usr/bin/kube-ovn-daemon && test -x /kube-ovn/start-ovs.sh",
        ],
    )?;
    for name in [
        "start-ovn-central.sh",
        "start-ovs.sh",
        "/usr/bin/kube-ovn-daemon -> /kube-ovn/kube-ovn-daemon",
    ]
    .into_iter()
    .chain(COMPONENT_BINARIES)
    {
        ensure!(listing.contains(name), "{name} not in\n{listing}");
    }
    Ok(())
}

/// A network namespace (`ip netns`) and a UTS namespace with a hostname, for a container to join;
/// removed when dropped.
struct PodNamespaces {
    netns: String,
    uts: PathBuf,
}

impl PodNamespaces {
    fn new(hostname: &str) -> Result<Self> {
        let netns = format!("kol-img-{}", std::process::id());
        let uts = std::env::temp_dir().join(format!("kol-img-uts-{}", std::process::id()));
        kube_ovn_testkit::netns::add_netns(&netns)?;
        let made = Self { netns, uts };
        std::fs::write(&made.uts, "")?;
        let uts_arg = format!("--uts={}", made.uts.display());
        run("unshare", &[&uts_arg, "hostname", hostname])?;
        Ok(made)
    }
}

impl Drop for PodNamespaces {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.uts).status();
        let _ = std::fs::remove_file(&self.uts);
        let _ = kube_ovn_testkit::netns::del_netns(&self.netns);
    }
}

#[tokio::test]
async fn a_container_naming_only_the_netexec_image_serves_8080_as_its_hostname() -> Result<()> {
    let cache = images::default_cache_root();
    let archive = netexec_image_archive(&cache, Path::new(env!("CARGO_BIN_EXE_kube-ovn-lab")))?;
    let runtime = Containerd::start("containerd-netexec")?;
    containerd::import(&runtime.instance.socket(), &archive, Snapshotter::Overlayfs)?;
    let listed = runtime.ctr(&["images", "list", "--quiet"])?;
    for name in [NETEXEC_IMAGE, NETEXEC_IMAGE_NORMALIZED] {
        ensure!(listed.lines().any(|l| l == name), "{name} not in\n{listed}");
    }
    // What a kubelet asks for the lab's pods' `image: kube-ovn-lab/netexec`.
    let names = cri_image_names(&runtime.instance.socket(), "kube-ovn-lab/netexec").await?;
    ensure!(
        names.iter().any(|n| n == NETEXEC_IMAGE_NORMALIZED),
        "the CRI has kube-ovn-lab/netexec as {names:?}"
    );

    let pod = PodNamespaces::new("web-1")?;
    let netns_arg = format!("network:/run/netns/{}", pod.netns);
    let uts_arg = format!("uts:{}", pod.uts.display());
    // No command, no arguments: the image's ENTRYPOINT and CMD.
    runtime.ctr(&[
        "run",
        "--detach",
        "--snapshotter",
        "overlayfs",
        "--with-ns",
        &netns_arg,
        "--with-ns",
        &uts_arg,
        NETEXEC_IMAGE_NORMALIZED,
        "netexec-1",
    ])?;
    let netns = Netns::open(format!("/run/netns/{}", pod.netns))?;
    let server: SocketAddr = "127.0.0.1:8080".parse()?;
    let served = async {
        let deadline = tokio::time::Instant::now() + WAIT;
        let http = loop {
            match http_get_in(&netns, server, "/hostname", Duration::from_secs(1)).await {
                Ok(answer) => break answer.body,
                Err(e) if tokio::time::Instant::now() >= deadline => {
                    anyhow::bail!("netexec never answered HTTP on {server}: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        let udp = udp_request_in(&netns, server, "hostname", Duration::from_secs(2)).await?;
        Ok((http, udp))
    }
    .await;
    // Removed before the verdict, so a failure leaves no task behind.
    runtime.ctr(&["task", "delete", "--force", "netexec-1"])?;
    runtime.ctr(&["container", "delete", "netexec-1"])?;
    let (http, udp) = served?;
    ensure!(http == "web-1", "HTTP /hostname answered {http:?}");
    ensure!(udp == "web-1", "UDP hostname answered {udp:?}");
    Ok(())
}
