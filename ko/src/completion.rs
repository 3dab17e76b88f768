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
    if shell == Shell::Bash {
        // clap_complete 4.6's bash script names a subcommand's case by the binary's name with
        // `-` turned into `__subcmd__` but routes to it with `-` turned into `__`, so under a
        // hyphenated name no subcommand completes. The script is made for a name without the
        // hyphen, then registered for the real one (the name appears only in `complete`).
        clap_complete::generate(shell, &mut command, BASH_NAME, &mut out);
        let text = String::from_utf8_lossy(&out).replace(&format!(" {BASH_NAME}\n"), " kubectl-ko\n");
        return text.into_bytes();
    }
    clap_complete::generate(shell, &mut command, "kubectl-ko", &mut out);
    out
}

/// The hyphen-free name the bash script is generated for.
const BASH_NAME: &str = "kubectlko";

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

    /// The bash script sourced in a real bash: `kubectl-ko nb <TAB>` offers the actions.
    #[test]
    fn bash_completes_verbs_and_nb_actions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubectl-ko.bash");
        std::fs::write(&path, script(Shell::Bash)).unwrap();
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "source {}; COMP_WORDS=(kubectl-ko nb ''); COMP_CWORD=2; _kubectlko kubectl-ko '' nb; echo \"${{COMPREPLY[*]}}\"",
                path.display()
            ))
            .output()
            .unwrap();
        let words = String::from_utf8_lossy(&out.stdout);
        let script = String::from_utf8(script(Shell::Bash)).unwrap();
        assert!(
            script.contains("-o default kubectl-ko\n"),
            "registered for kubectl-ko"
        );
        for action in ["status", "kick", "backup", "dbstatus", "restore"] {
            assert!(
                words.split_whitespace().any(|w| w == action),
                "{action} not in {words:?} ({out:?})"
            );
        }
    }
}
