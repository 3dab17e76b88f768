//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the property tests, so both drive
//! exactly the decoders a server's bytes reach. Every path must end in `Ok` or `Err`, never a
//! panic.

use std::sync::Arc;

use crate::cache::{DbCache, MonitorUpdate, TableUpdates, TableUpdates2};
use crate::ops::Operation;
use crate::reply::parse_transact_reply;
use crate::rpc::{FrameSplitter, Message};
use crate::schema::DatabaseSchema;

/// A small schema with every column shape, so decoded updates exercise normalisation and diffs.
pub fn schema() -> Arc<DatabaseSchema> {
    Arc::new(
        serde_json::from_str(
            r#"{"name":"F","version":"1.0.0","tables":{"T":{"columns":{
                "s":{"type":"string"},
                "i":{"type":{"key":{"type":"integer","minInteger":0},"min":0,"max":1}},
                "r":{"type":"real"},
                "b":{"type":"boolean"},
                "set":{"type":{"key":"string","min":0,"max":"unlimited"}},
                "refs":{"type":{"key":{"type":"uuid","refTable":"T"},"min":0,"max":"unlimited"}},
                "map":{"type":{"key":"string","value":"integer","min":0,"max":"unlimited"}}
            },"isRoot":true}}}"#,
        )
        .expect("fuzz schema parses"),
    )
}

/// Feeds `data` through the framing, message decoding, and for notifications and results, the
/// update decoders and the replica, `chunk` bytes at a time as reads would deliver them. Returns
/// how many messages decoded and the replica they built.
pub fn decode_stream(data: &[u8], chunk: usize, schema: &Arc<DatabaseSchema>) -> (usize, DbCache) {
    let mut splitter = FrameSplitter::new();
    let mut cache = DbCache::new(Some(schema.clone()));
    let mut messages = 0;
    for piece in data.chunks(chunk.max(1)) {
        splitter.extend(piece);
        loop {
            match splitter.next_frame() {
                Ok(Some(frame)) => match Message::decode(frame) {
                    Ok(Message::Notification { method, params }) => {
                        messages += 1;
                        if let Ok(Some(update)) = MonitorUpdate::decode(&method, params.get()) {
                            let _ = cache.apply(update);
                        }
                    }
                    Ok(Message::Response {
                        result: Ok(result), ..
                    }) => {
                        messages += 1;
                        decode_replies(result.get(), &mut cache);
                    }
                    Ok(_) => messages += 1,
                    Err(_) => {}
                },
                Ok(None) => break,
                Err(_) => return (messages, cache),
            }
        }
    }
    (messages, cache)
}

/// Tries `text` as each monitor reply format the client accepts, each into a fresh replica
/// (as the client does for a full sync), then as a transaction reply.
pub fn decode_replies(text: &str, cache: &mut DbCache) {
    if let Ok((_, _, u)) = serde_json::from_str::<(bool, String, TableUpdates2)>(text) {
        let _ = cache.apply_update2(u);
    }
    if let Ok(u) = serde_json::from_str::<TableUpdates2>(text) {
        let mut fresh = DbCache::new(cache.schema().cloned());
        if fresh.apply_update2(u).is_ok() {
            cache.replace_with(fresh);
        }
    }
    if let Ok(u) = serde_json::from_str::<TableUpdates>(text) {
        let mut fresh = DbCache::new(cache.schema().cloned());
        fresh.apply_update(u);
        cache.replace_with(fresh);
    }
    if let Ok(items) = serde_json::from_str::<Vec<serde_json::Value>>(text) {
        let ops: Vec<Operation> = items.iter().map(|_| Operation::comment("")).collect();
        let _ = parse_transact_reply(&ops, &items);
    }
}
