//! One collection, every `--ovs.poll-interval`: what Kube-OVN's `ovnMetricsUpdate` gathers,
//! read from the control sockets, the files and replicas of NB and SB, into a [`Snapshot`].
//!
//! Differences from Kube-OVN (v1.16.2), on purpose:
//! - `cluster/status` is asked once per database and collection (Kube-OVN asks three times),
//!   and a database that fails does not stop the other from being reported.
//! - the NB and SB sockets and control sockets are the flags' (Kube-OVN's appctl calls ignore
//!   `--database.*.socket.control` and use `/var/run/ovn/ovn{nb,sb}_db.ctl`).
//! - a storage error is reported in `kube_ovn_db_status` but no restore script is run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use kube_ovn_ovsdb::tables::nb::{LogicalSwitch, LogicalSwitchPort};
use kube_ovn_ovsdb::{Client, ClientConfig, MonitorTables, Remote};

use crate::appctl::{self, appctl};
use crate::cluster_status;
use crate::flags::{Config, Database};
use crate::inventory::{
    self, Inventory, NB_TABLES, Rows, SB_TABLES, SbChassis, SbDatapathBinding, SbEncap, SbPortBinding,
};
use crate::metrics::Snapshot;

/// Why the collector could not start.
#[derive(Debug, thiserror::Error)]
#[error("--{flag}: {source}")]
pub struct StartError {
    flag: &'static str,
    // Boxed: the client's error is large and this one is returned once, at start.
    source: Box<kube_ovn_ovsdb::Error>,
}

pub struct Collector {
    config: Config,
    nb: Client,
    sb: Client,
    /// Failed requests to OVN since start.
    failures: AtomicU64,
}

fn replica(
    db: &Database,
    flag: &'static str,
    tables: &[&str],
    timeout: Duration,
) -> Result<Client, StartError> {
    let remotes = Remote::parse_list(&db.remote).map_err(|source| StartError {
        flag,
        source: Box::new(source),
    })?;
    let mut config = ClientConfig::new(remotes, db.name.clone()).monitor(MonitorTables::Only(
        tables.iter().map(|t| (*t).to_owned()).collect(),
    ));
    // The sidecar reads its own member's replica, leader or not, as Kube-OVN's does.
    config.leader_only = false;
    config.connect_timeout = timeout;
    config.request_timeout = timeout;
    Ok(Client::start(config))
}

impl Collector {
    /// Starts the NB and SB clients; they connect (and reconnect) in the background.
    pub fn start(config: Config) -> Result<Self, StartError> {
        let nb = replica(
            &config.nb,
            "database.northbound.socket.remote",
            NB_TABLES,
            config.timeout,
        )?;
        let sb = replica(
            &config.sb,
            "database.southbound.socket.remote",
            SB_TABLES,
            config.timeout,
        )?;
        Ok(Self {
            config,
            nb,
            sb,
            failures: AtomicU64::new(0),
        })
    }

    /// Gives the NB and SB clients `--ovs.timeout` to connect before the first collection (as
    /// Kube-OVN connects first), so a healthy start counts no failed request.
    pub async fn wait_ready(&self) {
        let timeout = self.config.timeout;
        let (nb, sb) = tokio::join!(self.nb.wait_ready(timeout), self.sb.wait_ready(timeout));
        for (db, result) in [(&self.config.nb.name, nb), (&self.config.sb.name, sb)] {
            if let Err(error) = result {
                tracing::warn!(%error, database = %db, "not connected yet; collecting anyway");
            }
        }
    }

    fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(%error, "{what}");
    }

    /// Gathers everything once.
    pub async fn collect(&self) -> Snapshot {
        let c = &self.config;
        let mut s = Snapshot {
            hostname: c.hostname.clone(),
            ..Snapshot::default()
        };
        for db in [&c.nb, &c.sb] {
            let status = appctl(&db.control, "cluster/status", &[db.name.as_str()], c.timeout).await;
            let (health, servers) = match &status {
                Ok(text) => match cluster_status::parse(text) {
                    Ok(parsed) => {
                        let health = parsed.health();
                        s.clusters.push((db.name.clone(), parsed));
                        (health, appctl::servers_text(text))
                    }
                    Err(error) => {
                        tracing::warn!(%error, database = %db.name, "cluster/status");
                        (0, String::new())
                    }
                },
                Err(error) => {
                    tracing::warn!(%error, database = %db.name, "cluster/status");
                    (0, String::new())
                }
            };
            s.ovn_status.push((db.component.to_owned(), health));
            s.status_content.push((db.component.to_owned(), servers));
            match appctl(
                &db.control,
                "ovsdb-server/get-db-storage-status",
                &[db.name.as_str()],
                c.timeout,
            )
            .await
            {
                Ok(text) => s.db_status.push((db.name.clone(), appctl::storage_ok(&text))),
                Err(error) => {
                    tracing::warn!(%error, database = %db.name, "storage status");
                    s.db_status.push((db.name.clone(), false));
                }
            }
            match appctl::file_size(&db.data_file) {
                Ok(size) => s.db_files.push((db.name.clone(), size)),
                Err(error) => tracing::warn!(%error, database = %db.name, "database file size"),
            }
        }
        s.ovn_status.push(("ovn-northd".to_owned(), self.northd().await));
        for (component, path) in [
            ("ovsdb-server-southbound", &c.sb.log_file),
            ("ovsdb-server-northbound", &c.nb.log_file),
            ("ovn-northd", &c.northd_log_file),
        ] {
            match appctl::file_size(path) {
                Ok(size) => s
                    .log_files
                    .push((component.to_owned(), path.display().to_string(), size)),
                Err(error) => self.failed("log file size", &error),
            }
        }
        match appctl::is_clustered(&c.nb.data_file) {
            Ok(clustered) => s.cluster_enabled = Some((c.nb.data_file.display().to_string(), clustered)),
            Err(error) => {
                tracing::warn!(%error, "whether the northbound database is clustered");
                s.cluster_enabled = Some((c.nb.data_file.display().to_string(), false));
            }
        }
        s.inventory = self.inventory();
        s.failed_requests = self.failures.load(Ordering::Relaxed);
        s
    }

    async fn northd(&self) -> u8 {
        let control = match appctl::northd_control(&self.config.northd_pid_file) {
            Ok(control) => control,
            Err(error) => {
                tracing::warn!(%error, "ovn-northd's control socket");
                return 0;
            }
        };
        match appctl(&control, "status", &[], self.config.timeout).await {
            Ok(text) => appctl::northd_health(&text),
            Err(error) => {
                tracing::warn!(%error, "ovn-northd status");
                0
            }
        }
    }

    /// Logical switches and ports from the NB replica and chassis and bindings from the SB one;
    /// a replica that is not in sync counts as a failed request and leaves its part empty
    /// (Kube-OVN reads the two independently too). `None` when neither is there.
    fn inventory(&self) -> Option<Inventory> {
        let text = |e: kube_ovn_ovsdb::DecodeError| e.to_string();
        let nb = self.nb.readiness().and_then(|()| {
            Ok((
                self.nb.rows::<LogicalSwitch>().map_err(text)?,
                self.nb.rows::<LogicalSwitchPort>().map_err(text)?,
            ))
        });
        let sb = self.sb.readiness().and_then(|()| {
            Ok((
                self.sb.rows::<SbChassis>().map_err(text)?,
                self.sb.rows::<SbEncap>().map_err(text)?,
                self.sb.rows::<SbDatapathBinding>().map_err(text)?,
                self.sb.rows::<SbPortBinding>().map_err(text)?,
            ))
        });
        let mut rows = Rows::default();
        let mut any = false;
        match nb {
            Ok((switches, ports)) => {
                (rows.switches, rows.ports) = (switches, ports);
                any = true;
            }
            Err(error) => self.failed("logical switches and ports", &error),
        }
        match sb {
            Ok((chassis, encaps, datapaths, bindings)) => {
                (rows.chassis, rows.encaps, rows.datapaths, rows.bindings) =
                    (chassis, encaps, datapaths, bindings);
                any = true;
            }
            Err(error) => self.failed("chassis and bindings", &error),
        }
        any.then(|| inventory::build(&rows))
    }
}
