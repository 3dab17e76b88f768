use super::*;

fn flags(args: &[&str]) -> Flags {
    let mut all = vec!["kube-ovn-controller"];
    if !args.contains(&"--ovn-nb-addr") {
        all.extend(["--ovn-nb-addr", "tcp:127.0.0.1:6641"]);
    }
    all.extend_from_slice(args);
    Flags::try_parse_from(all).unwrap()
}

#[test]
fn kube_ovn_defaults() {
    let c = flags(&[]).validate().unwrap();
    assert_eq!(c.default_subnet.name, "ovn-default");
    assert_eq!(c.default_subnet.cidr_block(), "10.16.0.0/16");
    assert_eq!(c.node_subnet.name, "join");
    assert_eq!(c.node_subnet.cidr_block(), "100.64.0.0/16");
    assert_eq!(c.cluster_router, "ovn-cluster");
    assert_eq!((c.worker_num, c.gc_interval), (3, Some(Duration::from_mins(6))));
    assert_eq!(c.metrics_addr.port(), 10660);
}

#[test]
fn invalid_values_name_the_flag() {
    for (args, flag) in [
        (vec!["--default-cidr", "10.16.0.0/33"], "--default-cidr"),
        (
            vec!["--default-cidr", "10.16.0.0/16,10.17.0.0/16"],
            "--default-cidr",
        ),
        (vec!["--default-gateway", "10.99.0.1"], "--default-gateway"),
        (
            vec!["--default-exclude-ips", "10.16.0.5..x"],
            "--default-exclude-ips",
        ),
        (vec!["--node-switch-cidr", "10.16.0.0/24"], "--node-switch-cidr"),
        (vec!["--worker-num", "0"], "--worker-num"),
        (vec!["--ovn-nb-addr", "http://x"], "--ovn-nb-addr"),
        (vec!["--default-ls", "Bad_Name"], "--default-ls"),
        (vec!["--ovn-timeout", "0"], "--ovn-timeout"),
        (
            vec!["--leader-elect-lease-duration", "15"],
            "--leader-elect-lease-duration",
        ),
        (
            vec!["--leader-elect-lease-duration", "1500ms"],
            "--leader-elect-lease-duration",
        ),
        (
            vec!["--leader-elect-lease-duration", "20s"],
            "--leader-elect-lease-duration",
        ),
        (
            vec!["--leader-elect-renew-deadline", "7s"],
            "--leader-elect-renew-deadline",
        ),
        (
            vec!["--leader-elect-retry-period", "0s"],
            "--leader-elect-retry-period",
        ),
    ] {
        let err = flags(&args).validate().unwrap_err().to_string();
        assert!(err.starts_with(&format!("invalid {flag} ")), "{args:?}: {err}");
    }
    let err = Flags::try_parse_from(["kube-ovn-controller"])
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("invalid --ovn-nb-addr ") && err.contains("--ovn-db-ips"),
        "--ovn-nb-addr or --ovn-db-ips is required: {err}"
    );
}

fn only(args: &[&str]) -> Result<Config, FlagError> {
    let mut all = vec!["kube-ovn-controller"];
    all.extend_from_slice(args);
    Flags::try_parse_from(all).unwrap().validate()
}

#[test]
fn database_remotes_from_the_ovn_central_members() {
    let shown = |r: &[kube_ovn_ovsdb::Remote]| comma_joined(r);
    let c = only(&["--ovn-db-ips", "172.30.0.11, 172.30.0.12,fd00::13"]).unwrap();
    assert_eq!(
        shown(&c.nb_remotes),
        "tcp:172.30.0.11:6641,tcp:172.30.0.12:6641,tcp:[fd00::13]:6641"
    );
    assert_eq!(
        shown(&c.sb_remotes),
        "tcp:172.30.0.11:6642,tcp:172.30.0.12:6642,tcp:[fd00::13]:6642"
    );
    // An explicit address wins, each database on its own.
    let c = only(&[
        "--ovn-db-ips=172.30.0.11",
        "--ovn-nb-addr=unix:/run/ovn/ovnnb_db.sock",
    ])
    .unwrap();
    assert_eq!(shown(&c.nb_remotes), "unix:/run/ovn/ovnnb_db.sock");
    assert_eq!(shown(&c.sb_remotes), "tcp:172.30.0.11:6642");
    // Neither: no southbound remotes, as before.
    let c = only(&["--ovn-nb-addr=tcp:10.0.0.1:6641"]).unwrap();
    assert!(c.sb_remotes.is_empty());
    for (value, why) in [
        ("", "is empty"),
        (" ", "is empty"),
        ("172.30.0.11,,172.30.0.12", "\"\" is not an IP address"),
        ("ovn-central", "\"ovn-central\" is not an IP address"),
        ("[fd00::1]", "is not an IP address"),
        ("172.30.0.11:6641", "is not an IP address"),
    ] {
        let err = only(&[&format!("--ovn-db-ips={value}")]).unwrap_err().to_string();
        assert!(
            err.starts_with("invalid --ovn-db-ips ") && err.contains(why),
            "{value:?}: {err}"
        );
        // Even beside explicit addresses, a bad list is reported, not ignored.
        let err = only(&[
            &format!("--ovn-db-ips={value}"),
            "--ovn-nb-addr=tcp:10.0.0.1:6641",
            "--ovn-sb-addr=tcp:10.0.0.1:6642",
        ])
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("invalid --ovn-db-ips "), "{value:?}: {err}");
    }
}

#[test]
fn leader_election_timing() {
    let c = flags(&[]).validate().unwrap();
    let secs = |n| Duration::from_secs(n);
    assert_eq!(
        c.leader_election,
        LeaderElection {
            lease_duration: secs(30),
            renew_deadline: secs(20),
            retry_period: secs(6)
        }
    );
    let c = flags(&[
        "--leader-elect-lease-duration=1m30s",
        "--leader-elect-renew-deadline=2.5s",
        "--leader-elect-retry-period=2s",
    ])
    .validate()
    .unwrap();
    assert_eq!(c.leader_election.lease_duration, secs(90));
    assert_eq!(c.leader_election.renew_deadline, Duration::from_millis(2500));
    let err = flags(&[
        "--leader-elect-lease-duration=21s",
        "--leader-elect-renew-deadline=20s",
        "--leader-elect-retry-period=6s",
    ])
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--leader-elect-lease-duration") && err.contains("plus"),
        "{err}"
    );
    assert_eq!(go_duration("x", "1h").unwrap(), secs(3600));
    assert_eq!(go_duration("x", "250ms").unwrap(), Duration::from_millis(250));
    for (bad, why) in [
        ("", "empty"),
        ("s", "not a duration"),
        ("1", "missing unit"),
        ("1x", "unknown unit"),
        ("-1s", "negative"),
        ("1.2.3s", "missing unit"),
        ("9999999999h", "too large"),
    ] {
        let err = go_duration("leader-elect-retry-period", bad)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("invalid --leader-elect-retry-period") && err.contains(why),
            "{bad:?}: {err}"
        );
    }
}

#[test]
fn dual_stack_default_subnet() {
    let c = flags(&[
        "--default-cidr",
        "10.16.0.0/16,fd00:10:16::/64",
        "--default-gateway",
        "10.16.0.1,fd00:10:16::1",
    ])
    .validate()
    .unwrap();
    assert_eq!(c.default_subnet.cidrs.len(), 2);
    assert_eq!(c.default_subnet.gateway(), "10.16.0.1,fd00:10:16::1");
}

#[test]
fn network_type_vlan_makes_the_default_underlay() {
    let c = flags(&[]).validate().unwrap();
    assert_eq!(c.network_type, underlay::NetworkType::Geneve);
    assert_eq!(c.default_provider_name, "provider");
    assert_eq!(c.default_underlay, None, "no underlay unless --network-type=vlan");
    for t in ["vxlan", "stt"] {
        let c = flags(&["--network-type", t]).validate().unwrap();
        assert_eq!(c.default_underlay, None, "{t}");
    }
    let c = flags(&["--network-type=vlan", "--default-interface-name=eth1"])
        .validate()
        .unwrap();
    assert_eq!(
        c.default_underlay,
        Some(underlay::DefaultUnderlay {
            provider: "provider".into(),
            interface: "eth1".into(),
            exchange_link_name: false,
            vlan: "ovn-vlan".into(),
            vlan_id: 1,
            logical_gateway: false,
            u2o_interconnection: false,
        }),
        "Kube-OVN's defaults"
    );
    let c = flags(&[
        "--network-type=vlan",
        "--default-interface-name=bond0",
        "--default-provider-name=pn1",
        "--default-vlan-name=v100",
        "--default-vlan-id=100",
        "--default-exchange-link-name=true",
        "--default-u2o-interconnection=true",
    ])
    .validate()
    .unwrap();
    let u = c.default_underlay.unwrap();
    assert_eq!(
        (
            u.provider.as_str(),
            u.interface.as_str(),
            u.vlan.as_str(),
            u.vlan_id
        ),
        ("pn1", "bond0", "v100", 100)
    );
    assert!(u.exchange_link_name && u.u2o_interconnection && !u.logical_gateway);
    assert_eq!(c.default_provider_name, "pn1");
    let c = flags(&[
        "--network-type=vlan",
        "--default-interface-name=eth1",
        "--default-vlan-id=0",
    ])
    .validate()
    .unwrap();
    assert_eq!(c.default_underlay.unwrap().vlan_id, 0, "0 is untagged, allowed");
}

#[test]
fn bad_underlay_flags_are_refused_with_kube_ovns_messages() {
    for (args, flag, why) in [
        (
            vec!["--network-type=gre"],
            "--network-type",
            "geneve, vxlan, stt or vlan",
        ),
        (
            vec!["--network-type=vlan"],
            "--default-interface-name",
            "no host nic for vlan",
        ),
        (
            vec![
                "--network-type=vlan",
                "--default-interface-name=eth1",
                "--default-vlan-id=4096",
            ],
            "--default-vlan-id",
            "the default vlan id is not between 1-4095",
        ),
        (
            vec![
                "--network-type=vlan",
                "--default-interface-name=eth1",
                "--default-vlan-id=-1",
            ],
            "--default-vlan-id",
            "the default vlan id is not between 1-4095",
        ),
        (
            vec![
                "--network-type=vlan",
                "--default-interface-name=eth1",
                "--default-logical-gateway=true",
                "--default-u2o-interconnection=true",
            ],
            "--default-u2o-interconnection",
            "logicalGateway and u2oInterconnection can't be opened at the same time",
        ),
        (
            vec!["--network-type=vlan", "--default-interface-name=a/b"],
            "--default-interface-name",
            "not a Linux interface name",
        ),
        (
            vec!["--default-provider-name=provider12345"],
            "--default-provider-name",
            "longer than 12 characters",
        ),
        (
            vec![
                "--network-type=vlan",
                "--default-interface-name=eth1",
                "--default-vlan-name=Bad",
            ],
            "--default-vlan-name",
            "DNS label",
        ),
    ] {
        let err = flags(&args).validate().unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("invalid {flag} ")) && err.contains(why),
            "{args:?}: {err}"
        );
    }
    // Outside vlan mode Kube-OVN ignores the underlay's flags; so do we.
    flags(&[
        "--default-logical-gateway=true",
        "--default-u2o-interconnection=true",
        "--default-vlan-id=5000",
    ])
    .validate()
    .unwrap();
}

#[test]
fn external_gateway_and_bfd_flags_have_kube_ovns_names_defaults_and_env_vars() {
    let c = flags(&[]).validate().unwrap();
    assert_eq!(
        c.external,
        external::ExternalSettings {
            switch: "external".into(),
            net: "external".into(),
            vlan_id: None,
            config_ns: "kube-system".into(),
            enable_eip_snat: true,
            bfd: external::BfdTimers {
                min_tx: 100,
                min_rx: 100,
                detect_mult: 3,
            },
        }
    );
    let c = flags(&[
        "--external-gateway-switch=ext1",
        "--external-gateway-net=physnet",
        "--external-gateway-vlanid=200",
        "--external-gateway-config-ns=ovn-system",
        "--enable-eip-snat=false",
        "--bfd-min-tx=300",
        "--bfd-min-rx=250",
        "--detect-mult=5",
    ])
    .validate()
    .unwrap();
    assert_eq!(
        (
            c.external.switch.as_str(),
            c.external.net.as_str(),
            c.external.vlan_id
        ),
        ("ext1", "physnet", Some(200))
    );
    assert_eq!(c.external.config_ns, "ovn-system");
    assert!(!c.external.enable_eip_snat);
    assert_eq!(
        c.external.bfd,
        external::BfdTimers {
            min_tx: 300,
            min_rx: 250,
            detect_mult: 5
        }
    );
    // Every flag is also Kube-OVN's environment variable.
    let cmd = <Flags as clap::CommandFactory>::command();
    for (long, env) in [
        ("external-gateway-switch", "EXTERNAL_GATEWAY_SWITCH"),
        ("external-gateway-net", "EXTERNAL_GATEWAY_NET"),
        ("external-gateway-vlanid", "EXTERNAL_GATEWAY_VLANID"),
        ("external-gateway-config-ns", "EXTERNAL_GATEWAY_CONFIG_NS"),
        ("enable-eip-snat", "ENABLE_EIP_SNAT"),
        ("bfd-min-tx", "BFD_MIN_TX"),
        ("bfd-min-rx", "BFD_MIN_RX"),
        ("detect-mult", "DETECT_MULT"),
        ("ovn-sb-addr", "OVN_SB_ADDR"),
    ] {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(long))
            .unwrap_or_else(|| panic!("--{long} exists"));
        assert_eq!(arg.get_env().and_then(|e| e.to_str()), Some(env), "--{long}");
    }
}

#[test]
fn bad_external_gateway_and_bfd_flags_name_the_flag() {
    for (args, flag) in [
        (
            vec!["--external-gateway-vlanid=4096"],
            "--external-gateway-vlanid",
        ),
        (vec!["--external-gateway-vlanid=-1"], "--external-gateway-vlanid"),
        (vec!["--external-gateway-switch=Ext"], "--external-gateway-switch"),
        (vec!["--external-gateway-switch="], "--external-gateway-switch"),
        (vec!["--external-gateway-net=a:b"], "--external-gateway-net"),
        (
            vec!["--external-gateway-config-ns=kube_system"],
            "--external-gateway-config-ns",
        ),
        (vec!["--bfd-min-tx=0"], "--bfd-min-tx"),
        (vec!["--bfd-min-rx=0"], "--bfd-min-rx"),
        (vec!["--bfd-min-rx=4294968"], "--bfd-min-rx"),
        (vec!["--detect-mult=0"], "--detect-mult"),
        (vec!["--detect-mult=256"], "--detect-mult"),
    ] {
        let err = flags(&args).validate().unwrap_err().to_string();
        assert!(err.starts_with(&format!("invalid {flag} ")), "{args:?}: {err}");
    }
}
