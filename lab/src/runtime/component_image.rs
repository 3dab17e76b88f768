//! The kube-ovn-rs image (`deploy/Dockerfile`) built on this machine, where no registry is
//! reachable, for the containerds of the lab's nodes: the file users build is the file the lab
//! runs. Two things are made here instead of pulled:
//!
//! - the runtime base, Debian 12 from `debootstrap --variant=minbase`, imported as
//!   [`BASE_IMAGE`] (the Dockerfile's `RUNTIME_IMAGE`);
//! - the binaries, given as a directory (`--build-context binaries=DIR` replaces the
//!   Dockerfile's `binaries` stage, so its cargo builder is skipped).
//!
//! podman's storage is kept under the cache root (`overlay` driver), so the base and the layers
//! the Dockerfile makes before the binaries (the packages, the links, the start scripts) are built
//! once: new binaries make one new layer. The image is saved as a docker archive, which
//! `ctr images import` loads ([`super::containerd::import`]); the archive is kept beside the
//! storage with the key of its inputs (the Dockerfile, the start scripts, the base and each
//! binary's path, size and modification time) and returned without podman while the key holds.
//! Packages are not in the key: removing the cache directory gets Debian's newest.

use std::fmt::Write as _;
use std::fs::File;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::images::file_stamp;
use super::{INSTALL_HINT, RuntimeError, io_err};

/// The image's name as the kubelet normalizes the manifests' `kube-ovn-rs:dev`.
pub const COMPONENT_IMAGE: &str = "docker.io/library/kube-ovn-rs:dev";
/// The image's name in `deploy/base`'s manifests.
pub const COMPONENT_IMAGE_SHORT: &str = "kube-ovn-rs:dev";
/// The binaries the image carries, all in the directory given to [`component_image_archive`].
pub const COMPONENT_BINARIES: [&str; 6] = [
    "kube-ovn-controller",
    "kube-ovn-daemon",
    "kube-ovn",
    "kube-ovn-speaker",
    "kube-ovn-pinger",
    "kube-ovn-monitor",
];
/// The debootstrapped Debian 12 the Dockerfile's packages are installed on.
pub const BASE_IMAGE: &str = "localhost/kube-ovn-rs/debian:bookworm";

/// The Dockerfile and the files of the repository it copies, at their paths in the repository
/// (the build context is a directory holding just these).
const DOCKERFILE: &str = include_str!("../../../deploy/Dockerfile");
/// The start scripts (made executable in the context).
const CONTEXT_FILES: [(&str, &str); 2] = [
    (
        "deploy/image/start-ovn-central.sh",
        include_str!("../../../deploy/image/start-ovn-central.sh"),
    ),
    (
        "deploy/image/start-ovs.sh",
        include_str!("../../../deploy/image/start-ovs.sh"),
    ),
];
/// The cache entry's directory under the cache root.
const CACHE_NAME: &str = "kube-ovn-rs-component-image";
/// Where Debian is debootstrapped from (`$DEBIAN_MIRROR` overrides, as in scripts/build-image.sh).
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// The kube-ovn-rs image as a docker archive tagged [`COMPONENT_IMAGE`], with the binaries of
/// `binaries_dir` (see the module doc for what is cached).
pub fn component_image_archive(cache_root: &Path, binaries_dir: &Path) -> Result<PathBuf, RuntimeError> {
    for (program, package) in [
        ("/usr/bin/podman", "podman"),
        ("/usr/sbin/debootstrap", "debootstrap"),
    ] {
        if !Path::new(program).is_file() {
            return Err(RuntimeError::Missing {
                what: format!("{program} (Debian's {package}) for the kube-ovn-rs image"),
                hint: INSTALL_HINT,
            });
        }
    }
    let missing: Vec<&str> = COMPONENT_BINARIES
        .into_iter()
        .filter(|b| !binaries_dir.join(b).is_file())
        .collect();
    if !missing.is_empty() {
        return Err(RuntimeError::Other {
            what: format!("the kube-ovn-rs image's binaries in {}", binaries_dir.display()),
            reason: format!("missing {}", missing.join(", ")),
        });
    }
    let dir = cache_root.join(CACHE_NAME);
    std::fs::create_dir_all(&dir).map_err(io_err("creating the image cache", &dir))?;
    // One build at a time per cache, across threads and processes (podman's storage has its
    // own locks; this keeps two builds from racing on the base and the archive).
    let lock_path = dir.join("lock");
    let lock = File::create(&lock_path).map_err(io_err("creating", &lock_path))?;
    lock.lock().map_err(io_err("locking", &lock_path))?;

    let mirror = std::env::var("DEBIAN_MIRROR").unwrap_or_else(|_| DEFAULT_MIRROR.to_owned());
    let base_key = base_key(&mirror);
    let mut stamps = Vec::new();
    for b in COMPONENT_BINARIES {
        stamps.push(file_stamp(&binaries_dir.join(b))?);
    }
    let key = image_key(&base_key, &stamps);
    let archive = dir.join("image.tar");
    let key_path = dir.join("key");
    if std::fs::read_to_string(&key_path).is_ok_and(|k| k == key) && archive.is_file() {
        return Ok(archive);
    }

    tracing::info!(binaries = %binaries_dir.display(), cache = %dir.display(), "building the kube-ovn-rs image from deploy/Dockerfile");
    let podman = Podman::new(&dir)?;
    ensure_base(&podman, &dir, &mirror, &base_key)?;
    let work = podman.scratch_dir()?;
    let context = work.path().join("context");
    write_context(&context)?;
    let dockerfile = context.join("deploy/Dockerfile");
    podman.run(&[
        "build",
        "--network=host",
        "--pull=never",
        "--layers",
        "--build-arg",
        &format!("RUNTIME_IMAGE={BASE_IMAGE}"),
        "--build-context",
        &format!("binaries={}", binaries_dir.display()),
        "--file",
        &dockerfile.display().to_string(),
        "--tag",
        COMPONENT_IMAGE,
        &context.display().to_string(),
    ])?;
    let saved = work.path().join("image.tar");
    podman.run(&[
        "save",
        "--format",
        "docker-archive",
        "--output",
        &saved.display().to_string(),
        COMPONENT_IMAGE,
    ])?;
    // The key goes last: an interrupted update leaves no key, never a key naming another archive.
    let _ = std::fs::remove_file(&key_path);
    std::fs::rename(&saved, &archive).map_err(io_err("moving the archive to", &archive))?;
    std::fs::write(&key_path, &key).map_err(io_err("writing", &key_path))?;
    // The image the tag left is no one's: it goes, then its parents that only it used (each
    // prune removes the images no other image builds on, which the previous one may have made).
    // The cached layers under the new image stay.
    for _ in 0..8 {
        if podman.run(&["image", "prune", "--force"])?.trim().is_empty() {
            break;
        }
    }
    Ok(archive)
}

/// What the base image is made from.
fn base_key(mirror: &str) -> String {
    format!(
        "debootstrap --variant=minbase bookworm {mirror}\n{}",
        sources_list(mirror)
    )
}

/// The apt sources of the base: the release, its updates and security.
fn sources_list(mirror: &str) -> String {
    format!(
        "deb {mirror} bookworm main\ndeb {mirror} bookworm-updates main\n\
         deb http://deb.debian.org/debian-security bookworm-security main\n"
    )
}

/// What the archive is made from: the Dockerfile and context files, the base, each binary.
fn image_key(base_key: &str, binary_stamps: &[String]) -> String {
    let mut key = format!("{DOCKERFILE}\n{base_key}\n");
    for (path, text) in CONTEXT_FILES {
        let _ = writeln!(key, "{path} {}", text.len());
        key.push_str(text);
    }
    for stamp in binary_stamps {
        key.push_str(stamp);
        key.push('\n');
    }
    key
}

/// The build context: the Dockerfile and the files it copies, at their repository paths (the
/// repository itself would send its target directory).
fn write_context(context: &Path) -> Result<(), RuntimeError> {
    // The start scripts are run as commands: their mode is copied into the image.
    let files = std::iter::once(("deploy/Dockerfile", DOCKERFILE, 0o644))
        .chain(CONTEXT_FILES.map(|(path, text)| (path, text, 0o755)));
    for (path, text, mode) in files {
        let to = context.join(path);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        std::fs::write(&to, text).map_err(io_err("writing", &to))?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))
            .map_err(io_err("setting the mode of", &to))?;
    }
    Ok(())
}

/// The debootstrapped base in podman's storage, made now unless it is there with `base_key`.
fn ensure_base(podman: &Podman, dir: &Path, mirror: &str, base_key: &str) -> Result<(), RuntimeError> {
    let key_path = dir.join("base.key");
    if std::fs::read_to_string(&key_path).is_ok_and(|k| k == base_key)
        && podman.run(&["image", "exists", BASE_IMAGE]).is_ok()
    {
        return Ok(());
    }
    let _ = std::fs::remove_file(&key_path);
    let work = podman.scratch_dir()?;
    let rootfs = work.path().join("rootfs");
    let rootfs_arg = rootfs.display().to_string();
    tracing::info!(%mirror, "debootstrapping Debian 12 for the kube-ovn-rs image (once per cache)");
    let bootstrapped = checked(
        Command::new("debootstrap").args(["--variant=minbase", "bookworm", &rootfs_arg, mirror]),
        "debootstrap --variant=minbase bookworm",
    );
    if bootstrapped.is_err() {
        // A failed debootstrap may leave /proc and /sys mounted in the rootfs.
        unmount_under(&rootfs);
    }
    bootstrapped?;
    let sources = rootfs.join("etc/apt/sources.list");
    std::fs::write(&sources, sources_list(mirror)).map_err(io_err("writing", &sources))?;
    // debootstrap's downloads and lists are not part of the image.
    for cache in ["var/cache/apt/archives", "var/lib/apt/lists"] {
        let cache = rootfs.join(cache);
        for entry in std::fs::read_dir(&cache)
            .map_err(io_err("reading", &cache))?
            .flatten()
        {
            let path = entry.path();
            if path.is_file() {
                std::fs::remove_file(&path).map_err(io_err("removing", &path))?;
            }
        }
    }
    let mut tar = Command::new("tar")
        .args(["-C", &rootfs_arg, "-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(io_err("running tar on", &rootfs))?;
    let stdout = tar.stdout.take().map_or_else(Stdio::null, Stdio::from);
    let imported = checked(
        podman
            .command(&[
                "import",
                "--message",
                "debootstrap --variant=minbase bookworm",
                "-",
                BASE_IMAGE,
            ])
            .stdin(stdout),
        "podman import (the debootstrapped base)",
    );
    let tar_status = tar.wait().map_err(io_err("waiting for tar on", &rootfs))?;
    imported?;
    if !tar_status.success() {
        return Err(RuntimeError::Other {
            what: format!("tar of {}", rootfs.display()),
            reason: tar_status.to_string(),
        });
    }
    std::fs::write(&key_path, base_key).map_err(io_err("writing", &key_path))
}

/// podman with its storage under `dir`: nothing lands in the machine's image store.
struct Podman {
    root: PathBuf,
    runroot: PathBuf,
    tmp: PathBuf,
}

impl Podman {
    fn new(dir: &Path) -> Result<Self, RuntimeError> {
        // What an interrupted build left goes first (the caller holds the cache's lock): a
        // killed debootstrap leaves its rootfs with /proc and /sys mounted.
        let tmp = dir.join("tmp");
        unmount_under(&tmp);
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(io_err("removing", &tmp))?;
        }
        std::fs::create_dir_all(&tmp).map_err(io_err("creating", &tmp))?;
        Ok(Self {
            root: dir.join("storage"),
            // podman records the run root in its database and refuses another one later, and
            // the path must be short (at most 50 characters): one per storage, named by a hash
            // of its path, in /run (a tmpfs, so gone with the locks it holds after a reboot).
            runroot: PathBuf::from(format!("/run/kube-ovn-rs-podman-{:016x}", fnv1a(dir))),
            tmp,
        })
    }

    /// A directory for one build's files, removed when dropped.
    fn scratch_dir(&self) -> Result<tempfile::TempDir, RuntimeError> {
        tempfile::Builder::new()
            .prefix("build-")
            .tempdir_in(&self.tmp)
            .map_err(io_err("creating a build dir in", &self.tmp))
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("podman");
        command
            .arg("--root")
            .arg(&self.root)
            .arg("--runroot")
            .arg(&self.runroot)
            .args(["--storage-driver", "overlay"])
            // No private bind mount of the storage on itself, which a podman killed mid-build
            // would leave behind (and which would keep the cache from being removed).
            .args(["--storage-opt", "overlay.skip_mount_home=true"])
            .args(args)
            // podman and buildah's large temporary files (layers being saved) stay in the cache.
            .env("TMPDIR", &self.tmp);
        command
    }

    fn run(&self, args: &[&str]) -> Result<String, RuntimeError> {
        checked(&mut self.command(args), &format!("podman {}", args.join(" ")))
    }
}

/// Unmounts (lazily, deepest first) every mount at or under `dir`; failures are left to the
/// removal that follows, which then names the path.
fn unmount_under(dir: &Path) {
    let _ = crate::mounts::unmount_under(dir);
}

/// FNV-1a of a path's bytes: a stable name for the path (std's hasher is not stable across
/// releases).
fn fnv1a(path: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt as _;
    path.as_os_str()
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Runs `command`; a failure carries the end of its output (a build's error is at the end of
/// its stdout, podman's own on stderr).
fn checked(command: &mut Command, what: &str) -> Result<String, RuntimeError> {
    // `output` captures stdout and stderr.
    let out = command.output().map_err(|e| RuntimeError::Other {
        what: what.to_owned(),
        reason: format!("{e} (is it installed? {INSTALL_HINT})"),
    })?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        return Ok(stdout);
    }
    let mut tail = String::new();
    for text in [stdout.as_str(), &String::from_utf8_lossy(&out.stderr)] {
        let lines: Vec<&str> = text.lines().collect();
        for line in &lines[lines.len().saturating_sub(20)..] {
            tail.push_str(line);
            tail.push('\n');
        }
    }
    Err(RuntimeError::Other {
        what: what.to_owned(),
        reason: format!("{}:\n{}", out.status, tail.trim_end()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The repository files the Dockerfile's final stage copies from the build context (`COPY`
    /// without `--from`): the context [`write_context`] makes must hold each.
    fn dockerfile_context_copies(dockerfile: &str) -> Vec<String> {
        let mut files = Vec::new();
        for line in dockerfile.lines().map(str::trim) {
            let Some(rest) = line.strip_prefix("COPY ") else {
                continue;
            };
            if rest.contains("--from=") {
                continue;
            }
            let words: Vec<&str> = rest.split_whitespace().collect();
            // The last word is the destination; `COPY . .` is the builder's (skipped here).
            if let Some((_, sources)) = words.split_last() {
                files.extend(sources.iter().filter(|s| **s != ".").map(|s| (*s).to_owned()));
            }
        }
        files
    }

    #[test]
    fn the_lab_context_holds_every_file_the_dockerfile_copies() {
        let copies = dockerfile_context_copies(DOCKERFILE);
        assert!(
            !copies.is_empty(),
            "no COPY of repository files in deploy/Dockerfile"
        );
        for file in &copies {
            assert!(
                CONTEXT_FILES.iter().any(|(path, _)| path == file),
                "deploy/Dockerfile copies {file}, which CONTEXT_FILES lacks"
            );
        }
    }

    #[test]
    fn the_binaries_come_from_the_binaries_stage_or_context() {
        let line = DOCKERFILE
            .lines()
            .find(|l| l.starts_with("COPY --from=binaries "))
            .expect("deploy/Dockerfile's final stage copies from `binaries`");
        for b in COMPONENT_BINARIES {
            assert!(line.split_whitespace().any(|w| w == b), "{b} not in {line}");
        }
        assert!(DOCKERFILE.contains("FROM scratch AS binaries"));
    }

    #[test]
    fn the_key_changes_with_a_binary_and_the_mirror() {
        let base = base_key(DEFAULT_MIRROR);
        let stamps = vec!["kube-ovn <- /b/kube-ovn 10 1".to_owned()];
        let key = image_key(&base, &stamps);
        assert_eq!(key, image_key(&base, &stamps));
        assert_ne!(
            key,
            image_key(&base, &["kube-ovn <- /b/kube-ovn 10 2".to_owned()])
        );
        assert_ne!(key, image_key(&base_key("http://mirror.example/debian"), &stamps));
    }

    #[test]
    fn the_run_root_is_short_and_stable() {
        let a = fnv1a(Path::new(
            "/var/lib/kube-ovn-lab/.image-cache/kube-ovn-rs-component-image",
        ));
        assert_eq!(
            a,
            fnv1a(Path::new(
                "/var/lib/kube-ovn-lab/.image-cache/kube-ovn-rs-component-image"
            ))
        );
        assert_ne!(a, fnv1a(Path::new("/tmp/kube-ovn-rs-component-image")));
        assert!(format!("/run/kube-ovn-rs-podman-{a:016x}").len() <= 50);
    }
}
