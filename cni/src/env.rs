//! The `CNI_*` environment a runtime sets for each call.

use std::path::PathBuf;

use crate::error::{CniError, ErrorCode};

/// `CNI_COMMAND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Attach the container.
    Add,
    /// Detach the container; must be idempotent.
    Del,
    /// Verify an earlier ADD still holds (0.4.0+).
    Check,
    /// Is the plugin ready to serve ADD (1.1.0+)?
    Status,
    /// Drop attachments not in the valid list (1.1.0+).
    Gc,
    /// Report the spec versions we speak.
    Version,
}

impl Command {
    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "ADD" => Self::Add,
            "DEL" => Self::Del,
            "CHECK" => Self::Check,
            "STATUS" => Self::Status,
            "GC" => Self::Gc,
            "VERSION" => Self::Version,
            _ => return None,
        })
    }

    /// The spelling in `CNI_COMMAND`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Add => "ADD",
            Self::Del => "DEL",
            Self::Check => "CHECK",
            Self::Status => "STATUS",
            Self::Gc => "GC",
            Self::Version => "VERSION",
        }
    }
}

/// `CNI_ARGS`: `KEY=VALUE` pairs separated by `;`, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CniArgs(pub Vec<(String, String)>);

impl CniArgs {
    /// Parses `CNI_ARGS`; a pair without `=` is code 4, as libcni's loader rejects it too.
    pub fn parse(raw: &str) -> Result<Self, CniError> {
        let mut pairs = Vec::new();
        for pair in raw.split(';').filter(|p| !p.is_empty()) {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(CniError::new(
                    ErrorCode::InvalidEnvironment,
                    format!("CNI_ARGS: {pair:?} is not KEY=VALUE"),
                ));
            };
            pairs.push((key.to_owned(), value.to_owned()));
        }
        Ok(Self(pairs))
    }

    /// The last value given for `key` (later pairs override earlier ones).
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// `K8S_POD_NAME`.
    pub fn pod_name(&self) -> Option<&str> {
        self.get("K8S_POD_NAME")
    }

    /// `K8S_POD_NAMESPACE`.
    pub fn pod_namespace(&self) -> Option<&str> {
        self.get("K8S_POD_NAMESPACE")
    }

    /// `K8S_POD_INFRA_CONTAINER_ID`.
    pub fn infra_container_id(&self) -> Option<&str> {
        self.get("K8S_POD_INFRA_CONTAINER_ID")
    }
}

/// Everything the runtime passed in the environment, checked for the command at hand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniEnv {
    /// `CNI_COMMAND`.
    pub command: Command,
    /// `CNI_CONTAINERID`; empty for STATUS, GC and VERSION.
    pub container_id: String,
    /// `CNI_NETNS`; may be empty on DEL (the spec lets the netns be gone already).
    pub netns: String,
    /// `CNI_IFNAME`.
    pub ifname: String,
    /// `CNI_ARGS`.
    pub args: CniArgs,
    /// `CNI_PATH`, split on `:`. Kept for completeness: the shim delegates to no other
    /// plugin, so it does not insist on it the way libcni's skeleton does.
    pub path: Vec<PathBuf>,
}

impl CniEnv {
    /// Reads the environment through `lookup` (so tests need not touch the process's own).
    /// Every missing or invalid variable is named in one code-4 error.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let get = |name: &str| lookup(name).unwrap_or_default();
        let raw_command = get("CNI_COMMAND");
        let command = Command::parse(&raw_command).ok_or_else(|| {
            let msg = if raw_command.is_empty() {
                "CNI_COMMAND is not set".to_owned()
            } else {
                format!("CNI_COMMAND {raw_command:?} is not ADD, DEL, CHECK, STATUS, GC or VERSION")
            };
            CniError::new(ErrorCode::InvalidEnvironment, msg)
        })?;
        let env = Self {
            command,
            container_id: get("CNI_CONTAINERID"),
            netns: get("CNI_NETNS"),
            ifname: get("CNI_IFNAME"),
            args: CniArgs::parse(&get("CNI_ARGS"))?,
            path: std::env::split_paths(&get("CNI_PATH")).collect(),
        };
        env.check()?;
        Ok(env)
    }

    fn check(&self) -> Result<(), CniError> {
        let required: &[(&str, &str)] = match self.command {
            Command::Add | Command::Check => &[
                ("CNI_CONTAINERID", &self.container_id),
                ("CNI_NETNS", &self.netns),
                ("CNI_IFNAME", &self.ifname),
            ],
            Command::Del => &[
                ("CNI_CONTAINERID", &self.container_id),
                ("CNI_IFNAME", &self.ifname),
            ],
            Command::Status | Command::Gc | Command::Version => &[],
        };
        let missing: Vec<&str> = required
            .iter()
            .filter(|(_, value)| value.is_empty())
            .map(|(name, _)| *name)
            .collect();
        if !missing.is_empty() {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!(
                    "{} requires {} to be set",
                    self.command.as_str(),
                    missing.join(", ")
                ),
            ));
        }
        if !required.is_empty()
            && let Some(why) = ifname_problem(&self.ifname)
        {
            return Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("CNI_IFNAME {:?} {why}", self.ifname),
            ));
        }
        Ok(())
    }
}

/// The spec's rules for an interface name (Linux's): why `name` breaks them, if it does.
fn ifname_problem(name: &str) -> Option<&'static str> {
    if name == "." || name == ".." {
        Some("must not be . or ..")
    } else if name.len() >= 16 {
        Some("must be shorter than 16 bytes")
    } else if name.chars().any(|c| c == '/' || c == ':' || c.is_whitespace()) {
        Some("must not contain /, : or whitespace")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> Result<CniEnv, CniError> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        CniEnv::from_lookup(|name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    #[test]
    fn add_with_everything() {
        let e = env(&[
            ("CNI_COMMAND", "ADD"),
            ("CNI_CONTAINERID", "abc"),
            ("CNI_NETNS", "/var/run/netns/p"),
            ("CNI_IFNAME", "eth0"),
            (
                "CNI_ARGS",
                "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc",
            ),
            ("CNI_PATH", "/opt/cni/bin:/usr/lib/cni"),
        ])
        .unwrap();
        assert_eq!(e.command, Command::Add);
        assert_eq!(e.args.pod_name(), Some("web-0"));
        assert_eq!(e.args.pod_namespace(), Some("default"));
        assert_eq!(e.args.infra_container_id(), Some("abc"));
        assert_eq!(e.path.len(), 2);
    }

    #[test]
    fn bad_environments_are_code_4_and_name_the_variable() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "CNI_COMMAND is not set"),
            (&[("CNI_COMMAND", "PLUG")], "\"PLUG\""),
            (
                &[("CNI_COMMAND", "ADD"), ("CNI_IFNAME", "eth0")],
                "CNI_CONTAINERID, CNI_NETNS",
            ),
            (&[("CNI_COMMAND", "DEL"), ("CNI_CONTAINERID", "c")], "CNI_IFNAME"),
            (
                &[
                    ("CNI_COMMAND", "ADD"),
                    ("CNI_CONTAINERID", "c"),
                    ("CNI_NETNS", "/n"),
                    ("CNI_IFNAME", "a/b"),
                ],
                "must not contain",
            ),
            (
                &[("CNI_COMMAND", "VERSION"), ("CNI_ARGS", "K8S_POD_NAME")],
                "CNI_ARGS",
            ),
        ];
        for (vars, needle) in cases {
            let err = env(vars).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidEnvironment, "{vars:?}");
            assert!(err.msg.contains(needle), "{vars:?}: {}", err.msg);
        }
    }

    #[test]
    fn del_without_netns_and_status_without_anything_are_fine() {
        env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c"),
            ("CNI_IFNAME", "eth0"),
        ])
        .unwrap();
        env(&[("CNI_COMMAND", "STATUS")]).unwrap();
        env(&[("CNI_COMMAND", "GC")]).unwrap();
    }
}
