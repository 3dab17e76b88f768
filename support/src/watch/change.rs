//! What a watch event did to a cache: the object before and after ([`Change`]), deletions
//! included, and a relist (the watch expired, or the first list) turned into the changes it
//! implies — objects that came, changed or went while no watch was open. Pure: the cache is a
//! reflector [`Writer`] and its [`Store`], no I/O.

use std::collections::HashMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher::Event;

/// What a kind's object was before a change and is after it (`None`: absent).
pub struct Change<K> {
    pub old: Option<Arc<K>>,
    pub new: Option<Arc<K>>,
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        Self {
            old: self.old.clone(),
            new: self.new.clone(),
        }
    }
}

impl<K> Debug for Change<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = |o: &Option<Arc<K>>| if o.is_some() { "present" } else { "absent" };
        f.debug_struct("Change")
            .field("old", &state(&self.old))
            .field("new", &state(&self.new))
            .finish()
    }
}

impl<K> Change<K> {
    /// The object was deleted: its last state.
    pub fn deleted(&self) -> Option<&Arc<K>> {
        self.new.is_none().then_some(self.old.as_ref()).flatten()
    }

    /// Whether it appeared, went, or changed in what `differs` compares.
    pub fn matters(&self, differs: impl Fn(&K, &K) -> bool) -> bool {
        match (&self.old, &self.new) {
            (Some(old), Some(new)) => differs(old, new),
            (None, None) => false,
            _ => true,
        }
    }
}

/// The cache's content when a relist began, compared with the list once it is complete.
pub(crate) type BeforeRelist<K> = Option<HashMap<ObjectRef<K>, Arc<K>>>;

/// Applies a watch event to the cache and returns the changes it made. A change is computed
/// after the cache holds it, so a subscriber that reads the cache sees at least that change.
pub(crate) fn apply<K>(
    writer: &mut Writer<K>,
    store: &Store<K>,
    before_relist: &mut BeforeRelist<K>,
    event: &Event<K>,
) -> Vec<Change<K>>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Default + Eq + Hash + Clone,
{
    match event {
        Event::Apply(obj) => {
            let key = ObjectRef::from_obj(obj);
            let old = store.get(&key);
            writer.apply_watcher_event(event);
            vec![Change {
                old,
                new: store.get(&key),
            }]
        }
        Event::Delete(obj) => {
            writer.apply_watcher_event(event);
            vec![Change {
                old: Some(Arc::new(obj.clone())),
                new: None,
            }]
        }
        Event::Init => {
            // What the cache holds now; compared with the list once it is complete.
            *before_relist = Some(
                store
                    .state()
                    .into_iter()
                    .map(|o| (ObjectRef::from_obj(&*o), o))
                    .collect(),
            );
            writer.apply_watcher_event(event);
            Vec::new()
        }
        Event::InitApply(_) => {
            writer.apply_watcher_event(event);
            Vec::new()
        }
        Event::InitDone => {
            writer.apply_watcher_event(event);
            let mut before = before_relist.take().unwrap_or_default();
            let mut out = Vec::new();
            for new in store.state() {
                let old = before.remove(&ObjectRef::from_obj(&*new));
                let same = old
                    .as_ref()
                    .is_some_and(|o| o.meta().resource_version == new.meta().resource_version);
                if !same {
                    out.push(Change { old, new: Some(new) });
                }
            }
            // Gone while the watch was away.
            out.extend(before.into_values().map(|old| Change {
                old: Some(old),
                new: None,
            }));
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(name: &str, rv: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.to_owned());
        cm.metadata.namespace = Some("n".to_owned());
        cm.metadata.resource_version = Some(rv.to_owned());
        cm
    }

    /// (name, old resourceVersion, new resourceVersion) of each change.
    fn seen(changes: &[Change<ConfigMap>]) -> Vec<(String, Option<String>, Option<String>)> {
        let rv = |o: &Option<Arc<ConfigMap>>| o.as_ref().and_then(|o| o.metadata.resource_version.clone());
        let mut out: Vec<_> = changes
            .iter()
            .map(|c| {
                let name = c
                    .new
                    .as_ref()
                    .or(c.old.as_ref())
                    .unwrap()
                    .metadata
                    .name
                    .clone()
                    .unwrap();
                (name, rv(&c.old), rv(&c.new))
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn changes_carry_before_and_after_and_a_relist_tells_what_it_missed() {
        let mut writer = Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let mut relist = None;
        let mut run = |e: Event<ConfigMap>| apply(&mut writer, &store, &mut relist, &e);
        let s = |v: &str| Some(v.to_owned());
        assert!(run(Event::Init).is_empty());
        assert!(run(Event::InitApply(cm("a", "1"))).is_empty());
        assert!(run(Event::InitApply(cm("b", "2"))).is_empty());
        assert_eq!(
            seen(&run(Event::InitDone)),
            [("a".into(), None, s("1")), ("b".into(), None, s("2"))]
        );
        assert_eq!(
            seen(&run(Event::Apply(cm("a", "3")))),
            [("a".into(), s("1"), s("3"))]
        );
        assert_eq!(
            seen(&run(Event::Delete(cm("a", "4")))),
            [("a".into(), s("4"), None)]
        );
        // The watch expired; meanwhile b changed, c came, and nothing else.
        assert!(run(Event::Init).is_empty());
        assert!(run(Event::InitApply(cm("b", "5"))).is_empty());
        assert!(run(Event::InitApply(cm("c", "6"))).is_empty());
        assert_eq!(
            seen(&run(Event::InitDone)),
            [("b".into(), s("2"), s("5")), ("c".into(), None, s("6"))]
        );
        // Once more: c is gone, b unchanged (no change sent for it).
        run(Event::Init);
        run(Event::InitApply(cm("b", "5")));
        assert_eq!(seen(&run(Event::InitDone)), [("c".into(), s("6"), None)]);
    }

    #[test]
    fn a_deletion_is_a_change_with_the_last_state() {
        let mut writer = Writer::<ConfigMap>::default();
        let store = writer.as_reader();
        let mut relist = None;
        apply(&mut writer, &store, &mut relist, &Event::Apply(cm("a", "1")));
        let changes = apply(&mut writer, &store, &mut relist, &Event::Delete(cm("a", "2")));
        let [change] = &changes[..] else {
            panic!("one change for one deletion: {changes:?}")
        };
        let gone = change.deleted().expect("a deletion");
        assert_eq!(gone.metadata.resource_version.as_deref(), Some("2"));
        assert!(change.matters(|_, _| false), "a deletion always matters");
        assert!(store.state().is_empty(), "the cache no longer holds it");
    }
}
