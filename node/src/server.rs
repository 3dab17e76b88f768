//! The CNI server on the daemon's unix socket (Kube-OVN's `/api/v1/add` and `/api/v1/del`, our
//! `/api/v1/check`, `/api/v1/status`, `/api/v1/gc`), and the metrics and health listener.
//! Each request runs in a span naming the pod, serialized per pod.
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
use k8s_openapi::api::core::v1::Pod;
use kube_ovn_api::wire::{ADD_PATH, CniRequest, DEL_PATH, ErrorResponse};
use tracing::Instrument;

use crate::Node;
use crate::error::DaemonError;
use crate::plan::{self, PlanInputs, Readiness, WaitingFor};
use kube_ovn_cni::shim::{CHECK_PATH, GC_PATH, GcRequest, STATUS_PATH};

type Shared = State<Arc<Node>>;

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
pub fn cni_router(node: Arc<Node>) -> Router {
    Router::new()
        .route(ADD_PATH, post(add))
        .route(DEL_PATH, post(del))
        .route(CHECK_PATH, post(check))
        .route(STATUS_PATH, post(status))
        .route(GC_PATH, post(gc))
        .with_state(node)
}

/// `/metrics`, `/healthz`, `/livez`, `/readyz` (ready when ADD can be served: CNI STATUS).
pub fn metrics_endpoints(node: Arc<Node>) -> kube_ovn_support::endpoints::Endpoints {
    let scraped = node.clone();
    kube_ovn_support::endpoints::Endpoints::new(
        move || std::future::ready(scraped.metrics.encode()),
        move || node.status().map_err(|e| e.to_string()),
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
async fn handle<F>(node: &Arc<Node>, method: &'static str, request: &CniRequest, f: F) -> Response
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
        n.check_provider(&request.provider)?;
        let plan = n.add_pod_nic(&request).await?;
        n.recheck_qos(format!("{}/{}", request.pod_namespace, request.pod_name));
        Ok((StatusCode::OK, Json(plan::response(&plan, &request))).into_response())
    })
    .await
}

async fn del(State(node): Shared, Json(request): Json<CniRequest>) -> Response {
    let n = node.clone();
    handle(&node, "del", &request.clone(), async move {
        n.del_nic(&request.container_id, &request.if_name).await?;
        n.del_legacy_nic(&request).await?;
        Ok(StatusCode::NO_CONTENT.into_response())
    })
    .await
}

async fn check(State(node): Shared, Json(request): Json<CniRequest>) -> Response {
    let n = node.clone();
    handle(&node, "check", &request.clone(), async move {
        let pod = format!("{}/{}", request.pod_namespace, request.pod_name);
        let Some(plan) = n.plan_now(&request)? else {
            return Err(DaemonError::CheckFailed {
                pod,
                problem: "the controller's annotations are not complete".into(),
            });
        };
        n.check_nic(&plan, &request.net_ns)
            .await
            .map_err(|problem| DaemonError::CheckFailed { pod, problem })?;
        Ok(StatusCode::OK.into_response())
    })
    .await
}

async fn status(State(node): Shared) -> Response {
    let started = Instant::now();
    let response = match node.status() {
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

impl Node {
    /// DEL of a NIC an older daemon (or Kube-OVN) named with the legacy shape
    /// ([`plan::legacy_host_nic_name`]), on a node upgraded with pods running. That name could
    /// be shared by another pod's NIC (the collision the new names fix), so the port goes only
    /// when its `external_ids` say it is this pod's (and this sandbox's, when DEL names the
    /// network namespace).
    async fn del_legacy_nic(&self, request: &CniRequest) -> Result<(), DaemonError> {
        let ifname = if request.if_name.is_empty() {
            "eth0"
        } else {
            &request.if_name
        };
        let Some(legacy) = plan::legacy_host_nic_name(&request.container_id, ifname) else {
            return Ok(());
        };
        let Some(iface) = self.ovs.interface(&legacy) else {
            return Ok(());
        };
        let id = |k: &str| iface.external_ids.get(k).map_or("", String::as_str);
        let ours = !request.pod_name.is_empty()
            && id("pod_name") == request.pod_name
            && id("pod_namespace") == request.pod_namespace
            && (request.net_ns.is_empty() || id("pod_netns") == request.net_ns);
        if ours {
            tracing::info!(port = %legacy, "removing the port an older daemon named");
            self.remove_nic(&legacy).await?;
        }
        Ok(())
    }

    /// Kube-OVN: the provider must be `ovn` or some subnet's `spec.provider`.
    fn check_provider(&self, provider: &str) -> Result<(), DaemonError> {
        if provider.is_empty() || provider == "ovn" {
            return Ok(());
        }
        let known = self
            .subnets
            .all()
            .iter()
            .any(|s| s.spec.provider.as_deref().is_some_and(|p| p == provider));
        if known {
            Ok(())
        } else {
            Err(DaemonError::BadRequest(format!(
                "provider {provider} is not bound to any subnet"
            )))
        }
    }

    fn inputs<'a>(&self, request: &'a CniRequest, logical_switch: Option<&str>) -> PlanInputs<'a> {
        let subnet_mtu = logical_switch
            .and_then(|ls| self.subnets.get(ls, None))
            .and_then(|s| s.spec.mtu);
        PlanInputs {
            request,
            subnet_mtu,
            default_mtu: self.config.default_mtu,
        }
    }

    /// The plan from the cached pod as it is now; `None` while annotations are incomplete.
    pub(super) fn plan_now(&self, request: &CniRequest) -> Result<Option<plan::NicPlan>, DaemonError> {
        Ok(match self.readiness_now(request)? {
            Some(Readiness::Ready(plan)) => Some(*plan),
            _ => None,
        })
    }

    /// Where the cached pod stands with its annotations; `None` while the pod is not cached.
    fn readiness_now(&self, request: &CniRequest) -> Result<Option<Readiness>, DaemonError> {
        let pod_id = || format!("{}/{}", request.pod_namespace, request.pod_name);
        let Some(pod) = self.pods.get(&request.pod_name, Some(&request.pod_namespace)) else {
            return Ok(None);
        };
        let annotations = pod.metadata.annotations.as_ref();
        let provider = if request.provider.is_empty() {
            "ovn"
        } else {
            &request.provider
        };
        let ls_key = format!("{provider}.kubernetes.io/logical_switch");
        let logical_switch = annotations.and_then(|a| a.get(&ls_key)).map(String::as_str);
        match plan::readiness(annotations, &self.inputs(request, logical_switch)) {
            Ok(readiness) => Ok(Some(readiness)),
            Err(source) => Err(DaemonError::Annotation {
                pod: pod_id(),
                source,
            }),
        }
    }

    /// Re-evaluates `step` on the cached pod at once and after every pod event, until it gives
    /// a value or `deadline` passes (`Ok(None)`).
    async fn on_pod_changes<T>(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
        mut step: impl FnMut() -> Result<Option<T>, DaemonError>,
    ) -> Result<Option<T>, DaemonError> {
        let mut changes = self.pods.changes();
        loop {
            if let Some(value) = step()? {
                return Ok(Some(value));
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(DaemonError::Timeout {
                        pod: format!("{}/{}", request.pod_namespace, request.pod_name),
                        what: "the pod watch stopped; the daemon is shutting down".into(),
                    });
                }
                Err(_) => return Ok(None),
            }
        }
    }

    /// The cached pod, failing when it is being deleted.
    fn live_pod(&self, request: &CniRequest) -> Result<Option<Arc<Pod>>, DaemonError> {
        let pod = self.pods.get(&request.pod_name, Some(&request.pod_namespace));
        if pod
            .as_ref()
            .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
        {
            return Err(DaemonError::PodGone(format!(
                "{}/{}",
                request.pod_namespace, request.pod_name
            )));
        }
        Ok(pod)
    }

    fn not_seen(&self, request: &CniRequest) -> DaemonError {
        DaemonError::Timeout {
            pod: format!("{}/{}", request.pod_namespace, request.pod_name),
            what: format!(
                "not seen on node {} within {:?}; is it scheduled here?",
                self.config.flags.node_name, self.config.flags.wait_address_timeout
            ),
        }
    }

    /// Waits until the pod is in this node's cache (so it is scheduled here) and alive.
    pub(super) async fn wait_for_pod(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
    ) -> Result<(), DaemonError> {
        self.on_pod_changes(request, deadline, || Ok(self.live_pod(request)?.map(drop)))
            .await?
            .ok_or_else(|| self.not_seen(request))
    }

    /// Waits (on the pod watch, not a poll) for the controller's annotations, until
    /// `deadline`; the timeout says what was missing.
    pub(super) async fn wait_for_plan(
        &self,
        request: &CniRequest,
        deadline: tokio::time::Instant,
    ) -> Result<plan::NicPlan, DaemonError> {
        let started = Instant::now();
        let mut waiting_for: Option<WaitingFor> = None;
        let mut address_seen_at = None;
        let plan = self
            .on_pod_changes(request, deadline, || {
                self.live_pod(request)?;
                // One reading of the annotations per wake-up: the plan, or what is missing.
                match self.readiness_now(request)? {
                    Some(Readiness::Ready(plan)) => {
                        let now = started.elapsed();
                        let address_at = address_seen_at.unwrap_or(now);
                        self.metrics.wait("address", address_at);
                        self.metrics.wait("route", now.saturating_sub(address_at));
                        return Ok(Some(*plan));
                    }
                    Some(Readiness::Waiting(w)) => {
                        if w == WaitingFor::Route && address_seen_at.is_none() {
                            address_seen_at = Some(started.elapsed());
                        }
                        waiting_for = Some(w);
                    }
                    None => {}
                }
                Ok(None)
            })
            .await?;
        if let Some(plan) = plan {
            return Ok(plan);
        }
        let timeout = self.config.flags.wait_address_timeout;
        let provider = if request.provider.is_empty() {
            "ovn"
        } else {
            &request.provider
        };
        let what = match waiting_for {
            None => return Err(self.not_seen(request)),
            Some(WaitingFor::Address) => format!(
                "no address allocated within {timeout:?} (annotation {provider}.kubernetes.io/allocated); see kube-ovn-controller logs"
            ),
            Some(WaitingFor::Route) => format!(
                "route is not ready within {timeout:?} (annotation {provider}.kubernetes.io/routed); see kube-ovn-controller logs"
            ),
        };
        Err(DaemonError::Timeout {
            pod: format!("{}/{}", request.pod_namespace, request.pod_name),
            what,
        })
    }
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
