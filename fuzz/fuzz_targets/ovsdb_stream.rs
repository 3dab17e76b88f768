//! Bytes from a server: framing, JSON-RPC decoding, update decoding, the replica.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the read size, so framing is tried across every split point.
    if let Some((&chunk, rest)) = data.split_first() {
        kube_ovn_ovsdb::fuzzing::decode_stream(rest, usize::from(chunk), &kube_ovn_ovsdb::fuzzing::schema());
    }
});
