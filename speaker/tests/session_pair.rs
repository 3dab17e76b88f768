//! Two of our sessions talking to each other through the real encoder, frame splitter and
//! decoder, with an in-memory "network" standing in for the driver: both sides connect at
//! once, the collision is settled the same way on both sides, and routes from one side's
//! Adj-RIB-Out arrive at the other.

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::time::Duration;

use kube_ovn_speaker::bgp::fsm::{Action, ConnectionId, Input, Session, SessionConfig, State};
use kube_ovn_speaker::bgp::rib_out::{AdjRibOut, RouteAttributes};
use kube_ovn_speaker::bgp::wire::{
    DecodeContext, EncodeContext, Family, FrameSplitter, Message, UpdateMode, decode_frame, encode,
};

/// Which side opened a TCP connection: 0 or 1.
type Link = usize;

struct Side {
    session: Session,
    rib: AdjRibOut,
    /// Bytes arriving on the connection opened by side `link`.
    inbox: [FrameSplitter; 2],
    decode: DecodeContext,
    encode: EncodeContext,
    received_routes: usize,
    end_of_rib: Vec<Family>,
    peer_restarting: bool,
}

fn config(local_as: u32, peer_as: u32, id: [u8; 4]) -> SessionConfig {
    SessionConfig {
        local_as,
        peer_as,
        router_id: Ipv4Addr::from(id),
        hold_time: 90,
        connect_retry: Duration::from_secs(5),
        passive: false,
        families: Family::ALL.to_vec(),
        graceful_restart: None,
        restarting: false,
        extended_next_hop: false,
    }
}

fn side(config: SessionConfig) -> Side {
    let mut rib = AdjRibOut::new(config.local_as);
    rib.set_local_addresses(Some(config.router_id), Some("2001:db8::1".parse().unwrap()));
    rib.set_ready();
    Side {
        session: Session::new(config),
        rib,
        inbox: [FrameSplitter::new(), FrameSplitter::new()],
        decode: DecodeContext {
            update_mode: UpdateMode::Full,
            ..DecodeContext::default()
        },
        encode: EncodeContext::default(),
        received_routes: 0,
        end_of_rib: Vec::new(),
        peer_restarting: false,
    }
}

/// The connection opened by `link`, as seen from side `me`.
fn conn_id(me: usize, link: Link) -> ConnectionId {
    if me == link {
        ConnectionId::Outbound
    } else {
        ConnectionId::Inbound
    }
}

fn link_of(me: usize, id: ConnectionId) -> Link {
    match id {
        ConnectionId::Outbound => me,
        ConnectionId::Inbound => 1 - me,
    }
}

enum Event {
    Input(usize, Input),
    /// Bytes that reached side `.0` on the connection opened by `.1`. They are decoded when
    /// handled, not when sent: the UPDATE decode context comes from the session's negotiated
    /// parameters, which a frame sent right after Established must already see.
    Bytes(usize, Link, Vec<u8>),
}

struct Network {
    sides: [Side; 2],
    open: [bool; 2],
    events: VecDeque<Event>,
}

impl Network {
    fn run(&mut self) {
        let mut steps = 0;
        while let Some(event) = self.events.pop_front() {
            steps += 1;
            assert!(steps < 10_000, "no convergence");
            match event {
                Event::Input(me, input) => {
                    let actions = self.sides[me].session.handle(input);
                    for action in actions {
                        self.act(me, action);
                    }
                }
                Event::Bytes(me, link, bytes) => {
                    self.sides[me].inbox[link].extend(&bytes);
                    // One frame at a time, each handled before the next is decoded: the
                    // KEEPALIVE that makes the session Established changes how the UPDATEs
                    // behind it in the same read are decoded.
                    loop {
                        let side = &mut self.sides[me];
                        let Some(frame) = side.inbox[link].next_frame().unwrap() else {
                            break;
                        };
                        let decoded = decode_frame(frame, side.decode).unwrap();
                        let actions = side
                            .session
                            .handle(Input::Message(conn_id(me, link), decoded.message));
                        for action in actions {
                            self.act(me, action);
                        }
                    }
                }
            }
        }
    }

    fn send(&mut self, me: usize, id: ConnectionId, message: &Message) {
        let link = link_of(me, id);
        if !self.open[link] {
            return;
        }
        let bytes = encode(message, self.sides[me].encode).unwrap();
        self.send_bytes(me, id, bytes);
    }

    /// Bytes already encoded (the Adj-RIB-Out's output).
    fn send_bytes(&mut self, me: usize, id: ConnectionId, bytes: Vec<u8>) {
        let link = link_of(me, id);
        if self.open[link] && !bytes.is_empty() {
            self.events.push_back(Event::Bytes(1 - me, link, bytes));
        }
    }

    fn act(&mut self, me: usize, action: Action) {
        let peer = 1 - me;
        match action {
            Action::Connect => {
                self.open[me] = true;
                self.sides[peer].inbox[me] = FrameSplitter::new();
                self.events
                    .push_back(Event::Input(me, Input::TcpConnected(ConnectionId::Outbound)));
                self.events
                    .push_back(Event::Input(peer, Input::TcpConnected(ConnectionId::Inbound)));
            }
            Action::RejectInbound(_) => {
                self.open[peer] = false;
                self.events
                    .push_back(Event::Input(peer, Input::TcpFailed(ConnectionId::Outbound)));
            }
            Action::Send(id, message) => self.send(me, id, &message),
            Action::Close(id) => {
                let link = link_of(me, id);
                if std::mem::replace(&mut self.open[link], false) {
                    self.events
                        .push_back(Event::Input(peer, Input::TcpFailed(conn_id(peer, link))));
                }
            }
            Action::Established(id, negotiated) => {
                let side = &mut self.sides[me];
                side.encode = negotiated.encode_context();
                side.decode = negotiated.decode_context(UpdateMode::Full);
                side.rib.session_up(&negotiated);
                let output = side.rib.take_output(usize::MAX);
                self.send_bytes(me, id, output.bytes);
            }
            Action::UpdateReceived(update) => {
                self.sides[me].received_routes +=
                    update.nlri.len() + update.mp_reach.map_or(0, |r| r.nlri.len());
            }
            Action::EndOfRibReceived(family) => self.sides[me].end_of_rib.push(family),
            Action::PeerRestarting => self.sides[me].peer_restarting = true,
            _ => {}
        }
    }
}

#[test]
fn simultaneous_open_settles_on_one_connection_and_routes_flow() {
    let mut a = side(config(65001, 65000, [10, 0, 0, 2]));
    for i in 0..2000u32 {
        let prefix = ipnet::Ipv4Net::new(Ipv4Addr::from(0x0a11_0000 + i), 32).unwrap();
        a.rib.announce(prefix.into(), RouteAttributes::default()).unwrap();
    }
    a.rib
        .announce("fd00:10:16::/64".parse().unwrap(), RouteAttributes::default())
        .unwrap();
    let b = side(config(65000, 65001, [10, 0, 0, 1]));
    let net = start_both(a, b);

    let [a, b] = &net.sides;
    assert_eq!(
        (a.session.state(), b.session.state()),
        (State::Established, State::Established)
    );
    // A has the higher identifier, so the connection A opened survives on both sides.
    assert_eq!(
        a.session.established_connection().unwrap().0,
        ConnectionId::Outbound
    );
    assert_eq!(
        b.session.established_connection().unwrap().0,
        ConnectionId::Inbound
    );
    assert_eq!(net.open, [true, false]);
    assert_eq!(b.received_routes, 2001);
    assert_eq!(b.end_of_rib, vec![Family::Ipv4Unicast, Family::Ipv6Unicast]);
    assert_eq!(a.end_of_rib, vec![Family::Ipv4Unicast, Family::Ipv6Unicast]);
}

fn start_both(a: Side, b: Side) -> Network {
    let mut net = Network {
        sides: [a, b],
        open: [false; 2],
        events: VecDeque::new(),
    };
    net.events.push_back(Event::Input(0, Input::Start));
    net.events.push_back(Event::Input(1, Input::Start));
    net.run();
    net
}

#[test]
fn lower_identifier_side_keeps_the_peers_connection() {
    let a = side(config(65001, 65000, [10, 0, 0, 1]));
    let b = side(config(65000, 65001, [10, 0, 0, 2]));
    let net = start_both(a, b);
    assert_eq!(net.open, [false, true]);
    assert_eq!(
        net.sides[0].session.established_connection().unwrap().0,
        ConnectionId::Inbound
    );
    assert_eq!(
        net.sides[1].session.established_connection().unwrap().0,
        ConnectionId::Outbound
    );
}

/// RFC 4724 as the restarting speaker: the R bit reaches the peer, routes wait until our data
/// is ready, then come with End-of-RIB after them.
#[test]
fn restarting_side_holds_routes_until_ready_then_sends_end_of_rib() {
    let gr = kube_ovn_speaker::bgp::fsm::GracefulRestartConfig {
        restart_time: 120,
        forwarding_preserved: true,
    };
    let mut a = side(SessionConfig {
        graceful_restart: Some(gr),
        restarting: true,
        ..config(65001, 65000, [10, 0, 0, 2])
    });
    a.rib = AdjRibOut::new(65001);
    a.rib.set_local_addresses(Some(Ipv4Addr::new(10, 0, 0, 2)), None);
    a.rib
        .announce("10.16.0.0/16".parse().unwrap(), RouteAttributes::default())
        .unwrap();
    let b = side(config(65000, 65001, [10, 0, 0, 1]));
    let mut net = start_both(a, b);
    assert!(net.sides[1].peer_restarting);
    assert_eq!(
        (net.sides[1].received_routes, net.sides[1].end_of_rib.len()),
        (0, 0),
        "held"
    );
    net.sides[0].rib.set_ready();
    let (id, _) = net.sides[0].session.established_connection().unwrap();
    let output = net.sides[0].rib.take_output(usize::MAX);
    net.send_bytes(0, id, output.bytes);
    net.run();
    assert_eq!(net.sides[1].received_routes, 1);
    assert_eq!(
        net.sides[1].end_of_rib,
        vec![Family::Ipv4Unicast, Family::Ipv6Unicast]
    );
}
