//! Free TCP ports for test daemons.
//!
//! Binding port 0 and closing the socket hands out a port from the kernel's ephemeral range
//! (`net.ipv4.ip_local_port_range`, 32768–60999 on Debian), the same range every outgoing
//! connection's source port comes from, and two calls in a row may even return the same port:
//! CI once lost a whole test binary when etcd's peer or client port was taken in the moment
//! between the pick and etcd's bind. So ports are picked below that range, never twice in one
//! process, and checked by a bind on 127.0.0.1.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::net::TcpListener;
use std::sync::{Mutex, PoisonError};

/// Below the kernel's default ephemeral range, above the well-known and most registered
/// daemon ports a developer's machine may run.
const PORTS: std::ops::Range<u16> = 20_000..32_768;

/// A TCP port on 127.0.0.1 that nobody listens on right now and that this process has not
/// handed out before.
pub fn free_port() -> anyhow::Result<u16> {
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(PoisonError::into_inner);
    let given = given.get_or_insert_with(HashSet::new);
    let span = u64::from(PORTS.end - PORTS.start);
    let seed = RandomState::new();
    for attempt in 0u64..1_000 {
        let offset = u16::try_from(seed.hash_one(attempt) % span).expect("below the span");
        let port = PORTS.start + offset;
        if given.contains(&port) || TcpListener::bind(("127.0.0.1", port)).is_err() {
            continue;
        }
        given.insert(port);
        return Ok(port);
    }
    anyhow::bail!("no free TCP port on 127.0.0.1 in {PORTS:?} after 1000 tries")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_below_the_ephemeral_range_and_never_repeat() {
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            ports.len(),
            "a port was handed out twice: {ports:?}"
        );
        assert!(ports.iter().all(|p| PORTS.contains(p)), "{ports:?}");
        let held = TcpListener::bind(("127.0.0.1", ports[0])).expect("the port is free to bind");
        drop(held);
    }
}
