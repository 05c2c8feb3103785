//! The drift alerts a daemon keeps, and the rule that raises each alert once.
//!
//! Owns two bounds: the log keeps the latest `max_kept` alerts (the oldest go first), and the
//! set of alerts already raised in this run, by (peer, text), holds at most `max_raised` (the
//! oldest forgotten first; a conflict still reported after ten thousand newer distinct alerts is
//! raised once more, never at every heartbeat). Pure: no clock, no lock, no I/O; the shell
//! (`drift::service::DriftState`) holds it behind a mutex.

use std::collections::{HashSet, VecDeque};

use serde::Serialize;

use crate::types::Millis;

/// An alert raised by the drift protocol.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Alert {
    pub at: Millis,
    pub peer: String,
    /// `G3` (a cascade conflict), `G4` (self-consistency) or `WITNESS`.
    pub rule: String,
    pub text: String,
}

/// Alerts kept by default.
pub const MAX_KEPT: usize = 1_000;
/// Distinct raised alerts remembered by default.
pub const MAX_RAISED: usize = 10_000;

#[derive(Debug)]
pub struct AlertLog {
    kept: VecDeque<Alert>,
    max_kept: usize,
    raised: HashSet<(String, String)>,
    order: VecDeque<(String, String)>,
    max_raised: usize,
}

impl Default for AlertLog {
    fn default() -> Self {
        AlertLog::new(MAX_KEPT, MAX_RAISED)
    }
}

impl AlertLog {
    pub fn new(max_kept: usize, max_raised: usize) -> AlertLog {
        AlertLog {
            kept: VecDeque::new(),
            max_kept: max_kept.max(1),
            raised: HashSet::new(),
            order: VecDeque::new(),
            max_raised: max_raised.max(1),
        }
    }

    /// Whether `(peer, text)` is raised now: true the first time, false while it is remembered.
    pub fn first_raise(&mut self, peer: &str, text: &str) -> bool {
        let key = (peer.to_string(), text.to_string());
        if self.raised.contains(&key) {
            return false;
        }
        if self.order.len() == self.max_raised
            && let Some(old) = self.order.pop_front()
        {
            self.raised.remove(&old);
        }
        self.raised.insert(key.clone());
        self.order.push_back(key);
        true
    }

    /// Keep an alert (the oldest goes when the log is full).
    pub fn push(&mut self, a: Alert) {
        if self.kept.len() == self.max_kept {
            self.kept.pop_front();
        }
        self.kept.push_back(a);
    }

    /// The kept alerts, oldest first.
    pub fn alerts(&self) -> Vec<Alert> {
        self.kept.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn alert(n: u64) -> Alert {
        Alert {
            at: n,
            peer: "p".into(),
            rule: "G3".into(),
            text: format!("conflict {n}"),
        }
    }

    #[test]
    fn an_alert_is_raised_once_and_the_log_keeps_the_latest() {
        let mut log = AlertLog::new(3, 10);
        assert!(log.first_raise("libra", "G3 conflict: x"));
        assert!(!log.first_raise("libra", "G3 conflict: x"));
        // The same text about another peer is another alert.
        assert!(log.first_raise("echo", "G3 conflict: x"));
        for n in 0..5 {
            log.push(alert(n));
        }
        let at: Vec<u64> = log.alerts().iter().map(|a| a.at).collect();
        assert_eq!(at, [2, 3, 4]);
    }

    #[test]
    fn the_oldest_raised_alert_is_forgotten_first() {
        let mut log = AlertLog::new(10, 2);
        assert!(log.first_raise("p", "a"));
        assert!(log.first_raise("p", "b"));
        // A third forgets "a", which is then raised again; "b" and "c" stay remembered.
        assert!(log.first_raise("p", "c"));
        assert!(log.first_raise("p", "a"));
        assert!(!log.first_raise("p", "c"));
    }

    proptest! {
        /// Whatever is raised, the memory stays within its bounds, and an alert raised just now
        /// is never raised again at once.
        #[test]
        fn the_log_stays_bounded(keys in proptest::collection::vec((0u8..4, 0u16..50), 0..400)) {
            let mut log = AlertLog::new(5, 16);
            for (i, (p, t)) in keys.iter().enumerate() {
                let (peer, text) = (p.to_string(), t.to_string());
                if log.first_raise(&peer, &text) {
                    prop_assert!(!log.first_raise(&peer, &text));
                }
                log.push(alert(i as u64));
                prop_assert!(log.raised.len() <= 16 && log.order.len() == log.raised.len());
                prop_assert!(log.alerts().len() <= 5);
            }
        }
    }
}
