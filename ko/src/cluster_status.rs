//! Which ovn-central pod holds a database's RAFT leadership, from `ovn-appctl -t <ctl>
//! cluster/status <DB>` (pure: the text in, the leader out).
//!
//! Kube-OVN's plugin finds the leader by the pod labels `ovn-nb-leader=true` /
//! `ovn-sb-leader=true`, which its ovn-central image's leader checker keeps up to date. Our
//! `deploy/` has no such checker, so the status itself says: a member that is the leader says
//! `Role: leader`; a follower names the leader's server ID (`Leader: 01f7`) and lists each
//! server's RAFT address under `Servers:` (`01f7 (01f7 at tcp:10.0.0.1:6643) ...`), and with
//! host networking that address is the leader pod's IP. A standalone database (our default of
//! one replica) has no `cluster/status` command at all: any member is the one to use.

/// What one member's `cluster/status` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// `Role:` (`leader`, `follower`, `candidate`).
    pub role: String,
    /// `Leader:`: `self`, a server ID, or `unknown` during an election.
    pub leader: String,
    /// Every server: short ID and RAFT address (`tcp:10.0.0.1:6643`).
    pub servers: Vec<(String, String)>,
}

/// Parses `cluster/status`'s text; `None` when it has no `Role:` (not a cluster status).
pub fn parse(text: &str) -> Option<ClusterStatus> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
    };
    let role = field("Role:")?;
    let leader = field("Leader:").unwrap_or_else(|| "unknown".into());
    let servers = text
        .lines()
        .skip_while(|l| !l.starts_with("Servers:"))
        .skip(1)
        .filter_map(server_line)
        .collect();
    Some(ClusterStatus {
        role,
        leader,
        servers,
    })
}

/// `    01f7 (01f7 at tcp:127.0.0.1:16643) (self) next_index=2 match_index=2`.
fn server_line(line: &str) -> Option<(String, String)> {
    let line = line.trim_start();
    let (id, rest) = line.split_once(' ')?;
    let inner = rest.strip_prefix('(')?.split_once(')')?.0;
    let address = inner.split_once(" at ")?.1;
    Some((id.to_owned(), address.to_owned()))
}

impl ClusterStatus {
    /// This member leads.
    pub fn is_leader(&self) -> bool {
        self.role == "leader"
    }

    /// The leader's host address (`10.0.0.1`, `fd00::1`), when this member knows the leader.
    pub fn leader_host(&self) -> Option<String> {
        let (_, address) = self.servers.iter().find(|(id, _)| *id == self.leader)?;
        host_of(address)
    }
}

/// The host of a RAFT address: `tcp:10.0.0.1:6643` → `10.0.0.1`, `ssl:[fd00::1]:6643` →
/// `fd00::1`.
pub fn host_of(address: &str) -> Option<String> {
    let (_, rest) = address.split_once(':')?;
    if let Some(v6) = rest.strip_prefix('[') {
        return Some(v6.split_once(']')?.0.to_owned());
    }
    Some(rest.rsplit_once(':')?.0.to_owned())
}

/// Whether an `ovn-appctl` error says the server has no `cluster/status` (a standalone database).
pub fn is_standalone_error(message: &str) -> bool {
    message.contains("\"cluster/status\" is not a valid command")
}

#[cfg(test)]
mod tests {
    use super::*;

    const FOLLOWER: &str = "abcd
Name: OVN_Northbound
Cluster ID: 8cb3 (8cb3efce-93b5-4038-b6c3-8ca03a260b10)
Server ID: abcd (abcdef00-6437-40a1-be8f-1c5a496899c3)
Address: tcp:10.0.0.2:6643
Status: cluster member
Role: follower
Term: 3
Leader: 01f7
Vote: 01f7

Election timer: 1000
Log: [2, 9]
Entries not yet committed: 0
Entries not yet applied: 0
Connections: ->01f7 <-01f7 ->9e11 <-9e11
Disconnections: 0
Servers:
    01f7 (01f7 at tcp:10.0.0.1:6643) last msg 212 ms ago
    abcd (abcd at tcp:10.0.0.2:6643) (self)
    9e11 (9e11 at tcp:[fd00::3]:6643) last msg 1200 ms ago
";

    /// As ovsdb-server 3.1 prints it for a one-member cluster (`ovsdb-tool create-cluster`).
    const LEADER: &str = "01f7
Name: OVN_Northbound
Cluster ID: 8cb3 (8cb3efce-93b5-4038-b6c3-8ca03a260b10)
Server ID: 01f7 (01f78456-6437-40a1-be8f-1c5a496899c3)
Address: tcp:127.0.0.1:16643
Status: cluster member
Role: leader
Term: 1
Leader: self
Vote: self

Last Election started 1030 ms ago, reason: timeout
Last Election won: 1030 ms ago
Election timer: 1000
Log: [2, 3]
Entries not yet committed: 0
Entries not yet applied: 0
Connections:
Disconnections: 0
Servers:
    01f7 (01f7 at tcp:127.0.0.1:16643) (self) next_index=2 match_index=2
";

    #[test]
    fn a_leader_says_so() {
        let status = parse(LEADER).unwrap();
        assert!(status.is_leader());
        assert_eq!(status.leader, "self");
        assert_eq!(
            status.servers,
            [("01f7".to_owned(), "tcp:127.0.0.1:16643".to_owned())]
        );
    }

    #[test]
    fn a_follower_names_the_leader_and_its_address() {
        let status = parse(FOLLOWER).unwrap();
        assert!(!status.is_leader());
        assert_eq!(status.leader, "01f7");
        assert_eq!(status.servers.len(), 3);
        assert_eq!(status.leader_host().as_deref(), Some("10.0.0.1"));
    }

    #[test]
    fn during_an_election_no_leader_is_known() {
        let text = FOLLOWER.replace("Leader: 01f7", "Leader: unknown");
        assert_eq!(parse(&text).unwrap().leader_host(), None);
    }

    #[test]
    fn hosts_of_raft_addresses() {
        assert_eq!(host_of("tcp:10.0.0.1:6643").as_deref(), Some("10.0.0.1"));
        assert_eq!(host_of("ssl:[fd00::3]:6643").as_deref(), Some("fd00::3"));
        assert_eq!(host_of("nonsense"), None);
    }

    #[test]
    fn text_without_a_role_is_no_status() {
        assert_eq!(parse("status: ok\n"), None);
    }

    #[test]
    fn a_standalone_server_has_no_cluster_status_command() {
        // ovn-appctl's stderr for a standalone ovsdb-server (3.1).
        assert!(is_standalone_error(
            "\"cluster/status\" is not a valid command (use \"list-commands\" to see a list of valid commands)\novn-appctl: /var/run/ovn/ovnnb_db.ctl: server returned an error"
        ));
        assert!(!is_standalone_error("connection refused"));
    }

    /// Against real ovsdb-servers: a 3-member RAFT cluster's every member's status names the
    /// same leader and its address; a standalone server's error is recognised; the backup
    /// commands `nb backup` runs give standalone copies of both kinds of file.
    #[test]
    fn real_servers_statuses_errors_and_backups() {
        use crate::db::{Database, backup_command};
        use kube_ovn_testkit::{NB_SCHEMA, OvsdbServer, RaftCluster};
        use std::time::Duration;

        let cluster = RaftCluster::start(NB_SCHEMA).expect("a RAFT cluster of ovsdb-servers");
        let leader = cluster
            .wait_for_leader(Duration::from_secs(30))
            .expect("a leader");
        let ctl = |name: &str| cluster.dir().join(format!("{name}.ctl")).display().to_string();
        let raft = |name: &str| format!("unix:{}", cluster.dir().join(format!("{name}.raft")).display());
        let appctl = |name: &str| {
            let out = std::process::Command::new("ovn-appctl")
                .args(["-t", &ctl(name), "cluster/status", "OVN_Northbound"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            String::from_utf8(out.stdout).unwrap()
        };
        let leader_name = cluster.members[leader].name.clone();
        for member in &cluster.members {
            // A follower names the leader from the leader's first heartbeat on.
            kube_ovn_testkit::wait_until(
                &format!("{} to know the leader", member.name),
                Duration::from_secs(30),
                || Ok(parse(&appctl(&member.name)).is_some_and(|s| s.leader != "unknown")),
            )
            .unwrap();
            let status = parse(&appctl(&member.name)).expect("a cluster status");
            assert_eq!(status.servers.len(), 3, "{status:?}");
            if member.name == leader_name {
                assert!(status.is_leader(), "{status:?}");
            } else {
                assert!(!status.is_leader());
                let named = status.servers.iter().find(|(id, _)| *id == status.leader);
                assert_eq!(
                    named.map(|(_, a)| a.clone()),
                    Some(raft(&leader_name)),
                    "{status:?}"
                );
            }
        }

        let target = cluster.dir().join("clustered.backup");
        let file = cluster.dir().join(format!("{leader_name}.db"));
        run_backup(
            &backup_command(Database::Northbound, true, &target.display().to_string()),
            &file,
        );
        assert_standalone(&target);

        let standalone = OvsdbServer::nb().expect("a standalone ovsdb-server");
        let err = standalone
            .appctl(&["cluster/status", "OVN_Northbound"])
            .expect_err("no cluster/status on a standalone server");
        assert!(is_standalone_error(&format!("{err:#}")), "{err:#}");
        let target = standalone.dir().join("standalone.backup");
        run_backup(
            &backup_command(Database::Northbound, false, &target.display().to_string()),
            &standalone.dir().join("db"),
        );
        assert_standalone(&target);
        // The live file is still served.
        standalone.nbctl(&["ls-list"]).expect("the server still answers");
    }

    /// Runs a backup command with the pod's database path replaced by `file`.
    fn run_backup(argv: &[String], file: &std::path::Path) {
        let argv: Vec<String> = argv
            .iter()
            .map(|a| {
                if a == "/etc/ovn/ovnnb_db.db" {
                    file.display().to_string()
                } else {
                    a.clone()
                }
            })
            .collect();
        let out = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .output()
            .unwrap();
        assert!(out.status.success(), "{argv:?}: {out:?}");
    }

    fn assert_standalone(file: &std::path::Path) {
        let out = std::process::Command::new("ovsdb-tool")
            .args(["db-is-standalone", &file.display().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{} is not a standalone database",
            file.display()
        );
    }
}
