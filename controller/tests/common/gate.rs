//! A kube client over the in-process API emulator whose traffic the test steers, to drive an
//! interleaving instead of hoping for it: a [`Gate`] holds the requests of one kind (a list or a
//! watch of one resource path) until the test opens it, and [`Traffic::cut_watches`] ends the
//! watch streams of a path now being answered, as a dropped connection would (the client then
//! watches again from the last resourceVersion it saw).

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::body::Body;
use axum::http::{Method, Request, Response};
use futures::StreamExt;
use kube_ovn_lab::apiserver::ApiServer;
use tokio::sync::watch;
use tower::ServiceExt;

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
}

/// The emulator's HTTP API behind [`Gate`]s.
pub struct Traffic {
    api: ApiServer,
    rules: Rules,
}

impl Traffic {
    pub fn new(api: &ApiServer) -> Self {
        Self {
            api: api.clone(),
            rules: Rules::default(),
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

    /// A client whose requests pass the gates.
    pub fn client(&self) -> kube::Client {
        let router = self.api.router();
        let rules = self.rules.clone();
        let service = tower::service_fn(move |req: Request<kube::client::Body>| {
            let router = router.clone();
            let rules = rules.clone();
            async move {
                let req = req.map(Body::new);
                let gates: Vec<Gate> = rules
                    .gates
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .iter()
                    .filter(|g| g.matches(&req))
                    .cloned()
                    .collect();
                for g in &gates {
                    g.seen.fetch_add(1, Ordering::SeqCst);
                    let mut open = g.open.subscribe();
                    // The sender lives in the gate we hold: this ends when the test opens it.
                    let _ = open.wait_for(|o| *o).await;
                }
                let watch_path = (verb_of(&req) == Some(Verb::Watch)).then(|| req.uri().path().to_owned());
                let cut = watch_path.map(|p| rules.cut_signal(&p));
                let response = router
                    .oneshot(req)
                    .await
                    .unwrap_or_else(|e: Infallible| match e {});
                for g in &gates {
                    g.answered.fetch_add(1, Ordering::SeqCst);
                }
                let Some(mut cut) = cut else {
                    return Ok::<_, Infallible>(response);
                };
                let at = *cut.borrow_and_update();
                let (parts, body) = response.into_parts();
                let ended = async move {
                    let _ = cut.wait_for(|n| *n != at).await;
                };
                let body = Body::from_stream(body.into_data_stream().take_until(ended));
                Ok(Response::from_parts(parts, body))
            }
        });
        kube::Client::new(service, "default")
    }
}
