//! `up --install manifests`: kube-ovn-rs installed the way users install it. Each node becomes a
//! machine of its own (`cluster::machine`) running containerd, a real kubelet and kube-proxy; the images are
//! built here and loaded into every node's containerd; then what an administrator does:
//! label the master and the BGP nodes, `kubectl apply -f deploy/crds`, `kubectl apply -k
//! deploy/overlays/lab`. Nothing of ours runs as a lab process in this mode: `ovn-central`,
//! `ovs-ovn`, `kube-ovn-cni`, `kube-ovn-controller` and `kube-ovn-speaker` are pods.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use kube_ovn_lab::cluster::components::Binaries;
use kube_ovn_lab::cluster::process::{self, Launch};
use kube_ovn_lab::cluster::topology::{NodePlan, Topology};
use kube_ovn_lab::cluster::wait::{nothing_missing, wait_for};
use kube_ovn_lab::cluster::{containerd, kube_proxy, kubelet, machine, net};
use kube_ovn_lab::runtime::containerd::{Snapshotter, import};
use kube_ovn_lab::runtime::{component_image, images};

use super::record::{Recorder, wait_serving};

/// The images every node gets, as archives: the pause image, the lab's netexec, ours. Run in
/// the host's namespaces (debootstrap and apt reach the Debian mirror from there only).
pub fn build_images(t: &Topology, bins: &Binaries) -> anyhow::Result<Vec<PathBuf>> {
    let cache = containerd::image_cache(t);
    Ok(vec![
        images::pause_image_archive(&cache)?,
        images::netexec_image_archive(&cache, &bins.path("kube-ovn-lab"))?,
        component_image::component_image_archive(&cache, &bins.dir)?,
    ])
}

/// A node's machine, its containerd with the images, its kubelet and kube-proxy; the
/// kubelet's launch and (PID, start time).
async fn start_node(
    t: &Topology,
    rec: &Recorder,
    node: &NodePlan,
    archives: &[PathBuf],
    timeout: Duration,
) -> anyhow::Result<(Launch, (u32, u64))> {
    let (tc, nc) = (t.clone(), node.clone());
    tokio::task::spawn_blocking(move || {
        net::address_node_on(&nc, "eth0")?;
        machine::create(&tc, &nc)
    })
    .await?
    .with_context(|| format!("{}: making its machine (mount and UTS namespaces)", node.name))?;
    let instance = containerd::instance_in_machine(t, node);
    instance.prepare()?;
    let launch = containerd::launch_in_machine(t, node);
    let started = rec.start(&launch)?;
    wait_serving(&launch, started, instance.socket(), timeout).await?;
    let (socket, archives) = (instance.socket(), archives.to_vec());
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for archive in &archives {
            import(&socket, archive, Snapshotter::Overlayfs)?;
        }
        Ok(())
    })
    .await?
    .with_context(|| format!("{}: loading the images into its containerd", node.name))?;
    machine::create_cgroups(t, &node.name)?;
    let spec = kubelet::spec(t, node);
    std::fs::write(&spec.config_file, spec.config_yaml())
        .with_context(|| format!("writing {}", spec.config_file.display()))?;
    let kubelet = kubelet::launch(t, node);
    let started = rec.start(&kubelet)?;
    let proxy = kube_proxy::config_file(t, node);
    std::fs::write(&proxy, kube_proxy::config_yaml(t, node))
        .with_context(|| format!("writing {}", proxy.display()))?;
    rec.start(&kube_proxy::launch(t, node))?;
    Ok((kubelet, started))
}

/// What `install` applies: the kustomization, and how many `ovn-central` members it gets.
pub struct Manifests<'a> {
    pub dir: &'a Path,
    pub ovn_central_replicas: usize,
}

/// Everything from the running control plane to kube-ovn-rs installed and every node Ready.
pub async fn install(
    t: &Topology,
    rec: &Recorder,
    client: &kube::Client,
    archives: &[PathBuf],
    what: &Manifests<'_>,
    timeout: Duration,
    step: &dyn Fn(&str),
) -> anyhow::Result<()> {
    let (manifests, replicas) = (what.dir, what.ovn_central_replicas);
    kube_ovn_lab::manifests::create_all(
        client,
        kube_ovn_lab::kubernetes::kubelet::APISERVER_KUBELET_BINDING,
    )
    .await
    .context("letting kube-apiserver use the kubelets' API")?;
    let mut tasks = Vec::new();
    for node in t.nodes.clone() {
        let (t, rec, archives) = (t.clone(), rec.clone(), archives.to_vec());
        tasks.push(tokio::spawn(async move {
            start_node(&t, &rec, &node, &archives, timeout).await
        }));
    }
    let mut kubelets = Vec::new();
    for task in tasks {
        kubelets.push(task.await??);
    }
    wait_registered(t, client, &kubelets, timeout).await?;
    step("every node a machine with containerd and a kubelet, registered");
    label_nodes(t, replicas)?;
    let root = manifests
        .ancestors()
        .find(|d| d.join("crds").is_dir())
        .map(|d| d.join("crds"))
        .with_context(|| format!("no crds/ directory above {}", manifests.display()))?;
    super::verbs::kubectl_output(t, &["apply", "--server-side", "-f", &root.to_string_lossy()])?;
    super::verbs::kubectl_output(
        t,
        &[
            "wait",
            "--for=condition=Established",
            "crd",
            "--all",
            &format!("--timeout={}s", timeout.as_secs()),
        ],
    )?;
    // A RAFT cluster: the lab's own kustomization over `manifests` (super::raft).
    let applied = if replicas > 1 {
        super::raft::write_overlay(t, manifests, replicas)?
    } else {
        manifests.to_owned()
    };
    let out = super::verbs::kubectl_output(t, &["apply", "-k", &applied.to_string_lossy()])?;
    print!("{out}");
    step(&format!("applied {} and {}", root.display(), applied.display()));
    wait_workloads(client, timeout).await?;
    step("ovn-central, ovs-ovn, kube-ovn-cni, kube-ovn-controller and kube-ovn-speaker ready");
    if replicas > 1 {
        let leaders = super::raft::wait_leaders(t, replicas, timeout).await?;
        step(&format!("OVN RAFT clusters of {replicas} members: {leaders}"));
    }
    Ok(())
}

/// What an administrator does before installing: the masters (the first `replicas` nodes)
/// run `ovn-central`, every node a speaker (as the process mode's nodes all have one).
fn label_nodes(t: &Topology, replicas: usize) -> anyhow::Result<()> {
    let (key, value) = kubelet::MASTER_LABEL;
    let mut args = vec!["label".to_owned(), "node".into()];
    args.extend(super::raft::members(t, replicas).iter().map(|n| n.name.clone()));
    args.extend([format!("{key}={value}"), "--overwrite".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::verbs::kubectl_output(t, &args)?;
    let (key, value) = kubelet::BGP_LABEL;
    let mut args = vec!["label".to_owned(), "node".into()];
    args.extend(t.nodes.iter().map(|n| n.name.clone()));
    args.extend([format!("{key}={value}"), "--overwrite".into()]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    super::verbs::kubectl_output(t, &args)?;
    Ok(())
}

/// Until every node's Node exists. A kubelet that exited (one refusing its configuration exits
/// at start) is what the timeout's message names, with its log's last lines.
async fn wait_registered(
    t: &Topology,
    client: &kube::Client,
    kubelets: &[(Launch, (u32, u64))],
    timeout: Duration,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let names: Vec<String> = t.nodes.iter().map(|n| n.name.clone()).collect();
    wait_for(
        "every kubelet to register its Node",
        timeout,
        Duration::from_millis(100),
        || {
            let (api, names) = (api.clone(), names.clone());
            async move {
                if let Some((launch, _)) = kubelets
                    .iter()
                    .find(|(_, (pid, start))| !process::alive(*pid, *start))
                {
                    anyhow::bail!(
                        "{} exited; its log ends:\n{}",
                        launch.component,
                        process::log_tail(&launch.log, 10)
                    );
                }
                let nodes = api.list(&ListParams::default()).await?;
                let missing: Vec<String> = names
                    .into_iter()
                    .filter(|n| !nodes.items.iter().any(|x| x.metadata.name.as_ref() == Some(n)))
                    .collect();
                nothing_missing(&missing).map_err(anyhow::Error::msg)
            }
        },
    )
    .await?;
    Ok(())
}

/// Every DaemonSet and Deployment in kube-system rolled out: as many pods ready as wanted.
async fn wait_workloads(client: &kube::Client, timeout: Duration) -> anyhow::Result<()> {
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "kube-system");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "kube-system");
    wait_for(
        "kube-ovn-rs's DaemonSets and Deployments in kube-system to be ready",
        timeout,
        Duration::from_millis(200),
        || {
            let (daemonsets, deployments) = (daemonsets.clone(), deployments.clone());
            async move {
                let mut waiting = Vec::new();
                for ds in daemonsets.list(&ListParams::default()).await?.items {
                    let s = ds.status.unwrap_or_default();
                    if s.desired_number_scheduled == 0 || s.number_ready < s.desired_number_scheduled {
                        waiting.push(format!(
                            "ds/{} {}/{}",
                            ds.metadata.name.unwrap_or_default(),
                            s.number_ready,
                            s.desired_number_scheduled
                        ));
                    }
                }
                for d in deployments.list(&ListParams::default()).await?.items {
                    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                    let ready = d.status.as_ref().and_then(|s| s.ready_replicas).unwrap_or(0);
                    if ready < want {
                        waiting.push(format!(
                            "deploy/{} {ready}/{want}",
                            d.metadata.name.unwrap_or_default()
                        ));
                    }
                }
                nothing_missing(&waiting).map_err(anyhow::Error::msg)
            }
        },
    )
    .await?;
    Ok(())
}
