//! Bounded waits for a condition, with a message that says what was awaited and the last reason
//! it was not there yet. One loop for the tests and the lab: [`wait_for`]; the tests' shorthands
//! [`wait_until_async`] (every 10 ms, anyhow) and the blocking [`wait_until`] follow it.

use std::time::{Duration, Instant};

/// How often the tests' shorthands look again.
const TEST_POLL: Duration = Duration::from_millis(10);

/// A wait that ran out: what was awaited, for how long, and the last reason it was not there.
#[derive(Debug, thiserror::Error)]
#[error("timed out after {timeout:?} waiting for {what}{}", last.as_ref().map(|l| format!(" (last: {l})")).unwrap_or_default())]
pub struct Timeout {
    pub what: String,
    pub timeout: Duration,
    pub last: Option<String>,
}

/// Checks every `every` until `check` answers `Ok(true)`, or fails after `timeout`; an `Err`
/// from `check` is remembered as the reason and the wait goes on.
pub async fn wait_for<F, Fut, E>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<(), Timeout>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, E>>,
    E: std::fmt::Display,
{
    let start = Instant::now();
    let mut last = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = Some(e.to_string()),
        }
        if start.elapsed() >= timeout {
            return Err(Timeout {
                what: what.to_owned(),
                timeout,
                last,
            });
        }
        tokio::time::sleep(every).await;
    }
}

/// Polls `check` every 10 ms until it returns `Ok(true)`, or fails after `timeout` naming `what`
/// and the last error `check` gave. Blocking, for tests without a runtime.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last_error = None;
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_error = Some(format!("{e:#}")),
        }
        if start.elapsed() >= timeout {
            return Err(Timeout {
                what: what.to_owned(),
                timeout,
                last: last_error,
            }
            .into());
        }
        std::thread::sleep(TEST_POLL);
    }
}

/// [`wait_for`] every 10 ms, for async (tokio) tests.
pub async fn wait_until_async<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    wait_for(what, timeout, TEST_POLL, || {
        // Boxed: the tests' probes are large futures, and the wait's own state stays small.
        let fut = Box::pin(check());
        async move { fut.await.map_err(|e| format!("{e:#}")) }
    })
    .await
    .map_err(Into::into)
}
