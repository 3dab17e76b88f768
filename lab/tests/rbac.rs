//! RBAC in the API emulator, through the real `kube-ovn-lab apiserver` process with
//! `--token-auth-file` and `--authorization-mode=RBAC`: the real kube client and kubectl, each
//! with a ServiceAccount's token, are allowed what a ClusterRole and a namespaced Role grant and
//! refused the rest with Kubernetes' 403; an unknown token is a 401; `system:masters` may do
//! anything; the denials and the allowed requests are served at `/debug/authorization/*`.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use common::LabProcess;
use common::kubectl::Kubectl;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const ADMIN: &str = "admin-token-0001";
const CNI: &str = "cni-token-0002";
const SPEAKER: &str = "speaker-token-0003";

/// The ClusterRole of a node daemon and a namespaced Role of the speaker, as `deploy/` writes
/// them, in miniature.
const POLICY: &str = r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:kube-ovn-cni"}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [list, watch]
- apiGroups: [""]
  resources: [nodes]
  verbs: [list, watch, patch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: kube-ovn-cni}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:kube-ovn-cni"}
subjects:
- {kind: ServiceAccount, name: kube-ovn-cni, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: kube-ovn-speaker, namespace: kube-system}
rules:
- apiGroups: [""]
  resources: [secrets]
  resourceNames: [tor-md5]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: kube-ovn-speaker, namespace: kube-system}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: kube-ovn-speaker}
subjects:
- {kind: ServiceAccount, name: kube-ovn-speaker, namespace: kube-system}
"#;

fn start(dir: &std::path::Path) -> LabProcess {
    let tokens = dir.join("tokens.csv");
    std::fs::write(
        &tokens,
        format!(
            "{ADMIN},kubernetes-admin,0,\"system:masters\"\n\
             {CNI},system:serviceaccount:kube-system:kube-ovn-cni,1\n\
             {SPEAKER},system:serviceaccount:kube-system:kube-ovn-speaker,2\n"
        ),
    )
    .unwrap();
    LabProcess::start(
        dir,
        &[
            "--token-auth-file".into(),
            tokens.display().to_string(),
            "--authorization-mode".into(),
            "RBAC".into(),
            "--kubeconfig-token".into(),
            ADMIN.into(),
            // kubectl sends tokens only over TLS.
            "--cert-dir".into(),
            dir.join("pki").display().to_string(),
        ],
    )
    .expect("starting kube-ovn-lab apiserver")
}

fn kubeconfig(lab: &LabProcess, token: Option<&str>) -> String {
    let ca = lab.kubeconfig.with_file_name("pki").join("apiserver.crt");
    kube_ovn_lab::apiserver::kubeconfig_for(lab.addr, Some(&ca), token)
}

/// A kube client over HTTPS authenticating with `token` (anonymous without), built from a
/// kubeconfig as a component's would be.
async fn client(lab: &LabProcess, token: Option<&str>) -> kube::Client {
    let text = kubeconfig(lab, token);
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    kube::Client::try_from(config).unwrap()
}

#[track_caller]
fn assert_forbidden<T: std::fmt::Debug>(r: Result<T, kube::Error>, message: &str) {
    match r {
        Err(kube::Error::Api(s)) => {
            assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"), "{s:?}");
            assert_eq!(s.message, message);
        }
        other => panic!("expected 403, got {other:?}"),
    }
}

/// A debug path, asked anonymously: anyone may read them.
async fn debug(lab: &LabProcess, path: &str) -> Value {
    let request = axum::http::Request::get(path).body(Vec::new()).unwrap();
    client(lab, None)
        .await
        .request::<Value>(request)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

#[tokio::test]
async fn service_accounts_get_what_their_roles_grant_and_a_403_for_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let lab = start(dir.path());
    let admin = Kubectl::new(&lab.kubeconfig, &dir.path().join("cache-admin"));
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    admin.run(&["apply", "-f", policy.to_str().unwrap()]);
    admin.run(&[
        "-n",
        "kube-system",
        "create",
        "secret",
        "generic",
        "tor-md5",
        "--from-literal=password=s3cret",
    ]);
    admin.run(&[
        "-n",
        "kube-system",
        "create",
        "secret",
        "generic",
        "other",
        "--from-literal=k=v",
    ]);

    // The daemon's identity: lists and watches pods, patches nodes, nothing else.
    let cni = client(&lab, Some(CNI)).await;
    let pods: Api<Pod> = Api::all(cni.clone());
    pods.list(&ListParams::default().fields("spec.nodeName=node1"))
        .await
        .expect("list pods is granted");
    let cms: Api<ConfigMap> = Api::namespaced(cni.clone(), "default");
    assert_forbidden(
        cms.create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "x"}})).unwrap(),
        )
        .await,
        "configmaps is forbidden: User \"system:serviceaccount:kube-system:kube-ovn-cni\" cannot create \
         resource \"configmaps\" in API group \"\" in the namespace \"default\"",
    );
    let pods_ns: Api<Pod> = Api::namespaced(cni.clone(), "default");
    assert_forbidden(
        pods_ns
            .patch(
                "p1",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
            )
            .await,
        "pods \"p1\" is forbidden: User \"system:serviceaccount:kube-system:kube-ovn-cni\" cannot patch \
         resource \"pods\" in API group \"\" in the namespace \"default\"",
    );

    // The speaker's identity: the one Secret its Role names, in kube-system only.
    let speaker = client(&lab, Some(SPEAKER)).await;
    let secrets: Api<Secret> = Api::namespaced(speaker.clone(), "kube-system");
    let md5 = secrets.get("tor-md5").await.expect("the named secret is granted");
    assert!(md5.data.unwrap().contains_key("password"));
    assert_forbidden(
        secrets.get("other").await,
        "secrets \"other\" is forbidden: User \"system:serviceaccount:kube-system:kube-ovn-speaker\" cannot \
         get resource \"secrets\" in API group \"\" in the namespace \"kube-system\"",
    );
    assert_forbidden(
        secrets.list(&ListParams::default()).await,
        "secrets is forbidden: User \"system:serviceaccount:kube-system:kube-ovn-speaker\" cannot list \
         resource \"secrets\" in API group \"\" in the namespace \"kube-system\"",
    );

    // kubectl with the daemon's token: discovery works (bootstrap policy), the rest as granted.
    let cni_kubeconfig = dir.path().join("cni.kubeconfig");
    std::fs::write(&cni_kubeconfig, kubeconfig(&lab, Some(CNI))).unwrap();
    let as_cni = Kubectl::new(&cni_kubeconfig, &dir.path().join("cache-cni"));
    as_cni.run(&["get", "pods", "--all-namespaces"]);
    as_cni.run(&["get", "nodes"]);
    let refused = as_cni.fail(&["-n", "kube-system", "get", "secrets"]);
    assert!(
        refused.contains(
            "Error from server (Forbidden): secrets is forbidden: User \
             \"system:serviceaccount:kube-system:kube-ovn-cni\" cannot list resource \"secrets\" in API group \"\" \
             in the namespace \"kube-system\""
        ),
        "{refused}"
    );
    let refused = as_cni.fail(&["delete", "node", "node1"]);
    assert!(refused.contains("cannot delete resource \"nodes\""), "{refused}");

    // An unknown token is not anonymous: 401.
    let stranger = client(&lab, Some("no-such-token")).await;
    match Api::<Pod>::all(stranger).list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized")),
        other => panic!("expected 401, got {other:?}"),
    }
    // No token at all: anonymous, who may read the version and nothing else.
    let anonymous = client(&lab, None).await;
    anonymous.apiserver_version().await.expect("/version is public");
    assert_forbidden(
        Api::<Pod>::all(anonymous).list(&ListParams::default()).await,
        "pods is forbidden: User \"system:anonymous\" cannot list resource \"pods\" in API group \"\" at the \
         cluster scope",
    );

    // What was refused, and what each identity did.
    let denials = debug(&lab, "/debug/authorization/denials").await;
    let denied: Vec<(String, String, String)> = denials
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["user"].as_str().unwrap().rsplit(':').next().unwrap().to_owned(),
                d["verb"].as_str().unwrap().to_owned(),
                d["resource"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for want in [
        ("kube-ovn-cni", "create", "configmaps"),
        ("kube-ovn-cni", "patch", "pods"),
        ("kube-ovn-speaker", "get", "secrets"),
        ("kube-ovn-speaker", "list", "secrets"),
        ("kube-ovn-cni", "delete", "nodes"),
        ("anonymous", "list", "pods"),
    ] {
        let want = (want.0.to_owned(), want.1.to_owned(), want.2.to_owned());
        assert!(
            denied.contains(&want),
            "{want:?} not among the denials {denied:?}"
        );
    }
    let requests = debug(&lab, "/debug/authorization/requests").await;
    let cni_user = "system:serviceaccount:kube-system:kube-ovn-cni";
    let cni_did: Vec<(&str, &str)> = requests
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["user"] == cni_user && r.get("resource").is_some())
        .map(|r| (r["verb"].as_str().unwrap(), r["resource"].as_str().unwrap()))
        .collect();
    assert_eq!(cni_did, [("list", "nodes"), ("list", "pods")], "{requests:#}");
    assert!(
        requests
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["user"] == "kubernetes-admin"
                && r["verb"] == "create"
                && r["resource"] == "clusterroles"),
        "the admin's apply is recorded: {requests:#}"
    );
}
