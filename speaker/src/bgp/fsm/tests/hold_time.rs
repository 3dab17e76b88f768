//! A peer's hold time 0 (RFC 4271 §4.2, §6.2): it turns keepalives and the hold timer off for
//! both sides, so it is taken only when we proposed 0 ourselves.

use super::*;

/// The session after the peer's OPEN with `theirs`, ours being `ours`, and the actions of it.
fn after_peer_open(ours: u16, theirs: u16) -> (Session, Vec<Action>) {
    let mut s = Session::new(SessionConfig {
        hold_time: ours,
        ..config()
    });
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    let actions = s.handle(open_msg(theirs, [10, 0, 0, 1]));
    (s, actions)
}

#[test]
fn a_peers_zero_is_refused_when_we_configured_a_hold_time() {
    for ours in [3, 90, 65535] {
        let (s, actions) = after_peer_open(ours, 0);
        let (id, n) = sent_notification(&actions).expect("a NOTIFICATION");
        assert_eq!(
            (id, n.code, n.subcode),
            (Outbound, code::OPEN_MESSAGE, open_sub::UNACCEPTABLE_HOLD_TIME),
            "ours {ours}: OPEN Message Error / Unacceptable Hold Time"
        );
        assert!(actions.contains(&Action::Close(Outbound)), "ours {ours}");
        assert!(
            !actions
                .iter()
                .any(|a| matches!(a, Action::Send(_, Message::Keepalive))),
            "ours {ours}: no KEEPALIVE confirms the OPEN"
        );
        assert_ne!(s.state(), State::OpenConfirm, "ours {ours}");
        assert!(
            actions.contains(&Action::StartTimer(Timer::IdleHold, IDLE_HOLD_MIN)),
            "ours {ours}: the session tries again later, as after any OPEN error"
        );
    }
}

#[test]
fn a_peers_zero_is_taken_when_ours_is_zero() {
    let (mut s, actions) = after_peer_open(0, 0);
    assert_eq!(sent_notification(&actions), None);
    assert!(actions.contains(&Action::Send(Outbound, Message::Keepalive)));
    assert!(actions.contains(&Action::StopTimer(Timer::Hold(Outbound))));
    let actions = s.handle(Input::Message(Outbound, Message::Keepalive));
    let negotiated = actions.iter().find_map(|a| match a {
        Action::Established(_, n) => Some(n.clone()),
        _ => None,
    });
    let negotiated = negotiated.expect("Established");
    assert_eq!((negotiated.hold_time, negotiated.keepalive), (0, None));
}

#[test]
fn our_zero_takes_any_acceptable_peer_value_and_ones_and_twos_stay_refused() {
    // Ours 0 and theirs 90: the smaller, 0, is what we asked for (RFC 4271 §4.2).
    let (_, actions) = after_peer_open(0, 90);
    assert_eq!(sent_notification(&actions), None);
    for theirs in [1, 2] {
        for ours in [0, 90] {
            let (_, actions) = after_peer_open(ours, theirs);
            assert_eq!(
                sent_notification(&actions).map(|(_, n)| (n.code, n.subcode)),
                Some((code::OPEN_MESSAGE, open_sub::UNACCEPTABLE_HOLD_TIME)),
                "ours {ours} theirs {theirs}"
            );
        }
    }
    assert!(open::hold_time_acceptable(90, 3));
    assert!(!open::hold_time_acceptable(90, 0));
}
