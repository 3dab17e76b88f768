//! The lab end to end, driven as a user drives it: the `kube-ovn-lab` binary's verbs, and what
//! they leave on the machine. Each test brings up a lab of its own (its own name, so its
//! namespaces are its own, and its own labs directory), on the real components: OVN, OVS with
//! the userspace datapath, our controller, daemons and speakers, BIRD or FRR as the ToR.
//!
//! The other binaries must be beside `kube-ovn-lab` (`cargo test --workspace` builds them all;
//! alone, `cargo build --workspace --bins` first). Needs root and the packages of
//! `scripts/install-deps.sh`; fails, never skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::cluster::state::LabState;
use kube_ovn_testkit::wait_until;

const WAIT: Duration = Duration::from_mins(1);

struct Lab {
    name: String,
    dir: tempfile::TempDir,
}

impl Lab {
    fn new(suffix: &str) -> Self {
        Self {
            name: format!("t{}{suffix}", std::process::id() % 100_000),
            dir: tempfile::Builder::new()
                .prefix("kube-ovn-lab-test")
                .tempdir()
                .expect("a temporary labs directory"),
        }
    }

    fn bin() -> &'static str {
        env!("CARGO_BIN_EXE_kube-ovn-lab")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(Self::bin());
        cmd.arg("--name")
            .arg(&self.name)
            .arg("--labs-dir")
            .arg(self.dir.path())
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Result<Output> {
        self.command(args)
            .output()
            .with_context(|| format!("running kube-ovn-lab {}", args.join(" ")))
    }

    /// Runs a verb that must succeed; its stdout.
    fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.run(args)?;
        ensure!(
            out.status.success(),
            "kube-ovn-lab {} failed ({}):\n{}\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn up(&self, extra: &[&str]) -> Result<String> {
        let bins = Path::new(Self::bin())
            .parent()
            .context("the binary's directory")?
            .to_owned();
        for b in [
            "kube-ovn-controller",
            "kube-ovn-daemon",
            "kube-ovn",
            "kube-ovn-speaker",
        ] {
            ensure!(
                bins.join(b).is_file(),
                "{b} is not in {} (run the tests with `cargo test --workspace`, or `cargo build --workspace --bins` first)",
                bins.display()
            );
        }
        let bin_dir = bins.to_string_lossy().into_owned();
        let mut args = vec!["up", "--no-install", "--bin-dir", &bin_dir];
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    fn state(&self) -> Result<LabState> {
        LabState::load(&self.dir.path().join(&self.name).join("state.json"))?.context("no state file")
    }

    fn netns_prefix(&self) -> String {
        format!("kl_{}_", self.name)
    }

    fn namespaces(&self) -> Result<Vec<String>> {
        let out = String::from_utf8(Command::new("ip").args(["netns", "list"]).output()?.stdout)?;
        Ok(out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| n.starts_with(&self.netns_prefix()))
            .map(str::to_owned)
            .collect())
    }

    /// `down`, then nothing of the lab may remain: no namespace, no process, no directory.
    fn down_and_check_clean(&self, state: &LabState) -> Result<()> {
        let out = self.ok(&["down"])?;
        ensure!(out.contains("is down"), "{out}");
        ensure!(
            self.namespaces()?.is_empty(),
            "namespaces left: {:?}",
            self.namespaces()?
        );
        let alive: Vec<String> = state
            .processes()
            .filter(|(_, pid, start)| process::alive(*pid, *start))
            .map(|(c, pid, _)| format!("{c} ({pid})"))
            .collect();
        ensure!(alive.is_empty(), "processes left: {alive:?}");
        let dir: PathBuf = self.dir.path().join(&self.name);
        ensure!(!dir.exists(), "{} is still there", dir.display());
        Ok(())
    }
}

impl Drop for Lab {
    /// A failed test still takes its lab down.
    fn drop(&mut self) {
        if self.dir.path().join(&self.name).exists() {
            let _ = self.run(&["down"]);
        }
    }
}

fn not_up(lab: &Lab, args: &[&str]) -> Result<()> {
    let out = lab.run(args)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "{args:?} succeeded on a lab that is not up"
    );
    ensure!(err.contains("is not up"), "{args:?} says: {err}");
    Ok(())
}

#[test]
fn the_lab_comes_up_green_is_usable_and_goes_down_clean() -> Result<()> {
    let lab = Lab::new("b");
    for verb in [
        &["status"][..],
        &["down"],
        &["kubectl", "get", "pods"],
        &["tor", "--", "true"],
        &["exec", "demo/web-1", "--", "true"],
        &["logs"],
    ] {
        not_up(&lab, verb)?;
    }
    let out = lab.up(&[])?;
    println!("{out}");
    ensure!(
        out.contains("checks as expected") && !out.contains("FAIL"),
        "the matrix is not green:\n{out}"
    );
    for want in [
        "outside → pod: ok",
        "blocked",
        "10.17.0.100/32",
        "node1 (Ready)",
        "node2 (Ready)",
    ] {
        ensure!(out.contains(want), "up's report lacks {want:?}:\n{out}");
    }
    let again = lab.run(&["up", "--no-install"])?;
    ensure!(
        !again.status.success() && String::from_utf8_lossy(&again.stderr).contains("already up"),
        "a second up must be refused"
    );

    let status = lab.ok(&["status"])?;
    ensure!(!status.contains("FAIL"), "{status}");

    // The verbs, as the README shows them.
    let pods = lab.ok(&["kubectl", "get", "pods", "-A", "-o", "wide"])?;
    ensure!(pods.contains("fixed") && pods.contains("10.17.0.100"), "{pods}");
    let addr = lab.ok(&["exec", "bgp/fixed", "--", "ip", "-br", "addr", "show", "eth0"])?;
    ensure!(addr.contains("10.17.0.100/16"), "{addr}");
    let routes = lab.ok(&["tor", "--", "birdc", "show", "route"])?;
    ensure!(routes.contains("10.17.0.100/32"), "{routes}");
    let ports = lab.ok(&["node", "node1", "--", "ovs-vsctl", "list-ports", "br-int"])?;
    ensure!(ports.contains("ovn0"), "{ports}");
    let switches = lab.ok(&["cp", "--", "ovn-nbctl", "ls-list"])?;
    ensure!(
        switches.contains("(bgp-local)") && switches.contains("(vpc1-net)"),
        "{switches}"
    );
    let logs = lab.ok(&["logs"])?;
    ensure!(
        logs.contains("controller") && logs.contains("node2-speaker"),
        "{logs}"
    );

    // A Deployment and a Service made with plain kubectl get pods, a ClusterIP and endpoints.
    lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "create",
        "deployment",
        "web",
        "--image=kube-ovn-lab/netexec",
        "--replicas=2",
        "--port=8080",
    ])?;
    lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "expose",
        "deployment",
        "web",
        "--port=80",
        "--target-port=8080",
    ])?;
    wait_until("the Deployment's 2 pods to be ready", WAIT, || {
        let ready = lab.ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "deployment",
            "web",
            "-o",
            "jsonpath={.status.readyReplicas}",
        ])?;
        Ok(ready.trim() == "2")
    })?;
    wait_until("the Service's EndpointSlice to list both pods", WAIT, || {
        let eps = lab.ok(&[
            "kubectl",
            "-n",
            "demo",
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=web",
            "-o",
            "jsonpath={.items[*].endpoints[*].addresses[0]}",
        ])?;
        Ok(eps.split_whitespace().count() == 2)
    })?;
    let cluster_ip = lab.ok(&[
        "kubectl",
        "-n",
        "demo",
        "get",
        "service",
        "web",
        "-o",
        "jsonpath={.spec.clusterIP}",
    ])?;
    ensure!(
        cluster_ip.starts_with("10.9") || cluster_ip.starts_with("10.10"),
        "ClusterIP {cluster_ip:?} is not from 10.96.0.0/12"
    );

    // A deleted pod's sandbox goes, and so does its route at the ToR.
    let ip = lab.ok(&[
        "kubectl",
        "-n",
        "bgp",
        "get",
        "pod",
        "announced-1",
        "-o",
        "jsonpath={.status.podIP}",
    ])?;
    lab.ok(&["kubectl", "-n", "bgp", "delete", "pod", "announced-1"])?;
    wait_until("the deleted pod's route to leave the ToR", WAIT, || {
        Ok(!lab
            .ok(&["tor", "--", "birdc", "show", "route"])?
            .contains(&format!("{ip}/32")))
    })?;
    // The emulator deletes a pod at once; the kubelet tears its sandbox down after.
    wait_until("exec into the deleted pod to fail", WAIT, || {
        Ok(!lab
            .run(&["exec", "bgp/announced-1", "--", "true"])?
            .status
            .success())
    })?;

    // `status` names a component that died, and why.
    let state = lab.state()?;
    let (pid, start) = state
        .process("node1-daemon")
        .context("node1-daemon in the state")?;
    ensure!(process::stop(pid, start, Duration::from_secs(5)) || !process::alive(pid, start));
    let broken = lab.run(&["status"])?;
    let text = String::from_utf8_lossy(&broken.stdout);
    ensure!(
        !broken.status.success(),
        "status must fail when a daemon is down:\n{text}"
    );
    ensure!(
        text.lines()
            .any(|l| l.contains("node1-daemon") && l.contains("FAIL") && l.contains("not running")),
        "{text}"
    );

    lab.down_and_check_clean(&state)?;
    not_up(&lab, &["status"])?;
    Ok(())
}

#[test]
fn an_frr_tor_learns_the_routes() -> Result<()> {
    let lab = Lab::new("f");
    let out = lab.up(&["--tor", "frr", "--nodes", "1"])?;
    ensure!(
        out.contains("checks as expected") && !out.contains("FAIL"),
        "the matrix is not green:\n{out}"
    );
    let routes = lab.ok(&["tor", "--", "vtysh", "-c", "show ip route bgp"])?;
    ensure!(routes.contains("10.17.0.100/32"), "{routes}");
    let state = lab.state()?;
    lab.down_and_check_clean(&state)
}

#[test]
fn down_undoes_an_up_that_was_killed_halfway() -> Result<()> {
    let lab = Lab::new("k");
    let bins = Path::new(Lab::bin())
        .parent()
        .context("the binary's directory")?
        .to_string_lossy()
        .into_owned();
    let mut up = lab
        .command(&["up", "--no-install", "--bin-dir", &bins])
        .stdout(std::process::Stdio::null())
        .spawn()?;
    // Killed once the control plane runs and the nodes are being made.
    let state_file = lab.dir.path().join(&lab.name).join("state.json");
    wait_until("up to start the controller", WAIT, || {
        Ok(LabState::load(&state_file)
            .ok()
            .flatten()
            .is_some_and(|s| s.process("controller").is_some()))
    })?;
    up.kill()?;
    up.wait()?;
    let state = lab.state()?;
    ensure!(!state.up_finished);
    ensure!(!lab.namespaces()?.is_empty(), "the killed up had made namespaces");
    lab.down_and_check_clean(&state)
}

/// A pod as kubectl lists it: `namespace/name`, uid, node, first container's ID.
struct ListedPod {
    key: String,
    uid: String,
    node: String,
    container_id: String,
}

fn listed_pods(lab: &Lab) -> Result<Vec<ListedPod>> {
    let text = lab.ok(&[
        "kubectl",
        "get",
        "pods",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.metadata.uid} {.spec.nodeName} {.status.containerStatuses[0].containerID}{\"\\n\"}{end}",
    ])?;
    text.lines()
        .map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            ensure!(f.len() == 4, "kubectl's line {line:?}");
            Ok(ListedPod {
                key: f[0].into(),
                uid: f[1].into(),
                node: f[2].into(),
                container_id: f[3].into(),
            })
        })
        .collect()
}

/// Mount points under `dir`, from this process's mountinfo.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    kube_ovn_lab::cluster::containerd::parse_mountinfo(&text)
        .into_iter()
        .map(|m| m.path)
        .filter(|p| p.starts_with(dir))
        .collect()
}

#[test]
fn with_containerd_pods_are_real_sandboxes_and_down_leaves_nothing() -> Result<()> {
    use kube_ovn_lab::runtime::cri::{CriClient, LABEL_POD_UID, api, sandbox_netns};

    let lab = Lab::new("c");
    let out = lab.up(&["--runtime", "containerd", "--nodes", "2"])?;
    println!("{out}");
    ensure!(
        out.contains("checks as expected") && !out.contains("FAIL"),
        "the matrix is not green:\n{out}"
    );
    let status = lab.ok(&["status"])?;
    for node in ["node1", "node2"] {
        ensure!(
            status.lines().any(|l| l.contains(&format!("{node}-containerd"))
                && l.contains("ok")
                && l.contains("ready (containerd")),
            "status names no ready containerd on {node}:\n{status}"
        );
    }
    let lab_dir = lab.dir.path().join(&lab.name);
    let socket = |node: &str| {
        lab_dir
            .join("nodes")
            .join(node)
            .join("containerd/containerd.sock")
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let cri = |node: &str| rt.block_on(CriClient::connect(&socket(node)));

    // Every pod is a ready containerd sandbox on its node (its uid in the sandbox's labels),
    // with its netexec server a running container whose ID the pod's status reports.
    let pods = listed_pods(&lab)?;
    ensure!(pods.len() >= 9, "the examples' pods: {}", pods.len());
    let mut shims = Vec::new();
    for pod in &pods {
        let client = cri(&pod.node)?;
        let sandboxes = rt.block_on(client.list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &pod.uid)]))?;
        ensure!(
            sandboxes.len() == 1 && sandboxes[0].state == i32::from(api::PodSandboxState::SandboxReady),
            "{}: sandboxes {sandboxes:?}",
            pod.key
        );
        let containers = rt.block_on(client.list_containers(&sandboxes[0].id))?;
        ensure!(
            containers.len() == 1
                && containers[0].state == i32::from(api::ContainerState::ContainerRunning)
                && pod.container_id == format!("containerd://{}", containers[0].id),
            "{}: status says {}, containerd has {containers:?}",
            pod.key,
            pod.container_id
        );
    }
    for node in ["node1", "node2"] {
        let instance = kube_ovn_lab::runtime::containerd::Instance::new(
            lab_dir.join("nodes").join(node).join("containerd"),
            kube_ovn_lab::runtime::containerd::CniDirs {
                bin_dir: PathBuf::new(),
                conf_dir: PathBuf::new(),
            },
        );
        for pid in instance.shim_pids() {
            shims.push((pid, process::start_time(pid).map_err(anyhow::Error::msg)?));
        }
    }
    ensure!(!shims.is_empty(), "no containerd shim runs");

    // `exec` enters the sandbox's namespace, where the server listening is the container's
    // process, not the agent's.
    let addr = lab.ok(&["exec", "bgp/fixed", "--", "ip", "-br", "addr", "show", "eth0"])?;
    ensure!(addr.contains("10.17.0.100/16"), "{addr}");
    let listening = lab.ok(&["exec", "bgp/fixed", "--", "ss", "-Hltnp"])?;
    let state = lab.state()?;
    let (agent, _) = state.process("agent").context("the agent in the state")?;
    ensure!(
        listening.contains("kube-ovn-lab") && !listening.contains(&format!("pid={agent},")),
        "the pod's listener is not a container's: {listening}"
    );

    // `kubectl delete pod`: the kubelet stops and removes the sandbox; its namespace goes.
    let gone = pods
        .iter()
        .find(|p| p.key == "bgp/announced-1")
        .context("bgp/announced-1")?;
    let client = cri(&gone.node)?;
    let sandbox = rt.block_on(client.list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &gone.uid)]))?;
    let netns = sandbox_netns(&rt.block_on(client.pod_sandbox_status(&sandbox[0].id))?)?;
    ensure!(netns.starts_with(&lab_dir), "{}", netns.display());
    ensure!(mounts_under(&lab_dir).contains(&netns));
    lab.ok(&["kubectl", "-n", "bgp", "delete", "pod", "announced-1"])?;
    wait_until("the deleted pod's sandbox to go", WAIT, || {
        Ok(rt
            .block_on(client.list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &gone.uid)]))?
            .is_empty())
    })?;
    ensure!(
        !mounts_under(&lab_dir).contains(&netns),
        "{} is still mounted",
        netns.display()
    );

    // The agent restarted, the records of two pods lost: the sandbox whose pod went meanwhile
    // is removed (only containerd's list names it), the other adopted (the same sandbox and
    // container), not made again.
    let state = lab.state()?;
    let (pid, start) = state.process("agent").context("the agent in the state")?;
    let argv: Vec<String> = std::fs::read_to_string(format!("/proc/{pid}/cmdline"))?
        .split('\0')
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    ensure!(argv.contains(&"--runtime=containerd".to_owned()), "{argv:?}");
    ensure!(
        !process::stop(pid, start, Duration::from_secs(5)),
        "the agent obeys SIGTERM"
    );
    let orphan = pods
        .iter()
        .find(|p| p.key == "bgp/announced-2")
        .context("bgp/announced-2")?;
    lab.ok(&["kubectl", "-n", "bgp", "delete", "pod", "announced-2"])?;
    let kept = pods
        .iter()
        .find(|p| p.key == "demo/web-1")
        .context("demo/web-1")?;
    let records = lab_dir.join("sandboxes");
    for entry in std::fs::read_dir(&records)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with("demo_web-1_") || name.starts_with("bgp_announced-2_") {
            std::fs::remove_file(path)?;
        }
    }
    let kept_sandbox =
        rt.block_on(cri(&kept.node)?.list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &kept.uid)]))?;
    let launch = process::Launch {
        component: "agent".into(),
        enter: process::Enter::NetOnly(format!("kl_{}_cp", lab.name)),
        program: argv[0].clone().into(),
        args: argv[1..].to_vec(),
        env: vec![],
        log: lab_dir.join("logs/agent.log"),
    };
    let (pid, start_time) = process::spawn(&launch)?;
    let mut state = lab.state()?;
    state.made.push(kube_ovn_lab::cluster::state::Made::Process {
        component: "agent".into(),
        pid,
        start_time,
    });
    state.save(&lab_dir.join("state.json"))?;
    let orphan_client = cri(&orphan.node)?;
    wait_until("the restarted agent to remove the orphan's sandbox", WAIT, || {
        Ok(rt
            .block_on(orphan_client.list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &orphan.uid)]))?
            .is_empty())
    })?;
    wait_until(
        "the restarted agent to record web-1's sandbox again",
        WAIT,
        || {
            Ok(std::fs::read_dir(&records)?
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("demo_web-1_")))
        },
    )?;
    let after = listed_pods(&lab)?;
    let web = after
        .iter()
        .find(|p| p.key == "demo/web-1")
        .context("demo/web-1")?;
    ensure!(
        web.container_id == kept.container_id,
        "{} became {}",
        kept.container_id,
        web.container_id
    );
    let now = rt.block_on(cri(&kept.node)?.list_pod_sandboxes_labelled(&[(LABEL_POD_UID, &kept.uid)]))?;
    ensure!(
        now.len() == 1 && now[0].id == kept_sandbox[0].id,
        "web-1's sandbox was {:?}, is {now:?}",
        kept_sandbox[0].id
    );
    let answer = lab.ok(&["exec", "demo/web-1", "--", "ip", "-br", "addr", "show", "eth0"])?;
    ensure!(answer.contains("10.16."), "{answer}");

    // `down`: no containerd, shim, sandbox namespace or mount is left.
    let state = lab.state()?;
    lab.down_and_check_clean(&state)?;
    let shims_left: Vec<u32> = shims
        .iter()
        .filter(|(pid, start)| process::alive(*pid, *start))
        .map(|(pid, _)| *pid)
        .collect();
    ensure!(shims_left.is_empty(), "shims left: {shims_left:?}");
    let mounts = mounts_under(&lab_dir);
    ensure!(mounts.is_empty(), "mounts left: {mounts:?}");
    Ok(())
}
