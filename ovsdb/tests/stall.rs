//! A server that stalls (stopped with SIGSTOP, as a RAFT member in a long compaction looks from
//! outside): during session setup it is given up after the connect timeout and the next remote
//! serves; after setup the inactivity probe leaves it for the next remote; resumed, it does not
//! disturb the session that replaced it. Real `ovsdb-server`s over TCP: the kernel completes the
//! handshake of a stopped server's listening socket, so the client sees a connection that
//! answers nothing.

mod common;

use std::time::Duration;

use common::{Captured, WAIT, ready_remote, wait_ready_on};
use kube_ovn_ovsdb::tables::nb::LogicalSwitch;
use kube_ovn_ovsdb::{Client, ClientConfig, Operation, Table};
use kube_ovn_testkit::{NB_SCHEMA, OvsdbServer, RaftCluster, run, wait_until, wait_until_async};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Short enough for a quick test, long enough for a loaded CI machine to answer in time.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const PROBE: Duration = Duration::from_secs(2);

fn tcp_server() -> OvsdbServer {
    OvsdbServer::nb().unwrap().with_tcp().unwrap()
}

fn tcp(server: &OvsdbServer) -> String {
    server.tcp_remote().unwrap()
}

fn client_config(remotes: &str) -> ClientConfig {
    let mut c = common::config(remotes, "OVN_Northbound");
    c.connect_timeout = CONNECT_TIMEOUT;
    c.inactivity_probe = PROBE;
    c
}

/// A server stopped with SIGSTOP; SIGCONT when dropped, also when the test fails.
struct Paused(Pid);

impl Paused {
    fn stop(server: &OvsdbServer) -> Self {
        Self::pid(server.pid().expect("server runs"))
    }

    fn pid(pid: u32) -> Self {
        let pid = Pid::from_raw(i32::try_from(pid).unwrap());
        kill(pid, Signal::SIGSTOP).unwrap();
        let paused = Self(pid);
        // The signal is delivered asynchronously; go on once the kernel says it is stopped.
        wait_until("the server to be stopped", WAIT, || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
            // The state follows the parenthesised command name.
            Ok(stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('T')))
        })
        .unwrap();
        paused
    }

    /// SIGCONT (through `Drop`).
    fn resume(self) {
        drop(self);
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

async fn add_switch(client: &Client, name: &str) {
    let ls = LogicalSwitch {
        name: name.into(),
        ..Default::default()
    };
    client
        .transact(vec![Operation::insert(LogicalSwitch::NAME, ls.to_row())])
        .await
        .unwrap_or_else(|e| panic!("insert {name}: {e}"));
}

fn switches(server: &OvsdbServer) -> Vec<String> {
    server
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"])
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Resumes `paused` (the server `stalled`) and checks the client stays on `serving`: the same
/// session (no reconnect), still writing there.
async fn resume_and_stay(client: &Client, paused: Paused, stalled: &OvsdbServer, serving: &OvsdbServer) {
    let sessions = client.stats().sessions;
    paused.resume();
    // Once it answers others, it has also worked through what the client left in its queue.
    // Off the runtime's thread: the client's task must keep running meanwhile.
    let db = format!("--db={}", stalled.remote());
    tokio::task::spawn_blocking(move || {
        wait_until("the resumed server to answer", WAIT, || {
            Ok(run("ovn-nbctl", &[&db, "--no-leader-only", "--timeout=5", "ls-list"]).is_ok())
        })
    })
    .await
    .unwrap()
    .unwrap();
    add_switch(client, "after-resume").await;
    assert_eq!(ready_remote(client).map(|r| r.to_string()), Some(tcp(serving)));
    assert_eq!(client.stats().sessions, sessions, "the session was disturbed");
    assert!(switches(serving).contains(&"after-resume".to_owned()));
    assert!(!switches(stalled).contains(&"after-resume".to_owned()));
}

// Current-thread runtime (the default): the client logs on this thread, into `log`.
#[tokio::test]
async fn a_server_that_stalls_during_setup_is_left_for_the_next_remote() {
    let log = Captured::default();
    let _guard = log.install();
    let (stalled, serving) = (tcp_server(), tcp_server());
    let paused = Paused::stop(&stalled);

    let client = Client::start(client_config(&format!("{},{}", tcp(&stalled), tcp(&serving))));
    wait_ready_on(
        &client,
        "the client to leave the stopped server for the next remote",
    )
    .await;
    assert_eq!(ready_remote(&client).map(|r| r.to_string()), Some(tcp(&serving)));
    assert_eq!(client.readiness(), Ok(()));
    let warned = log.lines("WARN", &tcp(&stalled));
    assert!(
        warned.iter().any(|l| l.contains("get_schema(OVN_Northbound)")
            && l.contains("stalled")
            && l.contains("trying the next remote")),
        "a warning names the remote and the step that stalled: {warned:#?}"
    );

    resume_and_stay(&client, paused, &stalled, &serving).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stalls_after_setup_is_left_after_the_inactivity_probe() {
    let (stalled, serving) = (tcp_server(), tcp_server());
    let client = Client::start(client_config(&format!("{},{}", tcp(&stalled), tcp(&serving))));
    wait_ready_on(&client, "the first session").await;
    assert_eq!(ready_remote(&client).map(|r| r.to_string()), Some(tcp(&stalled)));
    add_switch(&client, "before").await;

    let paused = Paused::stop(&stalled);
    wait_until_async("the client to move to the next remote", WAIT, || {
        let on = ready_remote(&client).map(|r| r.to_string());
        let want = tcp(&serving);
        async move { Ok(on == Some(want)) }
    })
    .await
    .unwrap();
    add_switch(&client, "on-the-next").await;
    assert!(switches(&serving).contains(&"on-the-next".to_owned()));

    resume_and_stay(&client, paused, &stalled, &serving).await;
}

/// What the issue saw in production: the RAFT leader stalls under a connected client. The other
/// members elect a new leader; the client leaves the stalled one after the inactivity probe and
/// finds the new leader; the old one, resumed, rejoins as a follower without disturbing it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_raft_leader_is_left_for_the_new_leader() {
    let cluster = RaftCluster::start(NB_SCHEMA).unwrap();
    let client = Client::start(client_config(&cluster.remotes()));
    wait_ready_on(&client, "the first session").await;
    let leader = cluster.leader().unwrap();
    assert_eq!(
        ready_remote(&client).map(|r| r.to_string()),
        Some(cluster.members[leader].remote())
    );
    add_switch(&client, "before").await;

    let stalled = &cluster.members[leader];
    let pidfile = cluster.dir().join(format!("{}.pid", stalled.name));
    let pid = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
    let paused = Paused::pid(pid);
    let mut on = None;
    wait_until_async(
        "the client to leave the stalled leader for a new one",
        WAIT,
        || {
            on = ready_remote(&client).map(|r| r.to_string());
            let moved = on.as_ref().is_some_and(|r| *r != stalled.remote());
            async move { Ok(moved) }
        },
    )
    .await
    .unwrap();
    add_switch(&client, "after").await;
    let sessions = client.stats().sessions;

    drop(paused);
    wait_until("the old leader to rejoin as a follower", WAIT, || {
        Ok(stalled.role(&cluster.database)? == "follower")
    })
    .unwrap();
    add_switch(&client, "after-resume").await;
    assert_eq!(ready_remote(&client).map(|r| r.to_string()), on);
    assert_eq!(client.stats().sessions, sessions, "the session was disturbed");
    let listed = cluster
        .nbctl(&["--bare", "--columns=name", "list", "Logical_Switch"])
        .unwrap();
    for name in ["before", "after", "after-resume"] {
        assert!(listed.lines().any(|l| l == name), "{name} in {listed:?}");
    }
}

#[tokio::test]
async fn readiness_says_why_while_there_is_no_session() {
    let stalled = tcp_server();
    let _paused = Paused::stop(&stalled);
    let client = Client::start(client_config(&tcp(&stalled)));
    let mut last = Ok(());
    wait_until_async("readiness to name the stalled step", WAIT, || {
        last = client.readiness();
        let named = last
            .as_ref()
            .is_err_and(|e| e.contains(&tcp(&stalled)) && e.contains("get_schema(OVN_Northbound)"));
        async move { Ok(named) }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; last readiness: {last:?}"));
}

#[tokio::test]
async fn tcp_sessions_carry_keepalive() {
    let server = tcp_server();
    let client = Client::start(client_config(&tcp(&server)));
    wait_ready_on(&client, "the session").await;
    let port = tcp(&server).rsplit_once(':').unwrap().1.to_owned();
    // The client's end of the connection: the one whose peer is the server's port.
    let sockets = run(
        "ss",
        &["-tnoH", "state", "established", "dport", "=", &format!(":{port}")],
    )
    .unwrap();
    assert!(
        !sockets.trim().is_empty() && sockets.lines().all(|l| l.contains("timer:(keepalive")),
        "the client's socket has a keepalive timer: {sockets:?}"
    );
}
