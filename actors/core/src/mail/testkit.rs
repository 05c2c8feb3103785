//! What the mail cores' tests share: items, a postbox, storing and taking batches, draining a
//! healed link.

use std::collections::BTreeMap;

use super::envelope::{Envelope, Item};
use super::mark::Received;
use super::postbox::{Effect, Postbox};
use crate::backoff::Backoff;
use crate::tickets::state::{RemoteUpdate, TicketState};
use crate::types::{MemberName, Millis, TicketId};

pub(super) fn mail(i: u64) -> Item {
    Item::Mail {
        ticket: TicketId(i),
        from: MemberName::new("lead").unwrap(),
        body: format!("m{i}"),
        sent_at: 0,
    }
}

pub(super) fn postbox() -> Postbox {
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
pub(super) fn take(rx: &mut Postbox, b: Vec<Envelope>) -> Received {
    let r = rx.receive("alpha", 7, b, usize::MAX);
    rx.commit("alpha", &r);
    r
}

/// Queue and store at once (what a shell whose commit succeeded does).
pub(super) fn put(p: &mut Postbox, peer: &str, item: Item) -> Option<Envelope> {
    let e = p.enqueue(peer, item).ok()?;
    p.stored(peer, e.seq);
    Some(e)
}

/// Heal the link to beta, then deliver the oldest batch on the wire and ack it until the
/// outbox is empty (bounded): `sent` takes the sender's effects (putting batches on the
/// wire), `got` each batch the receiver took.
pub(super) fn heal_and_drain(
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
pub(super) fn answer(replied: bool) -> RemoteUpdate {
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

pub(super) fn report(t: u64) -> Item {
    Item::Update {
        ticket: TicketId(t),
        update: RemoteUpdate::Transmitted,
    }
}
