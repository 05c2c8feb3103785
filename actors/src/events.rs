//! The event stream: every status change, delivery receipt, ticket change, spawn (with its
//! parent), exit, reap and restart, numbered in order.
//!
//! Owns sequence numbers, a bounded ring of recent events (so a subscriber can replay from a
//! sequence number without a race), and the live broadcast. Must never block a publisher: a
//! slow subscriber loses events and is told how many (tokio broadcast's lag), it never slows
//! the daemon.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;

use crate::clock::SharedClock;
use crate::injector::state::ReceiptState;
use crate::tickets::state::{TicketKind, TicketState};
use crate::types::{DecisionId, MemberName, Millis, MsgId, Party, Role, Status, TicketId};

/// One event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub at: Millis,
    #[serde(flatten)]
    pub kind: EventKind,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    Spawned {
        member: MemberName,
        role: Role,
        slot: Option<String>,
        parent: Party,
        pid: Option<u32>,
        profile: String,
    },
    Adopted {
        member: MemberName,
        pid: Option<u32>,
    },
    Status {
        member: MemberName,
        from: Status,
        to: Status,
        injectable: bool,
        cause: String,
    },
    Exited {
        member: MemberName,
        code: Option<i32>,
        reason: String,
    },
    Reaped {
        member: MemberName,
        idle_ms: Millis,
    },
    Receipt {
        msg: MsgId,
        target: MemberName,
        from: Party,
        ticket: Option<TicketId>,
        state: ReceiptState,
        note: Option<String>,
    },
    Ticket {
        ticket: TicketId,
        kind: TicketKind,
        from: Party,
        to: MemberName,
        state: TicketState,
    },
    Restarted {
        child: String,
        attempt: u32,
        reason: String,
    },
    Escalated {
        reason: String,
    },
    ConfigReloaded {
        ok: bool,
        detail: String,
    },
    /// Lead-to-lead mail from `peer` (envelope number `envelope`, the sender's ticket `their_ticket`) was
    /// handed to this host's lead, as `ticket`.
    MailHanded {
        peer: String,
        envelope: u64,
        their_ticket: TicketId,
        ticket: TicketId,
    },
    /// This host witnessed `peer`'s ledger `origin` up to `size` (persisted, cosigned).
    Witnessed {
        peer: String,
        origin: String,
        size: u64,
    },
    /// `witness` cosigned this host's ledger up to `size`; its cosignature is kept.
    Cosigned {
        witness: String,
        size: u64,
    },
    /// The anchor puller took `anchors` verified anchors from `peer` (pulled at most once per
    /// heartbeat).
    AnchorsPulled {
        peer: String,
        anchors: usize,
    },
    /// The drift protocol raised an alert (a G3 cascade conflict or a G4 disagreement).
    DriftAlert {
        peer: String,
        rule: String,
        text: String,
    },
    /// The daemon signed and appended a line to an identity's drift log.
    DriftLine {
        identity: String,
        /// The line's `type`.
        kind: String,
        tick: u64,
    },
    /// A drift pass finished: every peer's puller evaluated the KB as read at this heartbeat.
    DriftPass {
        /// Peers evaluated.
        peers: usize,
        /// Of which not trusted (conflict, alert, unreadable without cache).
        untrusted: usize,
        /// Pullers that had not answered when the pass's deadline (one heartbeat) ran out.
        late: usize,
        /// From the start of the KB read to the last puller's report (monotonic clock).
        took_us: u64,
        /// The KB could not be read at all: no puller ran, each kept its last report and
        /// cached anchor; the next heartbeat tries again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kb_error: Option<String>,
    },
    /// A peer link came up or went down.
    Link {
        peer: String,
        up: bool,
        /// Why it went down; whether this host dialled it when up.
        detail: String,
    },
    /// An incoming link was refused (an unknown key, a failed hello, a wrong version).
    LinkRefused {
        detail: String,
    },
    /// A decision was opened, recorded on, closed, or a late record was refused.
    Decision {
        decision: DecisionId,
        action: String,
        slot: Option<String>,
        outcome: Option<crate::decision::state::Outcome>,
        /// The ledger entry's seq (none for a refusal or a deadline).
        ledger_seq: Option<u64>,
    },
}

/// The bus. Cheap to share behind an `Arc`.
pub struct EventBus {
    tx: broadcast::Sender<Event>,
    seq: AtomicU64,
    ring: Mutex<VecDeque<Event>>,
    ring_cap: usize,
    clock: SharedClock,
}

impl EventBus {
    pub fn new(clock: SharedClock, ring_cap: usize) -> Self {
        let (tx, _) = broadcast::channel(ring_cap.max(16));
        EventBus {
            tx,
            seq: AtomicU64::new(1),
            ring: Mutex::new(VecDeque::with_capacity(ring_cap)),
            ring_cap,
            clock,
        }
    }

    /// Publish an event; returns its sequence number.
    pub fn emit(&self, kind: EventKind) -> u64 {
        // Sequence numbering and the ring are under one lock so replay + live never reorders.
        let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let seq = self.seq.fetch_add(1, Ordering::SeqCst);
        let ev = Event {
            seq,
            at: self.clock.now(),
            kind,
        };
        tracing::debug!(target: "fleetd::events", seq, event = ?ev.kind);
        if ring.len() == self.ring_cap {
            ring.pop_front();
        }
        ring.push_back(ev.clone());
        let _ = self.tx.send(ev);
        seq
    }

    /// Subscribe: the recent events with `seq > since` (as many as the ring still holds), then a
    /// live receiver that continues exactly after them.
    pub fn subscribe(&self, since: u64) -> (Vec<Event>, broadcast::Receiver<Event>) {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let rx = self.tx.subscribe();
        let past = ring.iter().filter(|e| e.seq > since).cloned().collect();
        (past, rx)
    }

    /// The sequence number the next event will get.
    pub fn next_seq(&self) -> u64 {
        self.seq.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::sync::Arc;

    #[tokio::test]
    async fn replay_then_live_without_gap() {
        let bus = EventBus::new(Arc::new(ManualClock::new(5)), 4);
        for _ in 0..6 {
            bus.emit(EventKind::Escalated { reason: "x".into() });
        }
        let (past, mut rx) = bus.subscribe(3);
        // The ring holds 4: seq 3..=6; since=3 gives 4..=6.
        assert_eq!(
            past.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![4, 5, 6]
        );
        bus.emit(EventKind::Escalated { reason: "y".into() });
        assert_eq!(rx.recv().await.unwrap().seq, 7);
        let j = serde_json::to_value(&past[0]).unwrap();
        assert_eq!(j["type"], "escalated");
        assert_eq!(j["at"], 5);
    }
}
