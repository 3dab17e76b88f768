//! The lab installed as users install kube-ovn-rs (`up --install manifests`): real kubelets and
//! containerd per node, the images built here, `kubectl apply -k deploy/overlays/lab`. Then the
//! operations users do, each with real traffic from the outside host to an announced pod and to
//! a LoadBalancer IP flowing throughout: rolling restarts of the speaker, the CNI daemon and the
//! controller, and a gateway node's BGP label taken away and given back. Then, in a second lab,
//! the OVN databases as a 3-member RAFT cluster whose leader goes (`lab_manifests/raft.rs`).
//! Needs root, the packages of `scripts/install-deps.sh`, podman and debootstrap (the images),
//! and the other binaries beside `kube-ovn-lab` (as `lab.rs`).

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::lab::Lab;
use kube_ovn_testkit::wait_until;
use traffic::{Requests, without_loss};

#[allow(dead_code, reason = "the external network's checks run on lab.rs' labs")]
#[path = "lab/external.rs"]
mod external;
#[path = "lab_manifests/observe.rs"]
mod observe;
#[path = "lab_manifests/operations.rs"]
mod operations;
#[path = "lab_manifests/raft.rs"]
mod raft;
#[path = "lab_manifests/traffic.rs"]
mod traffic;
#[allow(dead_code, reason = "the VLAN fabric checks run on lab.rs' labs")]
#[path = "lab/underlay.rs"]
mod underlay;

const WAIT: Duration = Duration::from_mins(2);

fn jsonpath(lab: &Lab, args: &[&str], path: &str) -> Result<String> {
    let mut all = vec!["kubectl"];
    all.extend_from_slice(args);
    let out = format!("jsonpath={path}");
    all.extend(["-o", &out]);
    lab.ok(&all)
}

/// `kubectl run` of a netexec pod in `namespace`, then `kubectl wait` until it is Ready.
fn new_pod_ready(lab: &Lab, namespace: &str, name: &str) -> Result<()> {
    lab.ok(&[
        "kubectl",
        "-n",
        namespace,
        "run",
        name,
        "--image=kube-ovn-lab/netexec",
        "--image-pull-policy=IfNotPresent",
        "--port=8080",
    ])?;
    lab.ok(&[
        "kubectl",
        "-n",
        namespace,
        "wait",
        "--for=condition=Ready",
        &format!("pod/{name}"),
        "--timeout=60s",
    ])?;
    Ok(())
}

/// `kubectl rollout restart`, then `rollout status` until it is done.
fn rollout_restart(lab: &Lab, what: &str) -> Result<()> {
    lab.ok(&["kubectl", "-n", "kube-system", "rollout", "restart", what])?;
    lab.ok(&[
        "kubectl",
        "-n",
        "kube-system",
        "rollout",
        "status",
        what,
        "--timeout=180s",
    ])?;
    Ok(())
}

/// What keeps a node's datapath forwarding while the host is busy (the restarts below hold it):
/// every node's ovs-vswitchd at nice -10, as start-ovs.sh starts it, and the cgroup of all the
/// lab's pods at the CPU weight the lab gives it (`machine::PODS_CPU_SHARES`).
fn datapath_gets_the_cpu(lab: &Lab) -> Result<()> {
    for node in ["node1", "node2"] {
        let pidfile = lab.node_root(node, "run/openvswitch/ovs-vswitchd.pid");
        let pid: u32 = std::fs::read_to_string(&pidfile)
            .with_context(|| format!("{}", pidfile.display()))?
            .trim()
            .parse()?;
        let nice = kube_ovn_lab::cluster::process::nice(pid).map_err(anyhow::Error::msg)?;
        ensure!(
            nice == -10,
            "{node}'s ovs-vswitchd (pid {pid}) runs at nice {nice}, want -10"
        );
    }
    let shares = std::fs::read_to_string("/sys/fs/cgroup/cpu/kube-ovn-lab/cpu.shares")?;
    ensure!(
        shares.trim() == kube_ovn_lab::cluster::machine::PODS_CPU_SHARES.to_string(),
        "/kube-ovn-lab's cpu.shares is {}, want {}",
        shares.trim(),
        kube_ovn_lab::cluster::machine::PODS_CPU_SHARES
    );
    Ok(())
}

/// The restarts a `kube-ovn-lab status` pod line reports (`…, 1 restart`, `…, 3 restarts`).
fn restarts_in_status(line: &str) -> u32 {
    let words: Vec<&str> = line.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w[1].starts_with("restart"))
        .and_then(|w| w[0].trim_start_matches(',').parse().ok())
        .unwrap_or(0)
}

#[test]
fn installed_from_deploy_on_real_kubelets_it_is_green_and_keeps_serving_through_operations() -> Result<()> {
    // Each phase's start, in seconds since the test began: a failure's place in time.
    let began = Instant::now();
    let phase = |what: &str| println!("[test {:6.1}s] {what}", began.elapsed().as_secs_f64());
    let lab = Lab::new("m");
    let out = lab.up(&["--install", "manifests", "--nodes", "2"])?;
    println!("{out}");
    common::lab::matrix_is_green(&out)?;
    ensure!(
        out.contains("no request of any component was refused"),
        "RBAC refusals (up's report is printed above): {:?}",
        out.lines().filter(|l| l.contains("RBAC")).collect::<Vec<_>>()
    );
    // The dual-stack fabric from deploy/overlays/lab (its dual-stack join-cidr and its
    // bgp-neighbor-ipv6-address): the dual-stack pods reached over IPv6 and reaching out.
    ensure!(
        out.lines()
            .filter(|l| l.contains("outside → pod (IPv6): ok ") && l.contains("pod → outside (IPv6): ok "))
            .count()
            == 2,
        "the matrix's IPv6 rows (up's report is printed above): {:?}",
        out.lines().filter(|l| l.contains("IPv6")).collect::<Vec<_>>()
    );
    // vpc1 out through its EIPs and in at its FIP and DNAT port, the EIPs announced from the
    // node that holds its gateway port, which then moves away and back.
    phase("vpc1's EIPs and a failover");
    external::the_vpc_reaches_out_through_its_eips(&lab, &out)?;

    // Our components are pods the kubelets made through containerd: as many as deploy/ asks.
    let pods = jsonpath(
        &lab,
        &["get", "pods", "-n", "kube-system"],
        "{range .items[*]}{.metadata.labels.app} {.spec.nodeName} {.status.containerStatuses[0].containerID} {.status.containerStatuses[0].ready}{\"\\n\"}{end}",
    )?;
    for (app, count) in [
        ("ovs", 2),
        ("kube-ovn-cni", 2),
        ("kube-ovn-speaker", 2),
        ("kube-ovn-controller", 2),
        ("ovn-central", 1),
    ] {
        let ready = pods
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                f.len() == 4 && f[0] == app && f[2].starts_with("containerd://") && f[3] == "true"
            })
            .count();
        ensure!(ready == count, "{app}: {ready} ready pods, want {count}:\n{pods}");
    }
    datapath_gets_the_cpu(&lab)?;

    // `kubectl ko trace` and `kubectl ko diagnose` as an operator runs them (issue 28).
    // And the pinger's metrics and mirror0 (observe.rs), in the same steps.
    phase("kubectl ko, the pingers, mirror0");
    operations::kubectl_ko_works(&lab)?;

    // Traffic targets: an announced pod (its /32 at the ToR) and the LoadBalancer IP.
    let fixed: SocketAddr = "10.17.0.100:8080".parse()?;
    let lb_ip = jsonpath(
        &lab,
        &["get", "service", "-n", "demo", "hello"],
        "{.status.loadBalancer.ingress[0].ip}",
    )?;
    let lb: SocketAddr = format!("{lb_ip}:80").parse().context("the LoadBalancer IP")?;
    let targets = [fixed, lb];
    let prefixes = vec!["10.17.0.100/32".to_owned(), format!("{lb_ip}/32")];

    // kube-proxy on the nodes: the NodePort from the outside host (to each node's address), the
    // ClusterIP from a node's own network namespace.
    let node_port = jsonpath(
        &lab,
        &["get", "service", "-n", "demo", "hello"],
        "{.spec.ports[0].nodePort}",
    )?;
    let cluster_ip = jsonpath(
        &lab,
        &["get", "service", "-n", "demo", "hello"],
        "{.spec.clusterIP}",
    )?;
    let outside = lab.netns_path("outside");
    let from_outside = kube_ovn_dataplane::Netns::open(&outside)?;
    for node_ip in ["172.30.0.11", "172.30.0.12"] {
        let addr: SocketAddr = format!("{node_ip}:{node_port}").parse()?;
        let answer = from_outside
            .run(|| kube_ovn_lab::netexec::http_get(addr, "/hostname", Duration::from_secs(2)))??;
        ensure!(
            answer.status == 200 && answer.body.starts_with("hello-"),
            "NodePort {addr} from outside: {answer:?}"
        );
    }
    let via_cluster_ip = lab.ok(&[
        "node",
        "node2",
        "--",
        "curl",
        "-s",
        "-m",
        "5",
        &format!("http://{cluster_ip}/hostname"),
    ])?;
    ensure!(
        via_cluster_ip.starts_with("hello-"),
        "ClusterIP {cluster_ip} from node2's namespace: {via_cluster_ip:?}"
    );

    phase("the speakers restart");
    // The speakers restart one node at a time: graceful restart keeps the ToR's routes.
    without_loss(
        &lab,
        "rollout restart ds/kube-ovn-speaker",
        &targets,
        &prefixes,
        Requests::AllAnswered,
        || rollout_restart(&lab, "ds/kube-ovn-speaker"),
    )?;
    phase("the CNI daemons restart");
    // The CNI daemons restart: the pods keep their network; a new pod starts afterwards.
    without_loss(
        &lab,
        "rollout restart ds/kube-ovn-cni",
        &targets,
        &prefixes,
        Requests::Reported,
        || rollout_restart(&lab, "ds/kube-ovn-cni"),
    )?;
    new_pod_ready(&lab, "demo", "after-cni")?;

    phase("the controller restarts");
    // The controller restarts: the lease moves to a new pod, which gives new pods addresses.
    let holder = |lab: &Lab| {
        jsonpath(
            lab,
            &["get", "lease", "-n", "kube-system", "kube-ovn-controller"],
            "{.spec.holderIdentity}",
        )
    };
    let before = holder(&lab)?;
    without_loss(
        &lab,
        "rollout restart deploy/kube-ovn-controller",
        &targets,
        &prefixes,
        Requests::Reported,
        || rollout_restart(&lab, "deploy/kube-ovn-controller"),
    )?;
    wait_until("the controller's lease to move to a new pod", WAIT, || {
        let now = holder(&lab)?;
        Ok(!now.is_empty() && now != before)
    })?;
    new_pod_ready(&lab, "demo", "after-controller")?;

    phase("ovs-vswitchd killed on bgp/fixed's node");
    // ovs-vswitchd dies on the node of bgp/fixed (as Debian 12's OVS 3.1 userspace conntrack
    // aborts under connection churn): start-ovs.sh exits, the kubelet starts ovs-ovn again, the
    // node's pods answer again; `status` reports the restart.
    let node = jsonpath(&lab, &["get", "pod", "-n", "bgp", "fixed"], "{.spec.nodeName}")?;
    let pidfile = lab.node_root(&node, "run/openvswitch/ovs-vswitchd.pid");
    let pid: u32 = std::fs::read_to_string(&pidfile)
        .with_context(|| format!("{}", pidfile.display()))?
        .trim()
        .parse()?;
    let started = kube_ovn_lab::cluster::process::start_time(pid).map_err(anyhow::Error::msg)?;
    let probe = kube_ovn_dataplane::Netns::open(&outside)?;
    let answers = || -> Result<bool> {
        Ok(probe.run(|| {
            kube_ovn_lab::netexec::http_get(fixed, "/hostname", Duration::from_secs(1))
                .is_ok_and(|a| a.status == 200)
        })?)
    };
    // The controller's restart just before: bgp/fixed answers again within the bound.
    wait_until("bgp/fixed to answer before ovs-vswitchd is killed", WAIT, answers)?;
    // The pod's restarts so far: OVS 3.1's userspace datapath has aborted on its own under this
    // test's load (printed when it did), and the kill below must add one more.
    let ovs_pod_args = [
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "app=ovs",
        &format!("--field-selector=spec.nodeName={node}"),
    ];
    let ovs_pod = jsonpath(&lab, &ovs_pod_args, "{.items[0].metadata.name}")?;
    let restarts_before: u32 = jsonpath(
        &lab,
        &ovs_pod_args,
        "{range .items[0].status.containerStatuses[*]}{.restartCount} {end}",
    )?
    .split_whitespace()
    .map(str::parse::<u32>)
    .sum::<Result<u32, _>>()?;
    if restarts_before > 0 {
        // When and how the last one ended: at start-up, or under the test's load.
        let last = jsonpath(
            &lab,
            &ovs_pod_args,
            "{range .items[0].status.containerStatuses[*].lastState.terminated}{.reason} exit {.exitCode} signal {.signal}, started {.startedAt}, finished {.finishedAt}{end}",
        )?;
        println!(
            "{ovs_pod} on {node} had restarted {restarts_before} time(s) before ovs-vswitchd was killed (the test began {:.0} s ago); the last: {last}",
            began.elapsed().as_secs_f64()
        );
    }
    let killed = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid)?),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    wait_until(
        "bgp/fixed to answer again after ovs-vswitchd was killed",
        WAIT,
        || Ok(!kube_ovn_lab::cluster::process::alive(pid, started) && answers()?),
    )?;
    println!(
        "ovs-vswitchd killed on {node}: bgp/fixed answers again after {:.1} s",
        killed.elapsed().as_secs_f64()
    );
    // The kubelet reports the restart with the pod's next status update.
    wait_until("status to report ovs-ovn's restart", WAIT, || {
        let status = lab.run(&["status"])?;
        Ok(String::from_utf8_lossy(&status.stdout)
            .lines()
            .filter(|l| l.contains(&format!("kube-system/{ovs_pod}")))
            .any(|l| restarts_in_status(l) > restarts_before))
    })?;

    phase("node2's gateway label removed and given back");
    // A gateway node's label: removed, its speaker goes and its session with the ToR closes;
    // given back, a speaker starts there and the session comes up.
    let session = |lab: &Lab| -> Result<bool> {
        let out = lab.ok(&["tor", "--", "birdc", "show protocols"])?;
        Ok(out
            .lines()
            .any(|l| l.contains("node2") && l.contains("Established")))
    };
    ensure!(session(&lab)?, "node2's session is not Established before");
    lab.ok(&["kubectl", "label", "node", "node2", "ovn.kubernetes.io/bgp-"])?;
    wait_until("node2's speaker pod to go and its session to close", WAIT, || {
        let on_node2 = jsonpath(
            &lab,
            &[
                "get",
                "pods",
                "-n",
                "kube-system",
                "-l",
                "app=kube-ovn-speaker",
                "--field-selector=spec.nodeName=node2",
            ],
            "{.items[*].metadata.name}",
        )?;
        Ok(on_node2.trim().is_empty() && !session(&lab)?)
    })?;
    // The speaker saw its node leave BGP: Cease, so the ToR withdrew node2's routes at once
    // rather than keeping them stale for a restart (90 s) that will not come.
    wait_until(
        "the ToR to have no route via node2",
        Duration::from_secs(15),
        || {
            let routes = lab.ok(&["tor", "--", "birdc", "show route"])?;
            Ok(!routes.contains("via 172.30.0.12"))
        },
    )?;
    lab.ok(&["kubectl", "label", "node", "node2", "ovn.kubernetes.io/bgp=true"])?;
    wait_until("node2's session to come up again", WAIT, || session(&lab))?;

    phase("node2 drained");
    // node2 drained (node1 holds the single ovn-central member, which may run on a master only)
    // and uncordoned: its Deployment pods move to node1, the LoadBalancer IP still answers from
    // outside, and OVN keeps a port for exactly the pods that exist.
    lab.ok(&[
        "kubectl",
        "drain",
        "node2",
        "--ignore-daemonsets",
        "--force",
        "--timeout=120s",
    ])?;
    wait_until("demo/hello's pods to run on node1 only", WAIT, || {
        let nodes = jsonpath(
            &lab,
            &[
                "get",
                "pods",
                "-n",
                "demo",
                "-l",
                "app=hello",
                "--field-selector=status.phase=Running",
            ],
            "{.items[*].spec.nodeName}",
        )?;
        let nodes: Vec<&str> = nodes.split_whitespace().collect();
        Ok(nodes.len() == 2 && nodes.iter().all(|n| *n == "node1"))
    })?;
    let outside_probe = kube_ovn_dataplane::Netns::open(&outside)?;
    wait_until("the LoadBalancer IP to answer from node1's pods", WAIT, || {
        Ok(outside_probe.run(|| {
            kube_ovn_lab::netexec::http_get(lb, "/hostname", Duration::from_secs(1))
                .is_ok_and(|a| a.status == 200)
        })?)
    })?;
    lab.ok(&["kubectl", "uncordon", "node2"])?;
    let last = std::cell::RefCell::new(String::new());
    wait_until("OVN's pod ports to be exactly the pods", WAIT, || {
        // `<name>.<namespace>` of every pod not on the host's network (those have no port).
        let listed = jsonpath(
            &lab,
            &["get", "pods", "-A"],
            "{range .items[*]}{.metadata.name}.{.metadata.namespace} {.spec.hostNetwork}{\"\\n\"}{end}",
        )?;
        let mut pods: Vec<&str> = listed
            .lines()
            .filter_map(|l| {
                let mut f = l.split_whitespace();
                let name = f.next()?;
                (f.next() != Some("true")).then_some(name)
            })
            .collect();
        pods.sort_unstable();
        let listed_ports = lab.ok(&[
            "cp",
            "--",
            "ovn-nbctl",
            "--bare",
            "--columns=name",
            "find",
            "Logical_Switch_Port",
            "type=\"\"",
        ])?;
        let mut ports: Vec<&str> = listed_ports
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("node-"))
            .collect();
        ports.sort_unstable();
        *last.borrow_mut() = format!("pods {pods:?}, ports {ports:?}");
        Ok(pods == ports)
    })
    .with_context(|| last.borrow().clone())?;

    phase("the underlay after all that");
    // Kube-OVN's underlay guide, which `up` applied with the other examples, after all of the
    // above (the daemons, OVS and the nodes restarted under it; the drain deleted the bare
    // underlay pod on node2, so the example is applied again first, as its user would); then
    // the ProviderNetwork deleted (each node's eth1 back) and applied again (the pods, which
    // stayed, work again).
    let nodes = ["node1", "node2"];
    let (_, report) = underlay::the_underlay_comes_back(&lab, &nodes)?;
    underlay::the_underlay_works(&lab, &report, &nodes)?;
    underlay::the_nic_goes_back(&lab, &nodes)?;
    let (took, _) = underlay::the_underlay_comes_back(&lab, &nodes)?;
    println!("the underlay came back green {took:?} after the ProviderNetwork was applied again");

    phase("down");
    let state = lab.state()?;
    let lab_dir = lab.dir.path().join(&lab.name);
    lab.down_and_check_clean(&state)?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
    ensure!(
        !mounts.contains(&lab_dir.to_string_lossy().into_owned()),
        "mounts left under {}",
        lab_dir.display()
    );
    let cgroups = Path::new("/sys/fs/cgroup/memory/kube-ovn-lab").join(&lab.name);
    ensure!(!cgroups.exists(), "{} is left", cgroups.display());
    drop(lab);

    phase("the RAFT lab");
    // Then the OVN databases as a 3-member RAFT cluster (`--ovn-central-replicas 3`, one member
    // per node, so three nodes), in a lab of its own after the one above is down (two labs at
    // once would share two cores), without the examples: kube-ovn-monitor shows a leader change.
    let raft_lab = Lab::new("mr");
    let out = raft_lab.up(&[&raft::UP_ARGS[..], &["--no-examples"]].concat())?;
    println!("{out}");
    raft::the_nb_leader_moves_when_its_pod_goes(&raft_lab)?;
    raft::reload_restarts_everything_and_it_comes_back(&raft_lab)
}
