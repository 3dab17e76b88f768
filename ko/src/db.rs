//! `kubectl ko nbctl|sbctl …` and `kubectl ko nb|sb status|kick|backup|dbstatus|restore`: the OVN
//! databases in the `ovn-central` pods (container `ovn-central`), as Kube-OVN's plugin reaches
//! them: the ctl sockets `/var/run/ovn/ovn{nb,sb}_db.ctl`, the files `/etc/ovn/ovn{nb,sb}_db.db`
//! (deploy/image/start-ovn-central.sh keeps both where Kube-OVN's image does).
//!
//! `nbctl`, `sbctl`, `status`, `kick` and `backup` run in the RAFT leader's pod
//! ([`crate::cluster_status`] says how it is found); `dbstatus` asks every pod.

use std::process::ExitCode;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::cluster_status;
use crate::kubectl;

/// The container of the ovn-central pods.
const CONTAINER: &str = "ovn-central";

/// Arguments of `kubectl ko nbctl|sbctl`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kubectl ko nbctl show\n  kubectl ko nbctl lr-route-list ovn-cluster\n  kubectl ko sbctl --columns=hostname,name list chassis"
)]
pub struct CtlArgs {
    /// ovn-nbctl (ovn-sbctl) options and command, passed on unchanged.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Arguments of `kubectl ko nb|sb <action>`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  kubectl ko nb status\n  kubectl ko sb kick 9e11\n  kubectl ko nb backup\n  kubectl ko sb dbstatus"
)]
pub struct DbArgs {
    #[command(subcommand)]
    pub action: DbAction,
}

/// What `kubectl ko nb|sb` does.
#[derive(Debug, clap::Subcommand)]
pub enum DbAction {
    /// The leader's RAFT status (cluster/status) and storage status; a standalone database
    /// (one replica) says so.
    Status,
    /// Remove a stale server from the RAFT cluster (cluster/kick), by its server ID or address
    /// as `status` lists them.
    Kick {
        /// Server ID (`9e11`) or address (`tcp:10.0.0.3:6643`).
        server: String,
    },
    /// Copy the database into the current directory as a standalone file
    /// (`ovn{nb,sb}_db.<time>.backup`).
    Backup,
    /// Storage status (ovsdb-server/get-db-storage-status) of both databases in every
    /// ovn-central pod.
    Dbstatus,
    /// Kube-OVN's NB restore after "inconsistent data": not offered here (see --help).
    #[command(
        long_about = "Kube-OVN's restore rebuilds the northbound RAFT cluster from one member's file \
through the ovs-ovn pods, which in Kube-OVN's manifests mount the database directory. Ours do not \
(deploy/base/ovs-ovn.yaml), so this verb refuses: restore by hand from `kubectl ko nb backup`'s file \
(docs/operations.md, \"kubectl ko\")."
    )]
    Restore,
}

/// Which OVN database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Database {
    Northbound,
    Southbound,
}

impl Database {
    /// `nb` / `sb`, as in the file names.
    fn short(self) -> &'static str {
        match self {
            Self::Northbound => "nb",
            Self::Southbound => "sb",
        }
    }

    /// The schema's database name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Northbound => "OVN_Northbound",
            Self::Southbound => "OVN_Southbound",
        }
    }

    /// The unixctl socket of its ovsdb-server.
    pub fn ctl(self) -> String {
        format!("/var/run/ovn/ovn{}_db.ctl", self.short())
    }

    /// The database file.
    fn file(self) -> String {
        format!("/etc/ovn/ovn{}_db.db", self.short())
    }

    /// `ovn-nbctl` / `ovn-sbctl`.
    fn tool(self) -> &'static str {
        match self {
            Self::Northbound => "ovn-nbctl",
            Self::Southbound => "ovn-sbctl",
        }
    }
}

/// `ovn-appctl -t <ctl> <command> <DB> [extra]`.
fn appctl(db: Database, command: &str, extra: &[&str]) -> Vec<String> {
    let mut argv = vec![
        "ovn-appctl".to_owned(),
        "-t".to_owned(),
        db.ctl(),
        command.to_owned(),
        db.name().to_owned(),
    ];
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    argv
}

/// The command `nbctl`/`sbctl` runs in the leader's pod.
pub fn ctl_command(db: Database, args: &[String]) -> Vec<String> {
    let mut argv = vec![db.tool().to_owned()];
    argv.extend(args.iter().cloned());
    argv
}

/// The commands `status` runs in the leader's pod: RAFT status (clustered only), storage status.
pub fn status_commands(db: Database, clustered: bool) -> Vec<Vec<String>> {
    let mut commands = Vec::new();
    if clustered {
        commands.push(appctl(db, "cluster/status", &[]));
    }
    commands.push(appctl(db, "ovsdb-server/get-db-storage-status", &[]));
    commands
}

/// The command `kick` runs in the leader's pod.
pub fn kick_command(db: Database, server: &str) -> Vec<String> {
    appctl(db, "cluster/kick", &[server])
}

/// The command that writes the standalone copy in the pod: a clustered file is converted (as
/// Kube-OVN does); a standalone one is compacted into the copy (`ovsdb-tool compact DB TARGET`
/// leaves DB alone and works while the server runs).
pub fn backup_command(db: Database, clustered: bool, target: &str) -> Vec<String> {
    let verb = if clustered {
        "cluster-to-standalone"
    } else {
        "compact"
    };
    let (first, second) = if clustered {
        (target.to_owned(), db.file())
    } else {
        (db.file(), target.to_owned())
    };
    vec!["ovsdb-tool".to_owned(), verb.to_owned(), first, second]
}

/// The backup's file name, in the pod's `/etc/ovn` and in the current directory.
pub fn backup_name(db: Database, seconds: u64) -> String {
    format!("ovn{}_db.{seconds}.backup", db.short())
}

/// The pod to run in, and whether the database is a RAFT cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub pod: String,
    pub clustered: bool,
}

/// Name and IPs of each ready ovn-central pod, from `kubectl get pods -o json` (pure).
pub fn ready_members(list: &Value) -> Vec<(String, Vec<String>)> {
    let ready: Vec<String> = kubectl::parse_pods(list)
        .into_iter()
        .filter(|p| p.ready)
        .map(|p| p.name)
        .collect();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|pod| {
            let name = pod["metadata"]["name"].as_str()?.to_owned();
            if !ready.contains(&name) {
                return None;
            }
            let mut ips: Vec<String> = pod["status"]["podIPs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|ip| ip["ip"].as_str().map(str::to_owned))
                .collect();
            if let Some(ip) = pod["status"]["podIP"].as_str()
                && !ips.iter().any(|i| i == ip)
            {
                ips.push(ip.to_owned());
            }
            Some((name, ips))
        })
        .collect()
}

/// The member whose IPs include `host`.
pub fn member_with_host<'a>(members: &'a [(String, Vec<String>)], host: &str) -> Option<&'a str> {
    members
        .iter()
        .find(|(_, ips)| ips.iter().any(|ip| ip == host))
        .map(|(name, _)| name.as_str())
}

/// Finds the pod to run in: the leader of a cluster, any ready member of a standalone database.
pub fn find_leader(db: Database) -> anyhow::Result<Leader> {
    let list = kubectl::json(&[
        "get",
        "pods",
        "-n",
        &kubectl::namespace(),
        "-l",
        "app=ovn-central",
    ])?;
    let members = ready_members(&list);
    if members.is_empty() {
        bail!(
            "no ready ovn-central pod (app=ovn-central) in namespace {}",
            kubectl::namespace()
        );
    }
    let mut last = String::new();
    for (i, (pod, _)) in members.iter().enumerate() {
        let argv = appctl(db, "cluster/status", &[]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        match kubectl::exec(pod, CONTAINER, &argv) {
            Err(e) if cluster_status::is_standalone_error(&format!("{e:#}")) => {
                return Ok(Leader {
                    pod: pod.clone(),
                    clustered: false,
                });
            }
            Err(e) => last = format!("{pod}: {e:#}"),
            Ok(text) => {
                let Some(status) = cluster_status::parse(&text) else {
                    last = format!("{pod}: cluster/status without a Role: {text}");
                    continue;
                };
                if status.is_leader() {
                    return Ok(Leader {
                        pod: pod.clone(),
                        clustered: true,
                    });
                }
                // The first follower asked names the leader: no need to ask every pod.
                if i == 0
                    && let Some(leader) = status
                        .leader_host()
                        .and_then(|h| member_with_host(&members, &h).map(str::to_owned))
                {
                    return Ok(Leader {
                        pod: leader,
                        clustered: true,
                    });
                }
                last = format!("{pod}: {} (leader {})", status.role, status.leader);
            }
        }
    }
    bail!(
        "no leader of {} among the ready ovn-central pods (an election in progress, or quorum lost? `kubectl ko {} dbstatus`); last answer: {last}",
        db.name(),
        db.short()
    )
}

/// `kubectl ko nbctl|sbctl …`.
pub fn ctl(db: Database, args: &CtlArgs) -> anyhow::Result<ExitCode> {
    let leader = find_leader(db)?;
    let argv = ctl_command(db, &args.args);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Ok(kubectl::exit_code(kubectl::exec_attached(
        &leader.pod,
        CONTAINER,
        &argv,
    )?))
}

/// `kubectl ko nb|sb <action>`.
pub fn db(db: Database, args: &DbArgs) -> anyhow::Result<ExitCode> {
    match &args.action {
        DbAction::Status => {
            let leader = find_leader(db)?;
            if !leader.clustered {
                println!(
                    "{}: a standalone database (not RAFT) in pod {}",
                    db.name(),
                    leader.pod
                );
            }
            for argv in status_commands(db, leader.clustered) {
                let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                print!("{}", kubectl::exec(&leader.pod, CONTAINER, &argv)?);
            }
        }
        DbAction::Kick { server } => {
            let leader = find_leader(db)?;
            if !leader.clustered {
                bail!("{} is a standalone database: no RAFT server to kick", db.name());
            }
            let argv = kick_command(db, server);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            print!("{}", kubectl::exec(&leader.pod, CONTAINER, &argv)?);
        }
        DbAction::Backup => backup(db)?,
        DbAction::Dbstatus => dbstatus()?,
        DbAction::Restore => bail!(
            "restore is not offered for kube-ovn-rs's deploy (see `kubectl ko {} restore --help`)",
            db.short()
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn backup(db: Database) -> anyhow::Result<()> {
    let leader = find_leader(db)?;
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = backup_name(db, seconds);
    let in_pod = format!("/etc/ovn/{name}");
    let argv = backup_command(db, leader.clustered, &in_pod);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    kubectl::exec(&leader.pod, CONTAINER, &argv)?;
    let ns = kubectl::namespace();
    let copied = kubectl::output(&[
        "cp",
        "-n",
        &ns,
        "-c",
        CONTAINER,
        &format!("{}:{in_pod}", leader.pod),
        &name,
    ]);
    // The copy in the pod goes either way: it is on the node's disk (a hostPath).
    let removed = kubectl::exec(&leader.pod, CONTAINER, &["rm", "-f", &in_pod]);
    copied.with_context(|| format!("copying {in_pod} out of pod {}", leader.pod))?;
    removed.with_context(|| format!("removing {in_pod} in pod {}", leader.pod))?;
    let here = std::env::current_dir().map_or_else(|_| name.clone(), |d| d.join(&name).display().to_string());
    println!("backup of {} (pod {}) written to {here}", db.name(), leader.pod);
    Ok(())
}

/// Both databases' storage status in every ovn-central pod (Kube-OVN's `dbstatus` prints both
/// whichever of `nb`/`sb` is asked).
fn dbstatus() -> anyhow::Result<()> {
    let pods = kubectl::component_pods("ovn-central")?;
    if pods.is_empty() {
        bail!(
            "no ovn-central pod (app=ovn-central) in namespace {}",
            kubectl::namespace()
        );
    }
    for pod in pods {
        println!("get dbstatus in pod {}", pod.name);
        for db in [Database::Northbound, Database::Southbound] {
            let argv = appctl(db, "ovsdb-server/get-db-storage-status", &[]);
            let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
            match kubectl::exec(&pod.name, CONTAINER, &argv) {
                Ok(text) => println!("{} db status {}", db.short(), text.trim_end()),
                Err(e) => println!("{} db status unknown: {e:#}", db.short()),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strs(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }

    #[test]
    fn nbctl_and_sbctl_pass_their_arguments_on() {
        let args = vec![
            "--columns=name".to_owned(),
            "list".to_owned(),
            "chassis".to_owned(),
        ];
        assert_eq!(
            strs(&ctl_command(Database::Southbound, &args)),
            ["ovn-sbctl", "--columns=name", "list", "chassis"]
        );
        assert_eq!(strs(&ctl_command(Database::Northbound, &[])), ["ovn-nbctl"]);
    }

    #[test]
    fn status_asks_the_raft_status_only_of_a_cluster() {
        let clustered = status_commands(Database::Northbound, true);
        assert_eq!(
            strs(&clustered[0]),
            [
                "ovn-appctl",
                "-t",
                "/var/run/ovn/ovnnb_db.ctl",
                "cluster/status",
                "OVN_Northbound"
            ]
        );
        assert_eq!(
            strs(&clustered[1]),
            [
                "ovn-appctl",
                "-t",
                "/var/run/ovn/ovnnb_db.ctl",
                "ovsdb-server/get-db-storage-status",
                "OVN_Northbound"
            ]
        );
        let standalone = status_commands(Database::Southbound, false);
        assert_eq!(standalone.len(), 1);
        assert_eq!(standalone[0][2], "/var/run/ovn/ovnsb_db.ctl");
    }

    #[test]
    fn kick_names_the_server() {
        assert_eq!(
            strs(&kick_command(Database::Southbound, "9e11")),
            [
                "ovn-appctl",
                "-t",
                "/var/run/ovn/ovnsb_db.ctl",
                "cluster/kick",
                "OVN_Southbound",
                "9e11"
            ]
        );
    }

    #[test]
    fn backup_converts_a_cluster_and_compacts_a_standalone_file() {
        let name = backup_name(Database::Northbound, 1_700_000_000);
        assert_eq!(name, "ovnnb_db.1700000000.backup");
        let target = format!("/etc/ovn/{name}");
        assert_eq!(
            strs(&backup_command(Database::Northbound, true, &target)),
            [
                "ovsdb-tool",
                "cluster-to-standalone",
                target.as_str(),
                "/etc/ovn/ovnnb_db.db"
            ]
        );
        assert_eq!(
            strs(&backup_command(Database::Northbound, false, &target)),
            ["ovsdb-tool", "compact", "/etc/ovn/ovnnb_db.db", target.as_str()]
        );
    }

    #[test]
    fn the_leader_pod_is_the_ready_member_with_the_leaders_address() {
        let list = json!({"items": [
            {"metadata": {"name": "ovn-central-a"}, "spec": {"nodeName": "m1"},
             "status": {"phase": "Running", "podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}],
                        "containerStatuses": [{"ready": true}]}},
            {"metadata": {"name": "ovn-central-b"}, "spec": {"nodeName": "m2"},
             "status": {"phase": "Running", "podIP": "10.0.0.2", "containerStatuses": [{"ready": true}]}},
            {"metadata": {"name": "ovn-central-c"}, "spec": {"nodeName": "m3"},
             "status": {"phase": "Running", "podIP": "10.0.0.3", "containerStatuses": [{"ready": false}]}}
        ]});
        let members = ready_members(&list);
        assert_eq!(
            members,
            [
                (
                    "ovn-central-a".to_owned(),
                    vec!["10.0.0.1".to_owned(), "fd00::1".to_owned()]
                ),
                ("ovn-central-b".to_owned(), vec!["10.0.0.2".to_owned()]),
            ]
        );
        assert_eq!(member_with_host(&members, "fd00::1"), Some("ovn-central-a"));
        assert_eq!(member_with_host(&members, "10.0.0.2"), Some("ovn-central-b"));
        // Not ready: never chosen, even when the status names it.
        assert_eq!(member_with_host(&members, "10.0.0.3"), None);
    }
}
