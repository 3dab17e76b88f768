//! `/readyz` follows the northbound session: a leader whose NB server stalls (stopped with
//! SIGSTOP, as a RAFT member in a long compaction looks from outside) is not ready while it has
//! no session, says why, and is ready again once the server answers.

mod common;
mod netkit;

use std::net::SocketAddr;
use std::sync::Mutex;

use common::{Env, WAIT};
use kube_ovn_testkit::{run, wait_until_async};
use netkit::http_get;

/// The NB server stopped by its PID; SIGCONT when dropped, also when the test fails.
struct Paused(String);

impl Paused {
    fn stop(pid: u32) -> Self {
        let pid = pid.to_string();
        run("kill", &["-STOP", &pid]).unwrap();
        Self(pid)
    }
}

impl Drop for Paused {
    fn drop(&mut self) {
        let _ = run("kill", &["-CONT", &self.0]);
    }
}

/// Waits until `/readyz` answers `code` with a body that contains every one of `words`; returns
/// the body.
async fn readyz_until(addr: SocketAddr, code: u16, words: &[&str]) -> String {
    let last = &Mutex::new((0, String::new()));
    let waited = wait_until_async(
        &format!("/readyz to answer {code} naming {words:?}"),
        WAIT,
        || async move {
            let (got, body) = http_get(addr, "/readyz").await?;
            let done = got == code && words.iter().all(|w| body.contains(w));
            *last.lock().unwrap() = (got, body);
            Ok(done)
        },
    )
    .await;
    let (got, body) = last.lock().unwrap().clone();
    if let Err(e) = waited {
        panic!("{e}; the last answer was {got}: {body}");
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_the_northbound_database_stalls() {
    let env = Env::start_idle(&["--ovsdb-con-timeout=1", "--ovsdb-inactivity-timeout=1"]).await;
    let c = env.spawn_controller(&[]);
    let addr = c.metrics_addr;
    readyz_until(addr, 200, &[]).await;

    let paused = Paused::stop(env.ovn.nb.pid().expect("NB runs"));
    let why = readyz_until(addr, 503, &["OVN_Northbound", "get_schema(OVN_Northbound)"]).await;
    assert!(why.contains(&env.ovn.nb_remote()), "names the remote: {why}");

    drop(paused);
    readyz_until(addr, 200, &[]).await;
}
