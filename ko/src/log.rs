//! `kubectl ko log` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko log`.
#[derive(Debug, clap::Args)]
pub struct LogArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &LogArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("log is not written yet: {:?}", args.args)
}
