//! Taking the next UPDATEs out of the Adj-RIB-Out: for the marked prefixes, the difference
//! between desired and sent, grouped, packed and encoded, at most a byte budget at a time.
//! Only what was encoded is committed to the sent state; prefixes left over when the budget is
//! spent stay marked, and are computed again (from the then desired state) next time.

use std::collections::BTreeMap;
use std::sync::Arc;

use ipnet::IpNet;

use super::pack::{self, WireRoute};
use super::{AdjRibOut, SessionView};
use crate::bgp::wire::{EncodeError, Family, Message, Update, encode_into};

/// Bytes of the most common route, an IPv4 host route in the NLRI field: how many marked
/// prefixes one pass looks at for a given budget. Fewer bytes per prefix only means another
/// pass; more means some prefixes are looked at again.
const BYTES_PER_PREFIX: usize = 5;
/// The most prefixes one pass plans at once, whatever the budget: a pass holds a few words per
/// prefix while it groups and packs them (about fifteen times the bytes it produces), so a
/// large budget is spent in several passes. The partly filled last UPDATE of a group waits for
/// the next pass, so passes cost no extra messages.
const MAX_BATCH: usize = 16_384;
/// Capacity (in prefixes) above which an emptied set of marks is freed.
const SHRINK_ABOVE: usize = 4096;

/// Encoded UPDATE messages, ready for the socket.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Output {
    pub bytes: Vec<u8>,
    /// How many UPDATE messages `bytes` holds (End-of-RIBs included).
    pub updates: u64,
    /// This output completes the initial table: it ends with the End-of-RIBs.
    pub end_of_rib: bool,
}

/// Prefixes whose route could not be encoded, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unsendable {
    pub prefixes: Vec<IpNet>,
    pub error: EncodeError,
}

/// Where a batch of marked prefixes came from; what is left over goes back there, so the
/// End-of-RIB waits for every prefix of the initial table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Initial,
    Dirty,
}

/// One UPDATE to be: its prefixes, and what sending it means for the sent state.
enum Piece {
    Announce(Arc<WireRoute>, Vec<IpNet>),
    Withdraw(Family, Vec<IpNet>),
}

impl Piece {
    fn update(&self) -> Update {
        match self {
            Piece::Announce(route, prefixes) => route.update(prefixes.clone()),
            Piece::Withdraw(family, prefixes) => pack::withdraw_update(*family, prefixes.clone()),
        }
    }

    fn into_prefixes(self) -> Vec<IpNet> {
        match self {
            Piece::Announce(_, prefixes) | Piece::Withdraw(_, prefixes) => prefixes,
        }
    }
}

impl AdjRibOut {
    /// The next UPDATEs, encoded: nothing before the session is up and the data ready; then the
    /// whole table and an End-of-RIB per family; afterwards only differences. At most `budget`
    /// bytes, except that a first message larger than the budget still goes, so every call
    /// with a budget makes progress. What does not fit stays marked for the next call.
    pub fn take_output(&mut self, budget: usize) -> Output {
        let mut out = Output::default();
        let Some(session) = self.session.clone() else {
            return out;
        };
        if !self.ready || budget == 0 {
            return out;
        }
        if !session.initial_started {
            // Everything desired now is the initial table; later changes follow the End-of-RIB.
            self.initial = self.desired.keys().copied().collect();
            self.dirty.clear();
            if let Some(view) = self.session.as_mut() {
                view.initial_started = true;
            }
        }
        let mut retry_later = Vec::new();
        while out.bytes.len() < budget {
            if self.initial.is_empty() && !self.initial_table_sent() {
                self.end_of_rib(&session, &mut out);
                continue;
            }
            let room = budget - out.bytes.len();
            let Some((source, batch)) = self.next_batch((room / BYTES_PER_PREFIX).min(MAX_BATCH)) else {
                break;
            };
            let mut pieces = self.plan(&session, batch);
            let more = match source {
                Source::Initial => !self.initial.is_empty(),
                Source::Dirty => !self.dirty.is_empty(),
            };
            if more && pieces.iter().any(|(_, tail)| !tail) {
                // The last, partly filled UPDATE of each group waits for the next pass, which
                // may fill it; a pass that has nothing but such UPDATEs sends them.
                let (held, full): (Vec<_>, Vec<_>) = pieces.into_iter().partition(|(_, tail)| *tail);
                self.put_back(source, held.into_iter().flat_map(|(p, _)| p.into_prefixes()));
                pieces = full;
            }
            let pieces = pieces.into_iter().map(|(piece, _)| piece).collect();
            if self.emit(&session, pieces, source, budget, &mut out, &mut retry_later) {
                break;
            }
        }
        self.dirty.extend(retry_later);
        if self.dirty.is_empty() && self.dirty.capacity() > SHRINK_ABOVE {
            // A full table's worth of marks is megabytes; give it back once drained.
            self.dirty.shrink_to_fit();
        }
        self.route_attributes.collect();
        out
    }

    /// Up to `max` (at least one) marked prefixes: the initial table first.
    fn next_batch(&mut self, max: usize) -> Option<(Source, Vec<IpNet>)> {
        let max = max.max(1);
        if !self.initial.is_empty() {
            let at = self.initial.len().saturating_sub(max);
            return Some((Source::Initial, self.initial.split_off(at)));
        }
        if self.dirty.is_empty() {
            return None;
        }
        let batch: Vec<IpNet> = if self.dirty.len() <= max {
            self.dirty.drain().collect()
        } else {
            let batch: Vec<IpNet> = self.dirty.iter().take(max).copied().collect();
            for prefix in &batch {
                self.dirty.remove(prefix);
            }
            batch
        };
        Some((Source::Dirty, batch))
    }

    /// Marks prefixes again, where the next pass of `source` takes them first.
    fn put_back(&mut self, source: Source, prefixes: impl Iterator<Item = IpNet>) {
        match source {
            // `next_batch` takes the initial table from its end.
            Source::Initial => self.initial.extend(prefixes),
            Source::Dirty => self.dirty.extend(prefixes),
        }
    }

    /// The UPDATEs that bring the peer's view of `batch` to the desired state: withdrawals
    /// first, then announcements grouped by attribute set, each group in runs that fill 4096
    /// bytes; each with whether it is its group's last run (which may not be full).
    fn plan(&mut self, session: &SessionView, batch: Vec<IpNet>) -> Vec<(Piece, bool)> {
        let mut announce: BTreeMap<Arc<WireRoute>, Vec<IpNet>> = BTreeMap::new();
        let mut withdraw: BTreeMap<Family, Vec<IpNet>> = BTreeMap::new();
        for prefix in batch {
            let family = Family::of(&prefix);
            if !session.families.contains(&family) {
                continue;
            }
            let want = self.resolve(session, &prefix);
            let forced = self.refresh.contains(&prefix);
            match (want, self.sent.get(&prefix)) {
                (Some(want), Some(have)) if &want == have && !forced => {}
                (Some(want), _) => announce.entry(want).or_default().push(prefix),
                (None, Some(_)) => withdraw.entry(family).or_default().push(prefix),
                (None, None) => {
                    self.refresh.remove(&prefix);
                }
            }
        }
        let mut pieces = Vec::new();
        for (family, mut prefixes) in withdraw {
            prefixes.sort_unstable();
            let runs = pack::split_withdraw(family, &prefixes);
            let last = runs.len().saturating_sub(1);
            for (index, run) in runs.into_iter().enumerate() {
                pieces.push((Piece::Withdraw(family, prefixes[run].to_vec()), index == last));
            }
        }
        for (route, mut prefixes) in announce {
            prefixes.sort_unstable();
            match pack::split_announce(&route, &prefixes, session.encode) {
                Ok(runs) => {
                    let last = runs.len().saturating_sub(1);
                    for (index, run) in runs.into_iter().enumerate() {
                        let piece = Piece::Announce(route.clone(), prefixes[run].to_vec());
                        pieces.push((piece, index == last));
                    }
                }
                Err(error) => self.cannot_encode(prefixes, error),
            }
        }
        pieces
    }

    /// Encodes pieces into `out` until the budget is spent (then returns true, the rest put
    /// back where it came from), committing each one encoded.
    fn emit(
        &mut self,
        session: &SessionView,
        pieces: Vec<Piece>,
        source: Source,
        budget: usize,
        out: &mut Output,
        retry_later: &mut Vec<IpNet>,
    ) -> bool {
        let mut pieces = pieces.into_iter();
        while let Some(piece) = pieces.next() {
            let mark = out.bytes.len();
            if mark < budget {
                let message = Message::Update(Box::new(piece.update()));
                if let Err(error) = encode_into(&message, session.encode, &mut out.bytes) {
                    out.bytes.truncate(mark);
                    self.encode_failed(piece, error, retry_later);
                    continue;
                }
                // The first message goes whatever its size; later ones only within the budget.
                if mark == 0 || out.bytes.len() <= budget {
                    out.updates += 1;
                    self.commit(piece);
                    continue;
                }
                out.bytes.truncate(mark);
            }
            let rest = std::iter::once(piece)
                .chain(pieces)
                .flat_map(Piece::into_prefixes);
            match source {
                Source::Initial => self.initial.extend(rest),
                Source::Dirty => self.dirty.extend(rest),
            }
            return true;
        }
        false
    }

    /// The peer now holds what `piece` says.
    fn commit(&mut self, piece: Piece) {
        match piece {
            Piece::Announce(route, prefixes) => {
                for prefix in prefixes {
                    self.refresh.remove(&prefix);
                    self.sent.insert(prefix, route.clone());
                }
            }
            Piece::Withdraw(_, prefixes) => {
                for prefix in prefixes {
                    self.refresh.remove(&prefix);
                    self.sent.remove(&prefix);
                }
            }
        }
    }

    fn encode_failed(&mut self, piece: Piece, error: EncodeError, retry_later: &mut Vec<IpNet>) {
        match piece {
            Piece::Announce(_, prefixes) => self.cannot_encode(prefixes, error),
            // A withdrawal carries no attributes, so this is not expected; the peer keeps the
            // routes meanwhile, and the next output tries again.
            Piece::Withdraw(_, prefixes) => {
                retry_later.extend(prefixes.iter().copied());
                self.failures.push(Unsendable { prefixes, error });
            }
        }
    }

    /// These routes cannot be encoded: they count as withdrawn until their route changes, and
    /// a version the peer holds from before is withdrawn by the next pass.
    fn cannot_encode(&mut self, prefixes: Vec<IpNet>, error: EncodeError) {
        for prefix in &prefixes {
            self.unsendable.insert(*prefix, error.clone());
            self.refresh.remove(prefix);
            if self.sent.contains_key(prefix) {
                self.dirty.insert(*prefix);
            }
        }
        self.failures.push(Unsendable { prefixes, error });
    }

    /// RFC 4724 §2: an empty UPDATE per family (IPv4), or an empty MP_UNREACH_NLRI.
    fn end_of_rib(&mut self, session: &SessionView, out: &mut Output) {
        for family in &session.families {
            let mark = out.bytes.len();
            let message = Message::Update(Box::new(Update::end_of_rib(*family)));
            match encode_into(&message, session.encode, &mut out.bytes) {
                Ok(()) => out.updates += 1,
                Err(error) => {
                    out.bytes.truncate(mark);
                    self.failures.push(Unsendable {
                        prefixes: Vec::new(),
                        error,
                    });
                }
            }
        }
        out.end_of_rib = true;
        // The initial table's list kept its full capacity while it was emptied batch by batch.
        self.initial = Vec::new();
        if let Some(view) = self.session.as_mut() {
            view.initial_sent = true;
        }
    }
}
