//! What `up` needs before it makes anything: the packages (the project's install script), our
//! binaries (built when missing), and every program the lab runs (upstream Kubernetes' included).

use std::path::{Path, PathBuf};

use anyhow::Context;
use kube_ovn_lab::cluster::components::{Binaries, NB_SCHEMA, SB_SCHEMA, VSWITCH_SCHEMA};
use kube_ovn_lab::cluster::topology::{Topology, TorKind};

/// The repository this binary was built from, when it is still there (for the install script,
/// the examples and building missing binaries).
pub fn workspace() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_owned();
    dir.join("Cargo.toml").is_file().then_some(dir)
}

pub fn install_packages() -> anyhow::Result<()> {
    let Some(ws) = workspace() else {
        // An installed binary without its repository: the packages are the operator's job.
        return Ok(());
    };
    let script = ws.join("scripts/install-deps.sh");
    let status = std::process::Command::new(&script)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    anyhow::ensure!(status.success(), "{} failed ({status})", script.display());
    Ok(())
}

/// The binaries to run: `--bin-dir`, else beside this executable; missing ones are built
/// from the repository with this binary's profile.
pub fn binaries(bin_dir: Option<&Path>) -> anyhow::Result<Binaries> {
    let dir = match bin_dir {
        Some(d) => d.to_owned(),
        None => std::env::current_exe()?
            .parent()
            .context("this executable has no directory")?
            .to_owned(),
    };
    let bins = Binaries { dir };
    let missing = bins.missing();
    if missing.is_empty() {
        return Ok(bins);
    }
    let ws = workspace().filter(|_| bin_dir.is_none()).with_context(|| {
        format!(
            "missing in {}: {} (build them: cargo build --release --workspace --bins)",
            bins.dir.display(),
            missing.join(", ")
        )
    })?;
    println!("building {} …", missing.join(", "));
    let mut cmd = std::process::Command::new("cargo");
    cmd.current_dir(&ws).args([
        "build",
        "--bins",
        "-p",
        "kube-ovn-controller",
        "-p",
        "kube-ovn-cni",
        "-p",
        "kube-ovn-node",
        "-p",
        "kube-ovn-speaker",
        "-p",
        "kube-ovn-pinger",
        "-p",
        "kube-ovn-monitor",
    ]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let status = cmd.status().context("running cargo")?;
    anyhow::ensure!(status.success(), "cargo build failed ({status})");
    let still = bins.missing();
    anyhow::ensure!(
        still.is_empty(),
        "still missing after the build: {}",
        still.join(", ")
    );
    Ok(bins)
}

pub fn check_programs(t: &Topology) -> anyhow::Result<()> {
    let mut programs = vec![
        "ip",
        "ethtool",
        "sysctl",
        "nsenter",
        "unshare",
        "ovsdb-tool",
        "ovsdb-server",
        "ovs-vswitchd",
        "ovs-vsctl",
        "ovn-northd",
        "ovn-nbctl",
        "ovn-sbctl",
        "ovn-controller",
    ];
    programs.extend(match t.tor_kind {
        TorKind::Bird => ["bird", "birdc"],
        TorKind::Frr => ["/usr/lib/frr/bgpd", "vtysh"],
    });
    let path = std::env::var_os("PATH").unwrap_or_default();
    let missing: Vec<&str> = programs
        .into_iter()
        .filter(|p| {
            if p.starts_with('/') {
                !Path::new(p).is_file()
            } else {
                !std::env::split_paths(&path).any(|d| d.join(p).is_file())
            }
        })
        .collect();
    anyhow::ensure!(
        missing.is_empty(),
        "not installed: {} (run scripts/install-deps.sh)",
        missing.join(", ")
    );
    // Upstream Kubernetes, built from source by scripts/build-kubernetes.sh (install-deps runs it).
    for program in kube_ovn_lab::kubernetes::BINARIES {
        kube_ovn_lab::kubernetes::binary(program)?;
    }
    for schema in [NB_SCHEMA, SB_SCHEMA, VSWITCH_SCHEMA] {
        anyhow::ensure!(
            Path::new(schema).is_file(),
            "{schema} is missing (run scripts/install-deps.sh)"
        );
    }
    Ok(())
}
