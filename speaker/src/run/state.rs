//! "Did this speaker restart within the graceful-restart time?" (RFC 4724 §4.1: only then may
//! the OPEN carry the Restart State bit). A file in `--state-dir` is touched every few seconds
//! while running and removed on a clean stop; at start, a file younger than the restart time
//! means the last run ended by a crash or kill moments ago.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const FILE: &str = "running";
const HEARTBEAT: Duration = Duration::from_secs(2);

fn file(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// Whether the previous run ended without a clean stop less than `restart_time` ago.
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

/// A clean stop is not a restart: peers were told (Cease) and dropped our routes.
pub fn clean_stop(dir: &Path) {
    let _ = std::fs::remove_file(file(dir));
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
        clean_stop(&dir);
        assert!(!restarted_recently(&dir, Duration::from_secs(90)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
