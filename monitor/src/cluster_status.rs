//! The text of `ovn-appctl -t <db>.ctl cluster/status <database>` (ovsdb-server's RAFT status),
//! parsed into what Kube-OVN's monitor exports as `kube_ovn_cluster_*` and `kube_ovn_ovn_status`.
//!
//! Pure: text in, [`ClusterStatus`] out. The layout (OVS 3.x):
//!
//! ```text
//! Cluster ID: 3984 (3984679c-624e-45c3-a941-942d90fd53a9)
//! Server ID: 6c57 (6c574d2f-400d-4ef3-9d78-b0c8e7f6c369)
//! Status: cluster member
//! Role: leader
//! Term: 1
//! Leader: self
//! Vote: self
//! Election timer: 1000
//! Log: [2, 5]
//! Entries not yet committed: 0
//! Entries not yet applied: 0
//! Connections: <-m2 <-m3 ->m2 (->m3)
//! Servers:
//!     m3 (a455 at unix:/…/m3.raft) next_index=5 match_index=4 last msg 314 ms ago
//! ```

/// One RAFT member's view of its cluster.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterStatus {
    /// The full cluster UUID (the value in parentheses of `Cluster ID:`), as Kube-OVN labels it.
    pub cluster_id: String,
    /// The full server UUID (`Server ID:`).
    pub server_id: String,
    /// `cluster member`, `joining cluster`, `leaving cluster`, `left cluster`, `disconnected from
    /// the cluster (election timeout)`.
    pub status: String,
    /// `leader`, `follower` or `candidate`.
    pub role: String,
    pub term: u64,
    /// `self`, a server name, or `unknown`.
    pub leader: String,
    /// `self`, a server name, or `unknown`.
    pub vote: String,
    /// Milliseconds.
    pub election_timer: u64,
    /// `Log: [start, next]`.
    pub log_index_start: u64,
    pub log_index_next: u64,
    pub log_not_committed: u64,
    pub log_not_applied: u64,
    pub connections: Connections,
    /// Members listed under `Servers:`, this one included.
    pub servers: Vec<Server>,
}

/// The `Connections:` line: `->x` outbound, `<-x` inbound, in parentheses when not (yet) up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Connections {
    pub inbound: u64,
    pub outbound: u64,
    pub inbound_failed: u64,
    pub outbound_failed: u64,
}

/// One line under `Servers:`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    /// The short server ID (4 hex digits).
    pub short_id: String,
    pub address: String,
    pub is_self: bool,
}

impl ClusterStatus {
    pub fn is_leader(&self) -> bool {
        self.leader == "self"
    }

    pub fn voted_self(&self) -> bool {
        self.vote == "self"
    }

    /// `kube_ovn_ovn_status` of a database: 1 leader, 2 follower, 0 anything else (Kube-OVN's
    /// `parseDbStatus`; a candidate is unhealthy until it wins or loses).
    pub fn health(&self) -> u8 {
        role_health(&self.role)
    }
}

/// 1 for `leader`, 2 for `follower`, 0 otherwise.
pub fn role_health(role: &str) -> u8 {
    match role {
        "leader" => 1,
        "follower" => 2,
        _ => 0,
    }
}

/// Why a `cluster/status` text is not one.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("cluster/status has no {0:?} line")]
    Missing(&'static str),
    #[error("cluster/status line {field:?}: {value:?} is not {expected}")]
    Invalid {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// Parses the whole output. `Cluster ID`, `Server ID`, `Role` and `Term` must be there; a
/// missing counter reads as 0 (an older ovsdb-server prints fewer lines).
pub fn parse(text: &str) -> Result<ClusterStatus, ParseError> {
    let mut s = ClusterStatus::default();
    let (mut have_cid, mut have_sid, mut have_role, mut have_term) = (false, false, false, false);
    let mut in_servers = false;
    for line in text.lines() {
        if in_servers {
            if let Some(server) = parse_server(line) {
                s.servers.push(server);
                continue;
            }
            in_servers = false;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Cluster ID" => {
                long_id(value).clone_into(&mut s.cluster_id);
                have_cid = true;
            }
            "Server ID" => {
                long_id(value).clone_into(&mut s.server_id);
                have_sid = true;
            }
            "Status" => value.clone_into(&mut s.status),
            "Role" => {
                value.clone_into(&mut s.role);
                have_role = true;
            }
            "Term" => {
                s.term = number("Term", value)?;
                have_term = true;
            }
            "Leader" => value.clone_into(&mut s.leader),
            "Vote" => value.clone_into(&mut s.vote),
            "Election timer" => s.election_timer = number("Election timer", value)?,
            "Log" => (s.log_index_start, s.log_index_next) = log_range(value)?,
            "Entries not yet committed" => {
                s.log_not_committed = number("Entries not yet committed", value)?;
            }
            "Entries not yet applied" => {
                s.log_not_applied = number("Entries not yet applied", value)?;
            }
            "Connections" => s.connections = connections(value),
            "Servers" => in_servers = true,
            _ => {}
        }
    }
    for (present, field) in [
        (have_cid, "Cluster ID"),
        (have_sid, "Server ID"),
        (have_role, "Role"),
        (have_term, "Term"),
    ] {
        if !present {
            return Err(ParseError::Missing(field));
        }
    }
    Ok(s)
}

/// `3984 (3984679c-…)` → the UUID in parentheses; a bare value is kept as it is.
fn long_id(value: &str) -> &str {
    value
        .split_once('(')
        .and_then(|(_, rest)| rest.strip_suffix(')'))
        .unwrap_or(value)
}

fn number(field: &'static str, value: &str) -> Result<u64, ParseError> {
    value.parse().map_err(|_| ParseError::Invalid {
        field,
        value: value.to_owned(),
        expected: "a whole number",
    })
}

/// `[2, 1108]` → (2, 1108).
fn log_range(value: &str) -> Result<(u64, u64), ParseError> {
    let invalid = || ParseError::Invalid {
        field: "Log",
        value: value.to_owned(),
        expected: "[start, next]",
    };
    let inner = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .ok_or_else(invalid)?;
    let (start, next) = inner.split_once(',').ok_or_else(invalid)?;
    Ok((
        start.trim().parse().map_err(|_| invalid())?,
        next.trim().parse().map_err(|_| invalid())?,
    ))
}

fn connections(value: &str) -> Connections {
    let mut c = Connections::default();
    for conn in value.split_whitespace() {
        if conn.starts_with("(->") {
            c.outbound_failed += 1;
        } else if conn.starts_with("(<-") {
            c.inbound_failed += 1;
        } else if conn.starts_with("->") {
            c.outbound += 1;
        } else if conn.starts_with("<-") {
            c.inbound += 1;
        }
    }
    c
}

/// `    m3 (a455 at unix:/x/m3.raft) (self) next_index=5 …`.
fn parse_server(line: &str) -> Option<Server> {
    if !line.starts_with(' ') {
        return None;
    }
    let line = line.trim();
    let (name, rest) = line.split_once(" (")?;
    let (inside, after) = rest.split_once(')')?;
    let (short_id, address) = inside.split_once(" at ")?;
    Some(Server {
        name: name.to_owned(),
        short_id: short_id.to_owned(),
        address: address.to_owned(),
        is_self: after.trim_start().starts_with("(self)"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a 3-member OVN_Northbound cluster (ovsdb-server 3.1), before and after
    // killing the first leader.
    const LEADER: &str = include_str!("testdata/leader.txt");
    const FOLLOWER: &str = include_str!("testdata/follower.txt");
    const LEADER_AFTER: &str = include_str!("testdata/leader-after-failover.txt");
    const FOLLOWER_AFTER: &str = include_str!("testdata/follower-after-failover.txt");

    #[test]
    fn a_leader() {
        let s = parse(LEADER).unwrap();
        assert_eq!(s.cluster_id, "3984679c-624e-45c3-a941-942d90fd53a9");
        assert_eq!(s.server_id, "6c574d2f-400d-4ef3-9d78-b0c8e7f6c369");
        assert_eq!(s.status, "cluster member");
        assert_eq!(s.role, "leader");
        assert_eq!(s.term, 1);
        assert!(s.is_leader() && s.voted_self());
        assert_eq!(s.health(), 1);
        assert_eq!(s.election_timer, 1000);
        assert_eq!((s.log_index_start, s.log_index_next), (2, 5));
        assert_eq!((s.log_not_committed, s.log_not_applied), (0, 0));
        assert_eq!(
            s.connections,
            Connections {
                inbound: 2,
                outbound: 2,
                inbound_failed: 0,
                outbound_failed: 0
            }
        );
        assert_eq!(s.servers.len(), 3);
        assert_eq!(s.servers[0].name, "m3");
        assert_eq!(s.servers[0].short_id, "a455");
        assert_eq!(s.servers[0].address, "unix:/tmp/mon-raft-xQqW/m3.raft");
        assert!(s.servers[2].is_self && !s.servers[0].is_self);
    }

    #[test]
    fn a_follower() {
        let s = parse(FOLLOWER).unwrap();
        assert_eq!(s.role, "follower");
        assert_eq!(s.leader, "m1");
        assert_eq!(s.vote, "unknown");
        assert!(!s.is_leader() && !s.voted_self());
        assert_eq!(s.health(), 2);
        assert_eq!(s.servers.iter().filter(|m| m.is_self).count(), 1);
    }

    #[test]
    fn after_the_leader_died() {
        let leader = parse(LEADER_AFTER).unwrap();
        assert_eq!((leader.role.as_str(), leader.term), ("leader", 2));
        assert_eq!(leader.log_index_next, 6);
        // `(->m1)`: the dead member's outbound connection is not up.
        assert_eq!(leader.connections.outbound_failed, 1);
        assert_eq!((leader.connections.outbound, leader.connections.inbound), (1, 1));
        let follower = parse(FOLLOWER_AFTER).unwrap();
        assert_eq!(follower.leader, "m3");
        assert_eq!(follower.vote, "m3");
        assert_eq!(follower.term, 2);
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            parse("\"cluster/status\" is not a valid command"),
            Err(ParseError::Missing("Cluster ID"))
        );
        let bad = LEADER.replace("Term: 1", "Term: one");
        assert_eq!(
            parse(&bad).unwrap_err().to_string(),
            "cluster/status line \"Term\": \"one\" is not a whole number"
        );
        let bad = LEADER.replace("Log: [2, 5]", "Log: 2 5");
        assert!(parse(&bad).unwrap_err().to_string().contains("[start, next]"));
        assert_eq!(role_health("candidate"), 0);
    }
}
