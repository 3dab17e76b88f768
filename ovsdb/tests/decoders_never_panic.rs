//! The decoders a server's bytes reach end in `Ok` or `Err` for any input: random bytes, and
//! valid messages cut, spliced and corrupted. (`fuzz/` runs the same entry points under
//! libFuzzer for longer; this keeps a fast slice of it in every test run.)

use kube_ovn_ovsdb::fuzzing::{decode_stream, schema};
use proptest::prelude::*;

const VALID: &str = concat!(
    r#"{"id":null,"method":"update3","params":["m","00000000-0000-0000-0000-000000000001","#,
    r#"{"T":{"11111111-1111-1111-1111-111111111111":{"insert":{"s":"a","set":["set",["x","y"]],"#,
    r#""map":["map",[["k",1]]],"i":["set",[3]],"r":1.5}}}}]}"#,
    r#"{"id":null,"method":"update2","params":["m",{"T":{"11111111-1111-1111-1111-111111111111":"#,
    r#"{"modify":{"set":"x","map":["map",[["k",2]]],"b":true,"i":["set",[]]}}}}]}"#,
    r#"{"id":null,"method":"update","params":["m",{"T":{"22222222-2222-2222-2222-222222222222":"#,
    r#"{"new":{"s":"n","refs":["uuid","11111111-1111-1111-1111-111111111111"]}}}}]}"#,
    r#"{"id":3,"result":[{"uuid":["named-uuid","x"]},{"error":"e","details":"d"}],"error":null}"#,
    r#"{"id":"echo","method":"echo","params":["\u0041\\"]}"#,
);

/// JSON fragments that tend to reach deep into the decoders when spliced in.
const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "null",
    "true",
    "1e999",
    "-1",
    "18446744073709551616",
    "\"set\"",
    "\"map\"",
    "\"uuid\"",
    "\"named-uuid\"",
    "[\"set\",[]]",
    "{\"delete\":null}",
    "{\"modify\":{}}",
    "\\u0000",
    "\u{fffd}",
];

#[test]
fn the_valid_stream_decodes_the_same_in_any_chunking() {
    use kube_ovn_ovsdb::{Uuid, Value};
    let one = Uuid::parse_str("11111111-1111-1111-1111-111111111111").unwrap();
    let two = Uuid::parse_str("22222222-2222-2222-2222-222222222222").unwrap();
    for chunk in [1, 2, 7, 64, VALID.len()] {
        let (messages, cache) = decode_stream(VALID.as_bytes(), chunk, &schema());
        assert_eq!(messages, 5, "chunk {chunk}");
        let row = cache.row("T", &one).unwrap();
        assert_eq!(row["s"], Value::from("a"));
        assert_eq!(row["set"], Value::set(["y"]), "the update2 diff toggled x off");
        assert_eq!(row["map"], Value::map([("k", 2)]));
        assert_eq!(row["b"], Value::from(true));
        assert!(!row.contains_key("i"), "i went back to its default");
        assert_eq!(cache.row("T", &two).unwrap()["refs"], Value::set([one]));
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        decode_stream(&data, 1 + data.len() % 17, &schema());
    }

    #[test]
    fn corrupted_valid_messages(
        cut in 0..VALID.len(),
        flips in proptest::collection::vec((0..VALID.len(), any::<u8>()), 0..4),
        splices in proptest::collection::vec((0..VALID.len(), 0..TOKENS.len()), 0..4),
    ) {
        let mut data = VALID.as_bytes().to_vec();
        for (pos, byte) in flips {
            data[pos] = byte;
        }
        for (pos, token) in splices {
            let pos = pos.min(data.len());
            data.splice(pos..pos, TOKENS[token].bytes());
        }
        data.truncate(cut.max(1) + data.len().saturating_sub(VALID.len()));
        decode_stream(&data, 1 + cut % 31, &schema());
    }
}
