//! The images a runtime of ours needs, built on this machine (no registry is reachable): each is
//! a `FROM scratch` image built with Debian's `podman` in a throwaway storage dir (nothing lands
//! in the machine's image store), saved as a docker archive, and cached; `ctr images import`
//! loads the archive into a containerd ([`super::containerd::import`]).
//!
//! - the pause image: Debian's static busybox running `sleep` (the runtime stops a sandbox with
//!   SIGKILL, so PID 1 needs no signal handling);
//! - `kube-ovn-lab/netexec`: the `kube-ovn-lab` binary, whose `netexec` subcommand is the server,
//!   with the shared libraries `ldd` says it links, at the same paths. A pod that only names the
//!   image runs `kube-ovn-lab netexec --http-port=8080 --udp-port=8080` (`ENTRYPOINT` and
//!   `CMD`), answering `/hostname` with the pod's name (its hostname); the kubelet stand-in
//!   passes its own command and arguments. Saved as `localhost/kube-ovn-lab/netexec:latest`
//!   (the stand-in's name) and `docker.io/kube-ovn-lab/netexec:latest` (a kubelet's, normalized
//!   from the pods' `kube-ovn-lab/netexec`).
//!
//! A cache entry is a directory holding the archive and the key of its inputs (the Containerfile
//! and each input file's path, size and modification time); it is used only when the key is the
//! current one, so a rebuilt binary or an upgraded busybox gives a new image.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{INSTALL_HINT, RuntimeError, io_err};
use kube_ovn_testkit::run;

/// The pause image's name, as containerd's `sandbox_image` refers to it.
pub const PAUSE_IMAGE: &str = "localhost/kube-ovn-rs/pause:1";
/// The netexec image's name in the runtime for the kubelet stand-in. Pods ask for
/// `kube-ovn-lab/netexec` with any tag; the stand-in runs this image for them (there is nothing
/// to pull from).
pub const NETEXEC_IMAGE: &str = "localhost/kube-ovn-lab/netexec:latest";
/// The netexec image's name as a kubelet normalizes the pods' `kube-ovn-lab/netexec`.
pub const NETEXEC_IMAGE_NORMALIZED: &str = "docker.io/kube-ovn-lab/netexec:latest";
/// What the image runs for a pod that only names it (`CMD` after the `ENTRYPOINT`
/// `kube-ovn-lab netexec`): HTTP and UDP on 8080, as agnhost's netexec; `/hostname` answers the
/// system hostname, which in a pod is the pod's name.
const NETEXEC_DEFAULT_ARGS: &str = r#""--http-port=8080", "--udp-port=8080""#;
/// Where the netexec image has the binary.
pub const NETEXEC_BINARY: &str = "/kube-ovn-lab";

/// Where Debian's `busybox-static` puts the binary.
const BUSYBOX: &str = "/bin/busybox";

/// The image cache: `$KUBE_OVN_RS_CACHE`, else [`MACHINE_CACHE`].
pub fn default_cache_root() -> PathBuf {
    std::env::var_os("KUBE_OVN_RS_CACHE").map_or_else(|| PathBuf::from(MACHINE_CACHE), PathBuf::from)
}

/// The machine's image cache when `$KUBE_OVN_RS_CACHE` is not set: one for every lab and test
/// (the component image's debootstrapped base takes a minute to make; its layers are reused).
pub const MACHINE_CACHE: &str = "/var/cache/kube-ovn-rs";

/// An image to build: its tag, its Containerfile, and files copied into the build context.
struct ImageInputs {
    /// The cache entry's directory name under the cache root.
    cache_name: &'static str,
    /// The names the image is saved under (the first is the one it is built as).
    tags: &'static [&'static str],
    containerfile: String,
    /// (path in the build context, file on this machine).
    files: Vec<(PathBuf, PathBuf)>,
}

impl ImageInputs {
    /// What the cached archive must have been built from.
    fn key(&self) -> Result<String, RuntimeError> {
        let mut key = self.containerfile.clone();
        for (at, from) in &self.files {
            let _ = write!(key, "\n{} <- {}", at.display(), file_stamp(from)?);
        }
        Ok(key)
    }
}

/// A file's identity in a cache key: its path, size and modification time (a rebuilt binary
/// or an upgraded package changes it; reading the contents would cost more than a build).
pub(super) fn file_stamp(path: &Path) -> Result<String, RuntimeError> {
    let meta = std::fs::metadata(path).map_err(io_err("image input", path))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    Ok(format!("{} {} {mtime}", path.display(), meta.len()))
}

/// The pause image as a docker archive.
pub fn pause_image_archive(cache_root: &Path) -> Result<PathBuf, RuntimeError> {
    if !Path::new(BUSYBOX).is_file() {
        return Err(RuntimeError::Missing {
            what: format!("{BUSYBOX} (Debian's busybox-static) for the pause image"),
            hint: INSTALL_HINT,
        });
    }
    build_cached(
        cache_root,
        &ImageInputs {
            cache_name: "kube-ovn-rs-pause-image",
            tags: &[PAUSE_IMAGE],
            containerfile:
                "FROM scratch\nCOPY rootfs/ /\nENTRYPOINT [\"/bin/busybox\", \"sleep\", \"2147483647\"]\n"
                    .into(),
            files: vec![("rootfs/bin/busybox".into(), BUSYBOX.into())],
        },
    )
}

/// The netexec image as a docker archive, built from `binary` (a `kube-ovn-lab` executable).
pub fn netexec_image_archive(cache_root: &Path, binary: &Path) -> Result<PathBuf, RuntimeError> {
    let libraries = linked_libraries(binary)?;
    let mut files = vec![(
        Path::new("rootfs").join(NETEXEC_BINARY.trim_start_matches('/')),
        binary.to_owned(),
    )];
    let mut dirs: Vec<String> = Vec::new();
    for lib in &libraries {
        let inside = lib.strip_prefix("/").unwrap_or(lib);
        files.push((Path::new("rootfs").join(inside), lib.clone()));
        if let Some(dir) = lib.parent().map(|d| d.display().to_string())
            && !dirs.contains(&dir)
        {
            dirs.push(dir);
        }
    }
    build_cached(
        cache_root,
        &ImageInputs {
            cache_name: "kube-ovn-lab-netexec-image",
            tags: &[NETEXEC_IMAGE, NETEXEC_IMAGE_NORMALIZED],
            containerfile: netexec_containerfile(&dirs),
            files,
        },
    )
}

/// The netexec image's Containerfile, its libraries in `library_dirs`.
fn netexec_containerfile(library_dirs: &[String]) -> String {
    // The loader finds the libraries where ldd found them, whatever its built-in search path.
    let env = if library_dirs.is_empty() {
        String::new()
    } else {
        format!("ENV LD_LIBRARY_PATH={}\n", library_dirs.join(":"))
    };
    format!(
        "FROM scratch\nCOPY rootfs/ /\n{env}ENTRYPOINT [\"{NETEXEC_BINARY}\", \"netexec\"]\n\
         CMD [{NETEXEC_DEFAULT_ARGS}]\n"
    )
}

/// The shared libraries (the dynamic loader included) `binary` links, by `ldd`.
fn linked_libraries(binary: &Path) -> Result<Vec<PathBuf>, RuntimeError> {
    let path = binary.display().to_string();
    let out = std::process::Command::new("ldd")
        .arg(&path)
        .output()
        .map_err(io_err("running ldd on", binary))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // A static binary needs nothing beside it.
        if String::from_utf8_lossy(&out.stderr).contains("not a dynamic executable")
            || text.contains("statically linked")
        {
            return Ok(Vec::new());
        }
        return Err(RuntimeError::Other {
            what: format!("ldd {path}"),
            reason: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    parse_ldd(&text).map_err(|reason| RuntimeError::Other {
        what: format!("ldd {path}"),
        reason,
    })
}

/// The library paths in `ldd`'s output: `name => /path (addr)` and `/path/ld.so (addr)`; the
/// vDSO has no file.
pub fn parse_ldd(text: &str) -> Result<Vec<PathBuf>, String> {
    let mut libs = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let target = match line.split_once("=>") {
            Some((name, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(format!("{} is not found", name.trim()));
                }
                rest
            }
            None => line,
        };
        if let Some(path) = target.split_whitespace().next().filter(|p| p.starts_with('/')) {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// The archive of `inputs`, from the cache or built now.
fn build_cached(cache_root: &Path, inputs: &ImageInputs) -> Result<PathBuf, RuntimeError> {
    // One build at a time in this process; other processes race safely (the rename below).
    static BUILD: Mutex<()> = Mutex::new(());
    let _one = BUILD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let key = inputs.key()?;
    let cache = cache_root.join(inputs.cache_name);
    let archive = cache.join("image.tar");
    if std::fs::read_to_string(cache.join("key")).is_ok_and(|k| k == key) && archive.is_file() {
        return Ok(archive);
    }
    std::fs::create_dir_all(cache_root).map_err(io_err("creating the image cache", cache_root))?;
    let work = tempfile::Builder::new()
        .prefix(".image-build")
        .tempdir_in(cache_root)
        .map_err(io_err("creating a build dir in", cache_root))?;
    let context = work.path().join("context");
    for (at, from) in &inputs.files {
        let to = context.join(at);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        }
        std::fs::copy(from, &to).map_err(io_err("copying into the image", from))?;
    }
    let containerfile = context.join("Containerfile");
    std::fs::write(&containerfile, &inputs.containerfile).map_err(io_err("writing", &containerfile))?;
    // podman's storage in the throwaway dir: nothing lands in the machine's image store. Its
    // run root must be a path of at most 50 characters, which a cache root may not give.
    let runroot_dir = tempfile::Builder::new()
        .prefix("kol-podman-")
        .tempdir_in("/tmp")
        .map_err(io_err("creating podman's run root in", "/tmp"))?;
    let podman = |args: &[&str]| {
        let root = work.path().join("storage").display().to_string();
        let runroot = runroot_dir.path().display().to_string();
        let mut full = vec!["--root", &root, "--runroot", &runroot, "--storage-driver", "vfs"];
        full.extend_from_slice(args);
        run("podman", &full)
    };
    let context_dir = context.display().to_string();
    let mut build = vec!["build", "--quiet"];
    for tag in inputs.tags {
        build.extend(["--tag", tag]);
    }
    build.push(&context_dir);
    podman(&build)?;
    let entry = work.path().join("entry");
    std::fs::create_dir(&entry).map_err(io_err("creating", &entry))?;
    let built = entry.join("image.tar");
    let output = built.display().to_string();
    let mut save = vec!["save", "--format", "docker-archive", "--output", &output];
    save.extend_from_slice(inputs.tags);
    podman(&save)?;
    std::fs::write(entry.join("key"), &key).map_err(io_err("writing the key of", &built))?;
    // The entry becomes the cache by one rename; a process that renamed first wins, and its
    // result is as good when its key is ours.
    let _ = std::fs::remove_dir_all(&cache);
    if std::fs::rename(&entry, &cache).is_err()
        && !(std::fs::read_to_string(cache.join("key")).is_ok_and(|k| k == key) && archive.is_file())
    {
        return Err(RuntimeError::Other {
            what: format!("image {}", inputs.tags.join(", ")),
            reason: format!("cannot put the archive into {}", cache.display()),
        });
    }
    Ok(archive)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_naming_only_the_netexec_image_serves_8080_as_its_hostname() {
        let file = netexec_containerfile(&["/lib/x86_64-linux-gnu".to_owned(), "/lib64".to_owned()]);
        assert!(
            file.contains("ENV LD_LIBRARY_PATH=/lib/x86_64-linux-gnu:/lib64\n"),
            "{file}"
        );
        assert!(
            file.ends_with(
                "ENTRYPOINT [\"/kube-ovn-lab\", \"netexec\"]\nCMD [\"--http-port=8080\", \"--udp-port=8080\"]\n"
            ),
            "{file}"
        );
        // No --hostname: netexec answers the system hostname, the pod's name.
        assert!(!file.contains("hostname"), "{file}");
    }

    #[test]
    fn ldd_output_gives_the_files_to_copy() {
        let text = "\tlinux-vdso.so.1 (0x00007ffd)\n\
            \tlibgcc_s.so.1 => /lib/x86_64-linux-gnu/libgcc_s.so.1 (0x00007f01)\n\
            \tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f02)\n\
            \t/lib64/ld-linux-x86-64.so.2 (0x00007f03)\n";
        assert_eq!(
            parse_ldd(text).unwrap(),
            [
                PathBuf::from("/lib/x86_64-linux-gnu/libgcc_s.so.1"),
                "/lib/x86_64-linux-gnu/libc.so.6".into(),
                "/lib64/ld-linux-x86-64.so.2".into()
            ]
        );
        let err = parse_ldd("\tlibfoo.so.1 => not found\n").unwrap_err();
        assert!(err.contains("libfoo.so.1"), "{err}");
    }
}
