//! `kube-ovn-lab up`: from nothing to a lab with a green connectivity matrix.
//!
//! Order (each step waits for what the next needs, never for a fixed time):
//! 1. packages (the project's install script), binaries, the state file;
//! 2. namespaces and wires (`cluster::net`), recorded before each is made;
//! 3. in the control plane's namespace: upstream etcd, kube-apiserver, kube-controller-manager
//!    and kube-scheduler (started first: the API server takes the longest), OVN NB/SB and
//!    northd; once the API is ready, our CRDs (waited for until served) and
//!    `deploy/base/rbac.yaml`, a ServiceAccount token per component in its kubeconfig, then the
//!    controller and the lab's agent (which registers the nodes and heartbeats them);
//! 4. the nodes: OVS, `br-ul` with the node's address, the daemon, ovn-controller, the speaker;
//! 5. the ToR (its routing daemon, and its OVS for the nodes' VLAN fabric, made meanwhile) and
//!    the outside host;
//! 6. the examples (`kubectl apply`), then the wait for pods and routes, and the matrix.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod, ServiceAccount};
use kube::Api;
use kube::api::ListParams;
use kube_ovn_lab::cluster::components::{self, Binaries};
use kube_ovn_lab::cluster::net::{self, run};
use kube_ovn_lab::cluster::process;
use kube_ovn_lab::cluster::state::{LabState, Made};
use kube_ovn_lab::cluster::topology::Topology;
use kube_ovn_lab::cluster::tor;
use kube_ovn_lab::cluster::wait::{nothing_missing, wait_for};

use super::containerd::RuntimeArg;
use super::prepare;
use super::record::Recorder;
use super::up_args::{InstallArg, UpArgs};

/// Prints a step with the time since `up` began.
struct Clock(Instant);

impl Clock {
    fn step(&self, what: &str) {
        println!("[{:6.2}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

pub fn up(name: &str, run_dir: &Path, args: &UpArgs) -> anyhow::Result<std::process::ExitCode> {
    let clock = Clock(Instant::now());
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "up must run as root (network namespaces, OVS)"
    );
    let topology = Topology::new(name, args.nodes, args.tor.into(), run_dir).map_err(anyhow::Error::msg)?;
    super::raft::check(
        args.nodes,
        args.ovn_central_replicas,
        args.install == InstallArg::Manifests,
    )
    .map_err(anyhow::Error::msg)?;
    if LabState::load(&topology.state_file())?.is_some() {
        bail!(
            "lab {name} is already up, or an earlier `up` of it did not finish: run `kube-ovn-lab --name {name} down` first"
        );
    }
    if !args.no_install {
        prepare::install_packages()?;
    }
    let bins = prepare::binaries(args.bin_dir.as_deref())?;
    prepare::check_programs(&topology)?;
    clock.step("packages and binaries present");

    for dir in [
        topology.logs_dir(),
        topology.cp_dir(),
        topology.tor_dir(),
        topology.sandbox_dir(),
        topology.dir.join("kubeconfig"),
    ] {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    for dir in tor::run_subdirs(&topology) {
        std::fs::create_dir_all(&dir)?;
    }
    if topology.tor_kind == kube_ovn_lab::cluster::topology::TorKind::Frr {
        // FRR's daemons run as user frr and keep their sockets and PID files in /run/frr.
        run(
            "chown",
            &["frr:frr", &topology.tor_run_dir().join("frr").to_string_lossy()],
        )?;
    }
    for node in &topology.nodes {
        std::fs::create_dir_all(topology.node_dir(&node.name))?;
    }
    let state = LabState {
        name: name.to_owned(),
        nodes: args.nodes,
        tor: topology.tor_kind,
        bin_dir: bins.dir.clone(),
        up_finished: false,
        install: args.install.into(),
        made: Vec::new(),
    };
    state.save(&topology.state_file())?;
    let recorder = Recorder::new(state, topology.state_file());
    anyhow::ensure!(
        !(args.runtime == RuntimeArg::Containerd && args.install == InstallArg::Manifests),
        "--runtime containerd is the process mode's (--install processes): with --install manifests (the default) every node runs containerd and a kubelet"
    );
    if args.runtime == RuntimeArg::Containerd || args.install == InstallArg::Manifests {
        super::containerd::prepare(&topology)?;
    }

    for ns in topology.netns_names() {
        recorder.record(Made::Netns { name: ns.clone() })?;
        net::add_netns(&ns)?;
    }
    net::wire_fabric(&topology)?;
    for node in &topology.nodes {
        net::wire_node(&topology, node)?;
    }
    super::verbs::write_control_plane_files(&topology)?;
    clock.step(&format!(
        "namespaces and wires: {}",
        topology.netns_names().join(", ")
    ));

    // Everything from here talks to the API, which lives in the control plane's namespace: run
    // it on a thread in that namespace (its runtime's threads are born there too).
    let cp = kube_ovn_dataplane::Netns::open(Path::new("/run/netns").join(topology.cp_netns()))?;
    // The images are built here, in the host's namespaces: debootstrap and apt need the
    // mirror, which the lab's namespaces cannot reach.
    let images = if args.install == InstallArg::Manifests {
        let images = super::install::build_images(&topology, &bins)?;
        clock.step("images: pause, netexec, kube-ovn-rs (cached by content)");
        images
    } else {
        Vec::new()
    };
    let healthy = cp.run(|| -> anyhow::Result<bool> {
        let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        rt.block_on(bring_up(&topology, &bins, &recorder, args, &images, &clock))
    })??;
    recorder.finish()?;
    clock.step(if healthy {
        "the lab is up"
    } else {
        "the lab is up, but the matrix has failures (above)"
    });
    println!(
        "\nTry: kube-ovn-lab{} kubectl get pods -A -o wide   |   kube-ovn-lab{} tor -- {}   |   kube-ovn-lab{} down",
        name_flag(name),
        name_flag(name),
        tor::shell_words(&tor::routes_command(topology.tor_kind)),
        name_flag(name)
    );
    Ok(if healthy {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}

fn name_flag(name: &str) -> String {
    if name == "lab" {
        String::new()
    } else {
        format!(" --name {name}")
    }
}

async fn bring_up(
    t: &Topology,
    bins: &Binaries,
    rec: &Recorder,
    args: &UpArgs,
    images: &[PathBuf],
    clock: &Clock,
) -> anyhow::Result<bool> {
    let timeout = args.timeout;
    // The ToR first: it only needs the fabric, and a speaker that finds it listening establishes
    // its session at once instead of after its connect-retry timer.
    let (files, launches) = tor::plan(t);
    for (path, text) in files {
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    for launch in &launches {
        rec.start(launch)?;
    }
    // The VLAN fabric needs only the wires: it is made while the control plane starts.
    let vlan_fabric = tokio::spawn(super::vlan_fabric::start(t.clone(), rec.clone(), timeout));
    rec.start(&components::outside_server(t, bins))?;
    // Kubernetes first: kube-apiserver's start-up is the longest wait of the control plane, and
    // OVN's databases come up meanwhile. Each waits for what it needs by itself (kube-apiserver
    // retries etcd; the controller manager and the scheduler retry the API).
    let kubernetes = components::kubernetes(t, &[]);
    let mut apiserver = None;
    for launch in &kubernetes {
        let started = rec.start(launch)?;
        if launch.component == "kube-apiserver" {
            apiserver = Some((launch.clone(), started));
        }
    }
    let (apiserver, apiserver_started) = apiserver.context("no kube-apiserver in the plan")?;
    if args.install == InstallArg::Processes {
        super::processes::ovn_central(t, rec, timeout).await?;
    }
    let client = kube_ovn_support::kube_client(Some(&t.admin_kubeconfig())).await?;
    kube_ovn_lab::kubernetes::lab::wait_ready(&client, timeout, || {
        if process::alive(apiserver_started.0, apiserver_started.1) {
            Ok(())
        } else {
            Err(format!(
                "kube-apiserver exited; its log ends:\n{}",
                process::log_tail(&apiserver.log, 15)
            ))
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    clock.step(if args.install == InstallArg::Processes {
        "control plane: etcd, kube-apiserver (ready), kube-controller-manager, kube-scheduler, OVN NB/SB + northd"
    } else {
        "control plane: etcd, kube-apiserver (ready), kube-controller-manager, kube-scheduler"
    });
    match args.install {
        InstallArg::Processes => {
            super::processes::start(t, bins, rec, &client, args, &|s| clock.step(s)).await?;
        }
        InstallArg::Manifests => {
            let manifests = args
                .manifests
                .clone()
                .or_else(|| prepare::workspace().map(|w| w.join("deploy/overlays/lab")))
                .context("--install manifests: no --manifests given and no repository beside this binary")?;
            super::install::install(
                t,
                rec,
                &client,
                images,
                &super::install::Manifests {
                    dir: &manifests,
                    ovn_central_replicas: args.ovn_central_replicas,
                },
                timeout,
                &|s| clock.step(s),
            )
            .await?;
            // The LoadBalancer IP allocator only: the nodes have real kubelets.
            let mut agent = components::agent(t, bins, t.dir.parent().unwrap_or(Path::new("/")));
            agent.args.push("--no-kubelets".into());
            rec.start(&agent)?;
        }
    }
    wait_nodes_ready(t, &client, timeout).await?;
    clock.step("nodes Ready with chassis and join addresses");
    vlan_fabric.await??;
    clock.step(&format!(
        "the ToR's VLAN fabric: {}",
        kube_ovn_lab::cluster::tor_vlan::summary()
    ));

    let examples = args
        .examples
        .clone()
        .or_else(|| prepare::workspace().map(|w| w.join("examples/lab")));
    if let Some(dir) = examples.filter(|_| !args.no_examples) {
        // kube-controller-manager's ServiceAccount controller at work (it makes every
        // namespace's `default` account, which pods need): then the examples' new namespaces
        // get theirs within moments.
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
        wait_for(
            "kube-controller-manager to make ServiceAccount default/default",
            timeout,
            Duration::from_millis(50),
            || {
                let accounts = accounts.clone();
                async move { accounts.get_opt("default").await.map(|a| a.is_some()) }
            },
        )
        .await?;
        clock.step("kube-controller-manager running (ServiceAccount default/default made)");
        label_gateway_nodes(t)?;
        let out = apply_examples(t, &dir, timeout).await?;
        print!("{out}");
        clock.step(&format!("applied {}", dir.display()));
    }
    wait_pods_running(&client, timeout).await?;
    clock.step("every pod Running");
    let report = super::matrix::measure(t, &client, timeout).await?;
    println!("{}", super::status::overview(t, &client).await?);
    println!("{}", report.render());
    // A refused request is a permission deploy/base/rbac.yaml lacks: the lab is not healthy.
    let refused = super::status::denials(t);
    if refused.is_empty() {
        println!(
            "RBAC: no request of any component was refused (they run as deploy/base/rbac.yaml's ServiceAccounts)"
        );
    } else {
        println!("RBAC: requests REFUSED (deploy/base/rbac.yaml lacks them):");
        for d in &refused {
            println!("  {d}");
        }
    }
    Ok(report.healthy() && refused.is_empty())
}

/// `kubectl apply -R -f dir`, again while a pod is refused because its namespace's `default`
/// ServiceAccount is not there yet: the ServiceAccount admission plugin refuses pods until
/// kube-controller-manager made it, moments after the namespace (applied in the same run).
/// The underlay example (`40-underlay.yaml`) goes with the rest: its pods wait, in
/// ContainerCreating, for the ProviderNetwork to be ready on their node and its Vlan to be
/// accepted, as on a cluster where a user applies Kube-OVN's underlay guide in one go.
async fn apply_examples(t: &Topology, dir: &Path, timeout: Duration) -> anyhow::Result<String> {
    let dir = dir.to_string_lossy();
    let args = ["apply", "-R", "-f", &dir];
    let deadline = Instant::now() + timeout;
    loop {
        match super::verbs::kubectl_output(t, &args) {
            Ok(out) => return Ok(out),
            Err(e)
                if e.to_string().contains("serviceaccount \"default\" not found")
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// What Kube-OVN's OVN EIP guide has an administrator do before a VPC gets `enableExternal`
/// (`50-external.yaml`): mark the nodes that may hold VPCs' gateway ports. Every lab node may.
fn label_gateway_nodes(t: &Topology) -> anyhow::Result<()> {
    let label = format!("{}=true", kube_ovn_api::annotations::keys::EXTERNAL_GW_LABEL);
    let mut args = vec!["label", "node"];
    args.extend(t.nodes.iter().map(|n| n.name.as_str()));
    args.extend([label.as_str(), "--overwrite"]);
    super::verbs::kubectl_output(t, &args)?;
    Ok(())
}

async fn wait_nodes_ready(t: &Topology, client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = t.nodes.iter().map(|n| n.name.clone()).collect();
    wait_for(
        "every node Ready, with its chassis and join address",
        timeout,
        Duration::from_millis(50),
        || {
            let (api, names) = (api.clone(), names.clone());
            async move {
                let nodes = api.list(&ListParams::default()).await?;
                let missing: Vec<String> = names
                    .iter()
                    .filter(|name| {
                        !nodes.items.iter().any(|n| {
                            n.metadata.name.as_deref() == Some(name.as_str()) && {
                                let ann = n.metadata.annotations.clone().unwrap_or_default();
                                ann.contains_key("ovn.kubernetes.io/chassis")
                                    && ann.contains_key("ovn.kubernetes.io/ip_address")
                            }
                        })
                    })
                    .cloned()
                    .collect();
                nothing_missing(&missing).map_err(anyhow::Error::msg)
            }
        },
    )
    .await?;
    Ok(())
}

async fn wait_pods_running(client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::all(client.clone());
    wait_for("every pod Running", timeout, Duration::from_millis(100), || {
        let api = api.clone();
        async move {
            let pods = api.list(&ListParams::default()).await?;
            let waiting: Vec<String> = pods
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running"))
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or(""),
                        p.metadata.name.as_deref().unwrap_or("")
                    )
                })
                .collect();
            if waiting.is_empty() {
                Ok(true)
            } else {
                Err(anyhow::anyhow!("not Running: {}", waiting.join(", ")))
            }
        }
    })
    .await?;
    // Deployments make their pods after the apply: all of them ready, or the matrix would
    // probe a Service whose backends are still coming.
    let deployments: Api<Deployment> = Api::all(client.clone());
    wait_for(
        "every Deployment ready",
        timeout,
        Duration::from_millis(100),
        || {
            let deployments = deployments.clone();
            async move {
                let waiting: Vec<String> = deployments
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .filter(|d| {
                        let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                        d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0) != want
                    })
                    .filter_map(|d| d.metadata.name.clone())
                    .collect();
                if waiting.is_empty() {
                    Ok(true)
                } else {
                    Err(anyhow::anyhow!("not ready: {}", waiting.join(", ")))
                }
            }
        },
    )
    .await?;
    Ok(())
}
