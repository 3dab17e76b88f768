//! `deploy/` checked offline: `kubectl kustomize` renders the base and the example overlay; every
//! rendered object, and every CRD in deploy/crds, validates against Kubernetes 1.33's schemas (`kubernetes-validate`, pinned by
//! scripts/install-deps.sh); the rendered manifests apply to the API emulator with RBAC on, and
//! there each component's ServiceAccount is granted its ClusterRole and no more; every flag in a
//! container's args (and every flag variable in its env) parses with the binary's own flag types
//! and passes its validation; the workloads have what their components need. (The custom
//! resources in deploy/ are checked against our CRDs with examples/ in api/tests/examples.rs.)
//!
//! kubectl and kubernetes-validate are required: a missing one fails the test, naming the
//! install script.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

#[path = "deploy/flags.rs"]
mod flags;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::LabProcess;
use common::kubectl::Kubectl;
use serde_json::Value;

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `kubectl kustomize deploy/<dir>`, as YAML.
fn render(dir: &str) -> String {
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(deploy_dir().join(dir))
        .output()
        .unwrap_or_else(|e| {
            panic!("kubectl: {e}: these tests need kubectl (with kustomize); run scripts/install-deps.sh")
        });
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/{dir} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn documents(yaml: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(yaml)
        .expect("rendered YAML parses")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

/// `kubernetes-validate --strict` of `files`; fails the test on any error, naming `what`.
fn kubernetes_validate(files: &[PathBuf], what: &str) {
    let out = Command::new("kubernetes-validate")
        .args(["--strict", "--kubernetes-version", "1.33.0"])
        .args(files)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "kubernetes-validate: {e}: these tests need kubernetes-validate 1.33.1 from PyPI; \
                 scripts/install-deps.sh installs it"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("ERROR")).collect();
    assert!(
        out.status.success() && errors.is_empty(),
        "{what} fails the Kubernetes schemas ({}):\n{text}",
        out.status
    );
    // Only our own kinds may lack a Kubernetes schema; they are checked against our CRDs.
    for line in text.lines().filter(|l| l.contains("Couldn't find schema")) {
        assert!(
            line.contains("kubeovn.io/") || line.contains("bgp.kube-ovn-rs.io/"),
            "{what}: {line}"
        );
    }
}

#[test]
fn the_crds_validate_against_the_kubernetes_schemas() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(deploy_dir().join("crds"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let generated = kube_ovn_api::crds().len() + kube_ovn_api::extension_crds().len();
    assert_eq!(
        files.len(),
        generated,
        "deploy/crds holds crdgen's files only: {files:?}"
    );
    kubernetes_validate(&files, "deploy/crds");
}

#[test]
fn base_and_example_render_and_validate_against_the_kubernetes_schemas() {
    let dir = tempfile::tempdir().unwrap();
    for overlay in ["base", "overlays/example"] {
        let yaml = render(overlay);
        let docs = documents(&yaml);
        let kinds: BTreeSet<(String, String)> = docs
            .iter()
            .map(|d| {
                (
                    d["kind"].as_str().unwrap().to_owned(),
                    d["metadata"]["name"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        for (kind, name) in [
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
        ] {
            assert!(
                kinds.contains(&(kind.to_owned(), name.to_owned())),
                "deploy/{overlay} renders no {kind} {name}"
            );
        }
        let file = dir.path().join(format!("{}.yaml", overlay.replace('/', "-")));
        std::fs::write(&file, &yaml).unwrap();
        kubernetes_validate(&[file], &format!("deploy/{overlay}"));
    }
}

const ADMIN: &str = "deploy-test-admin";
const IDENTITIES: &[(&str, &str)] = &[
    ("kube-ovn-controller", "token-controller"),
    ("kube-ovn-cni", "token-cni"),
    ("kube-ovn-speaker", "token-speaker"),
];

#[test]
fn the_rendered_manifests_apply_to_the_emulator_and_bind_each_component_to_its_role() {
    let dir = tempfile::tempdir().unwrap();
    let mut lines = vec![format!("{ADMIN},kubernetes-admin,0,\"system:masters\"")];
    for (i, (sa, token)) in IDENTITIES.iter().enumerate() {
        lines.push(format!(
            "{token},system:serviceaccount:kube-system:{sa},{}",
            i + 1
        ));
    }
    let tokens = lines.join("\n");
    std::fs::write(dir.path().join("tokens.csv"), tokens).unwrap();
    let lab = LabProcess::start(
        dir.path(),
        &[
            "--token-auth-file".into(),
            dir.path().join("tokens.csv").display().to_string(),
            "--authorization-mode".into(),
            "RBAC".into(),
            "--kubeconfig-token".into(),
            ADMIN.into(),
            "--cert-dir".into(),
            dir.path().join("pki").display().to_string(),
        ],
    )
    .unwrap();
    let admin = Kubectl::new(&lab.kubeconfig, &dir.path().join("cache-admin"));
    // The CRDs first, then everything: a custom resource cannot be mapped before its CRD is
    // served (the order docs/operations.md gives).
    let crds = deploy_dir().join("crds");
    admin.run(&["apply", "-f", crds.to_str().unwrap()]);
    admin.run(&[
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        "crd",
        "--all",
    ]);
    let rendered = dir.path().join("example.yaml");
    std::fs::write(&rendered, render("overlays/example")).unwrap();
    let applied = admin.run(&["apply", "-f", rendered.to_str().unwrap()]);
    let docs = documents(&std::fs::read_to_string(&rendered).unwrap());
    assert_eq!(
        applied.lines().count(),
        docs.len(),
        "one line per object applied:\n{applied}"
    );
    let ds = admin.get_json(&["-n", "kube-system", "daemonsets"]);
    let names: BTreeSet<&str> = ds["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["kube-ovn-cni", "kube-ovn-speaker", "ovs-ovn"])
    );
    // Applying again changes nothing and fails nothing.
    admin.run(&["apply", "-f", rendered.to_str().unwrap()]);

    // Each identity can do what its role says and is refused the rest.
    let ca = dir.path().join("pki/apiserver.crt");
    let as_sa = |sa: &str| {
        let token = IDENTITIES.iter().find(|(s, _)| *s == sa).unwrap().1;
        let file = dir.path().join(format!("{sa}.kubeconfig"));
        std::fs::write(
            &file,
            kube_ovn_lab::apiserver::kubeconfig_for(lab.addr, Some(&ca), Some(token)),
        )
        .unwrap();
        Kubectl::new(&file, &dir.path().join(format!("cache-{sa}")))
    };
    let ctl = as_sa("kube-ovn-controller");
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
    let cni = as_sa("kube-ovn-cni");
    cni.run(&["get", "nodes"]);
    cni.run(&["get", "subnets"]);
    forbidden(&cni, &["get", "vpcs"], "cannot list resource \"vpcs\"");
    // The controller's IP records (egress rules are built from them, issue 21), read only.
    cni.run(&["get", "ips"]);
    forbidden(&cni, &["get", "ippools"], "cannot list resource \"ippools\"");
    let speaker = as_sa("kube-ovn-speaker");
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

#[test]
fn every_flag_in_the_manifests_parses_with_its_binary() {
    for overlay in ["base", "overlays/example"] {
        let docs = documents(&render(overlay));
        let checked = flags::check_all(&docs).unwrap_or_else(|e| panic!("deploy/{overlay}: {e}"));
        assert_eq!(
            checked,
            ["kube-ovn-cni", "kube-ovn-controller", "kube-ovn-speaker"],
            "deploy/{overlay}: the containers running our binaries"
        );
    }
}

#[test]
fn the_workloads_have_what_their_components_need() {
    let docs = documents(&render("base"));
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

    let spec = pod("DaemonSet", "kube-ovn-speaker");
    assert_eq!(spec["serviceAccountName"], "kube-ovn-speaker");
    assert_eq!(spec["hostNetwork"], true);
    assert_eq!(spec["nodeSelector"]["ovn.kubernetes.io/bgp"], "true");
    let caps = &spec["containers"][0]["securityContext"]["capabilities"]["add"];
    assert_eq!(caps, &serde_json::json!(["NET_ADMIN", "NET_BIND_SERVICE"]));

    // ovn-central and ovs-ovn do not use the API: no token in their pods.
    for (kind, name) in [("Deployment", "ovn-central"), ("DaemonSet", "ovs-ovn")] {
        assert_eq!(
            pod(kind, name)["automountServiceAccountToken"],
            false,
            "{kind} {name}"
        );
    }
}
