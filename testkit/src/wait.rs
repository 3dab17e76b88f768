//! Bounded waits for a condition, with a message that says what was awaited.

use std::time::{Duration, Instant};

/// Polls `check` every 10 ms until it returns `Ok(true)`, or fails after `timeout` naming `what`
/// and the last error `check` gave.
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
            Err(e) => last_error = Some(e),
        }
        if start.elapsed() >= timeout {
            let detail = last_error
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            anyhow::bail!("timed out after {timeout:?} waiting for {what}{detail}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// [`wait_until`] for async (tokio) tests.
pub async fn wait_until_async<F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    let start = Instant::now();
    let mut last_error = None;
    loop {
        match check().await {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last_error = Some(e),
        }
        if start.elapsed() >= timeout {
            let detail = last_error
                .map(|e| format!(" (last error: {e:#})"))
                .unwrap_or_default();
            anyhow::bail!("timed out after {timeout:?} waiting for {what}{detail}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
