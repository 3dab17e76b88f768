//! `kubectl ko reload` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko reload`.
#[derive(Debug, clap::Args)]
pub struct ReloadArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &ReloadArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("reload is not written yet: {:?}", args.args)
}
