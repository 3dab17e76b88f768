//! Bounded waits: every wait of the lab names what it waited for and the last reason it was
//! not there yet, so a lab that does not come up says why.

use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
#[error("timed out after {timeout:?} waiting for {what}{}", last.as_ref().map(|l| format!(" (last: {l})")).unwrap_or_default())]
pub struct Timeout {
    pub what: String,
    pub timeout: Duration,
    pub last: Option<String>,
}

/// Checks every `every` until `check` answers `Ok(true)`, or fails after `timeout`.
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

/// A check's answer from what is still missing: done when nothing is, else which are not yet.
pub fn nothing_missing(missing: &[String]) -> Result<bool, String> {
    if missing.is_empty() {
        Ok(true)
    } else {
        Err(format!("not yet: {}", missing.join(", ")))
    }
}
