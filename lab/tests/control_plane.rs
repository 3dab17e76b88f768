//! The real control plane the tests run on: etcd shared by the process, a kube-apiserver per
//! test with its own etcd prefix, our CRDs served, ServiceAccount identities, the audit log.

use std::time::Instant;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use kube_ovn_api::crd::Subnet;
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_api_servers_share_etcd_and_see_only_their_own_objects() {
    let started = Instant::now();
    let (a, b) = tokio::join!(ApiServer::start(), ApiServer::start());
    let (a, b) = (a.unwrap(), b.unwrap());
    eprintln!("two API servers with CRDs ready in {:?}", started.elapsed());
    let subnet: Subnet = serde_json::from_value(json!({
        "apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": {"name": "only-in-a"},
        "spec": {"cidrBlock": "10.100.0.0/24", "protocol": "IPv4"}
    }))
    .unwrap();
    let in_a: Api<Subnet> = Api::all(a.client().await.unwrap());
    let in_b: Api<Subnet> = Api::all(b.client().await.unwrap());
    in_a.create(&PostParams::default(), &subnet).await.unwrap();
    assert!(in_a.get_opt("only-in-a").await.unwrap().is_some());
    assert!(in_b.get_opt("only-in-a").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_is_refused_what_rbac_does_not_grant_and_the_audit_log_says_so() {
    let server = ApiServer::start_with(ApiServerOptions::default()).await.unwrap();
    let admin = server.client().await.unwrap();
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(admin.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "tenant"}})).unwrap(),
        )
        .await
        .unwrap();
    let tenant = server.service_account_client("default", "tenant").await.unwrap();
    let err = Api::<Namespace>::all(tenant.clone())
        .list(&kube::api::ListParams::default())
        .await
        .unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 403), "{err}");
    let cm: Api<ConfigMap> = Api::namespaced(tenant, "default");
    assert!(cm.get_opt("x").await.is_err());
    let denials = server.denials();
    let users: Vec<_> = denials
        .iter()
        .map(|d| (d.user.as_str(), d.verb.as_str(), d.resource.as_str()))
        .collect();
    assert!(
        users.contains(&("system:serviceaccount:default:tenant", "list", "/namespaces")),
        "{users:?}"
    );
    assert!(
        users.contains(&("system:serviceaccount:default:tenant", "get", "/configmaps")),
        "{users:?}"
    );
}
