//! What the operations return: the views of members, tickets, receipts, decisions and the
//! daemon, as MCP and REST serialise them. The ones the CLI prints also deserialize, exactly
//! back to what was serialised (the CLI reads the daemon's answers as these types).
//!
//! Owns the shape of those answers. Must never hold behaviour beyond building a view.

use serde::Deserializer;

use super::*;

/// A member as listings show it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MemberView {
    pub name: MemberName,
    pub role: Role,
    pub slot: Option<String>,
    pub profile: String,
    pub parent: Party,
    pub status: Status,
    pub status_since: Millis,
    pub spawned_at: Millis,
    pub pid: Option<u32>,
    /// The PTY host process holding this member's terminal.
    pub host_pid: Option<u32>,
    pub exit: Option<ExitInfo>,
    pub charter_sha256: String,
    /// The agent's own session id, as its hooks reported it (for `fleetd spawn --resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Its own git worktree (`--worktree`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::registry::state::Worktree>,
    /// How it is confined (`bwrap`); absent when it runs unconfined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// While `blocked`: why (`unrecognised screen`, `dialog on screen`, ...) and the screen's
    /// last lines (blank for a caller `authz::blocked_screen_visible` does not show them to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<crate::registry::state::Blocked>,
}

impl MemberView {
    /// This view as `caller` may see it: a blocked member's screen lines only for those who
    /// may see them.
    pub fn seen_by(mut self, caller: &Caller) -> Self {
        if let Some(b) = &mut self.blocked
            && !crate::authz::blocked_screen_visible(caller, &self.name)
        {
            b.screen.clear();
        }
        self
    }
}

impl From<&MemberRecord> for MemberView {
    fn from(m: &MemberRecord) -> Self {
        MemberView {
            name: m.name.clone(),
            role: m.role,
            slot: m.slot.clone(),
            profile: m.profile.clone(),
            parent: m.parent.clone(),
            status: m.status,
            status_since: m.status_since,
            spawned_at: m.spawned_at,
            pid: m.pid,
            host_pid: m.host_pid,
            exit: m.exit.clone(),
            charter_sha256: m.charter_sha256.clone(),
            session_id: m.session_id.clone(),
            worktree: m.worktree.clone(),
            sandbox: m.sandbox.clone(),
            blocked: m.blocked.clone(),
        }
    }
}

/// What `fleet_spawn` asks for (its meaning is planned in `crate::spawn`).
pub use crate::spawn::SpawnRequest;

/// What a spawn did: the member, and notes (the profile chosen for it, what was wired).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SpawnView {
    #[serde(flatten)]
    pub member: MemberView,
    pub notes: Vec<String>,
}

/// `fleetd signal`: a state, or a hook's payload.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    pub status: Option<String>,
    pub hook: Option<serde_json::Value>,
}

/// What a signal did.
#[derive(Clone, Debug, Serialize)]
pub struct SignalAck {
    pub member: MemberName,
    pub event: String,
    /// The status signal it meant; None: the event changes no status.
    pub signal: Option<String>,
    /// The session id kept for resume.
    pub session_id: Option<String>,
    /// Why the session id the report named was not kept (not in the member's CLI's format).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_refused: Option<String>,
    /// The turn that starts now is the first since the member's session was resumed: a hook
    /// wired with `--context-on-resume` answers it with the charter.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub context_due: bool,
}

/// A message's delivery receipt.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Receipt {
    pub msg: MsgId,
    pub target: MemberName,
    pub state: ReceiptState,
    pub queued_at: Millis,
    pub delivered_at: Option<Millis>,
    pub settled_at: Option<Millis>,
    pub note: Option<String>,
    /// A stalled paste: what the target's screen showed. Present only for those the Screen
    /// rule shows that screen to (the target itself and the operator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub screen: Option<String>,
    /// The text held characters that may not reach a terminal; they were shown visibly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub altered: Option<String>,
}

impl Receipt {
    /// Message `m`'s receipt as `caller` sees it: the screen text it may carry only by the
    /// Screen rule (`authz::screen_visible`). There is no receipt without a viewer.
    pub fn of(m: &Message, caller: &Caller) -> Self {
        Receipt {
            msg: m.id,
            target: m.target.clone(),
            state: m.state,
            queued_at: m.queued_at,
            delivered_at: m.delivered_at,
            settled_at: m.settled_at,
            note: m.note.clone(),
            screen: m
                .screen
                .clone()
                .filter(|_| crate::authz::screen_visible(caller, &m.target)),
            altered: m.altered.clone(),
        }
    }

    /// The receipt of a message just queued, as its sender is answered: nothing from a screen
    /// in it (it has not been pasted).
    pub fn queued(m: &Message) -> Self {
        Receipt {
            screen: None,
            ..Receipt::of(m, &Caller::Operator)
        }
    }
}

/// A ticket with its message's receipt. As shown, a ticket for another host's lead names its
/// owner `lead@HOST` (the receiving host's tickets name the sender `lead@HOST` the same way).
#[derive(Clone, Debug)]
pub struct TicketView {
    pub ticket: Ticket,
    pub receipt: Option<Receipt>,
}

impl Serialize for TicketView {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let serde_json::Value::Object(fields) =
            serde_json::to_value(&self.ticket).map_err(S::Error::custom)?
        else {
            return Err(S::Error::custom("a ticket serializes as an object"));
        };
        let mut m = s.serialize_map(Some(fields.len() + 1))?;
        for (k, v) in &fields {
            match (&self.ticket.remote, k.as_str()) {
                (Some(r), "to") => {
                    m.serialize_entry(k, &format!("{}@{}", self.ticket.to, r.host))?
                }
                _ => m.serialize_entry(k, v)?,
            }
        }
        m.serialize_entry("receipt", &self.receipt)?;
        m.end()
    }
}

/// The inverse of the serialisation above: a ticket for another host's lead, shown
/// `to: MEMBER@HOST`, names the member again (HOST is `remote.host`; any other suffix is
/// refused, as a name with an `@` is).
impl<'de> Deserialize<'de> for TicketView {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut fields = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
        let receipt = match fields.remove("receipt") {
            None | Some(serde_json::Value::Null) => None,
            Some(r) => Some(Receipt::deserialize(r).map_err(D::Error::custom)?),
        };
        let host = fields
            .get("remote")
            .and_then(|r| r.get("host"))
            .and_then(|h| h.as_str())
            .map(|h| format!("@{h}"));
        if let (Some(host), Some(serde_json::Value::String(to))) = (host, fields.get_mut("to"))
            && let Some(member) = to.strip_suffix(&host)
        {
            *to = member.to_string();
        }
        let ticket =
            Ticket::deserialize(serde_json::Value::Object(fields)).map_err(D::Error::custom)?;
        Ok(TicketView { ticket, receipt })
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SendResult {
    pub ticket: TicketView,
    /// For `wait: true`: whether the ticket resolved within the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<bool>,
}

#[derive(Clone, Debug, Serialize)]
pub struct AskResult {
    pub ticket: TicketView,
    pub answered: bool,
    pub answer: Option<String>,
    pub note: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct WhoAmI {
    pub member: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<MemberName>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slot: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<Party>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub charter_sha256: Option<String>,
    pub host: String,
    pub note: String,
}

impl WhoAmI {
    /// A caller that is no member: the operator, a process outside every member, or one whose
    /// identity could not be established; `note` says which.
    pub(super) fn outside(host: String, note: String) -> Self {
        WhoAmI {
            member: false,
            name: None,
            role: None,
            slot: None,
            parent: None,
            charter_sha256: None,
            host,
            note,
        }
    }
}

/// The primary's coordination state: this daemon's coord-id, its mailbox (mail held for the
/// primary), and peers. Built only after the gate passes.
#[derive(Clone, Debug, Serialize)]
pub struct CoordinatorRow {
    pub coord_id: String,
    pub mailbox: MailboxRow,
    pub peers: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MailboxRow {
    pub state: &'static str,
    pub held: usize,
    pub preview: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ListView {
    pub host: String,
    pub members: Vec<MemberView>,
    pub architect_slots: Vec<ArchitectSlotView>,
    /// Absent (not empty) for every caller but the primary and the operator.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<CoordinatorRow>,
    /// Open decisions, with age and missing slots: the lead's (and the operator's) to see.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_decisions: Option<Vec<DecisionSummary>>,
}

/// A decision in listings.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct DecisionSummary {
    pub id: DecisionId,
    pub subject: String,
    /// `open`, or the outcome: `quorate` / `degraded`.
    pub state: String,
    pub slots: Vec<String>,
    pub opened_by: String,
    pub opened_at: String,
    pub age_ms: Millis,
    pub deadline: String,
    pub deadline_passed: bool,
    /// Convened slots with no record yet.
    pub missing: Vec<String>,
    pub records: usize,
}

impl DecisionSummary {
    pub fn of(d: &Decision, now: Millis) -> Self {
        DecisionSummary {
            id: d.id,
            subject: d.subject.clone(),
            state: match &d.closed {
                None => "open".into(),
                Some(c) => format!("{:?}", c.outcome).to_lowercase(),
            },
            slots: d.slots.clone(),
            opened_by: d.opened_by.clone(),
            opened_at: d.opened_at.clone(),
            age_ms: now.saturating_sub(d.opened_ms),
            deadline: d.deadline.clone(),
            deadline_passed: now > d.deadline_ms,
            missing: d.missing(),
            records: d.records.len(),
        }
    }
}

/// What `fleet_decision open` asks for.
#[derive(Clone, Debug, Default)]
pub struct OpenRequest {
    pub subject: String,
    pub slots: Vec<String>,
    pub deadline: Option<String>,
    pub deadline_secs: Option<u64>,
    pub max_rounds: Option<u32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DaemonStatus {
    pub host: String,
    pub version: &'static str,
    pub pid: u32,
    pub state_dir: String,
    pub started_at: Millis,
    pub uptime_ms: Millis,
    pub members: BTreeMap<String, usize>,
    pub open_tickets: usize,
    pub children: Vec<ChildView>,
    pub escalation: Option<String>,
    /// The host's public key (base64), its signed-note verifier key for the ledger, and the
    /// verifier key of its witness's `cosignature/v1` cosignatures.
    pub public_key: String,
    pub ledger_vkey: String,
    pub witness_vkey: String,
    pub ledger: Option<LedgerStatus>,
    pub open_decisions: Vec<DecisionSummary>,
    /// The latest drift alerts (all of them: `GET /alerts`).
    pub drift_alerts: Vec<crate::drift::service::Alert>,
    /// Peers the drift pullers do not trust right now.
    pub untrusted_peers: Vec<String>,
    /// Whether members run confined (`[sandbox]`), and by what or why not.
    pub sandbox: crate::sandbox::Status,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberDetail {
    #[serde(flatten)]
    pub member: MemberView,
    pub slot_view: Option<SlotView>,
    pub queue: Option<QueueView>,
    pub owes: Vec<TicketId>,
}
