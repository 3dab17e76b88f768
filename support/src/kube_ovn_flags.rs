//! Kube-OVN's flags that a binary of ours does not implement: accepted, taken out of the
//! arguments before clap parses them, and named once at start as ignored (by
//! [`crate::klog::KlogFlags::init_logs_with`]), so that Kube-OVN's own manifests start our binaries.
//!
//! Each component lists Kube-OVN's flags for it ([`KubeOvnFlag`]); only those the binary's clap
//! command does not know are taken out, so a flag implemented later simply starts being parsed
//! (no table edit needed, no clash). Go's `pflag` syntax: a boolean is `--name` or
//! `--name=value`; any other flag is `--name=value` or `--name value`.

use std::collections::BTreeSet;
use std::ffi::OsString;

pub mod tables;

/// One of Kube-OVN's flags for a component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeOvnFlag {
    /// Its name without the dashes.
    pub name: &'static str,
    /// A boolean (`--name` alone is `true`; a following word is not its value).
    pub boolean: bool,
}

/// A boolean flag.
#[must_use]
pub const fn boolean(name: &'static str) -> KubeOvnFlag {
    KubeOvnFlag { name, boolean: true }
}

/// A flag with a value.
#[must_use]
pub const fn valued(name: &'static str) -> KubeOvnFlag {
    KubeOvnFlag { name, boolean: false }
}

/// Takes the flags of `table` that are not in `known` (the long names and aliases clap parses)
/// out of `args` (the program name first); returns the rest and the names taken out
/// (`--name`, each once, in order of appearance). Stops at `--`.
#[must_use]
pub fn strip_unimplemented(
    args: Vec<OsString>,
    known: &BTreeSet<String>,
    table: &[KubeOvnFlag],
) -> (Vec<OsString>, Vec<String>) {
    let mut kept = Vec::with_capacity(args.len());
    let mut ignored: Vec<String> = Vec::new();
    let mut args = args.into_iter();
    if let Some(program) = args.next() {
        kept.push(program);
    }
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str() else {
            kept.push(arg);
            continue;
        };
        if text == "--" {
            kept.push(arg);
            kept.extend(args.by_ref());
            break;
        }
        let Some(body) = text.strip_prefix("--") else {
            kept.push(arg);
            continue;
        };
        let (name, has_value) = match body.split_once('=') {
            Some((name, _)) => (name, true),
            None => (body, false),
        };
        let unimplemented = table.iter().find(|f| f.name == name && !known.contains(name));
        let Some(flag) = unimplemented else {
            kept.push(arg);
            continue;
        };
        if !has_value && !flag.boolean {
            // `--name value`: the value goes too.
            args.next();
        }
        let shown = format!("--{name}");
        if !ignored.contains(&shown) {
            ignored.push(shown);
        }
    }
    (kept, ignored)
}

/// The long names and aliases of `command`'s arguments (flattened groups included).
#[must_use]
pub fn known_long_names(command: &clap::Command) -> BTreeSet<String> {
    command
        .get_arguments()
        .flat_map(|arg| {
            arg.get_long()
                .into_iter()
                .chain(arg.get_all_aliases().unwrap_or_default())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Parses the process's arguments as `F` after taking out `table`'s flags that `F` does not
/// implement; returns the flags and the names taken out. Bad arguments end the process with
/// clap's message, as `F::parse()` does.
#[must_use]
pub fn parse<F: clap::Parser>(table: &[KubeOvnFlag]) -> (F, Vec<String>) {
    parse_from(std::env::args_os().collect(), table)
}

/// [`parse`] from `args` (the program name first).
#[must_use]
pub fn parse_from<F: clap::Parser>(args: Vec<OsString>, table: &[KubeOvnFlag]) -> (F, Vec<String>) {
    let known = known_long_names(&F::command());
    let (args, ignored) = strip_unimplemented(args, &known, table);
    (F::parse_from(args), ignored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(clap::Parser, Debug)]
    struct Cli {
        #[arg(long, env = "TEST_KOF_IFACE", default_value = "")]
        iface: String,
        #[arg(long = "v", short = 'v', default_value_t = 0)]
        v: u8,
    }

    const TABLE: &[KubeOvnFlag] = &[
        boolean("enable-mirror"),
        valued("mirror-iface"),
        valued("iface"),
        boolean("secure-serving"),
    ];

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn unimplemented_flags_go_in_every_pflag_spelling_and_are_named_once() {
        let known = known_long_names(&<Cli as clap::CommandFactory>::command());
        let (kept, ignored) = strip_unimplemented(
            args(&[
                "prog",
                "--enable-mirror=true",
                "--iface=eth0",
                "--mirror-iface",
                "mirror0",
                "--secure-serving",
                "-v",
                "3",
                "--enable-mirror",
                "--",
                "--secure-serving",
            ]),
            &known,
            TABLE,
        );
        assert_eq!(
            kept,
            args(&["prog", "--iface=eth0", "-v", "3", "--", "--secure-serving"])
        );
        assert_eq!(
            ignored,
            vec!["--enable-mirror", "--mirror-iface", "--secure-serving"]
        );
    }

    #[test]
    fn a_flag_the_binary_implements_is_parsed_not_ignored() {
        let (cli, ignored) = parse_from::<Cli>(
            args(&["prog", "--iface", "eth1", "--secure-serving=false", "--v=2"]),
            TABLE,
        );
        assert_eq!((cli.iface.as_str(), cli.v), ("eth1", 2));
        assert_eq!(ignored, vec!["--secure-serving"]);
    }

    #[test]
    fn unknown_flags_outside_the_table_are_left_for_clap_to_refuse() {
        let known = known_long_names(&<Cli as clap::CommandFactory>::command());
        let (kept, ignored) = strip_unimplemented(args(&["prog", "--no-such-flag=1"]), &known, TABLE);
        assert_eq!(kept, args(&["prog", "--no-such-flag=1"]));
        assert!(ignored.is_empty());
        assert!(<Cli as clap::Parser>::try_parse_from(kept).is_err());
    }
}
