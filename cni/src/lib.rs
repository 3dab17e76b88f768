//! The `kube-ovn` CNI plugin's logic, without I/O: reading the `CNI_*` environment ([`env`])
//! and the network config ([`config`]), the versions we speak ([`version`]), the spec's error
//! JSON ([`error`]), the ADD result ([`result`]), a minimal HTTP/1.1 codec for the daemon's
//! unix socket ([`http`]), and one whole invocation behind a transport trait ([`shim`]).
//!
//! The binary `kube-ovn` adds only the process edges: environment, stdin, the socket, stdout,
//! exit status. The node daemon (`kube-ovn-daemon`) is the `kube-ovn-node` crate, which depends on
//! this one for the wire types; this crate's own dependencies (serde, ipnet, the api wire types)
//! are all the shim links, so it carries no tokio, netlink or kube client.

pub mod config;
pub mod env;
pub mod error;
pub mod http;
pub mod result;
pub mod shim;
pub mod version;

pub use error::{CniError, ErrorCode};
