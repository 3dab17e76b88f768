//! Reconnection against real servers: a crashed and restarted server, changes made while the
//! client could not see them, and a RAFT leader killed under a writing client.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::{WAIT, assert_replica_matches, connect, ready_remote};
use kube_ovn_ovsdb::tables::nb::LogicalSwitch;
use kube_ovn_ovsdb::{ChangeKind, ChangeSet, Client, ConnectionState, Error, Operation, Table};
use kube_ovn_testkit::{NB_SCHEMA, OvsdbServer, RaftCluster, wait_until_async};
use tokio::sync::mpsc::UnboundedReceiver;

/// Switch names, without the filler rows.
fn names(client: &Client) -> BTreeSet<String> {
    client
        .rows::<LogicalSwitch>()
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .filter(|n| !n.starts_with("filler-"))
        .collect()
}

fn set(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| (*s).to_owned()).collect()
}

async fn add_switch(client: &Client, name: &str) {
    let ls = LogicalSwitch {
        name: name.into(),
        ..Default::default()
    };
    client
        .transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
        .await
        .unwrap();
}

async fn wait_not_ready(client: &Client) {
    let mut state = client.state();
    tokio::time::timeout(
        WAIT,
        state.wait_for(|s| !matches!(s, ConnectionState::Ready { .. })),
    )
    .await
    .expect("client notices the server is gone")
    .unwrap();
}

/// Collects what subscribers were told, per switch name: the last change kind.
fn drain(rx: &mut UnboundedReceiver<Arc<ChangeSet>>) -> (BTreeMap<String, ChangeKind>, bool) {
    let mut seen = BTreeMap::new();
    let mut resync = false;
    while let Ok(set) = rx.try_recv() {
        resync |= set.resync;
        for ch in set.changes.iter().filter(|c| &*c.table == LogicalSwitch::NAME) {
            let row = ch.new.as_ref().or(ch.old.as_ref()).unwrap();
            let name = row
                .get("name")
                .and_then(kube_ovn_ovsdb::Value::set_elements)
                .and_then(|e| e[0].as_str().map(str::to_owned));
            seen.insert(name.unwrap(), ch.kind());
        }
    }
    (seen, resync)
}

/// Crash the server, change the database where the client cannot see it (the server listens
/// only on another socket), crash again, restart normally: the client must end with exactly the
/// server's rows, tell subscribers what changed, and send the write it queued while away.
async fn crash_change_restart(mut server: OvsdbServer) -> Client {
    let hidden = format!("punix:{}", server.dir().join("hidden.sock").display());
    let hidden_remote = format!("unix:{}", server.dir().join("hidden.sock").display());
    server.add_remote(hidden);
    server.restart().unwrap();

    let client = connect(&server.remote(), "OVN_Northbound").await;
    // ovsdb-server keeps transaction history for monitor_cond_since only while it is smaller than
    // the database itself; filler rows make the few missed transactions worth resuming from.
    let filler = (0..300)
        .map(|i| {
            let ls = LogicalSwitch {
                name: format!("filler-{i}"),
                ..Default::default()
            };
            Operation::insert(LogicalSwitch::NAME, ls.to_row())
        })
        .collect();
    client.transact(filler).await.unwrap();
    for n in ["a", "b", "c"] {
        add_switch(&client, n).await;
    }
    let mut changes = client.subscribe();

    server.kill();
    wait_not_ready(&client).await;
    // A write while disconnected waits for the connection instead of failing.
    let queued = {
        let client = client.clone();
        tokio::spawn(async move { add_switch(&client, "queued").await })
    };

    server.start_hidden().unwrap();
    server.nbctl_at(&hidden_remote, &["ls-del", "a"]).unwrap();
    server.nbctl_at(&hidden_remote, &["ls-add", "d"]).unwrap();
    server
        .nbctl_at(
            &hidden_remote,
            &["set", "Logical_Switch", "b", "other_config:missed=yes"],
        )
        .unwrap();
    server.kill();
    server.clear_extra_remotes();
    server.start().unwrap();

    tokio::time::timeout(WAIT, queued)
        .await
        .expect("queued write completes after reconnect")
        .unwrap();
    wait_until_async("the replica to catch up", WAIT, || async {
        Ok(names(&client) == set(&["b", "c", "d", "queued"]))
    })
    .await
    .unwrap();
    assert_replica_matches(&client, LogicalSwitch::NAME).await;
    let b = client
        .read(|c| c.find::<LogicalSwitch>(|s| s.name == "b"))
        .unwrap()
        .unwrap();
    assert_eq!(b.other_config.get("missed").map(String::as_str), Some("yes"));
    let listed: BTreeSet<String> = server
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"])
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("filler-"))
        .map(str::to_owned)
        .collect();
    assert_eq!(listed, names(&client));

    let (seen, _) = drain(&mut changes);
    assert_eq!(seen.get("a"), Some(&ChangeKind::Delete), "{seen:?}");
    assert_eq!(seen.get("d"), Some(&ChangeKind::Insert), "{seen:?}");
    assert_eq!(seen.get("b"), Some(&ChangeKind::Update), "{seen:?}");
    assert_eq!(seen.get("queued"), Some(&ChangeKind::Insert), "{seen:?}");
    assert!(!seen.contains_key("c"), "c did not change: {seen:?}");
    client
}

#[tokio::test]
async fn standalone_server_crash_resyncs_fully() {
    let client = crash_change_restart(OvsdbServer::nb().unwrap()).await;
    let stats = client.stats();
    // A standalone database has no transaction ids to resume from.
    assert!(stats.sessions >= 2 && stats.full_syncs >= 2, "{stats:?}");
}

#[tokio::test]
async fn clustered_server_crash_resumes_from_last_transaction() {
    let client = crash_change_restart(OvsdbServer::nb_clustered().unwrap()).await;
    let stats = client.stats();
    assert!(
        stats.resumes >= 1,
        "expected a monitor_cond_since resume: {stats:?}"
    );
    assert_eq!(stats.full_syncs, 1, "only the first sync is full: {stats:?}");
}

#[tokio::test]
async fn raft_leader_killed_writes_resume_on_the_new_leader() {
    let mut cluster = RaftCluster::start(NB_SCHEMA).unwrap();
    let client = connect(&cluster.remotes(), "OVN_Northbound").await;
    let leader = cluster.leader().unwrap();
    assert_eq!(
        ready_remote(&client).map(|r| r.to_string()),
        Some(cluster.members[leader].remote())
    );
    add_switch(&client, "before").await;

    cluster.members[leader].kill();
    // The first attempt may race the kill (reply lost: outcome unknown); a level-triggered writer
    // retries such errors, and must then succeed once a new leader is elected.
    let mut attempts = 0;
    wait_until_async("a write to succeed after the leader died", WAIT, || {
        attempts += 1;
        let client = client.clone();
        async move {
            let ls = LogicalSwitch {
                name: "after".into(),
                ..Default::default()
            };
            match client
                .transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
                .await
            {
                Ok(_) => Ok(true),
                Err(e @ (Error::ConnectionLost { .. } | Error::NotConnected { .. })) => Err(e.into()),
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
    })
    .await
    .unwrap();

    let new_leader = cluster.wait_for_leader(WAIT).unwrap();
    assert_ne!(new_leader, leader);
    assert_eq!(
        ready_remote(&client).map(|r| r.to_string()),
        Some(cluster.members[new_leader].remote())
    );
    let listed: BTreeSet<String> = cluster
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"])
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    assert!(
        listed.contains("before") && listed.contains("after"),
        "{listed:?}"
    );
    let replica = names(&client);
    assert_eq!(replica, listed, "replica after failover (attempts: {attempts})");
}
