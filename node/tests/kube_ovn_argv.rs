//! Kube-OVN's own manifests start our node daemon: `kube-ovn-daemon` run with exactly the
//! arguments of the `cni-server` container of Kube-OVN v1.16.2's install.sh
//! (`kube_ovn_testkit::kube_ovn_argv::DAEMON`, klog's flags among them) and its DaemonSet's
//! environment (the node's name as `NODE_NAME`), plus only what the test needs
//! (start-cniserver.sh's `--ovs-socket` and `--bind-socket` pointing at the fixture's node, the
//! API server's kubeconfig, the node's network namespace and userspace datapath, an encap
//! address, the endpoints on loopback and a free port, the log directory in a temporary one),
//! serves `/readyz`, writes its log file and names the flags it ignores once.

use std::time::Duration;

use clap::CommandFactory as _;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use kube_ovn_lab::kubernetes::fixture::ApiServer;
use kube_ovn_node::config::Flags;
use kube_ovn_support::kube_ovn_flags::known_long_names;
use kube_ovn_testkit::kube_ovn_argv as argv;
use kube_ovn_testkit::{OvsNode, free_port};

const WAIT: Duration = Duration::from_mins(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_ovns_install_sh_arguments_start_the_daemon() {
    kube_ovn_testkit::init_logging();
    let (api, ovs) = tokio::join!(
        ApiServer::start(),
        tokio::task::spawn_blocking(|| OvsNode::start("ka"))
    );
    let api = api.expect("kube-apiserver");
    let ovs = ovs.unwrap().expect("an OVS node");
    let name = format!("argv-{}", ovs.name());
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": "192.0.2.10"}]}}))
    .unwrap();
    Api::<Node>::all(api.client().await.unwrap())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    // start-cniserver.sh's own first arguments, with the fixture's socket and a private one.
    let mut args = vec![
        format!("--ovs-socket={}", ovs.db_socket().display()),
        format!(
            "--bind-socket={}",
            dir.path().join("kube-ovn-daemon.sock").display()
        ),
    ];
    args.extend(argv::with_log_dir(argv::DAEMON, dir.path()));
    args.extend([
        format!("--kubeconfig={}", api.admin_kubeconfig().display()),
        format!("--ovs-netns={}", ovs.netns().path().display()),
        "--ovs-datapath-type=netdev".to_owned(),
        "--encap-ip=192.0.2.10".to_owned(),
        "--mtu=1400".to_owned(),
        format!("--system-id-file={}", dir.path().join("no-system-id").display()),
        "--metrics-address=127.0.0.1".to_owned(),
        format!("--pprof-port={port}"),
    ]);
    // The DaemonSet's environment (the downward API's values made up).
    let pod_envs = [
        ("ENABLE_SSL", "false"),
        ("NODE_NAME", name.as_str()),
        ("POD_NAME", "kube-ovn-cni-argv"),
        ("POD_NAMESPACE", "kube-system"),
        ("POD_IP", "192.0.2.10"),
        ("POD_IPS", "192.0.2.10"),
    ];
    let daemon = tokio::task::block_in_place(|| {
        argv::start_as_released(
            "daemon-argv",
            env!("CARGO_BIN_EXE_kube-ovn-daemon"),
            &args,
            &pod_envs,
            dir.path(),
            port,
            WAIT,
        )
    })
    .unwrap();

    let expected = argv::expected_ignored(argv::DAEMON, &known_long_names(&Flags::command()));
    assert!(
        expected.contains("--secure-serving") && !expected.contains("--log_file"),
        "the flags we ignore are Kube-OVN's own, never klog's: {expected:?}"
    );
    let log_file = argv::moved_log_file(dir.path(), "kube-ovn-cni.log");
    argv::check_logs(&daemon.log(), &log_file, &expected).unwrap();
    // The node's name came from NODE_NAME, as Kube-OVN's daemon reads it.
    assert!(
        std::fs::read_to_string(&log_file).unwrap().contains(&name),
        "the daemon's log never names its node {name}"
    );
}
