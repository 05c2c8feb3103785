//! The decision core: `fleet_decision` as a deterministic procedure around non-deterministic
//! judgments (the seed's lead-quorum design, option C: presence quorum).
//!
//! Owns the rules: who may open, record and close (the Authz rows DECIDE and POSITION), which
//! slots a decision convened, rounds (each slot's next, never above `max_rounds`), the deadline
//! (fixed by the daemon's clock at open; a `timeout` outcome only once that clock has passed it;
//! nothing is recorded after it), completeness at close, and the outcome rule:
//!
//! - `quorate`: every convened slot answered (its last record is a position or an abstain) and at
//!   least one of them is a real position;
//! - `degraded`: otherwise (any slot timed out, or every slot abstained).
//!
//! Pure: it checks and replays; the shell writes the ledger. Must never read a verdict for
//! meaning, never close a decision on its own, never decide who wins.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::authz::{Action, authorize};
use crate::error::{ErrorKind, FleetError};
use crate::ledger::state::{Author, Entry};
use crate::types::{Caller, DecisionId, Millis, Role};

pub use crate::decision::event::{DecisionEvent, Outcome, SlotOutcome, SlotResult};

/// A position or abstain as recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    pub slot: String,
    pub member: String,
    pub round: u32,
    pub kind: SlotResult,
    pub content: String,
    pub at: String,
}

/// A refused late record, kept visible.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub slot: Option<String>,
    pub member: String,
    pub round: u32,
    pub at: Millis,
    pub why: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closed {
    pub seq: u64,
    pub outcome: Outcome,
    pub slots: Vec<SlotOutcome>,
    pub verdict: String,
    pub rationale: String,
    pub by: String,
    pub at: String,
}

/// One decision, as replayed from the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub id: DecisionId,
    pub subject: String,
    pub slots: Vec<String>,
    pub deadline: String,
    pub deadline_ms: Millis,
    pub max_rounds: u32,
    pub opened_by: String,
    pub opened_at: String,
    pub opened_ms: Millis,
    /// The ledger entry that opened it.
    #[serde(default)]
    pub opened_seq: u64,
    pub records: Vec<Record>,
    pub closed: Option<Closed>,
    pub refused: Vec<Refused>,
}

/// Limits on what `open` accepts.
pub const MAX_ROUNDS_CAP: u32 = 10;
pub const MAX_SUBJECT: usize = 2_000;
pub const MAX_CONTENT: usize = 64 * 1024;
pub const MAX_DEADLINE_MS: Millis = 30 * 24 * 3600 * 1000;

fn parse_ts(s: &str) -> Option<Millis> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.timestamp_millis().max(0) as Millis)
}

/// DECIDE ([`crate::authz`]): the primary opens and closes decisions; the entry's author.
pub fn authorize_decide(caller: &Caller, what: &str) -> Result<Author, FleetError> {
    authorize(caller, &Action::Decide, what)?;
    author(caller, what)
}

/// POSITION ([`crate::authz`]): an architect bound to a slot records positions; the entry's
/// author and the slot, which comes from the connection.
pub fn authorize_position(caller: &Caller, what: &str) -> Result<(Author, String), FleetError> {
    authorize(caller, &Action::Position, what)?;
    let a = author(caller, what)?;
    let slot = a
        .slot
        .clone()
        .ok_or_else(|| FleetError::internal(what, "an authorized position has no slot"))?;
    Ok((a, slot))
}

/// The author of an entry written for an authorized member.
fn author(caller: &Caller, what: &str) -> Result<Author, FleetError> {
    match caller {
        Caller::Member(m) => Ok(Author {
            member: m.name.to_string(),
            role: m.role.to_string(),
            slot: (m.role == Role::Architect)
                .then(|| m.slot.clone())
                .flatten(),
        }),
        _ => Err(FleetError::internal(
            what,
            "an authorized entry has no member",
        )),
    }
}

/// Check an `open` before it is written.
pub fn validate_open(
    subject: &str,
    slots: &[String],
    configured: &[String],
    deadline_ms: Millis,
    max_rounds: u32,
    now: Millis,
) -> Result<(), FleetError> {
    let what = "fleet_decision open";
    if subject.trim().is_empty() || subject.len() > MAX_SUBJECT {
        return Err(FleetError::invalid(
            what,
            "the subject is empty or too long",
            format!("a subject of 1-{MAX_SUBJECT} bytes"),
        ));
    }
    if slots.is_empty() {
        return Err(FleetError::invalid(
            what,
            "no slots were convened",
            format!(
                "one or more of the configured architect slots: {}",
                configured.join(", ")
            ),
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in slots {
        if !configured.contains(s) {
            return Err(FleetError::invalid(
                what,
                format!("`{s}` is not a configured architect slot"),
                format!("slots from: {}", configured.join(", ")),
            ));
        }
        if !seen.insert(s) {
            return Err(FleetError::invalid(
                what,
                format!("slot `{s}` is convened twice"),
                "each slot once",
            ));
        }
    }
    if max_rounds == 0 || max_rounds > MAX_ROUNDS_CAP {
        return Err(FleetError::invalid(
            what,
            format!("max_rounds {max_rounds} is out of range"),
            format!("1 to {MAX_ROUNDS_CAP} (default 2)"),
        ));
    }
    if deadline_ms <= now {
        return Err(FleetError::invalid(
            what,
            "the deadline is not in the future",
            "an RFC 3339 time after now, or deadline_secs > 0",
        ));
    }
    if deadline_ms - now > MAX_DEADLINE_MS {
        return Err(FleetError::invalid(
            what,
            "the deadline is more than 30 days away",
            "a deadline within 30 days",
        ));
    }
    Ok(())
}

impl Decision {
    /// Start a decision from its `open` entry.
    pub fn opened(e: &Entry) -> Option<Decision> {
        let DecisionEvent::Open {
            decision,
            subject,
            slots,
            deadline,
            max_rounds,
        } = &e.event
        else {
            return None;
        };
        Some(Decision {
            id: *decision,
            subject: subject.clone(),
            slots: slots.clone(),
            deadline: deadline.clone(),
            deadline_ms: parse_ts(deadline).unwrap_or(0),
            max_rounds: *max_rounds,
            opened_by: e.actor.member.clone(),
            opened_at: e.ts.clone(),
            opened_ms: parse_ts(&e.ts).unwrap_or(0),
            opened_seq: e.seq,
            records: vec![],
            closed: None,
            refused: vec![],
        })
    }

    pub fn is_open(&self) -> bool {
        self.closed.is_none()
    }

    /// The last round `slot` recorded (0 if none).
    pub fn last_round(&self, slot: &str) -> u32 {
        self.records
            .iter()
            .filter(|r| r.slot == slot)
            .map(|r| r.round)
            .max()
            .unwrap_or(0)
    }

    /// The record that stands for `slot`: its last.
    pub fn standing(&self, slot: &str) -> Option<&Record> {
        self.records.iter().rev().find(|r| r.slot == slot)
    }

    /// Slots with no record yet.
    pub fn missing(&self) -> Vec<String> {
        self.slots
            .iter()
            .filter(|s| self.standing(s).is_none())
            .cloned()
            .collect()
    }

    /// May `slot` record round `round` now? The refusal says why not.
    pub fn check_record(
        &self,
        slot: &str,
        round: u32,
        content: &str,
        now: Millis,
    ) -> Result<(), FleetError> {
        let what = format!("fleet_decision position on {}", self.id);
        if let Some(c) = &self.closed {
            return Err(FleetError::conflict(
                what,
                format!("{} was closed at {} ({:?})", self.id, c.at, c.outcome),
                "a position on an open decision",
            ));
        }
        if !self.slots.iter().any(|s| s == slot) {
            return Err(FleetError::new(
                ErrorKind::Forbidden,
                what,
                format!(
                    "{} did not convene slot `{slot}` (it convened {})",
                    self.id,
                    self.slots.join(", ")
                ),
                "a position on a decision that convened your slot",
            )
            .with_rule("POSITION"));
        }
        if now > self.deadline_ms {
            let why = if self.standing(slot).is_none() {
                format!(
                    "slot `{slot}` timed out: the deadline {} has passed without a record from it",
                    self.deadline
                )
            } else {
                format!(
                    "the deadline {} has passed; nothing more is recorded on {}",
                    self.deadline, self.id
                )
            };
            return Err(FleetError::new(
                ErrorKind::Late,
                what,
                why,
                "a record before the deadline; the lead may reopen with a fresh deadline",
            ));
        }
        if round == 0 || round > self.max_rounds {
            return Err(FleetError::invalid(
                what,
                format!("round {round} is outside 1..={}", self.max_rounds),
                format!("a round from 1 to max_rounds = {}", self.max_rounds),
            ));
        }
        let next = self.last_round(slot) + 1;
        if round != next {
            return Err(FleetError::invalid(
                what,
                format!(
                    "slot `{slot}` is at round {}; round {round} is not its next",
                    next - 1
                ),
                format!("round {next}"),
            ));
        }
        if content.trim().is_empty() || content.len() > MAX_CONTENT {
            return Err(FleetError::invalid(
                what,
                "the content is empty or too long",
                format!("1-{MAX_CONTENT} bytes of position or reason"),
            ));
        }
        Ok(())
    }

    /// May the decision close now? Returns the outcome and each slot's terminal outcome.
    pub fn check_close(&self, now: Millis) -> Result<(Outcome, Vec<SlotOutcome>), FleetError> {
        let what = format!("fleet_decision close of {}", self.id);
        if self.closed.is_some() {
            return Err(FleetError::conflict(
                what,
                format!("{} is already closed", self.id),
                "a close of an open decision",
            ));
        }
        let past_deadline = now > self.deadline_ms;
        let mut out = vec![];
        let mut waiting = vec![];
        for s in &self.slots {
            match self.standing(s) {
                Some(r) => out.push(SlotOutcome {
                    slot: s.clone(),
                    outcome: r.kind,
                    round: Some(r.round),
                }),
                None if past_deadline => out.push(SlotOutcome {
                    slot: s.clone(),
                    outcome: SlotResult::Timeout,
                    round: None,
                }),
                None => waiting.push(s.clone()),
            }
        }
        if !waiting.is_empty() {
            return Err(FleetError::conflict(
                what,
                format!(
                    "{} has no terminal outcome yet for slot(s) {}: no position or abstain, and the deadline {} has not passed (a timeout is granted only after it, by the daemon's clock)",
                    self.id,
                    waiting.join(", "),
                    self.deadline
                ),
                format!(
                    "a close once every convened slot has recorded, or after {}",
                    self.deadline
                ),
            ));
        }
        Ok((outcome_of(&out), out))
    }

    /// Apply an accepted entry (replay and live).
    pub fn apply(&mut self, e: &Entry) {
        match &e.event {
            DecisionEvent::Position {
                slot,
                round,
                content,
                ..
            }
            | DecisionEvent::Abstain {
                slot,
                round,
                content,
                ..
            } => {
                self.records.push(Record {
                    seq: e.seq,
                    slot: slot.clone(),
                    member: e.actor.member.clone(),
                    round: *round,
                    kind: if matches!(e.event, DecisionEvent::Position { .. }) {
                        SlotResult::Position
                    } else {
                        SlotResult::Abstain
                    },
                    content: content.clone(),
                    at: e.ts.clone(),
                });
            }
            DecisionEvent::Close {
                outcome,
                slots,
                verdict,
                rationale,
                ..
            } => {
                self.closed = Some(Closed {
                    seq: e.seq,
                    outcome: *outcome,
                    slots: slots.clone(),
                    verdict: verdict.clone(),
                    rationale: rationale.clone(),
                    by: e.actor.member.clone(),
                    at: e.ts.clone(),
                });
            }
            DecisionEvent::Open { .. } => {}
        }
    }
}

/// The outcome rule: quorate iff no slot timed out and at least one real position stands.
pub fn outcome_of(slots: &[SlotOutcome]) -> Outcome {
    let any_timeout = slots.iter().any(|s| s.outcome == SlotResult::Timeout);
    let any_position = slots.iter().any(|s| s.outcome == SlotResult::Position);
    if !any_timeout && any_position {
        Outcome::Quorate
    } else {
        Outcome::Degraded
    }
}

/// Replay a ledger's entries into decisions.
pub fn replay(entries: &[Entry]) -> BTreeMap<DecisionId, Decision> {
    let mut out = BTreeMap::new();
    for e in entries {
        match &e.event {
            DecisionEvent::Open { decision, .. } => {
                if let Some(d) = Decision::opened(e) {
                    out.insert(*decision, d);
                }
            }
            other => {
                if let Some(d) = out.get_mut(&other.decision()) {
                    d.apply(e);
                }
            }
        }
    }
    out
}

/// Every decision as the ledger records them (with the refusals kept beside it), and the next
/// decision id. The ledger writer owns it: it allocates each `open`'s id and applies each entry
/// once the entry is synced, so the board never shows what the file does not hold.
#[derive(Clone, Debug, Default)]
pub struct Board {
    decisions: BTreeMap<DecisionId, Decision>,
    next: u64,
}

impl Board {
    /// The board of a ledger's entries, with the refusals the store kept.
    pub fn replay(entries: &[Entry], refused: Vec<(DecisionId, Vec<Refused>)>) -> Board {
        let mut decisions = replay(entries);
        for (id, r) in refused {
            if let Some(d) = decisions.get_mut(&id) {
                d.refused = r;
            }
        }
        let next = decisions.keys().map(|d| d.0).max().unwrap_or(0) + 1;
        Board { decisions, next }
    }

    /// The id of the next decision opened (never one the ledger holds or has handed out).
    pub fn allocate(&mut self) -> DecisionId {
        let id = DecisionId(self.next.max(1));
        self.next = id.0 + 1;
        id
    }

    /// Apply one synced entry.
    pub fn apply(&mut self, e: &Entry) {
        match &e.event {
            DecisionEvent::Open { decision, .. } => {
                if let Some(d) = Decision::opened(e) {
                    self.next = self.next.max(decision.0 + 1);
                    self.decisions.insert(*decision, d);
                }
            }
            other => {
                if let Some(d) = self.decisions.get_mut(&other.decision()) {
                    d.apply(e);
                }
            }
        }
    }

    /// The refusals now kept for decision `id`.
    pub fn set_refused(&mut self, id: DecisionId, refused: Vec<Refused>) {
        if let Some(d) = self.decisions.get_mut(&id) {
            d.refused = refused;
        }
    }

    pub fn get(&self, id: DecisionId) -> Option<&Decision> {
        self.decisions.get(&id)
    }

    /// Every decision, by id.
    pub fn all(&self) -> impl Iterator<Item = &Decision> {
        self.decisions.values()
    }

    pub fn len(&self) -> usize {
        self.decisions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.decisions.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::state::LedgerCore;
    use crate::types::{MemberIdentity, MemberName};
    use proptest::prelude::*;

    fn lead() -> Caller {
        Caller::Member(MemberIdentity {
            name: MemberName::new("lead").unwrap(),
            role: Role::Primary,
            slot: None,
        })
    }
    fn arch(name: &str, slot: &str) -> Caller {
        Caller::Member(MemberIdentity {
            name: MemberName::new(name).unwrap(),
            role: Role::Architect,
            slot: Some(slot.into()),
        })
    }

    /// A tiny harness that runs the same steps the shell does: check, append, apply.
    struct H {
        ledger: LedgerCore,
        d: Option<Decision>,
    }

    impl H {
        fn open(slots: &[&str], deadline: Millis, rounds: u32, now: Millis) -> H {
            let (mut ledger, _) = LedgerCore::create("fleetd/test/ledger", 16);
            let author = authorize_decide(&lead(), "open").unwrap();
            let configured = vec!["opus".to_string(), "sol".to_string(), "zen".to_string()];
            let slots: Vec<String> = slots.iter().map(|s| s.to_string()).collect();
            validate_open("pick a db", &slots, &configured, deadline, rounds, now).unwrap();
            let ev = DecisionEvent::Open {
                decision: DecisionId(1),
                subject: "pick a db".into(),
                slots,
                deadline: crate::clock::rfc3339(deadline),
                max_rounds: rounds,
            };
            let (e, _) = ledger.append(author, ev, now);
            H {
                d: Decision::opened(&e),
                ledger,
            }
        }

        fn record(
            &mut self,
            who: &Caller,
            round: u32,
            abstain: bool,
            now: Millis,
        ) -> Result<Entry, FleetError> {
            let (author, slot) = authorize_position(who, "position")?;
            let d = self.d.as_mut().unwrap();
            d.check_record(&slot, round, "because", now)?;
            let ev = if abstain {
                DecisionEvent::Abstain {
                    decision: d.id,
                    slot,
                    round,
                    content: "because".into(),
                }
            } else {
                DecisionEvent::Position {
                    decision: d.id,
                    slot,
                    round,
                    content: "because".into(),
                }
            };
            let (e, _) = self.ledger.append(author, ev, now);
            d.apply(&e);
            Ok(e)
        }

        fn close(&mut self, who: &Caller, now: Millis) -> Result<Entry, FleetError> {
            let author = authorize_decide(who, "close")?;
            let d = self.d.as_mut().unwrap();
            let (outcome, slots) = d.check_close(now)?;
            let (e, _) = self.ledger.append(
                author,
                DecisionEvent::Close {
                    decision: d.id,
                    outcome,
                    slots,
                    verdict: "v".into(),
                    rationale: "r".into(),
                },
                now,
            );
            d.apply(&e);
            Ok(e)
        }
    }

    #[test]
    fn the_seed_flow_two_rounds_then_quorate() {
        let mut h = H::open(&["opus", "sol"], 10_000, 2, 0);
        h.record(&arch("a", "opus"), 1, false, 100).unwrap();
        h.record(&arch("b", "sol"), 1, false, 200).unwrap();
        h.record(&arch("a", "opus"), 2, false, 300).unwrap();
        h.record(&arch("b", "sol"), 2, false, 400).unwrap();
        let c = h.close(&lead(), 500).unwrap();
        let DecisionEvent::Close { outcome, slots, .. } = c.event else {
            panic!()
        };
        assert_eq!(outcome, Outcome::Quorate);
        assert!(
            slots
                .iter()
                .all(|s| s.outcome == SlotResult::Position && s.round == Some(2))
        );
    }

    #[test]
    fn refusals_name_what_would_be_accepted() {
        let mut h = H::open(&["opus", "sol"], 10_000, 2, 0);
        // Round 2 before round 1; a round above the cap; a slot not convened; a worker; the lead.
        assert!(
            h.record(&arch("a", "opus"), 2, false, 1)
                .unwrap_err()
                .accepted
                .contains("round 1")
        );
        h.record(&arch("a", "opus"), 1, false, 1).unwrap();
        h.record(&arch("a", "opus"), 2, false, 1).unwrap();
        assert!(
            h.record(&arch("a", "opus"), 3, false, 1)
                .unwrap_err()
                .why
                .contains("outside 1..=2")
        );
        assert_eq!(
            h.record(&arch("z", "zen"), 1, false, 1)
                .unwrap_err()
                .rule
                .as_deref(),
            Some("POSITION")
        );
        assert_eq!(
            h.record(&lead(), 1, false, 1).unwrap_err().rule.as_deref(),
            Some("POSITION")
        );
        // A premature close is refused: sol has nothing and the deadline has not passed.
        let e = h.close(&lead(), 9_999).unwrap_err();
        assert!(
            e.why.contains("sol") && e.why.contains("has not passed"),
            "{e}"
        );
        // Only the primary closes.
        assert_eq!(
            h.close(&arch("a", "opus"), 20_000)
                .unwrap_err()
                .rule
                .as_deref(),
            Some("DECIDE")
        );
        // After the deadline: sol's late position is refused as late; the close is degraded.
        let late = h.record(&arch("b", "sol"), 1, false, 10_001).unwrap_err();
        assert_eq!(late.kind, ErrorKind::Late);
        assert!(late.why.contains("timed out"));
        let c = h.close(&lead(), 10_001).unwrap();
        let DecisionEvent::Close { outcome, slots, .. } = c.event else {
            panic!()
        };
        assert_eq!(outcome, Outcome::Degraded);
        assert_eq!(
            slots[1],
            SlotOutcome {
                slot: "sol".into(),
                outcome: SlotResult::Timeout,
                round: None
            }
        );
        // Nothing after close.
        assert!(h.record(&arch("a", "opus"), 2, false, 10_002).is_err());
        assert!(h.close(&lead(), 10_003).is_err());
    }

    #[test]
    fn all_abstain_is_degraded_and_open_is_validated() {
        let mut h = H::open(&["opus", "sol"], 10_000, 2, 0);
        h.record(&arch("a", "opus"), 1, true, 1).unwrap();
        h.record(&arch("b", "sol"), 1, true, 1).unwrap();
        let DecisionEvent::Close { outcome, .. } = h.close(&lead(), 2).unwrap().event else {
            panic!()
        };
        assert_eq!(outcome, Outcome::Degraded);
        let conf = vec!["opus".to_string()];
        assert!(
            validate_open("s", &["nope".into()], &conf, 10, 2, 0)
                .unwrap_err()
                .accepted
                .contains("opus")
        );
        assert!(validate_open("s", &["opus".into(), "opus".into()], &conf, 10, 2, 0).is_err());
        assert!(validate_open("s", &["opus".into()], &conf, 0, 2, 5).is_err());
        assert!(validate_open("s", &["opus".into()], &conf, 10, 0, 0).is_err());
        assert!(validate_open("", &["opus".into()], &conf, 10, 2, 0).is_err());
        assert_eq!(
            authorize_decide(&Caller::Operator, "open")
                .unwrap_err()
                .rule
                .as_deref(),
            Some("DECIDE")
        );
    }

    #[derive(Clone, Debug)]
    enum Op {
        Record(u8, u8, bool), // who (0..3: opus, sol, zen-architect, worker), round, abstain
        Close(bool),          // from the lead or not
        Tick(u16),
    }

    proptest! {
        /// For random interleavings: no accepted close lacks a terminal outcome per slot, no
        /// record is attributed to a slot other than its writer's, rounds never exceed the cap
        /// and always advance by one, the outcome follows the rule, and replaying the ledger
        /// gives the same decision.
        #[test]
        fn decision_rules(rounds in 1u32..4, ops in proptest::collection::vec(prop_oneof![
            (0u8..4, 0u8..5, any::<bool>()).prop_map(|(w, r, a)| Op::Record(w, r, a)),
            any::<bool>().prop_map(Op::Close),
            (0u16..3000).prop_map(Op::Tick),
        ], 1..60)) {
            let deadline = 5_000;
            let mut h = H::open(&["opus", "sol"], deadline, rounds, 0);
            let mut now = 0u64;
            let mut log = vec![];
            let who = |w: u8| match w {
                0 => arch("a", "opus"),
                1 => arch("b", "sol"),
                2 => arch("c", "zen"),
                _ => Caller::Member(MemberIdentity { name: MemberName::new("w").unwrap(), role: Role::Worker, slot: None }),
            };
            for op in ops {
                match op {
                    Op::Record(w, r, a) => {
                        let c = who(w);
                        if let Ok(e) = h.record(&c, r as u32, a, now) {
                            let Caller::Member(m) = &c else { unreachable!() };
                            match &e.event {
                                DecisionEvent::Position { slot, round, .. } | DecisionEvent::Abstain { slot, round, .. } => {
                                    prop_assert_eq!(Some(slot), m.slot.as_ref());
                                    prop_assert!(*round >= 1 && *round <= rounds);
                                    prop_assert!(now <= deadline);
                                }
                                _ => prop_assert!(false),
                            }
                            log.push(e);
                        }
                    }
                    Op::Close(from_lead) => {
                        let c = if from_lead { lead() } else { who(0) };
                        if let Ok(e) = h.close(&c, now) {
                            let DecisionEvent::Close { outcome, slots, .. } = &e.event else { unreachable!() };
                            prop_assert_eq!(slots.len(), 2);
                            for s in slots {
                                if s.outcome == SlotResult::Timeout { prop_assert!(now > deadline); }
                            }
                            prop_assert_eq!(*outcome, outcome_of(slots));
                            log.push(e);
                        }
                    }
                    Op::Tick(dt) => now += dt as u64,
                }
            }
            // Replay equals the live state.
            let d = h.d.clone().unwrap();
            let mut all = vec![];
            let (mut l2, _) = LedgerCore::create("fleetd/test/ledger", 16);
            let open_ev = DecisionEvent::Open { decision: d.id, subject: d.subject.clone(), slots: d.slots.clone(), deadline: d.deadline.clone(), max_rounds: d.max_rounds };
            let (e0, _) = l2.append(authorize_decide(&lead(), "o").unwrap(), open_ev, 0);
            all.push(e0);
            all.extend(log);
            let replayed = replay(&all);
            let mut r = replayed[&d.id].clone();
            r.refused.clear();
            let mut live = d.clone();
            live.refused.clear();
            prop_assert_eq!(r.records.len(), live.records.len());
            prop_assert_eq!(r.closed.is_some(), live.closed.is_some());
            // The ledger writer's board, fed one synced entry at a time, is the replay.
            let mut board = Board::default();
            for e in &all {
                board.apply(e);
            }
            let b = board.get(d.id).cloned().unwrap();
            prop_assert_eq!(b.records.len(), r.records.len());
            prop_assert_eq!(b.closed.is_some(), r.closed.is_some());
            prop_assert_eq!(board.allocate(), DecisionId(d.id.0 + 1));
        }
    }

    #[test]
    fn the_board_hands_out_ids_past_every_decision_it_holds() {
        let (mut ledger, _) = LedgerCore::create("fleetd/test/ledger", 16);
        let open = |ledger: &mut LedgerCore, id: u64| {
            let ev = DecisionEvent::Open {
                decision: DecisionId(id),
                subject: "pick a db".into(),
                slots: vec!["opus".into()],
                deadline: crate::clock::rfc3339(5_000),
                max_rounds: 1,
            };
            ledger
                .append(authorize_decide(&lead(), "open").unwrap(), ev, 0)
                .0
        };
        let first = open(&mut ledger, 1);
        let mut board = Board::replay(std::slice::from_ref(&first), vec![(DecisionId(9), vec![])]);
        assert_eq!(board.len(), 1, "refusals of an unknown decision add none");
        assert_eq!(board.allocate(), DecisionId(2));
        assert_eq!(
            board.allocate(),
            DecisionId(3),
            "an id is never handed out twice"
        );
        let mut empty = Board::default();
        assert!(empty.is_empty());
        assert_eq!(empty.allocate(), DecisionId(1));
        // An id that reached the ledger past the counter moves the counter past it.
        empty.apply(&open(&mut ledger, 7));
        assert_eq!(empty.allocate(), DecisionId(8));
        assert!(empty.get(DecisionId(7)).is_some_and(|d| d.is_open()));
    }
}
