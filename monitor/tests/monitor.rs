//! kube-ovn-monitor against real OVN: a 3-member OVN_Northbound RAFT cluster whose leader is
//! killed, and OVN central (NB, SB, two ovn-northd) started with Kube-OVN's release argv.

mod common;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use common::{Monitor, WAIT, gauge, label, samples};
use kube_ovn_testkit::kube_ovn_argv::{self, with_log_dir};
use kube_ovn_testkit::{Daemon, NB_SCHEMA, OvnCentral, RaftCluster, run, wait_until};

/// A `cluster/status` field, straight from ovsdb-server: what the metrics must match.
fn status_field(ctl: &Path, field: &str) -> Result<String> {
    let ctl = ctl.display().to_string();
    let text = run("ovs-appctl", &["-t", &ctl, "cluster/status", "OVN_Northbound"])?;
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(": "))
        .map(|v| v.split(['(', ')']).nth(1).unwrap_or(v).trim().to_owned())
        .with_context(|| format!("no {field} in {text}"))
}

/// One monitor per member, as the ovn-central sidecar runs beside each. The testkit keeps a
/// member's files side by side: `<dir>/<name>.sock`, `.ctl`, `.db`, `.log`.
fn member_monitor(socket: &Path, scratch: &Path, name: &str) -> Result<Monitor> {
    let at = |ext: &str| socket.with_extension(ext).display().to_string();
    let none = |file: &str| scratch.join(file).display().to_string();
    let args: Vec<String> = [
        "--ovs.poll-interval=1".to_owned(),
        format!("--node-name={name}"),
        format!("--database.northbound.socket.remote=unix:{}", at("sock")),
        format!("--database.northbound.socket.control=unix:{}", at("ctl")),
        format!("--database.northbound.file.data.path={}", at("db")),
        format!("--database.northbound.file.log.path={}", at("log")),
        // No southbound database and no ovn-northd here: their gauges say so.
        format!("--database.southbound.socket.remote=unix:{}", none("sb.sock")),
        format!("--database.southbound.socket.control=unix:{}", none("sb.ctl")),
        format!("--database.southbound.file.data.path={}", none("sb.db")),
        format!("--service.ovn.northd.file.pid.path={}", none("ovn-northd.pid")),
    ]
    .into();
    Monitor::start(
        &format!("kube-ovn-monitor {name}"),
        &args,
        &[],
        &scratch.join(format!("monitor-{name}.log")),
    )
}

fn nb(name: &str) -> [(&'static str, &str); 2] {
    [("hostname", name), ("db_name", "OVN_Northbound")]
}

#[test]
fn raft_metrics_follow_a_leader_change() -> Result<()> {
    let mut cluster = RaftCluster::start(NB_SCHEMA)?;
    let scratch = tempfile::tempdir()?;
    let old_leader = cluster.leader()?;
    let followers: Vec<usize> = (0..3).filter(|i| *i != old_leader).collect();
    let mut monitors = Vec::new();
    for &i in &followers {
        let m = &cluster.members[i];
        let mut monitor = member_monitor(&m.socket(), scratch.path(), &m.name)?;
        monitor.wait_ready()?;
        monitors.push((i, monitor));
    }

    // Before: each follower's gauges are its own cluster/status.
    let mut old_term = 0.0;
    for (i, monitor) in &monitors {
        let m = &cluster.members[*i];
        let ctl = m.socket().with_extension("ctl");
        let term: f64 = status_field(&ctl, "Term")?.parse()?;
        let server_id = status_field(&ctl, "Server ID")?;
        let cluster_id = status_field(&ctl, "Cluster ID")?;
        let text = monitor.wait_metrics(&format!("{}'s term {term} as a follower", m.name), |t| {
            gauge(t, "kube_ovn_cluster_term", &nb(&m.name)) == Some(term)
        })?;
        let ids = [
            ("server_id", server_id.as_str()),
            ("cluster_id", cluster_id.as_str()),
        ];
        assert_eq!(
            gauge(&text, "kube_ovn_cluster_leader_self", &ids),
            Some(0.0),
            "{text}"
        );
        assert_eq!(
            gauge(
                &text,
                "kube_ovn_cluster_role",
                &[ids[0], ids[1], ("server_role", "follower")]
            ),
            Some(1.0),
            "{text}"
        );
        let status = [("component", "ovsdb-server-northbound")];
        assert_eq!(gauge(&text, "kube_ovn_ovn_status", &status), Some(2.0), "{text}");
        assert_eq!(gauge(&text, "kube_ovn_cluster_enabled", &[]), Some(1.0), "{text}");
        assert_eq!(
            gauge(&text, "kube_ovn_cluster_peer_count", &ids),
            Some(3.0),
            "{text}"
        );
        assert_eq!(
            gauge(&text, "kube_ovn_db_status", &nb(&m.name)),
            Some(1.0),
            "{text}"
        );
        assert!(gauge(&text, "kube_ovn_db_file_size_bytes", &nb(&m.name)).is_some_and(|s| s > 0.0));
        // Neither the southbound database nor ovn-northd is there.
        let sb = [("component", "ovsdb-server-southbound")];
        assert_eq!(gauge(&text, "kube_ovn_ovn_status", &sb), Some(0.0), "{text}");
        assert_eq!(
            gauge(&text, "kube_ovn_ovn_status", &[("component", "ovn-northd")]),
            Some(0.0)
        );
        old_term = term;
    }

    cluster.members[old_leader].kill();
    cluster.wait_for_leader(WAIT)?;

    // After: each monitor reports its member's live cluster/status (read again at each look, so
    // a second election on a loaded machine is followed, not failed): a term above the old one,
    // and leader_self and the role as the member says.
    for (i, monitor) in &monitors {
        let name = &cluster.members[*i].name;
        let ctl = cluster.members[*i].socket().with_extension("ctl");
        let text = monitor.wait_metrics(&format!("{name} to report its new term and role"), |t| {
            let (Ok(term), Ok(role)) = (status_field(&ctl, "Term"), status_field(&ctl, "Role")) else {
                return false;
            };
            let term: f64 = term.parse().unwrap_or(0.0);
            let leads = f64::from(u8::from(role == "leader"));
            // Not a candidate (ovn_status 0) at that moment.
            let settled = role == "leader" || role == "follower";
            settled
                && term > old_term
                && gauge(t, "kube_ovn_cluster_term", &nb(name)) == Some(term)
                && gauge(t, "kube_ovn_cluster_leader_self", &nb(name)) == Some(leads)
                && label(t, "kube_ovn_cluster_role", &nb(name), "server_role").as_deref()
                    == Some(role.as_str())
        })?;
        let leads = gauge(&text, "kube_ovn_cluster_leader_self", &nb(name)) == Some(1.0);
        let status = [("component", "ovsdb-server-northbound")];
        assert_eq!(
            gauge(&text, "kube_ovn_ovn_status", &status),
            Some(if leads { 1.0 } else { 2.0 }),
            "{text}"
        );
        if leads {
            // The dead member's connection is down.
            let failed = gauge(
                &text,
                "kube_ovn_cluster_outbound_connections_error_total",
                &nb(name),
            );
            assert!(failed.is_some_and(|n| n >= 1.0), "{text}");
        }
    }
    // The two survivors elected one of themselves, and exactly its monitor says so.
    wait_until(
        "exactly the leader's monitor to report leader_self 1",
        WAIT,
        || {
            let leader = cluster.leader()?;
            anyhow::ensure!(followers.contains(&leader), "the leader is still {old_leader}");
            let mut reporting = Vec::new();
            for (i, monitor) in &monitors {
                let name = &cluster.members[*i].name;
                if gauge(&monitor.scrape()?, "kube_ovn_cluster_leader_self", &nb(name)) == Some(1.0) {
                    reporting.push(*i);
                }
            }
            Ok(reporting == [leader])
        },
    )?;
    Ok(())
}

/// A second ovn-northd on central's databases, with a pidfile and its control socket where
/// Kube-OVN's image has them (`ovn-northd.<pid>.ctl` in the run directory): standby while
/// central's holds the southbound lock.
fn standby_northd(central: &OvnCentral, dir: &Path) -> Result<(Daemon, PathBuf)> {
    let pid_file = dir.join("ovn-northd.pid");
    let args = vec![
        format!("--ovnnb-db={}", central.nb_remote()),
        format!("--ovnsb-db={}", central.sb_remote()),
        format!("--pidfile={}", pid_file.display()),
        "-vconsole:info".to_owned(),
    ];
    let envs = [("OVN_RUNDIR", dir), ("OVS_RUNDIR", dir)];
    let mut northd = Daemon::spawn(
        "ovn-northd standby",
        "ovn-northd",
        &args,
        &dir.join("ovn-northd.log"),
        &envs,
    )?;
    wait_until("the second ovn-northd's pidfile and control socket", WAIT, || {
        northd.check_alive()?;
        let Ok(pid) = std::fs::read_to_string(&pid_file) else {
            return Ok(false);
        };
        Ok(dir.join(format!("ovn-northd.{}.ctl", pid.trim())).exists())
    })?;
    Ok((northd, pid_file))
}

#[test]
fn release_argv_serves_central_and_its_inventory() -> Result<()> {
    let mut central = OvnCentral::start()?;
    let scratch = tempfile::tempdir()?;
    let (_standby, pid_file) = standby_northd(&central, scratch.path())?;
    let (nb_dir, sb_dir) = (central.nb.dir().to_owned(), central.sb.dir().to_owned());
    let path = |dir: &Path, file: &str| dir.join(file).display().to_string();
    // The manifest's argv as it is; its environment (ENABLE_BIND_LOCAL_IP, POD_IPS, NODE_NAME);
    // and, since every flag is also a variable, the test's paths and a short poll interval.
    let env = [
        ("ENABLE_BIND_LOCAL_IP", "true".to_owned()),
        ("POD_IPS", "127.0.0.1".to_owned()),
        ("NODE_NAME", "master-1".to_owned()),
        ("ENABLE_SSL", "false".to_owned()),
        ("OVS_POLL_INTERVAL", "1".to_owned()),
        ("DATABASE_NORTHBOUND_SOCKET_REMOTE", central.nb_remote()),
        (
            "DATABASE_NORTHBOUND_SOCKET_CONTROL",
            format!("unix:{}", path(&nb_dir, "ctl")),
        ),
        ("DATABASE_NORTHBOUND_FILE_DATA_PATH", path(&nb_dir, "db")),
        (
            "DATABASE_NORTHBOUND_FILE_LOG_PATH",
            path(&nb_dir, "ovsdb-server.log"),
        ),
        ("DATABASE_SOUTHBOUND_SOCKET_REMOTE", central.sb_remote()),
        (
            "DATABASE_SOUTHBOUND_SOCKET_CONTROL",
            format!("unix:{}", path(&sb_dir, "ctl")),
        ),
        ("DATABASE_SOUTHBOUND_FILE_DATA_PATH", path(&sb_dir, "db")),
        ("SERVICE_OVN_NORTHD_FILE_PID_PATH", pid_file.display().to_string()),
        (
            "SERVICE_OVN_NORTHD_FILE_LOG_PATH",
            path(scratch.path(), "ovn-northd.log"),
        ),
    ];
    // Kube-OVN's release argv (recorded in testkit, release named); its log file moves from the
    // host's /var/log/kube-ovn into the test's directory.
    let args = with_log_dir(kube_ovn_argv::MONITOR, scratch.path());
    let logs = scratch
        .path()
        .join(kube_ovn_argv::LOG_DIR.trim_start_matches('/'));
    let mut monitor = Monitor::start(
        "kube-ovn-monitor v1.16.2 argv",
        &args,
        &env,
        &scratch.path().join("monitor.log"),
    )?;
    monitor.wait_ready()?;
    assert_eq!(monitor.get("/livez")?.0, 200);
    assert_eq!(monitor.get("/healthz")?.0, 200);
    // `--logtostderr=false --log_file=…`: the JSON lines go to the manifest's file.
    let log = std::fs::read_to_string(logs.join("kube-ovn-monitor.log")).context("--log_file")?;
    assert!(
        log.lines().any(|l| l.starts_with('{')),
        "no JSON line in --log_file: {log}"
    );

    let host = ("hostname", "master-1");
    let northd = [host, ("component", "ovn-northd")];
    let text = monitor.wait_metrics("the second ovn-northd reported standby (2)", |t| {
        gauge(t, "kube_ovn_ovn_status", &northd) == Some(2.0)
    })?;
    for db in ["OVN_Northbound", "OVN_Southbound"] {
        assert_eq!(
            gauge(&text, "kube_ovn_db_status", &[host, ("db_name", db)]),
            Some(1.0),
            "{text}"
        );
        assert!(
            gauge(&text, "kube_ovn_db_file_size_bytes", &[host, ("db_name", db)]).is_some_and(|s| s > 0.0)
        );
    }
    // Standalone databases: not clustered, no RAFT role (Kube-OVN reports 0, "unhealthy").
    assert_eq!(
        gauge(&text, "kube_ovn_cluster_enabled", &[host]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        gauge(
            &text,
            "kube_ovn_ovn_status",
            &[host, ("component", "ovsdb-server-northbound")]
        ),
        Some(0.0)
    );
    assert_eq!(samples(&text, "kube_ovn_cluster_term"), 0, "{text}");

    // A switch with a port, and a chassis, appear in the next collections.
    central.nbctl(&["ls-add", "mon-sw"])?;
    central.nbctl(&["lsp-add", "mon-sw", "mon-p1"])?;
    central.nbctl(&["lsp-set-addresses", "mon-p1", "0a:00:00:00:00:07 10.7.0.5"])?;
    central.sbctl(&["chassis-add", "mon-ch", "geneve", "192.0.2.7"])?;
    central.sync()?;
    let sw = [host, ("logical_switch_name", "mon-sw")];
    let text = monitor.wait_metrics("mon-sw with one port, its tunnel key and mon-ch", |t| {
        gauge(t, "kube_ovn_logical_switch_ports_num", &sw) == Some(1.0)
            && gauge(t, "kube_ovn_logical_switch_tunnel_key", &sw).is_some_and(|k| k > 0.0)
            && gauge(
                t,
                "kube_ovn_chassis_info",
                &[("name", "mon-ch"), ("ip", "192.0.2.7")],
            ) == Some(1.0)
    })?;
    let port = [("name", "mon-p1"), ("logical_switch_name", "mon-sw")];
    assert_eq!(
        label(&text, "kube_ovn_logical_switch_port_info", &port, "ip_address").as_deref(),
        Some("10.7.0.5")
    );
    assert_eq!(
        label(&text, "kube_ovn_logical_switch_port_info", &port, "mac_address").as_deref(),
        Some("0a:00:00:00:00:07")
    );
    let switches = central.nbctl(&["--bare", "--columns=_uuid", "list", "Logical_Switch"])?;
    let count = switches.split_whitespace().count();
    assert_eq!(samples(&text, "kube_ovn_logical_switch_info"), count, "{text}");

    // Central's ovn-northd stops: the standby takes the lock and becomes active (1).
    central.stop_northd();
    monitor.wait_metrics("the second ovn-northd to become active (1)", |t| {
        gauge(t, "kube_ovn_ovn_status", &northd) == Some(1.0)
    })?;
    // Deleted switches leave the scrape.
    central.nbctl(&["ls-del", "mon-sw"])?;
    monitor.wait_metrics("mon-sw to disappear", |t| {
        gauge(t, "kube_ovn_logical_switch_info", &[("name", "mon-sw")]).is_none()
    })?;
    Ok(())
}
