//! Splits a TCP byte stream into BGP messages and checks each message header (RFC 4271 §4.1,
//! §6.1) before any body is looked at: marker all ones, length within the range of the type,
//! type known. A header error is fatal: the session sends the NOTIFICATION from
//! [`DecodeError::notification`] and closes, since the stream cannot be resynchronised.

use super::error::DecodeError;
use super::types::{HEADER_LEN, MAX_MESSAGE_LEN};

/// Message type codes (RFC 4271 §4.1, RFC 2918 §3).
pub mod message_type {
    pub const OPEN: u8 = 1;
    pub const UPDATE: u8 = 2;
    pub const NOTIFICATION: u8 = 3;
    pub const KEEPALIVE: u8 = 4;
    pub const ROUTE_REFRESH: u8 = 5;
}

/// One complete message: its type and all its bytes, header included.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub message_type: u8,
    pub bytes: &'a [u8],
}

impl<'a> Frame<'a> {
    /// The bytes after the 19-octet header.
    pub fn body(&self) -> &'a [u8] {
        self.bytes.get(HEADER_LEN..).unwrap_or_default()
    }
}

/// The smallest and largest valid length of each message type (RFC 4271 §4.2–4.5, RFC 2918 §3).
/// Extended messages (RFC 8654) are never negotiated, so 4096 is the ceiling for all.
fn length_range(message_type: u8) -> Option<(usize, usize)> {
    match message_type {
        // Header, version, my AS, hold time, BGP identifier, optional parameters length.
        message_type::OPEN => Some((HEADER_LEN + 10, MAX_MESSAGE_LEN)),
        // Header, withdrawn routes length, total path attribute length.
        message_type::UPDATE => Some((HEADER_LEN + 4, MAX_MESSAGE_LEN)),
        // Header, error code, error subcode.
        message_type::NOTIFICATION => Some((HEADER_LEN + 2, MAX_MESSAGE_LEN)),
        message_type::KEEPALIVE => Some((HEADER_LEN, HEADER_LEN)),
        // Header, AFI, reserved, SAFI.
        message_type::ROUTE_REFRESH => Some((HEADER_LEN + 4, HEADER_LEN + 4)),
        _ => None,
    }
}

/// Checks a message header; returns the message length and type.
pub fn check_header(header: &[u8; HEADER_LEN]) -> Result<(usize, u8), DecodeError> {
    if header[..16].iter().any(|&b| b != 0xff) {
        return Err(DecodeError::ConnectionNotSynchronized);
    }
    let length_field = u16::from_be_bytes([header[16], header[17]]);
    let length = usize::from(length_field);
    let message_type = header[18];
    if !(HEADER_LEN..=MAX_MESSAGE_LEN).contains(&length) {
        return Err(DecodeError::BadMessageLength {
            length: length_field,
            message_type,
        });
    }
    let Some((min, max)) = length_range(message_type) else {
        return Err(DecodeError::BadMessageType { message_type });
    };
    if !(min..=max).contains(&length) {
        return Err(DecodeError::BadMessageLength {
            length: length_field,
            message_type,
        });
    }
    Ok((length, message_type))
}

/// Buffers received bytes and hands out complete, header-checked messages.
#[derive(Debug, Default)]
pub struct FrameSplitter {
    buf: Vec<u8>,
    /// Bytes before this offset were handed out already; compacted away lazily so a read that
    /// holds many messages costs one copy, not one per message.
    head: usize,
    /// Set after a header error: the stream is not trusted any more.
    failed: Option<DecodeError>,
}

impl FrameSplitter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes read from the socket.
    pub fn extend(&mut self, bytes: &[u8]) {
        if self.head > 0 && self.head * 2 >= self.buf.len() {
            self.buf.drain(..self.head);
            self.head = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes buffered but not yet handed out.
    pub fn pending(&self) -> usize {
        self.buf.len() - self.head
    }

    /// The next complete message, `None` until one is buffered. After an error every later
    /// call returns the same error: the caller must close the connection.
    pub fn next_frame(&mut self) -> Result<Option<Frame<'_>>, DecodeError> {
        if let Some(error) = &self.failed {
            return Err(error.clone());
        }
        let start = self.head;
        let Some(header) = self.buf[start..].first_chunk::<HEADER_LEN>().copied() else {
            return Ok(None);
        };
        let (length, message_type) = match check_header(&header) {
            Ok(checked) => checked,
            Err(error) => {
                self.failed = Some(error.clone());
                return Err(error);
            }
        };
        if self.buf.len() - start < length {
            return Ok(None);
        }
        self.head = start + length;
        Ok(Some(Frame {
            message_type,
            bytes: &self.buf[start..start + length],
        }))
    }
}
