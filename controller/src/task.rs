//! Background tasks that die with their owner. `tokio::spawn` detaches a task: dropping its
//! `JoinHandle` leaves it running. The controller's helpers (the metrics endpoint, the lease
//! renewer) must instead stop when the controller stops or is aborted — above all the lease
//! renewer, which would otherwise keep a dead controller's leadership alive.

use std::future::Future;

use tokio::task::JoinHandle;

/// A spawned task that is aborted when this handle is dropped.
#[derive(Debug)]
pub struct AbortOnDrop<T>(Option<JoinHandle<T>>);

impl<T: Send + 'static> AbortOnDrop<T> {
    pub fn spawn(f: impl Future<Output = T> + Send + 'static) -> Self {
        Self(Some(tokio::spawn(f)))
    }
}

impl<T> AbortOnDrop<T> {
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
