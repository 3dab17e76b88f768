//! Network namespace handles and running code inside one (blocking, or awaited from async code).

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::sched::{CloneFlags, setns};

use crate::error::{Error, Result};

/// An open network namespace (the fd keeps it alive while held, even if its bind mount goes).
#[derive(Debug, Clone)]
pub struct Netns {
    file: Arc<File>,
    path: PathBuf,
}

impl Netns {
    /// Opens the namespace at `path` (`/var/run/netns/<name>` or `/proc/<pid>/ns/net`).
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_owned();
        match File::open(&path) {
            Ok(file) => Ok(Self {
                file: Arc::new(file),
                path,
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::NetnsMissing { path }),
            Err(source) => Err(Error::Netns { path, source }),
        }
    }

    /// The namespace this process was started in.
    pub fn current() -> Result<Self> {
        Self::open("/proc/self/ns/net")
    }

    /// The path it was opened from, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as text, for messages.
    pub fn label(&self) -> String {
        self.path.display().to_string()
    }

    pub(crate) fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Runs `f` on a new thread that has entered this namespace, and waits for it. The thread
    /// ends with `f`, so no other code ever runs in the wrong namespace. Sockets opened by `f`
    /// stay bound to this namespace after it returns.
    ///
    /// The caller's thread blocks until `f` is done: use it at start-up, in tests, or on a
    /// thread of its own; from async code use [`run_async`](Self::run_async).
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    self.enter()?;
                    Ok(f())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }

    /// [`run`](Self::run) for async callers: `f` runs on a fresh thread that entered this
    /// namespace, and the calling task awaits its result instead of joining the thread, so a
    /// runtime worker never sits blocked while the thread starts, enters and works (a
    /// sysctl write, an ioctl, opening a socket: short, but not bounded under load). A panic
    /// in `f` resumes in the caller, as with `run`. If the caller is dropped first, the thread
    /// still finishes `f` and its result is discarded.
    pub async fn run_async<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        let (done, result) = tokio::sync::oneshot::channel();
        let ns = self.clone();
        std::thread::Builder::new()
            .name("netns".into())
            .spawn(move || {
                let outcome = ns
                    .enter()
                    .map(|()| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
                // The receiver is gone only when the caller gave up; nobody wants the value.
                let _ = done.send(outcome);
            })
            .map_err(|source| Error::Io {
                op: format!("start a thread to enter {}", self.label()),
                source,
            })?;
        match result.await {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(panic))) => std::panic::resume_unwind(panic),
            Ok(Err(e)) => Err(e),
            // `catch_unwind` covers `f` and `enter` does not panic, so the sender is only
            // dropped unsent if the thread was torn down from outside.
            Err(_) => Err(Error::Io {
                op: format!("run in {}: the thread ended without an answer", self.label()),
                source: std::io::Error::other("thread ended"),
            }),
        }
    }

    /// Moves the calling thread into this namespace (for the threads `run*` start, only).
    fn enter(&self) -> Result<()> {
        // setns(2) needs CAP_SYS_ADMIN even into the namespace the thread is already in; a
        // component run without it (the speaker's DaemonSet drops every capability but
        // NET_ADMIN and NET_BIND_SERVICE) works in its own namespace, so that case is a no-op.
        if self.is_current_thread_namespace() {
            return Ok(());
        }
        setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|errno| Error::Netns {
            path: self.path.clone(),
            source: errno.into(),
        })
    }

    /// Whether this thread is in this namespace already (same device and inode as
    /// `/proc/thread-self/ns/net`).
    fn is_current_thread_namespace(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        let (Ok(mine), Ok(current)) = (
            self.file.metadata(),
            std::fs::metadata("/proc/thread-self/ns/net"),
        ) else {
            return false;
        };
        mine.dev() == current.dev() && mine.ino() == current.ino()
    }
}
