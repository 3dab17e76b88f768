//! The control-socket side of the monitor: `ovn-appctl -t <socket> …` for RAFT status, storage
//! status and ovn-northd's status (as Kube-OVN's pkg/ovs `Appctl` runs it), and the files it
//! looks at. The parsers of the answers are pure and tested here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::process::Command;

/// A failed `ovn-appctl` call or file read.
#[derive(Debug, thiserror::Error)]
pub enum AppctlError {
    #[error("ovn-appctl -t {target} {command}: {source}")]
    Spawn {
        target: String,
        command: String,
        source: std::io::Error,
    },
    #[error("ovn-appctl -t {target} {command}: no answer within {waited:?}")]
    Timeout {
        target: String,
        command: String,
        waited: Duration,
    },
    #[error("ovn-appctl -t {target} {command} failed ({status}): {output}")]
    Failed {
        target: String,
        command: String,
        status: std::process::ExitStatus,
        output: String,
    },
    #[error("{}: {source}", path.display())]
    File { path: PathBuf, source: std::io::Error },
}

/// Runs `ovn-appctl --timeout=<secs> -t <target> <command> <args>` and returns its output.
pub async fn appctl(
    target: &Path,
    command: &str,
    args: &[&str],
    timeout: Duration,
) -> Result<String, AppctlError> {
    let target_s = target.display().to_string();
    let mut cmd = Command::new("ovn-appctl");
    cmd.arg(format!("--timeout={}", timeout.as_secs().max(1)))
        .arg("-t")
        .arg(target)
        .arg(command)
        .args(args)
        .kill_on_drop(true);
    // ovn-appctl's own --timeout bounds the wait on the socket; this one bounds the process.
    let output = match tokio::time::timeout(timeout + Duration::from_secs(1), cmd.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(source)) => {
            return Err(AppctlError::Spawn {
                target: target_s,
                command: command.to_owned(),
                source,
            });
        }
        Err(_) => {
            return Err(AppctlError::Timeout {
                target: target_s,
                command: command.to_owned(),
                waited: timeout,
            });
        }
    };
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        Ok(text)
    } else {
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Err(AppctlError::Failed {
            target: target_s,
            command: command.to_owned(),
            status: output.status,
            output: text.trim().to_owned(),
        })
    }
}

/// ovn-northd's control socket from its pidfile: `ovn-northd.<pid>.ctl` beside the pidfile (the
/// default, where `ovn-appctl -t ovn-northd` looks), else `ovn-northd.ctl` there (our
/// start-ovn-central.sh names it with `--unixctl`).
pub fn northd_control(pid_file: &Path) -> Result<PathBuf, AppctlError> {
    let file_error = |source| AppctlError::File {
        path: pid_file.to_owned(),
        source,
    };
    let pid = std::fs::read_to_string(pid_file).map_err(file_error)?;
    let pid: u32 = pid.trim().parse().map_err(|_| {
        file_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{:?} is not a process ID", pid.trim()),
        ))
    })?;
    let dir = pid_file.parent().unwrap_or(Path::new("/"));
    let by_pid = dir.join(format!("ovn-northd.{pid}.ctl"));
    if by_pid.exists() {
        Ok(by_pid)
    } else {
        Ok(dir.join("ovn-northd.ctl"))
    }
}

/// `Status: active` → 1, `Status: standby` → 2, anything else (`paused`, garbage) → 0.
pub fn northd_health(output: &str) -> u8 {
    match output.trim().strip_prefix("Status:").map(str::trim) {
        Some("active") => 1,
        Some("standby") => 2,
        _ => 0,
    }
}

/// `ovsdb-server/get-db-storage-status`: healthy when it says `status: ok`.
pub fn storage_ok(output: &str) -> bool {
    output.lines().any(|l| l.contains("status: ok"))
}

/// The part of `cluster/status` after `Servers:` (Kube-OVN's `ovn_status_content` label).
pub fn servers_text(output: &str) -> String {
    output
        .split_once("Servers:")
        .map(|(_, rest)| rest.to_owned())
        .unwrap_or_default()
}

/// Whether an OVSDB file is clustered: its first record starts `OVSDB CLUSTER` (a standalone one
/// `OVSDB JSON`); what `ovsdb-tool db-is-clustered` checks, without the process.
pub fn is_clustered(db_file: &Path) -> Result<bool, AppctlError> {
    use std::io::Read;
    let mut head = [0u8; 13];
    let read = std::fs::File::open(db_file).and_then(|mut f| f.read(&mut head));
    match read {
        Ok(n) => Ok(head[..n] == *b"OVSDB CLUSTER"),
        Err(source) => Err(AppctlError::File {
            path: db_file.to_owned(),
            source,
        }),
    }
}

/// A file's size in bytes.
pub fn file_size(path: &Path) -> Result<u64, AppctlError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|source| AppctlError::File {
            path: path.to_owned(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn northd_states() {
        assert_eq!(northd_health("Status: active\n"), 1);
        assert_eq!(northd_health("Status: standby\n"), 2);
        assert_eq!(northd_health("Status: paused\n"), 0);
        assert_eq!(northd_health(""), 0);
    }

    #[test]
    fn storage_and_servers() {
        assert!(storage_ok("status: ok\n"));
        assert!(!storage_ok("ovsdb error: something\n"));
        let servers = servers_text(include_str!("testdata/follower.txt"));
        assert!(servers.starts_with('\n') && servers.contains("m3 (a455 at"));
        assert_eq!(servers_text("no servers here"), "");
    }

    #[test]
    fn files() {
        let dir = tempfile::tempdir().unwrap();
        let clustered = dir.path().join("c.db");
        std::fs::write(&clustered, "OVSDB CLUSTER 147 1fdecc\n{}").unwrap();
        let standalone = dir.path().join("s.db");
        std::fs::write(&standalone, "OVSDB JSON 100 abc\n{}").unwrap();
        assert!(is_clustered(&clustered).unwrap());
        assert!(!is_clustered(&standalone).unwrap());
        assert_eq!(file_size(&standalone).unwrap(), 21);
        let missing = is_clustered(&dir.path().join("none")).unwrap_err().to_string();
        assert!(missing.contains("none"), "{missing}");

        let pid = dir.path().join("ovn-northd.pid");
        std::fs::write(&pid, "42\n").unwrap();
        assert_eq!(northd_control(&pid).unwrap(), dir.path().join("ovn-northd.ctl"));
        std::fs::write(dir.path().join("ovn-northd.42.ctl"), "").unwrap();
        assert_eq!(
            northd_control(&pid).unwrap(),
            dir.path().join("ovn-northd.42.ctl")
        );
        std::fs::write(&pid, "x\n").unwrap();
        assert!(
            northd_control(&pid)
                .unwrap_err()
                .to_string()
                .contains("not a process ID")
        );
    }
}
