//! `kubectl ko completion bash|zsh|fish|elvish|powershell`: a completion script for the
//! `kubectl-ko` binary, generated from the same clap definitions the binary parses
//! (`clap_complete`), so verbs and flags never drift from the script.

use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;

/// Arguments of `kubectl ko completion`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kubectl ko completion bash > /etc/bash_completion.d/kubectl-ko\n  kubectl ko completion zsh > \"${fpath[1]}/_kubectl-ko\"\n  kubectl ko completion fish > ~/.config/fish/completions/kubectl-ko.fish\n\nThe script completes the `kubectl-ko` command. For `kubectl ko <TAB>`, kubectl (1.26 and later)\nruns `kubectl_complete-ko` from the PATH: make it a script running `kubectl-ko __complete \"$@\"`."
)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// The script for `shell`.
pub fn script(shell: Shell) -> Vec<u8> {
    let mut command = crate::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "kubectl-ko", &mut out);
    out
}

pub fn run(args: &CompletionArgs) -> anyhow::Result<ExitCode> {
    use std::io::Write as _;
    std::io::stdout().write_all(&script(args.shell))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_complete_the_verbs() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = String::from_utf8(script(shell)).unwrap();
            for verb in ["nbctl", "vsctl", "tcpdump", "env-check", "bgp", "reload"] {
                assert!(text.contains(verb), "{shell} script lacks {verb}");
            }
        }
    }
}
