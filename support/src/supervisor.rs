//! Named background tasks whose end is a failure: a [`Supervisor`] runs a daemon's long-lived
//! tasks (the node daemon's node, QoS and gateway tasks, the speaker's routes task, the servers)
//! and, when one panics or returns, logs its name and cause at error level and makes `/livez`
//! answer 503 naming it ([`crate::endpoints::Endpoints::supervised`]).
//!
//! Without it such a task died silently: `tokio::spawn` keeps a panic in the `JoinHandle`, which
//! nobody awaited, and `/livez` kept answering ok while, say, no route was ever reconciled again.
//!
//! The process keeps running after a failure rather than exiting: the liveness probe every
//! manifest sets on `/livez` then has kubelet restart the container through the normal stop
//! (SIGTERM, so the CNI socket is removed and BGP peers are closed as on any rolling update),
//! the pod's events say which task failed ("Liveness probe failed: … task qos panicked: …"),
//! restarts follow the pod's back-off, and the tasks still alive keep serving until then (CNI
//! ADD and DEL keep working while a dead QoS task waits for its restart).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};

use futures::FutureExt;
use tokio::task::JoinSet;

/// A task that stopped while it should have run until shutdown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskFailure {
    /// The name it was spawned with.
    pub name: String,
    /// `ended` or `panicked: <message>`.
    pub cause: String,
}

impl std::fmt::Display for TaskFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "task {} {}", self.name, self.cause)
    }
}

type Probe = Box<dyn Fn() -> Option<String> + Send + Sync>;

#[derive(Default)]
struct Inner {
    failures: Mutex<Vec<TaskFailure>>,
    tasks: Mutex<JoinSet<()>>,
    /// Tasks spawned elsewhere (the watch tasks of `Watched`), asked at each check.
    probes: Mutex<Vec<(String, Probe)>>,
}

/// Runs named tasks that must not end before shutdown; cheap to clone (one shared state).
#[derive(Clone, Default)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("failures", &self.failures())
            .finish_non_exhaustive()
    }
}

impl Supervisor {
    /// A supervisor with no tasks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Spawns `task` on the current runtime as `name`. Its end, by return or panic, is recorded
    /// as a failure and logged; an abort (by [`Self::shutdown`] or dropping the last clone) is not.
    pub fn spawn(&self, name: impl Into<String>, task: impl Future<Output = ()> + Send + 'static) {
        let watched = self.watch(name.into(), task, true);
        self.inner
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .spawn(watched);
    }

    /// As [`Self::spawn`], for a helper owned by something shorter-lived than the process (a BGP
    /// peer's BFD follower and status writer): it is aborted when the returned handle is dropped,
    /// and only a panic is a failure — such a helper returns when what it follows goes (the
    /// peer's status channel closes as the peer is removed), which is its normal end.
    pub fn spawn_owned(
        &self,
        name: impl Into<String>,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> crate::AbortOnDrop<()> {
        crate::AbortOnDrop::spawn(self.watch(name.into(), task, false))
    }

    fn watch(
        &self,
        name: String,
        task: impl Future<Output = ()> + Send + 'static,
        end_is_failure: bool,
    ) -> impl Future<Output = ()> + Send + 'static {
        // Weak: a task must not keep its supervisor (and so every other task) alive.
        let inner = Arc::downgrade(&self.inner);
        async move {
            // A panic is caught here, in the task, so its message is at hand; the task's state
            // is dropped right after, nothing observes it half-updated.
            let cause = match AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) if !end_is_failure => return,
                Ok(()) => "ended".to_owned(),
                Err(panic) => format!("panicked: {}", panic_message(panic.as_ref())),
            };
            tracing::error!(
                task = %name,
                cause = %cause,
                "background task stopped; /livez fails until the process is restarted"
            );
            if let Some(inner) = inner.upgrade() {
                inner
                    .failures
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(TaskFailure { name, cause });
            }
        }
    }

    /// Also counts as a task: `stopped` says why a task spawned elsewhere stopped (e.g.
    /// [`crate::Watched::stopped`]), `None` while it runs.
    pub fn also_check(
        &self,
        name: impl Into<String>,
        stopped: impl Fn() -> Option<String> + Send + Sync + 'static,
    ) {
        self.inner
            .probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((name.into(), Box::new(stopped)));
    }

    /// The tasks that stopped: those spawned here in the order they did, then the others.
    pub fn failures(&self) -> Vec<TaskFailure> {
        let mut failures = self
            .inner
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (name, stopped) in self
            .inner
            .probes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            if let Some(cause) = stopped() {
                failures.push(TaskFailure {
                    name: name.clone(),
                    cause,
                });
            }
        }
        failures
    }

    /// `/livez`: `Err` naming every task that stopped.
    pub fn check(&self) -> Result<(), String> {
        let failures = self.failures();
        if failures.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = failures.iter().map(ToString::to_string).collect();
        Err(format!("background tasks stopped: {}", list.join("; ")))
    }

    /// Aborts every task spawned with [`Self::spawn`] and waits until they are gone.
    pub async fn shutdown(&self) {
        let mut tasks = std::mem::take(&mut *self.inner.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        tasks.shutdown().await;
    }
}

pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    async fn failed_within(sup: &Supervisor, n: usize) -> Vec<TaskFailure> {
        tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let failures = sup.failures();
                if failures.len() >= n {
                    return failures;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the failure was recorded within 5 s")
    }

    #[tokio::test]
    async fn a_panicking_or_ending_task_is_a_failure_naming_it() {
        let sup = Supervisor::new();
        sup.spawn("forever", std::future::pending());
        assert_eq!(sup.check(), Ok(()));
        sup.spawn("qos", async { panic!("boom at {}", 42) });
        let failures = failed_within(&sup, 1).await;
        assert_eq!(
            failures,
            [TaskFailure {
                name: "qos".into(),
                cause: "panicked: boom at 42".into()
            }]
        );
        sup.spawn("routes", async {});
        failed_within(&sup, 2).await;
        let why = sup.check().unwrap_err();
        assert_eq!(
            why,
            "background tasks stopped: task qos panicked: boom at 42; task routes ended"
        );
    }

    #[tokio::test]
    async fn a_task_spawned_elsewhere_counts_once_it_says_it_stopped() {
        let sup = Supervisor::new();
        let stopped = Arc::new(Mutex::new(None));
        let probe = stopped.clone();
        sup.also_check("pods watch", move || probe.lock().unwrap().clone());
        assert_eq!(sup.check(), Ok(()));
        *stopped.lock().unwrap() = Some("panicked: oops".to_owned());
        assert_eq!(
            sup.check().unwrap_err(),
            "background tasks stopped: task pods watch panicked: oops"
        );
    }

    #[tokio::test]
    async fn shutdown_and_dropped_owned_tasks_are_not_failures() {
        let sup = Supervisor::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        sup.spawn("node", async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        let owned = sup.spawn_owned("bfd 192.0.2.1", std::future::pending());
        drop(owned);
        sup.shutdown().await;
        // The sender went with the aborted task.
        rx.await.unwrap_err();
        // An owned helper may return (what it follows went); it may not panic.
        let ended = sup.spawn_owned("status", async {});
        ended.into_inner().await.unwrap();
        assert_eq!(sup.check(), Ok(()));
        let _owned = sup.spawn_owned("bfd-follower 192.0.2.1", async { panic!("bad state") });
        let failures = failed_within(&sup, 1).await;
        assert_eq!(failures[0].name, "bfd-follower 192.0.2.1");
    }
}
