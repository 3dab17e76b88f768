//! Entry points shared by the cargo-fuzz targets (`fuzz/`) and the property tests, so both drive
//! exactly the code a peer's bytes reach. Every path must end in `Ok` or `Err`, never a panic.

use std::net::Ipv4Addr;
use std::time::Duration;

use crate::bgp::fsm::{ConnectionId, Input, Session, SessionConfig};
use crate::bgp::wire::{
    DecodeContext, EncodeContext, Family, FrameSplitter, Message, UpdateContext, UpdateMode, decode_frame,
    encode,
};

/// Feeds `data` to a [`FrameSplitter`] `chunk` bytes at a time (0 = all at once), decodes every
/// frame in the mode `flags` picks, re-encodes what decoded, and hands each message or error to
/// a session in OpenSent, as a driver would.
pub fn decode_stream(data: &[u8], chunk: usize, flags: u8) {
    let context = DecodeContext {
        update: UpdateContext {
            four_octet_as: flags & 1 != 0,
            external_peer: flags & 2 != 0,
        },
        update_mode: if flags & 4 != 0 {
            UpdateMode::Full
        } else {
            UpdateMode::Check
        },
    };
    let mut session = Session::new(SessionConfig {
        local_as: 65001,
        peer_as: 65000,
        router_id: Ipv4Addr::new(10, 0, 0, 2),
        hold_time: 90,
        connect_retry: Duration::from_secs(5),
        passive: false,
        families: Family::ALL.to_vec(),
        graceful_restart: None,
        restarting: false,
        extended_next_hop: true,
    });
    session.handle(Input::Start);
    session.handle(Input::TcpConnected(ConnectionId::Outbound));
    let mut splitter = FrameSplitter::new();
    let size = if chunk == 0 { data.len().max(1) } else { chunk };
    for part in data.chunks(size) {
        splitter.extend(part);
        loop {
            let decoded = match splitter.next_frame() {
                Ok(None) => break,
                Ok(Some(frame)) => decode_frame(frame, context),
                Err(error) => Err(error),
            };
            match decoded {
                Ok(decoded) => {
                    if !matches!(decoded.message, Message::UpdateChecked(_)) {
                        let _ = encode(
                            &decoded.message,
                            EncodeContext {
                                four_octet_as: context.update.four_octet_as,
                            },
                        );
                    }
                    session.handle(Input::Message(ConnectionId::Outbound, decoded.message));
                }
                Err(error) => {
                    let _ = error.notification();
                    session.handle(Input::DecodeError(ConnectionId::Outbound, error));
                    return;
                }
            }
        }
    }
}

/// Bytes as BFD datagrams: `data` is cut into datagrams whose lengths its bytes pick; each is
/// decoded, what decodes is re-encoded and must decode to the same packet, and every result
/// reaches a BFD session as a driver would hand it over, with timers firing in between.
pub fn bfd_datagrams(data: &[u8]) {
    use crate::bfd::packet::ControlPacket;
    use crate::bfd::session::{Input as BfdInput, Session as BfdSession, Timers};

    let mut session = BfdSession::new(1, Timers::default(), 0);
    let t0 = std::time::Instant::now();
    let mut now = t0;
    session.handle(now, BfdInput::AdminUp);
    let mut rest = data;
    while let [len, step, tail @ ..] = rest {
        let len = usize::from(*len % 40).min(tail.len());
        let (datagram, next) = tail.split_at(len);
        rest = next;
        now += Duration::from_millis(u64::from(*step) * 4);
        if let Ok(packet) = ControlPacket::decode(datagram) {
            assert_eq!(ControlPacket::decode(&packet.encode()), Ok(packet));
            session.handle(now, BfdInput::Received(packet));
        }
        let timer = match step % 4 {
            0 => BfdInput::TxTimer,
            1 => BfdInput::DetectTimer,
            _ => continue,
        };
        session.handle(now, timer);
    }
}

#[cfg(test)]
mod tests {
    /// The BFD seeds run through the fuzz entry point (a handshake to Up, a Final, timers).
    #[test]
    fn bfd_seeds_run() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/bfd_decode");
        for entry in std::fs::read_dir(dir).unwrap() {
            super::bfd_datagrams(&std::fs::read(entry.unwrap().path()).unwrap());
        }
    }

    /// The fuzz seeds decode as a whole session: OPEN, KEEPALIVE, UPDATEs, End-of-RIB,
    /// ROUTE-REFRESH, NOTIFICATION, with no decode error.
    #[test]
    fn fuzz_seeds_are_valid_streams() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/seeds/bgp_decode");
        for entry in std::fs::read_dir(dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            let mut splitter = crate::bgp::wire::FrameSplitter::new();
            splitter.extend(&data[2..]);
            let mut count = 0;
            while let Some(frame) = splitter.next_frame().unwrap() {
                let context = crate::bgp::wire::DecodeContext {
                    update: crate::bgp::wire::UpdateContext {
                        four_octet_as: true,
                        external_peer: true,
                    },
                    update_mode: crate::bgp::wire::UpdateMode::Full,
                };
                let decoded = crate::bgp::wire::decode_frame(frame, context).unwrap();
                assert_eq!(decoded.issue, None, "{decoded:?}");
                count += 1;
            }
            assert!(count >= 5);
            super::decode_stream(&data[2..], usize::from(data[0]), data[1]);
        }
    }
}
