//! Objects that leave a controller's cache, as the cache sees them leave: a watch `Delete`, and
//! an object missing from a relist (a watch that expired with 410 Gone lists again, and the
//! deletions in between never arrive as events; the reflector just swaps its store).
//!
//! Deletions are taken from the very stream that fills the reconcilers' cache, after the cache
//! has applied them, rather than from a watch of their own. With a second watch, a pod deleted
//! between the two lists at start-up was in the reconcilers' cache but never reported deleted (the
//! deletion watch listed after it was gone), and the collector at start-up, reading that cache,
//! took it for alive: its port, IP CR and address stayed until the next periodic collection.
//! Here, every object the cache has held and no longer holds is reported exactly once, after the
//! cache forgot it; objects gone before the first list are the start-up collector's.

use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc;

/// The objects of `before` that `now` no longer holds, or holds as another object of the same
/// name (deleted and created again meanwhile: a different UID).
pub fn vanished<K>(before: &[Arc<K>], now: impl Fn(&ObjectRef<K>) -> Option<Arc<K>>) -> Vec<Arc<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    before
        .iter()
        .filter(|old| now(&ObjectRef::from_obj(&***old)).is_none_or(|new| new.meta().uid != old.meta().uid))
        .cloned()
        .collect()
}

/// Watches a reflector's events (called after the store applied each one) and sends every
/// object that left the store. The receiver gets them in the order the store lost them.
pub struct Departures<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    /// The store's content when a relist began (the store swaps only when it is done).
    before_relist: Option<Vec<Arc<K>>>,
    sink: mpsc::UnboundedSender<Arc<K>>,
}

impl<K> Departures<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    pub fn new(store: Store<K>) -> (Self, mpsc::UnboundedReceiver<Arc<K>>) {
        let (sink, rx) = mpsc::unbounded_channel();
        (
            Self {
                store,
                before_relist: None,
                sink,
            },
            rx,
        )
    }

    /// Takes one event the store has just applied.
    pub fn observe(&mut self, event: &watcher::Event<K>) {
        if self.sink.is_closed() {
            // Nobody acts on this kind's departures.
            return;
        }
        let gone = match event {
            watcher::Event::Delete(obj) => vec![Arc::new(obj.clone())],
            // A relist begins: the store still holds what it held.
            watcher::Event::Init => {
                self.before_relist = Some(self.store.state());
                Vec::new()
            }
            // The store now holds the new list.
            watcher::Event::InitDone => match self.before_relist.take() {
                Some(before) => vanished(&before, |r| self.store.get(r)),
                None => Vec::new(),
            },
            watcher::Event::Apply(_) | watcher::Event::InitApply(_) => Vec::new(),
        };
        for obj in gone {
            // A closed receiver: the controller is stopping.
            let _ = self.sink.send(obj);
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::runtime::reflector;
    use serde_json::json;

    use std::collections::HashMap;

    use super::*;

    fn pod(name: &str, uid: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns", "uid": uid}})).unwrap()
    }

    fn by_ref(objects: &[Arc<Pod>]) -> HashMap<ObjectRef<Pod>, Arc<Pod>> {
        objects
            .iter()
            .map(|o| (ObjectRef::from_obj(&**o), o.clone()))
            .collect()
    }

    fn names(pods: &[Arc<Pod>]) -> Vec<String> {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| format!("{}/{}", p.name_any(), p.uid().unwrap_or_default()))
            .collect();
        n.sort();
        n
    }

    #[test]
    fn vanished_are_the_missing_and_the_replaced() {
        let before: Vec<Arc<Pod>> = [pod("a", "1"), pod("b", "2"), pod("c", "3")]
            .into_iter()
            .map(Arc::new)
            .collect();
        let now = by_ref(&[Arc::new(pod("a", "1")), Arc::new(pod("c", "9"))]);
        let gone = vanished(&before, |r| now.get(r).cloned());
        assert_eq!(names(&gone), ["b/2", "c/3"]);
        assert!(vanished(&[], |r| now.get(r).cloned()).is_empty());
    }

    /// Drives a reflector's store the way the watcher does and collects what `Departures` sends.
    fn run(events: impl IntoIterator<Item = watcher::Event<Pod>>) -> Vec<Arc<Pod>> {
        let (reader, mut writer) = reflector::store::<Pod>();
        let (mut departures, mut rx) = Departures::new(reader);
        for e in events {
            writer.apply_watcher_event(&e);
            departures.observe(&e);
        }
        let mut out = Vec::new();
        while let Ok(p) = rx.try_recv() {
            out.push(p);
        }
        out
    }

    #[test]
    fn a_first_list_reports_nothing_and_a_delete_reports_the_object() {
        use watcher::Event::{Delete, Init, InitApply, InitDone};
        let gone = run(vec![
            Init,
            InitApply(pod("a", "1")),
            InitApply(pod("b", "2")),
            InitDone,
            Delete(pod("a", "1")),
        ]);
        assert_eq!(names(&gone), ["a/1"]);
    }

    #[test]
    fn a_relist_reports_what_it_lost_and_what_was_replaced() {
        use watcher::Event::{Apply, Init, InitApply, InitDone};
        let gone = run(vec![
            Init,
            InitApply(pod("a", "1")),
            InitApply(pod("b", "2")),
            InitDone,
            Apply(pod("c", "3")),
            // The watch expired (410) and lists again: b went, c came back as a new pod.
            Init,
            InitApply(pod("a", "1")),
            InitApply(pod("c", "4")),
            InitDone,
        ]);
        assert_eq!(names(&gone), ["b/2", "c/3"]);
    }
}
