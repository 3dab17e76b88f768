//! A remote that cannot be reached is reported at once, at `warn`, with its cause — and not
//! once per retry.

mod common;

use std::time::Duration;

use common::Captured;
use kube_ovn_ovsdb::{Client, ClientConfig, Remote};
use kube_ovn_testkit::wait_until_async;

// A current-thread runtime: the client's task runs, and logs, on this thread, into the
// subscriber set for it here.
#[tokio::test]
async fn an_unreachable_remote_is_warned_about_with_its_cause() {
    let log = Captured::default();
    let _guard = log.install();

    let dir = tempfile::tempdir().unwrap();
    let remote = format!("unix:{}", dir.path().join("nb.sock").display());
    let mut config = ClientConfig::new(Remote::parse_list(&remote).unwrap(), "OVN_Northbound");
    config.backoff_min = Duration::from_millis(10);
    config.backoff_max = Duration::from_millis(20);
    let _client = Client::start(config);

    wait_until_async("five failed attempts", Duration::from_secs(20), || {
        let n = log.lines("DEBUG", "OVSDB remote not usable").len();
        async move { Ok(n >= 5) }
    })
    .await
    .unwrap();
    let warned = log.lines("WARN", "OVSDB remote");
    assert_eq!(warned.len(), 1, "one warning, not one per attempt: {warned:#?}");
    assert!(
        warned[0].contains(&remote) && warned[0].contains("No such file or directory"),
        "the warning names the remote and the cause: {}",
        warned[0]
    );
}
