//! JSON-RPC 1.0 framing and messages as OVSDB uses them (RFC 7047 §4).
//!
//! Pure: no I/O. The stream is a sequence of JSON objects with no delimiter and no length
//! prefix. [`FrameSplitter`] finds where each object ends by tracking nesting depth and string
//! state over the bytes as they arrive, so a large monitor reply that comes in many reads is
//! scanned once (linear time), then parsed once.

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;
use serde_json::value::RawValue;

use crate::error::ProtocolError;
pub use crate::error::RpcError;

/// A frame larger than this is refused. The biggest legitimate frame is a monitor reply with every
/// row of the database: 100,000 NB ports are about 40 MB, so this leaves ample room while still
/// bounding what a broken peer can make us buffer.
pub const MAX_FRAME_BYTES: usize = 1 << 30;

/// Splits a byte stream into complete top-level JSON objects.
#[derive(Debug, Default)]
pub struct FrameSplitter {
    buf: Vec<u8>,
    /// Bytes before this offset were returned already; compacted away lazily.
    head: usize,
    /// Bytes of `buf` already scanned; scanning resumes here.
    scanned: usize,
    /// Start of the object being scanned, once its first byte is seen.
    start: Option<usize>,
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl FrameSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends received bytes.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.head > 0 && self.head * 2 >= self.buf.len() {
            self.buf.drain(..self.head);
            self.scanned -= self.head;
            self.start = self.start.map(|s| s - self.head);
            self.head = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet returned as a frame.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.head
    }

    /// The next complete frame, if one is buffered. Errors are fatal for the stream: after one,
    /// the connection must be dropped.
    pub fn next_frame(&mut self) -> Result<Option<&[u8]>, ProtocolError> {
        let mut i = self.scanned;
        while i < self.buf.len() {
            let b = self.buf[i];
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
            } else if self.start.is_none() {
                match b {
                    b' ' | b'\t' | b'\r' | b'\n' => self.head = i + 1,
                    b'{' => {
                        self.start = Some(i);
                        self.depth = 1;
                    }
                    other => {
                        return Err(ProtocolError::Framing(format!(
                            "expected a JSON object, found byte {:?}",
                            char::from(other)
                        )));
                    }
                }
            } else {
                match b {
                    b'"' => self.in_string = true,
                    b'{' | b'[' => self.depth += 1,
                    b'}' | b']' => {
                        self.depth -= 1;
                        if self.depth == 0 {
                            let start = self.start.take().unwrap_or(self.head);
                            self.head = i + 1;
                            self.scanned = i + 1;
                            return Ok(Some(&self.buf[start..=i]));
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        self.scanned = i;
        if self.start.is_none() {
            // Nothing but whitespace is pending: the buffer can be emptied.
            self.buf.clear();
            self.head = 0;
            self.scanned = 0;
        } else if self.pending() > MAX_FRAME_BYTES {
            return Err(ProtocolError::Framing(format!(
                "frame exceeds {MAX_FRAME_BYTES} bytes without ending"
            )));
        }
        Ok(None)
    }
}

/// A request or reply id. We send integers; ovsdb-server's own requests use `"echo"`.
pub type Id = Json;

/// One decoded JSON-RPC message.
#[derive(Debug)]
pub enum Message {
    Request {
        id: Id,
        method: String,
        params: Json,
    },
    Notification {
        method: String,
        params: Box<RawValue>,
    },
    Response {
        id: Id,
        result: Result<Box<RawValue>, RpcError>,
    },
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(default)]
    id: Option<Json>,
    #[serde(default)]
    method: Option<String>,
    #[serde(default, borrow)]
    params: Option<&'a RawValue>,
    #[serde(default, borrow)]
    result: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<Json>,
}

impl Message {
    /// Decodes one frame.
    pub fn decode(frame: &[u8]) -> Result<Self, ProtocolError> {
        let wire: WireMessage<'_> =
            serde_json::from_slice(frame).map_err(|e| ProtocolError::Json(e.to_string()))?;
        let id = wire.id.filter(|id| !id.is_null());
        if let Some(method) = wire.method {
            let params = wire
                .params
                .map_or_else(|| RawValue::from_string("[]".into()), |p| Ok(p.to_owned()));
            let params = params.map_err(|e| ProtocolError::Json(e.to_string()))?;
            return Ok(match id {
                Some(id) => Message::Request {
                    id,
                    method,
                    params: serde_json::from_str(params.get())
                        .map_err(|e| ProtocolError::Json(e.to_string()))?,
                },
                None => Message::Notification { method, params },
            });
        }
        let id = id.ok_or_else(|| ProtocolError::Invalid("response without an id".into()))?;
        let result = match wire.error.filter(|e| !e.is_null()) {
            Some(error) => Err(rpc_error_from_json(error)),
            None => Ok(wire
                .result
                .ok_or_else(|| ProtocolError::Invalid(format!("response {id} has neither result nor error")))?
                .to_owned()),
        };
        Ok(Message::Response { id, result })
    }
}

fn rpc_error_from_json(error: Json) -> RpcError {
    match error {
        Json::String(s) => RpcError {
            error: s,
            details: None,
        },
        other => serde_json::from_value::<RpcError>(other.clone()).unwrap_or_else(|_| RpcError {
            error: other.to_string(),
            details: None,
        }),
    }
}

/// Encodes a request we send.
pub fn encode_request(id: u64, method: &str, params: &impl Serialize) -> Vec<u8> {
    #[derive(Serialize)]
    struct Req<'a, P> {
        id: u64,
        method: &'a str,
        params: &'a P,
    }
    // Serializing our own plain structs into a Vec cannot fail.
    serde_json::to_vec(&Req { id, method, params }).expect("request serializes")
}

/// Encodes the reply to a server request (its `echo`).
pub fn encode_reply(id: &Id, result: &Json) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"id": id, "result": result, "error": null}))
        .expect("reply serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(chunks: &[&[u8]]) -> Vec<String> {
        let mut s = FrameSplitter::new();
        let mut out = Vec::new();
        for c in chunks {
            s.extend(c);
            while let Some(f) = s.next_frame().unwrap() {
                out.push(String::from_utf8(f.to_vec()).unwrap());
            }
        }
        out
    }

    #[test]
    fn splits_concatenated_objects_across_reads() {
        let got = frames(&[br#"{"a":"}{\"x"}{"b":[1,{"#, br#""c":2}]}  "#, b"\n{}"]);
        assert_eq!(got, vec![r#"{"a":"}{\"x"}"#, r#"{"b":[1,{"c":2}]}"#, "{}"]);
    }

    #[test]
    fn byte_at_a_time_gives_the_same_frames() {
        let text =
            br#"{"id":1,"result":["a\\",{"k":"]"}],"error":null}{"id":null,"method":"update2","params":[]}"#;
        let chunks: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(frames(&chunks).len(), 2);
    }

    #[test]
    fn garbage_between_frames_is_an_error() {
        let mut s = FrameSplitter::new();
        s.extend(b"{} x");
        assert!(s.next_frame().unwrap().is_some());
        assert!(s.next_frame().is_err());
    }

    #[test]
    fn decodes_each_message_kind() {
        match Message::decode(br#"{"id":"echo","method":"echo","params":[]}"#).unwrap() {
            Message::Request { id, method, .. } => {
                assert_eq!(id, Json::from("echo"));
                assert_eq!(method, "echo");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Message::decode(br#"{"id":null,"method":"update2","params":["m",{}]}"#).unwrap(),
            Message::Notification { .. }
        ));
        match Message::decode(br#"{"id":3,"result":null,"error":{"error":"unknown method","details":"x"}}"#)
            .unwrap()
        {
            Message::Response { result: Err(e), .. } => assert_eq!(e.error, "unknown method"),
            other => panic!("{other:?}"),
        }
        match Message::decode(br#"{"id":4,"result":[{}],"error":null}"#).unwrap() {
            Message::Response { result: Ok(r), .. } => assert_eq!(r.get(), "[{}]"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in [
            &b"{\"result\":1}"[..],
            b"{\"id\":1}",
            b"[1,2]",
            b"{\"id\":1,\"method\":5}",
            b"{",
        ] {
            assert!(Message::decode(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
