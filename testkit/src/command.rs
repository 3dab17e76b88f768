//! Running a program to completion: the one `run` of the tests and the lab.

use std::process::Command;

/// A command that could not be run or exited non-zero: the whole command line, and why (the
/// exit status with the program's stderr, or the reason it could not start).
#[derive(Debug, thiserror::Error)]
#[error("{command}: {message}")]
pub struct CommandError {
    pub command: String,
    pub message: String,
}

/// Runs `program` with `args` and returns its stdout; a failure names the command line and
/// carries its stderr (or, when the program cannot be started, the install hint).
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

#[cfg(test)]
mod tests {
    use super::run;

    #[test]
    fn a_failure_names_the_command_and_carries_its_stderr() {
        let err = run("sh", &["-c", "echo oops >&2; exit 3"]).unwrap_err();
        assert_eq!(err.command, "sh -c echo oops >&2; exit 3");
        assert!(err.message.contains("exit status: 3"), "{err}");
        assert!(err.message.ends_with("oops"), "{err}");
        let missing = run("no-such-program-kovn", &["x"]).unwrap_err();
        assert!(
            missing.to_string().starts_with("no-such-program-kovn x: "),
            "{missing}"
        );
        assert!(missing.message.contains("install-deps.sh"), "{missing}");
        assert_eq!(run("echo", &["hi"]).unwrap(), "hi\n");
    }
}
