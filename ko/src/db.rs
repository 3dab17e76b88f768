//! `kubectl ko nbctl|sbctl|nb|sb` (to be written).

use std::process::ExitCode;

/// Arguments of `kubectl ko nbctl|sbctl|nb|sb`.
#[derive(Debug, clap::Args)]
pub struct CtlArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Arguments of `kubectl ko nb|sb <action>` (to be written).
#[derive(Debug, clap::Args)]
pub struct DbArgs {
    /// Arguments.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Which OVN database.
#[derive(Debug, Clone, Copy)]
pub enum Database {
    Northbound,
    Southbound,
}

pub fn ctl(db: Database, args: &CtlArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("{db:?} ctl is not written yet: {:?}", args.args)
}

pub fn db(db: Database, args: &DbArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("{db:?} is not written yet: {:?}", args.args)
}
