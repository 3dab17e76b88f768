//! The BGP core of the speaker, sans-IO: [`wire`] (codec), [`fsm`] (RFC 4271 session state
//! machine), [`rib_out`] (Adj-RIB-Out and UPDATE packing). A driver that owns sockets and timers
//! feeds them; see [`fsm`] for the loop it is expected to run.

pub mod fsm;
pub mod rib_out;
pub mod wire;
