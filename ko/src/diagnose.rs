//! `kubectl ko diagnose` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko diagnose`.
#[derive(Debug, clap::Args)]
pub struct DiagnoseArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &DiagnoseArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("diagnose is not written yet: {:?}", args.args)
}
