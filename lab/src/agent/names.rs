//! Names the agent makes: stable hashes (netns names, event names) and container IDs.

/// 64-bit FNV-1a: small, stable across releases and platforms (std's hasher is neither
/// promised to be), which names that outlive a process need.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The first `n` (at most 16) hex digits of [`fnv1a64`].
pub fn short_hash(bytes: &[u8], n: usize) -> String {
    let hex = format!("{:016x}", fnv1a64(bytes));
    hex[..n.min(16)].to_owned()
}

/// 64 random hex digits, the shape of a container ID.
pub fn container_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_container_ids_are_hex() {
        // FNV-1a's published test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(short_hash(b"a", 10), "af63dc4c86");
        let id = container_id();
        assert!(
            id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
    }
}
