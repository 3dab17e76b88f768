//! What can go wrong talking to the kernel, with the object named in every message.

use std::io;
use std::path::PathBuf;

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The namespace path does not exist (the runtime already removed it, or a typo).
    #[error("network namespace {} does not exist", path.display())]
    NetnsMissing {
        /// The path given.
        path: PathBuf,
    },
    /// The namespace could not be opened or entered.
    #[error("network namespace {}: {source}", path.display())]
    Netns {
        /// The path given.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A netlink request failed.
    #[error("{op} in {ns}: {source}")]
    Netlink {
        /// What we asked, with the object (`add veth 1234_h`).
        op: String,
        /// The namespace, by path.
        ns: String,
        /// rtnetlink's error (carries the kernel's errno).
        source: rtnetlink::Error,
    },
    /// A link we need is not there.
    #[error("link {name} not found in {ns}")]
    LinkMissing {
        /// The link name.
        name: String,
        /// The namespace, by path.
        ns: String,
    },
    /// A program (`nft`) refused or could not run; `message` is what it said.
    #[error("{op}: {message}")]
    Command {
        /// What we ran, with the namespace.
        op: String,
        /// Its error output, or why it could not start.
        message: String,
    },
    /// A system call or /proc write failed.
    #[error("{op}: {source}")]
    Io {
        /// What we did, with the object.
        op: String,
        /// The OS error.
        source: io::Error,
    },
}

/// Result with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The kernel's errno for a failed netlink request.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Netlink {
                source: rtnetlink::Error::NetlinkError(msg),
                ..
            } => Some(-msg.raw_code()),
            Self::Io { source, .. } | Self::Netns { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// Whether the object was simply not there (`ENODEV`, `ENOENT`, `ESRCH`, or one of ours).
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NetnsMissing { .. } | Self::LinkMissing { .. })
            || matches!(
                self.errno(),
                Some(libc::ENODEV | libc::ENOENT | libc::ESRCH | libc::EADDRNOTAVAIL)
            )
    }

    /// Whether the object already exists (`EEXIST`).
    pub fn is_exists(&self) -> bool {
        self.errno() == Some(libc::EEXIST)
    }
}
