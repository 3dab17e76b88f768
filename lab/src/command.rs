//! Running a program and keeping what it said: the lab's one way to call `ip`, `mount`, `podman`
//! and the like. At the bottom of the crate (no module of ours below it), so the cluster verbs
//! and the container runtime both use it without depending on each other.

use std::process::Command;

#[derive(Debug, thiserror::Error)]
#[error("{command}: {message}")]
pub struct CommandError {
    pub command: String,
    pub message: String,
}

/// Runs a command and returns its stdout; a failure carries the command line and stderr.
pub fn run(program: &str, args: &[&str]) -> Result<String, CommandError> {
    let command = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| CommandError {
            command: command.clone(),
            message: format!("{e} (is it installed? run scripts/install-deps.sh)"),
        })?;
    if !out.status.success() {
        return Err(CommandError {
            command,
            message: format!("{}: {}", out.status, String::from_utf8_lossy(&out.stderr).trim()),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
