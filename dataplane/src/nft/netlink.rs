//! nf_tables over netlink for the two things the `nft` binary does slowly: changing a few
//! elements of a large interval set (nft 1.0.6 first reads every set of the table, 20 ms for a
//! few thousand prefixes, to check the new intervals against them; the kernel does that check
//! itself), and reading the ruleset's generation (a counter any change to any table moves).
//!
//! Elements of an interval set are intervals: a prefix `a/len` is a start element `a` and an
//! end element `last + 1` flagged `NFT_SET_ELEM_INTERVAL_END`, as nft sends them. A prefix that
//! reaches the top of the address space has no end element; nft marks it with user data we do
//! not reproduce, so [`encode_updates`] refuses it and the caller rebuilds with the binary.
//! All messages travel in one batch, which the kernel commits whole or not at all.

use std::net::IpAddr;

use ipnet::IpNet;

use super::{ElementUpdate, NftFamily};

const NFNL_SUBSYS_NFTABLES: u16 = 10;
const NFNL_MSG_BATCH_BEGIN: u16 = 16;
const NFNL_MSG_BATCH_END: u16 = 17;
const NFT_MSG_NEWGEN: u16 = 15;
const NFT_MSG_NEWSETELEM: u16 = 12;
const NFT_MSG_DELSETELEM: u16 = 14;
const NFT_MSG_GETGEN: u16 = 16;
const NFTA_SET_ELEM_LIST_TABLE: u16 = 1;
const NFTA_SET_ELEM_LIST_SET: u16 = 2;
const NFTA_SET_ELEM_LIST_ELEMENTS: u16 = 3;
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_SET_ELEM_KEY: u16 = 1;
const NFTA_SET_ELEM_DATA: u16 = 2;
const NFTA_SET_ELEM_FLAGS: u16 = 3;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_GEN_ID: u16 = 1;
const NFT_SET_ELEM_INTERVAL_END: u32 = 1;
const NLA_F_NESTED: u16 = 0x8000;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_CREATE: u16 = 0x400;
pub(super) const NLMSG_ERROR: u16 = 2;
const NFPROTO_IPV4: u8 = 2;
const NFPROTO_IPV6: u8 = 10;

/// Why a change cannot be sent as elements.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unencodable(pub String);

/// A netlink message under construction: header, nfgenmsg, attributes.
struct Message {
    buf: Vec<u8>,
    nests: Vec<usize>,
}

impl Message {
    fn new(kind: u16, flags: u16, seq: u32, family: u8, res_id: u16) -> Self {
        let mut buf = Vec::with_capacity(256);
        buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set in `finish`
        buf.extend_from_slice(&kind.to_ne_bytes());
        buf.extend_from_slice(&flags.to_ne_bytes());
        buf.extend_from_slice(&seq.to_ne_bytes());
        buf.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel
        buf.push(family);
        buf.push(0); // NFNETLINK_V0
        buf.extend_from_slice(&res_id.to_be_bytes());
        Self {
            buf,
            nests: Vec::new(),
        }
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn attr(&mut self, kind: u16, value: &[u8]) {
        let len = u16::try_from(4 + value.len()).unwrap_or(u16::MAX);
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(value);
        self.pad();
    }

    fn string(&mut self, kind: u16, value: &str) {
        let mut bytes = value.as_bytes().to_vec();
        bytes.push(0);
        self.attr(kind, &bytes);
    }

    fn begin(&mut self, kind: u16) {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&0u16.to_ne_bytes());
        self.buf.extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
    }

    fn end(&mut self) {
        if let Some(start) = self.nests.pop() {
            let len = u16::try_from(self.buf.len() - start).unwrap_or(u16::MAX);
            self.buf[start..start + 2].copy_from_slice(&len.to_ne_bytes());
        }
    }

    fn finish(mut self) -> Vec<u8> {
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[..4].copy_from_slice(&len.to_ne_bytes());
        self.buf
    }
}

fn octets(ip: IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The start and end keys of `net` as an interval; `None` when it reaches the top of the
/// address space (no end element exists).
pub fn interval_keys(net: &IpNet) -> Option<(Vec<u8>, Vec<u8>)> {
    let net = net.trunc();
    let end = match net.broadcast() {
        IpAddr::V4(b) => IpAddr::V4(u32::from(b).checked_add(1)?.into()),
        IpAddr::V6(b) => IpAddr::V6(u128::from(b).checked_add(1)?.into()),
    };
    Some((octets(net.network()), octets(end)))
}

fn element(msg: &mut Message, key: &[u8], data: Option<IpAddr>, interval_end: bool) {
    msg.begin(NFTA_LIST_ELEM);
    msg.begin(NFTA_SET_ELEM_KEY);
    msg.attr(NFTA_DATA_VALUE, key);
    msg.end();
    if let Some(data) = data {
        msg.begin(NFTA_SET_ELEM_DATA);
        msg.attr(NFTA_DATA_VALUE, &octets(data));
        msg.end();
    }
    if interval_end {
        msg.attr(NFTA_SET_ELEM_FLAGS, &NFT_SET_ELEM_INTERVAL_END.to_be_bytes());
    }
    msg.end();
}

fn nfproto(family: NftFamily) -> u8 {
    match family {
        NftFamily::Ipv4 => NFPROTO_IPV4,
        NftFamily::Ipv6 => NFPROTO_IPV6,
    }
}

/// One batch with a DELSETELEM and a NEWSETELEM message per set (deletions first), each asking
/// for an acknowledgement. Returns the bytes and the sequence numbers to expect answers for.
pub fn encode_updates(updates: &[ElementUpdate], first_seq: u32) -> Result<(Vec<u8>, Vec<u32>), Unencodable> {
    let mut out = Message::new(
        NFNL_MSG_BATCH_BEGIN,
        NLM_F_REQUEST,
        first_seq,
        0,
        NFNL_SUBSYS_NFTABLES,
    )
    .finish();
    let mut seq = first_seq;
    let mut acked = Vec::new();
    for deleting in [true, false] {
        for update in updates {
            let items = if deleting { &update.delete } else { &update.add };
            if items.is_empty() {
                continue;
            }
            seq += 1;
            let (kind, flags) = if deleting {
                (NFT_MSG_DELSETELEM, NLM_F_REQUEST | NLM_F_ACK)
            } else {
                (NFT_MSG_NEWSETELEM, NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE)
            };
            let mut msg = Message::new(
                (NFNL_SUBSYS_NFTABLES << 8) | kind,
                flags,
                seq,
                nfproto(update.family),
                0,
            );
            msg.string(NFTA_SET_ELEM_LIST_TABLE, &update.table);
            msg.string(NFTA_SET_ELEM_LIST_SET, &update.set);
            msg.begin(NFTA_SET_ELEM_LIST_ELEMENTS);
            for (net, data) in items {
                let (start, end) = interval_keys(net).ok_or_else(|| {
                    Unencodable(format!(
                        "{net} in set {} reaches the end of the address space",
                        update.set
                    ))
                })?;
                element(&mut msg, &start, *data, false);
                element(&mut msg, &end, None, true);
            }
            msg.end();
            out.extend(msg.finish());
            acked.push(seq);
        }
    }
    seq += 1;
    out.extend(Message::new(NFNL_MSG_BATCH_END, NLM_F_REQUEST, seq, 0, NFNL_SUBSYS_NFTABLES).finish());
    Ok((out, acked))
}

/// The GETGEN request.
pub fn encode_getgen(seq: u32) -> Vec<u8> {
    Message::new(
        (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_GETGEN,
        NLM_F_REQUEST,
        seq,
        0,
        0,
    )
    .finish()
}

/// A message the kernel sent: its type, sequence number and payload (after the header).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply<'a> {
    pub kind: u16,
    pub seq: u32,
    pub payload: &'a [u8],
}

/// Splits a datagram into messages.
pub fn split_replies(buf: &[u8]) -> Vec<Reply<'_>> {
    let mut out = Vec::new();
    let mut rest = buf;
    while rest.len() >= 16 {
        let len = u32::from_ne_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len < 16 || len > rest.len() {
            break;
        }
        out.push(Reply {
            kind: u16::from_ne_bytes([rest[4], rest[5]]),
            seq: u32::from_ne_bytes([rest[8], rest[9], rest[10], rest[11]]),
            payload: &rest[16..len],
        });
        rest = &rest[len.next_multiple_of(4).min(rest.len())..];
    }
    out
}

/// The errno of an NLMSG_ERROR (0 for an acknowledgement).
pub fn error_code(reply: &Reply<'_>) -> Option<i32> {
    (reply.kind == NLMSG_ERROR && reply.payload.len() >= 4).then(|| {
        -i32::from_ne_bytes([
            reply.payload[0],
            reply.payload[1],
            reply.payload[2],
            reply.payload[3],
        ])
    })
}

/// The generation in a NEWGEN reply.
pub fn generation(reply: &Reply<'_>) -> Option<u32> {
    if reply.kind != (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN || reply.payload.len() < 4 {
        return None;
    }
    let mut attrs = &reply.payload[4..];
    while attrs.len() >= 4 {
        let len = u16::from_ne_bytes([attrs[0], attrs[1]]) as usize;
        let kind = u16::from_ne_bytes([attrs[2], attrs[3]]) & !NLA_F_NESTED;
        if len < 4 || len > attrs.len() {
            return None;
        }
        if kind == NFTA_GEN_ID && len >= 8 {
            return Some(u32::from_be_bytes([attrs[4], attrs[5], attrs[6], attrs[7]]));
        }
        attrs = &attrs[len.next_multiple_of(4).min(attrs.len())..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_start_and_end_keys() {
        let net: IpNet = "10.200.0.0/24".parse().unwrap();
        assert_eq!(
            interval_keys(&net),
            Some((vec![10, 200, 0, 0], vec![10, 200, 1, 0]))
        );
        let host: IpNet = "1.2.3.5/32".parse().unwrap();
        assert_eq!(interval_keys(&host).unwrap().1, vec![1, 2, 3, 6]);
        assert_eq!(interval_keys(&"255.255.255.0/24".parse().unwrap()), None);
        let v6: IpNet = "fd00::/64".parse().unwrap();
        let (start, end) = interval_keys(&v6).unwrap();
        assert_eq!(start.len(), 16);
        assert_eq!(&end[..8], &[0xfd, 0, 0, 0, 0, 0, 0, 1]);
    }

    #[test]
    fn a_batch_frames_every_message_and_acks_the_element_ones() {
        let update = ElementUpdate {
            family: NftFamily::Ipv4,
            table: "kube-ovn".into(),
            set: "ovn40subnets".into(),
            delete: vec![("10.17.0.0/16".parse().unwrap(), None)],
            add: vec![(
                "10.18.0.0/16".parse().unwrap(),
                Some("172.30.0.50".parse().unwrap()),
            )],
        };
        let (bytes, acked) = encode_updates(&[update], 100).unwrap();
        assert_eq!(acked, [101, 102]);
        let messages = split_replies(&bytes);
        let kinds: Vec<u16> = messages.iter().map(|m| m.kind).collect();
        assert_eq!(kinds, [16, 0x0a0e, 0x0a0c, 17]);
        assert_eq!(
            messages.iter().map(|m| m.seq).collect::<Vec<_>>(),
            [100, 101, 102, 103]
        );
        // The whole buffer is accounted for, message by message.
        let total: usize = messages.iter().map(|m| 16 + m.payload.len()).sum();
        assert_eq!(total, bytes.len());
        let add = messages[2].payload;
        // nfgenmsg: NFPROTO_IPV4, version 0.
        assert_eq!(&add[..2], &[2, 0]);
        // The table name attribute follows, NUL-terminated.
        assert_eq!(&add[4..8], &[13, 0, 1, 0]);
        assert_eq!(&add[8..17], b"kube-ovn\0");
        // The start key, the map's data, and the end key flagged as such are all in there.
        let has = |needle: &[u8]| add.windows(needle.len()).any(|w| w == needle);
        assert!(has(&[10, 18, 0, 0]) && has(&[172, 30, 0, 50]) && has(&[10, 19, 0, 0]));
        assert!(has(&[8, 0, 3, 0, 0, 0, 0, 1]), "the INTERVAL_END flag");
        let top = ElementUpdate {
            family: NftFamily::Ipv4,
            table: "kube-ovn".into(),
            set: "s".into(),
            delete: vec![],
            add: vec![("255.255.255.0/24".parse().unwrap(), None)],
        };
        assert!(encode_updates(&[top], 1).is_err());
    }

    #[test]
    fn replies_errors_and_generations_decode() {
        let mut ack = Vec::new();
        ack.extend_from_slice(&36u32.to_ne_bytes());
        ack.extend_from_slice(&NLMSG_ERROR.to_ne_bytes());
        ack.extend_from_slice(&0u16.to_ne_bytes());
        ack.extend_from_slice(&7u32.to_ne_bytes());
        ack.extend_from_slice(&0u32.to_ne_bytes());
        ack.extend_from_slice(&(-17i32).to_ne_bytes());
        ack.extend_from_slice(&[0; 16]);
        let mut gen_msg = Message::new((10 << 8) | NFT_MSG_NEWGEN, 0, 8, 0, 0);
        gen_msg.attr(NFTA_GEN_ID, &42u32.to_be_bytes());
        ack.extend(gen_msg.finish());
        let replies = split_replies(&ack);
        assert_eq!(replies.len(), 2);
        assert_eq!((replies[0].seq, error_code(&replies[0])), (7, Some(17)));
        assert_eq!(generation(&replies[1]), Some(42));
        assert_eq!(error_code(&replies[1]), None);
    }
}
