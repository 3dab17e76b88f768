//! Restarts after failures, connection collisions (RFC 4271 §6.8), graceful restart (RFC 4724),
//! established traffic and configuration checks.

use super::*;

#[test]
fn failures_restart_after_a_doubling_idle_hold_that_resets_when_established() {
    let mut s = established(config());
    let actions = s.handle(Input::TcpFailed(Outbound));
    assert!(actions.contains(&Action::SessionDown(DownReason::ConnectionLost)));
    assert!(actions.contains(&Action::StartTimer(Timer::IdleHold, secs(1))));
    let actions = s.handle(Input::TimerExpired(Timer::IdleHold));
    assert!(actions.contains(&Action::Connect));
    s.handle(Input::TcpConnected(Outbound));
    let actions = s.handle(Input::TcpFailed(Outbound));
    assert!(
        actions.contains(&Action::StartTimer(Timer::IdleHold, secs(2))),
        "{actions:?}"
    );
    s.handle(Input::TimerExpired(Timer::IdleHold));
    s.handle(Input::TcpConnected(Outbound));
    s.handle(open_msg(90, [10, 0, 0, 1]));
    s.handle(Input::Message(Outbound, Message::Keepalive));
    let actions = s.handle(Input::TimerExpired(Timer::Hold(Outbound)));
    assert!(actions.contains(&Action::StartTimer(Timer::IdleHold, secs(1))));
}

#[test]
fn failed_connect_waits_for_connect_retry() {
    let mut s = Session::new(config());
    s.handle(Input::Start);
    let actions = s.handle(Input::TcpFailed(Outbound));
    assert!(actions.contains(&Action::Close(Outbound)));
    assert_eq!(s.state(), State::Active);
    let actions = s.handle(Input::TimerExpired(Timer::ConnectRetry));
    assert!(actions.contains(&Action::Connect));
    assert_eq!(s.state(), State::Connect);
    // A connect that hangs is abandoned and retried.
    let actions = s.handle(Input::TimerExpired(Timer::ConnectRetry));
    assert_eq!(&actions[..2], &[Action::Close(Outbound), Action::Connect]);
}

/// Both connections in OpenSent; the peer's OPEN arrives on `open_on`. RFC 4271 §6.8: the
/// connection opened by the higher identifier survives; the other gets Cease 6/7.
fn collide(
    local_id: [u8; 4],
    peer_id: [u8; 4],
    local_as: u32,
    open_on: ConnectionId,
) -> (Session, Vec<Action>) {
    let mut s = Session::new(SessionConfig {
        router_id: local_id.into(),
        local_as,
        ..config()
    });
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    s.handle(Input::TcpConnected(Inbound));
    assert_eq!(s.state(), State::OpenSent);
    let actions = s.handle(Input::Message(open_on, Message::Open(peer_open(90, peer_id))));
    (s, actions)
}

#[test]
fn collision_keeps_the_connection_of_the_higher_identifier() {
    let collision = Notification::cease(cease::CONNECTION_COLLISION_RESOLUTION);
    // (local id, peer id, local AS, OPEN arrives on, connection closed)
    let cases = [
        ([10, 0, 0, 9], [10, 0, 0, 1], 65001, Inbound, Inbound),
        ([10, 0, 0, 9], [10, 0, 0, 1], 65001, Outbound, Inbound),
        ([10, 0, 0, 1], [10, 0, 0, 9], 65001, Outbound, Outbound),
        ([10, 0, 0, 1], [10, 0, 0, 9], 65001, Inbound, Outbound),
        // Equal identifiers between ASes (RFC 6286 §2.3): the larger AS's connection wins.
        ([10, 0, 0, 5], [10, 0, 0, 5], 65001, Inbound, Inbound),
        ([10, 0, 0, 5], [10, 0, 0, 5], 64999, Outbound, Outbound),
    ];
    for (local_id, peer_id, local_as, open_on, closed) in cases {
        let (mut s, actions) = collide(local_id, peer_id, local_as, open_on);
        let name = format!("{local_id:?} vs {peer_id:?}, AS {local_as}, OPEN on {open_on:?}");
        assert_eq!(
            sent_notification(&actions),
            Some((closed, collision.clone())),
            "{name}"
        );
        assert!(actions.contains(&Action::Close(closed)), "{name}");
        let kept = closed.other();
        if kept != open_on {
            assert_eq!(s.state(), State::OpenSent, "{name}");
            s.handle(Input::Message(kept, Message::Open(peer_open(90, peer_id))));
        }
        assert_eq!(s.state(), State::OpenConfirm, "{name}");
        let actions = s.handle(Input::Message(kept, Message::Keepalive));
        assert!(
            actions
                .iter()
                .any(|a| matches!(a, Action::Established(id, _) if *id == kept)),
            "{name}"
        );
    }
}

#[test]
fn collision_winner_compares_identifiers_as_integers() {
    let id = |a: u8| Ipv4Addr::new(a, 0, 0, 1);
    assert_eq!(collision_winner(id(200), 1, id(10), 1), Outbound);
    assert_eq!(collision_winner(id(10), 1, id(200), 1), Inbound);
    assert_eq!(collision_winner(id(7), 2, id(7), 1), Outbound);
    assert_eq!(collision_winner(id(7), 1, id(7), 2), Inbound);
}

#[test]
fn inbound_while_established_or_stopped_is_rejected() {
    let mut s = established(config());
    let actions = s.handle(Input::TcpConnected(Inbound));
    assert_eq!(
        actions,
        vec![Action::RejectInbound(Some(Notification::cease(
            cease::CONNECTION_COLLISION_RESOLUTION
        )))]
    );
    assert_eq!(s.state(), State::Established);
    let mut idle = Session::new(config());
    assert_eq!(
        idle.handle(Input::TcpConnected(Inbound)),
        vec![Action::RejectInbound(Some(Notification::cease(
            cease::CONNECTION_REJECTED
        )))]
    );
}

#[test]
fn established_inbound_abandons_the_pending_connect() {
    let mut s = Session::new(config());
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Inbound));
    s.handle(Input::Message(
        Inbound,
        Message::Open(peer_open(90, [10, 0, 0, 1])),
    ));
    let actions = s.handle(Input::Message(Inbound, Message::Keepalive));
    assert!(actions.contains(&Action::Close(Outbound)));
    assert!(actions.contains(&Action::StopTimer(Timer::ConnectRetry)));
    assert_eq!(
        sent_notification(&actions),
        None,
        "nothing to send on a connection still connecting"
    );
    // Its connect finishing late is closed at once.
    assert_eq!(
        s.handle(Input::TcpConnected(Outbound)),
        vec![Action::Close(Outbound)]
    );
}

#[test]
fn graceful_restart_sets_the_r_bit_on_the_first_session_only() {
    let mut s = Session::new(SessionConfig {
        restarting: true,
        ..config()
    });
    s.handle(Input::Start);
    let actions = s.handle(Input::TcpConnected(Outbound));
    assert!(
        sent_open(&actions)
            .unwrap()
            .capabilities
            .graceful_restart
            .unwrap()
            .restarting
    );
    s.handle(open_msg(90, [10, 0, 0, 1]));
    s.handle(Input::Message(Outbound, Message::Keepalive));
    assert!(s.established_connection().unwrap().1.local_restarting);
    s.handle(Input::TcpFailed(Outbound));
    s.handle(Input::TimerExpired(Timer::IdleHold));
    let actions = s.handle(Input::TcpConnected(Outbound));
    assert!(
        !sent_open(&actions)
            .unwrap()
            .capabilities
            .graceful_restart
            .unwrap()
            .restarting
    );
}

#[test]
fn restarting_without_graceful_restart_configured_sends_no_capability() {
    let mut s = Session::new(SessionConfig {
        restarting: true,
        graceful_restart: None,
        ..config()
    });
    s.handle(Input::Start);
    let actions = s.handle(Input::TcpConnected(Outbound));
    assert_eq!(sent_open(&actions).unwrap().capabilities.graceful_restart, None);
}

#[test]
fn peer_restart_bit_is_reported() {
    let mut s = Session::new(config());
    s.handle(Input::Start);
    s.handle(Input::TcpConnected(Outbound));
    let mut open = peer_open(90, [10, 0, 0, 1]);
    open.capabilities.graceful_restart = Some(GracefulRestart {
        restarting: true,
        notification: false,
        restart_time: 90,
        families: vec![],
    });
    let actions = s.handle(Input::Message(Outbound, Message::Open(open)));
    assert!(actions.contains(&Action::PeerRestarting));
}

#[test]
fn established_messages() {
    let mut s = established(config());
    let hold = Action::StartTimer(Timer::Hold(Outbound), secs(90));
    let refresh = |afi, safi, subtype| {
        Input::Message(
            Outbound,
            Message::RouteRefresh(RouteRefresh { afi, safi, subtype }),
        )
    };
    assert_eq!(
        s.handle(refresh(2, 1, 0)),
        vec![hold.clone(), Action::RouteRefreshRequested(Family::Ipv6Unicast)]
    );
    assert_eq!(
        s.handle(refresh(25, 70, 0)),
        vec![hold.clone()],
        "family never negotiated: ignored"
    );
    assert_eq!(
        s.handle(refresh(1, 1, 1)),
        vec![hold.clone()],
        "enhanced route refresh not negotiated: ignored"
    );
    assert_eq!(
        s.handle(Input::Message(Outbound, Message::Keepalive)),
        vec![hold.clone()]
    );
    let eor = UpdateSummary {
        end_of_rib: Some(Family::Ipv6Unicast),
        ..UpdateSummary::default()
    };
    assert_eq!(
        s.handle(Input::Message(Outbound, Message::UpdateChecked(eor))),
        vec![hold.clone(), Action::EndOfRibReceived(Family::Ipv6Unicast)]
    );
    let update = Box::new(Update {
        nlri: vec!["10.0.0.0/8".parse().unwrap()],
        ..Update::default()
    });
    assert_eq!(
        s.handle(Input::Message(Outbound, Message::Update(update.clone()))),
        vec![hold, Action::UpdateReceived(update)]
    );
}

#[test]
fn inputs_for_absent_connections_are_ignored() {
    let mut s = established(config());
    assert_eq!(s.handle(Input::Message(Inbound, Message::Keepalive)), vec![]);
    assert_eq!(s.handle(Input::TcpFailed(Inbound)), vec![]);
    assert_eq!(
        s.handle(Input::DecodeError(
            Inbound,
            DecodeError::ConnectionNotSynchronized
        )),
        vec![]
    );
    assert_eq!(s.handle(Input::TimerExpired(Timer::Hold(Inbound))), vec![]);
    assert_eq!(s.handle(Input::TimerExpired(Timer::Keepalive(Inbound))), vec![]);
    assert_eq!(s.handle(Input::Start), vec![]);
    assert_eq!(s.state(), State::Established);
}

#[test]
fn config_validation_names_the_field() {
    assert_eq!(config().validate(), Ok(()));
    let bad: Vec<(SessionConfig, &str)> = vec![
        (
            SessionConfig {
                local_as: 0,
                ..config()
            },
            "local_as",
        ),
        (
            SessionConfig {
                peer_as: 0,
                ..config()
            },
            "peer_as",
        ),
        (
            SessionConfig {
                router_id: Ipv4Addr::UNSPECIFIED,
                ..config()
            },
            "router_id",
        ),
        (
            SessionConfig {
                hold_time: 2,
                ..config()
            },
            "hold_time",
        ),
        (
            SessionConfig {
                families: vec![],
                ..config()
            },
            "families",
        ),
        (
            SessionConfig {
                connect_retry: Duration::ZERO,
                ..config()
            },
            "connect_retry",
        ),
        (
            SessionConfig {
                graceful_restart: Some(GracefulRestartConfig {
                    restart_time: 4096,
                    forwarding_preserved: true,
                }),
                ..config()
            },
            "graceful_restart.restart_time",
        ),
    ];
    for (config, field) in bad {
        assert_eq!(config.validate().unwrap_err().field, field);
    }
    assert!(
        SessionConfig {
            hold_time: 0,
            ..config()
        }
        .validate()
        .is_ok()
    );
}

#[test]
fn shutdown_communication_is_cut_at_a_character_boundary() {
    let mut s = established(config());
    let actions = s.handle(Input::Stop(StopReason::AdministrativeShutdown {
        message: "é".repeat(200),
    }));
    let data = sent_notification(&actions).unwrap().1.data;
    assert_eq!((data[0], data.len()), (254, 255));
    assert!(std::str::from_utf8(&data[1..]).is_ok());
}
