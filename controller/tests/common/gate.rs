//! The controller's traffic to the test's kube-apiserver, steered by the test to drive an
//! interleaving instead of hoping for it. A tower layer ([`Steer`]) sits in front of a real
//! client's stack (TLS, authentication): it records every request (`METHOD path?query`), and
//! through a [`Traffic`] a [`Gate`] holds the requests of one kind (a list or a watch of one
//! resource path) until the test opens it, and [`Traffic::cut_watches`] ends the watch streams of
//! a path now being answered, as a dropped connection would (the client then watches again from
//! the last resourceVersion it saw, and the real server answers that watch).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use axum::http::{Method, Request, Response};
use futures::StreamExt;
use futures::future::BoxFuture;
use kube::client::{Body, DynBody};
use tokio::sync::watch;
use tower::{BoxError, Layer, Service, ServiceExt};

use super::Env;

/// A list (`GET` without `watch`) or a watch (`GET ...?watch=true`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    List,
    Watch,
}

fn verb_of<B>(req: &Request<B>) -> Option<Verb> {
    if req.method() != Method::GET {
        return None;
    }
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
    Some(if watch { Verb::Watch } else { Verb::List })
}

/// Holds matching requests while closed; counts what it saw.
#[derive(Clone)]
pub struct Gate {
    verb: Verb,
    path: String,
    open: watch::Sender<bool>,
    /// Requests that matched (held or not).
    seen: Arc<AtomicUsize>,
    /// Responses to matching requests that have been produced.
    answered: Arc<AtomicUsize>,
}

impl Gate {
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    pub fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }

    pub fn answered(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    fn matches<B>(&self, req: &Request<B>) -> bool {
        verb_of(req) == Some(self.verb) && req.uri().path() == self.path
    }
}

/// Per watched path, a counter of cuts.
type Cuts = Vec<(String, watch::Sender<u64>)>;

#[derive(Clone, Default)]
struct Rules {
    gates: Arc<Mutex<Vec<Gate>>>,
    /// Per path, a counter of cuts; a watch ends when its path's counter moves.
    cuts: Arc<Mutex<Cuts>>,
}

impl Rules {
    fn cut_signal(&self, path: &str) -> watch::Receiver<u64> {
        let mut cuts = self.cuts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, tx)) = cuts.iter().find(|(p, _)| p == path) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(0);
        cuts.push((path.to_owned(), tx));
        rx
    }

    fn gates_for<B>(&self, req: &Request<B>) -> Vec<Gate> {
        self.gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|g| g.matches(req))
            .cloned()
            .collect()
    }
}

/// The layer: records into `log`, and passes `rules` if any.
#[derive(Clone)]
pub struct Steer {
    log: Arc<Mutex<Vec<String>>>,
    rules: Option<Rules>,
}

impl Steer {
    /// Records every request in `log`, steers nothing.
    pub fn recording(log: Arc<Mutex<Vec<String>>>) -> Self {
        Self { log, rules: None }
    }
}

impl<S> Layer<S> for Steer {
    type Service = Steered<S>;

    fn layer(&self, inner: S) -> Steered<S> {
        Steered {
            inner: Arc::new(tokio::sync::Mutex::new(inner)),
            steer: self.clone(),
        }
    }
}

/// The client's stack behind a [`Steer`]. The inner stack is shared (a held request must not
/// keep the others from being sent), so each request takes it only to be sent.
pub struct Steered<S> {
    inner: Arc<tokio::sync::Mutex<S>>,
    steer: Steer,
}

impl<S> Service<Request<Body>> for Steered<S>
where
    S: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<axum::body::Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is the inner stack's, awaited per request once its gates let it through.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        self.steer
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(format!("{} {}", req.method(), req.uri()));
        let inner = self.inner.clone();
        let rules = self.steer.rules.clone();
        Box::pin(async move {
            let gates = rules.as_ref().map(|r| r.gates_for(&req)).unwrap_or_default();
            for g in &gates {
                g.seen.fetch_add(1, Ordering::SeqCst);
                let mut open = g.open.subscribe();
                // The sender lives in the gate we hold: this ends when the test opens it.
                let _ = open.wait_for(|o| *o).await;
            }
            let cut = match (&rules, verb_of(&req)) {
                (Some(rules), Some(Verb::Watch)) => Some(rules.cut_signal(req.uri().path())),
                _ => None,
            };
            let sent = {
                let mut stack = inner.lock().await;
                stack.ready().await?.call(req)
            };
            let response = sent.await;
            for g in &gates {
                g.answered.fetch_add(1, Ordering::SeqCst);
            }
            let (parts, body) = response?.into_parts();
            let body = axum::body::Body::new(body);
            let Some(mut cut) = cut else {
                return Ok(Response::from_parts(parts, body));
            };
            let at = *cut.borrow_and_update();
            let ended = async move {
                let _ = cut.wait_for(|n| *n != at).await;
            };
            let body = axum::body::Body::from_stream(body.into_data_stream().take_until(ended));
            Ok(Response::from_parts(parts, body))
        })
    }
}

/// The gates and cuts of one test, for the clients made by [`Traffic::client`].
pub struct Traffic {
    steer: Steer,
    rules: Rules,
}

impl Traffic {
    /// Steers clients of `env`'s API server; their requests are also recorded in
    /// [`Env::requests`].
    pub fn new(env: &Env) -> Self {
        let rules = Rules::default();
        Self {
            steer: Steer {
                log: env.requests.clone(),
                rules: Some(rules.clone()),
            },
            rules,
        }
    }

    /// A closed gate for `verb` requests to exactly `path` (e.g. `/api/v1/pods`), effective for
    /// every request made from now on through [`Traffic::client`].
    pub fn gate(&self, verb: Verb, path: &str) -> Gate {
        let gate = Gate {
            verb,
            path: path.to_owned(),
            open: watch::channel(false).0,
            seen: Arc::default(),
            answered: Arc::default(),
        };
        self.rules
            .gates
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(gate.clone());
        gate
    }

    /// Ends every watch of `path` being answered now; later watches are not affected.
    pub fn cut_watches(&self, path: &str) {
        let cuts = self.rules.cuts.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, tx)) = cuts.iter().find(|(p, _)| p == path) {
            tx.send_modify(|n| *n += 1);
        }
    }

    /// An administrator's client of `env`'s API server whose requests pass the gates.
    pub fn client(&self, env: &Env) -> kube::Client {
        env.client_with(&self.steer)
    }
}
