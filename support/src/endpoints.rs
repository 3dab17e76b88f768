//! The HTTP endpoints every daemon serves on its metrics port, with one behaviour for all three:
//! `/metrics` in OpenMetrics text (or 404 when metrics are disabled), `/healthz` (the process
//! answers), `/livez` (the process answers and, with [`Endpoints::supervised`], every background
//! task still runs: 503 naming the tasks that stopped), `/readyz` (200, or 503 with the reason).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::registry::Registry;

/// The media type of [`encode`]'s output (Prometheus negotiates it; the text format is a subset).
pub const OPENMETRICS_CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The OpenMetrics text of a registry.
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

type Scrape = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;
type Readiness = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// What the endpoints answer with.
#[derive(Clone)]
pub struct Endpoints {
    scrape: Option<Scrape>,
    ready: Readiness,
    live: Option<crate::Supervisor>,
}

impl Endpoints {
    /// `/metrics` answers with what `scrape` returns (run at each scrape, so it may refresh
    /// gauges first); `/readyz` asks `ready`.
    pub fn new<F, Fut>(scrape: F, ready: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = String> + Send + 'static,
    {
        Self {
            scrape: Some(Arc::new(move || Box::pin(scrape()))),
            ready: Arc::new(ready),
            live: None,
        }
    }

    /// `/livez` answers 503, naming them, once any of `supervisor`'s tasks stopped.
    #[must_use]
    pub fn supervised(mut self, supervisor: &crate::Supervisor) -> Self {
        self.live = Some(supervisor.clone());
        self
    }

    /// `/metrics` answers 404 (`--enable-metrics=false`); health endpoints stay.
    #[must_use]
    pub fn without_metrics(mut self) -> Self {
        self.scrape = None;
        self
    }

    /// The router: `/metrics`, `/healthz`, `/livez`, `/readyz`.
    pub fn router(self) -> axum::Router {
        let Endpoints { scrape, ready, live } = self;
        axum::Router::new()
            .route(
                "/metrics",
                get(move || {
                    let scrape = scrape.clone();
                    async move {
                        match scrape {
                            Some(scrape) => metrics_response(scrape().await),
                            None => (StatusCode::NOT_FOUND, "metrics are disabled\n").into_response(),
                        }
                    }
                }),
            )
            .route("/healthz", get(|| async { "ok\n" }))
            .route(
                "/livez",
                get(move || {
                    let result = live.as_ref().map_or(Ok(()), crate::Supervisor::check);
                    async move { answer(result) }
                }),
            )
            .route(
                "/readyz",
                get(move || {
                    let ready = ready.clone();
                    async move { answer(ready()) }
                }),
            )
    }

    /// Serves on a bound listener until the future is dropped.
    pub async fn serve(self, listener: tokio::net::TcpListener) -> std::io::Result<()> {
        self.serve_with(listener, axum::Router::new()).await
    }

    /// [`Self::serve`], with a daemon's own routes beside the common ones (the controller's
    /// `/debug/ipam`).
    pub async fn serve_with(
        self,
        listener: tokio::net::TcpListener,
        extra: axum::Router,
    ) -> std::io::Result<()> {
        tracing::info!(addr = %listener.local_addr()?, "metrics and health endpoints");
        axum::serve(listener, self.router().merge(extra)).await
    }
}

fn answer(result: Result<(), String>) -> (StatusCode, String) {
    match result {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("{why}\n")),
    }
}

fn metrics_response(text: String) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    use super::*;

    async fn get(router: &axum::Router, path: &str) -> (StatusCode, Option<String>, String) {
        let response = router
            .clone()
            .oneshot(
                axum::http::Request::get(path)
                    .body(axum::body::Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
        (status, content_type, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn answers_metrics_health_and_readiness() {
        let mut registry = Registry::default();
        let counter = Counter::<u64>::default();
        registry.register("things", "Things counted", counter.clone());
        let registry = Arc::new(registry);
        let ready = Arc::new(AtomicBool::new(false));
        let endpoints = {
            let (registry, ready) = (registry.clone(), ready.clone());
            Endpoints::new(
                move || {
                    let registry = registry.clone();
                    async move { encode(&registry) }
                },
                move || {
                    ready
                        .load(Ordering::SeqCst)
                        .then_some(())
                        .ok_or_else(|| "caches not synced".to_owned())
                },
            )
        };
        let router = endpoints.clone().router();
        counter.inc();
        let (status, content_type, body) = get(&router, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(content_type.as_deref(), Some(OPENMETRICS_CONTENT_TYPE));
        assert!(body.contains("things_total 1"), "{body}");
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
        assert_eq!(get(&router, "/livez").await.0, StatusCode::OK);
        let (status, _, body) = get(&router, "/readyz").await;
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::SERVICE_UNAVAILABLE, "caches not synced\n")
        );
        ready.store(true, Ordering::SeqCst);
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        let disabled = endpoints.without_metrics().router();
        assert_eq!(get(&disabled, "/metrics").await.0, StatusCode::NOT_FOUND);
        assert_eq!(get(&disabled, "/healthz").await.0, StatusCode::OK);
    }

    #[tokio::test]
    async fn a_panicking_supervised_task_fails_livez_with_its_name() {
        let supervisor = crate::Supervisor::new();
        let router = Endpoints::new(|| async { String::new() }, || Ok(()))
            .supervised(&supervisor)
            .router();
        supervisor.spawn("gateway", std::future::pending());
        assert_eq!(get(&router, "/livez").await.0, StatusCode::OK);
        supervisor.spawn("node", async { panic!("no ovn0") });
        let (status, _, body) = tokio::time::timeout(std::time::Duration::from_secs(5), async {
            loop {
                let answer = get(&router, "/livez").await;
                if answer.0 != StatusCode::OK {
                    return answer;
                }
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("/livez failed within 5 s of the panic");
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(body, "background tasks stopped: task node panicked: no ovn0\n");
        // Liveness only: readiness and health keep their own answers.
        assert_eq!(get(&router, "/readyz").await.0, StatusCode::OK);
        assert_eq!(get(&router, "/healthz").await.0, StatusCode::OK);
    }
}
