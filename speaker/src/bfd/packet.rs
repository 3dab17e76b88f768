//! The BFD Control packet (RFC 5880 §4.1) and the receive checks that need no session
//! (RFC 5880 §6.8.6). Decoding never panics: every input either yields a [`ControlPacket`] or a
//! [`PacketError`] naming the rule it broke.
//!
//! ```text
//!  byte 0: Vers(3) Diag(5)          byte 1: Sta(2) P F C A D M
//!  byte 2: Detect Mult              byte 3: Length
//!  4..8 My Discriminator   8..12 Your Discriminator   12..16 Desired Min TX (µs)
//!  16..20 Required Min RX (µs)      20..24 Required Min Echo RX (µs)   [24.. Authentication]
//! ```

use std::time::Duration;

/// The only protocol version (RFC 5880 §4.1).
pub const VERSION: u8 = 1;
/// Length of a Control packet without an Authentication Section (RFC 5880 §4.1).
pub const MIN_LEN: usize = LENGTH as usize;
/// The Length field we send.
const LENGTH: u8 = 24;
/// Minimum length when the A bit is set: 24 plus the 2-byte Auth Type and Auth Len
/// (RFC 5880 §6.8.6).
pub const MIN_LEN_AUTH: usize = 26;

const POLL: u8 = 0x20;
const FINAL: u8 = 0x10;
const CPI: u8 = 0x08;
const AUTH: u8 = 0x04;
const DEMAND: u8 = 0x02;
const MULTIPOINT: u8 = 0x01;

/// Session states as carried in the Sta field (RFC 5880 §4.1, §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    AdminDown = 0,
    Down = 1,
    Init = 2,
    Up = 3,
}

impl State {
    fn from_bits(bits: u8) -> Self {
        match bits & 0x3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }
}

/// Diagnostic codes (RFC 5880 §4.1); 9–31 are reserved and kept as received.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diagnostic {
    None,
    ControlDetectionTimeExpired,
    EchoFunctionFailed,
    NeighborSignaledSessionDown,
    ForwardingPlaneReset,
    PathDown,
    ConcatenatedPathDown,
    AdministrativelyDown,
    ReverseConcatenatedPathDown,
    Reserved(u8),
}

impl Diagnostic {
    pub fn from_code(code: u8) -> Self {
        match code & 0x1f {
            0 => Diagnostic::None,
            1 => Diagnostic::ControlDetectionTimeExpired,
            2 => Diagnostic::EchoFunctionFailed,
            3 => Diagnostic::NeighborSignaledSessionDown,
            4 => Diagnostic::ForwardingPlaneReset,
            5 => Diagnostic::PathDown,
            6 => Diagnostic::ConcatenatedPathDown,
            7 => Diagnostic::AdministrativelyDown,
            8 => Diagnostic::ReverseConcatenatedPathDown,
            other => Diagnostic::Reserved(other),
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Diagnostic::None => 0,
            Diagnostic::ControlDetectionTimeExpired => 1,
            Diagnostic::EchoFunctionFailed => 2,
            Diagnostic::NeighborSignaledSessionDown => 3,
            Diagnostic::ForwardingPlaneReset => 4,
            Diagnostic::PathDown => 5,
            Diagnostic::ConcatenatedPathDown => 6,
            Diagnostic::AdministrativelyDown => 7,
            Diagnostic::ReverseConcatenatedPathDown => 8,
            Diagnostic::Reserved(code) => code & 0x1f,
        }
    }
}

impl std::fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = match self {
            Diagnostic::None => "no diagnostic",
            Diagnostic::ControlDetectionTimeExpired => "control detection time expired",
            Diagnostic::EchoFunctionFailed => "echo function failed",
            Diagnostic::NeighborSignaledSessionDown => "neighbor signaled session down",
            Diagnostic::ForwardingPlaneReset => "forwarding plane reset",
            Diagnostic::PathDown => "path down",
            Diagnostic::ConcatenatedPathDown => "concatenated path down",
            Diagnostic::AdministrativelyDown => "administratively down",
            Diagnostic::ReverseConcatenatedPathDown => "reverse concatenated path down",
            Diagnostic::Reserved(code) => return write!(f, "reserved diagnostic {code}"),
        };
        f.write_str(text)
    }
}

/// A Control packet without authentication. Intervals are in microseconds on the wire and
/// [`Duration`]s here; encoding saturates at `u32::MAX` µs (about 71 minutes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPacket {
    pub diag: Diagnostic,
    pub state: State,
    pub poll: bool,
    pub final_: bool,
    /// C bit: BFD does not share fate with the control plane.
    pub control_plane_independent: bool,
    pub demand: bool,
    pub detect_mult: u8,
    pub my_discriminator: u32,
    pub your_discriminator: u32,
    pub desired_min_tx: Duration,
    pub required_min_rx: Duration,
    pub required_min_echo_rx: Duration,
}

/// Why a received packet is discarded (RFC 5880 §6.8.6, in the order the RFC checks them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    #[error("{0} bytes is shorter than a BFD Control packet")]
    Truncated(usize),
    #[error("BFD version {0}, expected 1")]
    Version(u8),
    #[error("Length field {0} is below the minimum")]
    LengthTooSmall(u8),
    #[error("Length field {field} exceeds the {received} bytes received")]
    LengthExceedsPayload { field: u8, received: usize },
    #[error("Detect Mult is zero")]
    ZeroDetectMult,
    #[error("Multipoint bit set")]
    Multipoint,
    #[error("My Discriminator is zero")]
    ZeroMyDiscriminator,
    #[error("Your Discriminator is zero in state {0:?}")]
    ZeroYourDiscriminator(State),
    /// No authentication is configured on our side, so an authenticated packet is discarded
    /// (RFC 5880 §6.8.6).
    #[error("authentication present but none configured")]
    AuthenticationPresent,
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl ControlPacket {
    /// The 24-byte wire form (Length 24, A bit clear, M bit clear, version 1).
    pub fn encode(&self) -> [u8; MIN_LEN] {
        let mut b = [0u8; MIN_LEN];
        b[0] = (VERSION << 5) | self.diag.code();
        let mut flags = (self.state as u8) << 6;
        for (on, bit) in [
            (self.poll, POLL),
            (self.final_, FINAL),
            (self.control_plane_independent, CPI),
            (self.demand, DEMAND),
        ] {
            if on {
                flags |= bit;
            }
        }
        b[1] = flags;
        b[2] = self.detect_mult;
        b[3] = LENGTH;
        b[4..8].copy_from_slice(&self.my_discriminator.to_be_bytes());
        b[8..12].copy_from_slice(&self.your_discriminator.to_be_bytes());
        b[12..16].copy_from_slice(&micros(self.desired_min_tx).to_be_bytes());
        b[16..20].copy_from_slice(&micros(self.required_min_rx).to_be_bytes());
        b[20..24].copy_from_slice(&micros(self.required_min_echo_rx).to_be_bytes());
        b
    }

    /// Parses a UDP payload and applies every check of RFC 5880 §6.8.6 that does not need a
    /// session: version, Length against the minimum and the payload, Detect Mult, M bit, My
    /// Discriminator, a zero Your Discriminator outside Down/AdminDown, and the A bit (we run
    /// without authentication). Bytes after Length are ignored.
    pub fn decode(bytes: &[u8]) -> Result<Self, PacketError> {
        if bytes.len() < 4 {
            return Err(PacketError::Truncated(bytes.len()));
        }
        let version = bytes[0] >> 5;
        if version != VERSION {
            return Err(PacketError::Version(version));
        }
        let flags = bytes[1];
        let length = bytes[3];
        let min = if flags & AUTH == 0 { MIN_LEN } else { MIN_LEN_AUTH };
        if usize::from(length) < min {
            return Err(PacketError::LengthTooSmall(length));
        }
        if usize::from(length) > bytes.len() {
            return Err(PacketError::LengthExceedsPayload {
                field: length,
                received: bytes.len(),
            });
        }
        // From here on at least MIN_LEN bytes are present.
        let detect_mult = bytes[2];
        if detect_mult == 0 {
            return Err(PacketError::ZeroDetectMult);
        }
        if flags & MULTIPOINT != 0 {
            return Err(PacketError::Multipoint);
        }
        let my_discriminator = be32(bytes, 4);
        if my_discriminator == 0 {
            return Err(PacketError::ZeroMyDiscriminator);
        }
        let your_discriminator = be32(bytes, 8);
        let state = State::from_bits(flags >> 6);
        if your_discriminator == 0 && !matches!(state, State::Down | State::AdminDown) {
            return Err(PacketError::ZeroYourDiscriminator(state));
        }
        if flags & AUTH != 0 {
            return Err(PacketError::AuthenticationPresent);
        }
        let us = |at| Duration::from_micros(u64::from(be32(bytes, at)));
        Ok(ControlPacket {
            diag: Diagnostic::from_code(bytes[0]),
            state,
            poll: flags & POLL != 0,
            final_: flags & FINAL != 0,
            control_plane_independent: flags & CPI != 0,
            demand: flags & DEMAND != 0,
            detect_mult,
            my_discriminator,
            your_discriminator,
            desired_min_tx: us(12),
            required_min_rx: us(16),
            required_min_echo_rx: us(20),
        })
    }
}

#[cfg(test)]
mod tests;
