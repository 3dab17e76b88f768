//! Which unusable remotes were reported at `warn`: an operator sees a remote's first failure and
//! its cause at once, then a reminder now and then, not one line per retry. The bookkeeping
//! ([`Complaints::failed`], [`Complaints::recovered`]) is pure; [`Complaints::report`] logs.

use std::collections::HashMap;

use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::Error;
use crate::remote::Remote;

/// While a remote keeps failing the same way, its warning is repeated at most this often (every
/// attempt is logged at debug).
const REPEAT_WARNING_EVERY: std::time::Duration = std::time::Duration::from_mins(1);

/// Which unusable remotes were reported at `warn`, so an operator sees the first failure and its
/// cause at once and then a reminder now and then, not one line per retry.
#[derive(Default)]
pub(super) struct Complaints {
    /// Per remote: when its failure was last warned about, and how many attempts failed since.
    last: HashMap<String, (Instant, u64)>,
}

impl Complaints {
    /// A remote failed at `now`: `Some(n)` when it should be warned about, `n` being the failures
    /// since the last warning (0 the first time).
    pub(super) fn failed(&mut self, remote: &str, now: Instant) -> Option<u64> {
        match self.last.get_mut(remote) {
            Some((at, since)) if now.duration_since(*at) < REPEAT_WARNING_EVERY => {
                *since += 1;
                None
            }
            Some((at, since)) => {
                let repeats = *since;
                (*at, *since) = (now, 0);
                Some(repeats)
            }
            None => {
                self.last.insert(remote.to_owned(), (now, 0));
                Some(0)
            }
        }
    }

    /// The remote worked: a later failure is news again. `true` when it had been reported.
    pub(super) fn recovered(&mut self, remote: &str) -> bool {
        self.last.remove(remote).is_some()
    }

    /// Logs why remotes could not serve: at `warn` (the first time, then at most every
    /// [`REPEAT_WARNING_EVERY`]) a remote that cannot be reached, stalls or speaks wrongly, and a
    /// server that is not usable when no remote `served`; at `debug` every attempt. A follower
    /// passed over on the way to the leader is normal and stays at `debug`. With `several`
    /// remotes, the next one is tried.
    pub(super) fn report(&mut self, failures: Vec<(&Remote, Error)>, served: bool, several: bool) {
        let next = if several {
            "trying the next remote"
        } else {
            "retrying"
        };
        for (remote, e) in failures {
            let news = !(served && matches!(e, Error::NotUsable { .. }));
            match news
                .then(|| self.failed(&remote.to_string(), Instant::now()))
                .flatten()
            {
                Some(0) => warn!(%remote, error = %e, "OVSDB remote not usable; {next}"),
                Some(failures) => warn!(
                    %remote,
                    error = %e,
                    failures_since_last_warning = failures,
                    "OVSDB remote still not usable; {next}"
                ),
                None => debug!(%remote, error = %e, "OVSDB remote not usable"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_remote_is_warned_about_once_then_now_and_then() {
        let mut c = Complaints::default();
        let t0 = Instant::now();
        assert_eq!(c.failed("tcp:a:1", t0), Some(0), "the first failure is news");
        for s in 1..=5 {
            assert_eq!(c.failed("tcp:a:1", t0 + std::time::Duration::from_secs(s)), None);
        }
        assert_eq!(c.failed("tcp:b:1", t0), Some(0), "each remote is its own news");
        assert_eq!(
            c.failed("tcp:a:1", t0 + REPEAT_WARNING_EVERY),
            Some(5),
            "a reminder counts the failures it did not report"
        );
        assert!(c.recovered("tcp:a:1"));
        assert!(!c.recovered("tcp:a:1"));
        assert_eq!(
            c.failed("tcp:a:1", t0 + REPEAT_WARNING_EVERY),
            Some(0),
            "after recovering, news again"
        );
    }
}
