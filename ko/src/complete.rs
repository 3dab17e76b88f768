//! `kubectl ko __complete <words…>` (hidden): the words of `kubectl ko <TAB>`. kubectl (1.26
//! and later) completes a plugin's words by running an executable `kubectl_complete-ko` from
//! the PATH with the words typed after `ko`, the last one the word being completed, and reads
//! cobra's answer: one candidate per line, then `:<directive>`. `kubectl_complete-ko` is a
//! one-line script calling this verb (docs/operations.md, "kubectl ko").
//!
//! Candidates come from the clap definitions (verbs, `nb` actions, `log` components, shells)
//! and, for a verb's node or pod argument, from the cluster (`kubectl get nodes`, pods as
//! `namespace/name`).

use std::process::ExitCode;

use clap::CommandFactory;

use crate::kubectl;

/// cobra's `ShellCompDirectiveNoFileComp`: the shell offers no file names instead.
const NO_FILE_COMPLETION: u8 = 4;

/// Arguments of `kubectl ko __complete`.
#[derive(Debug, clap::Args)]
pub struct CompleteArgs {
    /// The words after `ko`, the last one being completed (possibly empty).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub words: Vec<String>,
}

/// What a positional argument is completed from when clap has no fixed values for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Nodes,
    Pods,
}

/// The candidates for the last of `words` (pure but for `lookup`, which lists the cluster's).
pub fn candidates(
    root: &clap::Command,
    words: &[String],
    lookup: impl Fn(Source) -> Vec<String>,
) -> Vec<String> {
    let (partial, done) = words
        .split_last()
        .map_or(("", &[][..]), |(last, rest)| (last.as_str(), rest));
    let mut command = root;
    let mut positional = 0;
    for word in done {
        if word.starts_with('-') {
            continue;
        }
        if positional == 0
            && let Some(sub) = command.find_subcommand(word)
        {
            command = sub;
            continue;
        }
        positional += 1;
    }
    let all: Vec<String> = if command.has_subcommands() && positional == 0 {
        command
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_owned())
            .collect()
    } else {
        let Some(arg) = command
            .get_positionals()
            .filter(|a| !a.is_trailing_var_arg_set())
            .nth(positional)
        else {
            return Vec::new();
        };
        let values = arg.get_possible_values();
        match arg.get_id().as_str() {
            _ if !values.is_empty() => values.iter().map(|v| v.get_name().to_owned()).collect(),
            "node" => lookup(Source::Nodes),
            "pod" => lookup(Source::Pods),
            _ => Vec::new(),
        }
    };
    all.into_iter().filter(|c| c.starts_with(partial)).collect()
}

/// The cluster's nodes or pods; nothing when kubectl cannot say (completion stays quiet).
fn lookup(source: Source) -> Vec<String> {
    let args: &[&str] = match source {
        Source::Nodes => &[
            "get",
            "nodes",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}{\"\\n\"}{end}",
        ],
        Source::Pods => &[
            "get",
            "pods",
            "-A",
            "-o",
            "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{\"\\n\"}{end}",
        ],
    };
    kubectl::output(args)
        .map(|text| text.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

pub fn run(args: &CompleteArgs) -> ExitCode {
    for candidate in candidates(&crate::Cli::command(), &args.words, lookup) {
        println!("{candidate}");
    }
    println!(":{NO_FILE_COMPLETION}");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    fn complete(words: &[&str]) -> Vec<String> {
        let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
        candidates(&crate::Cli::command(), &words, |source| match source {
            Source::Nodes => vec!["node1".into(), "node2".into()],
            Source::Pods => vec!["default/web-0".into(), "kube-system/coredns".into()],
        })
    }

    /// The charter's rule, for every verb's flags: each has an environment variable too.
    #[test]
    fn every_flag_has_an_environment_variable() {
        fn walk(command: &clap::Command, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !arg.is_positional() && !builtin && arg.get_env().is_none() {
                    missing.push(format!("{} --{}", command.get_name(), arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                walk(sub, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&crate::Cli::command(), &mut missing);
        assert!(missing.is_empty(), "flags without env: {missing:?}");
    }

    #[test]
    fn verbs_then_their_arguments() {
        assert_eq!(complete(&["nb"]), ["nbctl", "nb"]);
        assert!(complete(&[""]).contains(&"env-check".to_owned()));
        assert!(!complete(&[""]).contains(&"__complete".to_owned()), "hidden");
        assert_eq!(complete(&["sb", "d"]), ["dbstatus"]);
        assert_eq!(complete(&["log", ""]), ["kube-ovn", "ovn", "ovs", "linux", "all"]);
        assert_eq!(complete(&["completion", "z"]), ["zsh"]);
        assert_eq!(complete(&["vsctl", "node"]), ["node1", "node2"]);
        assert_eq!(complete(&["bgp", ""]), ["node1", "node2"]);
        assert_eq!(complete(&["tcpdump", "def"]), ["default/web-0"]);
        // After the node, the words are the tool's own.
        assert_eq!(complete(&["vsctl", "node1", "sh"]), Vec::<String>::new());
    }
}
