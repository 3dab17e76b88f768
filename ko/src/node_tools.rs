//! `kubectl ko vsctl|ofctl|dpctl|appctl <node>` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko vsctl|ofctl|dpctl|appctl <node>`.
#[derive(Debug, clap::Args)]
pub struct NodeToolArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// The OVS tool a verb runs.
#[derive(Debug, Clone, Copy)]
pub enum Tool {
    Vsctl,
    Ofctl,
    Dpctl,
    Appctl,
}

pub fn run(tool: Tool, args: &NodeToolArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("{tool:?} is not written yet: {:?}", args.args)
}
