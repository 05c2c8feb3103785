//! The receiving side's mark: per sending peer, its epoch and the highest sequence number
//! accepted, which turns at-least-once transmission into exactly-once, in-order acceptance.
//!
//! Owns the acceptance rule: only the envelope right after the mark is taken (earlier ones are
//! duplicates, later ones wait for the gap to fill), mail only while the inbox has room, and
//! the new mark is the answer to the sender; a sender whose state was lost starts a new epoch,
//! which resets its mark; a peer never heard from is taken up where its outbox starts. Also the
//! bounds on a delivered batch, checked before anything looks at it (`check_received`). Pure:
//! nothing changes until the shell has persisted what was accepted and calls `commit`. Must
//! never do I/O.

use std::collections::BTreeMap;

use super::envelope::MAX_BATCH;
use super::envelope::{Envelope, Item};

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

/// Per sending peer: (its epoch, the highest sequence number accepted).
#[derive(Clone, Debug, Default)]
pub struct Marks(BTreeMap<String, (u64, u64)>);

impl Marks {
    /// The marks as stored.
    pub fn new(marks: BTreeMap<String, (u64, u64)>) -> Marks {
        Marks(marks)
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
        let (known_epoch, mark) = match self.0.get(peer) {
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
        self.0.insert(peer.to_string(), (r.epoch, r.upto));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mail::postbox::Effect;
    use crate::mail::testkit::*;
    use proptest::prelude::*;

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

    }
}
