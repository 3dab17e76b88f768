//! Shared helpers for the tests against real `ovsdb-server`s.

#![allow(dead_code)] // each test binary uses a different subset

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kube_ovn_ovsdb::{Client, ClientConfig, ConnectionState, Operation, Remote, Row, Uuid};

pub const WAIT: Duration = Duration::from_secs(30);

pub use kube_ovn_testkit::init_logging;

pub fn config(remotes: &str, database: &str) -> ClientConfig {
    init_logging();
    let mut c = ClientConfig::new(Remote::parse_list(remotes).unwrap(), database);
    c.request_timeout = Duration::from_secs(30);
    c.backoff_max = Duration::from_millis(500);
    c
}

pub async fn connect(remotes: &str, database: &str) -> Client {
    Client::connect(config(remotes, database))
        .await
        .expect("client connects")
}

/// Every row of `table` as the server has it now, through a `select` (not the replica).
pub async fn server_rows(client: &Client, table: &str) -> BTreeMap<Uuid, Row> {
    let results = client
        .transact(vec![Operation::select(table, vec![])])
        .await
        .expect("select");
    results[0]
        .rows()
        .unwrap()
        .iter()
        .map(|r| {
            let mut r = r.clone();
            let uuid = r
                .remove("_uuid")
                .and_then(|v| v.set_elements().and_then(|e| e[0].as_uuid()))
                .unwrap();
            r.remove("_version");
            (uuid, r)
        })
        .collect()
}

/// The replica's rows of `table`, normalised the same way as [`server_rows`].
pub fn replica_rows(client: &Client, table: &str) -> BTreeMap<Uuid, Row> {
    client.read(|c| c.table(table).map(|(u, r)| (*u, (**r).clone())).collect())
}

/// The replica equals a fresh `select` for `table`, column by column after normalisation.
pub async fn assert_replica_matches(client: &Client, table: &str) {
    let schema = client.schema().unwrap();
    let ts = schema.table(table).unwrap();
    let normalize = |rows: BTreeMap<Uuid, Row>| -> BTreeMap<Uuid, Row> {
        rows.into_iter()
            .map(|(u, r)| {
                let r = r
                    .into_iter()
                    .filter_map(|(c, v)| match ts.columns.get(&c) {
                        // Absent and default are the same value (see `DbCache`).
                        Some(cs) => {
                            let v = v.normalize(&cs.ty);
                            (v != cs.ty.default_value()).then_some((c, v))
                        }
                        None => Some((c, v)),
                    })
                    .collect();
                (u, r)
            })
            .collect()
    };
    let server = normalize(server_rows(client, table).await);
    let replica = normalize(replica_rows(client, table));
    assert_eq!(
        replica.len(),
        server.len(),
        "{table}: replica has {} rows, server {}",
        replica.len(),
        server.len()
    );
    for (uuid, srow) in &server {
        let rrow = replica
            .get(uuid)
            .unwrap_or_else(|| panic!("{table} row {uuid} missing from the replica"));
        assert_eq!(rrow, srow, "{table} row {uuid} differs");
    }
}

/// UUIDs `ovn-nbctl` lists for a table: the independent oracle.
pub fn nbctl_uuids(output: &str) -> BTreeSet<Uuid> {
    output
        .lines()
        .filter_map(|l| Uuid::parse_str(l.trim()).ok())
        .collect()
}

pub async fn wait_ready_on(client: &Client, what: &str) {
    client
        .wait_ready(WAIT)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
}

pub fn ready_remote(client: &Client) -> Option<Remote> {
    match &*client.state().borrow() {
        ConnectionState::Ready { remote } => Some(remote.clone()),
        _ => None,
    }
}

/// A small deterministic generator, so a failing random sequence can be replayed by seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % (n as u64)).unwrap()
    }
}

/// Log output collected in memory. Install it with [`Captured::install`] in a current-thread
/// runtime (`#[tokio::test]`'s default): the client's task then runs, and logs, on the test's
/// thread.
#[derive(Clone, Default)]
pub struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    /// Captures everything at `DEBUG` and above on this thread until the guard drops.
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        let writer = self.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }

    /// The lines at `level` that contain `words`.
    pub fn lines(&self, level: &str, words: &str) -> Vec<String> {
        let text =
            String::from_utf8_lossy(&self.0.lock().unwrap_or_else(PoisonError::into_inner)).into_owned();
        text.lines()
            .filter(|l| l.contains(&format!(" {level} ")) && l.contains(words))
            .map(str::to_owned)
            .collect()
    }
}
