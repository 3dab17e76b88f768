//! A notification's params or a reply's result, as text: every update format, applied to one
//! replica, line by line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use kube_ovn_ovsdb::cache::MonitorUpdate;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let mut cache = kube_ovn_ovsdb::DbCache::new(Some(kube_ovn_ovsdb::fuzzing::schema()));
        for line in text.split('\n') {
            for method in ["update", "update2", "update3"] {
                if let Ok(Some(update)) = MonitorUpdate::decode(method, line) {
                    let _ = cache.apply(update);
                }
            }
            kube_ovn_ovsdb::fuzzing::decode_replies(line, &mut cache);
        }
    }
});
