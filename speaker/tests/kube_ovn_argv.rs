//! Kube-OVN's own manifest starts our speaker: `kube-ovn-speaker` run with exactly the
//! arguments of Kube-OVN v1.16.2's `yamls/speaker.yaml` (`kube_ovn_testkit::kube_ovn_argv::
//! SPEAKER`: klog's `--logtostderr=false --alsologtostderr=true --log_file=…
//! --log_file_max_size=200`, which used to stop it at start, and its example peer) and that
//! manifest's environment (`NODE_NAME`, `POD_IP`, `POD_IPS`), plus only what the test needs (the
//! API server's kubeconfig, BGP inside a network namespace of the test's, a state directory,
//! the endpoints on loopback and a free port, the log directory in a temporary one), serves
//! `/readyz` and writes its log file. It implements every flag of that manifest, so it names
//! none as ignored.

use std::time::Duration;

use clap::CommandFactory as _;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::PostParams;
use kube_ovn_lab::kubernetes::fixture::ApiServer;
use kube_ovn_speaker::config::Flags;
use kube_ovn_support::kube_ovn_flags::known_long_names;
use kube_ovn_testkit::kube_ovn_argv as argv;
use kube_ovn_testkit::{Netns, free_port};

const WAIT: Duration = Duration::from_mins(1);
/// The node's address (TEST-NET-2), on the namespace's loopback.
const NODE_IP: &str = "198.51.100.2";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_ovns_speaker_yaml_arguments_start_the_speaker() {
    kube_ovn_testkit::init_logging();
    let api = ApiServer::start().await.expect("kube-apiserver");
    let netns = Netns::create("kas").unwrap();
    netns
        .ip(&["addr", "add", &format!("{NODE_IP}/32"), "dev", "lo"])
        .unwrap();
    let name = format!("argv-{}", netns.name());
    let node: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": name},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]}}))
    .unwrap();
    Api::<Node>::all(api.client().await.unwrap())
        .create(&PostParams::default(), &node)
        .await
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let port = free_port().unwrap();
    let mut args = argv::with_log_dir(argv::SPEAKER, dir.path());
    args.extend([
        format!("--kubeconfig={}", api.admin_kubeconfig().display()),
        format!("--bgp-netns={}", netns.path().display()),
        format!("--state-dir={}", dir.path().join("state").display()),
        "--metrics-address=127.0.0.1".to_owned(),
        format!("--pprof-port={port}"),
    ]);
    // speaker.yaml's environment (the downward API's values).
    let pod_envs = [
        ("NODE_NAME", name.as_str()),
        ("POD_IP", NODE_IP),
        ("POD_IPS", NODE_IP),
    ];
    let daemon = tokio::task::block_in_place(|| {
        argv::start_as_released(
            "speaker-argv",
            env!("CARGO_BIN_EXE_kube-ovn-speaker"),
            &args,
            &pod_envs,
            dir.path(),
            port,
            WAIT,
        )
    })
    .unwrap();

    let expected = argv::expected_ignored(argv::SPEAKER, &known_long_names(&Flags::command()));
    assert!(
        expected.is_empty(),
        "speaker.yaml's flags are all ours: {expected:?}"
    );
    let log_file = argv::moved_log_file(dir.path(), "kube-ovn-speaker.log");
    argv::check_logs(&daemon.log(), &log_file, &expected).unwrap();
}
