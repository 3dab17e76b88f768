//! NOTIFICATION error codes and subcodes, and constructors for the ones this speaker sends.
//! Codes: RFC 4271 §4.5; FSM subcodes: RFC 6608; Cease subcodes: RFC 4486, RFC 8203;
//! ROUTE-REFRESH message error: RFC 7313.

use std::fmt;

use super::types::Notification;

/// Error codes (RFC 4271 §4.5, RFC 7313 §5).
pub mod code {
    pub const MESSAGE_HEADER: u8 = 1;
    pub const OPEN_MESSAGE: u8 = 2;
    pub const UPDATE_MESSAGE: u8 = 3;
    pub const HOLD_TIMER_EXPIRED: u8 = 4;
    pub const FSM: u8 = 5;
    pub const CEASE: u8 = 6;
    pub const ROUTE_REFRESH_MESSAGE: u8 = 7;
}

/// Message Header Error subcodes (RFC 4271 §6.1).
pub mod header {
    pub const CONNECTION_NOT_SYNCHRONIZED: u8 = 1;
    pub const BAD_MESSAGE_LENGTH: u8 = 2;
    pub const BAD_MESSAGE_TYPE: u8 = 3;
}

/// OPEN Message Error subcodes (RFC 4271 §6.2, RFC 5492 §5).
pub mod open {
    pub const UNSPECIFIC: u8 = 0;
    pub const UNSUPPORTED_VERSION: u8 = 1;
    pub const BAD_PEER_AS: u8 = 2;
    pub const BAD_BGP_IDENTIFIER: u8 = 3;
    pub const UNSUPPORTED_OPTIONAL_PARAMETER: u8 = 4;
    pub const UNACCEPTABLE_HOLD_TIME: u8 = 6;
    pub const UNSUPPORTED_CAPABILITY: u8 = 7;
}

/// UPDATE Message Error subcodes (RFC 4271 §6.3).
pub mod update {
    pub const MALFORMED_ATTRIBUTE_LIST: u8 = 1;
    pub const UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE: u8 = 2;
    pub const MISSING_WELL_KNOWN_ATTRIBUTE: u8 = 3;
    pub const ATTRIBUTE_FLAGS_ERROR: u8 = 4;
    pub const ATTRIBUTE_LENGTH_ERROR: u8 = 5;
    pub const INVALID_ORIGIN: u8 = 6;
    pub const INVALID_NEXT_HOP: u8 = 8;
    pub const OPTIONAL_ATTRIBUTE_ERROR: u8 = 9;
    pub const INVALID_NETWORK_FIELD: u8 = 10;
    pub const MALFORMED_AS_PATH: u8 = 11;
}

/// Finite State Machine Error subcodes (RFC 6608 §3).
pub mod fsm {
    pub const UNSPECIFIED: u8 = 0;
    pub const UNEXPECTED_IN_OPEN_SENT: u8 = 1;
    pub const UNEXPECTED_IN_OPEN_CONFIRM: u8 = 2;
    pub const UNEXPECTED_IN_ESTABLISHED: u8 = 3;
}

/// Cease subcodes (RFC 4486 §4, RFC 9384).
pub mod cease {
    pub const MAX_PREFIXES_REACHED: u8 = 1;
    pub const ADMINISTRATIVE_SHUTDOWN: u8 = 2;
    pub const PEER_DECONFIGURED: u8 = 3;
    pub const ADMINISTRATIVE_RESET: u8 = 4;
    pub const CONNECTION_REJECTED: u8 = 5;
    pub const OTHER_CONFIGURATION_CHANGE: u8 = 6;
    pub const CONNECTION_COLLISION_RESOLUTION: u8 = 7;
    pub const OUT_OF_RESOURCES: u8 = 8;
    pub const HARD_RESET: u8 = 9;
    pub const BFD_DOWN: u8 = 10;
}

impl Notification {
    pub fn new(code: u8, subcode: u8, data: impl Into<Vec<u8>>) -> Self {
        Notification {
            code,
            subcode,
            data: data.into(),
        }
    }

    /// Hold Timer Expired (RFC 4271 §6.5): no subcode.
    pub fn hold_timer_expired() -> Self {
        Notification::new(code::HOLD_TIMER_EXPIRED, 0, [])
    }

    /// A message that the current state does not accept (RFC 4271 §6.6, subcodes RFC 6608 §4).
    /// The data is the type of the unexpected message.
    pub fn fsm_error(subcode: u8, message_type: u8) -> Self {
        Notification::new(code::FSM, subcode, [message_type])
    }

    pub fn cease(subcode: u8) -> Self {
        Notification::new(code::CEASE, subcode, [])
    }

    /// True for Cease / Hard Reset, the one NOTIFICATION that ends graceful restart even when
    /// both sides set the N bit (RFC 8538 §3).
    pub fn is_hard_reset(&self) -> bool {
        self.code == code::CEASE && self.subcode == cease::HARD_RESET
    }
}

impl fmt::Display for Notification {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match (self.code, self.subcode) {
            (code::MESSAGE_HEADER, header::CONNECTION_NOT_SYNCHRONIZED) => "connection not synchronized",
            (code::MESSAGE_HEADER, header::BAD_MESSAGE_LENGTH) => "bad message length",
            (code::MESSAGE_HEADER, header::BAD_MESSAGE_TYPE) => "bad message type",
            (code::MESSAGE_HEADER, _) => "message header error",
            (code::OPEN_MESSAGE, open::UNSUPPORTED_VERSION) => "unsupported version number",
            (code::OPEN_MESSAGE, open::BAD_PEER_AS) => "bad peer AS",
            (code::OPEN_MESSAGE, open::BAD_BGP_IDENTIFIER) => "bad BGP identifier",
            (code::OPEN_MESSAGE, open::UNSUPPORTED_OPTIONAL_PARAMETER) => "unsupported optional parameter",
            (code::OPEN_MESSAGE, open::UNACCEPTABLE_HOLD_TIME) => "unacceptable hold time",
            (code::OPEN_MESSAGE, open::UNSUPPORTED_CAPABILITY) => "unsupported capability",
            (code::OPEN_MESSAGE, _) => "OPEN message error",
            (code::UPDATE_MESSAGE, _) => "UPDATE message error",
            (code::HOLD_TIMER_EXPIRED, _) => "hold timer expired",
            (code::FSM, _) => "finite state machine error",
            (code::CEASE, cease::ADMINISTRATIVE_SHUTDOWN) => "cease: administrative shutdown",
            (code::CEASE, cease::PEER_DECONFIGURED) => "cease: peer de-configured",
            (code::CEASE, cease::ADMINISTRATIVE_RESET) => "cease: administrative reset",
            (code::CEASE, cease::CONNECTION_REJECTED) => "cease: connection rejected",
            (code::CEASE, cease::CONNECTION_COLLISION_RESOLUTION) => "cease: connection collision resolution",
            (code::CEASE, cease::HARD_RESET) => "cease: hard reset",
            (code::CEASE, cease::BFD_DOWN) => "cease: BFD down",
            (code::CEASE, _) => "cease",
            (code::ROUTE_REFRESH_MESSAGE, _) => "ROUTE-REFRESH message error",
            _ => "unknown error code",
        };
        write!(f, "{name} ({}/{})", self.code, self.subcode)
    }
}
