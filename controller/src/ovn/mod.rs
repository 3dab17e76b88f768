//! The controller's side of OVN's northbound database: pure plans over the replica ([`plan`],
//! [`owned`], [`topology`]) and [`Nb`], which applies them and measures how long that takes.

pub mod owned;
pub mod plan;
pub mod topology;

use std::time::Instant;

use kube_ovn_ovsdb::{Client, DbCache, OperationResult};

pub use plan::{Plan, RowRef};

use crate::metrics::Metrics;

/// The northbound client of the controller.
#[derive(Clone)]
pub struct Nb {
    client: Client,
    metrics: Metrics,
}

impl Nb {
    pub fn new(client: Client, metrics: Metrics) -> Self {
        Self { client, metrics }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads the replica. Keep `f` short: it holds the replica's read lock.
    pub fn read<R>(&self, f: impl FnOnce(&DbCache) -> R) -> R {
        self.client.read(f)
    }

    /// Applies a plan in one transaction (nothing to do for an empty plan). `what` names the
    /// change for logs and the transaction-latency metric.
    pub async fn apply(
        &self,
        plan: Plan,
        what: &'static str,
    ) -> Result<Vec<OperationResult>, kube_ovn_ovsdb::Error> {
        if plan.is_empty() {
            return Ok(Vec::new());
        }
        let ops = plan.len();
        let start = Instant::now();
        let result = self.client.transact(plan.into_ops()).await;
        self.metrics
            .ovsdb_transaction(what, result.is_ok(), start.elapsed());
        match &result {
            Ok(_) => tracing::debug!(
                what,
                ops,
                elapsed_ms = start.elapsed().as_millis(),
                "northbound transaction"
            ),
            Err(e) => tracing::warn!(what, ops, error = %e, "northbound transaction failed"),
        }
        result
    }
}
