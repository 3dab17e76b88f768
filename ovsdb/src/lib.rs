//! An OVSDB (RFC 7047) client for OVN and Open vSwitch, built for a Kubernetes controller and a
//! node agent.
//!
//! - [`data`], [`wire`], [`schema`], [`rpc`], [`ops`], [`reply`], [`cache`], [`table`]: the pure
//!   codec: values and their JSON, schemas, framing, typed operations and their results, monitor
//!   updates and the replica they feed, typed rows.
//!   No I/O; each is tested input → output and fuzzed.
//! - [`client`]: the I/O: unix and TCP transports (with TCP keepalive), session setup bounded
//!   step by step, inactivity probe, reconnect with backoff over several remotes (RAFT leader
//!   only), `monitor_cond_since` resume, change subscriptions, readiness.
//! - [`tables`]: typed rows of OVN_Northbound, OVN_Southbound and Open_vSwitch.
//!
//! ```no_run
//! # async fn demo() -> Result<(), kube_ovn_ovsdb::Error> {
//! use kube_ovn_ovsdb::{Client, ClientConfig, Operation, Remote, Table, tables::nb::LogicalSwitch};
//!
//! let remotes = Remote::parse_list("unix:/run/ovn/ovnnb_db.sock")?;
//! let nb = Client::connect(ClientConfig::new(remotes, "OVN_Northbound")).await?;
//! let ls = LogicalSwitch { name: "ovn-default".into(), ..Default::default() };
//! nb.transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())]).await?;
//! assert!(nb.rows::<LogicalSwitch>()?.iter().any(|s| s.name == "ovn-default"));
//! # Ok(()) }
//! ```

pub mod cache;
pub mod change;
pub mod client;
pub mod data;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
pub mod ops;
pub mod remote;
pub mod reply;
pub mod rpc;
pub mod schema;
pub mod table;
pub mod tables;
mod typed_value;
pub mod wire;

pub use cache::{Change, ChangeKind, DbCache};
pub use client::{ChangeSet, Client, ClientConfig, ClientStats, ConnectionState, MonitorTables};
pub use data::{Atom, Row, Value};
pub use error::{DecodeError, Error, ProtocolError, Result};
pub use ops::{Condition, Function, Mutation, Mutator, Operation, WaitUntil};
pub use remote::Remote;
pub use reply::{OperationResult, TransactError};
pub use schema::DatabaseSchema;
pub use table::Table;
pub use uuid::Uuid;
