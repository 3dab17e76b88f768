//! Watches: replay from a resourceVersion (410 once history is gone), or the current state as
//! synthetic ADDED events, then live changes; selectors turn updates into ADDED/DELETED as objects
//! enter or leave them.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;

use super::{Change, EventType, Inner};
use crate::apiserver::errors::ApiError;
use crate::apiserver::meta;
use crate::apiserver::registry::Resource;
use crate::apiserver::selectors::{FieldSelector, LabelSelector};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchStart {
    /// `resourceVersion` unset or `"0"`: the current objects as ADDED, then changes.
    Current,
    /// Changes after this resourceVersion.
    After(u64),
}

#[derive(Debug, Clone)]
pub struct WatchRequest {
    pub resource: Arc<Resource>,
    pub namespace: Option<String>,
    pub start: WatchStart,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

/// One event as a watch sends it.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: EventType,
    pub object: Arc<Value>,
    pub rv: u64,
}

/// A started watch: events to send first, then live ones.
pub struct Watcher {
    pub initial: Vec<WatchEvent>,
    /// The resourceVersion the initial events bring the client to.
    pub initial_rv: u64,
    live: mpsc::UnboundedReceiver<Arc<Change>>,
    filter: WatchRequest,
    /// The last resourceVersion this watch has seen, matching or not (for bookmarks).
    pub progress_rv: u64,
}

impl WatchRequest {
    fn in_scope(&self, change: &Change) -> bool {
        change.key.group == self.resource.group
            && change.key.plural == self.resource.plural
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| change.key.namespace == ns)
    }

    fn selects(&self, obj: &Value) -> bool {
        self.labels.matches_object(obj) && self.fields.matches(obj)
    }

    /// What this watch sends for a change, if anything.
    fn translate(&self, change: &Change) -> Option<WatchEvent> {
        if !self.in_scope(change) {
            return None;
        }
        let now = self.selects(&change.object);
        let kind = match change.kind {
            EventType::Added if now => EventType::Added,
            EventType::Deleted if now => EventType::Deleted,
            EventType::Modified => match (change.old.as_deref().is_some_and(|o| self.selects(o)), now) {
                (true, true) => EventType::Modified,
                (false, true) => EventType::Added,
                (true, false) => {
                    // Leaving the selector: the real server (etcd3 watcher and watch cache alike)
                    // sends DELETED with the previous content, at the change's resourceVersion.
                    let mut last = change.old.as_deref().cloned().unwrap_or(Value::Null);
                    meta::metadata_mut(&mut last)
                        .insert("resourceVersion".into(), change.rv.to_string().into());
                    return Some(WatchEvent {
                        kind: EventType::Deleted,
                        object: Arc::new(last),
                        rv: change.rv,
                    });
                }
                (false, false) => return None,
            },
            _ => return None,
        };
        Some(WatchEvent {
            kind,
            object: change.object.clone(),
            rv: change.rv,
        })
    }
}

impl Watcher {
    /// The next live event for this watch; `None` when the store is gone.
    pub async fn next(&mut self) -> Option<WatchEvent> {
        loop {
            let change = self.live.recv().await?;
            self.progress_rv = change.rv;
            // A watch from a resourceVersion not reached yet starts after it, not at the present.
            if let WatchStart::After(rv) = self.filter.start
                && change.rv <= rv
            {
                continue;
            }
            if let Some(event) = self.filter.translate(&change) {
                return Some(event);
            }
        }
    }
}

impl Inner {
    pub(super) fn watch(&mut self, request: &WatchRequest) -> Result<Watcher, ApiError> {
        let initial = match request.start {
            WatchStart::Current => self
                .objects
                .iter()
                .filter(|(k, _)| k.group == request.resource.group && k.plural == request.resource.plural)
                .filter(|(k, _)| request.namespace.as_deref().is_none_or(|ns| k.namespace == ns))
                .filter(|(_, v)| request.selects(v))
                .map(|(_, v)| WatchEvent {
                    kind: EventType::Added,
                    object: v.clone(),
                    rv: self.rv,
                })
                .collect(),
            WatchStart::After(rv) => {
                if rv < self.compacted_rv {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {rv} ({})",
                        self.compacted_rv
                    )));
                }
                self.history
                    .iter()
                    .filter(|c| c.rv > rv)
                    .filter_map(|c| request.translate(c))
                    .collect()
            }
        };
        let (tx, live) = mpsc::unbounded_channel();
        self.watchers.push(tx);
        Ok(Watcher {
            initial,
            initial_rv: self.rv,
            live,
            filter: request.clone(),
            progress_rv: self.rv,
        })
    }
}
