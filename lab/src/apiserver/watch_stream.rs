//! A watch as HTTP: newline-delimited JSON events in a chunked 200 response, bookmarks when asked,
//! `timeoutSeconds`, and a 410 as an ERROR event (as the real server sends it, so clients relist).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::http::{Query, error_response};
use super::registry::Resource;
use super::store::{WatchEvent, WatchRequest};
use super::{ServerState, table};

fn line(kind: &str, object: &Value) -> Bytes {
    let mut bytes = serde_json::to_vec(&json!({"type": kind, "object": object})).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

/// How a watch is sent.
#[derive(Debug, Default)]
pub struct WatchOptions {
    /// `allowWatchBookmarks`: periodic BOOKMARK events.
    pub bookmarks: bool,
    /// `sendInitialEvents`: a bookmark marks the end of the initial events.
    pub initial_end: bool,
    /// `timeoutSeconds`.
    pub timeout: Option<Duration>,
    /// `Accept: ...;as=Table` (with the query, for `includeObject`): each event's object is a
    /// one-row table; only the first carries the column definitions, as the real server's
    /// watch encoder does (`NoHeaders` after the first).
    pub table: Option<Query>,
}

fn event_line(e: &WatchEvent, res: &Resource, table: Option<&Query>, headers_sent: &mut bool) -> Bytes {
    let Some(q) = table else {
        return line(e.kind.as_str(), &e.object);
    };
    let mut t = table::table(
        res,
        std::slice::from_ref(&e.object),
        e.rv,
        q,
        jiff::Timestamp::now(),
    );
    if std::mem::replace(headers_sent, true) {
        t["columnDefinitions"] = Value::Null;
    }
    line(e.kind.as_str(), &t)
}

fn bookmark(res: &Resource, rv: u64, initial_end: bool) -> Bytes {
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        metadata["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        "BOOKMARK",
        &json!({"kind": res.kind, "apiVersion": res.api_version(), "metadata": metadata}),
    )
}

fn stream_response(rx: mpsc::Receiver<Bytes>) -> Response {
    let body = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(body),
    )
        .into_response()
}

pub fn respond(state: &Arc<ServerState>, request: &WatchRequest, options: WatchOptions) -> Response {
    let WatchOptions {
        bookmarks,
        initial_end,
        timeout,
        table,
    } = options;
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    let mut watcher = match state.store.watch(request) {
        Ok(w) => w,
        Err(e) if e.code == 410 => {
            let _ = tx.try_send(line("ERROR", &e.status()));
            return stream_response(rx);
        }
        Err(e) => return error_response(&e),
    };
    let res = request.resource.clone();
    let interval = state.config.bookmark_interval;
    tokio::spawn(async move {
        let mut headers_sent = false;
        for event in std::mem::take(&mut watcher.initial) {
            if tx
                .send(event_line(&event, &res, table.as_ref(), &mut headers_sent))
                .await
                .is_err()
            {
                return;
            }
        }
        if initial_end && bookmarks && tx.send(bookmark(&res, watcher.initial_rv, true)).await.is_err() {
            return;
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
        loop {
            tokio::select! {
                event = watcher.next() => match event {
                    Some(e) => if tx.send(event_line(&e, &res, table.as_ref(), &mut headers_sent)).await.is_err() { return },
                    None => return,
                },
                _ = tick.tick(), if bookmarks => {
                    if tx.send(bookmark(&res, watcher.progress_rv, false)).await.is_err() { return }
                }
                () = async { if let Some(d) = deadline { tokio::time::sleep_until(d).await } else { std::future::pending().await } } => return,
                () = tx.closed() => return,
            }
        }
    });
    stream_response(rx)
}
