//! The BGP core of the speaker, sans-IO: [`wire`] (codec), [`fsm`] (RFC 4271 session state
//! machine), [`rib_out`] (Adj-RIB-Out and UPDATE packing). The driver that owns sockets and
//! timers and feeds them is [`crate::driver`]; [`fsm`] draws the loop it runs.

pub mod fsm;
pub mod rib_out;
pub mod wire;
