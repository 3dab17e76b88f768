//! Duration flags written the way Go's `time.ParseDuration` reads them, because Kube-OVN's flags
//! are Go `time.Duration`s and manifests written for it must keep working: a sequence of decimal
//! numbers, each with an optional fraction and a unit (`300ms`, `1.5h`, `1m30s`, `2h45m`), or a
//! lone `0`. Units: `ns`, `us` (or `µs`, `μs`), `ms`, `s`, `m`, `h`.
//!
//! Differences from Go, both because every duration flag of ours is a timeout, period or time
//! that cannot be negative: a `-` sign is refused (Go accepts `-5s`), and the error says so.
//! The largest value is Go's (2^63 − 1 ns, about 292 years), so a value Go refuses as too large is
//! refused here too; arithmetic is exact integer nanoseconds and never panics.

use std::time::Duration;

/// Go's `time.Duration` range: an `int64` of nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// Nanoseconds per unit; the unit is the run of characters after a number up to the next digit or
/// `.`, matched exactly (so `1m30s` is `1m` then `30s`, and `1ms` is one millisecond).
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("\u{b5}s", 1_000),  // µ MICRO SIGN, which Go accepts
    ("\u{3bc}s", 1_000), // μ GREEK SMALL LETTER MU, which Go accepts
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// A duration flag's value that could not be read; its text names the value and what is wrong.
/// (Flag parsers add the flag's name: clap for `value_parser`s, [`crate::FlagError`] elsewhere.)
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?}: {problem}")]
pub struct DurationError {
    /// The text given.
    pub value: String,
    /// What is wrong with it.
    pub problem: DurationProblem,
}

/// What is wrong with a duration's text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DurationProblem {
    /// Nothing was given.
    #[error("empty; write a duration such as 90s, 1m30s or 500ms")]
    Empty,
    /// A number has no unit (`30` rather than `30s`); Go refuses it too, only `0` may stand alone.
    #[error("missing unit (ns, us, ms, s, m or h), e.g. 30s; only 0 may stand alone")]
    MissingUnit,
    /// A unit that is none of Go's.
    #[error("unknown unit; use ns, us, ms, s, m or h")]
    UnknownUnit,
    /// Something that is not a number where one must be.
    #[error("not a duration such as 90s, 1m30s or 500ms")]
    Malformed,
    /// A negative duration.
    #[error("must not be negative")]
    Negative,
    /// More than Go's `time.Duration` holds.
    #[error("too large (at most 2562047h47m16.854775807s, Go's limit)")]
    TooLarge,
}

/// Parses a Go duration (see the module documentation).
pub fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let fail = |problem| DurationError {
        value: text.to_owned(),
        problem,
    };
    let unsigned = match text.as_bytes().first() {
        None => return Err(fail(DurationProblem::Empty)),
        Some(b'-') => return Err(fail(DurationProblem::Negative)),
        Some(b'+') => &text[1..],
        Some(_) => text,
    };
    if unsigned == "0" {
        return Ok(Duration::ZERO);
    }
    if unsigned.is_empty() {
        return Err(fail(DurationProblem::Malformed));
    }
    let mut rest = unsigned;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, after) = component(rest).map_err(fail)?;
        total = total
            .checked_add(nanos)
            .filter(|t| *t <= MAX_NANOS)
            .ok_or_else(|| fail(DurationProblem::TooLarge))?;
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000).map_err(|_| fail(DurationProblem::TooLarge))?;
    let nanos = u32::try_from(total % 1_000_000_000).map_err(|_| fail(DurationProblem::TooLarge))?;
    Ok(Duration::new(secs, nanos))
}

/// One `<number>[.<fraction>]<unit>` at the start of `text`: its nanoseconds and the rest.
fn component(text: &str) -> Result<(u128, &str), DurationProblem> {
    let (whole, rest) = split_digits(text);
    let (fraction, rest) = match rest.strip_prefix('.') {
        Some(after_dot) => split_digits(after_dot),
        None => ("", rest),
    };
    if whole.is_empty() && fraction.is_empty() {
        return Err(DurationProblem::Malformed);
    }
    let unit_len = rest
        .find(|c: char| c == '.' || c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (unit, rest) = rest.split_at(unit_len);
    if unit.is_empty() {
        return Err(DurationProblem::MissingUnit);
    }
    let scale = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, scale)| *scale)
        .ok_or(DurationProblem::UnknownUnit)?;
    let mut nanos: u128 = 0;
    for digit in whole.bytes() {
        nanos = nanos
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(digit - b'0')))
            .filter(|n| *n <= MAX_NANOS)
            .ok_or(DurationProblem::TooLarge)?;
    }
    nanos = nanos
        .checked_mul(scale)
        .filter(|n| *n <= MAX_NANOS)
        .ok_or(DurationProblem::TooLarge)?;
    // The fraction counts to the nanosecond and is truncated below it, as Go's is; digits past
    // the 20th cannot change a result measured in nanoseconds of at most an hour's unit.
    let (mut numerator, mut denominator) = (0u128, 1u128);
    for digit in fraction.bytes().take(20) {
        numerator = numerator * 10 + u128::from(digit - b'0');
        denominator *= 10;
    }
    nanos += numerator * scale / denominator;
    Ok((nanos, rest))
}

/// The leading ASCII digits of `text`, and the rest.
fn split_digits(text: &str) -> (&str, &str) {
    text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nanos(n: u64) -> Duration {
        Duration::from_nanos(n)
    }

    /// Values and results from Go's documented behaviour of `time.ParseDuration`.
    #[test]
    fn reads_what_go_reads() {
        let s = |n: u64| nanos(n * 1_000_000_000);
        for (text, want) in [
            ("0", Duration::ZERO),
            ("+0", Duration::ZERO),
            ("0s", Duration::ZERO),
            ("5s", s(5)),
            ("+5s", s(5)),
            ("30s", s(30)),
            ("1478s", s(1478)),
            ("5.0s", s(5)),
            ("5.6s", nanos(5_600_000_000)),
            ("5.s", s(5)),
            (".5s", nanos(500_000_000)),
            ("1.004s", nanos(1_004_000_000)),
            ("100.00100s", nanos(100_001_000_000)),
            ("10ns", nanos(10)),
            ("11us", nanos(11_000)),
            ("12\u{b5}s", nanos(12_000)),
            ("12\u{3bc}s", nanos(12_000)),
            ("13ms", nanos(13_000_000)),
            ("15m", s(15 * 60)),
            ("16h", s(16 * 3600)),
            ("3h30m", s(3 * 3600 + 30 * 60)),
            ("1m30s", s(90)),
            ("10.5s4m", nanos(4 * 60_000_000_000 + 10_500_000_000)),
            ("1h2m3s4ms5us6ns", nanos(3_723_004_005_006)),
            ("39h9m14.425s", nanos(140_954_425_000_000)),
            ("52763797000ns", nanos(52_763_797_000)),
            // Exact arithmetic: Go's float64 product rounds this one up to 20m.
            ("0.3333333333333333333h", nanos(1_199_999_999_999)),
            ("9007199254740993ns", nanos(9_007_199_254_740_993)),
            ("9223372036854775807ns", nanos(i64::MAX as u64)),
            ("9223372036854775.807us", nanos(i64::MAX as u64)),
            ("9223372036s854ms775us807ns", nanos(i64::MAX as u64)),
            ("0.100000000000000000000h", s(360)),
            ("0.830103483285477580700h", nanos(2_988_372_539_827)),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
    }

    #[test]
    fn refuses_what_go_refuses_and_negatives_with_the_reason() {
        use DurationProblem::*;
        for (text, problem) in [
            ("", Empty),
            ("3", MissingUnit),
            ("30", MissingUnit),
            ("1m30", MissingUnit),
            ("-", Negative),
            ("-5s", Negative),
            ("-0", Negative),
            ("+", Malformed),
            ("s", Malformed),
            (".", Malformed),
            (".s", Malformed),
            ("+.s", Malformed),
            ("1d", UnknownUnit),
            ("1 s", UnknownUnit),
            ("1sec", UnknownUnit),
            ("\u{85}\u{85}", Malformed),
            ("hello \u{ff}ff world", Malformed),
            ("9223372036854775810ns", TooLarge),
            ("9223372036854775808ns", TooLarge),
            ("9223372036854775.808us", TooLarge),
            ("3000000h", TooLarge),
            ("2562047h47m16.854775808s", TooLarge),
            ("99999999999999999999999999999999999999999h", TooLarge),
            ("1.7976931348623157e308s", UnknownUnit),
        ] {
            let err = parse_duration(text).unwrap_err();
            assert_eq!(err.problem, problem, "{text:?}");
            assert!(err.to_string().starts_with(&format!("{text:?}: ")), "{err}");
        }
        assert_eq!(
            parse_duration("2562047h47m16.854775807s"),
            Ok(nanos(i64::MAX as u64))
        );
    }

    proptest::proptest! {
        /// Any text ends in a value or an error (never a panic), and every value Go can hold is
        /// read back from its nanosecond form and from an h/m/s/ns compound form.
        #[test]
        fn never_panics_and_round_trips(text in ".{0,40}", n in 0..=i64::MAX as u64) {
            let _ = parse_duration(&text);
            proptest::prop_assert_eq!(parse_duration(&format!("{n}ns")), Ok(nanos(n)));
            let (h, rem) = (n / 3_600_000_000_000, n % 3_600_000_000_000);
            let (m, rem) = (rem / 60_000_000_000, rem % 60_000_000_000);
            let (sec, ns) = (rem / 1_000_000_000, rem % 1_000_000_000);
            let compound = format!("{h}h{m}m{sec}.{ns:09}s");
            proptest::prop_assert_eq!(parse_duration(&compound), Ok(nanos(n)));
        }
    }
}
