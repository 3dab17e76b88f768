//! fsm
