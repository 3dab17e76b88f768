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

/// Pods are tenants' objects (DESIGN.md, "Trust"): the daemon writes only its own pod's
/// `err_mesg` annotation, so `deploy/base/rbac.yaml` lets it patch pods in its own namespace
/// and nowhere else. A daemon that could patch any pod could rewrite a tenant pod's addresses
/// or subnet, which the controller and the other nodes act on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_patches_pods_of_its_namespace_only() -> Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use kube::Api;
    use kube::api::{Patch, PatchParams, PostParams};
    use serde_json::json;

    let api = kube_ovn_lab::kubernetes::fixture::ApiServer::start().await?;
    let admin = api.client().await?;
    let rbac = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base/rbac.yaml"))?;
    kube_ovn_lab::manifests::create_all(&admin, &rbac).await?;
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "tenant"}}))?;
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let pod = |name: &str| -> Result<Pod> {
        Ok(serde_json::from_value(json!({"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "pause"}]}}))?)
    };
    for (namespace, name) in [("kube-system", "kube-ovn-cni-x1"), ("tenant", "app")] {
        Api::<Pod>::namespaced(admin.clone(), namespace)
            .create(&PostParams::default(), &pod(name)?)
            .await?;
    }
    let daemon = api.service_account_client("kube-system", "kube-ovn-cni").await?;
    let annotate = |namespace: &str, name: &str| {
        let pods: Api<Pod> = Api::namespaced(daemon.clone(), namespace);
        let patch =
            json!({"metadata": {"annotations": {"pn1.provider-network.kubernetes.io/err_mesg": "x"}}});
        let name = name.to_owned();
        async move {
            pods.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
        }
    };
    annotate("kube-system", "kube-ovn-cni-x1")
        .await
        .context("the daemon's own pod's err_mesg")?;
    match annotate("tenant", "app").await {
        Err(kube::Error::Api(s)) if s.code == 403 => {}
        Err(e) => anyhow::bail!("patching a tenant's pod failed otherwise than refused: {e}"),
        Ok(p) => anyhow::bail!("the daemon patched a tenant's pod: {:?}", p.metadata.annotations),
    }
    Ok(())
}
