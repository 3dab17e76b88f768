//! The small verbs: `kubectl` (upstream's, built with the control plane, as the administrator:
//! a client certificate in `system:masters`), `exec`, `node`, `tor`, `outside`, `cp`, `logs`. Each needs the
//! lab to be up and says so when it is not.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, bail};
use kube_ovn_lab::cluster::components::ovs_env;
use kube_ovn_lab::cluster::process::private_run_prefix;
use kube_ovn_lab::cluster::state::{Install, LabState};
use kube_ovn_lab::cluster::topology::{Topology, TorKind};
use kube_ovn_lab::runtime::cri::CriClient;

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

/// The components' ServiceAccounts (`deploy/base/rbac.yaml`'s): each authenticates with a token
/// of its own account, as in its pod, so the real authorizer holds it to exactly its roles.
pub const COMPONENTS: [(&str, &str); 3] = [
    ("controller", "kube-ovn-controller"),
    ("daemon", "kube-ovn-cni"),
    ("speaker", "kube-ovn-speaker"),
];

/// The namespace of the components' ServiceAccounts.
pub const COMPONENTS_NAMESPACE: &str = "kube-system";

/// How long the components' tokens are valid: longer than any lab lives (kube-apiserver issues
/// them with no maximum set; a pod's would be rotated by its kubelet).
pub const TOKEN_VALIDITY: std::time::Duration = std::time::Duration::from_hours(365 * 24);

/// The users whose refused requests `status` and `up` report: the components and the agent.
pub fn watched_users() -> Vec<String> {
    let mut users: Vec<String> = COMPONENTS
        .iter()
        .map(|(_, account)| format!("system:serviceaccount:{COMPONENTS_NAMESPACE}:{account}"))
        .collect();
    users.push(kube_ovn_lab::cluster::topology::AGENT_USER.to_owned());
    users
}

/// The control plane's PKI, kubeconfigs and audit policy (made before any process starts, so
/// every kubeconfig can trust the CA), and the administrator's kubeconfig where the verbs look.
pub fn write_control_plane_files(t: &Topology) -> anyhow::Result<()> {
    let cp = t.control_plane();
    cp.write_files()
        .with_context(|| format!("the control plane's files in {}", cp.dir.display()))?;
    std::fs::copy(cp.kubeconfig("admin"), t.admin_kubeconfig())
        .with_context(|| format!("writing {}", t.admin_kubeconfig().display()))?;
    Ok(())
}

/// A kubeconfig per component with a token of its ServiceAccount (TokenRequest).
pub async fn write_component_kubeconfigs(t: &Topology, admin: &kube::Client) -> anyhow::Result<()> {
    let cp = t.control_plane();
    for (component, account) in COMPONENTS {
        let token = kube_ovn_lab::kubernetes::lab::service_account_token(
            admin,
            COMPONENTS_NAMESPACE,
            account,
            TOKEN_VALIDITY,
        )
        .await
        .with_context(|| format!("a token for ServiceAccount {COMPONENTS_NAMESPACE}/{account}"))?;
        anyhow::ensure!(!token.is_empty(), "an empty token for {account}");
        let text = kube_ovn_lab::kubernetes::kubeconfig(
            &cp.url(),
            &cp.pki().ca_cert(),
            &format!("system:serviceaccount:{COMPONENTS_NAMESPACE}:{account}"),
            &kube_ovn_lab::kubernetes::Credentials::Token(token),
        );
        let path = t.kubeconfig(component);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
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
    cmd.args(["netns", "exec", &t.cp_netns()])
        .arg(kube_ovn_lab::kubernetes::bin_dir().join("kubectl"))
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

/// The network namespace file of pod `namespace/name`. Process mode: from the kubelet
/// stand-in's records (`/run/netns/<name>`, or containerd's under its state dir). Manifests mode:
/// from the containerd of whichever node runs it, through the CRI, as `crictl inspectp` shows it
/// (under the containerd's state dir, in the lab's directory).
pub async fn pod_netns(
    t: &Topology,
    install: Install,
    namespace: &str,
    name: &str,
) -> anyhow::Result<PathBuf> {
    let not_found = || {
        anyhow::anyhow!(
            "pod {namespace}/{name} has no sandbox in lab {} (is it scheduled and Running? `kubectl get pod -n {namespace} {name} -o wide`)",
            t.name
        )
    };
    if install == Install::Processes {
        let dir = kube_ovn_lab::agent::kubelet::sandbox::SandboxDir::open(&t.sandbox_dir())
            .with_context(|| format!("the lab's sandbox records in {}", t.sandbox_dir().display()))?;
        return dir
            .load_for(namespace, name)
            .into_iter()
            .find(kube_ovn_lab::agent::kubelet::SandboxRecord::is_ready)
            .map(|r| r.netns_path())
            .ok_or_else(not_found);
    }
    let labels = [
        ("io.kubernetes.pod.namespace", namespace),
        ("io.kubernetes.pod.name", name),
    ];
    for node in &t.nodes {
        let socket = kube_ovn_lab::cluster::containerd::instance(t, node).socket();
        let Ok(cri) = CriClient::connect(&socket).await else {
            continue;
        };
        for sandbox in cri.list_pod_sandboxes_labelled(&labels).await? {
            if sandbox.state != 0 {
                continue; // SANDBOX_READY is 0
            }
            let status = cri.pod_sandbox_status(&sandbox.id).await?;
            let inside = kube_ovn_lab::runtime::cri::sandbox_netns(&status)?;
            return Ok(kube_ovn_lab::cluster::machine::host_path(
                t,
                node,
                &inside.to_string_lossy(),
            ));
        }
    }
    Err(not_found())
}

pub fn exec_pod(name: &str, run_dir: &Path, pod: &str, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    let (namespace, pod) = pod
        .split_once('/')
        .with_context(|| format!("{pod:?}: give the pod as NAMESPACE/NAME"))?;
    let (_, state) = lab(name, run_dir)?;
    let path = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(pod_netns(&t, state.install, namespace, pod))?;
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
    let (_, state) = lab(name, run_dir)?;
    if state.install == Install::Manifests {
        // The node's machine: its /run/openvswitch, where plain ovs-vsctl looks.
        let mut cmd = Command::new("nsenter");
        cmd.args(kube_ovn_lab::cluster::machine::enter_args(&t, plan))
            .args(command);
        return interactive(cmd);
    }
    in_netns(&plan.netns, command, &ovs_env(&t.node_dir(node)))
}

pub fn cp(name: &str, run_dir: &Path, command: &[String]) -> anyhow::Result<ExitCode> {
    let (t, state) = lab(name, run_dir)?;
    in_netns(&t.cp_netns(), command, &ovn_central_env(&t, state.install))
}

/// Where `ovn-nbctl`/`ovn-sbctl` find the databases: the control plane's directory (process
/// mode), or the sockets of the `ovn-central` pods in the masters' machines (their `/run/ovn`):
/// every node with a database socket, so that with a RAFT cluster (`up
/// --ovn-central-replicas 3`) the tools find the leader among them; the first node otherwise.
pub fn ovn_central_env(t: &Topology, install: Install) -> Vec<(String, String)> {
    if install == Install::Processes {
        return ovs_env(&t.cp_dir());
    }
    let run_dirs: Vec<PathBuf> = t
        .nodes
        .iter()
        .map(|n| kube_ovn_lab::cluster::machine::host_path(t, n, "/run/ovn"))
        .collect();
    let remotes = |socket: &str| {
        let found: Vec<String> = run_dirs
            .iter()
            .map(|d| d.join(socket))
            .filter(|p| p.exists())
            .map(|p| format!("unix:{}", p.display()))
            .collect();
        if found.is_empty() {
            let master = kube_ovn_lab::cluster::kubelet::master(t);
            let run_ovn = kube_ovn_lab::cluster::machine::host_path(t, master, "/run/ovn");
            format!("unix:{}", run_ovn.join(socket).display())
        } else {
            found.join(",")
        }
    };
    vec![
        ("OVN_NB_DB".into(), remotes("ovnnb_db.sock")),
        ("OVN_SB_DB".into(), remotes("ovnsb_db.sock")),
    ]
}

pub fn outside(name: &str, run_dir: &Path, command: &[String]) -> anyhow::Result<ExitCode> {
    let t = topology_of(name, run_dir)?;
    in_netns(&t.outside_netns(), command, &[])
}

/// The ToR's commands run where its daemons run: its namespace with its own `/run`, and the
/// OVS of its VLAN fabric where `ovs-vsctl` looks.
pub fn tor_command(t: &Topology, command: &[String]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(private_run_prefix(&t.tor_netns(), &t.tor_run_dir()))
        .args(command)
        // `ovs-vsctl`, `ovs-appctl` find the VLAN fabric's OVS (`cluster::tor_vlan`).
        .envs(ovs_env(&t.tor_ovs_dir()));
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
