//! A writer's own echoes: the versions of objects it wrote itself, so that the change each write
//! comes back as through the watch does not reconcile the object once more.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::reflector::ObjectRef;

/// The versions of objects this writer wrote itself, so that the change each write comes back
/// as does not reconcile the object once more: that run would start from exactly the state the
/// write produced and find nothing to do. A change by anyone else has another version and is
/// reconciled as usual.
pub struct OwnWrites<K: Resource + 'static>
where
    K::DynamicType: Eq + Hash + Clone,
{
    /// Per object: the version our last write produced, and when.
    versions: std::sync::Mutex<HashMap<ObjectRef<K>, (String, Instant)>>,
}

impl<K: Resource + 'static> Default for OwnWrites<K>
where
    K::DynamicType: Eq + Hash + Clone,
{
    fn default() -> Self {
        Self {
            versions: std::sync::Mutex::default(),
        }
    }
}

impl<K: Resource + 'static> OwnWrites<K>
where
    K::DynamicType: Default + Eq + Hash + Clone,
{
    fn versions(&self) -> std::sync::MutexGuard<'_, HashMap<ObjectRef<K>, (String, Instant)>> {
        self.versions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `obj` is what a write of ours returned.
    pub fn wrote(&self, obj: &K) {
        if let Some(rv) = obj.meta().resource_version.clone() {
            self.versions()
                .insert(ObjectRef::from_obj(obj), (rv, Instant::now()));
        }
    }

    /// Whether `obj` is exactly what a write of ours produced (then forgotten: it comes once).
    pub fn is_echo(&self, obj: &K) -> bool {
        let key = ObjectRef::from_obj(obj);
        let mut versions = self.versions();
        match (versions.get(&key), &obj.meta().resource_version) {
            (Some((ours, _)), Some(rv)) if ours == rv => {
                versions.remove(&key);
                true
            }
            _ => false,
        }
    }

    /// Whether `obj` (a cache's copy) is behind a write of ours made less than `within` ago:
    /// that write has not come back through the watch yet, and `obj` is not it. Watch events
    /// arrive in order, so until the echo has passed, the cache holds an older version. A run
    /// that started from such a copy would redo the write it cannot see (the same patch twice);
    /// the bound keeps an echo that never came (a relist that skipped it) from holding the
    /// object back for long.
    pub fn unseen_write(&self, obj: &K, within: Duration) -> bool {
        let versions = self.versions();
        match (
            versions.get(&ObjectRef::from_obj(obj)),
            &obj.meta().resource_version,
        ) {
            (Some((ours, at)), rv) => rv.as_ref() != Some(ours) && at.elapsed() < within,
            (None, _) => false,
        }
    }

    /// The object is gone: nothing of it will come back.
    pub fn forget(&self, obj: &K) {
        self.versions().remove(&ObjectRef::from_obj(obj));
    }

    pub fn len(&self) -> usize {
        self.versions().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
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
}
