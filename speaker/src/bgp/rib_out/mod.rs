//! rib
