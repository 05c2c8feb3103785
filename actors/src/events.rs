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

use tokio::sync::broadcast;

use crate::clock::SharedClock;

pub use fleetd_core::events::{Event, EventKind};

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
