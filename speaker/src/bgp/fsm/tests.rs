//! The state machine by input → output: exact action lists for the open sequences, and for
//! every error path the NOTIFICATION sent, the connection closed and the state reached;
//! restarts, collisions, graceful restart and established traffic in `collisions_and_restarts`,
//! a hold time of 0 in `hold_time`.

mod collisions_and_restarts;
mod hold_time;

use std::net::Ipv4Addr;
use std::time::Duration;

use super::*;
use crate::bgp::wire::notification::{cease, code, fsm as fsm_sub, open as open_sub};
use crate::bgp::wire::{
    Capabilities, DecodeError, Family, GracefulRestart, Open, OpenError, RouteRefresh, Update, UpdateSummary,
};

use ConnectionId::{Inbound, Outbound};

const LOCAL_ID: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);

fn config() -> SessionConfig {
    SessionConfig {
        local_as: 65001,
        peer_as: 65000,
        router_id: LOCAL_ID,
        hold_time: 90,
        connect_retry: Duration::from_secs(5),
        passive: false,
        families: vec![Family::Ipv4Unicast, Family::Ipv6Unicast],
        graceful_restart: Some(GracefulRestartConfig {
            restart_time: 120,
            forwarding_preserved: true,
        }),
        restarting: false,
        extended_next_hop: false,
    }
}

fn peer_open(hold_time: u16, bgp_id: [u8; 4]) -> Open {
    Open {
        my_as: 65000,
        hold_time,
        bgp_id: Ipv4Addr::from(bgp_id),
        capabilities: Capabilities {
            multiprotocol: vec![Family::Ipv4Unicast, Family::Ipv6Unicast],
            four_octet_as: Some(65000),
            route_refresh: true,
            ..Capabilities::default()
        },
    }
}

fn open_msg(hold_time: u16, bgp_id: [u8; 4]) -> Input {
    Input::Message(Outbound, Message::Open(peer_open(hold_time, bgp_id)))
}

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn sent_notification(actions: &[Action]) -> Option<(ConnectionId, Notification)> {
    actions.iter().find_map(|a| match a {
        Action::Send(id, Message::Notification(n)) => Some((*id, n.clone())),
        _ => None,
    })
}

fn sent_open(actions: &[Action]) -> Option<Open> {
    actions.iter().find_map(|a| match a {
        Action::Send(_, Message::Open(open)) => Some(open.clone()),
        _ => None,
    })
}

/// A session brought to Established over the outbound connection.
fn established(config: SessionConfig) -> Session {
    let mut s = Session::new(config);
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    s.handle(open_msg(90, [10, 0, 0, 1]));
    s.handle(Input::Message(Outbound, Message::Keepalive));
    assert_eq!(s.state(), State::Established);
    s
}

fn in_open_confirm() -> Session {
    let mut s = Session::new(config());
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    s.handle(open_msg(90, [10, 0, 0, 1]));
    assert_eq!(s.state(), State::OpenConfirm);
    s
}

#[test]
fn active_open_sequence() {
    let mut s = Session::new(config());
    let local_open = open::local_open(&config(), false);
    assert_eq!(
        s.handle(Input::Start),
        vec![
            Action::StopTimer(Timer::IdleHold),
            Action::Connect,
            Action::StartTimer(Timer::ConnectRetry, secs(5)),
            Action::StateChanged {
                from: State::Idle,
                to: State::Connect
            },
        ]
    );
    assert_eq!(
        s.handle(Input::TcpConnected(Outbound)),
        vec![
            Action::StopTimer(Timer::ConnectRetry),
            Action::Send(Outbound, Message::Open(local_open)),
            Action::StartTimer(Timer::Hold(Outbound), OPEN_HOLD_TIME),
            Action::StateChanged {
                from: State::Connect,
                to: State::OpenSent
            },
        ]
    );
    assert_eq!(
        s.handle(open_msg(90, [10, 0, 0, 1])),
        vec![
            Action::Send(Outbound, Message::Keepalive),
            Action::StartTimer(Timer::Keepalive(Outbound), secs(30)),
            Action::StartTimer(Timer::Hold(Outbound), secs(90)),
            Action::StateChanged {
                from: State::OpenSent,
                to: State::OpenConfirm
            },
        ]
    );
    let actions = s.handle(Input::Message(Outbound, Message::Keepalive));
    let negotiated = Negotiated {
        peer_as: 65000,
        peer_bgp_id: Ipv4Addr::new(10, 0, 0, 1),
        hold_time: 90,
        keepalive: Some(secs(30)),
        four_octet_as: true,
        families: vec![Family::Ipv4Unicast, Family::Ipv6Unicast],
        peer_route_refresh: true,
        peer_graceful_restart: None,
        local_restarting: false,
        extended_next_hop: vec![],
        external: true,
    };
    assert_eq!(
        actions,
        vec![
            Action::StartTimer(Timer::Hold(Outbound), secs(90)),
            Action::StopTimer(Timer::ConnectRetry),
            Action::Established(Outbound, Box::new(negotiated.clone())),
            Action::StateChanged {
                from: State::OpenConfirm,
                to: State::Established
            },
        ]
    );
    assert_eq!(s.established_connection(), Some((Outbound, &negotiated)));
}

#[test]
fn passive_open_sequence() {
    let mut s = Session::new(SessionConfig {
        passive: true,
        ..config()
    });
    assert_eq!(
        s.handle(Input::Start),
        vec![
            Action::StopTimer(Timer::IdleHold),
            Action::StateChanged {
                from: State::Idle,
                to: State::Active
            }
        ]
    );
    // Passive sessions never dial, not even when the connect-retry timer fires.
    assert_eq!(s.handle(Input::TimerExpired(Timer::ConnectRetry)), vec![]);
    let actions = s.handle(Input::TcpConnected(Inbound));
    assert!(matches!(&actions[0], Action::Send(Inbound, Message::Open(_))));
    assert_eq!(s.state(), State::OpenSent);
    s.handle(Input::Message(
        Inbound,
        Message::Open(peer_open(90, [10, 0, 0, 1])),
    ));
    let actions = s.handle(Input::Message(Inbound, Message::Keepalive));
    assert!(
        actions
            .iter()
            .any(|a| matches!(a, Action::Established(Inbound, _)))
    );
    assert_eq!(s.established_connection().map(|(id, _)| id), Some(Inbound));
}

#[test]
fn our_open_carries_the_configured_capabilities() {
    let open = open::local_open(
        &SessionConfig {
            local_as: 4_200_000_001,
            extended_next_hop: true,
            ..config()
        },
        true,
    );
    assert_eq!(open.my_as, crate::bgp::wire::AS_TRANS);
    assert_eq!(open.asn(), 4_200_000_001);
    assert!(open.capabilities.route_refresh);
    assert_eq!(
        open.capabilities.multiprotocol,
        vec![Family::Ipv4Unicast, Family::Ipv6Unicast]
    );
    let gr = open.capabilities.graceful_restart.unwrap();
    assert!(gr.restarting);
    assert_eq!(gr.restart_time, 120);
    assert!(gr.families.iter().all(|f| f.forwarding_preserved));
    assert_eq!(open.capabilities.extended_next_hop.len(), 1);
}

#[test]
fn hold_time_is_the_smaller_and_zero_means_no_keepalives() {
    for (ours, theirs, hold, keepalive) in [
        (90, 30, 30, Some(10)),
        (30, 90, 30, Some(10)),
        (0, 0, 0, None),
        (0, 90, 0, None),
        (9, 3, 3, Some(1)),
    ] {
        let mut s = Session::new(SessionConfig {
            hold_time: ours,
            ..config()
        });
        s.handle(Input::Start);
        s.handle(Input::TcpConnected(Outbound));
        let actions = s.handle(open_msg(theirs, [10, 0, 0, 1]));
        let keepalive_timer = actions.iter().find_map(|a| match a {
            Action::StartTimer(Timer::Keepalive(_), d) => Some(d.as_secs()),
            _ => None,
        });
        assert_eq!(keepalive_timer, keepalive, "ours {ours} theirs {theirs}");
        if hold == 0 {
            assert!(actions.contains(&Action::StopTimer(Timer::Hold(Outbound))));
        } else {
            assert!(actions.contains(&Action::StartTimer(Timer::Hold(Outbound), secs(hold))));
        }
        let actions = s.handle(Input::Message(Outbound, Message::Keepalive));
        let Some(Action::Established(_, n)) = actions.iter().find(|a| matches!(a, Action::Established(..)))
        else {
            panic!()
        };
        assert_eq!(n.hold_time, u16::try_from(hold).unwrap());
    }
}

#[test]
fn keepalive_timer_sends_and_rearms() {
    let mut s = established(config());
    assert_eq!(
        s.handle(Input::TimerExpired(Timer::Keepalive(Outbound))),
        vec![
            Action::Send(Outbound, Message::Keepalive),
            Action::StartTimer(Timer::Keepalive(Outbound), secs(30))
        ]
    );
}

#[test]
fn hold_timer_expiry_in_every_state_sends_4_0() {
    let mut open_sent = Session::new(config());
    open_sent.handle(Input::Start);
    open_sent.handle(Input::TcpConnected(Outbound));
    for (name, mut s, down) in [
        ("OpenSent", open_sent, false),
        ("OpenConfirm", in_open_confirm(), false),
        ("Established", established(config()), true),
    ] {
        let actions = s.handle(Input::TimerExpired(Timer::Hold(Outbound)));
        assert_eq!(
            sent_notification(&actions),
            Some((Outbound, Notification::new(code::HOLD_TIMER_EXPIRED, 0, []))),
            "{name}"
        );
        assert!(actions.contains(&Action::Close(Outbound)), "{name}");
        assert_eq!(
            actions.contains(&Action::SessionDown(DownReason::HoldTimerExpired)),
            down,
            "{name}"
        );
        assert!(
            actions.contains(&Action::StartTimer(Timer::IdleHold, IDLE_HOLD_MIN)),
            "{name}"
        );
        assert_eq!(s.state(), State::Idle, "{name}");
    }
}

/// Every OPEN the configuration refuses, with the NOTIFICATION it must produce (RFC 4271 §6.2).
#[test]
fn bad_opens_get_the_right_open_message_error() {
    let mut two_octet_wrong_as = peer_open(90, [10, 0, 0, 1]);
    two_octet_wrong_as.capabilities.four_octet_as = None;
    two_octet_wrong_as.my_as = 65009;
    let mut no_common_family = peer_open(90, [10, 0, 0, 1]);
    no_common_family.capabilities.multiprotocol = vec![Family::Ipv6Unicast];
    let ipv4_only = SessionConfig {
        families: vec![Family::Ipv4Unicast],
        ..config()
    };
    let ibgp = SessionConfig {
        peer_as: 65001,
        ..config()
    };
    let mut ibgp_same_id = peer_open(90, LOCAL_ID.octets());
    ibgp_same_id.capabilities.four_octet_as = Some(65001);
    ibgp_same_id.my_as = 65001;
    let cases: Vec<(&str, SessionConfig, Open, u8)> = vec![
        (
            "wrong 4-octet AS",
            config(),
            Open {
                capabilities: Capabilities {
                    four_octet_as: Some(4_200_000_000),
                    ..peer_open(90, [10, 0, 0, 1]).capabilities
                },
                ..peer_open(90, [10, 0, 0, 1])
            },
            open_sub::BAD_PEER_AS,
        ),
        (
            "wrong 2-octet AS",
            config(),
            two_octet_wrong_as,
            open_sub::BAD_PEER_AS,
        ),
        (
            "hold time 1",
            config(),
            peer_open(1, [10, 0, 0, 1]),
            open_sub::UNACCEPTABLE_HOLD_TIME,
        ),
        (
            "hold time 2",
            config(),
            peer_open(2, [10, 0, 0, 1]),
            open_sub::UNACCEPTABLE_HOLD_TIME,
        ),
        (
            "BGP identifier 0",
            config(),
            peer_open(90, [0, 0, 0, 0]),
            open_sub::BAD_BGP_IDENTIFIER,
        ),
        (
            "iBGP identifier equal to ours",
            ibgp,
            ibgp_same_id,
            open_sub::BAD_BGP_IDENTIFIER,
        ),
        (
            "no family in common",
            ipv4_only,
            no_common_family,
            open_sub::UNSUPPORTED_CAPABILITY,
        ),
    ];
    for (name, config, open, subcode) in cases {
        let mut s = Session::new(config);
        s.handle(Input::Start);
        s.handle(Input::TcpConnected(Outbound));
        let actions = s.handle(Input::Message(Outbound, Message::Open(open)));
        let (id, n) = sent_notification(&actions).unwrap_or_else(|| panic!("{name}: {actions:?}"));
        assert_eq!(
            (id, n.code, n.subcode),
            (Outbound, code::OPEN_MESSAGE, subcode),
            "{name}"
        );
        assert!(actions.contains(&Action::Close(Outbound)), "{name}");
        assert_eq!(s.state(), State::Idle, "{name}");
        if subcode == open_sub::UNSUPPORTED_CAPABILITY {
            // RFC 5492 §5: the data names the capability we need: MP IPv4 unicast.
            assert_eq!(n.data, vec![1, 4, 0, 1, 0, 1], "{name}");
        }
    }
}

#[test]
fn ebgp_peer_may_share_our_identifier() {
    let mut s = Session::new(config());
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    let actions = s.handle(open_msg(90, LOCAL_ID.octets()));
    assert_eq!(sent_notification(&actions), None);
    assert_eq!(s.state(), State::OpenConfirm);
}

#[test]
fn peer_without_multiprotocol_capability_gets_ipv4_only() {
    let mut s = Session::new(config());
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    let mut open = peer_open(90, [10, 0, 0, 1]);
    open.capabilities.multiprotocol.clear();
    s.handle(Input::Message(Outbound, Message::Open(open)));
    s.handle(Input::Message(Outbound, Message::Keepalive));
    assert_eq!(
        s.established_connection().unwrap().1.families,
        vec![Family::Ipv4Unicast]
    );
}

/// Messages a state does not accept (RFC 4271 §8.2.2, subcodes RFC 6608 §3); data is the type.
#[test]
fn unexpected_messages_get_fsm_error_5_x() {
    let open_sent = || {
        let mut s = Session::new(config());
        s.handle(Input::Start);
        s.handle(Input::TcpConnected(Outbound));
        s
    };
    let update = || Message::UpdateChecked(UpdateSummary::default());
    let rr = || Message::RouteRefresh(RouteRefresh::new(Family::Ipv4Unicast));
    let cases: Vec<(&str, Session, Message, u8, u8)> = vec![
        (
            "KEEPALIVE in OpenSent",
            open_sent(),
            Message::Keepalive,
            fsm_sub::UNEXPECTED_IN_OPEN_SENT,
            4,
        ),
        (
            "UPDATE in OpenSent",
            open_sent(),
            update(),
            fsm_sub::UNEXPECTED_IN_OPEN_SENT,
            2,
        ),
        (
            "ROUTE-REFRESH in OpenSent",
            open_sent(),
            rr(),
            fsm_sub::UNEXPECTED_IN_OPEN_SENT,
            5,
        ),
        (
            "UPDATE in OpenConfirm",
            in_open_confirm(),
            update(),
            fsm_sub::UNEXPECTED_IN_OPEN_CONFIRM,
            2,
        ),
        (
            "OPEN in OpenConfirm",
            in_open_confirm(),
            Message::Open(peer_open(90, [10, 0, 0, 1])),
            fsm_sub::UNEXPECTED_IN_OPEN_CONFIRM,
            1,
        ),
        (
            "OPEN in Established",
            established(config()),
            Message::Open(peer_open(90, [10, 0, 0, 1])),
            fsm_sub::UNEXPECTED_IN_ESTABLISHED,
            1,
        ),
    ];
    for (name, mut s, message, subcode, message_type) in cases {
        let actions = s.handle(Input::Message(Outbound, message));
        assert_eq!(
            sent_notification(&actions),
            Some((Outbound, Notification::new(code::FSM, subcode, [message_type]))),
            "{name}"
        );
        assert!(actions.contains(&Action::Close(Outbound)), "{name}");
        assert_eq!(s.state(), State::Idle, "{name}");
    }
}

#[test]
fn decode_errors_send_their_notification() {
    let errors = [
        DecodeError::ConnectionNotSynchronized,
        DecodeError::BadMessageLength {
            length: 18,
            message_type: 4,
        },
        DecodeError::BadMessageType { message_type: 9 },
        DecodeError::Open(OpenError::UnsupportedVersion { version: 3 }),
        DecodeError::Open(OpenError::UnsupportedOptionalParameter { parameter_type: 1 }),
        DecodeError::Update {
            subcode: 1,
            reason: "test",
            data: vec![],
        },
    ];
    for error in errors {
        let mut s = established(config());
        let actions = s.handle(Input::DecodeError(Outbound, error.clone()));
        assert_eq!(
            sent_notification(&actions),
            Some((Outbound, error.notification()))
        );
        assert!(
            actions.contains(&Action::SessionDown(DownReason::NotificationSent(
                error.notification()
            )))
        );
        assert_eq!(s.state(), State::Idle);
    }
}

#[test]
fn notification_from_the_peer_closes_without_answering() {
    let mut s = established(config());
    let n = Notification::cease(cease::ADMINISTRATIVE_RESET);
    let actions = s.handle(Input::Message(Outbound, Message::Notification(n.clone())));
    assert_eq!(sent_notification(&actions), None);
    assert!(actions.contains(&Action::Close(Outbound)));
    assert!(actions.contains(&Action::SessionDown(DownReason::NotificationReceived(n))));
}

#[test]
fn stop_reasons_send_their_cease_subcode() {
    let cases = [
        (
            StopReason::AdministrativeShutdown {
                message: "maintenance".into(),
            },
            Some(cease::ADMINISTRATIVE_SHUTDOWN),
            false,
        ),
        (
            StopReason::PeerDeconfigured,
            Some(cease::PEER_DECONFIGURED),
            false,
        ),
        (
            StopReason::AdministrativeReset,
            Some(cease::ADMINISTRATIVE_RESET),
            true,
        ),
        (StopReason::BfdDown, Some(cease::BFD_DOWN), true),
        (StopReason::Restarting, None, false),
    ];
    for (reason, subcode, comes_back) in cases {
        let mut s = established(config());
        let actions = s.handle(Input::Stop(reason.clone()));
        assert_eq!(
            sent_notification(&actions).map(|(_, n)| (n.code, n.subcode)),
            subcode.map(|c| (code::CEASE, c)),
            "{reason:?}"
        );
        assert!(actions.contains(&Action::Close(Outbound)), "{reason:?}");
        assert!(actions.contains(&Action::SessionDown(DownReason::Stopped(reason.clone()))));
        assert_eq!(
            actions.contains(&Action::StartTimer(Timer::IdleHold, IDLE_HOLD_MIN)),
            comes_back,
            "{reason:?}"
        );
        assert_eq!(s.state(), State::Idle);
    }
    // RFC 9003: the shutdown communication is a length octet and UTF-8.
    let mut s = established(config());
    let actions = s.handle(Input::Stop(StopReason::AdministrativeShutdown {
        message: "maintenance".into(),
    }));
    assert_eq!(
        sent_notification(&actions).unwrap().1.data,
        b"\x0bmaintenance".to_vec()
    );
}
