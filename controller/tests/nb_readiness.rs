//! `/readyz` follows the northbound session: a leader whose NB server stalls (stopped with
//! SIGSTOP, as a RAFT member in a long compaction looks from outside) is not ready while it has
//! no session, says why, and is ready again once the server answers. And a controller that
//! starts on a new northbound database before ovn-northd has made its NB_Global row still sets
//! Kube-OVN's NB_Global options.

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

/// The manifests install starts ovn-central and the controller at once: on a new database the
/// controller may find no NB_Global row (ovn-northd makes it when it connects). It waits for the
/// row and sets `use_ct_inv_match=false` and `ls_dnat_mod_dl_dst=true` on it (before, it set
/// nothing, and an underlay pod's connections to overlay pods on other nodes died as invalid).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nb_global_options_are_set_when_northd_makes_the_row_after_the_controller_starts() {
    let mut env = Env::start_idle(&[]).await;
    env.ovn.stop_northd();
    // With ovsdb-client: ovn-nbctl makes a missing NB_Global row on every command.
    let remote = env.ovn.nb_remote();
    let delete = r#"["OVN_Northbound",{"op":"delete","table":"NB_Global","where":[]}]"#;
    run("ovsdb-client", &["transact", &remote, delete]).unwrap();
    let select = r#"["OVN_Northbound",{"op":"select","table":"NB_Global","where":[],"columns":["_uuid"]}]"#;
    let rows = run("ovsdb-client", &["transact", &remote, select]).unwrap();
    assert!(rows.contains(r#"{"rows":[]}"#), "{rows}");
    env.start_controller();
    // ovn-northd comes once the controller is connected (its replica's monitor) and waiting.
    wait_until_async(
        "the controller to monitor the northbound database",
        WAIT,
        || async { Ok(env.ovn.nb.monitors()? > 0) },
    )
    .await
    .unwrap();
    tokio::task::block_in_place(|| env.ovn.start_northd()).unwrap();
    wait_until_async("NB_Global to carry Kube-OVN's options", WAIT, || async {
        let options = env.ovn.nbctl(&["get", "NB_Global", ".", "options"])?;
        Ok(options.contains("use_ct_inv_match=\"false\"") && options.contains("ls_dnat_mod_dl_dst=\"true\""))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}: {:?}", env.ovn.nbctl(&["get", "NB_Global", ".", "options"])));
    assert_eq!(
        env.ovn
            .nbctl(&["--bare", "--columns=_uuid", "list", "NB_Global"])
            .unwrap()
            .trim()
            .lines()
            .count(),
        1,
        "one NB_Global row"
    );
}
