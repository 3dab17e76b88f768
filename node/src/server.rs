//! The CNI server on the daemon's unix socket (Kube-OVN's `/api/v1/add` and `/api/v1/del`, our
//! `/api/v1/check`, `/api/v1/status`, `/api/v1/gc`), and the metrics and health listener.
//! Each request runs in a span naming the pod, serialized per pod. The server owns the per-pod
//! locks and the sending side of the QoS recheck channel; the NIC work is [`Nic`]'s.
//!
//! The socket is created with mode 0600 whatever the daemon's umask ([`bind_socket`]): only
//! root (kubelet's runtime running the shim) may ask for ADD and DEL, which create and delete
//! ports on the node.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube_ovn_api::wire::{ADD_PATH, CniRequest, DEL_PATH, ErrorResponse};
use kube_ovn_support::{KeyGuard, KeyLocks};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::error::DaemonError;
use crate::metrics::Metrics;
use crate::nic::Nic;
use crate::ovs::Ovs;
use crate::plan;
use kube_ovn_cni::shim::{CHECK_PATH, GC_PATH, GcRequest, STATUS_PATH};

/// The CNI server task's state: what the handlers share.
pub struct CniServer {
    /// ADD, DEL, CHECK and GC.
    nic: Nic,
    /// Serializes work per pod: ADD, DEL and CHECK of one pod never overlap.
    locks: KeyLocks,
    /// Pods whose ADD finished, for the QoS task to look at again.
    qos_recheck: mpsc::UnboundedSender<String>,
    /// Each request's outcome and duration.
    metrics: Metrics,
}

impl CniServer {
    /// The server over `nic`, telling the QoS task through `qos_recheck` of every finished ADD.
    pub fn new(nic: Nic, qos_recheck: mpsc::UnboundedSender<String>, metrics: Metrics) -> Self {
        Self {
            nic,
            locks: KeyLocks::default(),
            qos_recheck,
            metrics,
        }
    }

    async fn lock(&self, key: &str) -> KeyGuard<'_> {
        self.locks.lock(key).await
    }

    /// Asks the QoS task to compare pod `key`'s port with its annotations again (after ADD: a
    /// rate changed while the port was being made would otherwise wait for the next change).
    fn recheck_qos(&self, key: String) {
        // Only fails when the task is gone, at shutdown.
        let _ = self.qos_recheck.send(key);
    }
}

/// Whether the daemon can serve ADD now (CNI STATUS, `/readyz`): the bridge is in the database.
pub fn ready(ovs: &Ovs) -> Result<(), DaemonError> {
    if ovs.interface(ovs.bridge()).is_none() {
        return Err(DaemonError::BadRequest(format!(
            "bridge {} is not in the Open_vSwitch database (is ovsdb-server up?)",
            ovs.bridge()
        )));
    }
    Ok(())
}

type Shared = State<Arc<CniServer>>;

/// The CNI socket's mode: owner (root) only.
pub const SOCKET_MODE: u32 = 0o600;

/// Binds and listens on the CNI socket at `path` with mode [`SOCKET_MODE`], replacing a socket
/// a previous run left, with no moment at which another user could connect.
///
/// A socket's file gets the socket inode's mode less the umask, and a `chmod` after `bind`
/// would leave a window before it (changing the umask would race with the process's other
/// threads). So the mode is set on the socket itself (`fchmod` on its descriptor) before
/// `bind`: Linux creates the file with it (`unix_bind` uses the socket inode's mode, which
/// starts as 0777), and the umask can only take bits away from 0600.
pub fn bind_socket(path: &std::path::Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::PermissionsExt;

    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    // A socket file left by a previous run would make bind fail.
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let socket = tokio::net::UnixSocket::new_stream()?;
    // `File::set_permissions` is `fchmod` on the descriptor; the File holds a duplicate of
    // the socket's, so dropping it closes only the duplicate.
    std::fs::File::from(socket.as_fd().try_clone_to_owned()?)
        .set_permissions(std::fs::Permissions::from_mode(SOCKET_MODE))?;
    socket.bind(path)?;
    socket.listen(1024)
}

/// The CNI routes.
pub fn cni_router(server: Arc<CniServer>) -> Router {
    Router::new()
        .route(ADD_PATH, post(add))
        .route(DEL_PATH, post(del))
        .route(CHECK_PATH, post(check))
        .route(STATUS_PATH, post(status))
        .route(GC_PATH, post(gc))
        .with_state(server)
}

/// `/metrics`, `/healthz`, `/livez`, `/readyz` (ready when ADD can be served: CNI STATUS).
pub fn metrics_endpoints(metrics: Metrics, ovs: Ovs) -> kube_ovn_support::endpoints::Endpoints {
    kube_ovn_support::endpoints::Endpoints::new(
        move || std::future::ready(metrics.encode()),
        move || ready(&ovs).map_err(|e| e.to_string()),
    )
}

fn pod_key(request: &CniRequest) -> String {
    if request.pod_name.is_empty() {
        format!("container/{}", request.container_id)
    } else {
        format!("{}/{}", request.pod_namespace, request.pod_name)
    }
}

fn failure(error: &DaemonError) -> Response {
    let status = StatusCode::from_u16(error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        status,
        Json(ErrorResponse {
            error: error.to_string(),
        }),
    )
        .into_response()
}

/// Runs `f` under the pod's lock and span, and records the outcome.
async fn handle<F>(node: &Arc<CniServer>, method: &'static str, request: &CniRequest, f: F) -> Response
where
    F: Future<Output = Result<Response, DaemonError>>,
{
    let started = Instant::now();
    let key = pod_key(request);
    let span = tracing::info_span!("cni", pod = %key, method, container = %request.container_id, ifname = %request.if_name);
    let response = async {
        let _serialized = node.lock(&key).await;
        match f.await {
            Ok(response) => {
                tracing::info!(took_ms = started.elapsed().as_millis(), "done");
                response
            }
            Err(e) => {
                tracing::warn!(error = %e, took_ms = started.elapsed().as_millis(), "failed");
                failure(&e)
            }
        }
    }
    .instrument(span)
    .await;
    node.metrics
        .op(method, response.status().as_u16(), started.elapsed());
    response
}

async fn add(State(node): Shared, Json(request): Json<CniRequest>) -> Response {
    let n = node.clone();
    handle(&node, "add", &request.clone(), async move {
        for (field, value) in [
            ("pod_name", &request.pod_name),
            ("pod_namespace", &request.pod_namespace),
            ("container_id", &request.container_id),
            ("net_ns", &request.net_ns),
            ("if_name", &request.if_name),
        ] {
            if value.is_empty() {
                return Err(DaemonError::BadRequest(format!("ADD request has no {field}")));
            }
        }
        // Before anything is made: a name Linux refuses, or that is not ASCII, fails here with
        // the request's fault (400, CNI error 7), not halfway through.
        plan::check_ifname(&request.if_name).map_err(|e| DaemonError::BadRequest(e.to_string()))?;
        n.nic.plans.check_provider(&request.provider)?;
        let plan = n.nic.add_pod_nic(&request).await?;
        n.recheck_qos(format!("{}/{}", request.pod_namespace, request.pod_name));
        Ok((StatusCode::OK, Json(plan::response(&plan, &request))).into_response())
    })
    .await
}

async fn del(State(node): Shared, Json(request): Json<CniRequest>) -> Response {
    let n = node.clone();
    handle(&node, "del", &request.clone(), async move {
        n.nic.del_nic(&request.container_id, &request.if_name).await?;
        n.nic.del_legacy_nic(&request).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
    .await
}

async fn check(State(node): Shared, Json(request): Json<CniRequest>) -> Response {
    let n = node.clone();
    handle(&node, "check", &request.clone(), async move {
        let pod = format!("{}/{}", request.pod_namespace, request.pod_name);
        let Some(plan) = n.nic.plans.plan_now(&request)? else {
            return Err(DaemonError::CheckFailed {
                pod,
                problem: "the controller's annotations are not complete".into(),
            });
        };
        n.nic
            .check_nic(&plan, &request.net_ns)
            .await
            .map_err(|problem| DaemonError::CheckFailed { pod, problem })?;
        Ok(StatusCode::OK.into_response())
    })
    .await
}

async fn status(State(node): Shared) -> Response {
    let started = Instant::now();
    let response = match ready(&node.nic.ovs) {
        Ok(()) => StatusCode::OK.into_response(),
        Err(e) => failure(&e),
    };
    node.metrics
        .op("status", response.status().as_u16(), started.elapsed());
    response
}

async fn gc(State(node): Shared, Json(request): Json<GcRequest>) -> Response {
    let started = Instant::now();
    let provider = if request.provider.is_empty() {
        "ovn".to_owned()
    } else {
        request.provider.clone()
    };
    // A live sandbox keeps its port under today's name and under the name an older daemon gave
    // it (a node upgraded with pods running).
    let keep: BTreeSet<String> = request
        .valid_attachments
        .iter()
        .flat_map(|a| {
            let ifname = if a.ifname.is_empty() { "eth0" } else { &a.ifname };
            std::iter::once(plan::host_nic_name(&a.container_id, ifname))
                .chain(plan::legacy_host_nic_name(&a.container_id, ifname))
        })
        .collect();
    let response = match node
        .nic
        .gc(&provider, &keep)
        .instrument(tracing::info_span!("gc", provider))
        .await
    {
        Ok(removed) => {
            tracing::info!(
                ?removed,
                "garbage-collected ports of sandboxes the runtime no longer has"
            );
            (StatusCode::OK, Json(serde_json::json!({ "removed": removed }))).into_response()
        }
        Err(e) => failure(&e),
    };
    node.metrics
        .op("gc", response.status().as_u16(), started.elapsed());
    response
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[tokio::test]
    async fn the_socket_is_0600_under_umask_000_and_replaces_a_stale_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/kube-ovn-daemon.sock");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "left by a previous run").unwrap();
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::empty());
        let bound = bind_socket(&path);
        nix::sys::stat::umask(old);
        let listener = bound.unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o600, "mode {mode:o}");
        // It listens, under its own name (what `ss -x` and /proc/net/unix show).
        let _client = tokio::net::UnixStream::connect(&path).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        assert_eq!(server.local_addr().unwrap().as_pathname(), Some(path.as_path()));
    }
}
