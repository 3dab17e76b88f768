//! The network config a runtime streams on stdin: one plugin's entry (the runtime folds the
//! list's `name` and `cniVersion` into it), with Kube-OVN's own keys.

use std::path::PathBuf;

use kube_ovn_api::wire::{DAEMON_SOCKET, Dns, Route};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{CniError, ErrorCode};
use crate::version::CniVersion;

/// The plugin `type` (and IPAM `type`) this binary answers to.
pub const PLUGIN_TYPE: &str = "kube-ovn";
/// The provider of the primary network.
pub const DEFAULT_PROVIDER: &str = "ovn";

/// The `ipam` object, when another main plugin (macvlan, ...) uses us for addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct IpamConf {
    /// IPAM plugin type; ours is `kube-ovn`.
    #[serde(rename = "type", default)]
    pub ipam_type: String,
    /// Daemon socket.
    #[serde(default)]
    pub server_socket: String,
    /// Network provider (`<nad>.<namespace>[.<provider>]`).
    #[serde(default)]
    pub provider: String,
    /// Extra routes.
    #[serde(default)]
    pub routes: Option<Vec<Route>>,
}

/// One entry of GC's `cni.dev/valid-attachments`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Attachment {
    /// Container the attachment belongs to.
    #[serde(rename = "containerID")]
    pub container_id: String,
    /// Interface name inside it.
    pub ifname: String,
}

/// The network config, as decoded. Unknown keys are ignored: chained plugins and runtimes add
/// their own, and the spec says a plugin should tolerate them.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NetConf {
    /// Spec version of this config and of the answer we owe.
    #[serde(rename = "cniVersion", default)]
    pub cni_version: String,
    /// Network name.
    #[serde(default)]
    pub name: String,
    /// Plugin type: `kube-ovn`, or the main plugin that uses us as IPAM.
    #[serde(rename = "type", default)]
    pub plugin_type: String,
    /// Result of the previous plugin, or of the ADD being checked or deleted.
    #[serde(rename = "prevResult", default)]
    pub prev_result: Option<Value>,
    /// Capability arguments from the runtime (`portMappings`, ...); the daemon needs none yet.
    #[serde(rename = "runtimeConfig", default)]
    pub runtime_config: Option<Value>,
    /// Daemon socket (Kube-OVN key).
    #[serde(default)]
    pub server_socket: String,
    /// Network provider (Kube-OVN key).
    #[serde(default)]
    pub provider: String,
    /// Extra routes (Kube-OVN key).
    #[serde(default)]
    pub routes: Option<Vec<Route>>,
    /// IPAM section.
    #[serde(default)]
    pub ipam: Option<IpamConf>,
    /// DNS settings.
    #[serde(default)]
    pub dns: Option<Dns>,
    /// SR-IOV device (Kube-OVN key).
    #[serde(rename = "deviceID", default)]
    pub device_id: String,
    /// SR-IOV VF driver (Kube-OVN key).
    #[serde(default)]
    pub vf_driver: String,
    /// DPDK vhost-user volume (Kube-OVN key).
    #[serde(default)]
    pub vhost_user_socket_volume_name: String,
    /// DPDK vhost-user socket name (Kube-OVN key).
    #[serde(default)]
    pub vhost_user_socket_name: String,
    /// DPDK vhost-user socket owner (Kube-OVN key).
    #[serde(default)]
    pub vhost_user_socket_consumption: String,
    /// GC only: attachments the runtime still uses.
    #[serde(rename = "cni.dev/valid-attachments", default)]
    pub valid_attachments: Option<Vec<Attachment>>,
    /// Present only when someone piped a whole conflist; we refuse that.
    #[serde(default)]
    plugins: Option<Value>,
}

/// A decoded and checked config, with Kube-OVN's defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The raw config.
    pub conf: NetConf,
    /// Its version.
    pub version: CniVersion,
    /// True when another plugin uses us for IPAM only: the result then has no interfaces.
    pub ipam_only: bool,
    /// Daemon socket to call.
    pub socket: PathBuf,
    /// Provider to send (defaults to `ovn`).
    pub provider: String,
    /// Routes to send.
    pub routes: Option<Vec<Route>>,
}

/// Decodes stdin. Not JSON, or JSON of the wrong shape, is code 6; a version we do not speak
/// is code 1; a config that decodes but cannot be ours is code 7.
pub fn parse(stdin: &[u8]) -> Result<Parsed, CniError> {
    let value: Value = serde_json::from_slice(stdin).map_err(|e| {
        CniError::new(ErrorCode::DecodingFailure, "network config on stdin is not JSON")
            .with_details(e.to_string())
    })?;
    if !value.is_object() {
        return Err(CniError::new(
            ErrorCode::DecodingFailure,
            "network config on stdin is not a JSON object",
        ));
    }
    let conf: NetConf = serde_json::from_value(value).map_err(|e| {
        CniError::new(ErrorCode::DecodingFailure, "cannot decode the network config")
            .with_details(e.to_string())
    })?;
    if conf.plugins.is_some() {
        return Err(CniError::new(
            ErrorCode::InvalidNetworkConfig,
            "got a network configuration list; a runtime passes one plugin's entry at a time",
        ));
    }
    let version = CniVersion::parse(&conf.cni_version)?;
    if conf.name.is_empty() {
        return Err(CniError::new(
            ErrorCode::InvalidNetworkConfig,
            "network config has no \"name\"",
        ));
    }
    // Kube-OVN's rule: when the main plugin is not us, our settings live under `ipam`.
    let ipam_only = conf.plugin_type != PLUGIN_TYPE;
    let (socket, provider, routes) = if ipam_only {
        let ipam = conf
            .ipam
            .as_ref()
            .filter(|ipam| ipam.ipam_type == PLUGIN_TYPE)
            .ok_or_else(|| {
                CniError::new(
                    ErrorCode::InvalidNetworkConfig,
                    format!(
                        "type is {:?} and ipam.type is not {PLUGIN_TYPE:?}: this config is not for kube-ovn",
                        conf.plugin_type
                    ),
                )
            })?;
        (
            ipam.server_socket.clone(),
            ipam.provider.clone(),
            ipam.routes.clone(),
        )
    } else {
        (
            conf.server_socket.clone(),
            conf.provider.clone(),
            conf.routes.clone(),
        )
    };
    let socket = if socket.is_empty() {
        DAEMON_SOCKET.to_owned()
    } else {
        socket
    };
    let provider = if provider.is_empty() {
        DEFAULT_PROVIDER.to_owned()
    } else {
        provider
    };
    Ok(Parsed {
        conf,
        version,
        ipam_only,
        socket: PathBuf::from(socket),
        provider,
        routes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_ovn_conflist_entry() {
        let p = parse(
            br#"{"cniVersion":"0.3.1","name":"kube-ovn","type":"kube-ovn",
                 "server_socket":"/run/openvswitch/kube-ovn-daemon.sock",
                 "runtimeConfig":{"portMappings":[]},"somethingElse":1}"#,
        )
        .unwrap();
        assert_eq!(p.version, CniVersion::V0_3_1);
        assert!(!p.ipam_only);
        assert_eq!(p.provider, "ovn");
        assert_eq!(p.socket, PathBuf::from(DAEMON_SOCKET));
        assert!(p.conf.runtime_config.is_some());
    }

    #[test]
    fn ipam_use_takes_settings_from_ipam() {
        let p = parse(
            br#"{"cniVersion":"1.0.0","name":"attach","type":"macvlan","master":"eth1",
                 "ipam":{"type":"kube-ovn","server_socket":"/tmp/d.sock","provider":"attach.default",
                         "routes":[{"dst":"10.0.0.0/8","gw":"172.17.0.1"}]}}"#,
        )
        .unwrap();
        assert!(p.ipam_only);
        assert_eq!(p.provider, "attach.default");
        assert_eq!(p.socket, PathBuf::from("/tmp/d.sock"));
        assert_eq!(p.routes.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn bad_configs() {
        let cases: &[(&[u8], ErrorCode)] = &[
            (b"", ErrorCode::DecodingFailure),
            (b"{not json", ErrorCode::DecodingFailure),
            (b"[1]", ErrorCode::DecodingFailure),
            (br#"{"cniVersion":1}"#, ErrorCode::DecodingFailure),
            (
                br#"{"cniVersion":"0.2.0","name":"n","type":"kube-ovn"}"#,
                ErrorCode::IncompatibleVersion,
            ),
            (
                br#"{"name":"n","type":"kube-ovn"}"#,
                ErrorCode::IncompatibleVersion,
            ),
            (
                br#"{"cniVersion":"1.0.0","type":"kube-ovn"}"#,
                ErrorCode::InvalidNetworkConfig,
            ),
            (
                br#"{"cniVersion":"1.0.0","name":"n","type":"bridge"}"#,
                ErrorCode::InvalidNetworkConfig,
            ),
            (
                br#"{"cniVersion":"1.0.0","name":"n","plugins":[{"type":"kube-ovn"}]}"#,
                ErrorCode::InvalidNetworkConfig,
            ),
        ];
        for (input, code) in cases {
            let err = parse(input).unwrap_err();
            assert_eq!(err.code, *code, "{}: {err}", String::from_utf8_lossy(input));
        }
    }
}
