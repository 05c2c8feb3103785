//! The sending side of lead-to-lead mail: this host's outbox for each peer, sequence numbers,
//! at most one batch in flight per peer, retry with backoff.
//!
//! Owns the sequencing rules: an envelope gets the next sequence number of its peer when it is
//! queued; a batch is a prefix of the outbox's *stored* part (nothing goes out before the shell
//! says it is durable, `stored`; a failed store is taken back without leaving a gap,
//! `rollback`); the peer's answer is its high-water mark, which the sender treats as
//! "everything up to here is durable there". The outbox is bounded (`MAX_OUTBOX` messages) and
//! the same answer never waits in it twice. `Postbox` also keeps this host's receiving marks
//! (`mark.rs` owns their rule) so the shell has one state to load and feed. Pure: the shell
//! persists what this decides before acting on it. Must never do I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::envelope::{Envelope, Item};
use super::mark::{Marks, Received};
use crate::backoff::Backoff;
use crate::tickets::state::RemoteUpdate;
use crate::types::{Millis, TicketId};

pub use super::envelope::{MAX_BATCH, MAX_BATCH_BYTES};
/// At most this many messages wait in the outbox for one peer; more sends are refused until it
/// drains (reports back to a peer are not counted: they are bounded by the tickets received,
/// and an answer already waiting is not queued again, `Unqueued::Duplicate`).
pub const MAX_OUTBOX: usize = 10_000;

/// Why `enqueue` did not queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unqueued {
    NotAPeer,
    /// The peer's outbox holds `MAX_OUTBOX` messages.
    Full,
    /// The same answer is already waiting in the peer's outbox.
    Duplicate,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Send these envelopes to `peer` (one request); report the answer with `acked` or `failed`.
    Transmit {
        peer: String,
        epoch: u64,
        envelopes: Vec<Envelope>,
    },
    /// `peer` holds every envelope up to `upto` durably: these left the outbox (the shell marks
    /// the mail among them transmitted, then deletes them from the store).
    Acked {
        peer: String,
        upto: u64,
        done: Vec<Envelope>,
    },
    /// Call `tick` at this time.
    Arm(Millis),
}

/// An outbox's queue, counting the mail in it as it changes (the bound is checked on every
/// send, so it must not walk up to `MAX_OUTBOX` envelopes each time), and indexing the answers
/// in it by ticket (so the same answer is never queued twice).
#[derive(Clone, Debug, Default)]
struct Queue {
    envs: VecDeque<Envelope>,
    mails: usize,
    /// The last answer queued for each ticket, with its envelope's seq.
    answers: HashMap<TicketId, (u64, RemoteUpdate)>,
}

impl Queue {
    fn is_mail(e: &Envelope) -> bool {
        matches!(e.item, Item::Mail { .. })
    }

    fn answer(e: &Envelope) -> Option<(TicketId, &RemoteUpdate)> {
        match &e.item {
            Item::Update {
                ticket,
                update: u @ RemoteUpdate::Answer { .. },
            } => Some((*ticket, u)),
            _ => None,
        }
    }

    /// Whether `item` is an answer already waiting here.
    fn holds_answer(&self, item: &Item) -> bool {
        match item {
            Item::Update {
                ticket,
                update: u @ RemoteUpdate::Answer { .. },
            } => self.answers.get(ticket).is_some_and(|(_, a)| a == u),
            _ => false,
        }
    }

    fn push_back(&mut self, e: Envelope) {
        self.mails += usize::from(Self::is_mail(&e));
        if let Some((t, u)) = Self::answer(&e) {
            self.answers.insert(t, (e.seq, u.clone()));
        }
        self.envs.push_back(e);
    }

    fn pop_front(&mut self) -> Option<Envelope> {
        let e = self.envs.pop_front()?;
        self.mails -= usize::from(Self::is_mail(&e));
        if let Some((t, _)) = Self::answer(&e)
            && self.answers.get(&t).is_some_and(|(seq, _)| *seq == e.seq)
        {
            self.answers.remove(&t);
        }
        Some(e)
    }

    fn retain(&mut self, keep: impl Fn(&Envelope) -> bool) {
        let kept: Vec<Envelope> = std::mem::take(&mut self.envs)
            .into_iter()
            .filter(|e| keep(e))
            .collect();
        *self = kept.into();
    }
}

impl From<Vec<Envelope>> for Queue {
    fn from(envs: Vec<Envelope>) -> Queue {
        let mut q = Queue::default();
        envs.into_iter().for_each(|e| q.push_back(e));
        q
    }
}

impl std::ops::Deref for Queue {
    type Target = VecDeque<Envelope>;
    fn deref(&self) -> &VecDeque<Envelope> {
        &self.envs
    }
}

#[derive(Clone, Debug, Default)]
struct Outbound {
    pending: Queue,
    next_seq: u64,
    /// The highest sequence number stored durably: nothing beyond it is ever transmitted.
    stored: u64,
    /// The last sequence number of the batch in flight.
    in_flight: Option<u64>,
    retry_at: Option<Millis>,
    failures: u32,
    up: bool,
}

/// All outboxes of this host, and the marks of what each peer sent it.
#[derive(Clone, Debug)]
pub struct Postbox {
    epoch: u64,
    out: BTreeMap<String, Outbound>,
    marks: Marks,
    /// Backoff between failed transmissions (deterministic: a peer's outbox is one stream, and
    /// the link below it already spreads redials with jitter).
    backoff: Backoff,
}

impl Postbox {
    /// `epoch` identifies this host's outbox state; `pending` are the stored outbox envelopes
    /// per peer with each peer's next sequence number; `marks` the stored receiving marks.
    pub fn new(
        epoch: u64,
        peers: &[String],
        pending: BTreeMap<String, (u64, Vec<Envelope>)>,
        marks: BTreeMap<String, (u64, u64)>,
        backoff: Backoff,
    ) -> Postbox {
        let mut out: BTreeMap<String, Outbound> = peers
            .iter()
            .map(|p| {
                (
                    p.clone(),
                    Outbound {
                        next_seq: 1,
                        ..Default::default()
                    },
                )
            })
            .collect();
        for (peer, (next, mut envs)) in pending {
            envs.sort_by_key(|e| e.seq);
            let o = out.entry(peer).or_default();
            o.next_seq = next.max(envs.last().map_or(0, |e| e.seq + 1)).max(1);
            o.pending = envs.into();
        }
        // What was loaded was stored.
        for o in out.values_mut() {
            o.next_seq = o.next_seq.max(1);
            o.stored = o.next_seq - 1;
        }
        Postbox {
            epoch,
            out,
            marks: Marks::new(marks),
            backoff,
        }
    }

    /// The earliest retry that is waiting for its time.
    pub fn next_due(&self) -> Option<Millis> {
        self.out
            .values()
            .filter(|o| o.up && o.in_flight.is_none() && !o.pending.is_empty())
            .filter_map(|o| o.retry_at)
            .min()
    }

    /// Whether the link to `peer` is up, as last told.
    pub fn is_up(&self, peer: &str) -> bool {
        self.out.get(peer).is_some_and(|o| o.up)
    }

    /// Envelopes waiting for `peer` to take them.
    pub fn depth(&self, peer: &str) -> usize {
        self.out.get(peer).map_or(0, |o| o.pending.len())
    }

    pub fn peers(&self) -> impl Iterator<Item = &String> {
        self.out.keys()
    }

    /// Number `item` for `peer` and queue it. It is not transmitted until the shell has stored
    /// it (with the next sequence number) and said so with `stored`; if the store fails, the
    /// shell calls `rollback`. Several envelopes may wait to be stored together (one commit).
    pub fn enqueue(&mut self, peer: &str, item: Item) -> Result<Envelope, Unqueued> {
        let o = self.out.get_mut(peer).ok_or(Unqueued::NotAPeer)?;
        if matches!(item, Item::Mail { .. }) && o.pending.mails >= MAX_OUTBOX {
            return Err(Unqueued::Full);
        }
        if o.pending.holds_answer(&item) {
            return Err(Unqueued::Duplicate);
        }
        let env = Envelope {
            seq: o.next_seq,
            item,
        };
        o.next_seq += 1;
        o.pending.push_back(env.clone());
        Ok(env)
    }

    /// The outbox's mail count as kept, and as counted now.
    #[cfg(test)]
    fn mails_counted(&self, peer: &str) -> (usize, usize) {
        self.out.get(peer).map_or((0, 0), |o| {
            (
                o.pending.mails,
                o.pending.iter().filter(|e| Queue::is_mail(e)).count(),
            )
        })
    }

    /// Whether the outbox's answer index is what its queue holds (the last answer per ticket).
    #[cfg(test)]
    fn answers_indexed(&self, peer: &str) -> bool {
        self.out.get(peer).is_none_or(|o| {
            let mut want = HashMap::new();
            for e in o.pending.iter() {
                if let Some((t, u)) = Queue::answer(e) {
                    want.insert(t, (e.seq, u.clone()));
                }
            }
            want == o.pending.answers
        })
    }

    /// The sequence number the next envelope for `peer` will get.
    #[cfg(test)]
    fn next_seq(&self, peer: &str) -> u64 {
        self.out.get(peer).map_or(1, |o| o.next_seq)
    }

    /// Everything queued for `peer` up to `upto` is stored durably: it may be transmitted.
    pub fn stored(&mut self, peer: &str, upto: u64) {
        if let Some(o) = self.out.get_mut(peer) {
            o.stored = o.stored.max(upto.min(o.next_seq.saturating_sub(1)));
        }
    }

    /// A store failed: take back every envelope for `peer` not stored yet (their senders are
    /// told it failed), so the numbering goes on from the last stored one without a gap.
    /// Returns how many were taken back.
    pub fn rollback(&mut self, peer: &str) -> usize {
        let Some(o) = self.out.get_mut(peer) else {
            return 0;
        };
        let before = o.pending.len();
        o.pending.retain(|e| e.seq <= o.stored);
        o.next_seq = o.stored + 1;
        before - o.pending.len()
    }

    /// The link to `peer` went up or down.
    pub fn link(&mut self, peer: &str, up: bool, now: Millis) -> Vec<Effect> {
        let Some(o) = self.out.get_mut(peer) else {
            return vec![];
        };
        o.up = up;
        if up {
            o.retry_at = None;
            o.failures = 0;
        }
        self.pump(peer, now)
    }

    /// Start a transmission to `peer` if one is due.
    pub fn pump(&mut self, peer: &str, now: Millis) -> Vec<Effect> {
        let epoch = self.epoch;
        let Some(o) = self.out.get_mut(peer) else {
            return vec![];
        };
        if !o.up || o.in_flight.is_some() || o.pending.front().is_none_or(|e| e.seq > o.stored) {
            return vec![];
        }
        if let Some(at) = o.retry_at {
            if now < at {
                return vec![Effect::Arm(at)];
            }
            o.retry_at = None;
        }
        let mut envelopes = vec![];
        let mut bytes = 0;
        for e in o.pending.iter() {
            if e.seq > o.stored
                || envelopes.len() == MAX_BATCH
                || (bytes > 0 && bytes + e.item.weight() > MAX_BATCH_BYTES)
            {
                break;
            }
            bytes += e.item.weight();
            envelopes.push(e.clone());
        }
        o.in_flight = envelopes.last().map(|e| e.seq);
        vec![Effect::Transmit {
            peer: peer.to_string(),
            epoch,
            envelopes,
        }]
    }

    /// `peer` answered a transmission: it holds everything up to `upto`.
    pub fn acked(&mut self, peer: &str, upto: u64, now: Millis) -> Vec<Effect> {
        let Some(o) = self.out.get_mut(peer) else {
            return vec![];
        };
        o.in_flight = None;
        let mut done = vec![];
        while o.pending.front().is_some_and(|e| e.seq <= upto) {
            done.extend(o.pending.pop_front());
        }
        if done.is_empty() {
            // No progress: the peer holds none of what we sent (a gap it waits for that we no
            // longer have, or a refusal). Back off rather than spin.
            return self.failed(peer, now);
        }
        o.failures = 0;
        let mut fx = vec![Effect::Acked {
            peer: peer.to_string(),
            upto,
            done,
        }];
        fx.extend(self.pump(peer, now));
        fx
    }

    /// A transmission to `peer` failed; retry after a backoff.
    pub fn failed(&mut self, peer: &str, now: Millis) -> Vec<Effect> {
        let b = self.backoff;
        let Some(o) = self.out.get_mut(peer) else {
            return vec![];
        };
        o.in_flight = None;
        o.failures = o.failures.saturating_add(1);
        let at = now + b.ceiling(o.failures);
        o.retry_at = Some(at);
        vec![Effect::Arm(at)]
    }

    /// Time passed: retry every transmission that is due.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        let peers: Vec<String> = self.out.keys().cloned().collect();
        peers.iter().flat_map(|p| self.pump(p, now)).collect()
    }

    /// What to keep of a batch `peer` sent in `epoch`, with `room` for that many more held
    /// messages. Nothing changes until `commit`. The rule is the mark's (`Marks::receive`).
    pub fn receive(
        &self,
        peer: &str,
        epoch: u64,
        envelopes: Vec<Envelope>,
        room: usize,
    ) -> Received {
        self.marks.receive(peer, epoch, envelopes, room)
    }

    /// The shell persisted a received batch.
    pub fn commit(&mut self, peer: &str, r: &Received) {
        self.marks.commit(peer, r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mail::testkit::*;
    use crate::types::MemberName;
    use proptest::prelude::*;

    fn transmit(fx: &[Effect]) -> Vec<u64> {
        fx.iter()
            .find_map(|e| match e {
                Effect::Transmit { envelopes, .. } => {
                    Some(envelopes.iter().map(|e| e.seq).collect())
                }
                _ => None,
            })
            .unwrap_or_default()
    }

    #[test]
    fn numbers_in_order_and_sends_only_when_up_one_batch_at_a_time() {
        let mut p = postbox();
        for i in 1..=3 {
            assert_eq!(put(&mut p, "beta", mail(i)).unwrap().seq, i);
        }
        assert!(put(&mut p, "gamma", mail(9)).is_none(), "not a peer");
        assert!(p.pump("beta", 0).is_empty(), "down: nothing goes out");
        assert_eq!(transmit(&p.link("beta", true, 0)), vec![1, 2, 3]);
        put(&mut p, "beta", mail(4));
        assert!(p.pump("beta", 0).is_empty(), "one batch in flight");
        let fx = p.acked("beta", 3, 1);
        assert!(matches!(&fx[0], Effect::Acked { upto: 3, done, .. } if done.len() == 3));
        assert_eq!(transmit(&fx), vec![4]);
        assert_eq!(p.depth("beta"), 1);
    }

    #[test]
    fn nothing_goes_out_before_it_is_stored_and_a_failed_store_leaves_no_gap() {
        let mut p = postbox();
        p.link("beta", true, 0);
        // Three queued for one commit: nothing is sent while it runs.
        for i in 1..=3 {
            assert_eq!(p.enqueue("beta", mail(i)).unwrap().seq, i);
        }
        assert!(p.pump("beta", 0).is_empty());
        // The commit held the first two (a later one waits for the next commit).
        p.stored("beta", 2);
        assert_eq!(transmit(&p.pump("beta", 0)), vec![1, 2]);
        // The next commit fails: what was not stored is taken back, and numbering resumes
        // right after the last stored envelope.
        let mut q = postbox();
        q.link("beta", true, 0);
        for i in 1..=3 {
            q.enqueue("beta", mail(i)).unwrap();
        }
        q.stored("beta", 1);
        assert_eq!(q.rollback("beta"), 2);
        assert_eq!(q.depth("beta"), 1);
        assert_eq!(q.enqueue("beta", mail(4)).unwrap().seq, 2);
        q.stored("beta", 2);
        assert_eq!(transmit(&q.pump("beta", 0)), vec![1, 2]);
        // `stored` never claims more than was queued.
        q.stored("beta", 99);
        assert_eq!(q.enqueue("beta", mail(5)).unwrap().seq, 3);
        assert_eq!(q.rollback("beta"), 1);
    }

    #[test]
    fn the_outbox_and_the_held_mail_are_bounded() {
        let mut p = postbox();
        for i in 0..MAX_OUTBOX as u64 {
            put(&mut p, "beta", mail(i)).unwrap();
        }
        assert_eq!(p.enqueue("beta", mail(0)), Err(Unqueued::Full));
        assert_eq!(p.enqueue("gamma", mail(0)), Err(Unqueued::NotAPeer));
        // Reports back are not refused (they are bounded by the tickets received).
        let report = Item::Update {
            ticket: TicketId(1),
            update: RemoteUpdate::Transmitted,
        };
        assert!(p.enqueue("beta", report.clone()).is_ok());
        // The receiver takes mail only while it has room; a report needs none, but waits
        // behind mail that found none (order is kept).
        let env = |s, item| Envelope { seq: s, item };
        let batch = vec![
            env(1, mail(1)),
            env(2, report.clone()),
            env(3, mail(3)),
            env(4, report.clone()),
        ];
        let r = p.receive("alpha", 1, batch.clone(), 1);
        assert_eq!(r.upto, 2);
        assert_eq!(r.accepted.len(), 2);
        let r = p.receive("alpha", 1, batch.clone(), 0);
        assert_eq!((r.upto, r.accepted.len()), (0, 0));
        let r = p.receive("alpha", 1, batch, 2);
        assert_eq!((r.upto, r.accepted.len()), (4, 4));
    }

    #[test]
    fn a_failure_backs_off_and_a_link_up_retries_at_once() {
        let mut p = postbox();
        put(&mut p, "beta", mail(1));
        p.link("beta", true, 0);
        assert_eq!(p.failed("beta", 10), vec![Effect::Arm(110)]);
        assert_eq!(p.pump("beta", 50), vec![Effect::Arm(110)]);
        assert_eq!(transmit(&p.tick(110)), vec![1]);
        assert_eq!(p.failed("beta", 200), vec![Effect::Arm(400)]);
        assert_eq!(transmit(&p.link("beta", true, 201)), vec![1]);
    }

    #[test]
    fn an_ack_without_progress_backs_off() {
        let mut p = postbox();
        put(&mut p, "beta", mail(1));
        p.link("beta", true, 0);
        assert_eq!(p.acked("beta", 0, 5), vec![Effect::Arm(105)]);
    }

    #[test]
    fn batches_are_bounded() {
        let mut p = postbox();
        for i in 0..(MAX_BATCH as u64 + 10) {
            put(&mut p, "beta", mail(i));
        }
        assert_eq!(transmit(&p.link("beta", true, 0)).len(), MAX_BATCH);
        let mut p = postbox();
        for i in 0..4 {
            put(
                &mut p,
                "beta",
                Item::Mail {
                    ticket: TicketId(i),
                    from: MemberName::new("lead").unwrap(),
                    body: "x".repeat(200 * 1024),
                    sent_at: 0,
                },
            );
        }
        assert_eq!(transmit(&p.link("beta", true, 0)).len(), 2);
    }

    #[test]
    fn reloads_pending_and_keeps_numbering() {
        let mut pending = BTreeMap::new();
        pending.insert(
            "beta".to_string(),
            (
                6,
                vec![
                    Envelope {
                        seq: 5,
                        item: mail(5),
                    },
                    Envelope {
                        seq: 4,
                        item: mail(4),
                    },
                ],
            ),
        );
        let mut p = Postbox::new(
            1,
            &["beta".into()],
            pending,
            BTreeMap::new(),
            Backoff {
                min_ms: 1,
                max_ms: 1,
            },
        );
        assert_eq!(put(&mut p, "beta", mail(6)).unwrap().seq, 6);
        assert_eq!(transmit(&p.link("beta", true, 0)), vec![4, 5, 6]);
    }

    #[test]
    fn an_answer_waits_in_the_outbox_once() {
        let mut p = postbox();
        let item = |replied| Item::Update {
            ticket: TicketId(4),
            update: answer(replied),
        };
        let first = put(&mut p, "beta", item(false)).unwrap();
        // Queued again (a resync after a restart) while it waits: refused as a duplicate.
        assert_eq!(p.enqueue("beta", item(false)), Err(Unqueued::Duplicate));
        // The ticket's answer changed (a reply after the tail): that is news.
        let second = put(&mut p, "beta", item(true)).unwrap();
        assert_eq!(p.enqueue("beta", item(true)), Err(Unqueued::Duplicate));
        // Once beta holds them, the same answer may be queued again.
        p.link("beta", true, 0);
        p.acked("beta", second.seq.max(first.seq), 0);
        assert!(p.answers_indexed("beta"));
        assert!(p.enqueue("beta", item(true)).is_ok());
    }

    proptest! {
        /// Sends stored in groups, some groups failing: exactly the messages whose store
        /// succeeded reach the receiver, once, in order, numbered without a gap, and nothing
        /// is ever on the wire before it was stored.
        #[test]
        fn only_stored_mail_goes_out_and_numbering_has_no_gap(
            ops in proptest::collection::vec((0u8..6, any::<u16>()), 1..200),
        ) {
            let mut tx = postbox();
            let mut rx = postbox();
            let mut next_item = 0u64;
            let mut committed: Vec<u64> = vec![];
            let mut unstored: Vec<u64> = vec![];
            // Reports back waiting for the commit, with the mail in `unstored`.
            let mut reports = 0;
            let mut accepted: Vec<u64> = vec![];
            let mut wire: Vec<Vec<Envelope>> = vec![];
            let mut now = 0;
            let push = |fx: Vec<Effect>, wire: &mut Vec<Vec<Envelope>>, committed: &[u64]| {
                for e in fx {
                    if let Effect::Transmit { envelopes, .. } = e {
                        for env in &envelopes {
                            let Item::Mail { ticket, .. } = &env.item else { continue };
                            assert!(committed.contains(&ticket.0), "{} sent before it was stored", ticket.0);
                        }
                        wire.push(envelopes);
                    }
                }
            };
            let items = |r: &Received| -> Vec<u64> {
                r.accepted.iter().filter_map(|e| match &e.item {
                    Item::Mail { ticket, .. } => Some(ticket.0),
                    Item::Update { .. } => None,
                }).collect()
            };
            let fx = tx.link("beta", true, now);
            push(fx, &mut wire, &committed);
            for (op, x) in ops {
                now += 50;
                match op {
                    // A send joins the group waiting for the next commit.
                    0 | 1 => {
                        next_item += 1;
                        tx.enqueue("beta", mail(next_item)).unwrap();
                        unstored.push(next_item);
                    }
                    // The commit of everything waiting succeeds...
                    2 if x % 4 != 0 => {
                        committed.append(&mut unstored);
                        reports = 0;
                        let upto = tx.next_seq("beta") - 1;
                        tx.stored("beta", upto);
                        let fx = tx.pump("beta", now);
                        push(fx, &mut wire, &committed);
                    }
                    // ... or fails.
                    2 => {
                        prop_assert_eq!(tx.rollback("beta"), unstored.len() + reports);
                        unstored.clear();
                        reports = 0;
                    }
                    // Deliver the oldest batch and ack it.
                    3 | 4 if !wire.is_empty() => {
                        let b = wire.remove(0);
                        let r = take(&mut rx, b);
                        accepted.extend(items(&r));
                        let fx = tx.acked("beta", r.upto, now);
                        push(fx, &mut wire, &committed);
                    }
                    // A report back joins the group (it counts against no bound).
                    5 if x % 2 == 0 => {
                        tx.enqueue("beta", Item::Update {
                            ticket: TicketId(u64::from(x)),
                            update: RemoteUpdate::Transmitted,
                        }).unwrap();
                        reports += 1;
                    }
                    // An answer (of few tickets, two kinds: duplicates and changes happen).
                    5 => {
                        let update = answer(x % 4 == 1);
                        match tx.enqueue("beta", Item::Update { ticket: TicketId(u64::from(x % 3)), update }) {
                            Ok(_) => reports += 1,
                            Err(e) => prop_assert_eq!(e, Unqueued::Duplicate),
                        }
                    }
                    _ => {
                        let fx = tx.link("beta", x % 3 != 0, now);
                        push(fx, &mut wire, &committed);
                    }
                }
                let (counted, recounted) = tx.mails_counted("beta");
                prop_assert_eq!(counted, recounted);
                prop_assert!(tx.answers_indexed("beta"));
            }
            // The last group fails; heal and drain.
            tx.rollback("beta");
            heal_and_drain(
                &mut tx,
                &mut rx,
                &mut wire,
                now,
                |fx, wire| push(fx, wire, &committed),
                |r| accepted.extend(items(r)),
            );
            prop_assert_eq!(accepted, committed);
        }
    }
}
