//! OVSDB client.
