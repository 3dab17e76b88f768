//! OVSDB remotes in the OVS syntax: `unix:PATH` and `tcp:HOST:PORT` (IPv6 as `tcp:[ADDR]:PORT`),
//! and comma-separated lists of them, as Kube-OVN's `--ovn-nb-addr` takes for a RAFT cluster.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::Error;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Remote {
    Unix(PathBuf),
    Tcp { host: String, port: u16 },
}

impl Remote {
    /// Parses a comma-separated list; empty entries are an error, not skipped, so a typo in a
    /// flag is reported instead of silently losing a cluster member.
    pub fn parse_list(list: &str) -> Result<Vec<Remote>, Error> {
        list.split(',').map(|r| r.trim().parse()).collect()
    }
}

impl FromStr for Remote {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let invalid = |reason: &str| Error::InvalidRemote {
            remote: s.to_owned(),
            reason: reason.to_owned(),
        };
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(invalid("unix: needs a socket path"));
            }
            return Ok(Remote::Unix(PathBuf::from(path)));
        }
        if let Some(rest) = s.strip_prefix("tcp:") {
            let (host, port) = if let Some(v6) = rest.strip_prefix('[') {
                let (host, port) = v6
                    .split_once("]:")
                    .ok_or_else(|| invalid("expected tcp:[ADDRESS]:PORT"))?;
                (host, port)
            } else {
                rest.rsplit_once(':')
                    .ok_or_else(|| invalid("expected tcp:HOST:PORT"))?
            };
            if host.is_empty() {
                return Err(invalid("empty host"));
            }
            let port = port
                .parse::<u16>()
                .map_err(|_| invalid("port is not a number between 0 and 65535"))?;
            return Ok(Remote::Tcp {
                host: host.to_owned(),
                port,
            });
        }
        if s.starts_with("ssl:") {
            return Err(invalid("ssl: remotes are not supported yet; use tcp: or unix:"));
        }
        Err(invalid("expected unix:PATH or tcp:HOST:PORT"))
    }
}

impl fmt::Display for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Remote::Unix(p) => write!(f, "unix:{}", p.display()),
            Remote::Tcp { host, port } if host.contains(':') => write!(f, "tcp:[{host}]:{port}"),
            Remote::Tcp { host, port } => write!(f, "tcp:{host}:{port}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for text in [
            "unix:/run/ovn/ovnnb_db.sock",
            "tcp:127.0.0.1:6641",
            "tcp:[fd00::1]:6641",
            "tcp:ovn-nb:6641",
        ] {
            assert_eq!(text.parse::<Remote>().unwrap().to_string(), text);
        }
        assert_eq!(Remote::parse_list("tcp:a:1, tcp:b:2").unwrap().len(), 2);
    }

    #[test]
    fn rejects_bad_remotes_naming_them() {
        for bad in [
            "",
            "unix:",
            "tcp:host",
            "tcp::1",
            "tcp:h:99999",
            "ssl:h:1",
            "http://x",
            "tcp:[::1:5",
        ] {
            let err = bad.parse::<Remote>().unwrap_err().to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        assert!(Remote::parse_list("tcp:a:1,,tcp:b:2").is_err());
    }
}
