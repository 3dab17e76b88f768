//! The small verbs: `kubectl`, `exec`, `node`, `tor`, `outside`, `cp`, `logs`. Each needs the
//! lab to be up and says so when it is not.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use std::fmt::Write as _;

use anyhow::{Context, bail};
use kube_ovn_lab::apiserver::kubeconfig_for;
use kube_ovn_lab::apiserver::tls::{ServingCert, default_hosts};
use kube_ovn_lab::cluster::components::ovs_env;
use kube_ovn_lab::cluster::process::private_run_prefix;
use kube_ovn_lab::cluster::state::LabState;
use kube_ovn_lab::cluster::topology::{Topology, TorKind};

/// The topology of the running lab `name`, from its state file; an error naming the lab when
/// it is not up.
pub fn topology_of(name: &str, run_dir: &Path) -> anyhow::Result<Topology> {
    Ok(lab(name, run_dir)?.0)
}

pub fn lab(name: &str, run_dir: &Path) -> anyhow::Result<(Topology, LabState)> {
    // Validates the name before it is used in a path.
    let probe = Topology::new(name, 1, TorKind::Bird, run_dir).map_err(anyhow::Error::msg)?;
    let Some(state) = LabState::load(&probe.state_file())? else {
        bail!(
            "lab {name} is not up (no {}); start it with `kube-ovn-lab{} up`",
            probe.state_file().display(),
            if name == "lab" {
                String::new()
            } else {
                format!(" --name {name}")
            }
        );
    };
    let topology = Topology::new(name, state.nodes, state.tor, run_dir).map_err(anyhow::Error::msg)?;
    Ok((topology, state))
}

/// Who talks to the lab's API, and as whom. The components are the ServiceAccounts of
/// `deploy/base/rbac.yaml` (so the emulator, authorizing with RBAC, holds them to exactly the
/// roles a real cluster would give them); the administrator and the lab's own stand-ins for
/// kubelets, scheduler and controller-manager are `system:masters`, as those are on a cluster.
const IDENTITIES: [(&str, &str, &str); 5] = [
    ("admin", "kube-ovn-lab:admin", "system:masters"),
    ("agent", "kube-ovn-lab:agent", "system:masters"),
    (
        "controller",
        "system:serviceaccount:kube-system:kube-ovn-controller",
        "",
    ),
    ("daemon", "system:serviceaccount:kube-system:kube-ovn-cni", ""),
    (
        "speaker",
        "system:serviceaccount:kube-system:kube-ovn-speaker",
        "",
    ),
];

/// The API's serving certificate (made now, so the kubeconfigs can trust it before the emulator
/// runs), a token per identity in the emulator's token file, and a kubeconfig per identity.
pub fn write_kubeconfigs(t: &Topology) -> anyhow::Result<()> {
    let pki = t.cp_dir().join("pki");
    let cert = ServingCert::in_dir(&pki, &default_hosts(Topology::cp_ip().into()))
        .with_context(|| format!("the API's certificate in {}", pki.display()))?;
    let mut tokens = String::new();
    for (component, user, groups) in IDENTITIES {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let _ = writeln!(tokens, "{token},{user},{component},\"{groups}\"");
        let path = if component == "admin" {
            t.admin_kubeconfig()
        } else {
            t.kubeconfig(component)
        };
        let text = kubeconfig_for(Topology::api_addr(), Some(&cert.cert), Some(&token));
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    std::fs::write(token_file(t), tokens)?;
    Ok(())
}

/// The emulator's `--token-auth-file`.
pub fn token_file(t: &Topology) -> PathBuf {
    t.cp_dir().join("tokens.csv")
}

/// The emulator's flags for TLS, tokens and RBAC.
pub fn apiserver_auth_flags(t: &Topology) -> Vec<String> {
    vec![
        format!("--cert-dir={}", t.cp_dir().join("pki").display()),
        format!("--token-auth-file={}", token_file(t).display()),
        "--authorization-mode=RBAC".into(),
    ]
}

fn netns_path(ns: &str) -> PathBuf {
    Path::new("/run/netns").join(ns)
}

/// Runs `program args` in namespace `ns` with the terminal's stdio and returns its exit code.
fn interactive(mut cmd: Command) -> anyhow::Result<ExitCode> {
    let status = cmd.status().with_context(|| format!("running {cmd:?}"))?;
    Ok(ExitCode::from(
        u8::try_from(status.code().unwrap_or(1)).unwrap_or(1),
    ))
}

fn in_netns(ns: &str, command: &[String], env: &[(String, String)]) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        Path::new("/run/netns").join(ns).exists(),
        "network namespace {ns} is gone: is the lab up? (`status`)"
    );
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns]).args(command);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    interactive(cmd)
}

fn kubectl_command(t: &Topology, args: &[impl AsRef<std::ffi::OsStr>]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &t.cp_netns(), "kubectl"])
        .arg(format!("--kubeconfig={}", t.admin_kubeconfig().display()))
        .args(args);
    cmd
}

pub fn kubectl(name: &str, run_dir: &Path, args: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    interactive(kubectl_command(&t, args))
}

/// kubectl's output; an error with its stderr when it fails.
pub fn kubectl_output(t: &Topology, args: &[&str]) -> anyhow::Result<String> {
    let out = kubectl_command(t, args).output().context("running kubectl")?;
    anyhow::ensure!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The network namespace file of pod `namespace/name`, from the kubelet stand-in's records:
/// `/run/netns/<name>` (direct runtime) or containerd's under its state dir.
pub fn pod_netns(t: &Topology, namespace: &str, name: &str) -> anyhow::Result<PathBuf> {
    let dir = kube_ovn_lab::agent::kubelet::sandbox::SandboxDir::open(&t.sandbox_dir())
        .with_context(|| format!("the lab's sandbox records in {}", t.sandbox_dir().display()))?;
    dir.load_for(namespace, name)
        .into_iter()
        .find(kube_ovn_lab::agent::kubelet::SandboxRecord::is_ready)
        .map(|r| r.netns_path())
        .with_context(|| format!("pod {namespace}/{name} has no sandbox in lab {} (is it scheduled and Running? `kubectl get pod -n {namespace} {name} -o wide`)", t.name))
}

pub fn exec_pod(name: &str, run_dir: &Path, pod: &str, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    let (namespace, pod) = pod
        .split_once('/')
        .with_context(|| format!("{pod:?}: give the pod as NAMESPACE/NAME"))?;
    let path = pod_netns(&t, namespace, pod)?;
    if let Ok(ns) = path.strip_prefix("/run/netns") {
        return in_netns(&ns.to_string_lossy(), command, &[]);
    }
    // containerd's, under its state dir: entered by path (in the host's mounts, where it is).
    anyhow::ensure!(
        path.exists(),
        "network namespace {} is gone: is the lab up? (`status`)",
        path.display()
    );
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", path.display()))
        .arg("--")
        .args(command);
    interactive(cmd)
}

pub fn node(name: &str, run_dir: &Path, node: &str, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    let plan = t.node(node).with_context(|| {
        format!(
            "lab {name} has no node {node:?} (nodes: {})",
            t.nodes
                .iter()
                .map(|n| n.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })?;
    in_netns(&plan.netns, command, &ovs_env(&t.node_dir(node)))
}

pub fn cp(name: &str, run_dir: &Path, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    in_netns(&t.cp_netns(), command, &ovs_env(&t.cp_dir()))
}

pub fn outside(name: &str, run_dir: &Path, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    in_netns(&t.outside_netns(), command, &[])
}

/// The ToR's commands run where its daemons run: its namespace with its own `/run`.
pub fn tor_command(t: &Topology, command: &[String]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(private_run_prefix(&t.tor_netns(), &t.tor_run_dir()))
        .args(command);
    cmd
}

pub fn tor(name: &str, run_dir: &Path, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    anyhow::ensure!(
        netns_path(&t.tor_netns()).exists(),
        "the ToR's namespace is gone: is the lab up? (`status`)"
    );
    interactive(tor_command(&t, command))
}

/// The ToR command's output, or its error.
pub fn tor_output(t: &Topology, command: &[String]) -> anyhow::Result<String> {
    let out = tor_command(t, command)
        .output()
        .context("running a command on the ToR")?;
    anyhow::ensure!(
        out.status.success(),
        "{} on the ToR failed: {}",
        command.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn logs(name: &str, run_dir: &Path, component: Option<&str>) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    let Some(component) = component else {
        let mut names: Vec<String> = std::fs::read_dir(t.logs_dir())?
            .filter_map(|e| {
                e.ok()?
                    .file_name()
                    .to_str()?
                    .strip_suffix(".log")
                    .map(str::to_owned)
            })
            .collect();
        names.sort();
        println!("{}", names.join("\n"));
        return Ok(ExitCode::SUCCESS);
    };
    let path = t.log(component);
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "no log for {component:?} in lab {name} ({}); `kube-ovn-lab logs` lists them",
            path.display()
        )
    })?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
