use super::*;

/// The container args of Kube-OVN's release manifest, recorded once for every test.
use kube_ovn_testkit::kube_ovn_argv::PINGER as KUBE_OVN_V1_16_2_ARGS;

fn parse(args: &[&str]) -> Flags {
    let mut argv = vec!["kube-ovn-pinger"];
    argv.extend_from_slice(args);
    Flags::try_parse_from(argv).unwrap()
}

#[test]
fn release_argv_parses_with_kube_ovn_defaults() {
    let flags = parse(KUBE_OVN_V1_16_2_ARGS);
    assert_eq!(flags.external_address, "1.1.1.1");
    assert_eq!(flags.external_dns, "kube-ovn.io.");
    assert!(flags.enable_metrics);
    assert_eq!(flags.klog.log_file_max_size, Some(200));
    // Kube-OVN's defaults.
    assert_eq!(flags.port, 8080);
    assert_eq!(flags.interval, 5);
    assert_eq!(flags.mode, Mode::Server);
    assert_eq!(flags.exit_code, 0);
    assert_eq!(flags.internal_dns, "kubernetes.default");
    assert_eq!(flags.network_mode, "kube-ovn");
    assert_eq!(flags.tcp_conn_check_port, 8100);
    assert_eq!(flags.udp_conn_check_port, 8101);
    assert_eq!(flags.ovs_timeout, 2);
    assert_eq!(
        flags.database_vswitch_socket_remote,
        "unix:/var/run/openvswitch/db.sock"
    );
    assert_eq!(
        flags.service_vswitchd_file_pid_path,
        PathBuf::from("/var/run/openvswitch/ovs-vswitchd.pid")
    );
    assert_eq!(
        flags.service_ovncontroller_file_pid_path,
        PathBuf::from("/var/run/ovn/ovn-controller.pid")
    );
    let config = Config::from_flags(flags).unwrap();
    assert_eq!(
        config.external_addresses,
        vec!["1.1.1.1".parse::<IpAddr>().unwrap()]
    );
    assert_eq!(config.interval, Duration::from_secs(5));
}

#[test]
fn kubectl_ko_diagnose_and_conn_check_argv_parse() {
    // `kubectl ko diagnose` runs a job in each pinger; its connectivity check runs servers.
    let flags = parse(&[
        "--mode=job",
        "--external-address=1.1.1.1,2606:4700:4700::1111",
        "--target-ip-ports=tcp-10.96.0.1-443,udp-fd00::10-53",
    ]);
    assert_eq!(flags.mode, Mode::Job);
    let config = Config::from_flags(flags).unwrap();
    assert_eq!(config.external_addresses.len(), 2);
    assert_eq!(config.targets.len(), 2);

    let flags = parse(&[
        "--enable-verbose-conn-check=true",
        "--tcp-conn-check-port=8200",
        "--udp-conn-check-port=8201",
        "--ovs.timeout=3",
        "--system.run.dir=/run/openvswitch",
    ]);
    assert!(flags.enable_verbose_conn_check);
    assert_eq!(
        (flags.tcp_conn_check_port, flags.udp_conn_check_port),
        (8200, 8201)
    );
    assert_eq!(flags.ovs_timeout, 3);
    assert_eq!(flags.system_run_dir, PathBuf::from("/run/openvswitch"));
    assert!(parse(&["--enable-metrics=false"]).enable_metrics.eq(&false));
}

#[test]
fn targets_parse_both_families_and_name_bad_entries() {
    let targets = parse_targets("tcp-169.254.1.1-8080, udp-fd00::1-53,").unwrap();
    assert_eq!(
        targets,
        vec![
            Target {
                proto: TargetProto::Tcp,
                addr: "169.254.1.1:8080".parse().unwrap()
            },
            Target {
                proto: TargetProto::Udp,
                addr: "[fd00::1]:53".parse().unwrap()
            },
        ]
    );
    assert!(parse_targets("").unwrap().is_empty());
    for (bad, says) in [
        ("sctp-10.0.0.1-80", "neither tcp nor udp"),
        ("tcp-10.0.0.1", "no port"),
        ("tcp-10.0.0.x-80", "not an IP address"),
        ("tcp-10.0.0.1-http", "not a port"),
        ("tcp", "no protocol"),
    ] {
        let err = parse_targets(bad).unwrap_err();
        assert!(err.contains(says) && err.contains(bad), "{bad}: {err}");
    }
}

#[test]
fn bad_flags_name_the_flag() {
    let err = Config::from_flags(parse(&["--external-address=1.1.1.1,one"])).unwrap_err();
    assert_eq!(err.flag, "external-address");
    assert!(err.to_string().contains("\"one\""), "{err}");
    let err = Config::from_flags(parse(&["--interval=0"])).unwrap_err();
    assert_eq!(err.flag, "interval");
}

#[test]
fn sb_remote_from_the_injected_service_variables() {
    assert_eq!(sb_remote("", 6642), None);
    assert_eq!(
        sb_remote("10.96.0.7", 6642).as_deref(),
        Some("tcp:10.96.0.7:6642")
    );
    assert_eq!(sb_remote("fd00::7", 6642).as_deref(), Some("tcp:[fd00::7]:6642"));
}
