//! One shim invocation, from environment and stdin to what goes on stdout, with the daemon
//! behind a [`Transport`] so the whole flow is testable without a socket.
//!
//! Daemon endpoints: ADD and DEL use Kube-OVN's `/api/v1/add` and `/api/v1/del`. CHECK, STATUS
//! and GC are ours ([`CHECK_PATH`], [`STATUS_PATH`], [`GC_PATH`]): Kube-OVN's daemon has no
//! such endpoints and its shim answers neither STATUS nor GC, so a `404` there means "a daemon
//! that does not do this" and the shim reports success rather than fail every CHECK.

use std::io;
use std::path::{Path, PathBuf};

use kube_ovn_api::wire::{ADD_PATH, CniRequest, CniResponse, DEL_PATH};
pub use kube_ovn_api::wire::{CHECK_PATH, GC_PATH, STATUS_PATH};
use serde::{Deserialize, Serialize};

use crate::config::{self, Attachment, Parsed};
use crate::env::{CniEnv, Command};
use crate::error::{CniError, ErrorCode};
use crate::http::{HttpError, HttpResponse};
use crate::version::{CniVersion, version_reply};

/// How the shim reaches the daemon.
pub trait Transport {
    /// POSTs `body` to `path` on the daemon listening at `socket`.
    fn post(&mut self, socket: &Path, path: &str, body: &[u8]) -> Result<HttpResponse, TransportError>;
}

/// Why a request never got an HTTP answer.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// Nothing listens at the socket (not created yet, or the daemon is down).
    #[error("cannot connect to {}: {source}", socket.display())]
    Connect {
        /// The socket path.
        socket: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The connection broke mid-request.
    #[error("request to {} failed: {source}", socket.display())]
    Io {
        /// The socket path.
        socket: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The answer was not HTTP.
    #[error(transparent)]
    Http(#[from] HttpError),
}

/// GC's request body: who we are and what the runtime still uses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcRequest {
    /// Plugin type from the config.
    pub cni_type: String,
    /// Network provider.
    pub provider: String,
    /// Attachments to keep; the daemon may drop any other of this provider's.
    pub valid_attachments: Vec<Attachment>,
}

/// What to print, and in which version to label an error.
#[derive(Debug)]
pub struct Outcome {
    /// Version for the error JSON: the config's when it was readable, else the latest.
    pub cni_version: &'static str,
    /// `Ok(Some(json))` to print, `Ok(None)` to print nothing, or the error.
    pub result: Result<Option<String>, CniError>,
    /// Lines for stderr.
    pub log: Vec<String>,
}

/// Runs one invocation.
pub fn run(lookup: impl Fn(&str) -> Option<String>, stdin: &[u8], transport: &mut impl Transport) -> Outcome {
    let mut log = Vec::new();
    let mut cni_version = sniff_version(stdin);
    let result = invoke(lookup, stdin, transport, &mut cni_version, &mut log);
    Outcome {
        cni_version: cni_version.as_str(),
        result,
        log,
    }
}

/// The config's version if it has a readable one we speak, so even an environment error is
/// labelled in the version the runtime expects.
fn sniff_version(stdin: &[u8]) -> CniVersion {
    #[derive(Deserialize)]
    struct Probe {
        #[serde(rename = "cniVersion")]
        cni_version: String,
    }
    serde_json::from_slice::<Probe>(stdin)
        .ok()
        .and_then(|p| CniVersion::parse(&p.cni_version).ok())
        .unwrap_or(CniVersion::LATEST)
}

fn invoke(
    lookup: impl Fn(&str) -> Option<String>,
    stdin: &[u8],
    transport: &mut impl Transport,
    cni_version: &mut CniVersion,
    log: &mut Vec<String>,
) -> Result<Option<String>, CniError> {
    let env = CniEnv::from_lookup(lookup)?;
    if env.command == Command::Version {
        let reply = version_reply(stdin);
        return Ok(Some(serde_json::to_string(&reply).unwrap_or_default()));
    }
    let parsed = config::parse(stdin)?;
    *cni_version = parsed.version;
    let needs = match env.command {
        Command::Check => CniVersion::V0_4_0,
        Command::Status | Command::Gc => CniVersion::V1_1_0,
        _ => CniVersion::V0_3_0,
    };
    if parsed.version < needs {
        return Err(CniError::new(
            ErrorCode::IncompatibleVersion,
            format!(
                "config version {} does not allow {} (needs {})",
                parsed.version.as_str(),
                env.command.as_str(),
                needs.as_str()
            ),
        ));
    }
    let (path, body) = request_for(&env, &parsed)?;
    log.push(format!(
        "{} container={} ifname={} pod={}/{}: POST {path} on {}",
        env.command.as_str(),
        env.container_id,
        env.ifname,
        env.args.pod_namespace().unwrap_or_default(),
        env.args.pod_name().unwrap_or_default(),
        parsed.socket.display(),
    ));
    let unavailable = if env.command == Command::Status {
        ErrorCode::NotAvailable
    } else {
        // Kube-OVN's shim answers every failed RPC with 11 too: the daemon may be starting.
        ErrorCode::TryAgainLater
    };
    let response = transport.post(&parsed.socket, path, &body).map_err(|e| {
        let msg = match &e {
            TransportError::Connect { socket, .. } => format!(
                "kube-ovn-daemon socket {} is not reachable; is kube-ovn-daemon running on this node?",
                socket.display()
            ),
            TransportError::Io { .. } | TransportError::Http(_) => "RPC to kube-ovn-daemon failed".to_owned(),
        };
        CniError::new(unavailable, msg).with_details(e.to_string())
    })?;
    if (200..300).contains(&response.status) {
        if env.command != Command::Add {
            return Ok(None);
        }
        let answer: CniResponse = serde_json::from_slice(&response.body).map_err(|e| {
            CniError::new(
                ErrorCode::DecodingFailure,
                "cannot decode kube-ovn-daemon's answer to ADD",
            )
            .with_details(e.to_string())
        })?;
        if !answer.error.is_empty() {
            return Err(CniError::new(unavailable, answer.error));
        }
        return Ok(Some(crate::result::add_result(
            &answer,
            parsed.version,
            &env.netns,
            parsed.ipam_only,
        )));
    }
    if response.status == 404 && matches!(env.command, Command::Check | Command::Status | Command::Gc) {
        log.push(format!(
            "the daemon has no {path}; treating {} as passed",
            env.command.as_str()
        ));
        return Ok(None);
    }
    // 400 is the daemon rejecting what we sent (e.g. a provider bound to no subnet): the
    // config is at fault, retrying will not help.
    let code = if response.status == 400 && env.command != Command::Status {
        ErrorCode::InvalidNetworkConfig
    } else {
        unavailable
    };
    Err(
        CniError::new(code, daemon_message(&response)).with_details(format!(
            "POST {path} on {}: HTTP {} {}",
            parsed.socket.display(),
            response.status,
            response.reason
        )),
    )
}

fn request_for(env: &CniEnv, parsed: &Parsed) -> Result<(&'static str, Vec<u8>), CniError> {
    let conf = &parsed.conf;
    if env.command == Command::Gc {
        let gc = GcRequest {
            cni_type: conf.plugin_type.clone(),
            provider: parsed.provider.clone(),
            valid_attachments: conf.valid_attachments.clone().unwrap_or_default(),
        };
        return Ok((GC_PATH, serde_json::to_vec(&gc).unwrap_or_default()));
    }
    let pod = |key: &str, value: Option<&str>| -> Result<String, CniError> {
        match value {
            Some(v) if !v.is_empty() => Ok(v.to_owned()),
            // DEL must work even when the runtime lost the pod's identity; the daemon keys
            // the teardown on container ID and interface.
            _ if env.command != Command::Add && env.command != Command::Check => Ok(String::new()),
            _ => Err(CniError::new(
                ErrorCode::InvalidEnvironment,
                format!("CNI_ARGS has no {key}; kube-ovn needs the pod's name and namespace"),
            )),
        }
    };
    let request = CniRequest {
        cni_type: conf.plugin_type.clone(),
        pod_name: pod("K8S_POD_NAME", env.args.pod_name())?,
        pod_namespace: pod("K8S_POD_NAMESPACE", env.args.pod_namespace())?,
        container_id: env.container_id.clone(),
        net_ns: env.netns.clone(),
        if_name: env.ifname.clone(),
        provider: parsed.provider.clone(),
        routes: parsed.routes.clone(),
        dns: conf.dns.clone().unwrap_or_default(),
        vf_driver: conf.vf_driver.clone(),
        device_id: conf.device_id.clone(),
        vhost_user_socket_volume_name: conf.vhost_user_socket_volume_name.clone(),
        vhost_user_socket_name: conf.vhost_user_socket_name.clone(),
        vhost_user_socket_consumption: conf.vhost_user_socket_consumption.clone(),
    };
    let path = match env.command {
        Command::Add => ADD_PATH,
        Command::Del => DEL_PATH,
        Command::Check => CHECK_PATH,
        _ => STATUS_PATH,
    };
    Ok((path, serde_json::to_vec(&request).unwrap_or_default()))
}

/// The daemon's own words: `error` from its JSON body (ours and Kube-OVN's both use that
/// member), else the body as text, else the status line.
fn daemon_message(response: &HttpResponse) -> String {
    #[derive(Deserialize)]
    struct WithError {
        #[serde(default)]
        error: String,
    }
    if let Ok(body) = serde_json::from_slice::<WithError>(&response.body)
        && !body.error.is_empty()
    {
        return body.error;
    }
    let text = String::from_utf8_lossy(&response.body);
    let text = text.trim();
    if text.is_empty() {
        format!(
            "kube-ovn-daemon answered HTTP {} {}",
            response.status, response.reason
        )
    } else {
        // Bounded so a runaway body does not flood the runtime's logs.
        text.chars().take(1024).collect()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// Records requests and answers each with the same canned response.
    struct Canned {
        status: u16,
        body: String,
        sent: Vec<(PathBuf, String, Value)>,
    }

    impl Transport for Canned {
        fn post(&mut self, socket: &Path, path: &str, body: &[u8]) -> Result<HttpResponse, TransportError> {
            self.sent.push((
                socket.to_owned(),
                path.to_owned(),
                serde_json::from_slice(body).unwrap(),
            ));
            Ok(HttpResponse {
                status: self.status,
                reason: String::new(),
                body: self.body.clone().into_bytes(),
            })
        }
    }

    fn lookup(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn ipam_use_sends_ipam_settings_and_returns_an_ipam_result() {
        let mut daemon = Canned {
            status: 200,
            body: json!({"ips":[{"protocol":"IPv4","ip":"172.17.0.9","cidr":"172.17.0.0/16"}],
                         "mac_address":"","routes":null,"mtu":0,"nicname":"net1","dns":{},"error":""})
            .to_string(),
            sent: Vec::new(),
        };
        let stdin = json!({"cniVersion":"0.4.0","name":"attach","type":"macvlan",
                           "ipam":{"type":"kube-ovn","server_socket":"/tmp/d.sock","provider":"attach.default.ovn"}});
        let out = run(
            lookup(&[
                ("CNI_COMMAND", "ADD"),
                ("CNI_CONTAINERID", "c1"),
                ("CNI_NETNS", "/n"),
                ("CNI_IFNAME", "net1"),
                ("CNI_ARGS", "K8S_POD_NAME=p;K8S_POD_NAMESPACE=ns"),
            ]),
            stdin.to_string().as_bytes(),
            &mut daemon,
        );
        let result: Value = serde_json::from_str(&out.result.unwrap().unwrap()).unwrap();
        assert_eq!(
            result,
            json!({"cniVersion":"0.4.0","ips":[{"version":"4","address":"172.17.0.9/16"}],"dns":{}})
        );
        let (socket, path, body) = &daemon.sent[0];
        assert_eq!((socket.to_str(), path.as_str()), (Some("/tmp/d.sock"), ADD_PATH));
        assert_eq!(body["cni_type"], "macvlan");
        assert_eq!(body["provider"], "attach.default.ovn");
    }

    #[test]
    fn gc_sends_the_valid_attachments() {
        let mut daemon = Canned {
            status: 200,
            body: String::new(),
            sent: Vec::new(),
        };
        let stdin = json!({"cniVersion":"1.1.0","name":"kube-ovn","type":"kube-ovn",
                           "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]});
        let out = run(
            lookup(&[("CNI_COMMAND", "GC")]),
            stdin.to_string().as_bytes(),
            &mut daemon,
        );
        assert_eq!(out.result.unwrap(), None);
        let (socket, path, body) = &daemon.sent[0];
        assert_eq!(
            (socket.to_str(), path.as_str()),
            (Some(kube_ovn_api::wire::DAEMON_SOCKET), GC_PATH)
        );
        assert_eq!(
            body,
            &json!({"cni_type":"kube-ovn","provider":"ovn","valid_attachments":[{"containerID":"c1","ifname":"eth0"}]})
        );
    }

    #[test]
    fn gc_on_1_0_is_an_incompatible_version() {
        let mut daemon = Canned {
            status: 200,
            body: String::new(),
            sent: Vec::new(),
        };
        let stdin = br#"{"cniVersion":"1.0.0","name":"kube-ovn","type":"kube-ovn"}"#;
        let out = run(lookup(&[("CNI_COMMAND", "GC")]), stdin, &mut daemon);
        assert_eq!(out.result.unwrap_err().code, ErrorCode::IncompatibleVersion);
        assert_eq!(out.cni_version, "1.0.0");
        assert!(daemon.sent.is_empty());
    }
}
