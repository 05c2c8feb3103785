//! One peer link's state machine: dial, up, lost, back off with jitter, redial; and which of two
//! simultaneous connections survives.
//!
//! Owns the rules only: when to dial, how long to wait (exponential backoff with full jitter from
//! a seeded generator, so tests are deterministic), and the duplicate rule (both hosts keep the
//! connection dialled by the host whose public key sorts lower, whatever order they see them
//! in). Pure: events and the time in, effects out. Must never touch a socket or a clock.

use serde::Serialize;

use crate::types::Millis;

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Start dialling the peer (the result comes back as `DialOk` or `DialFailed`).
    Dial,
    /// Wake the core (a `Tick`) at this time.
    Arm(Millis),
    /// Keep the new connection `id`; close the one that was current (if any).
    UseNew { id: u64, close: Option<u64> },
    /// Close the new connection `id` (a duplicate that loses the tie).
    DropNew { id: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Down,
    Dialing,
    Up,
}

/// What `fleetd peers` shows of a link.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LinkView {
    pub peer: String,
    pub addr: String,
    pub phase: Phase,
    /// Since when the link has been in this phase.
    pub since: Millis,
    /// Why it is down (the last error), if it is.
    pub reason: Option<String>,
    /// Whether this host dialled the current connection.
    pub dialled: Option<bool>,
    /// The last round-trip time measured on the link.
    pub rtt_us: Option<u64>,
    /// Failed attempts since it was last up.
    pub attempts: u32,
    /// When the next dial is due, while down.
    pub retry_at: Option<Millis>,
}

pub use crate::backoff::Backoff;
use crate::backoff::Jitter;

pub struct LinkCore {
    view: LinkView,
    /// This host's public key sorts lower than the peer's.
    me_lower: bool,
    backoff: Backoff,
    current: Option<(u64, bool)>,
    jitter: Jitter,
    /// A dial of ours is under way (its result will come back).
    dial_in_flight: bool,
    /// Waiting for the connection the peer kept after closing ours as a duplicate, until then.
    expect_until: Option<Millis>,
}

/// How long to wait for the connection a peer kept, after it closed ours as a duplicate.
pub const EXPECT_KEPT_MS: Millis = 10_000;

impl LinkCore {
    /// A link to `peer`, down until the first `Tick` dials it.
    pub fn new(
        peer: &str,
        addr: &str,
        my_key: &[u8; 32],
        peer_key: &[u8; 32],
        backoff: Backoff,
        now: Millis,
    ) -> LinkCore {
        LinkCore {
            view: LinkView {
                peer: peer.to_string(),
                addr: addr.to_string(),
                phase: Phase::Down,
                since: now,
                reason: Some("not dialled yet".into()),
                dialled: None,
                rtt_us: None,
                attempts: 0,
                retry_at: Some(now),
            },
            me_lower: my_key < peer_key,
            backoff,
            current: None,
            jitter: Jitter::seeded(peer.bytes().chain(my_key.iter().copied())),
            dial_in_flight: false,
            expect_until: None,
        }
    }

    pub fn view(&self) -> &LinkView {
        &self.view
    }

    /// The connection in use, if the link is up.
    pub fn current(&self) -> Option<u64> {
        self.current.map(|(id, _)| id)
    }

    /// The delay before the next dial after `attempts` failures: full jitter, uniformly random
    /// in [1, ceiling], where the ceiling doubles from `min_ms` up to `max_ms`.
    fn delay(&mut self) -> Millis {
        self.backoff
            .full_jitter(self.view.attempts, &mut self.jitter)
    }

    fn down(&mut self, now: Millis, why: String) -> Vec<Effect> {
        self.view.attempts = self.view.attempts.saturating_add(1);
        let at = now + self.delay();
        self.current = None;
        self.view.phase = Phase::Down;
        self.view.since = now;
        self.view.reason = Some(why);
        self.view.dialled = None;
        self.view.retry_at = Some(at);
        vec![Effect::Arm(at)]
    }

    /// When the core next needs a `Tick` (besides the shell's own keep-alive sampling).
    pub fn wake_at(&self) -> Option<Millis> {
        match self.view.phase {
            Phase::Down => self.view.retry_at,
            Phase::Dialing => self.expect_until,
            Phase::Up => None,
        }
    }

    fn up(&mut self, now: Millis, id: u64, dialled: bool) -> Vec<Effect> {
        self.expect_until = None;
        let close = self.current.map(|(c, _)| c);
        if self.view.phase != Phase::Up {
            self.view.since = now;
        }
        self.current = Some((id, dialled));
        self.view.phase = Phase::Up;
        self.view.reason = None;
        self.view.dialled = Some(dialled);
        self.view.attempts = 0;
        self.view.retry_at = None;
        vec![Effect::UseNew { id, close }]
    }

    /// A connection `id` was established (`dialled` by this host or accepted from the peer).
    fn connected(&mut self, now: Millis, id: u64, dialled: bool) -> Vec<Effect> {
        match self.current {
            None => self.up(now, id, dialled),
            // The same direction again (a redial that raced a loss): the newer one replaces it.
            Some((_, cur_dialled)) if cur_dialled == dialled => self.up(now, id, dialled),
            // One each way: keep the one dialled by the lower key; both hosts agree on which.
            Some(_) if dialled == self.me_lower => self.up(now, id, dialled),
            Some(_) => vec![Effect::DropNew { id }],
        }
    }

    /// The time passed: dial when due.
    pub fn tick(&mut self, now: Millis) -> Vec<Effect> {
        match self.view.phase {
            Phase::Down if self.view.retry_at.is_none_or(|t| now >= t) => {
                self.view.phase = Phase::Dialing;
                self.view.since = now;
                self.view.retry_at = None;
                self.dial_in_flight = true;
                vec![Effect::Dial]
            }
            Phase::Dialing if self.expect_until.is_some_and(|t| now >= t) => {
                self.expect_until = None;
                self.down(
                    now,
                    "the peer closed ours as a duplicate, and the connection it kept never arrived"
                        .into(),
                )
            }
            Phase::Down => self.view.retry_at.map(Effect::Arm).into_iter().collect(),
            _ => vec![],
        }
    }

    pub fn dial_ok(&mut self, now: Millis, id: u64) -> Vec<Effect> {
        self.dial_in_flight = false;
        self.connected(now, id, true)
    }

    pub fn dial_failed(&mut self, now: Millis, why: String) -> Vec<Effect> {
        self.dial_in_flight = false;
        match self.view.phase {
            // Our dial failed while we wait for the connection the peer kept: keep waiting.
            Phase::Dialing if self.expect_until.is_some() => vec![],
            Phase::Dialing => self.down(now, why),
            // Up meanwhile through an incoming connection: nothing lost.
            _ => vec![],
        }
    }

    pub fn incoming(&mut self, now: Millis, id: u64) -> Vec<Effect> {
        self.connected(now, id, false)
    }

    /// Connection `id` closed. Only the current one takes the link down.
    pub fn lost(&mut self, now: Millis, id: u64, why: String) -> Vec<Effect> {
        if self.current() == Some(id) {
            self.down(now, why)
        } else {
            vec![]
        }
    }

    /// The peer closed connection `id` as the losing duplicate of a simultaneous dial. It kept
    /// the other one, which reaches this host as its own dial's result or as an incoming
    /// connection: wait for it (dialing; bounded) instead of going down, so the link does not
    /// flap.
    pub fn lost_as_duplicate(&mut self, now: Millis, id: u64) -> Vec<Effect> {
        if self.current() != Some(id) {
            return vec![];
        }
        self.current = None;
        self.view.phase = Phase::Dialing;
        self.view.dialled = None;
        self.view.reason = Some("the peer closed ours as a simultaneous-dial duplicate".into());
        if self.dial_in_flight {
            // Ours is the one it kept: its result is on the way.
            vec![]
        } else {
            // It kept one it dialled: wait (bounded) for it to arrive.
            let at = now + EXPECT_KEPT_MS;
            self.expect_until = Some(at);
            vec![Effect::Arm(at)]
        }
    }

    pub fn rtt(&mut self, id: u64, rtt_us: u64) {
        if self.current() == Some(id) {
            self.view.rtt_us = Some(rtt_us);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn core(me: u8, peer: u8) -> LinkCore {
        LinkCore::new(
            "b",
            "127.0.0.2:7801",
            &[me; 32],
            &[peer; 32],
            Backoff {
                min_ms: 200,
                max_ms: 30_000,
            },
            0,
        )
    }

    #[test]
    fn dials_at_once_then_backs_off_with_jitter_and_caps() {
        let mut c = core(1, 2);
        assert_eq!(c.tick(0), vec![Effect::Dial]);
        assert_eq!(c.view().phase, Phase::Dialing);
        let mut now = 0;
        let mut ceilings = vec![];
        for i in 1..=12u32 {
            let e = c.dial_failed(now, "refused".into());
            let Effect::Arm(at) = e[0] else {
                panic!("{e:?}")
            };
            let d = at - now;
            let ceiling = (200u64 << (i - 1).min(32)).min(30_000);
            assert!(
                d >= 1 && d <= ceiling,
                "attempt {i}: {d} ms, ceiling {ceiling}"
            );
            ceilings.push(ceiling);
            assert_eq!(c.view().attempts, i);
            // Not before it is due.
            assert_eq!(c.tick(at - 1), vec![Effect::Arm(at)]);
            assert_eq!(c.tick(at), vec![Effect::Dial]);
            now = at;
        }
        assert_eq!(*ceilings.last().unwrap(), 30_000);
        // Up again resets the count.
        assert_eq!(
            c.dial_ok(now, 7),
            vec![Effect::UseNew { id: 7, close: None }]
        );
        assert_eq!(c.view().attempts, 0);
        assert_eq!(c.view().phase, Phase::Up);
    }

    #[test]
    fn jitter_spreads_two_hosts_apart() {
        let mut a = LinkCore::new(
            "x",
            "",
            &[1; 32],
            &[9; 32],
            Backoff {
                min_ms: 1000,
                max_ms: 60_000,
            },
            0,
        );
        let mut b = LinkCore::new(
            "y",
            "",
            &[2; 32],
            &[9; 32],
            Backoff {
                min_ms: 1000,
                max_ms: 60_000,
            },
            0,
        );
        let mut same = 0;
        for _ in 0..20 {
            a.tick(u64::MAX / 2);
            b.tick(u64::MAX / 2);
            let (ea, eb) = (a.dial_failed(0, "x".into()), b.dial_failed(0, "x".into()));
            if ea == eb {
                same += 1;
            }
        }
        assert!(same < 5, "{same} of 20 retries coincided");
    }

    #[test]
    fn a_duplicate_close_while_our_dial_is_in_flight_does_not_take_the_link_down() {
        // Lower key: the connection this host dials wins.
        let mut c = core(1, 2);
        assert_eq!(c.tick(0), vec![Effect::Dial]);
        // The peer's dial arrives first and is used...
        assert_eq!(
            c.incoming(1, 20),
            vec![Effect::UseNew {
                id: 20,
                close: None
            }]
        );
        // ...then the peer, having seen ours, closes its own as the duplicate.
        assert!(c.lost_as_duplicate(2, 20).is_empty());
        assert_eq!(c.view().phase, Phase::Dialing);
        assert_eq!(c.view().attempts, 0);
        // Our dial lands: up, never down in between.
        assert_eq!(
            c.dial_ok(3, 10),
            vec![Effect::UseNew {
                id: 10,
                close: None
            }]
        );
        assert_eq!(c.view().phase, Phase::Up);
        // Had it failed, the link goes down with a backoff like any failed dial.
        let mut c = core(1, 2);
        c.tick(0);
        c.incoming(1, 20);
        c.lost_as_duplicate(2, 20);
        assert!(matches!(
            c.dial_failed(3, "refused".into())[0],
            Effect::Arm(_)
        ));
        assert_eq!(c.view().phase, Phase::Down);
        // Higher key, our dial already done: the peer kept its own, which arrives as incoming;
        // if it never does, the wait is bounded.
        let mut c = core(2, 1);
        c.tick(0);
        c.dial_ok(1, 10);
        assert_eq!(
            c.lost_as_duplicate(2, 10),
            vec![Effect::Arm(2 + EXPECT_KEPT_MS)]
        );
        assert_eq!(c.wake_at(), Some(2 + EXPECT_KEPT_MS));
        assert_eq!(
            c.incoming(3, 20),
            vec![Effect::UseNew {
                id: 20,
                close: None
            }]
        );
        assert_eq!(c.view().phase, Phase::Up);
        let mut c = core(2, 1);
        c.tick(0);
        c.dial_ok(1, 10);
        c.lost_as_duplicate(2, 10);
        assert!(c.tick(2 + EXPECT_KEPT_MS - 1).is_empty());
        assert!(matches!(c.tick(2 + EXPECT_KEPT_MS)[0], Effect::Arm(_)));
        assert_eq!(c.view().phase, Phase::Down);
    }

    #[test]
    fn only_the_current_connection_takes_the_link_down() {
        let mut c = core(1, 2);
        c.tick(0);
        c.dial_ok(1, 10);
        assert!(c.lost(2, 99, "old".into()).is_empty());
        assert_eq!(c.view().phase, Phase::Up);
        let e = c.lost(3, 10, "idle timeout".into());
        assert!(matches!(e[0], Effect::Arm(_)));
        assert_eq!(c.view().phase, Phase::Down);
        assert_eq!(c.view().reason.as_deref(), Some("idle timeout"));
    }

    /// Simulate two hosts that dial each other at once and see the two connections in either
    /// order: both keep the same one (the one dialled by the lower key).
    fn survivor(
        a_key: u8,
        b_key: u8,
        a_sees_own_first: bool,
        b_sees_own_first: bool,
    ) -> (u64, u64) {
        // Connection 1 is dialled by A, connection 2 by B.
        let mut a = LinkCore::new(
            "b",
            "",
            &[a_key; 32],
            &[b_key; 32],
            Backoff {
                min_ms: 100,
                max_ms: 1000,
            },
            0,
        );
        let mut b = LinkCore::new(
            "a",
            "",
            &[b_key; 32],
            &[a_key; 32],
            Backoff {
                min_ms: 100,
                max_ms: 1000,
            },
            0,
        );
        a.tick(0);
        b.tick(0);
        if a_sees_own_first {
            a.dial_ok(1, 1);
            a.incoming(2, 2);
        } else {
            a.incoming(1, 2);
            a.dial_ok(2, 1);
        }
        if b_sees_own_first {
            b.dial_ok(1, 2);
            b.incoming(2, 1);
        } else {
            b.incoming(1, 1);
            b.dial_ok(2, 2);
        }
        (a.current().unwrap(), b.current().unwrap())
    }

    #[test]
    fn simultaneous_dials_resolve_to_one_connection() {
        for (ak, bk, expect) in [(1u8, 2u8, 1u64), (2, 1, 2)] {
            for x in [true, false] {
                for y in [true, false] {
                    assert_eq!(
                        survivor(ak, bk, x, y),
                        (expect, expect),
                        "keys {ak}/{bk}, orders {x}/{y}"
                    );
                }
            }
        }
    }

    proptest! {
        #[test]
        fn never_arms_beyond_the_cap_and_the_view_stays_consistent(
            ops in proptest::collection::vec((0u8..5, 0u64..5, 1u64..5_000), 1..200)
        ) {
            let mut c = core(3, 4);
            let mut now = 0u64;
            for (op, id, dt) in ops {
                now += dt;
                let effects = match op {
                    0 => c.tick(now),
                    1 => c.dial_ok(now, id),
                    2 => c.dial_failed(now, "x".into()),
                    3 => c.incoming(now, id),
                    4 if id % 2 == 0 => c.lost_as_duplicate(now, id),
                    _ => c.lost(now, id, "y".into()),
                };
                for e in &effects {
                    if let Effect::Arm(at) = e {
                        prop_assert!(*at >= now && *at - now <= 30_000);
                    }
                }
                let v = c.view();
                prop_assert_eq!(v.phase == Phase::Up, c.current().is_some());
                prop_assert_eq!(v.phase == Phase::Down, v.retry_at.is_some());
                prop_assert_eq!(v.phase == Phase::Up, v.reason.is_none());
            }
        }
    }
}
