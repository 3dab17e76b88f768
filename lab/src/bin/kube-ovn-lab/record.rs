//! What `up` made so far, recorded in the lab's state file as it goes, and the wait for a process
//! it started to serve: shared by `up` and the steps it runs from other modules (containerd,
//! install, processes), which therefore do not depend on `up`.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube_ovn_lab::cluster::process::{self, Launch};
use kube_ovn_lab::cluster::state::{LabState, Made};
use kube_ovn_lab::cluster::wait::wait_for;

/// What `up` made so far, saved after every addition (see `cluster::state`).
#[derive(Clone)]
pub struct Recorder {
    state: Arc<Mutex<LabState>>,
    path: PathBuf,
}

impl Recorder {
    /// Records into `state`, saved to `path` after each change.
    pub fn new(state: LabState, path: PathBuf) -> Self {
        Self {
            state: Arc::new(Mutex::new(state)),
            path,
        }
    }

    pub fn record(&self, made: Made) -> anyhow::Result<()> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.made.push(made);
        state.save(&self.path)?;
        Ok(())
    }

    /// Marks `up` finished.
    pub fn finish(&self) -> anyhow::Result<()> {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.up_finished = true;
        state.save(&self.path)?;
        Ok(())
    }

    /// Starts a process and records it at once.
    pub fn start(&self, launch: &Launch) -> anyhow::Result<(u32, u64)> {
        let (pid, start_time) = process::spawn(launch)?;
        self.record(Made::Process {
            component: launch.component.clone(),
            pid,
            start_time,
        })?;
        Ok((pid, start_time))
    }
}

/// Waits until the process `started` (with `launch`) accepts connections on `path`; fails at
/// once, with its log's last lines, if it exits meanwhile.
pub async fn wait_serving(
    launch: &Launch,
    started: (u32, u64),
    path: PathBuf,
    timeout: Duration,
) -> anyhow::Result<()> {
    let what = format!("{} to serve on {}", launch.component, path.display());
    let log = launch.log.clone();
    wait_for(&what, timeout, Duration::from_millis(10), || {
        let (path, log) = (path.clone(), log.clone());
        async move {
            if tokio::net::UnixStream::connect(&path).await.is_ok() {
                return Ok(true);
            }
            if process::alive(started.0, started.1) {
                Ok(false)
            } else {
                Err(anyhow::anyhow!(
                    "it exited; its log ends:\n{}",
                    process::log_tail(&log, 10)
                ))
            }
        }
    })
    .await?;
    Ok(())
}
