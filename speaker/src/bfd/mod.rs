//! BFD, Bidirectional Forwarding Detection (RFC 5880), single hop over UDP (RFC 5881).
//!
//! - [`packet`]: the Control packet codec and the stateless receive checks;
//! - [`session`]: the sans-IO session state machine;
//! - [`driver`]: tokio sockets and timers around it, and the [`Bfd`] / [`BfdHandle`] API.
//!
//! Asynchronous mode only: no Demand mode of our own, no Echo, no authentication (packets with
//! the A bit are discarded, RFC 5880 §6.8.6).
//!
//! # Wiring to BGP (done on the BGP side)
//!
//! For each peer configured with BFD (Kube-OVN's `--enable-bfd`, with `--bfd-min-tx`,
//! `--bfd-min-rx` in ms and `--bfd-detection-multiplier` giving [`Timers`]):
//!
//! ```text
//! let bfd = Bfd::new();                                   // one per speaker
//! let h = bfd.add_session(peer_ip, local_ip, timers)?;         // local_ip: the session's
//! let mut status = h.subscribe();                          //   source address toward the peer
//! let mut last = *status.borrow();
//! while status.changed().await.is_ok() {
//!     let now = *status.borrow_and_update();
//!     if now.is_failure_after(&last) { peer_handle.bfd_down() }   // Up → Down, not AdminDown
//!     else if now.state == State::Up { peer_handle.bfd_up() }
//!     last = now;
//! }
//! ```
//!
//! `bfd_down()` stops the BGP session with Cease subcode 10, "BFD Down" (RFC 9384;
//! `StopReason::BfdDown`), which withdraws what was learnt from and announced to that peer;
//! the session comes back after its idle hold time, and the BGP side may hold it down until
//! BFD is Up again (RFC 5882 §4.3 dampening). A peer going AdminDown is not a failure
//! (RFC 5882 §3.2), so [`Status::is_failure_after`] is false for it. Keep the [`BfdHandle`]
//! as long as the peer is configured: dropping it tears the BFD session down (AdminDown).

pub mod driver;
pub mod packet;
pub mod session;

pub use driver::{Bfd, BfdError, BfdHandle};
pub use packet::{Diagnostic, State};
pub use session::{Status, Timers};
