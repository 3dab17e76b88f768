//! The lab with containerd as its runtime (`up --runtime containerd`), end to end: one lab
//! with 2 nodes whose pods are containerd's sandboxes, checked through containerd's CRI
//! (Debian 12 has no crictl), then taken down. Needs root, the packages of
//! `scripts/install-deps.sh` and the other binaries beside `kube-ovn-lab` (as `lab.rs`).

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::lab::Lab;
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::runtime::cri::{CriClient, LABEL_POD_UID, api, sandbox_netns};
use kube_ovn_testkit::wait_until;

const WAIT: Duration = Duration::from_mins(1);

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
    let lab = Lab::new("c");
    let out = lab.up(&["--runtime", "containerd", "--nodes", "2"])?;
    println!("{out}");
    common::lab::matrix_is_green(&out)?;
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

    // The agent restarted, the records of two pods lost: the sandbox whose pod was force-deleted
    // meanwhile
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
    // No kubelet finishes a graceful deletion while the agent is away: the pod is force-deleted
    // (gone from the API at once, as an operator does for a pod of a node that is down).
    lab.ok(&[
        "kubectl",
        "-n",
        "bgp",
        "delete",
        "pod",
        "announced-2",
        "--force",
        "--grace-period=0",
    ])?;
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
