//! `kubectl ko env-check` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko env-check`.
#[derive(Debug, clap::Args)]
pub struct EnvCheckArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &EnvCheckArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("env-check is not written yet: {:?}", args.args)
}
