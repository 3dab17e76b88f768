//! Concurrency helpers every daemon needs: tasks that die with their owner, and per-key locks.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::task::JoinHandle;

/// A spawned task that is aborted when this handle is dropped. `tokio::spawn` detaches a task
/// (dropping its `JoinHandle` leaves it running); helpers such as a metrics endpoint, a lease
/// renewer or a removed BGP peer's timers must instead stop with their owner — above all a lease
/// renewer, which would otherwise keep a dead controller's leadership alive.
#[derive(Debug)]
pub struct AbortOnDrop<T>(Option<JoinHandle<T>>);

impl<T: Send + 'static> AbortOnDrop<T> {
    /// Spawns `f` on the current runtime.
    pub fn spawn(f: impl Future<Output = T> + Send + 'static) -> Self {
        Self(Some(tokio::spawn(f)))
    }
}

impl<T> AbortOnDrop<T> {
    /// Takes ownership of a task spawned elsewhere (on another runtime, say).
    pub fn new(handle: JoinHandle<T>) -> Self {
        Self(Some(handle))
    }

    /// The handle, no longer aborted on drop (to await a task's own orderly end).
    pub fn into_inner(mut self) -> JoinHandle<T> {
        self.0.take().expect("present until dropped")
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

/// Per-key mutual exclusion: work on one key (a pod's NIC `<pod>.<ns>`, a CNI container) never
/// interleaves, while different keys proceed in parallel (Kube-OVN's `podKeyMutex`). An entry
/// lives only while someone holds or awaits it, so the map does not grow with churn.
#[derive(Debug, Default)]
pub struct KeyLocks {
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Holds one key of a [`KeyLocks`] until dropped.
pub struct KeyGuard<'a> {
    locks: &'a KeyLocks,
    key: String,
    guard: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl KeyLocks {
    /// Waits until `key` is free, then holds it until the guard is dropped.
    pub async fn lock(&self, key: &str) -> KeyGuard<'_> {
        let m = self
            .locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_owned())
            .or_default()
            .clone();
        KeyGuard {
            locks: self,
            key: key.to_owned(),
            guard: Some(m.lock_owned().await),
        }
    }

    /// Keys currently held or awaited.
    pub fn len(&self) -> usize {
        self.locks.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether no key is held or awaited.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for KeyGuard<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut map = self.locks.locks.lock().unwrap_or_else(PoisonError::into_inner);
        // Only the map holds it now: nobody waits, so the entry can go.
        if map.get(&self.key).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_holder_per_key_and_entries_go_with_their_last_user() {
        let locks = Arc::new(KeyLocks::default());
        let held = locks.lock("a").await;
        // Another key is free at once.
        drop(
            tokio::time::timeout(Duration::from_secs(5), locks.lock("b"))
                .await
                .expect("b is free"),
        );
        let entered = Arc::new(AtomicBool::new(false));
        let waiter = {
            let (locks, entered) = (locks.clone(), entered.clone());
            tokio::spawn(async move {
                let _g = locks.lock("a").await;
                entered.store(true, Ordering::SeqCst);
            })
        };
        // The waiter is parked on "a": both it and the holder keep the entry.
        while locks.len() != 1 || Arc::strong_count(locks.locks.lock().unwrap().get("a").unwrap()) < 3 {
            tokio::task::yield_now().await;
        }
        assert!(!entered.load(Ordering::SeqCst), "a second holder of a");
        drop(held);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter gets a once it is released")
            .unwrap();
        assert!(entered.load(Ordering::SeqCst));
        assert!(locks.is_empty(), "entries outlived their users");
    }

    #[tokio::test]
    async fn abort_on_drop_stops_the_task() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = AbortOnDrop::spawn(async move {
            let _tx = tx;
            std::future::pending::<()>().await;
        });
        drop(task);
        // The sender is dropped with the aborted task, so the receiver sees it closed.
        tokio::time::timeout(Duration::from_secs(5), rx)
            .await
            .expect("the task was aborted")
            .unwrap_err();
    }
}
