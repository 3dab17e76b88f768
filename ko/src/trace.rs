//! `kubectl ko trace` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko trace`.
#[derive(Debug, clap::Args)]
pub struct TraceArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &TraceArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("trace is not written yet: {:?}", args.args)
}
