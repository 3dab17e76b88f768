//! Bytes from a BGP peer: framing, header checks, OPEN/UPDATE/NOTIFICATION/ROUTE-REFRESH
//! decoding in both UPDATE modes, re-encoding, and the session state machine fed the result.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the read size, so framing is tried across split points; the second
    // picks 4-octet AS, external peer and full UPDATE parsing.
    if let [chunk, flags, rest @ ..] = data {
        kube_ovn_speaker::fuzzing::decode_stream(rest, usize::from(*chunk), *flags);
    }
});
