//! The BGP wire format, behind our own types so `netgauze-bgp-pkt` stays replaceable.
//!
//! Pure: no I/O, no async. Bytes from the socket go into a [`FrameSplitter`], which checks each
//! message header (RFC 4271 §4.1, §6.1); each [`Frame`] is decoded by [`decode_frame`] into a
//! [`Message`]. Every decode failure is a [`DecodeError`] that names the NOTIFICATION to send
//! ([`DecodeError::notification`]); an UPDATE that RFC 7606 says to keep the session for
//! decodes with an [`UpdateIssue`] instead. Messages go out through [`encode`].
//!
//! ```
//! use kube_ovn_speaker::bgp::wire::{self, DecodeContext, EncodeContext, FrameSplitter, Message};
//!
//! let bytes = wire::encode(&Message::Keepalive, EncodeContext::default()).unwrap();
//! let mut splitter = FrameSplitter::new();
//! splitter.extend(&bytes);
//! let frame = splitter.next_frame().unwrap().unwrap();
//! let decoded = wire::decode_frame(frame, DecodeContext::default()).unwrap();
//! assert_eq!(decoded.message, Message::Keepalive);
//! ```

mod decode;
mod encode;
mod error;
mod frame;
pub mod notification;
mod types;
mod update_check;

#[cfg(test)]
mod tests;

pub use decode::{DecodeContext, Decoded, UpdateMode, decode_frame, decode_message};
pub use encode::{EncodeContext, encode, encode_into};
pub use error::{DecodeError, EncodeError, OpenError, UpdateIssue};
pub use frame::{Frame, FrameSplitter, check_header, message_type};
pub use types::*;
pub use update_check::{UpdateContext, attribute_type};
