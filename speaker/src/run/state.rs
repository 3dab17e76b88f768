//! "Did this speaker restart within the graceful-restart time?" (RFC 4724 §4.1: only then may
//! the OPEN carry the Restart State bit). A file in `--state-dir` is touched every few seconds
//! while running. On a stop with graceful restart on (SIGTERM: rolling update, drain) it is
//! touched a last time and left, because the sessions were closed without NOTIFICATION and the
//! peers keep our routes as stale: that is a restart as much as a crash is. On a stop without
//! graceful restart it is removed (the peers got Cease and dropped our routes). At start, a
//! file younger than the restart time means the last run ended moments ago, by a crash, a kill
//! or a stop for restart.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const FILE: &str = "running";
const HEARTBEAT: Duration = Duration::from_secs(2);

fn file(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Whether the previous run ended less than `restart_time` ago by a crash, a kill or a stop
/// with graceful restart on.
pub fn restarted_recently(dir: &Path, restart_time: Duration) -> bool {
    std::fs::metadata(file(dir))
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .is_some_and(|age| age < restart_time)
}

/// Keeps the file fresh.
pub async fn heartbeat(dir: PathBuf) {
    if let Err(e) = std::fs::create_dir_all(&dir) {
        tracing::warn!(dir = %dir.display(), error = %e, "no state dir: a restart will not be recognized for graceful restart");
        return;
    }
    loop {
        let _ = std::fs::write(file(&dir), b"");
        tokio::time::sleep(HEARTBEAT).await;
    }
}

/// Records how the speaker stopped: with `graceful_restart`, as a restart (the file is made
/// fresh, so a start within the restart time sets the R bit); without, as a clean stop.
pub fn stopped(dir: &Path, graceful_restart: bool) {
    if graceful_restart {
        if let Err(e) = std::fs::write(file(dir), b"") {
            tracing::warn!(dir = %dir.display(), error = %e, "state file: the next start will not set the R bit");
        }
    } else {
        let _ = std::fs::remove_file(file(dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_fresh_file_means_a_restart() {
        let dir = std::env::temp_dir().join(format!("spk-state-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(
            !restarted_recently(&dir, Duration::from_secs(90)),
            "no file: a first start"
        );
        std::fs::write(file(&dir), b"").unwrap();
        assert!(restarted_recently(&dir, Duration::from_secs(90)));
        assert!(
            !restarted_recently(&dir, Duration::ZERO),
            "older than the restart time"
        );
        stopped(&dir, false);
        assert!(
            !restarted_recently(&dir, Duration::from_secs(90)),
            "a stop without graceful restart is not a restart"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_stop_with_graceful_restart_counts_as_a_restart() {
        let dir = std::env::temp_dir().join(format!("spk-state-gr-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        stopped(&dir, true);
        assert!(restarted_recently(&dir, Duration::from_secs(90)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
