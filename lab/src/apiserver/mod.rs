//! A Kubernetes API server emulator, for tests and the lab; production uses a real cluster.
//!
//! ```text
//!   kube::Client (in process, tower) ──┐
//!   kube::Client / kubectl (TCP) ──────┴─▶ http::handle ─▶ Store (Mutex) ─▶ history ring ─▶ watchers
//!                                            │                 │                    (watch_stream)
//!                                            │                 └─▶ state file (persist)
//!                                            ├─ content, protobuf (request bodies, Accept)
//!                                            ├─ discovery, openapi, table (kubectl)
//!                                            ├─ scale (the /scale subresource)
//!                                            ├─ binding (pods/binding, for schedulers)
//!                                            ├─ patch, managed (apply, strategic merge)
//!                                            └─ schema, field_validation (CRD admission),
//!                                               strategy (built-in create rules, defaults)
//! ```
//!
//! In front of it all, `auth` (tokens → users) and `rbac` (users × stored RBAC objects →
//! allowed) when `--token-auth-file` / `--authorization-mode=RBAC` ask for them.
//!
//! What it covers and what it does not is in `docs/testing.md`.

pub mod auth;
pub mod binding;
mod builtins;
pub mod content;
pub mod discovery;
pub mod errors;
pub mod field_validation;
pub mod http;
pub mod managed;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod rbac;
pub mod registry;
pub mod scale;
pub mod schema;
pub mod selectors;
pub mod store;
pub mod strategy;
pub mod table;
pub mod tls;
mod watch_stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tower::ServiceExt;

pub use errors::ApiError;
pub use store::{Store, StoreConfig};

#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    pub store: StoreConfig,
    /// How often a watch that allows bookmarks gets one.
    pub bookmark_interval: Duration,
    /// Tokens and authorization mode (default: no tokens, everything allowed).
    pub auth: auth::AuthConfig,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            store: StoreConfig::default(),
            bookmark_interval: Duration::from_secs(10),
            auth: auth::AuthConfig::default(),
        }
    }
}

pub struct ServerState {
    pub store: Store,
    pub config: ApiServerConfig,
    pub auth: auth::Auth,
}

/// The emulator: a store and the HTTP API over it.
#[derive(Clone)]
pub struct ApiServer {
    state: Arc<ServerState>,
}

impl ApiServer {
    pub fn new(mut config: ApiServerConfig) -> Result<Self, ApiError> {
        config.bookmark_interval = config.bookmark_interval.max(Duration::from_millis(10));
        let store = Store::new(&config.store)?;
        let auth = auth::Auth::new(config.auth.clone());
        Ok(Self {
            state: Arc::new(ServerState { store, config, auth }),
        })
    }

    pub fn store(&self) -> &Store {
        &self.state.store
    }

    /// The HTTP API as an axum router.
    pub fn router(&self) -> Router {
        Router::new()
            .fallback(http::handle)
            .with_state(self.state.clone())
    }

    /// A `kube::Client` talking to this server in process, without sockets.
    pub fn client(&self) -> kube::Client {
        let service = self
            .router()
            .map_request(|r: axum::http::Request<kube::client::Body>| r.map(axum::body::Body::new));
        kube::Client::new(service, "default")
    }

    /// Like [`ApiServer::client`], authenticated with a bearer token (see `auth`).
    pub fn client_with_token(&self, token: &str) -> kube::Client {
        let value =
            axum::http::HeaderValue::from_str(&format!("Bearer {token}")).expect("a token fits a header");
        let service = self
            .router()
            .map_request(move |r: axum::http::Request<kube::client::Body>| {
                let mut r = r.map(axum::body::Body::new);
                r.headers_mut()
                    .insert(axum::http::header::AUTHORIZATION, value.clone());
                r
            });
        kube::Client::new(service, "default")
    }

    /// Serves HTTP on `listener` until the future is dropped.
    pub async fn serve(&self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        axum::serve(listener, self.router()).await
    }

    /// Serves HTTPS on `listener` until the future is dropped (see [`tls`]).
    pub async fn serve_tls(
        &self,
        listener: tokio::net::TcpListener,
        config: Arc<rustls::ServerConfig>,
    ) -> std::io::Result<()> {
        tls::serve(self.router(), listener, config).await
    }
}

/// A kubeconfig for clients of a server at `addr` (plain HTTP, no credentials: lab only).
pub fn kubeconfig(addr: SocketAddr) -> String {
    kubeconfig_for(addr, None, None)
}

/// A kubeconfig for plain HTTP that authenticates with a bearer `token` (one of the
/// `--token-auth-file`'s). The kube client sends it; kubectl does not (client-go sends
/// credentials only over TLS): give kubectl [`kubeconfig_for`] with a CA.
pub fn kubeconfig_with_token(addr: SocketAddr, token: &str) -> String {
    kubeconfig_for(addr, None, Some(token))
}

/// A kubeconfig for the server at `addr`: HTTPS trusting the certificate file `ca` when given
/// (the self-signed serving certificate of [`tls`]), else plain HTTP; with `token` when given.
pub fn kubeconfig_for(addr: SocketAddr, ca: Option<&std::path::Path>, token: Option<&str>) -> String {
    let quote = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let (scheme, ca_line) = match ca {
        Some(path) => (
            "https",
            format!(
                "    certificate-authority: {}\n",
                quote(&path.display().to_string())
            ),
        ),
        None => ("http", String::new()),
    };
    let user = token.map_or_else(|| "{}".to_owned(), |t| format!("{{token: {}}}", quote(t)));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-ovn-lab\n  cluster:\n    server: {scheme}://{addr}\n{ca_line}\
         users:\n- name: kube-ovn-lab\n  user: {user}\ncontexts:\n- name: kube-ovn-lab\n  context:\n    cluster: kube-ovn-lab\n\
         \x20   user: kube-ovn-lab\n    namespace: default\ncurrent-context: kube-ovn-lab\n"
    )
}
