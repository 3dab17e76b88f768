//! `kubectl ko completion` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko completion`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &CompletionArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("completion is not written yet: {:?}", args.args)
}
