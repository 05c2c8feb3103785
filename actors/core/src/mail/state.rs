//! The lead-to-lead mail core: per-peer outboxes with sequence numbers, at most one batch in
//! flight per peer, retry with backoff, and the receiving side's high-water mark that turns
//! at-least-once transmission into exactly-once, in-order acceptance.
//!
//! Owns the sequencing rules: an envelope gets the next sequence number of its peer when it is
//! queued; a batch is a prefix of the outbox's *stored* part (nothing goes out before the shell
//! says it is durable, `stored`; a failed store is taken back without leaving a gap,
//! `rollback`); the receiver accepts only the envelope right after
//! its high-water mark (earlier ones are duplicates, later ones wait for the gap to fill), and
//! answers with the mark, which the sender treats as "everything up to here is durable there".
//! A sender whose state was lost starts a new `epoch`, which resets the receiver's mark. On the
//! receiving side, `Inbox` owns the hand-on order (each peer's mail reaches the lead in order; a
//! refused message holds the rest of its peer's mail) and the bound on held mail; `answer_of`
//! says what a resolved received ticket tells its origin. Pure:
//! the shell persists what this decides before acting on it. Must never do I/O.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::events::EventKind;
use crate::tickets::state::{RemoteUpdate, Ticket, TicketState};
use crate::types::{MemberName, Millis, Party, TicketId};

/// At most this many envelopes in one batch.
pub const MAX_BATCH: usize = 256;
/// A batch stops growing once its bodies reach this many bytes (a link frame is at most 1 MiB).
pub const MAX_BATCH_BYTES: usize = 512 * 1024;
/// At most this many messages wait in the outbox for one peer; more sends are refused until it
/// drains (reports back to a peer are not counted: they are bounded by the tickets received,
/// and an answer already waiting is not queued again, `Unqueued::Duplicate`).
pub const MAX_OUTBOX: usize = 10_000;
/// At most this many received messages are held for the lead (no live primary yet); a peer's
/// further mail is left in its outbox until the lead takes some (backpressure, not loss).
pub const MAX_HELD: usize = 10_000;

/// Why `enqueue` did not queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unqueued {
    NotAPeer,
    /// The peer's outbox holds `MAX_OUTBOX` messages.
    Full,
    /// The same answer is already waiting in the peer's outbox.
    Duplicate,
}

/// One unit of lead-to-lead traffic, numbered per (sending host, receiving host).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    pub seq: u64,
    pub item: Item,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Item {
    /// A message from the sending host's lead to the receiving host's lead; `ticket` is the
    /// sender's ticket, which every report about it names.
    Mail {
        ticket: TicketId,
        from: MemberName,
        body: String,
        sent_at: Millis,
    },
    /// A report on a ticket the receiving host sent (its receipt, or its answer).
    Update {
        ticket: TicketId,
        update: RemoteUpdate,
    },
}

impl Item {
    fn weight(&self) -> usize {
        match self {
            Item::Mail { body, .. } => body.len() + 64,
            Item::Update {
                update: RemoteUpdate::Answer { text, note, .. },
                ..
            } => text.as_ref().map_or(0, |t| t.len()) + note.as_ref().map_or(0, |n| n.len()) + 64,
            Item::Update { .. } => 64,
        }
    }
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

/// Backoff between failed transmissions (deterministic: a peer's outbox is one stream, and the
/// link below it already spreads redials with jitter).
pub use crate::backoff::Backoff;

/// What to do with a received batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    /// The envelopes that are new, in order: persist them with the new mark, then `commit`.
    pub accepted: Vec<Envelope>,
    pub epoch: u64,
    /// The new high-water mark: the answer to the sender.
    pub upto: u64,
    /// The sender started a new epoch (it lost its state); the old mark was dropped.
    pub reset: bool,
}

/// All outboxes of this host, and the marks of what each peer sent it.
#[derive(Clone, Debug)]
pub struct Postbox {
    epoch: u64,
    out: BTreeMap<String, Outbound>,
    /// Per sending peer: (its epoch, the highest sequence number accepted).
    marks: BTreeMap<String, (u64, u64)>,
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
            marks,
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
    /// messages (reports are never held, so they need none; the envelopes after one that finds
    /// no room wait in the sender's outbox). Nothing changes until `commit`.
    pub fn receive(
        &self,
        peer: &str,
        epoch: u64,
        envelopes: Vec<Envelope>,
        room: usize,
    ) -> Received {
        let mut room = room;
        let (known_epoch, mark) = match self.marks.get(peer) {
            Some(&m) => m,
            // Nothing heard from this peer (or this host's mail state is new): the sender still
            // holds only what no receiver confirmed, so its oldest envelope is where to start;
            // waiting for a seq 1 it no longer has would stall it for good.
            None => (
                epoch,
                envelopes.first().map_or(0, |e| e.seq.saturating_sub(1)),
            ),
        };
        let reset = known_epoch != epoch;
        let mut upto = if reset { 0 } else { mark };
        let mut accepted = vec![];
        for e in envelopes {
            if e.seq <= upto {
                continue; // a duplicate of what is already held
            }
            if e.seq != upto + 1 {
                break; // a gap: wait for the sender to fill it
            }
            if matches!(e.item, Item::Mail { .. }) {
                if room == 0 {
                    break; // full: the sender keeps it and backs off
                }
                room -= 1;
            }
            upto = e.seq;
            accepted.push(e);
        }
        Received {
            accepted,
            epoch,
            upto,
            reset,
        }
    }

    /// The shell persisted a received batch.
    pub fn commit(&mut self, peer: &str, r: &Received) {
        self.marks.insert(peer.to_string(), (r.epoch, r.upto));
    }
}

impl Received {
    /// Nothing new and the same epoch: the mark stands, there is nothing to store.
    pub fn changes_nothing(&self) -> bool {
        self.accepted.is_empty() && !self.reset
    }
}

/// Why a received batch is refused whole, and what would be accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadBatch {
    pub why: String,
    pub accepted: String,
}

/// The bounds on a batch a peer delivers, checked before anything else looks at it: at most
/// `MAX_BATCH` envelopes, and no message over `max_message_bytes` (this host's injector limit).
pub fn check_received(envelopes: &[Envelope], max_message_bytes: usize) -> Result<(), BadBatch> {
    if envelopes.len() > MAX_BATCH {
        return Err(BadBatch {
            why: format!("{} envelopes in one request", envelopes.len()),
            accepted: format!("at most {MAX_BATCH} envelopes per request"),
        });
    }
    if let Some(e) = envelopes.iter().find(|e| match &e.item {
        Item::Mail { body, .. } => body.len() > max_message_bytes,
        Item::Update { .. } => false,
    }) {
        return Err(BadBatch {
            why: format!(
                "envelope {} holds a message over {max_message_bytes} bytes",
                e.seq
            ),
            accepted: format!(
                "messages of at most injector.max_message_bytes = {max_message_bytes}"
            ),
        });
    }
    Ok(())
}

/// Received traffic stored and acknowledged but not yet handed on, in arrival order. Each
/// envelope carries this host's own arrival number (its key in the store): the sender's seq
/// is not unique once the sender starts a new epoch.
///
/// Owns the hand-on rule: the reports in a round go to the desk together (they are idempotent
/// and need no order with mail); each peer's mail goes to the lead in order, and once one of a
/// peer's messages is refused, the rest of that peer's mail waits behind it (FIFO per peer,
/// across rounds). Also the bound on held mail (`room`).
#[derive(Clone, Debug, Default)]
pub struct Inbox {
    held: VecDeque<(String, u64, Envelope)>,
    /// How many of `held` are mail (the rest are reports).
    mails: usize,
    /// The next arrival number.
    next: u64,
}

impl Inbox {
    /// The arrival number the next envelope stored should get (then `push` it with it).
    pub fn next_arrival(&self) -> u64 {
        self.next.max(1)
    }

    /// Hold an envelope from `peer`, stored under `arrival`.
    pub fn push(&mut self, peer: String, arrival: u64, env: Envelope) {
        self.mails += usize::from(matches!(env.item, Item::Mail { .. }));
        self.next = self.next.max(arrival + 1);
        self.held.push_back((peer, arrival, env));
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// How many received messages are held for the lead.
    pub fn mails(&self) -> usize {
        self.mails
    }

    /// How many more messages may be accepted for the lead (`MAX_HELD` in all).
    pub fn room(&self) -> usize {
        MAX_HELD.saturating_sub(self.mails)
    }

    /// What is held, oldest first: (peer, arrival, envelope).
    pub fn iter(&self) -> impl Iterator<Item = &(String, u64, Envelope)> {
        self.held.iter()
    }

    /// Start handing on everything held. Feed the round the desk's answer to its reports and
    /// the lead's answer to each mail it gives, then `end` it.
    pub fn round(&mut self) -> Round {
        self.mails = 0;
        Round {
            pending: std::mem::take(&mut self.held),
            applied: false,
            blocked: vec![],
            current: None,
            keep: vec![],
            done: vec![],
        }
    }

    /// A round is over: what it did not hand on is held again, in its order. Returns what it
    /// handed on, (peer, arrival), to drop from the store.
    pub fn end(&mut self, mut r: Round) -> Vec<(String, u64)> {
        // Anything the round did not get to (it was ended early) is kept too, and so is
        // anything that arrived meanwhile, behind it.
        r.handed(false);
        let arrived = std::mem::take(&mut self.held);
        self.mails = 0;
        for (peer, arrival, env) in r.keep.into_iter().chain(r.pending).chain(arrived) {
            self.push(peer, arrival, env);
        }
        r.done
    }
}

/// One mail to hand to the lead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToHand {
    pub peer: String,
    /// The sender's sequence number.
    pub seq: u64,
    pub ticket: TicketId,
    pub from: MemberName,
    pub body: String,
}

/// A hand-on round over what the inbox held (see `Inbox`).
#[derive(Debug)]
pub struct Round {
    pending: VecDeque<(String, u64, Envelope)>,
    applied: bool,
    /// Peers one of whose messages the lead refused this round.
    blocked: Vec<String>,
    /// The mail `next_mail` gave, waiting for `handed`.
    current: Option<(String, u64, Envelope)>,
    keep: Vec<(String, u64, Envelope)>,
    /// (peer, arrival) of what was handed on.
    done: Vec<(String, u64)>,
}

impl Round {
    /// The round's reports, to apply together before any mail is asked for.
    pub fn reports(&self) -> Vec<(TicketId, RemoteUpdate)> {
        self.pending
            .iter()
            .filter_map(|(_, _, e)| match &e.item {
                Item::Update { ticket, update } => Some((*ticket, update.clone())),
                Item::Mail { .. } => None,
            })
            .collect()
    }

    /// Whether the desk took the reports; if not, they stay held.
    pub fn reports_applied(&mut self, ok: bool) {
        self.applied = ok;
    }

    /// The next mail to hand to the lead, or `None` once the round has gone through everything.
    /// Reports pass by (handed on or kept as the desk answered), and so does the mail of a peer
    /// blocked this round. Answer each with `handed` before asking for the next.
    pub fn next_mail(&mut self) -> Option<ToHand> {
        // Asked again without an answer: the last one was not handed on.
        self.handed(false);
        while let Some((peer, arrival, env)) = self.pending.pop_front() {
            match &env.item {
                Item::Update { .. } if self.applied => self.done.push((peer, arrival)),
                Item::Mail {
                    ticket, from, body, ..
                } if !self.blocked.contains(&peer) => {
                    let m = ToHand {
                        peer: peer.clone(),
                        seq: env.seq,
                        ticket: *ticket,
                        from: from.clone(),
                        body: body.clone(),
                    };
                    self.current = Some((peer, arrival, env));
                    return Some(m);
                }
                _ => self.keep.push((peer, arrival, env)),
            }
        }
        None
    }

    /// The lead took (`true`) or refused the mail `next_mail` gave; a refusal holds the rest of
    /// that peer's mail for this round.
    pub fn handed(&mut self, ok: bool) {
        let Some((peer, arrival, env)) = self.current.take() else {
            return;
        };
        if ok {
            self.done.push((peer, arrival));
        } else {
            self.blocked.push(peer.clone());
            self.keep.push((peer, arrival, env));
        }
    }
}

/// Which event on this host is news for another host: a receipt for mail it sent (reported as
/// is), or the resolution of a ticket it opened here (reported as the ticket's answer, looked up
/// with `answer_of`: `None` here). Everything else stays here.
pub fn report_of(ev: &EventKind) -> Option<(TicketId, Option<RemoteUpdate>)> {
    match ev {
        EventKind::Receipt {
            from: Party::Remote { .. },
            ticket: Some(ticket),
            state,
            note,
            ..
        } => Some((
            *ticket,
            Some(RemoteUpdate::Receipt {
                state: *state,
                note: note.clone(),
            }),
        )),
        EventKind::Ticket {
            from: Party::Remote { .. },
            ticket,
            state,
            ..
        } if state.is_resolved() => Some((*ticket, None)),
        _ => None,
    }
}

/// What a resolved ticket received from another host tells its origin: its state, with the
/// reply's (or the transcript tail's) text. `None` while it is open.
pub fn answer_of(t: &Ticket) -> Option<RemoteUpdate> {
    if !t.state.is_resolved() {
        return None;
    }
    let text = match t.state {
        TicketState::Replied => t.reply.as_ref().map(|r| r.text.clone()),
        TicketState::Tail => t.tail.as_ref().map(|r| r.text.clone()),
        _ => None,
    };
    Some(RemoteUpdate::Answer {
        state: t.state,
        text,
        note: t.note.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn mail(i: u64) -> Item {
        Item::Mail {
            ticket: TicketId(i),
            from: MemberName::new("lead").unwrap(),
            body: format!("m{i}"),
            sent_at: 0,
        }
    }

    fn postbox() -> Postbox {
        Postbox::new(
            7,
            &["beta".into()],
            BTreeMap::new(),
            BTreeMap::new(),
            Backoff {
                min_ms: 100,
                max_ms: 1000,
            },
        )
    }

    /// The receiver takes batch `b` from alpha, with all the room it wants, and keeps it.
    fn take(rx: &mut Postbox, b: Vec<Envelope>) -> Received {
        let r = rx.receive("alpha", 7, b, usize::MAX);
        rx.commit("alpha", &r);
        r
    }

    /// Queue and store at once (what a shell whose commit succeeded does).
    fn put(p: &mut Postbox, peer: &str, item: Item) -> Option<Envelope> {
        let e = p.enqueue(peer, item).ok()?;
        p.stored(peer, e.seq);
        Some(e)
    }

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
    fn a_new_epoch_resets_the_mark() {
        let mut p = postbox();
        let env = |s| Envelope {
            seq: s,
            item: mail(s),
        };
        let r = p.receive("alpha", 1, vec![env(1), env(2)], usize::MAX);
        p.commit("alpha", &r);
        let again = p.receive("alpha", 1, vec![env(1), env(2)], usize::MAX);
        assert!(again.accepted.is_empty() && again.upto == 2 && !again.reset);
        let fresh = p.receive("alpha", 2, vec![env(1)], usize::MAX);
        assert!(fresh.reset && fresh.upto == 1 && fresh.accepted.len() == 1);
    }

    /// Heal the link to beta, then deliver the oldest batch on the wire and ack it until the
    /// outbox is empty (bounded): `sent` takes the sender's effects (putting batches on the
    /// wire), `got` each batch the receiver took.
    fn heal_and_drain(
        tx: &mut Postbox,
        rx: &mut Postbox,
        wire: &mut Vec<Vec<Envelope>>,
        mut now: Millis,
        mut sent: impl FnMut(Vec<Effect>, &mut Vec<Vec<Envelope>>),
        mut got: impl FnMut(&Received),
    ) {
        sent(tx.link("beta", true, now + 100_000), wire);
        let mut rounds = 0;
        while tx.depth("beta") > 0 && rounds < 1000 {
            rounds += 1;
            now += 100_000;
            if wire.is_empty() {
                sent(tx.failed("beta", now), wire);
                sent(tx.tick(now + 100_000), wire);
                continue;
            }
            let b = wire.remove(0);
            let r = take(rx, b);
            got(&r);
            sent(tx.acked("beta", r.upto, now), wire);
        }
    }

    /// A replied answer, or a transcript tail.
    fn answer(replied: bool) -> RemoteUpdate {
        RemoteUpdate::Answer {
            state: if replied {
                TicketState::Replied
            } else {
                TicketState::Tail
            },
            text: Some("done".into()),
            note: None,
        }
    }

    #[test]
    fn only_news_for_another_host_is_reported_back() {
        use crate::injector::state::ReceiptState;
        use crate::tickets::state::TicketKind;
        let remote: Party = serde_json::from_str("\"lead@beta\"").unwrap();
        let local = Party::Member(MemberName::new("w1").unwrap());
        let receipt = |from: &Party| EventKind::Receipt {
            msg: crate::types::MsgId(1),
            target: MemberName::new("lead").unwrap(),
            from: from.clone(),
            ticket: Some(TicketId(5)),
            state: ReceiptState::Delivered,
            note: None,
        };
        let ticket = |from: &Party, state| EventKind::Ticket {
            ticket: TicketId(6),
            kind: TicketKind::Send,
            from: from.clone(),
            to: MemberName::new("lead").unwrap(),
            state,
        };
        assert_eq!(
            report_of(&receipt(&remote)),
            Some((
                TicketId(5),
                Some(RemoteUpdate::Receipt {
                    state: ReceiptState::Delivered,
                    note: None
                })
            ))
        );
        assert_eq!(report_of(&receipt(&local)), None);
        assert_eq!(
            report_of(&ticket(&remote, TicketState::Replied)),
            Some((TicketId(6), None))
        );
        assert_eq!(report_of(&ticket(&remote, TicketState::Open)), None);
        assert_eq!(report_of(&ticket(&local, TicketState::Replied)), None);
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

    fn report(t: u64) -> Item {
        Item::Update {
            ticket: TicketId(t),
            update: RemoteUpdate::Transmitted,
        }
    }

    #[test]
    fn a_receiver_that_lost_its_state_takes_up_where_the_senders_outbox_starts() {
        let mut tx = postbox();
        for i in 1..=6 {
            put(&mut tx, "beta", mail(i));
        }
        tx.link("beta", true, 0);
        // The first four were confirmed by beta's old state, which is gone.
        let fx = tx.acked("beta", 4, 0);
        let mut fresh = postbox();
        let Some(envelopes) = fx.into_iter().find_map(|e| match e {
            Effect::Transmit { envelopes, .. } => Some(envelopes),
            _ => None,
        }) else {
            panic!("nothing transmitted")
        };
        let r = take(&mut fresh, envelopes.clone());
        assert_eq!((r.upto, r.accepted.len(), r.reset), (6, 2, false));
        // And from then on it is an ordinary mark: the same batch again is a duplicate.
        let again = take(&mut fresh, envelopes);
        assert_eq!((again.upto, again.accepted.len()), (6, 0));
        // ... which changes nothing to store, where the first did.
        assert!(again.changes_nothing() && !r.changes_nothing());
    }

    #[test]
    fn a_received_batch_is_bounded_in_envelopes_and_message_size() {
        let env = |s: u64, item| Envelope { seq: s, item };
        let ok: Vec<Envelope> = (1..=MAX_BATCH as u64).map(|s| env(s, mail(s))).collect();
        assert_eq!(check_received(&ok, 4), Ok(()));
        let mut many = ok.clone();
        many.push(env(MAX_BATCH as u64 + 1, report(1)));
        let bad = check_received(&many, 4).unwrap_err();
        assert!(bad.why.contains("257 envelopes") && bad.accepted.contains("at most 256"));
        // "m10" is 3 bytes: over a limit of 2; a report is never over.
        let big = vec![env(1, report(1)), env(2, mail(10))];
        let bad = check_received(&big, 2).unwrap_err();
        assert!(
            bad.why.contains("envelope 2") && bad.accepted.contains("= 2"),
            "{bad:?}"
        );
        assert_eq!(check_received(&big, 3), Ok(()));
    }

    /// (peer, seq) of an envelope.
    type Handed = (String, u64);

    /// Hold what `peer` sent as `seq`, under the next arrival number (what the shell stores).
    fn hold(inbox: &mut Inbox, peer: &str, seq: u64, item: Item) {
        let arrival = inbox.next_arrival();
        inbox.push(peer.into(), arrival, Envelope { seq, item });
    }

    /// Run one round: the desk answers `desk_ok`, the lead takes mail while `lead` says so.
    /// Returns the mail the lead took (peer, seq) and what the round handed on (peer, arrival).
    fn hand_round(
        inbox: &mut Inbox,
        desk_ok: bool,
        mut lead: impl FnMut(&ToHand) -> bool,
    ) -> (Vec<Handed>, Vec<Handed>) {
        let mut r = inbox.round();
        let reports = r.reports();
        r.reports_applied(reports.is_empty() || desk_ok);
        let mut took = vec![];
        while let Some(m) = r.next_mail() {
            let ok = lead(&m);
            if ok {
                took.push((m.peer.clone(), m.seq));
            }
            r.handed(ok);
        }
        (took, inbox.end(r))
    }

    #[test]
    fn a_refused_message_holds_the_rest_of_its_peers_mail_and_only_that() {
        let mut inbox = Inbox::default();
        hold(&mut inbox, "a", 1, mail(1)); // arrival 1
        hold(&mut inbox, "b", 1, mail(2)); // 2
        hold(&mut inbox, "a", 2, report(9)); // 3
        hold(&mut inbox, "a", 3, mail(3)); // 4
        hold(&mut inbox, "b", 2, mail(4)); // 5
        assert_eq!((inbox.mails(), inbox.room()), (4, MAX_HELD - 4));
        // The lead refuses a's first message: a's later mail is not even offered; b's goes on.
        // The desk refuses the report: it stays.
        let mut offered = vec![];
        let (took, done) = hand_round(&mut inbox, false, |m| {
            offered.push((m.peer.clone(), m.seq));
            m.peer == "b"
        });
        let pairs = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(p, s)| (p.to_string(), *s))
                .collect::<Vec<_>>()
        };
        assert_eq!(offered, pairs(&[("a", 1), ("b", 1), ("b", 2)]));
        assert_eq!(took, pairs(&[("b", 1), ("b", 2)]));
        assert_eq!(done, pairs(&[("b", 2), ("b", 5)]));
        let held: Vec<_> = inbox.iter().map(|(p, _, e)| (p.clone(), e.seq)).collect();
        assert_eq!(held, pairs(&[("a", 1), ("a", 2), ("a", 3)]));
        assert_eq!(inbox.mails(), 2);
        // Next round everything goes, in order.
        let (took, done) = hand_round(&mut inbox, true, |_| true);
        assert_eq!(took, pairs(&[("a", 1), ("a", 3)]));
        assert_eq!(done, pairs(&[("a", 1), ("a", 3), ("a", 4)]));
        assert!(inbox.is_empty() && inbox.mails() == 0);
    }

    #[test]
    fn a_round_ended_early_keeps_its_order_and_what_arrived_meanwhile_comes_after() {
        let mut inbox = Inbox::default();
        for s in 1..=3 {
            hold(&mut inbox, "a", s, mail(s));
        }
        let mut r = inbox.round();
        r.reports_applied(true);
        let first = r.next_mail().unwrap();
        assert_eq!(first.seq, 1);
        r.handed(true);
        assert_eq!(r.next_mail().unwrap().seq, 2);
        // No answer for 2, and the round ends: 2 and 3 are held, then what arrived.
        hold(&mut inbox, "b", 1, mail(9));
        assert_eq!(inbox.end(r), vec![("a".to_string(), 1)]);
        let held: Vec<_> = inbox
            .iter()
            .map(|(p, a, e)| (p.as_str(), *a, e.seq))
            .collect();
        assert_eq!(held, vec![("a", 2, 2), ("a", 3, 3), ("b", 4, 1)]);
        assert_eq!(inbox.mails(), 3);
        assert_eq!(inbox.next_arrival(), 5);
    }

    #[test]
    fn a_senders_new_epoch_does_not_overwrite_mail_still_held_from_the_old_one() {
        let mut inbox = Inbox::default();
        hold(&mut inbox, "a", 3, mail(1)); // the old epoch's seq 3
        hold(&mut inbox, "a", 3, mail(2)); // the new epoch's seq 3
        let mut tickets = vec![];
        let (_, done) = hand_round(&mut inbox, true, |m| {
            tickets.push(m.ticket.0);
            true
        });
        assert_eq!(tickets, vec![1, 2]);
        assert_eq!(done, vec![("a".to_string(), 1), ("a".to_string(), 2)]);
    }

    proptest! {
        /// Whatever the link does (drops, duplicates, reorders, partial acks, restarts of the
        /// sender's actor), the receiver accepts every envelope exactly once, in order.
        #[test]
        fn exactly_once_in_order(
            n in 1u64..40,
            ops in proptest::collection::vec((0u8..6, any::<u16>()), 1..200),
        ) {
            let mut tx = postbox();
            let mut rx = postbox();
            for i in 1..=n {
                put(&mut tx, "beta", mail(i));
            }
            let mut accepted: Vec<u64> = vec![];
            let mut wire: Vec<Vec<Envelope>> = vec![];
            let mut now = 0;
            fn step(fx: Vec<Effect>, wire: &mut Vec<Vec<Envelope>>) {
                for e in fx {
                    if let Effect::Transmit { envelopes, .. } = e {
                        wire.push(envelopes);
                    }
                }
            }
            let fx = tx.link("beta", true, now);
            step(fx, &mut wire);
            for (op, x) in ops {
                now += 50;
                match op {
                    // Deliver the oldest batch on the wire and ack it.
                    0 | 1 if !wire.is_empty() => {
                        let b = wire.remove(0);
                        let r = take(&mut rx, b);
                        accepted.extend(r.accepted.iter().map(|e| e.seq));
                        let fx = tx.acked("beta", r.upto, now);
                        step(fx, &mut wire);
                    }
                    // Deliver, but the ack is lost.
                    2 if !wire.is_empty() => {
                        let b = wire.remove(x as usize % wire.len());
                        let r = take(&mut rx, b);
                        accepted.extend(r.accepted.iter().map(|e| e.seq));
                        let fx = tx.failed("beta", now);
                        step(fx, &mut wire);
                    }
                    // The batch is lost.
                    3 if !wire.is_empty() => {
                        wire.remove(x as usize % wire.len());
                        let fx = tx.failed("beta", now);
                        step(fx, &mut wire);
                    }
                    // The link flaps.
                    4 => {
                        let fx = tx.link("beta", x % 2 == 0, now);
                        step(fx, &mut wire);
                    }
                    _ => {
                        let fx = tx.tick(now + 10_000);
                        step(fx, &mut wire);
                    }
                }
            }
            heal_and_drain(&mut tx, &mut rx, &mut wire, now, step, |r| {
                accepted.extend(r.accepted.iter().map(|e| e.seq))
            });
            prop_assert_eq!(accepted, (1..=n).collect::<Vec<_>>());
        }

        /// Over rounds in which the lead and the desk refuse at random, each peer's mail reaches
        /// the lead exactly once and in order, every report is handed on once, and the count of
        /// held mail stays true.
        #[test]
        fn held_mail_reaches_the_lead_once_in_order_per_peer(
            arrivals in proptest::collection::vec((0u8..3, any::<bool>()), 1..60),
            answers in proptest::collection::vec(any::<bool>(), 1..400),
        ) {
            let mut inbox = Inbox::default();
            let mut seq = [0u64; 3];
            let mut sent: Vec<Vec<u64>> = vec![vec![]; 3];
            for (p, is_mail) in &arrivals {
                let i = usize::from(*p);
                seq[i] += 1;
                let item = if *is_mail { mail(seq[i]) } else { report(seq[i]) };
                if *is_mail {
                    sent[i].push(seq[i]);
                }
                hold(&mut inbox, &format!("p{p}"), seq[i], item);
            }
            let mut took: Vec<Vec<u64>> = vec![vec![]; 3];
            let mut handed = 0;
            let mut answers = answers.into_iter().cycle();
            let mut rounds = 0;
            while !inbox.is_empty() && rounds < 1000 {
                rounds += 1;
                // Refusals run out eventually (every tenth round the lead and desk take all).
                let all = rounds % 10 == 0;
                let desk = all || answers.next().unwrap_or(true);
                let (t, done) = hand_round(&mut inbox, desk, |_| all || answers.next().unwrap_or(true));
                for (peer, s) in t {
                    took[usize::from(peer.as_bytes()[1] - b'0')].push(s);
                }
                handed += done.len();
                let recount = inbox.iter().filter(|(_, _, e)| matches!(e.item, Item::Mail { .. })).count();
                prop_assert_eq!(inbox.mails(), recount);
            }
            prop_assert!(inbox.is_empty());
            prop_assert_eq!(took, sent);
            prop_assert_eq!(handed, arrivals.len());
        }

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
