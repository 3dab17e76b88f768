//! Seeded schedules for the crash drills (the controller's, the node daemon's, the speaker's):
//! a small generator, and seeds drawn afresh each run unless `CRASH_SEED` asks to replay one.

/// splitmix64: a reproducible schedule from a seed, without a dependency.
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next_u64() % n as u64).expect("below n, which is a usize")
    }
}

/// `CRASH_SEED` alone, or `CRASH_SEEDS` (else `default`) seeds drawn afresh from the clock and
/// the process id. Seeds are below a million, short enough to read and to type back.
pub fn seeds(default: usize) -> Vec<u64> {
    if let Ok(s) = std::env::var("CRASH_SEED") {
        return vec![s.parse().expect("CRASH_SEED must be a number")];
    }
    let count =
        std::env::var("CRASH_SEEDS").map_or(default, |n| n.parse().expect("CRASH_SEEDS must be a number"));
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_nanos();
    let mut rng =
        Rng(u64::try_from(clock % u128::from(u64::MAX)).expect("reduced")
            ^ (u64::from(std::process::id()) << 32));
    (0..count).map(|_| rng.next_u64() % 1_000_000).collect()
}

/// One seed: `CRASH_SEED`, or a fresh one.
pub fn seed() -> u64 {
    seeds(1)[0]
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_the_same_schedule_and_below_stays_below() {
        let (mut a, mut b) = (Rng(202), Rng(202));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = Rng(7);
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_ne!(Rng(1).next_u64(), Rng(2).next_u64());
    }
}
