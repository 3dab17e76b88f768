//! Codec errors. A [`DecodeError`] is fatal for the session: it maps to exactly one NOTIFICATION
//! ([`DecodeError::notification`]) that the session sends before closing. An [`UpdateIssue`] is
//! not: RFC 7606 says to treat the UPDATE as a withdraw or to drop one attribute, and go on.

use std::net::Ipv4Addr;

use super::notification::{code, header, open};
use super::types::Notification;

/// A received message the session cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The 16-octet marker is not all ones (RFC 4271 §6.1).
    #[error("message header: marker is not all ones, the stream is out of sync")]
    ConnectionNotSynchronized,

    /// The length field is out of range for the type (RFC 4271 §6.1); data is the length field.
    #[error("message header: length {length} is invalid for message type {message_type}")]
    BadMessageLength { length: u16, message_type: u8 },

    /// Unknown message type (RFC 4271 §6.1); data is the type octet.
    #[error("message header: unknown message type {message_type}")]
    BadMessageType { message_type: u8 },

    /// The OPEN is not acceptable (RFC 4271 §6.2).
    #[error("OPEN: {0}")]
    Open(#[from] OpenError),

    /// An UPDATE error RFC 7606 still handles by "session reset".
    #[error("UPDATE: {reason} (subcode {subcode})")]
    Update {
        subcode: u8,
        reason: &'static str,
        data: Vec<u8>,
    },
}

/// Why an OPEN was refused, each with its OPEN Message Error subcode (RFC 4271 §6.2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("version {version} is not supported, only 4")]
    UnsupportedVersion { version: u8 },

    #[error("peer AS {received} does not match the configured {expected}")]
    BadPeerAs { received: u32, expected: u32 },

    #[error("BGP identifier {bgp_id} is not acceptable: {reason}")]
    BadBgpIdentifier { bgp_id: Ipv4Addr, reason: &'static str },

    #[error("optional parameter type {parameter_type} is not supported")]
    UnsupportedOptionalParameter { parameter_type: u8 },

    #[error("hold time {hold_time} s is not acceptable: must be 0 or at least 3")]
    UnacceptableHoldTime { hold_time: u16 },

    /// A capability we require is missing: the data is that capability as it would be sent
    /// (RFC 5492 §5).
    #[error("required capability {capability_code} is missing: {reason}")]
    UnsupportedCapability {
        capability_code: u8,
        reason: &'static str,
        data: Vec<u8>,
    },

    #[error("malformed: {reason}")]
    Malformed { reason: String },
}

impl DecodeError {
    /// The NOTIFICATION to send for this error, with the data field each RFC section asks for.
    pub fn notification(&self) -> Notification {
        match self {
            DecodeError::ConnectionNotSynchronized => {
                Notification::new(code::MESSAGE_HEADER, header::CONNECTION_NOT_SYNCHRONIZED, [])
            }
            DecodeError::BadMessageLength { length, .. } => Notification::new(
                code::MESSAGE_HEADER,
                header::BAD_MESSAGE_LENGTH,
                length.to_be_bytes(),
            ),
            DecodeError::BadMessageType { message_type } => {
                Notification::new(code::MESSAGE_HEADER, header::BAD_MESSAGE_TYPE, [*message_type])
            }
            DecodeError::Open(error) => error.notification(),
            DecodeError::Update { subcode, data, .. } => {
                Notification::new(code::UPDATE_MESSAGE, *subcode, data.clone())
            }
        }
    }
}

impl OpenError {
    pub fn notification(&self) -> Notification {
        let (subcode, data): (u8, Vec<u8>) = match self {
            // Data: the largest version we support (RFC 4271 §6.2).
            OpenError::UnsupportedVersion { .. } => (
                open::UNSUPPORTED_VERSION,
                u16::from(super::types::BGP_VERSION).to_be_bytes().to_vec(),
            ),
            OpenError::BadPeerAs { .. } => (open::BAD_PEER_AS, Vec::new()),
            OpenError::BadBgpIdentifier { .. } => (open::BAD_BGP_IDENTIFIER, Vec::new()),
            OpenError::UnsupportedOptionalParameter { .. } => {
                (open::UNSUPPORTED_OPTIONAL_PARAMETER, Vec::new())
            }
            OpenError::UnacceptableHoldTime { .. } => (open::UNACCEPTABLE_HOLD_TIME, Vec::new()),
            OpenError::UnsupportedCapability { data, .. } => (open::UNSUPPORTED_CAPABILITY, data.clone()),
            OpenError::Malformed { .. } => (open::UNSPECIFIC, Vec::new()),
        };
        Notification::new(code::OPEN_MESSAGE, subcode, data)
    }
}

/// A non-fatal problem in a received UPDATE (RFC 7606 §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateIssue {
    /// Every route the UPDATE announces is to be handled as withdrawn ("treat-as-withdraw").
    TreatAsWithdraw {
        attribute_type: u8,
        reason: &'static str,
    },
    /// One attribute is dropped and the UPDATE otherwise used ("attribute discard").
    AttributeDiscarded {
        attribute_type: u8,
        reason: &'static str,
    },
}

impl UpdateIssue {
    pub(crate) fn severity(&self) -> u8 {
        match self {
            UpdateIssue::AttributeDiscarded { .. } => 1,
            UpdateIssue::TreatAsWithdraw { .. } => 2,
        }
    }
}

/// A message we built cannot be encoded. This is a bug in the caller (an Adj-RIB-Out that
/// overfilled an UPDATE, a prefix netgauze refuses); the session is not at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("message type {message_type} would be {length} bytes, over the 4096-byte limit")]
    TooLong { message_type: u8, length: usize },

    #[error("prefix {prefix} cannot be carried as unicast NLRI")]
    InvalidPrefix { prefix: String },

    #[error("attribute {attribute}: {reason}")]
    InvalidAttribute { attribute: &'static str, reason: String },

    #[error("netgauze writer: {0}")]
    Writer(String),
}
