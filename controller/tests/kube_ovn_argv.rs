//! Kube-OVN's own manifests start our controller: `kube-ovn-controller` run with exactly the
//! arguments of Kube-OVN v1.16.2's install.sh (`kube_ovn_testkit::kube_ovn_argv::CONTROLLER`,
//! klog's flags among them) and the environment its Deployment sets, plus only what the test
//! needs (the fixtures' OVN remotes in place of start-controller.sh's, the API server's
//! kubeconfig, the endpoints on loopback and a free port, the log directory in a temporary
//! one), serves `/readyz`, writes its log file and names the flags it ignores once.

mod common;

use clap::CommandFactory as _;
use common::{Env, WAIT};
use kube_ovn_controller::config::Flags;
use kube_ovn_support::kube_ovn_flags::known_long_names;
use kube_ovn_testkit::free_port;
use kube_ovn_testkit::kube_ovn_argv as argv;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_ovns_install_sh_arguments_start_the_controller() {
    let env = Env::start_idle(&[]).await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    // start-controller.sh's own first arguments, with the fixtures' remotes.
    let mut args = vec![
        format!("--ovn-nb-addr={}", env.ovn.nb_remote()),
        format!("--ovn-sb-addr={}", env.ovn.sb_remote()),
    ];
    args.extend(argv::with_log_dir(argv::CONTROLLER, dir.path()));
    args.extend([
        format!("--kubeconfig={}", env.server.admin_kubeconfig().display()),
        "--bind-address=127.0.0.1".to_owned(),
        format!("--pprof-port={port}"),
    ]);
    // The Deployment's environment (the downward API's values made up).
    let pod_envs = [
        ("ENABLE_SSL", "false"),
        ("POD_NAME", "kube-ovn-controller-argv"),
        ("POD_NAMESPACE", "kube-system"),
        ("NODE_NAME", "argv-node"),
        ("POD_IP", "127.0.0.1"),
    ];
    let daemon = tokio::task::block_in_place(|| {
        argv::start_as_released(
            "controller-argv",
            env!("CARGO_BIN_EXE_kube-ovn-controller"),
            &args,
            &pod_envs,
            dir.path(),
            port,
            WAIT,
        )
    })
    .unwrap();

    let expected = argv::expected_ignored(argv::CONTROLLER, &known_long_names(&Flags::command()));
    assert!(
        expected.contains("--secure-serving") && !expected.contains("--log_file"),
        "the flags we ignore are Kube-OVN's own, never klog's: {expected:?}"
    );
    let log_file = argv::moved_log_file(dir.path(), "kube-ovn-controller.log");
    argv::check_logs(&daemon.log(), &log_file, &expected).unwrap();
}
