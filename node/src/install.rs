//! Installing the `kube-ovn` binary and its conflist on the node (`--install-cni-config`),
//! atomically, so a runtime never reads half a file.

use std::path::{Path, PathBuf};

use crate::config::Config;
use kube_ovn_cni::version::CniVersion;

/// The conflist for this daemon's socket, declaring `version` (`--cni-conf-version`). Kube-OVN
/// chains `portmap` after `kube-ovn`; we do too when that plugin is installed beside ours.
pub fn conflist(socket: &Path, version: CniVersion, with_portmap: bool) -> serde_json::Value {
    let mut plugins = vec![serde_json::json!({
        "type": "kube-ovn",
        "server_socket": socket.display().to_string(),
    })];
    if with_portmap {
        plugins.push(serde_json::json!({"type": "portmap", "capabilities": {"portMappings": true}}));
    }
    serde_json::json!({
        "cniVersion": version.as_str(),
        "name": "kube-ovn",
        "plugins": plugins,
    })
}

fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let tmp = path.with_extension("kube-ovn-tmp");
    std::fs::write(&tmp, contents)?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))?;
    std::fs::rename(&tmp, path)
}

/// Copies the shim into `--cni-bin-dir` and writes the conflist into `--cni-conf-dir`.
pub fn install(config: &Config) -> std::io::Result<()> {
    let flags = &config.flags;
    let source = if flags.cni_bin.is_empty() {
        std::env::current_exe()?
            .parent()
            .map_or_else(|| PathBuf::from("kube-ovn"), |d| d.join("kube-ovn"))
    } else {
        PathBuf::from(&flags.cni_bin)
    };
    std::fs::create_dir_all(&flags.cni_bin_dir)?;
    std::fs::create_dir_all(&flags.cni_conf_dir)?;
    let binary = std::fs::read(&source)
        .map_err(|e| std::io::Error::new(e.kind(), format!("read {}: {e}", source.display())))?;
    write_atomically(&flags.cni_bin_dir.join("kube-ovn"), &binary, 0o755)?;
    let portmap = flags.cni_bin_dir.join("portmap").exists();
    let text = serde_json::to_vec_pretty(&conflist(&flags.bind_socket, config.cni_conf_version, portmap))
        .expect("JSON value");
    write_atomically(&flags.cni_conf_dir.join(&flags.cni_conf_name), &text, 0o644)
}
