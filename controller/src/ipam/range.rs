//! Sets of addresses as sorted, disjoint inclusive ranges: the representation every IPAM pool
//! uses (free, released, in use, reserved), so a /16 or a /64 costs a few ranges, not a bit per
//! address.
//!
//! Addresses are `u128` whatever their family (an IPv4 address is its 32-bit value), so one
//! implementation serves both; callers never mix families in one set.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// Sorted by start, disjoint and non-adjacent (adjacent ranges are merged).
    ranges: Vec<(u128, u128)>,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    /// `[first, last]`; empty when `first > last`.
    pub fn from_range(first: u128, last: u128) -> Self {
        let mut s = Self::new();
        s.insert_range(first, last);
        s
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn ranges(&self) -> &[(u128, u128)] {
        &self.ranges
    }

    /// How many addresses; saturates at `u128::MAX` (only a whole IPv6 space would).
    pub fn count(&self) -> u128 {
        self.ranges
            .iter()
            .fold(0u128, |n, (a, b)| n.saturating_add(b - a).saturating_add(1))
    }

    /// The index of the first range that ends at or after `x`.
    fn index_of(&self, x: u128) -> usize {
        self.ranges.partition_point(|(_, end)| *end < x)
    }

    pub fn contains(&self, x: u128) -> bool {
        self.ranges
            .get(self.index_of(x))
            .is_some_and(|(start, _)| *start <= x)
    }

    pub fn insert(&mut self, x: u128) {
        self.insert_range(x, x);
    }

    pub fn insert_range(&mut self, first: u128, last: u128) {
        if first > last {
            return;
        }
        // Ranges touching or overlapping [first, last], adjacency included, merge into one.
        let lo = self
            .ranges
            .partition_point(|(_, end)| end.saturating_add(1) < first);
        let hi = self
            .ranges
            .partition_point(|(start, _)| *start <= last.saturating_add(1));
        if lo == hi {
            self.ranges.insert(lo, (first, last));
            return;
        }
        let start = first.min(self.ranges[lo].0);
        let end = last.max(self.ranges[hi - 1].1);
        self.ranges.splice(lo..hi, std::iter::once((start, end)));
    }

    pub fn remove(&mut self, x: u128) -> bool {
        let present = self.contains(x);
        self.remove_range(x, x);
        present
    }

    pub fn remove_range(&mut self, first: u128, last: u128) {
        if first > last {
            return;
        }
        let lo = self.index_of(first);
        let hi = self.ranges.partition_point(|(start, _)| *start <= last);
        if lo >= hi {
            return;
        }
        let (s, _) = self.ranges[lo];
        let (_, e) = self.ranges[hi - 1];
        // In place, without a temporary: the common case is one address off the front of a range.
        match (s < first, e > last) {
            (true, true) if lo + 1 == hi => {
                self.ranges[lo] = (s, first - 1);
                self.ranges.insert(lo + 1, (last + 1, e));
            }
            (true, true) => {
                self.ranges[lo] = (s, first - 1);
                self.ranges[hi - 1] = (last + 1, e);
                self.ranges.drain(lo + 1..hi - 1);
            }
            (true, false) => {
                self.ranges[lo] = (s, first - 1);
                self.ranges.drain(lo + 1..hi);
            }
            (false, true) => {
                self.ranges[hi - 1] = (last + 1, e);
                self.ranges.drain(lo..hi - 1);
            }
            (false, false) => {
                self.ranges.drain(lo..hi);
            }
        }
    }

    pub fn insert_set(&mut self, other: &RangeSet) {
        for (a, b) in &other.ranges {
            self.insert_range(*a, *b);
        }
    }

    pub fn remove_set(&mut self, other: &RangeSet) {
        for (a, b) in &other.ranges {
            self.remove_range(*a, *b);
        }
    }

    #[must_use]
    pub fn intersect(&self, other: &RangeSet) -> RangeSet {
        let mut out = RangeSet::new();
        let (mut i, mut j) = (0, 0);
        while i < self.ranges.len() && j < other.ranges.len() {
            let (a1, b1) = self.ranges[i];
            let (a2, b2) = other.ranges[j];
            let (a, b) = (a1.max(a2), b1.min(b2));
            if a <= b {
                out.ranges.push((a, b));
            }
            if b1 < b2 {
                i += 1;
            } else {
                j += 1;
            }
        }
        out
    }

    #[must_use]
    pub fn difference(&self, other: &RangeSet) -> RangeSet {
        let mut out = self.clone();
        out.remove_set(other);
        out
    }

    pub fn overlaps(&self, other: &RangeSet) -> bool {
        !self.intersect(other).is_empty()
    }

    pub fn first(&self) -> Option<u128> {
        self.ranges.first().map(|(a, _)| *a)
    }

    /// The lowest address not in `skip`, without copying either set.
    pub fn first_excluding(&self, skip: &RangeSet) -> Option<u128> {
        for &(a, b) in &self.ranges {
            let mut x = a;
            while x <= b {
                match skip.ranges.get(skip.index_of(x)) {
                    Some(&(s, e)) if s <= x => x = e.checked_add(1)?,
                    _ => return Some(x),
                }
            }
        }
        None
    }

    /// The lowest address not in `skip`, removed from the set.
    pub fn take_lowest(&mut self, skip: &RangeSet) -> Option<u128> {
        let x = self.first_excluding(skip)?;
        self.remove(x);
        Some(x)
    }

    pub fn iter(&self) -> impl Iterator<Item = u128> + '_ {
        self.ranges.iter().flat_map(|(a, b)| *a..=*b)
    }

    /// Kube-OVN's status form: `a-b,c` with addresses of `family`.
    pub fn to_range_string(&self, v6: bool) -> String {
        let mut out = String::new();
        for (i, (a, b)) in self.ranges.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let (a, b) = (to_ip(*a, v6), to_ip(*b, v6));
            if a == b {
                let _ = write!(out, "{a}");
            } else {
                let _ = write!(out, "{a}-{b}");
            }
        }
        out
    }
}

pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// The address `x` of the given family. `x` must fit the family (sets never mix them).
pub fn to_ip(x: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(x))
    } else {
        IpAddr::V4(Ipv4Addr::from(u32::try_from(x).unwrap_or(u32::MAX)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn merges_splits_and_formats() {
        let mut s = RangeSet::from_range(10, 20);
        s.insert_range(21, 25);
        assert_eq!(s.ranges(), &[(10, 25)]);
        s.remove_range(12, 13);
        assert_eq!(s.ranges(), &[(10, 11), (14, 25)]);
        s.insert(12);
        assert_eq!(s.ranges(), &[(10, 12), (14, 25)]);
        assert_eq!(s.count(), 15);
        assert!(s.contains(14) && !s.contains(13));
        assert_eq!(s.take_lowest(&RangeSet::from_range(10, 11)), Some(12));
        let ip = |x: &str| to_u128(x.parse().unwrap());
        let v4 = RangeSet::from_range(ip("10.16.0.2"), ip("10.16.0.9"));
        let mut v4 = v4;
        v4.insert(ip("10.16.0.20"));
        assert_eq!(v4.to_range_string(false), "10.16.0.2-10.16.0.9,10.16.0.20");
        assert_eq!(RangeSet::from_range(0, u128::MAX).count(), u128::MAX);
    }

    proptest! {
        /// The range set behaves exactly like a set of integers.
        #[test]
        fn acts_like_a_set(ops in proptest::collection::vec((0u8..4, 0u128..64, 0u128..8), 1..200)) {
            let mut s = RangeSet::new();
            let mut model = BTreeSet::new();
            for (op, a, len) in ops {
                let b = a + len;
                match op {
                    0 => { s.insert_range(a, b); model.extend(a..=b); }
                    1 => { s.remove_range(a, b); for x in a..=b { model.remove(&x); } }
                    2 => { let other = RangeSet::from_range(a, b);
                           let inter: BTreeSet<u128> = model.iter().copied().filter(|x| (a..=b).contains(x)).collect();
                           prop_assert_eq!(s.intersect(&other).iter().collect::<BTreeSet<_>>(), inter); }
                    _ => { let got = s.take_lowest(&RangeSet::new());
                           let want = model.iter().next().copied();
                           if let Some(w) = want { model.remove(&w); }
                           prop_assert_eq!(got, want); }
                }
                prop_assert_eq!(s.iter().collect::<BTreeSet<_>>(), model.clone());
                prop_assert_eq!(s.count(), model.len() as u128);
                // Canonical: sorted, disjoint, non-adjacent.
                for w in s.ranges().windows(2) {
                    prop_assert!(w[0].1 + 1 < w[1].0);
                }
            }
        }
    }
}
