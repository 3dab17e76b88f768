//! The node daemon with the identity and the RBAC that `deploy/base/rbac.yaml` gives it: a real
//! kube-apiserver's RBAC authorizer decides, the daemon binary authenticates as the
//! ServiceAccount `kube-system/kube-ovn-cni` with a token from the TokenRequest API (and the
//! controller as `kube-ovn-controller`), and a node comes up (chassis annotation, `ovn0`), a pod
//! is added through the shim and deleted. Any call a role does not grant is a 403 in the API
//! server's audit log, and the test fails naming it.

mod common;

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use common::{Cluster, Options, WAIT};
use kube_ovn_testkit::wait_until;

const DAEMON: &str = "system:serviceaccount:kube-system:kube-ovn-cni";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_needs_no_permission_its_role_lacks() -> Result<()> {
    let mut cluster = Cluster::start_with(Options {
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

    // kube-apiserver audits a watch when it ends: the daemon is stopped, its watches close.
    // The calls as the audit log names them: `group/resource` (the core group is empty).
    cluster.nodes[0].daemon.stop();
    let expected: BTreeSet<(String, String)> = [
        ("patch", "/nodes"),
        ("watch", "/nodes"),
        ("watch", "/pods"),
        ("watch", "kubeovn.io/subnets"),
        ("watch", "kubeovn.io/provider-networks"),
        ("watch", "kubeovn.io/vlans"),
    ]
    .into_iter()
    .map(|(verb, resource)| (verb.to_owned(), resource.to_owned()))
    .collect();
    let made = || -> BTreeSet<(String, String)> {
        cluster
            .api
            .audited()
            .into_iter()
            .filter(|r| r.user == DAEMON)
            .map(|r| (r.verb, r.resource))
            .collect()
    };
    wait_until("the daemon's calls in the audit log", WAIT, || {
        Ok(made().is_superset(&expected))
    })
    .with_context(|| format!("expected {expected:?} among the daemon's calls {:?}", made()))?;
    // Nothing refused to anyone, the daemon's last calls included.
    let denials = cluster.api.denials();
    assert!(
        denials.is_empty(),
        "refused what deploy/base/rbac.yaml does not grant:\n{}",
        denials
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}
