//! What the decision ledger records about a decision: its events (open, position, abstain,
//! close) and the outcomes a close names. The ledger's format (`ledger::state`) holds these; the
//! decision's rules (`decision::state`) make them. Pure data.

use serde::{Deserialize, Serialize};

use crate::types::DecisionId;

/// What a ledger entry records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum DecisionEvent {
    Open {
        decision: DecisionId,
        subject: String,
        slots: Vec<String>,
        /// RFC 3339, fixed by the daemon's clock at open.
        deadline: String,
        max_rounds: u32,
    },
    Position {
        decision: DecisionId,
        slot: String,
        round: u32,
        content: String,
    },
    Abstain {
        decision: DecisionId,
        slot: String,
        round: u32,
        content: String,
    },
    Close {
        decision: DecisionId,
        outcome: Outcome,
        slots: Vec<SlotOutcome>,
        verdict: String,
        rationale: String,
    },
}

impl DecisionEvent {
    pub fn decision(&self) -> DecisionId {
        match self {
            DecisionEvent::Open { decision, .. }
            | DecisionEvent::Position { decision, .. }
            | DecisionEvent::Abstain { decision, .. }
            | DecisionEvent::Close { decision, .. } => *decision,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    Quorate,
    Degraded,
}

/// A slot's terminal outcome at close.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SlotResult {
    Position,
    Abstain,
    Timeout,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotOutcome {
    pub slot: String,
    pub outcome: SlotResult,
    /// The round of the record that stands (none for a timeout).
    pub round: Option<u32>,
}
