//! The machine's `kubectl` against `kube-ovn-lab apiserver` over TCP (the kubeconfig the binary
//! writes): apply the generated CRDs and `examples/`, read them back with their printer columns,
//! patch (merge, JSON, strategic), annotate, label, delete; every result is checked with kubectl
//! and with a kube client. A missing kubectl, or one older than 1.27, fails the test and says what to
//! install.

#[allow(
    dead_code,
    reason = "each test binary uses its own subset of the shared helpers"
)]
mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::LabProcess;
use common::kubectl::{Kubectl, repo};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject};
use kube::discovery::Discovery;
use kube::{Resource, ResourceExt};
use kube_ovn_api::crd::Subnet;
use serde_json::Value;

/// A long-running `kubectl get -w`, its stdout read line by line; killed by PID when dropped.
struct KubectlWatch {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl KubectlWatch {
    fn start(kubectl: &Kubectl, args: &[&str]) -> Self {
        let mut child = kubectl
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Self { child, lines }
    }

    /// The first line (from now) matching `wanted`, within [`common::WAIT`].
    fn line_where(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + common::WAIT;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if wanted(&line) => return line,
                Ok(line) => seen.push(line),
                Err(e) => panic!("kubectl watch: no matching line ({e}); saw {seen:?}"),
            }
        }
    }
}

impl Drop for KubectlWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `kubectl get` table: (headers, rows of cells), cells cut at the headers' columns.
fn table(text: &str) -> (Vec<String>, Vec<Vec<String>>) {
    let mut lines = text.lines();
    let header = lines.next().expect("a header line");
    // kubectl pads columns with three spaces; names hold at most one ("CREATED AT").
    let bytes = header.as_bytes();
    let starts: Vec<usize> = (0..bytes.len())
        .filter(|&i| bytes[i] != b' ' && (i == 0 || (i >= 2 && &bytes[i - 2..i] == b"  ")))
        .collect();
    let mut names = Vec::new();
    for (n, start) in starts.iter().enumerate() {
        let end = starts.get(n + 1).copied().unwrap_or(header.len());
        names.push(header[*start..end].trim().to_owned());
    }
    let rows = lines
        .map(|line| {
            starts
                .iter()
                .enumerate()
                .map(|(n, start)| {
                    let end = starts.get(n + 1).copied().unwrap_or(line.len()).min(line.len());
                    line.get(*start..end).unwrap_or_default().trim().to_owned()
                })
                .collect()
        })
        .collect();
    (names, rows)
}

/// The cell of `column` in the row whose NAME is `name`.
fn cell(table: &(Vec<String>, Vec<Vec<String>>), name: &str, column: &str) -> String {
    let (headers, rows) = table;
    let i = headers
        .iter()
        .position(|h| h == column)
        .unwrap_or_else(|| panic!("no column {column} in {headers:?}"));
    let row = rows
        .iter()
        .find(|r| r[0] == name)
        .unwrap_or_else(|| panic!("no row {name} in {rows:?}"));
    row[i].clone()
}

/// The header names kubectl prints for a CRD: NAME, its printer columns upper-cased, AGE.
fn crd_headers(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/crds").join(file)).unwrap();
    let crd: Value = serde_saphyr::from_str(&text).unwrap();
    let mut out = vec!["NAME".to_owned()];
    for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array()
        .unwrap()
    {
        out.push(c["name"].as_str().unwrap().to_uppercase());
    }
    out.push("AGE".into());
    out
}

fn is_age(text: &str) -> bool {
    let digits = text.trim_end_matches(['s', 'm', 'h', 'd', 'y']);
    !digits.is_empty() && digits.chars().all(|c| c.is_ascii_digit()) && text.len() > digits.len()
}

/// Whether `stored` holds everything in `applied` (the server may add schema defaults).
fn holds(stored: &Value, applied: &Value) -> bool {
    match (stored, applied) {
        (Value::Object(s), Value::Object(a)) => {
            a.iter().all(|(k, v)| s.get(k).is_some_and(|sv| holds(sv, v)))
        }
        _ => stored == applied,
    }
}

/// Every object in `examples/` (not `examples/invalid/`), fetched with a kube client, holds
/// what the example says.
async fn check_examples_stored(client: &kube::Client) {
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    let mut count = 0;
    for file in files {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&std::fs::read_to_string(&file).unwrap()).unwrap();
        for doc in docs {
            let (group, version) = doc["apiVersion"]
                .as_str()
                .unwrap()
                .rsplit_once('/')
                .unwrap_or(("", "v1"));
            let gvk = kube::api::GroupVersionKind::gvk(group, version, doc["kind"].as_str().unwrap());
            let (ar, caps) = discovery.resolve_gvk(&gvk).expect("the example's kind is served");
            let api: Api<DynamicObject> = match doc["metadata"]["namespace"].as_str() {
                Some(ns) if caps.scope == kube::discovery::Scope::Namespaced => {
                    Api::namespaced_with(client.clone(), ns, &ar)
                }
                _ => Api::all_with(client.clone(), &ar),
            };
            let name = doc["metadata"]["name"].as_str().unwrap();
            let stored = api
                .get(name)
                .await
                .unwrap_or_else(|e| panic!("{}: {name}: {e}", file.display()));
            assert!(
                holds(&stored.data["spec"], &doc["spec"]),
                "{}: {name}: stored spec {} lacks the applied {}",
                file.display(),
                stored.data["spec"],
                doc["spec"]
            );
            count += 1;
        }
    }
    assert!(count >= 20, "only {count} example objects");
}

/// `kubectl apply` without `--validate=false`. kubectl (≥ 1.27, checked by `Kubectl::new`) finds
/// `fieldValidation` in the OpenAPI v3 document and leaves validation to the server: unknown
/// fields are refused (Strict, its default) or warned about (`--validate=warn`), and
/// `kubectl explain` reads the CRD schema.
fn check_validation(kubectl: &Kubectl, dir: &Path) {
    let typo = dir.join("typo.yaml");
    std::fs::write(
        &typo,
        "apiVersion: kubeovn.io/v1\nkind: Vlan\nmetadata:\n  name: typo\nspec:\n  id: 10\n  provider: physnet\n  vid: 3\n",
    )
    .unwrap();
    let typo = typo.to_str().unwrap();
    let err = kubectl.fail(&["apply", "-f", typo]);
    assert!(
        err.contains(r#"Vlan in version "v1" cannot be handled as a Vlan: strict decoding error: unknown field "spec.vid""#),
        "{err}"
    );
    let out = kubectl
        .command(&["apply", "--validate=warn", "-f", typo])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains(r#"Warning: unknown field "spec.vid""#));
    let stored: Value = serde_json::from_str(&kubectl.run(&["get", "vlan", "typo", "-o", "json"])).unwrap();
    assert_eq!(
        stored["spec"],
        serde_json::json!({"id": 10, "provider": "physnet"}),
        "pruned"
    );
    kubectl.run(&["delete", "vlan", "typo"]);
    // Valid objects apply with the default validation.
    assert!(
        kubectl
            .run(&["apply", "-f", "examples/vpc-custom.yaml"])
            .contains("unchanged")
    );
    let explained = kubectl.run(&["explain", "subnet.spec.cidrBlock"]);
    assert!(
        explained.contains("cidrBlock") && explained.contains("<string>"),
        "{explained}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_reads_patches_and_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let lab = LabProcess::start(dir.path(), &[]).unwrap();
    let kubectl = Kubectl::new(&lab.kubeconfig, &dir.path().join("kube-cache"));
    let client = lab.client();

    let out = kubectl.run(&["apply", "--validate=false", "-f", "deploy/crds/"]);
    // Every file there: the kubeovn.io CRDs and the speaker's bgp.kube-ovn-rs.io BgpPeer.
    let files = std::fs::read_dir(repo().join("deploy/crds")).unwrap().count();
    assert_eq!(
        files,
        kube_ovn_api::crds().len() + 1,
        "deploy/crds holds the kubeovn.io CRDs and BgpPeer"
    );
    assert_eq!(out.matches(" created").count(), files, "{out}");
    let (headers, rows) = table(&kubectl.run(&["get", "crds"]));
    assert_eq!(headers, ["NAME", "CREATED AT"]);
    assert_eq!(rows.len(), files);
    assert!(
        rows.iter()
            .any(|r| r[0] == "subnets.kubeovn.io" && r[1].ends_with('Z')),
        "{rows:?}"
    );

    // The Pod example lives in namespace `web`, which no example creates.
    let namespace = dir.path().join("namespace.yaml");
    std::fs::write(
        &namespace,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: web\n",
    )
    .unwrap();
    kubectl.run(&["apply", "--validate=false", "-f", namespace.to_str().unwrap()]);
    // `-f dir` does not recurse: examples/invalid/ stays out.
    let out = kubectl.run(&["apply", "--validate=false", "-f", "examples/"]);
    assert!(out.contains("subnet.kubeovn.io/web-dual created"), "{out}");
    assert!(out.contains("pod/web-static created"), "{out}");
    check_examples_stored(&client).await;
    // Applying again changes nothing.
    let out = kubectl.run(&["apply", "--validate=false", "-f", "examples/ippool.yaml"]);
    assert_eq!(out.trim(), "ippool.kubeovn.io/web-pool unchanged");

    check_validation(&kubectl, dir.path());

    // Printer columns, as the CRDs declare them.
    let subnets = table(&kubectl.run(&["get", "subnets"]));
    assert_eq!(subnets.0, crd_headers("subnets.kubeovn.io.yaml"));
    assert_eq!(cell(&subnets, "web-dual", "CIDR"), "10.66.0.0/16,fd00:10:66::/64");
    assert_eq!(cell(&subnets, "web-dual", "PROTOCOL"), "Dual");
    assert_eq!(cell(&subnets, "web-dual", "NAT"), "false");
    assert_eq!(cell(&subnets, "web-dual", "V4USED"), "");
    assert!(is_age(&cell(&subnets, "web-dual", "AGE")), "{subnets:?}");
    let pools = table(&kubectl.run(&["get", "ippool"]));
    assert_eq!(pools.0, crd_headers("ippools.kubeovn.io.yaml"));
    assert_eq!(cell(&pools, "web-pool", "SUBNET"), "web-dual");
    assert_eq!(cell(&pools, "web-pool", "ENABLEADDRESSSET"), "true");
    let pods = table(&kubectl.run(&["get", "pods", "-n", "web", "-o", "wide"]));
    assert_eq!(pods.0, ["NAME", "STATUS", "AGE", "IP", "NODE"]);
    let namespaces = table(&kubectl.run(&["get", "namespaces"]));
    assert_eq!(cell(&namespaces, "web", "STATUS"), "Active");

    // -o json is the object a kube client reads.
    let from_kubectl: Value =
        serde_json::from_str(&kubectl.run(&["get", "subnet", "web-dual", "-o", "json"])).unwrap();
    let subnets_api: Api<Subnet> = Api::all(client.clone());
    let from_client = serde_json::to_value(subnets_api.get("web-dual").await.unwrap()).unwrap();
    for field in [
        "/metadata/uid",
        "/metadata/resourceVersion",
        "/metadata/generation",
        "/spec",
    ] {
        assert_eq!(from_kubectl.pointer(field), from_client.pointer(field), "{field}");
    }

    // Patches: merge and JSON on a custom resource, strategic (the default) on a Pod.
    kubectl.run(&[
        "patch",
        "subnet",
        "web-dual",
        "--type",
        "merge",
        "-p",
        r#"{"spec":{"mtu":1300}}"#,
    ]);
    kubectl.run(&[
        "patch",
        "subnet",
        "web-dual",
        "--type",
        "json",
        "-p",
        r#"[{"op":"replace","path":"/spec/private","value":true}]"#,
    ]);
    let sn = subnets_api.get("web-dual").await.unwrap();
    assert_eq!((sn.spec.mtu, sn.spec.private), (Some(1300), Some(true)));
    assert_eq!(sn.meta().generation, Some(3), "two spec changes");
    kubectl.run(&[
        "patch",
        "pod",
        "web-static",
        "-n",
        "web",
        "-p",
        r#"{"metadata":{"labels":{"patched":"yes"}}}"#,
    ]);
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "web");
    assert_eq!(
        pods_api
            .get("web-static")
            .await
            .unwrap()
            .labels()
            .get("patched")
            .map(String::as_str),
        Some("yes")
    );

    // Annotate and label: metadata only, no generation bump.
    kubectl.run(&["annotate", "subnet", "web-dual", "lab.kube-ovn.io/note=hello"]);
    kubectl.run(&["label", "subnet", "web-dual", "team=a"]);
    let sn = subnets_api.get("web-dual").await.unwrap();
    assert_eq!(
        sn.annotations().get("lab.kube-ovn.io/note").map(String::as_str),
        Some("hello")
    );
    assert_eq!(sn.labels().get("team").map(String::as_str), Some("a"));
    assert_eq!(sn.meta().generation, Some(3));
    assert!(
        kubectl
            .fail(&["label", "subnet", "web-dual", "team=b"])
            .contains("already has a value")
    );
    kubectl.run(&["label", "subnet", "web-dual", "team=b", "--overwrite"]);
    kubectl.run(&["annotate", "subnet", "web-dual", "lab.kube-ovn.io/note-"]);
    let sn = subnets_api.get("web-dual").await.unwrap();
    assert_eq!(sn.labels().get("team").map(String::as_str), Some("b"));
    assert!(!sn.annotations().contains_key("lab.kube-ovn.io/note"));
    assert_eq!(
        kubectl
            .run(&["get", "subnets", "-l", "team=b", "-o", "name"])
            .trim(),
        "subnet.kubeovn.io/web-dual"
    );
    assert_eq!(
        kubectl.run(&[
            "get",
            "subnet",
            "web-dual",
            "-o",
            "jsonpath={.spec.mtu} {.metadata.labels.team}"
        ]),
        "1300 b"
    );

    // Delete: one object, a file's objects, a namespace with its pod. A `kubectl get -w` watching
    // (as tables) sees the subnet go, printed with its columns.
    let mut watch = KubectlWatch::start(&kubectl, &["get", "subnets", "-w", "--output-watch-events"]);
    let added = watch.line_where(|l| l.starts_with("ADDED") && l.contains("web-dual"));
    assert!(added.contains("10.66.0.0/16,fd00:10:66::/64"), "{added}");
    kubectl.run(&["delete", "subnet", "web-dual"]);
    let deleted = watch.line_where(|l| l.starts_with("DELETED") && l.contains("web-dual"));
    assert!(deleted.contains("10.66.0.0/16,fd00:10:66::/64"), "{deleted}");
    drop(watch);
    assert!(subnets_api.get_opt("web-dual").await.unwrap().is_none());
    assert!(kubectl.fail(&["get", "subnet", "web-dual"]).contains("NotFound"));
    let out = kubectl.run(&["delete", "-f", "examples/ovn-nat.yaml"]);
    assert_eq!(out.matches(" deleted").count(), 5, "{out}");
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let (fip, _) = discovery
        .resolve_gvk(&kube::api::GroupVersionKind::gvk("kubeovn.io", "v1", "OvnFip"))
        .unwrap();
    assert!(
        Api::<DynamicObject>::all_with(client.clone(), &fip)
            .get_opt("blue-db")
            .await
            .unwrap()
            .is_none()
    );
    kubectl.run(&["delete", "namespace", "web"]);
    assert!(pods_api.get_opt("web-static").await.unwrap().is_none());
    assert!(
        kubectl
            .run(&["get", "namespaces", "-o", "name"])
            .lines()
            .all(|l| l != "namespace/web")
    );
}
