//! A real container runtime for the lab's pods and for the CNI tests: containerd 1.6 (Debian 12's)
//! with its CRI plugin, driven over the CRI as a kubelet drives it.
//!
//! - [`cri`]: the kubelet's side of the CRI (`runtime.v1`): sandboxes and containers over the
//!   runtime's unix socket, with the configs a kubelet builds for a pod.
//! - [`containerd`]: one containerd instance of our own (root, state, sockets and config in a
//!   directory we pick; CNI dirs = what the node daemon installed), how to wait for it, load
//!   images into it, and take it down without leaving sandboxes, shims or mounts.
//! - [`images`]: the images such an instance needs, built here because these machines reach no
//!   registry: the pause image (Debian's static busybox) and `kube-ovn-lab/netexec` (this crate's
//!   `kube-ovn-lab` binary and the libraries it links), both `FROM scratch`.
//! - [`component_image`]: the kube-ovn-rs image itself, `deploy/Dockerfile` built on a
//!   debootstrapped Debian 12 with the binaries of a directory, layers cached.
//!
//! How containerd is run (a test's child process, or a detached lab process in a node's network
//! namespace) is the caller's choice: this module gives the config and command line.

pub mod component_image;
pub mod containerd;
pub mod cri;
pub mod images;

use std::path::PathBuf;

pub use kube_ovn_testkit::CommandError;

/// What can go wrong preparing or driving a runtime; each names the file, program or call.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {hint}")]
    Missing { what: String, hint: &'static str },
    #[error(transparent)]
    Command(#[from] CommandError),
    #[error("{what}: {reason}")]
    Other { what: String, reason: String },
}

/// An [`RuntimeError::Io`] maker for `path`.
fn io_err(what: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> RuntimeError {
    let path = path.into();
    move |source| RuntimeError::Io { what, path, source }
}

/// What to run when a program is missing.
const INSTALL_HINT: &str = "run scripts/install-deps.sh";
