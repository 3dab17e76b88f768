//! What a gateway failover looked like from outside (issue 26): the outside host probes an EIP
//! every few milliseconds while the gateway moves; from its probes, how long requests failed.
//! Pure: the probing and the moving are the `kube-ovn-lab failover` verb's.

use std::time::{Duration, Instant};

/// One probe: when it was sent and whether it was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub sent: Instant,
    pub answered: bool,
}

/// How long requests failed after `trigger`: the longest run of unanswered probes sent at or
/// after it, from its first probe to the next answered one (the move may start a while after the
/// trigger, once the controller and OVN act). Zero when every probe after `trigger` was
/// answered; `None` when a run of failures had not ended by the last probe.
pub fn outage(probes: &[Probe], trigger: Instant) -> Option<Duration> {
    let mut longest = Duration::ZERO;
    let mut failed_since = None;
    for p in probes.iter().filter(|p| p.sent >= trigger) {
        match (p.answered, failed_since) {
            (false, None) => failed_since = Some(p.sent),
            (true, Some(since)) => {
                longest = longest.max(p.sent - since);
                failed_since = None;
            }
            _ => {}
        }
    }
    failed_since.is_none().then_some(longest)
}

/// The nearest-rank `percent`th percentile of `values` (`None` when empty).
pub fn percentile(values: &[Duration], percent: u8) -> Option<Duration> {
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = (usize::from(percent.min(100)) * sorted.len())
        .div_ceil(100)
        .max(1);
    sorted.get(rank - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probes(start: Instant, answered: &[bool]) -> Vec<Probe> {
        answered
            .iter()
            .enumerate()
            .map(|(i, &answered)| Probe {
                sent: start + Duration::from_millis(20 * i as u64),
                answered,
            })
            .collect()
    }

    #[test]
    fn an_outage_runs_from_the_first_failure_after_the_trigger_to_the_next_answer() {
        let t = Instant::now();
        // A failure before the trigger does not count; after it, three failures then answers.
        let p = probes(t, &[true, false, true, true, false, false, false, true, true]);
        assert_eq!(
            outage(&p, t + Duration::from_millis(40)),
            Some(Duration::from_millis(60))
        );
        // Nothing failed after the trigger.
        assert_eq!(outage(&p, t + Duration::from_millis(140)), Some(Duration::ZERO));
        // Still failing at the end.
        let p = probes(t, &[true, false, false]);
        assert_eq!(outage(&p, t), None);
        // Answers right after the trigger (the old path still works until OVN moves the port),
        // then two runs of failures: the longest counts.
        let p = probes(t, &[true, true, false, true, false, false, true]);
        assert_eq!(outage(&p, t), Some(Duration::from_millis(40)));
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let ms = |v: &[u64]| v.iter().map(|&m| Duration::from_millis(m)).collect::<Vec<_>>();
        let values = ms(&[5, 1, 4, 2, 3]);
        assert_eq!(percentile(&values, 50), Some(Duration::from_millis(3)));
        assert_eq!(percentile(&values, 99), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&values, 0), Some(Duration::from_millis(1)));
        assert_eq!(percentile(&[], 50), None);
        let twenty = ms(&(1..=20).collect::<Vec<_>>());
        assert_eq!(percentile(&twenty, 99), Some(Duration::from_millis(20)));
        assert_eq!(percentile(&twenty, 50), Some(Duration::from_millis(10)));
    }
}
