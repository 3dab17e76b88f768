//! The controller's side of OVN's northbound database: pure plans over the replica ([`plan`],
//! [`owned`], [`topology`]) and [`Nb`], which applies them.
//!
//! Plans from concurrent reconciles are committed together ("group commit"): while one
//! transaction is in flight, the plans that arrive queue up and go in the next one. Under load,
//! a hundred pods cost one round trip and one `ovn-northd` recomputation instead of a hundred.
//! If a merged transaction fails, each plan is retried alone, so one bad plan cannot fail the
//! others.
//!
//! ```text
//!   reconcilers ── apply(plan) ──▶ queue ──▶ batcher task ──▶ transact(merged) ──▶ results split
//!                                                  └── on failure: transact each plan alone
//! ```

pub mod lb;
pub mod owned;
pub mod plan;
pub mod priority;
pub mod topology;

use std::ops::Range;
use std::time::Instant;

use kube_ovn_ovsdb::{Client, DbCache, OperationResult};
use tokio::sync::{mpsc, oneshot};

pub use plan::{Plan, RowRef};

use crate::metrics::Metrics;

/// Operations per merged transaction, at most: big enough to amortise a round trip, small enough
/// that one transaction does not hold the server for long.
const MAX_BATCH_OPS: usize = 4000;

/// How long a batch waits for more plans while plans keep coming (see [`batcher`]); a plan that
/// arrives when the batcher has been idle goes out at once.
const LINGER: std::time::Duration = std::time::Duration::from_millis(20);

type Reply = oneshot::Sender<Result<Vec<OperationResult>, kube_ovn_ovsdb::Error>>;

struct Job {
    plan: Plan,
    what: &'static str,
    reply: Reply,
}

/// The northbound client of the controller.
#[derive(Clone)]
pub struct Nb {
    client: Client,
    jobs: mpsc::UnboundedSender<Job>,
    /// The supervised batcher, aborted with the last clone.
    _batcher: Option<std::sync::Arc<kube_ovn_support::AbortOnDrop<()>>>,
}

impl Nb {
    /// Starts the batcher; it stops when the last `Nb` clone is dropped.
    pub fn new(client: Client, metrics: Metrics) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        tokio::spawn(batcher(client.clone(), metrics, rx));
        Self {
            client,
            jobs,
            _batcher: None,
        }
    }

    /// [`Self::new`], the batcher running under `supervisor`: were it to panic, every later
    /// write would fail with `Closed` while the controller looked alive; instead `/livez` fails
    /// naming it, and kubelet restarts the controller.
    pub fn supervised(client: Client, metrics: Metrics, supervisor: &kube_ovn_support::Supervisor) -> Self {
        let (jobs, rx) = mpsc::unbounded_channel();
        let task = supervisor.spawn_owned("nb-batcher", batcher(client.clone(), metrics, rx));
        Self {
            client,
            jobs,
            _batcher: Some(std::sync::Arc::new(task)),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Reads the replica. Keep `f` short: it holds the replica's read lock.
    pub fn read<R>(&self, f: impl FnOnce(&DbCache) -> R) -> R {
        self.client.read(f)
    }

    /// Applies a plan (nothing to do for an empty one). `what` names the change for logs and the
    /// transaction-latency metric. When it returns `Ok`, the replica holds the changes.
    pub async fn apply(
        &self,
        plan: Plan,
        what: &'static str,
    ) -> Result<Vec<OperationResult>, kube_ovn_ovsdb::Error> {
        if plan.is_empty() {
            return Ok(Vec::new());
        }
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job { plan, what, reply })
            .map_err(|_| kube_ovn_ovsdb::Error::Closed)?;
        rx.await.map_err(|_| kube_ovn_ovsdb::Error::Closed)?
    }
}

impl Nb {
    /// Returns once every transaction sent before it has been answered — also one whose caller
    /// stopped waiting (`--ovn-timeout`) while the server, slow, may still commit it — so the
    /// replica then shows that transaction's outcome. The server answers one connection's
    /// transactions in order; this sends an empty one behind them (merged with whatever else is
    /// queued, so it costs nothing under load).
    pub async fn barrier(&self) -> Result<(), kube_ovn_ovsdb::Error> {
        let (reply, rx) = oneshot::channel();
        self.jobs
            .send(Job {
                plan: Plan::new(),
                what: "barrier",
                reply,
            })
            .map_err(|_| kube_ovn_ovsdb::Error::Closed)?;
        rx.await.map_err(|_| kube_ovn_ovsdb::Error::Closed)?.map(drop)
    }
}

async fn batcher(client: Client, metrics: Metrics, mut rx: mpsc::UnboundedReceiver<Job>) {
    // When the last transaction ended; plans arriving soon after it are a stream, and waiting a
    // moment for more of them costs each little and saves the server and ovn-northd a round.
    let mut last_end: Option<Instant> = None;
    while let Some(first) = rx.recv().await {
        let mut jobs = vec![first];
        let mut ops = jobs[0].plan.len();
        let busy = last_end.is_some_and(|t| t.elapsed() < LINGER);
        let deadline = tokio::time::Instant::now() + LINGER;
        while ops < MAX_BATCH_OPS {
            let job = match rx.try_recv() {
                Ok(job) => job,
                Err(mpsc::error::TryRecvError::Empty) if busy => {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(job)) => job,
                        _ => break,
                    }
                }
                Err(_) => break,
            };
            ops += job.plan.len();
            jobs.push(job);
        }
        crate::crash_point::reached(crate::crash_point::NB_SUBMITTED);
        if jobs.len() == 1 {
            let job = jobs.pop().expect("one job");
            let result = transact(&client, &metrics, job.plan, job.what).await;
            last_end = Some(Instant::now());
            let _ = job.reply.send(result);
            continue;
        }
        let mut merged = Plan::new();
        let mut ranges: Vec<Range<usize>> = Vec::with_capacity(jobs.len());
        let plans: Vec<Plan> = jobs.iter_mut().map(|j| std::mem::take(&mut j.plan)).collect();
        let kept = plans
            .iter()
            .map(|p| Plan::from_ops(p.ops().to_vec()))
            .collect::<Vec<_>>();
        for plan in plans {
            let start = merged.len();
            merged.extend(plan);
            ranges.push(start..merged.len());
        }
        let result = transact(&client, &metrics, merged, "batch").await;
        last_end = Some(Instant::now());
        match result {
            Ok(results) => {
                for (job, range) in jobs.into_iter().zip(ranges) {
                    let _ = job.reply.send(Ok(results[range].to_vec()));
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, plans = jobs.len(), "merged transaction failed; applying plans one by one");
                for (job, plan) in jobs.into_iter().zip(kept) {
                    let result = transact(&client, &metrics, plan, job.what).await;
                    let _ = job.reply.send(result);
                }
            }
        }
    }
}

async fn transact(
    client: &Client,
    metrics: &Metrics,
    plan: Plan,
    what: &'static str,
) -> Result<Vec<OperationResult>, kube_ovn_ovsdb::Error> {
    let ops = plan.len();
    let start = Instant::now();
    let result = client.transact(plan.into_ops()).await;
    metrics.ovsdb_transaction(what, result.is_ok(), start.elapsed());
    if result.is_ok() {
        crate::crash_point::reached(crate::crash_point::NB_COMMITTED);
    }
    match &result {
        Ok(_) => tracing::debug!(
            what,
            ops,
            elapsed_ms = start.elapsed().as_millis(),
            "northbound transaction"
        ),
        Err(e) => tracing::debug!(what, ops, error = %e, "northbound transaction failed"),
    }
    result
}
