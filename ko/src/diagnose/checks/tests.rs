use serde_json::json;

use super::*;

/// `ovs-appctl cluster/status OVN_Northbound` of a one-member cluster (ovsdb-server 3.1).
const LEADER: &str = "3121
Name: OVN_Northbound
Cluster ID: 3acb (3acb1963-f877-4e42-b1b7-62c683b78fce)
Server ID: 3121 (3121de5d-3938-4c77-b759-791aa42a2a70)
Address: tcp:127.0.0.1:16643
Status: cluster member
Role: leader
Term: 1
Leader: self
Vote: self

Last Election started 1012 ms ago, reason: timeout
Last Election won: 1012 ms ago
Election timer: 1000
Log: [2, 3]
Entries not yet committed: 0
Entries not yet applied: 0
Connections:
Disconnections: 0
Servers:
    3121 (3121 at tcp:127.0.0.1:16643) (self) next_index=2 match_index=2
";

fn three_members(connections: &str, leader: &str) -> String {
    LEADER
        .replace("Role: leader", "Role: follower")
        .replace("Leader: self", &format!("Leader: {leader}"))
        .replace("Connections:", &format!("Connections: {connections}"))
        .replace(
            "    3121 (3121 at tcp:127.0.0.1:16643) (self) next_index=2 match_index=2\n",
            "    3121 (3121 at tcp:10.0.0.1:6643) (self)\n    a1b2 (a1b2 at tcp:10.0.0.2:6643) last msg 12 ms ago\n    c3d4 (c3d4 at tcp:10.0.0.3:6643) last msg 3 ms ago\n",
        )
}

#[test]
fn raft_health() {
    let f = raft("NB", "ovn-central-x", Ok(LEADER), None);
    assert_eq!(f.level, Level::Pass, "{f}");
    assert!(f.message.contains("leader, leader self, 1 member(s)"), "{f}");

    let ok = three_members("->a1b2 ->c3d4 <-a1b2 <-c3d4", "a1b2");
    assert_eq!(raft("SB", "p", Ok(&ok), None).level, Level::Pass);
    let lost = three_members("->a1b2 <-a1b2", "a1b2");
    let f = raft("SB", "p", Ok(&lost), None);
    assert_eq!(f.level, Level::Fail);
    assert!(f.message.contains("no connection to member(s) c3d4"), "{f}");
    let f = raft("SB", "p", Ok(&three_members("", "unknown")), None);
    assert!(f.message.contains("no leader known"), "{f}");
    let joining = LEADER.replace(
        "Status: cluster member",
        "Status: disconnected from the cluster (election timeout)",
    );
    assert!(
        raft("NB", "p", Ok(&joining), None)
            .message
            .contains("not a cluster member: disconnected")
    );

    // A standalone database (one ovn-central) has no cluster/status.
    let e =
        "\"cluster/status\" is not a valid command (use \"list-commands\" to see a list of valid commands)";
    assert_eq!(raft("NB", "p", Err(e), Some(true)).level, Level::Pass);
    assert_eq!(raft("NB", "p", Err(e), Some(false)).level, Level::Fail);
    assert_eq!(
        raft("NB", "p", Err("connection refused"), None).level,
        Level::Fail
    );
}

#[test]
fn northd_needs_exactly_one_active() {
    let s = |v: &[(&str, Result<&str, &str>)]| {
        v.iter()
            .map(|(p, r)| ((*p).to_owned(), r.map(str::to_owned).map_err(str::to_owned)))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        northd(&s(&[("a", Ok("Status: active")), ("b", Ok("Status: standby"))])).level,
        Level::Pass
    );
    let f = northd(&s(&[("a", Ok("Status: standby")), ("b", Err("no socket"))]));
    assert_eq!(f.level, Level::Fail);
    assert!(
        f.message
            .contains("none active: a: Status: standby; b: no socket"),
        "{f}"
    );
    assert_eq!(
        northd(&s(&[("a", Ok("Status: active")), ("b", Ok("Status: active"))])).level,
        Level::Fail
    );
}

#[test]
fn workloads_ready_or_not() {
    let list = json!({"items": [
        {"kind": "Deployment", "metadata": {"name": "ovn-central"}, "spec": {"replicas": 1}, "status": {"readyReplicas": 1}},
        {"kind": "Deployment", "metadata": {"name": "kube-ovn-controller"}, "spec": {"replicas": 2}, "status": {"readyReplicas": 1}},
        {"kind": "DaemonSet", "metadata": {"name": "ovs-ovn"}, "status": {"desiredNumberScheduled": 2, "numberReady": 2}},
        {"kind": "DaemonSet", "metadata": {"name": "kube-ovn-speaker"}, "status": {"desiredNumberScheduled": 0}}
    ]});
    let got: Vec<String> = workloads(&list).iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        vec![
            "PASS  deployment ovn-central: 1/1 pods ready",
            "FAIL  deployment kube-ovn-controller: 1/2 pods ready",
            "PASS  daemonset ovs-ovn: 2/2 pods ready",
            "FAIL  daemonset kube-ovn-cni: not found",
            "PASS  daemonset kube-ovn-speaker: 0/0 pods ready",
        ]
    );
}

#[test]
fn crds_and_nodes() {
    let all: Vec<Value> = CRDS.iter().map(|c| json!({"metadata": {"name": c}})).collect();
    assert_eq!(crds(&json!({"items": all})).level, Level::Pass);
    let f = crds(&json!({"items": all[1..]}));
    assert_eq!(f.message, "missing: subnets.kubeovn.io");
    let n = json!({"items": [
        {"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        {"metadata": {"name": "n2"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}}
    ]});
    assert_eq!(nodes(&n), vec![("n1".to_owned(), true), ("n2".to_owned(), false)]);
}

#[test]
fn tunnels_to_every_other_chassis() {
    let chassis = vec![
        Chassis {
            name: "c1".into(),
            hostname: "node1".into(),
            encap_ips: vec!["172.30.0.11".into()],
        },
        Chassis {
            name: "c2".into(),
            hostname: "node2".into(),
            encap_ips: vec!["172.30.0.12".into()],
        },
        Chassis {
            name: "c3".into(),
            hostname: "node3".into(),
            encap_ips: vec!["172.30.0.13".into()],
        },
    ];
    let remotes = |ips: &[&str]| ips.iter().map(|s| (*s).to_owned()).collect::<BTreeSet<_>>();
    assert_eq!(
        tunnels("node1", "c1", &chassis, &remotes(&["172.30.0.12", "172.30.0.13"])).level,
        Level::Pass
    );
    let f = tunnels("node1", "c1", &chassis, &remotes(&["172.30.0.12"]));
    assert_eq!(
        f.to_string(),
        "FAIL  node node1: no tunnel to chassis node3 (172.30.0.13)"
    );
    let f = tunnels("node4", "c4", &chassis, &remotes(&[]));
    assert!(
        f.message.contains("chassis c4 is not in the southbound database"),
        "{f}"
    );
}

#[test]
fn pinger_metrics() {
    let text = "# HELP pinger_ovs_up If the ovs on the node is up\n# TYPE pinger_ovs_up gauge\n\
        pinger_ovs_up{nodeName=\"node1\"} 1\n\
        pinger_ovn_controller_up{nodeName=\"node1\"} 1\n\
        pinger_apiserver_healthy{nodeName=\"node1\"} 1\n\
        pinger_inconsistent_port_binding{nodeName=\"node1\"} 0\n\
        pinger_pod_ping_lost_total{nodeName=\"node1\",target_node_name=\"node2\",target_pod_ip=\"10.16.0.5\"} 2\n\
        pinger_pod_ping_count_total{nodeName=\"node1\",target_node_name=\"node2\",target_pod_ip=\"10.16.0.5\"} 60\n";
    let samples = parse_metrics(text);
    assert_eq!(samples[0].0, "pinger_ovs_up");
    assert_eq!(samples[0].1["nodeName"], "node1");
    assert_eq!(samples[4].1["target_pod_ip"], "10.16.0.5");
    let got: Vec<String> = pinger("node1", &samples)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        got,
        vec![
            "PASS  pinger on node1: OVS up",
            "PASS  pinger on node1: ovn-controller up",
            "PASS  pinger on node1: the API server up",
            "WARN  pinger on node1: pod pings lost 2 of 60 since it started",
        ]
    );
    let down = parse_metrics("pinger_ovs_down{nodeName=\"node1\"} 1\npinger_inconsistent_port_binding 3\n");
    let got: Vec<String> = pinger("node1", &down).iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        vec![
            "FAIL  pinger on node1: OVS is down (pinger_ovs_down 1)",
            "FAIL  pinger on node1: 3 port bindings inconsistent between OVS and OVN",
        ]
    );
    assert_eq!(pinger("node1", &[])[0].level, Level::Warn);
}

#[test]
fn subnet_conditions_and_gateway_answers() {
    let s = json!({"status": {"conditions": [
        {"type": "Validated", "status": "True"},
        {"type": "Ready", "status": "False", "reason": "GatewayUnreachable", "message": "no route"}
    ]}});
    let got: Vec<String> = subnet_conditions("subnet s", &s)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        got,
        vec![
            "PASS  subnet s: condition Validated=True",
            "FAIL  subnet s: condition Ready=False (GatewayUnreachable: no route)"
        ]
    );
    assert_eq!(subnet_conditions("subnet s", &json!({}))[0].level, Level::Info);
    assert_eq!(gateway_answer("s", "10.16.0.1", "n1", Ok(())).level, Level::Pass);
    let refused = "kubectl exec … failed (exit status: 1): bash: connect: Connection refused\nbash: line 1: /dev/tcp/10.16.0.1/9: Connection refused\ncommand terminated with exit code 1";
    assert_eq!(
        gateway_answer("s", "10.16.0.1", "n1", Err(refused)).level,
        Level::Pass
    );
    let f = gateway_answer(
        "s",
        "10.16.0.1",
        "n1",
        Err("failed: command terminated with exit code 124"),
    );
    assert_eq!(
        f.to_string(),
        "FAIL  subnet s: gateway 10.16.0.1 does not answer from node n1 within 3 s"
    );
}

#[test]
fn the_tools_message_not_kubectls() {
    let e = "kubectl exec -n kube-system ovs-ovn-x -c openvswitch -- ovs-appctl failed (exit status: 2): \
             ovs-appctl: /run/openvswitch/ovs-vswitchd.ctl: transaction error (Connection timed out)\n\
             command terminated with exit code 2\n";
    assert_eq!(
        last_line(e),
        "ovs-appctl: /run/openvswitch/ovs-vswitchd.ctl: transaction error (Connection timed out)"
    );
}

#[test]
fn the_ip_ports_job_keeps_the_daemonsets_probe_settings() {
    let args: Vec<String> = [
        "--external-address=",
        "--internal-dns=",
        "--logtostderr=false",
        "--log_file=/var/log/kube-ovn/kube-ovn-pinger.log",
        "--enable-metrics=true",
        "--system.run.dir=/run/openvswitch",
        "--target-ip-ports=tcp-10.0.0.1-80",
    ]
    .map(str::to_owned)
    .to_vec();
    assert_eq!(
        ip_ports_job(&args, "tcp-10.16.0.5-8080"),
        [
            "/kube-ovn/kube-ovn-pinger",
            "--mode=job",
            "--exit-code=1",
            "--external-address=",
            "--internal-dns=",
            "--system.run.dir=/run/openvswitch",
            "--target-ip-ports=tcp-10.16.0.5-8080"
        ]
    );
}
