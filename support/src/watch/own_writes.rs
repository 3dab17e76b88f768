//! A writer's own echoes: the changes its own writes come back as through the watch, so that
//! they do not reconcile the object once more.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

/// The writes of one writer (the pod reconciler), so that the change each comes back as does not
/// reconcile the object once more: that run would start from exactly the state the write
/// produced and find nothing to do. A change by anyone else is reconciled as usual.
///
/// A write's echo is told two ways, because the watch and the write's response race: under load
/// the watch can deliver the echo before the writer has the response (and the version) in hand.
/// So the writer first says what it is about to make of the object ([`OwnWrites::expect`]), and
/// a change that leaves the object exactly so, apart from the version and the managed fields the
/// API server stamps, is the echo; once the response is in ([`OwnWrites::wrote`]), the change
/// with its version is too (when the write started from a copy the cache had already moved past,
/// the content differs from the expectation but the change is still only ours).
pub struct OwnWrites<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    writes: std::sync::Mutex<HashMap<ObjectRef<K>, Write<K>>>,
}

/// The last write of ours to one object.
struct Write<K> {
    /// What the object will be once the write is in; `None` once its echo came.
    expected: Option<K>,
    /// The version the write produced, once its response is in.
    version: Option<String>,
    /// The version the echo came with, when it came before the response.
    echoed: Option<String>,
    /// When the write was made.
    at: Instant,
}

impl<K: Resource + 'static> Default for OwnWrites<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn default() -> Self {
        Self {
            writes: std::sync::Mutex::default(),
        }
    }
}

impl<K: Resource + Clone + PartialEq + 'static> OwnWrites<K>
where
    K::DynamicType: Default + Eq + Hash + Clone,
{
    fn writes(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<K>, Write<K>>> {
        self.writes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A write is about to make the object `expected` (its version aside). Replaces what was
    /// known of an earlier write to it.
    pub fn expect(&self, expected: K) {
        let key = ObjectRef::from_obj(&expected);
        let write = Write {
            expected: Some(expected),
            version: None,
            echoed: None,
            at: Instant::now(),
        };
        self.writes().insert(key, write);
    }

    /// `obj` is what a write of ours returned.
    pub fn wrote(&self, obj: &K) {
        let Some(rv) = obj.meta().resource_version.clone() else {
            return;
        };
        let key = ObjectRef::from_obj(obj);
        let mut writes = self.writes();
        match writes.get_mut(&key) {
            // The echo came first: nothing of this write is left to come.
            Some(w) if w.echoed.as_ref() == Some(&rv) => {
                writes.remove(&key);
            }
            Some(w) => {
                w.version = Some(rv);
                w.at = Instant::now();
            }
            None => {
                let write = Write {
                    expected: None,
                    version: Some(rv),
                    echoed: None,
                    at: Instant::now(),
                };
                writes.insert(key, write);
            }
        }
    }

    /// Whether `obj`, as a change brought it, is the echo of a write of ours (then forgotten:
    /// it comes once).
    pub fn is_echo(&self, obj: &K) -> bool {
        let key = ObjectRef::from_obj(obj);
        let rv = obj.meta().resource_version.clone();
        let mut writes = self.writes();
        let Some(w) = writes.get_mut(&key) else {
            return false;
        };
        if rv.is_some() && w.version == rv {
            writes.remove(&key);
            return true;
        }
        if w.expected
            .as_ref()
            .is_some_and(|e| same_apart_from_version(e, obj))
        {
            w.expected = None;
            w.echoed = rv;
            return true;
        }
        false
    }

    /// Whether `obj` (a cache's copy) is behind a write of ours made less than `within` ago:
    /// that write has not come back through the watch yet, and `obj` is not it. Watch events
    /// arrive in order, so until the echo has passed, the cache holds an older version. A run
    /// that started from such a copy would redo the write it cannot see (the same patch twice);
    /// the bound keeps an echo that never came (a relist that skipped it) from holding the
    /// object back for long.
    pub fn unseen_write(&self, obj: &K, within: Duration) -> bool {
        let writes = self.writes();
        let Some(w) = writes.get(&ObjectRef::from_obj(obj)) else {
            return false;
        };
        let rv = &obj.meta().resource_version;
        w.version.is_some() && w.echoed.is_none() && rv != &w.version && w.at.elapsed() < within
    }

    /// The object is gone, or the write failed: nothing of it will come back.
    pub fn forget(&self, obj: &K) {
        self.writes().remove(&ObjectRef::from_obj(obj));
    }

    pub fn len(&self) -> usize {
        self.writes().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `a` and `b` are the same object but for what the API server stamps on every write:
/// the resource version and the managed fields (their timestamps).
fn same_apart_from_version<K: Resource + Clone + PartialEq>(a: &K, b: &K) -> bool {
    let unstamped = |o: &K| {
        let mut o = o.clone();
        o.meta_mut().resource_version = None;
        o.meta_mut().managed_fields = None;
        o
    };
    unstamped(a) == unstamped(b)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::OwnWrites;

    fn cm(rv: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("a".to_owned());
        cm.metadata.namespace = Some("n".to_owned());
        cm.metadata.resource_version = Some(rv.to_owned());
        cm
    }

    #[test]
    fn only_the_version_we_wrote_is_an_echo_and_only_once() {
        let own = OwnWrites::<ConfigMap>::default();
        own.wrote(&cm("5"));
        assert!(!own.is_echo(&cm("4")), "an older version is someone else's");
        assert!(!own.is_echo(&cm("6")), "a later version is someone else's");
        assert!(own.is_echo(&cm("5")));
        assert!(!own.is_echo(&cm("5")), "it comes back once");
        own.wrote(&cm("7"));
        own.forget(&cm("8"));
        assert!(own.is_empty(), "a deleted object is forgotten");
    }

    #[test]
    fn a_copy_behind_our_write_is_told_until_the_echo_or_the_bound() {
        let own = OwnWrites::<ConfigMap>::default();
        let long = std::time::Duration::from_mins(1);
        assert!(!own.unseen_write(&cm("4"), long), "nothing written");
        own.wrote(&cm("5"));
        assert!(
            own.unseen_write(&cm("4"), long),
            "the cache still has the version before ours"
        );
        assert!(!own.unseen_write(&cm("5"), long), "the cache has our write");
        assert!(
            !own.unseen_write(&cm("4"), std::time::Duration::ZERO),
            "past the bound the write is taken as seen"
        );
        assert!(own.is_echo(&cm("5")));
        assert!(
            !own.unseen_write(&cm("4"), long),
            "the echo came: nothing pending"
        );
    }

    fn with_data(rv: &str, value: &str) -> ConfigMap {
        let mut cm = cm(rv);
        cm.data = Some([("k".to_owned(), value.to_owned())].into());
        cm
    }

    #[test]
    fn an_echo_that_comes_before_the_response_is_told_by_its_content() {
        let own = OwnWrites::<ConfigMap>::default();
        let long = std::time::Duration::from_mins(1);
        own.expect(with_data("4", "ours"));
        assert!(
            !own.is_echo(&with_data("5", "theirs")),
            "a change to anything else is someone else's"
        );
        assert!(own.is_echo(&with_data("6", "ours")), "the state we asked for");
        assert!(!own.is_echo(&with_data("6", "ours")), "it comes back once");
        assert!(
            !own.unseen_write(&with_data("6", "ours"), long),
            "the cache has our write"
        );
        own.wrote(&with_data("6", "ours"));
        assert!(
            own.is_empty(),
            "the response of a write already echoed leaves nothing"
        );
    }

    #[test]
    fn an_echo_after_the_response_is_told_by_its_version_whatever_the_content() {
        let own = OwnWrites::<ConfigMap>::default();
        let long = std::time::Duration::from_mins(1);
        // Planned from a copy the cache had moved past: the result differs from the
        // expectation, but the change that carries our version is still only ours.
        own.expect(with_data("4", "ours"));
        own.wrote(&with_data("7", "ours and theirs"));
        assert!(
            own.unseen_write(&with_data("5", "theirs"), long),
            "the echo is still to come"
        );
        assert!(!own.is_echo(&with_data("5", "theirs")), "someone else's");
        assert!(own.is_echo(&with_data("7", "ours and theirs")));
        assert!(own.is_empty());
    }
}
