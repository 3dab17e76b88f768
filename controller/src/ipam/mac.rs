//! Random MAC addresses: locally administered, unicast (Kube-OVN's rule: first byte `| 0x02`,
//! `& 0xfe`). Uniqueness per subnet is the subnet's job; this only draws.

use kube_ovn_api::annotations::MacAddr;

/// xorshift64*: plenty for spreading MACs, and seedable so tests and benchmarks repeat.
#[derive(Debug)]
pub struct MacSource {
    state: u64,
}

impl MacSource {
    pub fn random() -> Self {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        Self::seeded(u64::from_le_bytes(bytes[..8].try_into().expect("16 bytes")))
    }

    pub fn seeded(seed: u64) -> Self {
        Self { state: seed.max(1) }
    }

    fn next_u64(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn draw(&mut self) -> MacAddr {
        let x = self.next_u64().to_le_bytes();
        let mut mac = [x[0], x[1], x[2], x[3], x[4], x[5]];
        mac[0] = (mac[0] | 0x02) & 0xfe;
        MacAddr(mac)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locally_administered_unicast() {
        let mut m = MacSource::seeded(42);
        for _ in 0..1000 {
            let mac = m.draw();
            assert_eq!(mac.0[0] & 0x03, 0x02, "{mac}");
        }
    }
}
