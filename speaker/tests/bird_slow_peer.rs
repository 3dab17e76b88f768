//! A peer that stops reading (BIRD frozen by SIGSTOP) while 100,000 routes churn: the speaker's
//! queue toward it stays bounded (at most `MAX_IN_FLIGHT` plus one message), the changes made
//! meanwhile wait in the Adj-RIB-Out where each supersedes the last instead of queueing behind
//! it, and once BIRD runs again (SIGCONT) it converges to the final set, checked in BIRD's own
//! table. The kernel's TCP buffers in both namespaces are capped at 64 KiB so that the
//! speaker's queue, not the kernel's, is what fills.
//!
//! The hold timer decides what happens to the session while the peer is frozen, and both ways
//! must end in the final set: with a hold time far longer than the freeze the session survives
//! and the peer reads the coalesced changes; with 3 s it expires on both sides, and the new
//! session's full table is the final set. Needs root; fails when BIRD is missing.

mod common;

use std::net::Ipv4Addr;
use std::ops::Range;
use std::time::Duration;

use common::*;
use ipnet::{IpNet, Ipv4Net};
use kube_ovn_speaker::bgp::rib_out::RouteAttributes;
use kube_ovn_speaker::bgp::wire::MAX_MESSAGE_LEN;
use kube_ovn_speaker::driver::{MAX_IN_FLIGHT, PeerStatus};
use kube_ovn_testkit::wait_until;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

const ROUTES: u32 = 100_000;
const ROUNDS: u32 = 30;
/// Where the one prefix a round adds lives, so each round shows in `prefixes_desired`.
const EXTRA: u32 = 0x0010_0000;
/// A full table of 100,000 routes through a debug build and BIRD takes a few seconds.
const TABLE_WAIT: Duration = Duration::from_mins(2);
/// A hold time the freeze (some seconds) stays well inside.
const HOLD_SURVIVES: u16 = 240;
/// A hold time the freeze outlasts.
const HOLD_EXPIRES: u16 = 3;

/// 10.17.0.0 + i for i in `range`, each with MED `med`.
fn routes(range: Range<u32>, med: u32) -> Vec<(IpNet, RouteAttributes)> {
    range
        .map(|i| {
            let prefix = Ipv4Net::new(Ipv4Addr::from(0x0a11_0000 + i), 32).unwrap();
            let attributes = RouteAttributes {
                med: Some(med),
                ..RouteAttributes::default()
            };
            (IpNet::V4(prefix), attributes)
        })
        .collect()
}

fn host_text(i: u32) -> String {
    format!("{}/32", Ipv4Addr::from(0x0a11_0000 + i))
}

fn bounded(status: &PeerStatus) -> bool {
    status.out_queue_peak_bytes <= MAX_IN_FLIGHT + MAX_MESSAGE_LEN
}

#[test]
fn a_frozen_peer_costs_bounded_memory_and_gets_the_final_set_when_it_resumes() {
    let (stalled, done) = freeze_churn_resume(HOLD_SURVIVES);
    assert!(
        stalled.is_established() && done.flaps == 0,
        "{stalled:?}\n{done:?}"
    );
    assert!(
        stalled.out_queue_bytes > 0 && stalled.prefixes_pending > 0,
        "the frozen peer must have stopped taking: {stalled:?}"
    );
}

#[test]
fn a_session_that_expires_while_the_peer_is_frozen_comes_back_with_the_final_set() {
    let (_, done) = freeze_churn_resume(HOLD_EXPIRES);
    assert!(done.flaps >= 1, "the hold timer must have expired: {done:?}");
    assert!(
        done.last_error
            .as_deref()
            .is_some_and(|e| e.contains("hold timer expired")
                || e.contains("NOTIFICATION received")
                || e.contains("connection lost")),
        "{done:?}"
    );
}

/// Freezes BIRD, churns the table, takes the final set, resumes BIRD and checks its table;
/// returns our status at the end of the churn and once everything went out.
fn freeze_churn_resume(hold: u16) -> (PeerStatus, PeerStatus) {
    init_tracing();
    let lab = Lab::direct().unwrap();
    lab.node
        .exec(&["sysctl", "-qw", "net.ipv4.tcp_wmem=4096 16384 65536"])
        .unwrap();
    lab.tor
        .exec(&["sysctl", "-qw", "net.ipv4.tcp_rmem=4096 16384 65536"])
        .unwrap();
    let (bird, speaker_with_peer) = tor_and_speaker_with_hold(&lab, hold).unwrap();
    lab.on_node(|rt| {
        let _enter = rt.enter();
        let (_speaker, peer) = speaker_with_peer();
        peer.replace_all(routes(0..ROUTES, 0)).unwrap();
        peer.set_ready().unwrap();
        bird.wait_established().unwrap();
        wait_until("the first table in BIRD", TABLE_WAIT, || {
            Ok(bird.count("master4")? == ROUTES as usize)
        })
        .unwrap();
        let settled = block(
            rt,
            peer.wait_for("the first table written out", WAIT, |s| {
                s.initial_table_sent && s.prefixes_pending == 0 && s.out_queue_bytes == 0
            }),
        )
        .unwrap();
        // UPDATEs of one full table, the two End-of-RIBs aside.
        let one_table = settled.messages_sent.update - 2;

        let pid = bird.pid();
        let _resume = ContinueOnDrop(pid);
        kill(Pid::from_raw(pid), Signal::SIGSTOP).unwrap();
        for round in 1..=ROUNDS {
            let mut table = routes(0..ROUTES, round);
            table.extend(routes(EXTRA..EXTRA + round, round));
            peer.replace_all(table).unwrap();
            let taken = block(
                rt,
                peer.wait_for("the round taken by the peer task", WAIT, |s| {
                    s.prefixes_desired == (ROUTES + round) as usize
                }),
            )
            .unwrap();
            assert!(bounded(&taken), "round {round}: {taken:?}");
        }
        let stalled = peer.status();
        assert!(
            bounded(&stalled),
            "queued at most {MAX_IN_FLIGHT} + one message: {stalled:?}"
        );

        // The final set: half the routes gone, half new, all with MED 999.
        let last = ROUTES * 3 / 2;
        peer.replace_all(routes(ROUTES / 2..last, 999)).unwrap();
        block(
            rt,
            peer.wait_for("the final set taken", WAIT, |s| {
                s.prefixes_desired == ROUTES as usize
            }),
        )
        .unwrap();
        kill(Pid::from_raw(pid), Signal::SIGCONT).unwrap();

        wait_until("BIRD to hold exactly the final set", TABLE_WAIT, || {
            Ok(bird.count("master4")? == ROUTES as usize
                && bird.count_where("master4", "bgp_med = 999")? == ROUTES as usize)
        })
        .unwrap();
        assert!(!bird.has(&host_text(0)).unwrap(), "withdrawn while frozen");
        assert!(bird.has(&host_text(last - 1)).unwrap(), "added while frozen");
        assert!(!bird.has(&host_text(EXTRA)).unwrap(), "a round's extra prefix");
        let done = block(
            rt,
            peer.wait_for("everything written out", WAIT, |s| {
                s.prefixes_pending == 0 && s.out_queue_bytes == 0 && s.prefixes_sent == ROUTES as usize
            }),
        )
        .unwrap();
        assert!(bounded(&done), "{done:?}");
        // Superseded changes never went out: far fewer UPDATEs than one table per round.
        let sent = done.messages_sent.update - settled.messages_sent.update;
        let naive = u64::from(ROUNDS + 1) * one_table;
        eprintln!(
            "UPDATEs while frozen and after: {sent} (one table is {one_table}, {naive} without \
             coalescing); peak queue {} bytes; session flaps {}",
            done.out_queue_peak_bytes, done.flaps
        );
        assert!(
            sent < naive / 4,
            "{sent} UPDATEs sent; {naive} without coalescing"
        );
        (stalled, done)
    })
}
