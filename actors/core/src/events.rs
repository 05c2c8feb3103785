//! What the event stream carries: one numbered event and its kinds (status changes, delivery
//! receipts, ticket changes, spawns with their parent, exits, reaps, restarts, decisions).
//!
//! Owns the shape and its JSON form (`type` tag, snake_case), which the REST stream and the
//! CLI print, and what of an event each reader may see ([`Event::seen_by`]: screen text by the
//! Screen rule). The bus that numbers, rings and broadcasts them is `fleetd_actors::events`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::injector::state::ReceiptState;
use crate::tickets::state::{TicketKind, TicketState};
use crate::types::{Caller, DecisionId, MemberName, Millis, MsgId, Party, Role, Status, TicketId};

/// One event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    pub at: Millis,
    #[serde(flatten)]
    pub kind: EventKind,
}

impl Event {
    /// This event as `caller` may see it: screen text it carries (a stalled paste's receipt)
    /// is blanked unless the Screen rule shows `caller` that member's screen
    /// ([`crate::authz::screen_visible`]); a blocked status's screen lines likewise, the lead
    /// seeing them too ([`crate::authz::blocked_screen_visible`]). Every other field is open to every reader of the
    /// stream (rule READ).
    pub fn seen_by(&self, caller: &Caller) -> Cow<'_, Event> {
        match &self.kind {
            EventKind::Receipt {
                target,
                screen: Some(_),
                ..
            } if !crate::authz::screen_visible(caller, target) => {
                let mut e = self.clone();
                if let EventKind::Receipt { screen, .. } = &mut e.kind {
                    *screen = None;
                }
                Cow::Owned(e)
            }
            EventKind::Status {
                member,
                screen: Some(_),
                ..
            } if !crate::authz::blocked_screen_visible(caller, member) => {
                let mut e = self.clone();
                if let EventKind::Status { screen, .. } = &mut e.kind {
                    *screen = None;
                }
                Cow::Owned(e)
            }
            _ => Cow::Borrowed(self),
        }
    }
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
        /// For `blocked`: why (`unrecognised screen`, `dialog on screen`, ...).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// For `blocked`: the screen's last lines. Screen text: shown only to those
        /// [`crate::authz::blocked_screen_visible`] lets see it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        screen: Option<String>,
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
        /// A stalled paste: what `target`'s screen showed. Screen text: the stream shows it
        /// only to those the Screen rule lets see `target`'s screen ([`Event::seen_by`]).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        screen: Option<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{MemberIdentity, MsgId};

    fn member(name: &str, role: Role) -> Caller {
        Caller::Member(MemberIdentity {
            name: MemberName::new(name).unwrap(),
            role,
            slot: None,
        })
    }

    /// A stalled receipt's screen text reaches the stream's readers by the Screen rule: its
    /// target and the operator; the note and the rest of the event reach everyone.
    #[test]
    fn a_receipts_screen_text_is_seen_by_the_screen_rule() {
        let w1 = MemberName::new("w1").unwrap();
        let e = Event {
            seq: 7,
            at: 1,
            kind: EventKind::Receipt {
                msg: MsgId(3),
                target: w1.clone(),
                from: Party::Member(MemberName::new("lead").unwrap()),
                ticket: None,
                state: ReceiptState::Stalled,
                note: Some("not taken".into()),
                screen: Some("> secret".into()),
            },
        };
        let screen_of = |c: &Caller| match &e.seen_by(c).kind {
            EventKind::Receipt { screen, note, .. } => {
                assert_eq!(note.as_deref(), Some("not taken"));
                screen.clone()
            }
            _ => unreachable!(),
        };
        assert_eq!(screen_of(&Caller::Operator).as_deref(), Some("> secret"));
        assert_eq!(
            screen_of(&member("w1", Role::Worker)).as_deref(),
            Some("> secret")
        );
        for c in [
            member("lead", Role::Primary),
            member("w2", Role::Worker),
            Caller::NotMember { pid: None },
        ] {
            assert_eq!(screen_of(&c), None, "{c:?}");
        }
        let json = serde_json::to_string(&e.seen_by(&member("w2", Role::Worker))).unwrap();
        assert!(!json.contains("secret"), "{json}");
    }
}
