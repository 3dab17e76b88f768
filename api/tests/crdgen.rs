//! The `crdgen` binary: writes one YAML file per CRD, is deterministic, and `--check` fails
//! (naming the file) when a committed CRD is stale, missing or no longer generated.
#![cfg(feature = "crdgen")]

use std::path::Path;
use std::process::{Command, Output};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

fn crdgen(args: &[&str], envs: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_crdgen"));
    cmd.args(args)
        .env_remove("CRDGEN_OUT_DIR")
        .env_remove("CRDGEN_CHECK");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("crdgen runs")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn committed_crds_are_up_to_date() {
    let out = crdgen(&["--check"], &[]);
    assert!(
        out.status.success(),
        "deploy/crds is stale; run `cargo run -p kube-ovn-api --bin crdgen`:\n{}",
        stderr(&out)
    );
}

#[test]
fn writes_one_faithful_file_per_crd_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crds");
    let path_str = path.to_str().unwrap();
    assert!(crdgen(&["--out-dir", path_str], &[]).status.success());
    let first: Vec<(String, String)> = {
        let mut files: Vec<_> = std::fs::read_dir(&path)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read_to_string(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    };
    // Kube-OVN's and ours (BgpPeer), one file each, sorted by file name.
    let mut crds = kube_ovn_api::crds();
    crds.extend(kube_ovn_api::extension_crds());
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    assert_eq!(first.len(), crds.len());
    assert!(
        first
            .iter()
            .any(|(name, _)| name == "bgppeers.bgp.kube-ovn-rs.io.yaml")
    );
    for ((name, content), crd) in first.iter().zip(&crds) {
        assert_eq!(*name, format!("{}.yaml", crd.metadata.name.as_deref().unwrap()));
        let parsed: CustomResourceDefinition = serde_saphyr::from_str(content).unwrap();
        assert_eq!(&parsed, crd, "{name} reads back as the generated CRD");
    }
    // A second run changes nothing, and --check (here through the environment) agrees.
    assert!(crdgen(&["--out-dir", path_str], &[]).status.success());
    for (name, content) in &first {
        assert_eq!(
            &std::fs::read_to_string(path.join(name)).unwrap(),
            content,
            "{name} is deterministic"
        );
    }
    let check = Command::new(env!("CARGO_BIN_EXE_crdgen"))
        .env("CRDGEN_OUT_DIR", &path)
        .env("CRDGEN_CHECK", "true")
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", stderr(&check));
}

#[test]
fn check_names_changed_missing_and_stale_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path();
    assert!(
        crdgen(&["--out-dir", path.to_str().unwrap()], &[])
            .status
            .success()
    );

    let edited = path.join("subnets.kubeovn.io.yaml");
    let mut text = std::fs::read_to_string(&edited).unwrap();
    text.push_str("# hand edit\n");
    std::fs::write(&edited, text).unwrap();
    std::fs::remove_file(path.join("vips.kubeovn.io.yaml")).unwrap();
    std::fs::remove_file(path.join("bgppeers.bgp.kube-ovn-rs.io.yaml")).unwrap();
    std::fs::write(
        path.join("old-kind.kubeovn.io.yaml"),
        "kind: CustomResourceDefinition\n",
    )
    .unwrap();
    // Unrelated files are left alone.
    std::fs::write(path.join("kustomization.yaml"), "resources: []\n").unwrap();

    let out = crdgen(&["--check"], &[("CRDGEN_OUT_DIR", path)]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("subnets.kubeovn.io.yaml: differs"), "{err}");
    assert!(err.contains("vips.kubeovn.io.yaml: missing"), "{err}");
    assert!(err.contains("bgppeers.bgp.kube-ovn-rs.io.yaml: missing"), "{err}");
    assert!(err.contains("old-kind.kubeovn.io.yaml: stale"), "{err}");
    assert!(!err.contains("kustomization"), "{err}");

    // Writing repairs all three and keeps the unrelated file.
    assert!(crdgen(&[], &[("CRDGEN_OUT_DIR", path)]).status.success());
    assert!(crdgen(&["--check"], &[("CRDGEN_OUT_DIR", path)]).status.success());
    assert!(!path.join("old-kind.kubeovn.io.yaml").exists());
    assert!(path.join("kustomization.yaml").exists());
}
