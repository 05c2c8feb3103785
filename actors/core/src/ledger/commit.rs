//! The ledger writer's group commit, pipelined: what goes into each write, in what order, and
//! who may be told what when a write's `fdatasync` returns.
//!
//! Entries are encoded (by [`LedgerCore::append`](super::state::LedgerCore::append)) and
//! [`Pipeline::push`]ed while a write is in flight; when it is synced, everything pushed since
//! goes out as the next write, at once. One write is in flight at a time, so the file holds the
//! lines in the order they were pushed. The checkpoints of a synced write are signed after its
//! sync returned and go first in the next write (an idle ledger gets a write of them alone), so
//! a checkpoint never precedes, in the file or in time, the sync of what it covers. A failed
//! write ends the pipeline: nothing pushed after it is ever written.
//!
//! [`Waiting`] is the other half: the callers of pushed entries, answered only once a write
//! covering their entry is synced, in order. [`Linger`] says when the next write should wait a
//! little for the callers just answered. Pure: the writer shell does the I/O, the signing and
//! the clock.

use std::collections::VecDeque;

/// A due checkpoint: the entry's seq and the hash of its line.
pub type Due = (u64, [u8; 32]);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Stage {
    /// Nothing in flight: the next [`Pipeline::take_write`] may start a write.
    Idle,
    /// A write is in flight: entries up to `upto`; `due` are its checkpoints to sign once synced.
    Writing { upto: u64, due: Vec<Due> },
    /// Synced; its checkpoints are being signed, to go first in the next write.
    Signing,
    /// A write failed: nothing more is written.
    Failed,
}

/// What a finished write means.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// Entries up to `upto` are synced: their callers may be told. `sign` are the checkpoints
    /// they made due, to sign and hand back with [`Pipeline::signed`].
    Synced { upto: u64, sign: Vec<Due> },
    /// The write failed: entries after `synced` are lost, and the pipeline accepts no more.
    Failed { synced: u64 },
}

#[derive(Clone, Debug)]
pub struct Pipeline {
    /// Lines pushed and not yet in a write, each with its newline.
    queued: String,
    /// How many entries `queued` holds.
    queued_entries: usize,
    queued_due: Vec<Due>,
    /// Seq of the last entry pushed.
    pushed: u64,
    /// Seq of the last entry synced.
    synced: u64,
    /// Signed checkpoints of synced entries, to go first in the next write.
    checkpoints: Vec<String>,
    stage: Stage,
}

impl Pipeline {
    /// A pipeline after entry `synced` (the ledger's last entry, already on disk).
    pub fn new(synced: u64) -> Pipeline {
        Pipeline {
            queued: String::new(),
            queued_entries: 0,
            queued_due: vec![],
            pushed: synced,
            synced,
            checkpoints: vec![],
            stage: Stage::Idle,
        }
    }

    /// Queue entry `seq`'s line (the next after the last pushed) for the next write, with the
    /// checkpoints it made due. Returns false (and queues nothing) once a write has failed.
    pub fn push(&mut self, seq: u64, line: &str, due: impl IntoIterator<Item = Due>) -> bool {
        if self.stage == Stage::Failed {
            return false;
        }
        debug_assert_eq!(seq, self.pushed + 1, "entries are pushed in order");
        self.pushed = seq;
        self.queued_entries += 1;
        self.queued.push_str(line);
        self.queued.push('\n');
        self.queued_due.extend(due);
        true
    }

    /// Start the next write if none is in flight and there is something to write: fills `buf`
    /// (cleared first) with the unwritten checkpoints, then every queued line, and returns the
    /// seq of the last entry it holds.
    pub fn take_write(&mut self, buf: &mut String) -> Option<u64> {
        if self.stage != Stage::Idle || (self.queued.is_empty() && self.checkpoints.is_empty()) {
            return None;
        }
        buf.clear();
        for cp in self.checkpoints.drain(..) {
            buf.push_str(&cp);
            buf.push('\n');
        }
        if buf.is_empty() {
            std::mem::swap(buf, &mut self.queued);
        } else {
            buf.push_str(&self.queued);
            self.queued.clear();
        }
        self.queued_entries = 0;
        self.stage = Stage::Writing {
            upto: self.pushed,
            due: std::mem::take(&mut self.queued_due),
        };
        Some(self.pushed)
    }

    /// The write in flight returned: `ok` if its write and `fdatasync` both succeeded. Call
    /// [`Pipeline::signed`] next when it says `Synced`.
    pub fn written(&mut self, ok: bool) -> Written {
        match std::mem::replace(&mut self.stage, Stage::Failed) {
            Stage::Writing { upto, due } if ok => {
                self.synced = upto;
                self.stage = Stage::Signing;
                Written::Synced { upto, sign: due }
            }
            Stage::Writing { .. } => {
                self.queued.clear();
                self.queued_entries = 0;
                self.queued_due.clear();
                self.checkpoints.clear();
                Written::Failed {
                    synced: self.synced,
                }
            }
            other => {
                debug_assert!(false, "written() with no write in flight: {other:?}");
                self.stage = other;
                Written::Failed {
                    synced: self.synced,
                }
            }
        }
    }

    /// The signed checkpoints of the last synced write: they go first in the next one.
    pub fn signed(&mut self, checkpoints: Vec<String>) {
        if self.stage == Stage::Signing {
            self.checkpoints = checkpoints;
            self.stage = Stage::Idle;
        }
    }

    /// Seq of the last entry synced.
    pub fn synced(&self) -> u64 {
        self.synced
    }

    /// Seq of the last entry pushed.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Entries pushed and not yet in a write.
    pub fn queued_entries(&self) -> usize {
        self.queued_entries
    }

    pub fn failed(&self) -> bool {
        self.stage == Stage::Failed
    }

    /// Nothing in flight and nothing left to write (or a write failed).
    pub fn is_done(&self) -> bool {
        self.stage == Stage::Failed
            || (self.stage == Stage::Idle && self.queued.is_empty() && self.checkpoints.is_empty())
    }
}

/// The longest a write waits for more entries, in microseconds, whatever the last sync took.
pub const MAX_LINGER_US: u64 = 1_000;

/// When the next write starts: at once, or after a short wait for the callers a synced write
/// just answered to append again.
///
/// Each caller has one append in flight, so with many callers the writes would otherwise
/// alternate between two halves of them: the half answered when a write synced is still coming
/// back when the next write (the other half, queued during the sync) starts. On this kind of disk
/// a sync costs about the same for 30 lines as for 60, so one write of all of them doubles the
/// rate. So after a write of `n` entries syncs with `q` queued behind it, the next write waits
/// until `n + q` entries are queued, but never longer than the sync just took (at most
/// [`MAX_LINGER_US`]). A lone caller is never held: the one it waits for is its own next append.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Linger {
    expect: usize,
    until: u64,
}

impl Linger {
    /// A write of `entries` synced at `now` (µs) after taking `took_us`; `queued` entries were
    /// pushed while it ran.
    pub fn synced(&mut self, entries: usize, queued: usize, now: u64, took_us: u64) {
        self.expect = entries.saturating_add(queued);
        self.until = now.saturating_add(took_us.min(MAX_LINGER_US));
    }

    /// With `queued` entries queued at `now`: `None` to write now, or the time to wait until
    /// (unless [`Linger::expect`] entries are queued sooner).
    pub fn hold(&self, queued: usize, now: u64) -> Option<u64> {
        (queued < self.expect && now < self.until).then_some(self.until)
    }

    /// How many queued entries end the wait.
    pub fn expect(&self) -> usize {
        self.expect
    }
}

/// The callers of pushed entries, in seq order, until a write covering theirs is synced.
#[derive(Debug)]
pub struct Waiting<T> {
    q: VecDeque<(u64, T)>,
}

impl<T> Default for Waiting<T> {
    fn default() -> Self {
        Waiting { q: VecDeque::new() }
    }
}

impl<T> Waiting<T> {
    /// The caller of entry `seq` (after every seq pushed before it).
    pub fn push(&mut self, seq: u64, t: T) {
        debug_assert!(self.q.back().is_none_or(|(s, _)| *s < seq));
        self.q.push_back((seq, t));
    }

    /// The callers whose entries are synced now that entries up to `upto` are, oldest first.
    pub fn synced(&mut self, upto: u64) -> impl Iterator<Item = (u64, T)> + '_ {
        let n = self.q.iter().take_while(|(s, _)| *s <= upto).count();
        self.q.drain(..n)
    }

    /// Every caller still waiting (a write failed: none of them will be synced).
    pub fn all(&mut self) -> impl Iterator<Item = (u64, T)> + '_ {
        self.q.drain(..)
    }

    pub fn len(&self) -> usize {
        self.q.len()
    }

    pub fn is_empty(&self) -> bool {
        self.q.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::event::{DecisionEvent, Outcome};
    use crate::ledger::state::{Author, LedgerCore, sign_checkpoints, verify};
    use crate::types::DecisionId;
    use ed25519_dalek::SigningKey;
    use proptest::prelude::*;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[42u8; 32])
    }

    const ORIGIN: &str = "fleetd/test/ledger";

    fn event(i: u64, close: bool) -> DecisionEvent {
        if close {
            DecisionEvent::Close {
                decision: DecisionId(1),
                outcome: Outcome::Quorate,
                slots: vec![],
                verdict: "v".into(),
                rationale: format!("r{i}"),
            }
        } else {
            DecisionEvent::Position {
                decision: DecisionId(1),
                slot: "opus".into(),
                round: 1,
                content: format!("c{i}"),
            }
        }
    }

    /// The writer shell and its callers, without I/O: a file (what synced writes put there), a
    /// write in flight, and who has been answered.
    struct Sim {
        core: LedgerCore,
        p: Pipeline,
        waiting: Waiting<u64>,
        file: String,
        in_flight: Option<(String, u64)>,
        /// Synced, its checkpoints not signed yet.
        to_sign: Option<Vec<Due>>,
        answered: Vec<u64>,
        refused: Vec<u64>,
    }

    impl Sim {
        fn new(every: u64) -> Sim {
            let (core, header) = LedgerCore::create(ORIGIN, every);
            Sim {
                core,
                p: Pipeline::new(0),
                waiting: Waiting::default(),
                file: header + "\n",
                in_flight: None,
                to_sign: None,
                answered: vec![],
                refused: vec![],
            }
        }

        fn append(&mut self, close: bool) {
            let i = self.core.seq + 1;
            let (e, line) = self
                .core
                .append(author(), event(i, close), 1_700_000_000_000 + i);
            if self.p.push(e.seq, &line, self.core.due.drain(..)) {
                self.waiting.push(e.seq, e.seq);
            } else {
                self.refused.push(e.seq);
            }
        }

        fn start(&mut self) {
            if self.in_flight.is_none() {
                let mut buf = String::new();
                if let Some(upto) = self.p.take_write(&mut buf) {
                    self.in_flight = Some((buf, upto));
                }
            }
        }

        /// The write in flight returns; the writer answers its callers, as the shell does.
        fn finish(&mut self, ok: bool) {
            let Some((buf, upto)) = self.in_flight.take() else {
                return;
            };
            match self.p.written(ok) {
                Written::Synced { upto: u, sign } => {
                    assert_eq!(u, upto);
                    self.file.push_str(&buf);
                    let synced = self.file.clone();
                    for (seq, _) in self.waiting.synced(u) {
                        // Nobody hears of an entry that is not in the synced file.
                        assert!(synced.contains(&format!("\"seq\":{seq},")));
                        self.answered.push(seq);
                    }
                    self.to_sign = Some(sign);
                }
                Written::Failed { synced } => {
                    assert!(synced < upto || !buf.contains("\"seq\""));
                    self.refused.extend(self.waiting.all().map(|(s, _)| s));
                }
            }
        }

        /// The writer signs the synced write's checkpoints (after answering).
        fn sign(&mut self) {
            if let Some(due) = self.to_sign.take() {
                self.p.signed(sign_checkpoints(ORIGIN, &due, &key()));
            }
        }

        /// Finish the write in flight and sign its checkpoints.
        fn finish_and_sign(&mut self, ok: bool) {
            self.finish(ok);
            self.sign();
        }
    }

    fn author() -> Author {
        Author {
            member: "a".into(),
            role: "architect".into(),
            slot: Some("opus".into()),
        }
    }

    #[test]
    fn entries_pushed_during_a_write_go_out_together_in_the_next_after_its_checkpoints() {
        let mut s = Sim::new(2);
        s.append(false);
        s.start();
        assert_eq!(s.in_flight.as_ref().map(|w| w.1), Some(1));
        // While entry 1 syncs, entries 2..=5 are encoded and queued; no second write starts.
        for _ in 0..4 {
            s.append(false);
            s.start();
        }
        assert_eq!(s.in_flight.as_ref().map(|w| w.1), Some(1));
        assert!(s.answered.is_empty());
        s.finish(true);
        assert_eq!(s.answered, vec![1]);
        // Until the synced write's checkpoints are signed no write starts: they go first in it.
        s.start();
        assert!(s.in_flight.is_none());
        s.sign();
        s.start();
        let (buf, upto) = s.in_flight.clone().unwrap();
        assert_eq!(upto, 5);
        assert_eq!(buf.lines().count(), 4, "{buf}");
        s.finish_and_sign(true);
        assert_eq!(s.answered, vec![1, 2, 3, 4, 5]);
        // Entries 2 and 4 were due: their checkpoints are signed now, written alone (idle).
        s.start();
        let (buf, upto) = s.in_flight.clone().unwrap();
        assert_eq!(upto, 5);
        assert_eq!(buf.lines().count(), 2);
        assert!(buf.lines().all(|l| l.starts_with("{\"checkpoint\"")));
        s.finish_and_sign(true);
        s.start();
        assert!(s.in_flight.is_none() && s.p.is_done());
        let r = verify(&s.file, Some(&key().verifying_key())).unwrap();
        assert_eq!((r.entries, r.checkpoints), (5, 2));
        assert!(r.pending_checkpoints.is_empty());
    }

    #[test]
    fn a_failed_write_refuses_its_batch_and_everything_after_and_writes_nothing_more() {
        let mut s = Sim::new(16);
        s.append(false);
        s.start();
        s.finish_and_sign(true);
        s.append(false);
        s.append(false);
        s.start();
        // Queued behind the write that will fail.
        s.append(false);
        s.finish_and_sign(false);
        assert!(s.p.failed());
        s.append(false);
        s.start();
        assert!(s.in_flight.is_none());
        assert_eq!(s.answered, vec![1]);
        s.refused.sort();
        assert_eq!(s.refused, vec![2, 3, 4, 5]);
        assert_eq!(s.p.synced(), 1);
        let r = verify(&s.file, None).unwrap();
        assert_eq!(r.entries, 1);
    }

    #[test]
    fn a_write_waits_for_the_callers_just_answered_but_never_longer_than_its_sync_took() {
        let mut l = Linger::default();
        // Nothing synced yet: never hold.
        assert_eq!(l.hold(0, 0), None);
        assert_eq!(l.hold(1, 0), None);
        // 32 synced at t=1000 after 250 µs, with 32 more queued behind them: wait for 64.
        l.synced(32, 32, 1_000, 250);
        assert_eq!(l.expect(), 64);
        assert_eq!(l.hold(32, 1_000), Some(1_250));
        assert_eq!(l.hold(63, 1_249), Some(1_250));
        assert_eq!(l.hold(64, 1_100), None, "all of them are back");
        assert_eq!(l.hold(40, 1_250), None, "the wait is over");
        // A lone caller: its own next append ends the wait.
        l.synced(1, 0, 5_000, 200);
        assert_eq!(l.hold(0, 5_010), Some(5_200));
        assert_eq!(l.hold(1, 5_010), None);
        // A slow sync does not make a long wait.
        l.synced(10, 0, 9_000, 50_000);
        assert_eq!(l.hold(3, 9_000), Some(9_000 + MAX_LINGER_US));
    }

    #[test]
    fn the_pipeline_counts_what_is_queued() {
        let mut s = Sim::new(16);
        assert_eq!(s.p.queued_entries(), 0);
        s.append(false);
        s.append(false);
        assert_eq!(s.p.queued_entries(), 2);
        s.start();
        assert_eq!(s.p.queued_entries(), 0);
        s.append(false);
        assert_eq!(s.p.queued_entries(), 1);
        s.finish_and_sign(false);
        assert_eq!(s.p.queued_entries(), 0, "a failure drops what was queued");
    }

    #[derive(Clone, Debug)]
    enum Op {
        Append { close: bool },
        Start,
        Finish { ok: bool },
        Sign,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => any::<bool>().prop_map(|c| Op::Append { close: c }),
            3 => Just(Op::Start),
            3 => prop::bool::weighted(0.97).prop_map(|ok| Op::Finish { ok }),
            2 => Just(Op::Sign),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Any interleaving of appends and writes returning: callers are answered exactly once,
        /// in order, only after the write holding their entry synced; the file is always a valid
        /// ledger (a checkpoint never precedes what it covers, or is missing once drained); after
        /// a failure nothing more is written and every later caller is refused.
        #[test]
        fn any_interleaving_keeps_order_durability_and_checkpoints(every in 1u64..6, ops in prop::collection::vec(op(), 0..64)) {
            let mut s = Sim::new(every);
            let vk = key().verifying_key();
            let mut failed_at = None;
            for o in ops {
                match o.clone() {
                    Op::Append { close } => s.append(close),
                    Op::Start => s.start(),
                    Op::Sign => s.sign(),
                    Op::Finish { ok } => {
                        let had = s.in_flight.is_some();
                        s.finish(ok);
                        if had && !ok && failed_at.is_none() {
                            failed_at = Some(s.file.len());
                        }
                    }
                }
                // Answered: a prefix of the entries, in order.
                prop_assert!(s.answered.iter().enumerate().all(|(i, &q)| q == i as u64 + 1));
                prop_assert!(s.answered.len() as u64 <= s.p.synced());
                if matches!(o, Op::Finish { .. }) {
                    let r = verify(&s.file, None);
                    prop_assert!(r.is_ok(), "{:?}\n{}", r, s.file);
                    prop_assert_eq!(r.unwrap().entries, s.p.synced());
                }
            }
            // Drain, as post_stop does.
            loop {
                s.sign();
                s.start();
                if s.in_flight.is_none() {
                    break;
                }
                s.finish(true);
            }
            let r = verify(&s.file, Some(&vk)).unwrap();
            if let Some(len) = failed_at {
                prop_assert_eq!(s.file.len(), len, "nothing is written after a failed write");
                prop_assert!(s.waiting.is_empty());
                let mut all: Vec<u64> = s.answered.iter().chain(&s.refused).copied().collect();
                all.sort();
                prop_assert_eq!(all, (1..=s.core.seq).collect::<Vec<_>>());
            } else {
                prop_assert!(r.pending_checkpoints.is_empty());
                prop_assert_eq!(s.answered.len() as u64, s.core.seq);
                prop_assert!(s.refused.is_empty());
            }
        }
    }
}
