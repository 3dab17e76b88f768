//! `deploy/` on a real kube-apiserver: `kubectl kustomize` (the kubectl built with the control
//! plane) renders the base, the example overlay and the lab's overlay with every component's
//! objects; the CRDs,
//! then everything rendered, apply (`--dry-run=server`, then for real, then again changing
//! nothing) with strict server-side field validation to an API server of the test with RBAC
//! on; there each component's ServiceAccount is granted its ClusterRole (and its Role in
//! kube-system) and no more, as the server's own authorizer reports it (SelfSubjectRulesReview
//! with the ServiceAccount's token) and as its calls show (`kubectl auth can-i`, the 403s and
//! the audit log). Every flag in a container's args (and every flag variable in its env) parses
//! with the binary's own flag types and passes its validation; the workloads have what their
//! components need. (The CRDs and the custom resources in deploy/ and examples/ are checked on
//! the server in crds_on_kube_apiserver/.)

// A test of several files (`tests/<name>/main.rs`) reaches the shared helpers by path.
#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
#[path = "../common/mod.rs"]
mod common;
mod flags;
mod lab_overlay;
mod rules;

use std::collections::BTreeSet;
use std::path::Path;

use clap::Parser as _;
use common::kubectl::{Kubectl, kustomize, repo};
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use kube::api::{Api, PostParams};
use kube_ovn_lab::kubernetes::fixture::{ApiServer, ApiServerOptions};
use rules::Grant;
use serde_json::Value;

pub(crate) fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("rendered YAML parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

pub(crate) fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// The objects every rendering holds (kind, name).
const COMPONENTS: &[(&str, &str)] = &[
    ("ServiceAccount", "kube-ovn-controller"),
    ("ServiceAccount", "kube-ovn-cni"),
    ("ServiceAccount", "kube-ovn-speaker"),
    ("ClusterRole", "system:kube-ovn-controller"),
    ("ClusterRole", "system:kube-ovn-cni"),
    ("ClusterRole", "system:kube-ovn-speaker"),
    ("ConfigMap", "kube-ovn-config"),
    ("Deployment", "ovn-central"),
    ("Service", "ovn-nb"),
    ("Service", "ovn-sb"),
    ("DaemonSet", "ovs-ovn"),
    ("Deployment", "kube-ovn-controller"),
    ("DaemonSet", "kube-ovn-cni"),
    ("DaemonSet", "kube-ovn-speaker"),
    ("ServiceAccount", "kube-ovn-pinger"),
    ("ClusterRole", "system:kube-ovn-pinger"),
    ("DaemonSet", "kube-ovn-pinger"),
    ("Service", "kube-ovn-pinger"),
];

/// kubectl as the admin of `server`, its discovery cache in `dir`.
fn admin(server: &ApiServer, dir: &Path) -> Kubectl {
    Kubectl::new(&server.admin_kubeconfig(), &dir.join("cache-admin"))
}

/// The CRDs first, then `overlay` rendered: a custom resource cannot be mapped before its CRD
/// is served (the order docs/operations.md gives). Each step is tried by the server first
/// (`--dry-run=server`), then applied; the rendered documents are returned.
fn apply_overlay(admin: &Kubectl, dir: &Path, overlay: &str) -> Vec<Value> {
    let crds = repo().join("deploy/crds");
    let crds = crds.to_str().unwrap();
    admin.run(&["apply", "--validate=strict", "--dry-run=server", "-f", crds]);
    admin.run(&["apply", "--validate=strict", "-f", crds]);
    admin.run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd",
        "--all",
    ]);
    let yaml = kustomize(overlay);
    let rendered = dir.join(format!("{}.yaml", overlay.replace('/', "-")));
    std::fs::write(&rendered, &yaml).unwrap();
    let rendered = rendered.to_str().unwrap();
    let docs = documents(&yaml);
    let tried = admin.run(&["apply", "--validate=strict", "--dry-run=server", "-f", rendered]);
    assert_eq!(
        tried.lines().count(),
        docs.len(),
        "deploy/{overlay}: one line per object tried:\n{tried}"
    );
    let applied = admin.run(&["apply", "--validate=strict", "-f", rendered]);
    assert_eq!(
        applied.lines().count(),
        docs.len(),
        "deploy/{overlay}: one line per object applied:\n{applied}"
    );
    docs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base_and_overlays_render_and_apply_to_a_real_api_server() {
    let (base, example, lab) = tokio::join!(
        ApiServer::start_with(ApiServerOptions::default()),
        ApiServer::start_with(ApiServerOptions::default()),
        ApiServer::start_with(ApiServerOptions::default())
    );
    for (server, overlay) in [
        (base.unwrap(), "base"),
        (example.unwrap(), "overlays/example"),
        (lab.unwrap(), "overlays/lab"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let admin = admin(&server, dir.path());
        let docs = apply_overlay(&admin, dir.path(), overlay);
        let rendered: BTreeSet<(&str, &str)> = docs
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap(),
                    d["metadata"]["name"].as_str().unwrap(),
                )
            })
            .collect();
        for (kind, name) in COMPONENTS {
            assert!(
                rendered.contains(&(kind, name)),
                "deploy/{overlay} renders no {kind} {name}"
            );
        }
        // Everything is there as rendered, in its namespace.
        let ds = admin.get_json(&["-n", "kube-system", "daemonsets"]);
        let names: BTreeSet<&str> = ds["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            BTreeSet::from(["kube-ovn-cni", "kube-ovn-pinger", "kube-ovn-speaker", "ovs-ovn"]),
            "deploy/{overlay}"
        );
        let ctl = admin.get_json(&["-n", "kube-system", "deployment", "kube-ovn-controller"]);
        let want = find(&docs, "Deployment", "kube-ovn-controller");
        assert_eq!(
            ctl["spec"]["template"]["spec"]["containers"][0]["image"],
            want["spec"]["template"]["spec"]["containers"][0]["image"],
            "deploy/{overlay}"
        );
        // Applying again changes nothing.
        let rendered = dir.path().join(format!("{}.yaml", overlay.replace('/', "-")));
        let again = admin.run(&["apply", "--validate=strict", "-f", rendered.to_str().unwrap()]);
        for line in again.lines() {
            assert!(
                line.ends_with(" unchanged"),
                "deploy/{overlay}, applied twice:\n{again}"
            );
        }
    }
}

/// The ServiceAccounts of the components, in kube-system: each is bound to the ClusterRole
/// `system:<name>` and, where rendered, the Role `<name>` in kube-system.
const IDENTITIES: &[&str] = &[
    "kube-ovn-controller",
    "kube-ovn-cni",
    "kube-ovn-speaker",
    "kube-ovn-pinger",
];

/// What `client`'s user may do in `namespace`, by the server's authorizer.
async fn rules_review(client: kube::Client, namespace: &str) -> BTreeSet<Grant> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec {
            namespace: Some(namespace.to_owned()),
        },
        ..SelfSubjectRulesReview::default()
    };
    let made = Api::<SelfSubjectRulesReview>::all(client)
        .create(&PostParams::default(), &review)
        .await
        .expect("a SelfSubjectRulesReview");
    let status = made.status.expect("a rules review has a status");
    assert!(
        !status.incomplete,
        "the rules review is incomplete: {:?}",
        status.evaluation_error
    );
    rules::from_review(&status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_service_account_is_granted_its_roles_and_no_more() {
    let server = ApiServer::start_with(ApiServerOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let admin = admin(&server, dir.path());
    let docs = apply_overlay(&admin, dir.path(), "overlays/example");

    // What any ServiceAccount may do without a binding of ours (discovery, self reviews): a
    // ServiceAccount nothing binds.
    admin.run(&["-n", "kube-system", "create", "serviceaccount", "nobody"]);
    let nobody = server
        .service_account_client("kube-system", "nobody")
        .await
        .unwrap();
    for sa in IDENTITIES {
        let client = server.service_account_client("kube-system", sa).await.unwrap();
        let cluster_role = find(&docs, "ClusterRole", &format!("system:{sa}"));
        let role = docs
            .iter()
            .find(|d| d["kind"] == "Role" && d["metadata"]["name"] == *sa);
        for ns in ["kube-system", "default"] {
            let mut want = rules_review(nobody.clone(), ns).await;
            want.extend(rules::from_role(cluster_role));
            if ns == "kube-system"
                && let Some(role) = role
            {
                want.extend(rules::from_role(role));
            }
            let got = rules_review(client.clone(), ns).await;
            assert_eq!(
                rules::describe(got.difference(&want)),
                "",
                "{sa} in {ns}: granted beyond its roles"
            );
            assert_eq!(
                rules::describe(want.difference(&got)),
                "",
                "{sa} in {ns}: not granted what its roles say"
            );
        }
    }

    // The same, asked the way an operator would, for the calls that matter most.
    let can_i = |sa: &str, args: &[&str]| -> bool {
        let user = format!("--as=system:serviceaccount:kube-system:{sa}");
        let mut all = vec!["auth", "can-i", user.as_str()];
        all.extend_from_slice(args);
        let out = admin.output(&all);
        let answer = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(
            answer == "yes" || answer == "no",
            "kubectl auth can-i {}: {answer} {}",
            all.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        answer == "yes"
    };
    let table: &[(&str, &[&str], bool)] = &[
        (
            "kube-ovn-controller",
            &["patch", "subnets.kubeovn.io", "--subresource=status"],
            true,
        ),
        ("kube-ovn-controller", &["create", "ips.kubeovn.io"], true),
        ("kube-ovn-controller", &["delete", "subnets.kubeovn.io"], false),
        (
            "kube-ovn-controller",
            &["-n", "kube-system", "patch", "lease/kube-ovn-controller"],
            true,
        ),
        (
            "kube-ovn-controller",
            &["-n", "kube-system", "patch", "lease/other"],
            false,
        ),
        (
            "kube-ovn-controller",
            &["-n", "default", "create", "leases"],
            false,
        ),
        (
            "kube-ovn-controller",
            &["-n", "kube-system", "list", "secrets"],
            false,
        ),
        ("kube-ovn-cni", &["patch", "nodes", "--subresource=status"], true),
        ("kube-ovn-cni", &["list", "ips.kubeovn.io"], true),
        ("kube-ovn-cni", &["list", "vpcs.kubeovn.io"], false),
        ("kube-ovn-cni", &["patch", "pods"], false),
        // Its own pod's err_mesg annotation: in its namespace only.
        ("kube-ovn-cni", &["-n", "kube-system", "patch", "pods"], true),
        (
            "kube-ovn-cni",
            &["patch", "subnets.kubeovn.io", "--subresource=status"],
            false,
        ),
        (
            "kube-ovn-speaker",
            &["patch", "bgppeers.bgp.kube-ovn-rs.io", "--subresource=status"],
            true,
        ),
        ("kube-ovn-speaker", &["-n", "kube-system", "get", "secrets"], true),
        ("kube-ovn-speaker", &["-n", "default", "get", "secrets"], false),
        ("kube-ovn-speaker", &["delete", "nodes"], false),
        (
            "kube-ovn-speaker",
            &["patch", "bgppeers.bgp.kube-ovn-rs.io"],
            false,
        ),
    ];
    for (sa, args, allowed) in table {
        assert_eq!(can_i(sa, args), *allowed, "{sa} can-i {}", args.join(" "));
    }

    // And with each ServiceAccount's own token: allowed what its role grants, refused the rest
    // with the server's 403, which the audit log records.
    let as_sa =
        |sa: &str, kubeconfig: &Path| Kubectl::new(kubeconfig, &dir.path().join(format!("cache-{sa}")));
    let ctl_kc = server
        .service_account_kubeconfig("kube-system", "kube-ovn-controller")
        .await
        .unwrap();
    let ctl = as_sa("kube-ovn-controller", &ctl_kc);
    ctl.run(&["get", "subnets"]);
    ctl.run(&["get", "pods", "-A"]);
    ctl.run(&[
        "-n",
        "kube-system",
        "get",
        "lease",
        "kube-ovn-controller",
        "--ignore-not-found",
    ]);
    forbidden(
        &ctl,
        &["-n", "kube-system", "get", "secrets"],
        "cannot list resource \"secrets\"",
    );
    forbidden(
        &ctl,
        &["delete", "subnet", "public"],
        "cannot delete resource \"subnets\"",
    );
    forbidden(
        &ctl,
        &["-n", "default", "get", "lease", "x"],
        "cannot get resource \"leases\"",
    );
    let cni_kc = server
        .service_account_kubeconfig("kube-system", "kube-ovn-cni")
        .await
        .unwrap();
    let cni = as_sa("kube-ovn-cni", &cni_kc);
    cni.run(&["get", "nodes"]);
    cni.run(&["get", "subnets"]);
    // The controller's IP records (egress rules are built from them, issue 21), read only.
    cni.run(&["get", "ips"]);
    forbidden(&cni, &["get", "vpcs"], "cannot list resource \"vpcs\"");
    forbidden(&cni, &["get", "ippools"], "cannot list resource \"ippools\"");
    let speaker_kc = server
        .service_account_kubeconfig("kube-system", "kube-ovn-speaker")
        .await
        .unwrap();
    let speaker = as_sa("kube-ovn-speaker", &speaker_kc);
    speaker.run(&["get", "bgppeers"]);
    speaker.run(&["get", "services", "-A"]);
    speaker.run(&["get", "iptables-eips"]);
    speaker.run(&["get", "nodes"]);
    forbidden(
        &speaker,
        &["delete", "node", "node1"],
        "cannot delete resource \"nodes\"",
    );
    forbidden(
        &speaker,
        &["-n", "default", "get", "secrets"],
        "cannot list resource \"secrets\"",
    );

    let denied: BTreeSet<(String, String, String)> = server
        .denials()
        .into_iter()
        .map(|d| (d.user, d.verb, d.resource))
        .collect();
    let sa = |name: &str| format!("system:serviceaccount:kube-system:{name}");
    for (user, verb, resource) in [
        (sa("kube-ovn-controller"), "list", "/secrets"),
        (sa("kube-ovn-controller"), "delete", "kubeovn.io/subnets"),
        (sa("kube-ovn-controller"), "get", "coordination.k8s.io/leases"),
        (sa("kube-ovn-cni"), "list", "kubeovn.io/vpcs"),
        (sa("kube-ovn-cni"), "list", "kubeovn.io/ippools"),
        (sa("kube-ovn-speaker"), "delete", "/nodes"),
        (sa("kube-ovn-speaker"), "list", "/secrets"),
    ] {
        assert!(
            denied.contains(&(user.clone(), verb.to_owned(), resource.to_owned())),
            "the audit log has no refusal of {user} {verb} {resource}: {denied:?}"
        );
    }
}

/// kubectl refused with a 403 whose message contains `mentions`.
#[track_caller]
fn forbidden(kubectl: &Kubectl, args: &[&str], mentions: &str) {
    let err = kubectl.fail(args);
    assert!(
        err.contains("Error from server (Forbidden)") && err.contains(mentions),
        "kubectl {}: {err}",
        args.join(" ")
    );
}

// ovn-central: its kube-ovn-monitor sidecar.
const OUR_WORKLOADS: [&str; 4] = [
    "kube-ovn-cni",
    "kube-ovn-controller",
    "kube-ovn-speaker",
    "ovn-central",
];

#[test]
fn every_flag_in_the_manifests_parses_with_its_binary() {
    for overlay in ["overlays/example", "overlays/lab"] {
        let docs = documents(&kustomize(overlay));
        let checked = flags::check_all(&docs).unwrap_or_else(|e| panic!("deploy/{overlay}: {e}"));
        assert_eq!(
            checked, OUR_WORKLOADS,
            "deploy/{overlay}: the containers running our binaries"
        );
    }
    // The base leaves ovn-central-ips to the installer: the controller and the node daemon
    // refuse to start without it, naming the flag, rather than wait for a database forever.
    let mut docs = documents(&kustomize("base"));
    let mut refused = Vec::new();
    for line in flags::command_lines(&docs).unwrap() {
        if let Err(e) = flags::parse(&line.binary, &line.argv) {
            assert!(
                e.contains("--ovn-db-ips") && e.contains("is empty"),
                "{}: {e}",
                line.workload
            );
            refused.push(line.workload);
        }
    }
    refused.sort();
    assert_eq!(refused, ["kube-ovn-cni", "kube-ovn-controller"]);
    let config = docs
        .iter_mut()
        .find(|d| d["kind"] == "ConfigMap" && d["metadata"]["name"] == "kube-ovn-config")
        .unwrap();
    config["data"]["ovn-central-ips"] = "192.0.2.11".into();
    assert_eq!(
        flags::check_all(&docs).unwrap(),
        OUR_WORKLOADS,
        "deploy/base, filled in"
    );
}

#[test]
fn the_workloads_have_what_their_components_need() {
    let docs = documents(&kustomize("base"));
    let pod = |kind: &str, name: &str| find(&docs, kind, name)["spec"]["template"]["spec"].clone();

    let ctl = find(&docs, "Deployment", "kube-ovn-controller");
    assert_eq!(ctl["spec"]["replicas"], 2);
    let spec = pod("Deployment", "kube-ovn-controller");
    assert_eq!(spec["serviceAccountName"], "kube-ovn-controller");
    let c = &spec["containers"][0];
    assert!(flags::args(c).contains(&"--leader-elect=true".to_owned()));
    assert_eq!(flags::env_field(c, "POD_NAME"), Some("metadata.name"));

    let spec = pod("DaemonSet", "kube-ovn-cni");
    assert_eq!(spec["serviceAccountName"], "kube-ovn-cni");
    assert_eq!(
        (spec["hostNetwork"].as_bool(), spec["hostPID"].as_bool()),
        (Some(true), Some(true))
    );
    let c = &spec["containers"][0];
    assert_eq!(c["securityContext"]["privileged"], true);
    assert!(flags::args(c).contains(&"--install-cni-config=true".to_owned()));
    assert_eq!(flags::env_field(c, "KUBE_NODE_NAME"), Some("spec.nodeName"));
    let mounts = |c: &Value| -> Vec<(String, String)> {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["mountPath"].as_str().unwrap().to_owned(),
                    m["mountPropagation"].as_str().unwrap_or("None").to_owned(),
                )
            })
            .collect()
    };
    let m = mounts(c);
    for path in ["/run/openvswitch", "/opt/cni/bin", "/etc/cni/net.d"] {
        assert!(
            m.iter().any(|(p, _)| p == path),
            "kube-ovn-cni mounts no {path}: {m:?}"
        );
    }
    assert!(
        m.contains(&("/var/run/netns".to_owned(), "Bidirectional".to_owned())),
        "{m:?}"
    );

    // The databases by the ovn-central members' addresses (the ConfigMap key is required), no
    // ClusterIP.
    for (kind, name) in [
        ("Deployment", "kube-ovn-controller"),
        ("DaemonSet", "kube-ovn-cni"),
    ] {
        let c = &pod(kind, name)["containers"][0];
        let env = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "OVN_DB_IPS")
            .unwrap_or_else(|| panic!("{name}: no OVN_DB_IPS"));
        let r = &env["valueFrom"]["configMapKeyRef"];
        assert_eq!(
            (&r["name"], &r["key"]),
            (&"kube-ovn-config".into(), &"ovn-central-ips".into())
        );
        assert!(r["optional"].is_null(), "{name}: {r}");
        for a in flags::args(c) {
            assert!(!a.contains("SERVICE_HOST"), "{name}: {a}");
        }
    }
    // The daemon reads the chassis name from the file start-ovs.sh keeps in ovs-ovn's
    // /etc/openvswitch: the same host directory, mounted where --system-id-file points.
    let host_path = |kind: &str, name: &str, mount: &str| -> String {
        let spec = pod(kind, name);
        let volume = spec["containers"][0]["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == mount)
            .unwrap_or_else(|| panic!("{name} mounts no {mount}"))["name"]
            .clone();
        spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == volume)
            .unwrap()["hostPath"]["path"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        host_path("DaemonSet", "kube-ovn-cni", "/etc/openvswitch"),
        host_path("DaemonSet", "ovs-ovn", "/etc/openvswitch")
    );
    let daemon = kube_ovn_node::config::Flags::try_parse_from(["d", "--node-name=n"]).unwrap();
    assert!(daemon.system_id_file.starts_with("/etc/openvswitch"));
    let ovs = &pod("DaemonSet", "ovs-ovn")["containers"][0];
    assert_eq!(
        ovs["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "OVS_NETDEV_UPLINK")
            .unwrap()["valueFrom"]["configMapKeyRef"]["key"],
        "ovs-netdev-uplink"
    );

    // No liveness probe before the component first answers (a startup probe holds it), and no
    // exec probe that the kubelet times out before its command would.
    for (kind, name) in [
        ("Deployment", "ovn-central"),
        ("DaemonSet", "ovs-ovn"),
        ("Deployment", "kube-ovn-controller"),
        ("DaemonSet", "kube-ovn-cni"),
        ("DaemonSet", "kube-ovn-speaker"),
    ] {
        let c = &pod(kind, name)["containers"][0];
        assert!(c["startupProbe"].is_object(), "{name}: no startupProbe");
        assert!(c["livenessProbe"]["initialDelaySeconds"].is_null(), "{name}");
        for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
            let p = &c[probe];
            if let Some(cmd) = p["exec"]["command"].as_array() {
                let own = cmd
                    .iter()
                    .find_map(|a| a.as_str()?.strip_prefix("--timeout="))
                    .and_then(|t| t.parse::<u64>().ok())
                    .unwrap_or_else(|| panic!("{name} {probe}: the command has no --timeout"));
                let kubelet = p["timeoutSeconds"].as_u64().unwrap_or(1);
                assert!(
                    kubelet > own,
                    "{name} {probe}: timeoutSeconds {kubelet} ≤ --timeout={own}"
                );
            }
        }
    }

    let spec = pod("DaemonSet", "kube-ovn-speaker");
    assert_eq!(spec["serviceAccountName"], "kube-ovn-speaker");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["nodeSelector"]["ovn.kubernetes.io/bgp"], "true");
    let caps = &spec["containers"][0]["securityContext"]["capabilities"]["add"];
    assert_eq!(caps, &serde_json::json!(["NET_ADMIN", "NET_BIND_SERVICE"]));
    // It writes only its state directory (a hostPath), as the controller writes nothing.
    assert_eq!(
        spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"],
        true
    );

    // ovn-central and ovs-ovn do not use the API: no token in their pods.
    for (kind, name) in [("Deployment", "ovn-central"), ("DaemonSet", "ovs-ovn")] {
        assert_eq!(
            pod(kind, name)["automountServiceAccountToken"],
            false,
            "{kind} {name}"
        );
    }
}
