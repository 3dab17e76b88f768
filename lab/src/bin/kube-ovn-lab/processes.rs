//! `up` in its process mode (`--install processes`): OVN central, the controller,
//! every node's OVS, daemon, ovn-controller and speaker run as lab processes with the flags an
//! operator would give them; the agent's kubelet stand-ins make the pods (directly, or through
//! containerd with `--runtime containerd`). Fast to start and to debug; `--install manifests`
//! (`super::install`, the default) runs the same components from `deploy/` on real kubelets.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube_ovn_lab::cluster::components::{self, Binaries, NB_SCHEMA, SB_SCHEMA, VSWITCH_SCHEMA};
use kube_ovn_lab::cluster::net::{self, run};
use kube_ovn_lab::cluster::topology::{NodePlan, Topology};
use kube_ovn_lab::cluster::wait::wait_for;

use super::containerd::RuntimeArg;
use super::record::{Recorder, wait_serving};
use super::up_args::UpArgs;

/// The components' ServiceAccounts and roles, exactly as a real cluster gets them from `deploy/`.
const RBAC: &str = include_str!("../../../../deploy/base/rbac.yaml");

/// OVN's NB and SB databases and northd, in the control plane's namespace.
pub async fn ovn_central(t: &Topology, rec: &Recorder, timeout: Duration) -> anyhow::Result<()> {
    let cp = t.cp_dir();
    for (schema, db) in [(NB_SCHEMA, "ovnnb_db.db"), (SB_SCHEMA, "ovnsb_db.db")] {
        run("ovsdb-tool", &["create", &cp.join(db).to_string_lossy(), schema])?;
    }
    for (launch, (sock, ctl)) in components::ovn_databases(t)
        .iter()
        .zip([("ovnnb_db.sock", "ovn-nbctl"), ("ovnsb_db.sock", "ovn-sbctl")])
    {
        let started = rec.start(launch)?;
        wait_serving(launch, started, cp.join(sock), timeout).await?;
        run(ctl, &[&format!("--db=unix:{}", cp.join(sock).display()), "init"])?;
    }
    rec.start(&components::northd(t))?;
    Ok(())
}

/// The CRDs, RBAC and tokens, the controller, the agent and every node's components.
pub async fn start(
    t: &Topology,
    bins: &Binaries,
    rec: &Recorder,
    client: &kube::Client,
    args: &UpArgs,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let timeout = args.timeout;
    let crds: Vec<CustomResourceDefinition> = kube_ovn_api::crds()
        .into_iter()
        .chain(kube_ovn_api::extension_crds())
        .collect();
    kube_ovn_lab::kubernetes::fixture::install_crds(client, &crds)
        .await
        .context("installing the CRDs")?;
    kube_ovn_lab::manifests::create_all(client, RBAC)
        .await
        .context("creating the ServiceAccounts and roles of deploy/base/rbac.yaml")?;
    super::verbs::write_component_kubeconfigs(t, client).await?;
    step("CRDs served, deploy/base/rbac.yaml applied, a ServiceAccount token per component");
    rec.start(&components::monitor(t, bins))?;
    rec.start(&components::controller(t, bins))?;
    rec.start(&args.runtime.agent(components::agent(
        t,
        bins,
        t.dir.parent().unwrap_or(Path::new("/")),
    )))?;

    // Nodes, side by side.
    let mut tasks = Vec::new();
    for node in t.nodes.clone() {
        let (t, bins, rec, client) = (t.clone(), bins.clone(), rec.clone(), client.clone());
        tasks.push(tokio::spawn(async move {
            start_node(&t, &bins, &rec, &client, &node, timeout).await
        }));
    }
    for task in tasks {
        task.await??;
    }
    step(&format!(
        "{} nodes: OVS, daemon, ovn-controller, speaker",
        t.nodes.len()
    ));
    if args.runtime == RuntimeArg::Containerd {
        super::containerd::start(t, bins, rec, timeout).await?;
        step("containerd on every node, with the pause and netexec images");
    }
    Ok(())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await?
}

async fn start_node(
    t: &Topology,
    bins: &Binaries,
    rec: &Recorder,
    client: &kube::Client,
    node: &NodePlan,
    timeout: Duration,
) -> anyhow::Result<()> {
    let dir = t.node_dir(&node.name);
    let conf = dir.join("conf.db");
    run("ovsdb-tool", &["create", &conf.to_string_lossy(), VSWITCH_SCHEMA])?;
    let ovs = components::node_ovs(t, node);
    let started = rec.start(&ovs[0])?;
    wait_serving(&ovs[0], started, dir.join("db.sock"), timeout).await?;
    let remote = format!("unix:{}", dir.join("db.sock").display());
    run("ovs-vsctl", &[&format!("--db={remote}"), "--no-wait", "init"])?;
    rec.start(&ovs[1])?;
    // ovs-vswitchd applied it when this returns: the bridge and its ports exist, and vswitchd
    // is connected. The same bridge as the tests' OVS nodes (testkit's OvsNode).
    let node_c = node.clone();
    blocking(move || {
        kube_ovn_testkit::add_underlay_bridge(&remote, Duration::from_mins(1), "eth0")?;
        net::address_node(&node_c)?;
        Ok(())
    })
    .await
    .with_context(|| format!("{}: the underlay bridge br-ul", node.name))?;
    // A node's daemon needs its Node, which the node's kubelet (in the agent) registers, as on
    // a real cluster where DaemonSet pods run on registered nodes only.
    let nodes: Api<Node> = Api::all(client.clone());
    wait_for(
        &format!("{} to be registered by its kubelet", node.name),
        timeout,
        Duration::from_millis(20),
        || {
            let (nodes, name) = (nodes.clone(), node.name.clone());
            async move { nodes.get_opt(&name).await.map(|n| n.is_some()) }
        },
    )
    .await?;
    let daemon = components::node_daemon(t, bins, node);
    let started = rec.start(&daemon)?;
    wait_serving(
        &daemon,
        started,
        components::daemon_socket(t, &node.name),
        timeout,
    )
    .await?;
    rec.start(&components::node_ovn_controller(t, node))?;
    rec.start(&components::node_speaker(t, bins, node))?;
    Ok(())
}
