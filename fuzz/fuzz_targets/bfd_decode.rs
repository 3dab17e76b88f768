//! Datagrams from a BFD peer: Control packet decoding and the RFC 5880 §6.8.6 checks,
//! re-encoding, and the session state machine fed what decodes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kube_ovn_speaker::fuzzing::bfd_datagrams(data);
});
