//! Restart policy: OTP's permanent / transient / temporary, intensity over a period, backoff.
//!
//! Owns the decision "restart this child, after how long, or escalate". Pure: it takes the exit
//! and the time and returns a decision. Must never spawn, sleep, or look at the child itself.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::types::Millis;

/// When a child is restarted (OTP's restart types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Restart {
    /// Always restarted, whatever the exit.
    Permanent,
    /// Restarted only after a failure (a panic or an error), not after a normal stop.
    Transient,
    /// Never restarted.
    Temporary,
}

/// A child's policy: restart type, at most `max_restarts` restarts within `window_ms`, and an
/// exponential backoff between `backoff_initial_ms` and `backoff_max_ms`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    pub restart: Restart,
    pub max_restarts: u32,
    pub window_ms: Millis,
    pub backoff_initial_ms: Millis,
    pub backoff_max_ms: Millis,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            restart: Restart::Permanent,
            max_restarts: 5,
            window_ms: 60_000,
            backoff_initial_ms: 50,
            backoff_max_ms: 2_000,
        }
    }
}

/// How a child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitKind {
    /// It stopped on purpose (asked to stop, or finished).
    Normal,
    /// It panicked or returned an error.
    Failed,
}

/// What the supervisor does next with a child that ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start it again after `delay_ms`; `attempt` counts restarts within the current window.
    Restart { delay_ms: Millis, attempt: u32 },
    /// The restart intensity was exceeded: give up and escalate with this reason.
    Escalate { reason: String },
    /// Leave it stopped.
    Done,
}

/// The restart history of one child under one policy.
#[derive(Clone, Debug)]
pub struct RestartTracker {
    policy: RestartPolicy,
    restarts: VecDeque<Millis>,
}

impl RestartTracker {
    pub fn new(policy: RestartPolicy) -> Self {
        RestartTracker {
            policy,
            restarts: VecDeque::new(),
        }
    }

    pub fn policy(&self) -> &RestartPolicy {
        &self.policy
    }

    /// Restarts counted in the window ending at `now`.
    pub fn recent(&self, now: Millis) -> usize {
        self.restarts
            .iter()
            .filter(|&&t| now.saturating_sub(t) < self.policy.window_ms)
            .count()
    }

    /// Decide what follows the exit of child `who` at `now`.
    pub fn on_exit(&mut self, who: &str, exit: ExitKind, now: Millis) -> Decision {
        let wants_restart = match (self.policy.restart, exit) {
            (Restart::Temporary, _) => false,
            (Restart::Transient, ExitKind::Normal) => false,
            (Restart::Transient, ExitKind::Failed) | (Restart::Permanent, _) => true,
        };
        if !wants_restart {
            return Decision::Done;
        }
        let window = self.policy.window_ms;
        while self
            .restarts
            .front()
            .is_some_and(|&t| now.saturating_sub(t) >= window)
        {
            self.restarts.pop_front();
        }
        let recent = self.restarts.len() as u32;
        if recent >= self.policy.max_restarts {
            return Decision::Escalate {
                reason: format!(
                    "{who} ended ({}) after {recent} restarts within {} s (limit {}); escalating",
                    match exit {
                        ExitKind::Normal => "stopped",
                        ExitKind::Failed => "failed",
                    },
                    window / 1000,
                    self.policy.max_restarts
                ),
            };
        }
        self.restarts.push_back(now);
        // `recent` restarts before this one: the (recent + 1)th failure in the window.
        let delay_ms = crate::backoff::Backoff::new(
            self.policy.backoff_initial_ms,
            self.policy.backoff_max_ms,
        )
        .ceiling(recent.saturating_add(1));
        Decision::Restart {
            delay_ms,
            attempt: recent + 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(restart: Restart, max: u32) -> RestartPolicy {
        RestartPolicy {
            restart,
            max_restarts: max,
            window_ms: 10_000,
            backoff_initial_ms: 10,
            backoff_max_ms: 80,
        }
    }

    #[test]
    fn restart_types() {
        let cases = [
            (Restart::Permanent, ExitKind::Normal, true),
            (Restart::Permanent, ExitKind::Failed, true),
            (Restart::Transient, ExitKind::Normal, false),
            (Restart::Transient, ExitKind::Failed, true),
            (Restart::Temporary, ExitKind::Normal, false),
            (Restart::Temporary, ExitKind::Failed, false),
        ];
        for (r, e, restarts) in cases {
            let mut t = RestartTracker::new(policy(r, 3));
            let d = t.on_exit("c", e, 0);
            assert_eq!(
                matches!(d, Decision::Restart { .. }),
                restarts,
                "{r:?} {e:?}"
            );
        }
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut t = RestartTracker::new(policy(Restart::Permanent, 10));
        let delays: Vec<_> = (0..6)
            .map(|i| match t.on_exit("c", ExitKind::Failed, i) {
                Decision::Restart { delay_ms, .. } => delay_ms,
                d => panic!("{d:?}"),
            })
            .collect();
        assert_eq!(delays, vec![10, 20, 40, 80, 80, 80]);
    }

    #[test]
    fn escalates_past_intensity_and_recovers_after_window() {
        let mut t = RestartTracker::new(policy(Restart::Permanent, 3));
        for i in 0..3 {
            assert!(matches!(
                t.on_exit("slot:w1", ExitKind::Failed, i * 100),
                Decision::Restart { .. }
            ));
        }
        match t.on_exit("slot:w1", ExitKind::Failed, 400) {
            Decision::Escalate { reason } => {
                assert!(reason.contains("slot:w1"));
                assert!(reason.contains("limit 3"));
            }
            d => panic!("{d:?}"),
        }
        // Once the window has passed, the child may be restarted again.
        let mut t = RestartTracker::new(policy(Restart::Permanent, 3));
        for i in 0..3 {
            t.on_exit("c", ExitKind::Failed, i);
        }
        assert!(matches!(
            t.on_exit("c", ExitKind::Failed, 10_005),
            Decision::Restart { .. }
        ));
    }

    proptest! {
        /// For any sequence of failures, no window of `window_ms` ever holds more than
        /// `max_restarts` restarts, and escalation happens exactly when one more would.
        #[test]
        fn never_more_than_max_in_any_window(
            max in 1u32..6,
            gaps in proptest::collection::vec(0u64..6_000, 1..60),
        ) {
            let p = policy(Restart::Permanent, max);
            let mut t = RestartTracker::new(p.clone());
            let mut now = 0;
            let mut restarted_at: Vec<u64> = vec![];
            for g in gaps {
                now += g;
                let in_window = restarted_at.iter().filter(|&&r| now - r < p.window_ms).count() as u32;
                match t.on_exit("c", ExitKind::Failed, now) {
                    Decision::Restart { delay_ms, .. } => {
                        prop_assert!(in_window < max);
                        prop_assert!(delay_ms <= p.backoff_max_ms);
                        restarted_at.push(now);
                    }
                    Decision::Escalate { .. } => {
                        prop_assert_eq!(in_window, max);
                        break;
                    }
                    Decision::Done => prop_assert!(false, "permanent child left stopped"),
                }
            }
        }
    }
}
