//! Typed rows of the databases this project reads and writes.

pub mod nb;
pub mod sb;
pub mod vswitch;
