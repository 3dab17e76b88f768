//! `kubectl ko tcpdump` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko tcpdump`.
#[derive(Debug, clap::Args)]
pub struct TcpdumpArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

pub fn run(args: &TcpdumpArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("tcpdump is not written yet: {:?}", args.args)
}
