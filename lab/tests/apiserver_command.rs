//! `kube-ovn-lab apiserver --listen ADDR --kubeconfig-out FILE`: upstream etcd and
//! kube-apiserver as its children; the kubeconfig appears once the API is ready with our CRDs
//! served, authenticates as the administrator, and SIGTERM stops everything (the port closes).

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::time::Duration;

use common::{LabProcess, WAIT};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use kube_ovn_api::crd::Subnet;
use kube_ovn_testkit::wait_until;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_a_real_api_with_our_crds_until_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    // kube-apiserver's own --token-auth-file, passed through.
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, "t0ken-of-alice,alice,u-alice,\"tenants\"\n").unwrap();
    let mut server =
        LabProcess::start(dir.path(), &[format!("--token-auth-file={}", tokens.display())]).unwrap();
    let client = server.client().await.unwrap();
    // Real kube-apiserver: its system namespaces, and a Subnet checked against the CRD's schema
    // (an unknown enum value refused, naming the field).
    let namespaces: Vec<String> = Api::<Namespace>::all(client.clone())
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert!(
        namespaces.iter().any(|n| n == "kube-node-lease"),
        "{namespaces:?}"
    );
    let subnets: Api<Subnet> = Api::all(client.clone());
    let subnet: Subnet = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "s1"},
        "spec": {"cidrBlock": "10.100.0.0/24", "protocol": "IPv4"}
    }))
    .unwrap();
    subnets.create(&PostParams::default(), &subnet).await.unwrap();
    assert!(subnets.get_opt("s1").await.unwrap().is_some());
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.git_version, kube_ovn_lab::kubernetes::version());

    // alice authenticates with her token (a 403 from RBAC, not a 401), and the audit trail is
    // kube-apiserver's: she may not list namespaces.
    let admin = kube::config::Kubeconfig::read_from(&server.kubeconfig).unwrap();
    let ca = admin.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority.clone())
        .expect("the kubeconfig names its CA");
    let alice = kube_ovn_lab::kubernetes::kubeconfig(
        &server.url(),
        std::path::Path::new(&ca),
        "alice",
        &kube_ovn_lab::kubernetes::Credentials::Token("t0ken-of-alice".into()),
    );
    let alice_path = dir.path().join("alice.kubeconfig");
    std::fs::write(&alice_path, alice).unwrap();
    let alice = kube_ovn_support::kube_client(Some(&alice_path)).await.unwrap();
    let err = Api::<Namespace>::all(alice)
        .list(&kube::api::ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403 && s.message.contains("\"alice\"")),
        "{err}"
    );

    let addr = server.addr;
    server.terminate().unwrap();
    wait_until("the API's port to close", WAIT, || {
        Ok(std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err())
    })
    .unwrap();
}
