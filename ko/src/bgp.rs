//! `kubectl ko bgp` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko bgp`.
#[derive(Debug, clap::Args)]
pub struct BgpArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &BgpArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("bgp is not written yet: {:?}", args.args)
}
