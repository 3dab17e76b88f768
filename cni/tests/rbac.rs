//! The node daemon with the identity and the RBAC that `deploy/base/rbac.yaml` gives it: the API
//! emulator authorizes with RBAC over HTTPS, the daemon binary authenticates as the
//! ServiceAccount `kube-system/kube-ovn-cni` (and the controller as `kube-ovn-controller`), and a
//! node comes up (chassis annotation, `ovn0`), a pod is added through the shim and deleted. Any
//! call a role does not grant is a 403 the emulator records, and the test fails naming it.

mod common;

use std::collections::BTreeSet;

use anyhow::Result;
use common::{Cluster, Options};
use kube_ovn_lab::apiserver::auth;

const DAEMON: &str = "system:serviceaccount:kube-system:kube-ovn-cni";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_needs_no_permission_its_role_lacks() -> Result<()> {
    let cluster = Cluster::start_with(Options {
        nodes: 1,
        rbac: true,
        ..Options::default()
    })
    .await?;
    cluster.namespace("ns1").await?;
    let pod = cluster.pod("ns1", "p1", 0, &[]).await?;
    let runtime = cluster.nodes[0].runtime.clone();
    let (sandbox, result) = (pod.sandbox.clone(), pod.result.clone());
    tokio::task::spawn_blocking(move || runtime.del(&sandbox, Some(&result))).await??;

    let denials = auth::denials(&cluster.kube).await?;
    assert!(
        denials.is_empty(),
        "refused what deploy/base/rbac.yaml does not grant:\n{}",
        denials
            .iter()
            .map(|d| d["message"].as_str().unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    );
    let made: BTreeSet<(String, String, String)> = auth::requests(&cluster.kube)
        .await?
        .into_iter()
        .filter(|r| r["user"] == DAEMON && r.get("resource").is_some())
        .map(|r| {
            let field = |k: &str| r[k].as_str().unwrap_or_default().to_owned();
            (field("verb"), field("group"), field("resource"))
        })
        .collect();
    for call in [
        ("patch", "", "nodes"),
        ("watch", "", "nodes"),
        ("watch", "", "pods"),
        ("watch", "kubeovn.io", "subnets"),
    ] {
        let call = (call.0.to_owned(), call.1.to_owned(), call.2.to_owned());
        assert!(
            made.contains(&call),
            "{call:?} not among the daemon's calls: {made:?}"
        );
    }
    Ok(())
}
