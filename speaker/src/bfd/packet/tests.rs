//! Codec round trips, a byte-exact vector, and every discard rule of RFC 5880 §6.8.6.

use proptest::prelude::*;

use super::*;

fn sample() -> ControlPacket {
    ControlPacket {
        diag: Diagnostic::ControlDetectionTimeExpired,
        state: State::Up,
        poll: true,
        final_: false,
        control_plane_independent: false,
        demand: false,
        detect_mult: 3,
        my_discriminator: 0x0102_0304,
        your_discriminator: 0x0a0b_0c0d,
        desired_min_tx: Duration::from_millis(300),
        required_min_rx: Duration::from_millis(100),
        required_min_echo_rx: Duration::ZERO,
    }
}

#[test]
fn encodes_byte_exact() {
    assert_eq!(
        sample().encode(),
        [
            0x21, // version 1, diag 1
            0xe0, // Up (3 << 6), P
            3, 24, 1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d, //
            0x00, 0x04, 0x93, 0xe0, // 300000 µs
            0x00, 0x01, 0x86, 0xa0, // 100000 µs
            0, 0, 0, 0,
        ]
    );
}

#[test]
fn round_trips_every_state_flag_and_diag() {
    for state in [State::AdminDown, State::Down, State::Init, State::Up] {
        for code in 0..32 {
            for flags in 0..16u8 {
                let mut p = sample();
                p.state = state;
                p.diag = Diagnostic::from_code(code);
                p.poll = flags & 1 != 0;
                p.final_ = flags & 2 != 0;
                p.control_plane_independent = flags & 4 != 0;
                p.demand = flags & 8 != 0;
                assert_eq!(ControlPacket::decode(&p.encode()), Ok(p));
                assert_eq!(p.diag.code(), code);
            }
        }
    }
}

#[test]
fn intervals_saturate_at_u32_micros() {
    let mut p = sample();
    p.desired_min_tx = Duration::from_secs(10_000);
    let back = ControlPacket::decode(&p.encode()).unwrap();
    assert_eq!(back.desired_min_tx, Duration::from_micros(u64::from(u32::MAX)));
}

#[test]
fn trailing_bytes_after_length_are_ignored() {
    let mut bytes = sample().encode().to_vec();
    bytes.extend_from_slice(&[0xff; 8]);
    assert_eq!(ControlPacket::decode(&bytes), Ok(sample()));
}

fn with(f: impl FnOnce(&mut Vec<u8>)) -> Result<ControlPacket, PacketError> {
    let mut bytes = sample().encode().to_vec();
    f(&mut bytes);
    ControlPacket::decode(&bytes)
}

#[test]
fn discard_rules_of_6_8_6() {
    let cases: Vec<(&str, Result<ControlPacket, PacketError>, PacketError)> = vec![
        ("empty", ControlPacket::decode(&[]), PacketError::Truncated(0)),
        (
            "3 bytes",
            ControlPacket::decode(&[0x20, 0xc0, 3]),
            PacketError::Truncated(3),
        ),
        ("version 0", with(|b| b[0] &= 0x1f), PacketError::Version(0)),
        (
            "version 2",
            with(|b| b[0] = 0x40 | (b[0] & 0x1f)),
            PacketError::Version(2),
        ),
        ("length 23", with(|b| b[3] = 23), PacketError::LengthTooSmall(23)),
        ("length 0", with(|b| b[3] = 0), PacketError::LengthTooSmall(0)),
        (
            "length 25 in 24 bytes",
            with(|b| b[3] = 25),
            PacketError::LengthExceedsPayload {
                field: 25,
                received: 24,
            },
        ),
        (
            "cut to 20 bytes",
            with(|b| b.truncate(20)),
            PacketError::LengthExceedsPayload {
                field: 24,
                received: 20,
            },
        ),
        ("detect mult 0", with(|b| b[2] = 0), PacketError::ZeroDetectMult),
        (
            "multipoint",
            with(|b| b[1] |= MULTIPOINT),
            PacketError::Multipoint,
        ),
        (
            "my discriminator 0",
            with(|b| b[4..8].fill(0)),
            PacketError::ZeroMyDiscriminator,
        ),
        (
            "your discriminator 0 while Up",
            with(|b| b[8..12].fill(0)),
            PacketError::ZeroYourDiscriminator(State::Up),
        ),
        (
            "your discriminator 0 while Init",
            with(|b| {
                b[8..12].fill(0);
                b[1] = (b[1] & 0x3f) | (2 << 6);
            }),
            PacketError::ZeroYourDiscriminator(State::Init),
        ),
        (
            "A bit, length 24",
            with(|b| b[1] |= AUTH),
            PacketError::LengthTooSmall(24),
        ),
        (
            "A bit with a simple password section",
            with(|b| {
                b[1] |= AUTH;
                b[3] = 28;
                b.extend_from_slice(&[1, 4, 1, b'x']);
            }),
            PacketError::AuthenticationPresent,
        ),
    ];
    for (name, got, want) in cases {
        assert_eq!(got, Err(want), "{name}");
    }
}

#[test]
fn zero_your_discriminator_is_fine_in_down_and_admin_down() {
    for state in [State::Down, State::AdminDown] {
        let mut p = sample();
        p.state = state;
        p.your_discriminator = 0;
        assert_eq!(ControlPacket::decode(&p.encode()), Ok(p));
    }
}

proptest! {
    #[test]
    fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = ControlPacket::decode(&bytes);
    }

    #[test]
    fn whatever_decodes_re_encodes_to_the_same_fields(bytes in proptest::collection::vec(any::<u8>(), 24..40)) {
        if let Ok(p) = ControlPacket::decode(&bytes) {
            prop_assert_eq!(ControlPacket::decode(&p.encode()), Ok(p));
        }
    }
}
