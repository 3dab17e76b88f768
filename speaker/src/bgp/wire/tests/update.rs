//! RFC 7606 handling of received UPDATEs, by hand-built bytes: which errors reset the session
//! (and with which NOTIFICATION), which are treat-as-withdraw, which drop one attribute.

use proptest::prelude::*;

use crate::bgp::wire::notification::update as sub;
use crate::bgp::wire::*;

const ORIGIN: &str = "40 01 01 00";
const AS_PATH: &str = "40 02 06 02 01 0000fde9";
const NEXT_HOP: &str = "40 03 04 c0000201";
const NLRI: &str = "08 0a";

fn hex(text: &str) -> Vec<u8> {
    let digits: Vec<u8> = text.bytes().filter(u8::is_ascii_hexdigit).collect();
    digits
        .chunks(2)
        .map(|pair| u8::from_str_radix(std::str::from_utf8(pair).unwrap(), 16).unwrap())
        .collect()
}

fn update_message(withdrawn: &str, attributes: &str, nlri: &str) -> Vec<u8> {
    let (withdrawn, attributes, nlri) = (hex(withdrawn), hex(attributes), hex(nlri));
    let mut body = u16::try_from(withdrawn.len()).unwrap().to_be_bytes().to_vec();
    body.extend(&withdrawn);
    body.extend(u16::try_from(attributes.len()).unwrap().to_be_bytes());
    body.extend(&attributes);
    body.extend(&nlri);
    raw_update(&body)
}

fn raw_update(body: &[u8]) -> Vec<u8> {
    let mut out = vec![0xff; 16];
    out.extend(u16::try_from(19 + body.len()).unwrap().to_be_bytes());
    out.push(2);
    out.extend(body);
    out
}

fn context(external_peer: bool, mode: UpdateMode) -> DecodeContext {
    DecodeContext {
        update: UpdateContext {
            four_octet_as: true,
            external_peer,
        },
        update_mode: mode,
    }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Accept,
    Discard,
    TreatAsWithdraw,
    Reset(u8),
}

fn outcome(name: &str, bytes: &[u8], external_peer: bool) -> Outcome {
    let checked = decode_message(bytes, context(external_peer, UpdateMode::Check));
    let full = decode_message(bytes, context(external_peer, UpdateMode::Full));
    let of = |result: &Result<Decoded, DecodeError>| match result {
        Err(error) => {
            let n = error.notification();
            assert_eq!(n.code, 3, "{error}");
            Outcome::Reset(n.subcode)
        }
        Ok(Decoded { issue: None, .. }) => Outcome::Accept,
        Ok(Decoded {
            issue: Some(UpdateIssue::AttributeDiscarded { .. }),
            ..
        }) => Outcome::Discard,
        Ok(Decoded {
            issue: Some(UpdateIssue::TreatAsWithdraw { .. }),
            ..
        }) => Outcome::TreatAsWithdraw,
    };
    assert_eq!(
        of(&checked),
        of(&full),
        "{name}: check and full modes disagree: {full:?}"
    );
    of(&checked)
}

#[test]
fn rfc7606_table() {
    let good = format!("{ORIGIN} {AS_PATH} {NEXT_HOP}");
    let cases: Vec<(&str, Vec<u8>, bool, Outcome)> = vec![
        (
            "well-formed",
            update_message("", &good, NLRI),
            true,
            Outcome::Accept,
        ),
        (
            "withdrawn length overruns (§4)",
            raw_update(&hex("00ff 0000")),
            true,
            Outcome::Reset(sub::MALFORMED_ATTRIBUTE_LIST),
        ),
        (
            "attribute length overruns (§4)",
            raw_update(&hex("0000 00ff 08 0a")),
            true,
            Outcome::Reset(sub::MALFORMED_ATTRIBUTE_LIST),
        ),
        (
            "NLRI /33 (§5.3)",
            update_message("", &good, "21 0a000001 00"),
            true,
            Outcome::Reset(sub::INVALID_NETWORK_FIELD),
        ),
        (
            "NLRI overruns (§5.3)",
            update_message("", &good, "18 0a00"),
            true,
            Outcome::Reset(sub::INVALID_NETWORK_FIELD),
        ),
        (
            "withdrawn overruns (§5.3)",
            update_message("18 0a", "", ""),
            true,
            Outcome::Reset(sub::INVALID_NETWORK_FIELD),
        ),
        (
            "ORIGIN 3 (§7.1)",
            update_message("", &format!("40 01 01 03 {AS_PATH} {NEXT_HOP}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "ORIGIN flagged optional (§3 c)",
            update_message("", &format!("c0 01 01 00 {AS_PATH} {NEXT_HOP}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "ORIGIN with partial bit (§3 c)",
            update_message("", &format!("60 01 01 00 {AS_PATH} {NEXT_HOP}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "NEXT_HOP missing (§3 d)",
            update_message("", &format!("{ORIGIN} {AS_PATH}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "NEXT_HOP 3 octets (§7.3)",
            update_message("", &format!("{ORIGIN} {AS_PATH} 40 03 03 c00002"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "AS_PATH segment of 0 ASes (§7.2)",
            update_message("", &format!("{ORIGIN} 40 02 02 02 00 {NEXT_HOP}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "AS_PATH segment type 9 (§7.2)",
            update_message("", &format!("{ORIGIN} 40 02 06 09 01 0000fde9 {NEXT_HOP}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "AS_PATH 2-octet ASes on a 4-octet session (§7.2)",
            update_message("", &format!("{ORIGIN} 40 02 04 02 01 fde9 {NEXT_HOP}"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "ORIGIN twice (§3 g)",
            update_message("", &format!("{good} {ORIGIN}"), NLRI),
            true,
            Outcome::Discard,
        ),
        (
            "MP_REACH_NLRI twice (§3 g)",
            update_message(
                "",
                &format!("{good} 80 0e 05 0019 46 00 00 80 0e 05 0019 46 00 00"),
                "",
            ),
            true,
            Outcome::Reset(sub::MALFORMED_ATTRIBUTE_LIST),
        ),
        (
            "MP_REACH_NLRI IPv6 with 5-octet next hop (§7.11)",
            update_message(
                "",
                &format!("{ORIGIN} {AS_PATH} 80 0e 0b 0002 01 05 0000000000 00 00"),
                "",
            ),
            true,
            Outcome::Reset(sub::OPTIONAL_ATTRIBUTE_ERROR),
        ),
        (
            "MP_REACH_NLRI prefix overruns (§7.11)",
            update_message(
                "",
                &format!("{ORIGIN} {AS_PATH} 80 0e 17 0002 01 10 20010db8000000000000000000000001 00 40 20"),
                "",
            ),
            true,
            Outcome::Reset(sub::OPTIONAL_ATTRIBUTE_ERROR),
        ),
        (
            "MP_UNREACH_NLRI of 2 octets (§7.11)",
            update_message("", "80 0f 02 0002", ""),
            true,
            Outcome::Reset(sub::OPTIONAL_ATTRIBUTE_ERROR),
        ),
        (
            "MP_REACH_NLRI flagged well-known",
            update_message("", &format!("{ORIGIN} {AS_PATH} 40 0e 05 0002 01 00 00"), ""),
            true,
            Outcome::Reset(sub::ATTRIBUTE_FLAGS_ERROR),
        ),
        (
            "MP_REACH_NLRI of a family we do not carry",
            update_message(
                "",
                &format!("{ORIGIN} {AS_PATH} 80 0e 09 0019 46 04 0a000001 00"),
                "",
            ),
            true,
            Outcome::Accept,
        ),
        (
            "unrecognized well-known attribute (RFC 4271 §6.3)",
            update_message("", &format!("{good} 40 63 01 00"), NLRI),
            true,
            Outcome::Reset(sub::UNRECOGNIZED_WELL_KNOWN_ATTRIBUTE),
        ),
        (
            "unknown optional transitive attribute",
            update_message("", &format!("{good} c0 63 01 00"), NLRI),
            true,
            Outcome::Accept,
        ),
        (
            "LOCAL_PREF from an external peer (§7.5)",
            update_message("", &format!("{good} 40 05 04 00000064"), NLRI),
            true,
            Outcome::Discard,
        ),
        (
            "LOCAL_PREF missing from an internal peer (§3 d)",
            update_message("", &good, NLRI),
            false,
            Outcome::TreatAsWithdraw,
        ),
        (
            "LOCAL_PREF 2 octets from an internal peer (§7.5)",
            update_message("", &format!("{good} 40 05 02 0064"), NLRI),
            false,
            Outcome::TreatAsWithdraw,
        ),
        (
            "LOCAL_PREF from an internal peer",
            update_message("", &format!("{good} 40 05 04 00000064"), NLRI),
            false,
            Outcome::Accept,
        ),
        (
            "ATOMIC_AGGREGATE of 1 octet (§7.6)",
            update_message("", &format!("{good} 40 06 01 00"), NLRI),
            true,
            Outcome::Discard,
        ),
        (
            "AGGREGATOR of 7 octets (§7.7)",
            update_message("", &format!("{good} c0 07 07 0000fde9 0a0000"), NLRI),
            true,
            Outcome::Discard,
        ),
        (
            "COMMUNITIES of 5 octets (§7.8)",
            update_message("", &format!("{good} c0 08 05 0000000000"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "MED of 2 octets (§7.4)",
            update_message("", &format!("{good} 80 04 02 0000"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "LARGE_COMMUNITIES of 13 octets (RFC 8092 §6)",
            update_message("", &format!("{good} c0 20 0d 00000000000000000000000000"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "last attribute overruns the field (§4)",
            update_message("", &format!("{good} c0 08 08 00000000"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "two trailing octets in the field (§4)",
            update_message("", &format!("{good} c0 08"), NLRI),
            true,
            Outcome::TreatAsWithdraw,
        ),
        (
            "malformed attribute, no NLRI (§5.2)",
            update_message("", "40 01 01 07", ""),
            true,
            Outcome::TreatAsWithdraw,
        ),
    ];
    for (name, bytes, external, expected) in cases {
        assert_eq!(outcome(name, &bytes, external), expected, "{name}");
    }
}

#[test]
fn unrecognized_well_known_attribute_is_the_notification_data() {
    let bytes = update_message("", &format!("{ORIGIN} {AS_PATH} {NEXT_HOP} 40 63 02 abcd"), NLRI);
    let error = decode_message(&bytes, context(true, UpdateMode::Check)).unwrap_err();
    assert_eq!(
        error.notification(),
        Notification::new(3, 2, hex("40 63 02 abcd"))
    );
}

#[test]
fn treat_as_withdraw_in_full_mode_withdraws_everything_the_update_carried() {
    let mp_reach = "80 0e 1e 0002 01 10 20010db8000000000000000000000001 00 40 fd000010001600 00";
    let bytes = update_message(
        "10 0a09",
        &format!("40 01 01 05 {AS_PATH} {NEXT_HOP} {mp_reach}"),
        "08 0a 20 0a110005",
    );
    let decoded = decode_message(&bytes, context(true, UpdateMode::Full)).unwrap();
    assert!(matches!(decoded.issue, Some(UpdateIssue::TreatAsWithdraw { .. })));
    let Message::Update(update) = decoded.message else {
        panic!("{decoded:?}")
    };
    let withdrawn: Vec<String> = update.withdrawn.iter().map(ToString::to_string).collect();
    assert_eq!(withdrawn, ["10.9.0.0/16", "10.0.0.0/8", "10.17.0.5/32"]);
    assert_eq!(
        update.mp_unreach,
        Some(Nlri::Ipv6(vec!["fd00:10:16::/64".parse().unwrap()]))
    );
    assert_eq!(update.nlri, vec![]);
    assert_eq!(update.attributes, PathAttributes::default());
}

#[test]
fn check_mode_summarises_without_parsing() {
    let bytes = update_message("10 0a09", &format!("{ORIGIN} {AS_PATH} {NEXT_HOP}"), NLRI);
    let decoded = decode_message(&bytes, context(true, UpdateMode::Check)).unwrap();
    let summary = UpdateSummary {
        end_of_rib: None,
        announces: true,
        withdraws: true,
    };
    assert_eq!(
        decoded,
        Decoded {
            message: Message::UpdateChecked(summary),
            issue: None
        }
    );
}

fn arb_update() -> impl Strategy<Value = Update> {
    let v4 = (any::<u32>(), 0u8..=32).prop_map(|(a, l)| ipnet::Ipv4Net::new(a.into(), l).unwrap().trunc());
    let v4 = v4.prop_filter("unicast", |p| {
        let bad = |a: std::net::Ipv4Addr| a.is_multicast() || a.is_broadcast();
        !bad(p.addr()) && !p.hosts().next_back().is_some_and(bad)
    });
    let v6 = (any::<u128>(), 0u8..=128).prop_map(|(a, l)| ipnet::Ipv6Net::new(a.into(), l).unwrap().trunc());
    let v6 = v6.prop_filter("unicast", |p| !p.addr().is_multicast());
    (
        proptest::collection::vec(v4.clone(), 0..20),
        proptest::collection::vec(v4, 1..20),
        proptest::collection::vec(v6, 0..20),
        proptest::collection::vec(any::<u32>(), 0..5),
        proptest::collection::vec(any::<(u32, u32, u32)>(), 0..3),
        proptest::option::of(any::<u32>()),
        proptest::collection::vec(1u32..u32::MAX, 1..4),
    )
        .prop_map(|(withdrawn, nlri, v6, communities, large, med, asns)| Update {
            withdrawn,
            attributes: PathAttributes {
                origin: Some(Origin::Incomplete),
                as_path: Some(vec![AsPathSegment {
                    kind: AsPathSegmentKind::Sequence,
                    asns,
                }]),
                next_hop: Some(std::net::Ipv4Addr::new(198, 51, 100, 2)),
                med,
                local_pref: None,
                communities,
                large_communities: large
                    .into_iter()
                    .map(|(global_admin, local_data1, local_data2)| LargeCommunity {
                        global_admin,
                        local_data1,
                        local_data2,
                    })
                    .collect(),
            },
            nlri,
            mp_reach: (!v6.is_empty()).then(|| MpReach {
                next_hop: MpNextHop {
                    global: "2001:db8:100::2".parse().unwrap(),
                    link_local: None,
                },
                nlri: Nlri::Ipv6(v6),
            }),
            mp_unreach: None,
        })
}

proptest! {
    #[test]
    fn our_updates_round_trip(update in arb_update()) {
        let message = Message::Update(Box::new(update));
        let bytes = encode(&message, EncodeContext { four_octet_as: true }).unwrap();
        let decoded = decode_message(&bytes, context(true, UpdateMode::Full)).unwrap();
        prop_assert_eq!(decoded.issue, None);
        prop_assert_eq!(decoded.message, message);
    }
}
