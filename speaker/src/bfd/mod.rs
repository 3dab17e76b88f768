//! BFD, Bidirectional Forwarding Detection (RFC 5880), single hop over UDP (RFC 5881).
//!
//! - [`packet`]: the Control packet codec and the stateless receive checks;
//! - [`session`]: the sans-IO session state machine.

pub mod packet;
pub mod session;
