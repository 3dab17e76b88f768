//! Error types. Every error names what it is about: the remote, the method, the table, the row.
//!
//! The protocol modules ([`crate::rpc`], [`crate::cache`], the client) return these types; this
//! module depends on none of them, only on [`crate::reply`] for a failed transaction's error.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::reply::TransactError;

/// A broken byte stream or message. The connection that produced it is dropped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("framing: {0}")]
    Framing(String),
    #[error("malformed JSON: {0}")]
    Json(String),
    #[error("invalid message: {0}")]
    Invalid(String),
}

/// The `error` member of a failed response (RFC 7047 §4.1.1 and JSON-RPC 1.0).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
pub struct RpcError {
    pub error: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.details {
            Some(d) => write!(f, "{}: {d}", self.error),
            None => f.write_str(&self.error),
        }
    }
}

/// A typed row could not be built from what the server holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{table} row {uuid}: column {column}: expected {expected}, found {found}")]
pub struct DecodeError {
    pub table: &'static str,
    pub uuid: Uuid,
    pub column: &'static str,
    pub expected: &'static str,
    pub found: String,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid OVSDB remote {remote:?}: {reason}")]
    InvalidRemote { remote: String, reason: String },

    #[error("OVSDB {remote}: {source}")]
    Io {
        remote: String,
        #[source]
        source: std::io::Error,
    },

    /// A step of session setup (connect, `get_schema`, the `_Server` check, the initial monitor
    /// reply) got no answer within the connect timeout: the server accepted the connection but
    /// does not serve it (stopped, or busy with a long RAFT compaction). `waited` is the timeout:
    /// the answer did not begin within it, or paused that long. The next remote is tried.
    #[error("OVSDB {remote}: session setup stalled: no answer to {step} within {waited:?}")]
    Stalled {
        remote: String,
        step: String,
        waited: Duration,
    },

    /// The server answers but cannot serve us: a RAFT follower when the leader is wanted, a
    /// member cut off from its cluster, or one whose log is behind what was already seen.
    #[error("OVSDB {remote}: not usable: {reason}")]
    NotUsable { remote: String, reason: String },

    #[error("OVSDB {remote}: protocol error: {source}")]
    Protocol {
        remote: String,
        #[source]
        source: ProtocolError,
    },

    #[error("OVSDB {method} failed: {error}")]
    Rpc { method: String, error: RpcError },

    #[error(transparent)]
    Transact(#[from] TransactError),

    #[error("table {table} is not in the server's {database} schema")]
    UnknownTable { database: String, table: String },

    #[error(
        "column {table}.{column} is not in the server's {database} schema (version {version}), \
         and the value to write is not the column's default"
    )]
    UnknownColumn {
        database: String,
        version: String,
        table: String,
        column: String,
    },

    #[error(transparent)]
    Decode(#[from] DecodeError),

    #[error("not connected to any of [{remotes}] within {waited:?}")]
    NotConnected { remotes: String, waited: Duration },

    #[error(
        "connection to {remote} was lost before the reply to {method}; a transaction may or may not \
         have committed"
    )]
    ConnectionLost { remote: String, method: String },

    #[error("OVSDB {method}: no reply within {waited:?}")]
    Timeout { method: String, waited: Duration },

    #[error("the OVSDB client has been shut down")]
    Closed,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
