//! When a refusal is reported: once, and only after it lasted a while.
//!
//! The routes task recomputes on every change, so the same refusal comes back on every pass; an
//! event each time would be a storm. And the speaker sees a pod's annotations and its IP record
//! through two watches, so an honest pod may be seen for a moment with its address but not yet
//! its record (or in a subnet not yet Ready): only what outlasts that deserves an event. So a
//! refusal is reported once it has been present in every pass for `after`, and not again while
//! it lasts; one that goes away and comes back is reported again.
//!
//! Pure: the caller gives the time.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// Which refusals to report, pass after pass.
#[derive(Debug)]
pub struct ReportOnce<K> {
    after: Duration,
    /// Every refusal of the last pass, with when it was first seen.
    seen: BTreeMap<K, Instant>,
    reported: BTreeSet<K>,
}

/// What a pass says to do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Due {
    /// Indices (into the pass's keys) to report now.
    pub now: Vec<usize>,
    /// When the next refusal still waiting will be due (the caller wakes then).
    pub next: Option<Instant>,
}

impl<K: Ord + Clone> ReportOnce<K> {
    /// Reports what lasted `after`.
    pub fn new(after: Duration) -> Self {
        ReportOnce {
            after,
            seen: BTreeMap::new(),
            reported: BTreeSet::new(),
        }
    }

    /// The refusals of one pass (by key; repeats count once), at `now`.
    pub fn pass<'a>(&mut self, keys: impl IntoIterator<Item = &'a K>, now: Instant) -> Due
    where
        K: 'a,
    {
        let mut seen = BTreeMap::new();
        let mut due = Due::default();
        for (i, key) in keys.into_iter().enumerate() {
            if seen.contains_key(key) {
                continue;
            }
            let first = self.seen.get(key).copied().unwrap_or(now);
            seen.insert(key.clone(), first);
            if self.reported.contains(key) {
                continue;
            }
            let at = first + self.after;
            if now >= at {
                due.now.push(i);
                self.reported.insert(key.clone());
            } else {
                due.next = Some(due.next.map_or(at, |n| n.min(at)));
            }
        }
        self.reported.retain(|k| seen.contains_key(k));
        self.seen = seen;
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AFTER: Duration = Duration::from_secs(5);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_lasting_refusal_is_reported_once_after_the_delay() {
        let t0 = Instant::now();
        let mut r = ReportOnce::new(AFTER);
        let keys = ["forged", "forged", "mcast"];
        assert_eq!(
            r.pass(&keys, t0),
            Due {
                now: vec![],
                next: Some(t0 + AFTER)
            }
        );
        assert_eq!(r.pass(&keys, t0 + secs(2)).next, Some(t0 + AFTER));
        // Due: each key once (the repeat is not reported twice).
        assert_eq!(r.pass(&keys, t0 + AFTER).now, [0, 2]);
        // Not again, however many passes follow.
        assert_eq!(r.pass(&keys, t0 + secs(60)), Due::default());
    }

    #[test]
    fn a_passing_refusal_is_never_reported() {
        let t0 = Instant::now();
        let mut r = ReportOnce::new(AFTER);
        r.pass(&["honest"], t0);
        // The IP record arrived: no refusal any more.
        assert_eq!(r.pass(&[], t0 + secs(1)), Due::default());
        // Seen again later: the delay starts over.
        assert_eq!(r.pass(&["honest"], t0 + secs(6)).next, Some(t0 + secs(11)));
        assert!(r.pass(&["honest"], t0 + secs(10)).now.is_empty());
    }

    #[test]
    fn a_refusal_that_comes_back_is_reported_again() {
        let t0 = Instant::now();
        let mut r = ReportOnce::new(AFTER);
        r.pass(&["x"], t0);
        assert_eq!(r.pass(&["x"], t0 + AFTER).now, [0]);
        r.pass(&[], t0 + secs(7));
        r.pass(&["x"], t0 + secs(8));
        assert_eq!(r.pass(&["x"], t0 + secs(13)).now, [0]);
    }
}
