//! Network namespace handles and running code inside one.

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
    pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> Result<T> {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    setns(self.file.as_fd(), CloneFlags::CLONE_NEWNET).map_err(|errno| Error::Netns {
                        path: self.path.clone(),
                        source: errno.into(),
                    })?;
                    Ok(f())
                })
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    }
}
