//! The fleet's operations, as the MCP tools and the REST API call them: spawn, send, reply,
//! ask, poll, ack, list, status, stop, signal, attach; plus boot, reload and shutdown.
//!
//! Owns the order of steps across actors (Authz first, then the ticket, then the queue, ...).
//! Every operation takes the resolved [`Caller`]; nothing defaults it. Must never hold a rule of
//! its own: who may do what is [`crate::authz`], everything stateful is in an actor's core.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ractor::{Actor, ActorRef};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::broadcast;

use crate::authz::{Action, authorize, coordinator_row_visible};
use crate::ctx::{Mailbox, SharedCtx};
use crate::decision::actor::{DecisionActor, DecisionArgs, DecisionMsg, append as ledger_append};
use crate::decision::state::{Decision, DecisionEvent, authorize_decide, validate_open};
use crate::error::FleetError;
use crate::events::EventKind;
use crate::injector::actor::{InjectorActor, InjectorArgs, InjectorMsg, QueueView};
use crate::injector::state::{Message, ReceiptState};
use crate::ledger::actor::{LedgerArgs, LedgerMsg, LedgerStatus, LedgerWriter};
use crate::ledger::state::Entry;
use crate::mail::actor::MailMsg;
use crate::registry::actor::{RegistryActor, RegistryMsg, SlotView as ArchitectSlotView};
use crate::registry::state::{ExitInfo, MemberRecord, ReserveRequest};
use crate::slot::actor::{SlotActor, SlotArgs, SlotMsg, SlotView};
use crate::supervisor::actor::{ChildSpec, ChildView, Supervisor, SupervisorMsg};
use crate::term::{LaunchSpec, TermHandle};
use crate::tickets::actor::{DeskActor, DeskMsg, WaitOutcome};
use crate::tickets::state::{Origin, RemoteReceipt, Ticket, TicketKind, TicketState};
use crate::types::{Caller, DecisionId, MemberName, Millis, MsgId, Party, Role, Status, TicketId};

const CALL: Duration = Duration::from_secs(10);
/// How long a call waits for an actor that is being restarted to come back.
const RIDE_OUT: Duration = Duration::from_secs(5);

/// A member as listings show it.
#[derive(Clone, Debug, Serialize)]
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Its own git worktree (`--worktree`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<crate::registry::state::Worktree>,
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
        }
    }
}

/// What `fleet_spawn` asks for.
#[derive(Clone, Debug, Default)]
pub struct SpawnRequest {
    pub role: String,
    pub name: String,
    pub slot: Option<String>,
    pub profile: Option<String>,
    pub command: Option<Vec<String>>,
    pub cwd: Option<String>,
    /// Restart this exited member with its conversation (same name, role, slot, charter).
    pub resume: Option<String>,
    /// Give the member its own git worktree and branch under the state dir.
    pub worktree: bool,
}

/// What a spawn did: the member, and notes (the profile chosen for it, what was wired).
#[derive(Clone, Debug, Serialize)]
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
    pub session_id: Option<String>,
}

/// A message's delivery receipt.
#[derive(Clone, Debug, Serialize)]
pub struct Receipt {
    pub msg: MsgId,
    pub target: MemberName,
    pub state: ReceiptState,
    pub queued_at: Millis,
    pub delivered_at: Option<Millis>,
    pub settled_at: Option<Millis>,
    pub note: Option<String>,
    /// The text held characters that may not reach a terminal; they were shown visibly.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub altered: Option<String>,
}

impl From<&Message> for Receipt {
    fn from(m: &Message) -> Self {
        Receipt {
            msg: m.id,
            target: m.target.clone(),
            state: m.state,
            queued_at: m.queued_at,
            delivered_at: m.delivered_at,
            settled_at: m.settled_at,
            note: m.note.clone(),
            altered: m.altered.clone(),
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

#[derive(Clone, Debug, Serialize)]
pub struct SendResult {
    pub ticket: TicketView,
    /// For `wait: true`: whether the ticket resolved within the wait.
    #[serde(skip_serializing_if = "Option::is_none")]
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
    fn outside(host: String, note: String) -> Self {
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
#[derive(Clone, Debug, Serialize)]
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
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberDetail {
    #[serde(flatten)]
    pub member: MemberView,
    pub slot_view: Option<SlotView>,
    pub queue: Option<QueueView>,
    pub owes: Vec<TicketId>,
}

/// The handle every front end (MCP, REST, the demo) uses.
#[derive(Clone)]
pub struct Fleet {
    pub ctx: SharedCtx,
    sup: ActorRef<SupervisorMsg>,
}

fn sha256_hex(s: &str) -> String {
    let d = Sha256::digest(s.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

fn member_name(s: &str) -> Result<MemberName, FleetError> {
    MemberName::new(s)
}

impl Fleet {
    /// Boot the actor tree: supervisor, registry, ticket desk, then re-adopt every member the
    /// store remembers as live. Returns the fleet and the supervisor's join handle (it ends
    /// when the daemon escalates or shuts down).
    pub async fn boot(ctx: SharedCtx) -> Result<(Fleet, tokio::task::JoinHandle<()>), FleetError> {
        let (sup, join) = Actor::spawn(None, Supervisor, ctx.clone())
            .await
            .map_err(|e| FleetError::internal("daemon start", format!("supervisor: {e}")))?;
        let _ = ctx.supervisor.set(sup.clone());
        let fleet = Fleet {
            ctx: ctx.clone(),
            sup,
        };
        // The singletons: their directory entry is cleared when they end.
        for spec in [
            {
                let c = ctx.clone();
                ChildSpec::actor("registry", "registry", move || (RegistryActor, c.clone()))
            },
            {
                let c = ctx.clone();
                ChildSpec::actor("tickets", "tickets", move || (DeskActor, c.clone()))
            },
            {
                let c = ctx.clone();
                ChildSpec::actor("ledger", "ledger", move || {
                    (LedgerWriter, LedgerArgs { ctx: c.clone() })
                })
            },
        ] {
            let c = ctx.clone();
            fleet
                .start_child(spec.on_down(move |id| c.dir.remove_singleton(id)))
                .await?;
        }
        let c = ctx.clone();
        fleet
            .start_child(ChildSpec::actor("drift", "drift", move || {
                (crate::drift::actor::DriftScheduler, c.clone())
            }))
            .await?;
        for d in ctx.decision_views().into_iter().filter(|d| d.is_open()) {
            if let Err(e) = fleet.start_decision(d.id).await {
                tracing::error!(decision = %d.id, error = %e, "could not start the decision record");
            }
        }
        let members = fleet.registry_members().await?;
        let live: Vec<MemberRecord> = members.into_iter().filter(|m| m.is_live()).collect();
        ctx.term.sweep(
            &live
                .iter()
                .map(|m| (m.name.clone(), m.generation))
                .collect::<Vec<_>>(),
        );
        for m in live {
            tracing::info!(member = %m.name, "re-adopting member");
            if let Err(e) = fleet.start_member(&m.name, None).await {
                tracing::error!(member = %m.name, error = %e, "could not re-adopt member");
            }
        }
        Ok((fleet, join))
    }

    /// Start a supervised child.
    pub async fn start_child(&self, spec: ChildSpec) -> Result<(), FleetError> {
        crate::supervisor::actor::start_child(&self.sup, spec).await
    }

    /// Start the supervised record of an open decision (it rebuilds itself from the ledger).
    async fn start_decision(&self, id: DecisionId) -> Result<(), FleetError> {
        let (c, c2) = (self.ctx.clone(), self.ctx.clone());
        self.start_child(
            ChildSpec::actor(format!("decision:{id}"), "decision", move || {
                (
                    DecisionActor,
                    DecisionArgs {
                        ctx: c2.clone(),
                        id,
                    },
                )
            })
            .on_down(move |actor| c.dir.remove_decision(id, actor)),
        )
        .await
    }

    /// Start (or re-adopt, with `handle: None`) a member's slot and injector.
    async fn start_member(
        &self,
        name: &MemberName,
        handle: Option<TermHandle>,
    ) -> Result<(), FleetError> {
        let h = Arc::new(Mutex::new(handle));
        let (ctx, n) = (self.ctx.clone(), name.clone());
        let (c, nm) = (self.ctx.clone(), name.clone());
        self.start_child(
            ChildSpec::actor(format!("slot:{name}"), "slot", move || {
                let args = SlotArgs {
                    ctx: ctx.clone(),
                    name: n.clone(),
                    handle: h.clone(),
                };
                (SlotActor, args)
            })
            .on_down(move |id| c.dir.remove_slot(&nm, id)),
        )
        .await?;
        let (ctx, n) = (self.ctx.clone(), name.clone());
        let (c, nm) = (self.ctx.clone(), name.clone());
        self.start_child(
            ChildSpec::actor(format!("injector:{name}"), "injector", move || {
                let args = InjectorArgs {
                    ctx: ctx.clone(),
                    target: n.clone(),
                };
                (InjectorActor, args)
            })
            .on_down(move |id| c.dir.remove_injector(&nm, id)),
        )
        .await
    }

    /// The registry, waiting out a restart.
    async fn registry(&self) -> Result<Mailbox<RegistryMsg>, FleetError> {
        match self.ctx.dir.wait_for(|d| d.registry().ok(), RIDE_OUT).await {
            Some(m) => Ok(m),
            None => self.ctx.dir.registry(),
        }
    }

    /// The ticket desk, waiting out a restart.
    async fn desk(&self) -> Result<Mailbox<DeskMsg>, FleetError> {
        match self.ctx.dir.wait_for(|d| d.tickets().ok(), RIDE_OUT).await {
            Some(m) => Ok(m),
            None => self.ctx.dir.tickets(),
        }
    }

    /// A live member's slot, waiting out a restart.
    async fn slot(&self, name: &MemberName) -> Option<Mailbox<SlotMsg>> {
        self.ctx.dir.wait_for(|d| d.slot(name), RIDE_OUT).await
    }

    /// A live member's injector, waiting out a restart.
    async fn injector(&self, name: &MemberName) -> Option<Mailbox<InjectorMsg>> {
        self.ctx.dir.wait_for(|d| d.injector(name), RIDE_OUT).await
    }

    async fn registry_members(&self) -> Result<Vec<MemberRecord>, FleetError> {
        self.registry()
            .await?
            .call(|reply| RegistryMsg::Members { reply }, CALL)
            .await
    }

    /// The live primary (the lead), as the registry's core decides it.
    pub async fn live_primary(&self) -> Result<Option<MemberRecord>, FleetError> {
        self.registry()
            .await?
            .call(|reply| RegistryMsg::Primary { reply }, CALL)
            .await
    }

    async fn member(&self, name: &MemberName) -> Result<Option<MemberRecord>, FleetError> {
        let n = name.clone();
        self.registry()
            .await?
            .call(|reply| RegistryMsg::Member { name: n, reply }, CALL)
            .await
    }

    async fn live_member(&self, name: &MemberName, what: &str) -> Result<MemberRecord, FleetError> {
        match self.member(name).await? {
            Some(m) if m.is_live() => Ok(m),
            Some(m) => Err(FleetError::conflict(
                what,
                format!(
                    "`{name}` has exited ({})",
                    m.exit
                        .map(|e| e.reason)
                        .unwrap_or_else(|| "no reason recorded".into())
                ),
                "a live member (see fleet_list)",
            )),
            None => Err(FleetError::not_found(
                what,
                format!("there is no member `{name}`"),
                "a member name from fleet_list",
            )),
        }
    }

    async fn receipt(&self, id: Option<MsgId>) -> Option<Receipt> {
        let id = id?;
        self.ctx
            .store
            .run(move |s| s.message(id))
            .await
            .ok()
            .flatten()
            .map(|m| Receipt::from(&m))
    }

    async fn view(&self, t: Ticket) -> TicketView {
        if let Some(r) = &t.remote {
            let receipt = Some(Receipt {
                msg: t.msg.unwrap_or(MsgId(0)),
                target: t.to.clone(),
                state: r.state,
                queued_at: r.queued_at,
                delivered_at: r.delivered_at,
                settled_at: r.settled_at,
                note: r.note.clone(),
                altered: r.altered.clone(),
            });
            return TicketView { ticket: t, receipt };
        }
        let receipt = self.receipt(t.msg).await;
        TicketView { ticket: t, receipt }
    }

    // ---- operations -------------------------------------------------------------------

    /// Who `caller` is to this fleet: its name, role, slot, parent and charter digest, or, for
    /// the operator and for callers outside every member, why it is not a member. Open to every
    /// caller (the one call an unresolved caller may make).
    pub async fn whoami(&self, caller: &Caller) -> WhoAmI {
        let host = self.ctx.config().daemon.host.clone();
        match caller {
            Caller::Member(m) => {
                let rec = self.member(&m.name).await.ok().flatten();
                WhoAmI {
                    member: true,
                    name: Some(m.name.clone()),
                    role: Some(m.role),
                    slot: m.slot.clone(),
                    parent: rec.as_ref().map(|r| r.parent.clone()),
                    charter_sha256: rec.map(|r| r.charter_sha256),
                    host,
                    note: format!(
                        "you are {}, resolved from your connection's process tree",
                        caller.describe()
                    ),
                }
            }
            Caller::Operator => WhoAmI::outside(
                host,
                "you are the operator (a process outside every member, on the REST socket)".into(),
            ),
            Caller::NotMember { .. } => WhoAmI::outside(
                host,
                format!(
                    "not a member: {} does not run inside any member's terminal, so every mutating tool refuses it",
                    caller.describe()
                ),
            ),
            Caller::Unresolved { .. } => WhoAmI::outside(
                host,
                format!(
                    "unresolved: {} so every tool but fleet_whoami refuses it",
                    caller.describe()
                ),
            ),
        }
    }

    /// An exited member that can be resumed: its record, with the session id its hooks
    /// reported.
    async fn resumable(&self, name: &str) -> Result<MemberRecord, FleetError> {
        let what = format!(
            "fleet_spawn {{resume: {}}}",
            crate::types::truncate(name, 40)
        );
        let n = member_name(name)?;
        let rec = self.member(&n).await?.ok_or_else(|| {
            FleetError::not_found(
                what.clone(),
                format!("no member `{n}` is remembered"),
                "the name of an exited member (fleet_list shows them)",
            )
        })?;
        if rec.is_live() {
            return Err(FleetError::conflict(
                what,
                format!("`{n}` is still running"),
                "resume of an exited member (stop it first)",
            ));
        }
        if rec.session_id.is_none() {
            return Err(FleetError::conflict(
                what,
                format!(
                    "`{n}` never reported a session id (profile `{}`: its agent's hooks did not send one)",
                    rec.profile
                ),
                "resume of a member whose agent reported its session (claude, codex, gemini, opencode profiles)",
            ));
        }
        Ok(rec)
    }

    /// Starts a member (or resumes an exited one, `req.resume`) in a terminal of its own, under
    /// `caller` as its parent. Authz: the operator and the primary may spawn; the rest are
    /// refused. Plans the name, role, architect slot, profile, working directory and worktree,
    /// reserves them in the registry (FIFO when the slots are full), starts the slot and its
    /// injector, and returns once the terminal runs; `notes` in the view say what was chosen.
    pub async fn spawn(&self, caller: &Caller, req: SpawnRequest) -> Result<SpawnView, FleetError> {
        authorize(caller, &Action::Spawn, "fleet_spawn")?;
        let parent = caller.party().ok_or_else(|| {
            FleetError::internal("fleet_spawn", "an authorized caller has no party")
        })?;
        let config = self.ctx.config();
        let mut notes = vec![];
        // A resume takes the exited member's name, role, slot, profile, cwd and worktree.
        let prior = match &req.resume {
            Some(n) => Some(self.resumable(n).await?),
            None => None,
        };
        let (name, role, slot, requested_profile, cwd) = match &prior {
            Some(p) => (
                p.name.clone(),
                p.role,
                p.slot.clone(),
                Some(p.profile.clone()),
                p.cwd.clone(),
            ),
            None => {
                for (field, v) in [("role", &req.role), ("name", &req.name)] {
                    if v.is_empty() {
                        return Err(FleetError::invalid(
                            "fleet_spawn",
                            format!("it gives no {field}"),
                            "role, name and a profile or a command (or resume: NAME of an exited member)",
                        ));
                    }
                }
                let name = member_name(&req.name)?;
                let role: Role = req.role.parse()?;
                let slot = match (role, req.slot.clone()) {
                    (Role::Architect, None) if config.architects.contains_key(name.as_str()) => {
                        Some(name.to_string())
                    }
                    (_, s) => s,
                };
                (name, role, slot, req.profile.clone(), req.cwd.clone())
            }
        };
        if let Some(dir) = &cwd {
            check_cwd(&name, dir)?;
        }
        let slot_command = slot
            .as_deref()
            .and_then(|s| config.architects.get(s))
            .and_then(|a| a.command.clone());
        let (profile_name, note) = config.profile_for(
            role,
            slot.as_deref(),
            requested_profile.as_deref(),
            req.command.as_deref().or(slot_command.as_deref()),
        )?;
        notes.extend(note);
        let profile = config.profiles.get(&profile_name).ok_or_else(|| {
            FleetError::invalid(
                format!("fleet_spawn of `{name}`"),
                format!("profile `{profile_name}` is not configured"),
                format!(
                    "one of: {}",
                    config
                        .profiles
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            )
        })?;
        let argv = match (&prior, &req.command) {
            (Some(p), _) => {
                let session = p.session_id.clone().unwrap_or_default();
                if profile.resume.is_empty() {
                    return Err(FleetError::conflict(
                        format!("fleet_spawn {{resume: {name}}}"),
                        format!("profile `{profile_name}` has no resume command"),
                        "resume of a member whose profile sets `resume` (claude, codex, gemini, opencode)",
                    ));
                }
                notes.push(format!("resumed session {session}"));
                profile
                    .resume
                    .iter()
                    .map(|a| a.replace("{session_id}", &session))
                    .collect()
            }
            (None, Some(c)) if !c.is_empty() => c.clone(),
            (None, Some(_)) => {
                return Err(FleetError::invalid(
                    format!("fleet_spawn of `{name}`"),
                    "command is an empty list",
                    "a non-empty argv, or no command to use the profile's",
                ));
            }
            (None, None) => slot_command.unwrap_or_else(|| profile.command.clone()),
        };
        if argv.is_empty() {
            return Err(FleetError::invalid(
                format!("fleet_spawn of `{name}`"),
                format!("profile `{profile_name}` has no command"),
                "a command in the request or in the profile",
            ));
        }
        // Reserve first: the slot (or name) is held before any process exists.
        let rreq = ReserveRequest {
            name: name.clone(),
            role,
            slot: slot.clone(),
            parent: parent.clone(),
        };
        let wait = Duration::from_secs(config.lifecycle.spawn_wait_seconds + 5);
        let reservation = self
            .registry()
            .await?
            .call(|reply| RegistryMsg::Reserve { req: rreq, reply }, wait)
            .await??;
        let prepared = self
            .prepare(&name, role, profile, prior.as_ref(), &req, cwd)
            .await;
        let (argv, env, cwd, worktree, charter_sha256, wired) = match prepared {
            Ok(p) => {
                let (extra, env, cwd, worktree, sha, wired) = p;
                let mut full = self.expand(&argv, &name);
                full.extend(extra);
                (full, env, cwd, worktree, sha, wired)
            }
            Err(e) => {
                self.release(reservation.id);
                return Err(e);
            }
        };
        notes.extend(wired);
        if let Some(w) = &worktree {
            notes.push(format!("worktree {} on branch {}", w.path, w.branch));
        }
        let now = self.ctx.now();
        let generation = now;
        let vars: Vec<String> = std::env::vars_os()
            .filter_map(|(k, _)| k.into_string().ok())
            .collect();
        let unset = profile.unset_in(vars.iter().map(String::as_str));
        let spec = LaunchSpec {
            name: name.clone(),
            generation,
            argv: argv.clone(),
            env,
            unset,
            cwd: cwd.clone(),
            rows: config.lifecycle.rows,
            cols: config.lifecycle.cols,
        };
        let handle = match self.ctx.term.launch(spec).await {
            Ok(h) => h,
            Err(e) => {
                self.release(reservation.id);
                return Err(e);
            }
        };
        let record = MemberRecord {
            name: name.clone(),
            role,
            slot: slot.clone(),
            profile: profile_name.clone(),
            parent: parent.clone(),
            command: argv,
            spawned_at: now,
            pid: Some(handle.pid),
            host_pid: handle.host_pid,
            status: Status::Starting,
            status_since: now,
            exit: None,
            charter_sha256,
            generation,
            session_id: prior.as_ref().and_then(|p| p.session_id.clone()),
            worktree,
            cwd,
        };
        let pid = handle.pid;
        let rec2 = record.clone();
        let bound = self
            .registry()
            .await?
            .call(
                |reply| RegistryMsg::Bind {
                    reservation: reservation.id,
                    record: Box::new(rec2),
                    reply,
                },
                CALL,
            )
            .await
            .and_then(|r| r);
        if let Err(e) = bound {
            let _ = handle
                .input
                .try_send(crate::term::TermInput::Terminate { grace_ms: 0 });
            self.release(reservation.id);
            return Err(e);
        }
        self.start_member(&name, Some(handle)).await?;
        tracing::info!(member = %name, %role, pid, parent = %parent, profile = %profile_name, "spawned");
        self.ctx.events.emit(EventKind::Spawned {
            member: name.clone(),
            role,
            slot,
            parent,
            pid: Some(pid),
            profile: profile_name,
        });
        Ok(SpawnView {
            member: MemberView::from(&record),
            notes,
        })
    }

    fn release(&self, reservation: u64) {
        if let Ok(r) = self.ctx.dir.registry() {
            r.cast(RegistryMsg::Release { reservation });
        }
    }

    /// `{fleetd}` and `{charter_file}` in a profile's argv.
    fn expand(&self, argv: &[String], name: &MemberName) -> Vec<String> {
        let fleetd = self.ctx.fleetd_exe.display().to_string();
        let charter = self.charter_file(name).display().to_string();
        argv.iter()
            .map(|a| {
                a.replace("{fleetd}", &fleetd)
                    .replace("{charter_file}", &charter)
            })
            .collect()
    }

    fn charter_file(&self, name: &MemberName) -> std::path::PathBuf {
        self.ctx
            .state_dir
            .join("charters")
            .join(format!("{name}.md"))
    }

    /// Everything a launch needs besides its command, written to disk before it: the charter
    /// (a resumed member keeps its own), the agent's wiring (files and arguments), the
    /// environment, the worktree. Returns (extra args, env, cwd, worktree, charter sha256,
    /// wiring summary).
    #[allow(clippy::type_complexity)]
    async fn prepare(
        &self,
        name: &MemberName,
        role: Role,
        profile: &crate::config::Profile,
        prior: Option<&MemberRecord>,
        req: &SpawnRequest,
        cwd: Option<String>,
    ) -> Result<
        (
            Vec<String>,
            Vec<(String, String)>,
            Option<String>,
            Option<crate::registry::state::Worktree>,
            String,
            Vec<String>,
        ),
        FleetError,
    > {
        let config = self.ctx.config();
        let charter_file = self.charter_file(name);
        let state_dir = self.ctx.state_dir.clone();
        let fleetd = self.ctx.fleetd_exe.clone();
        let kept = match prior {
            Some(_) => std::fs::read_to_string(&charter_file).ok(),
            None => None,
        };
        let charter = kept.unwrap_or_else(|| config.charters.compose(role));
        let charter_sha256 = sha256_hex(&charter);
        let want_worktree = req.worktree || prior.is_some_and(|p| p.worktree.is_some());
        let prior_wt = prior.and_then(|p| p.worktree.clone());
        let agent = profile.agent;
        let n = name.to_string();
        let work = tokio::task::spawn_blocking(move || {
            let fail = |what: &str, e: std::io::Error| {
                FleetError::internal(format!("the spawn of `{n}`"), format!("{what}: {e}"))
            };
            write_private(&charter_file, charter.as_bytes())
                .map_err(|e| fail("charter file", e))?;
            let worktree = if want_worktree {
                let from = cwd
                    .as_deref()
                    .map(std::path::PathBuf::from)
                    .or_else(|| std::env::current_dir().ok())
                    .unwrap_or_else(|| state_dir.clone());
                Some(crate::worktree::create(
                    &state_dir,
                    &n,
                    &from,
                    prior_wt.as_ref(),
                )?)
            } else {
                None
            };
            let cwd = worktree.as_ref().map(|w| w.path.clone()).or(cwd);
            let wiring = match agent {
                Some(kind) => {
                    let dir = state_dir.join("agents").join(&n);
                    let user = read_user_config(kind);
                    let w = crate::agents::wire(
                        kind,
                        &crate::agents::Member {
                            name: &n,
                            fleetd: &fleetd,
                            state_dir: &state_dir,
                            charter: &charter_file,
                            dir: &dir,
                            cwd: cwd.as_deref().map(std::path::Path::new),
                        },
                        &charter,
                        &user,
                    );
                    for (path, text) in &w.files {
                        write_private(path, text.as_bytes())
                            .map_err(|e| fail(&path.display().to_string(), e))?;
                    }
                    for (target, link) in &w.links {
                        let _ = std::fs::remove_file(link);
                        std::os::unix::fs::symlink(target, link)
                            .map_err(|e| fail(&link.display().to_string(), e))?;
                    }
                    w
                }
                None => crate::agents::Wiring::default(),
            };
            Ok::<_, FleetError>((wiring, worktree, cwd))
        });
        let (wiring, worktree, cwd) = work.await.map_err(|e| {
            FleetError::internal("fleet_spawn", format!("the preparation failed: {e}"))
        })??;
        let fleetd = self.ctx.fleetd_exe.display().to_string();
        let mut env: Vec<(String, String)> = vec![
            (
                "FLEETD_STATE_DIR".into(),
                self.ctx.state_dir.display().to_string(),
            ),
            ("FLEETD_MEMBER".into(), name.to_string()),
            ("FLEETD_ROLE".into(), role.to_string()),
            (
                "FLEETD_CHARTER_FILE".into(),
                self.charter_file(name).display().to_string(),
            ),
            ("TERM".into(), "xterm-256color".into()),
        ];
        env.extend(wiring.env.clone());
        env.extend(
            profile
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace("{fleetd}", &fleetd))),
        );
        Ok((
            wiring.args,
            env,
            cwd,
            worktree,
            charter_sha256,
            wiring.summary,
        ))
    }

    fn check_size(&self, what: &str, text: &str) -> Result<(), FleetError> {
        let max = self.ctx.config().injector.max_message_bytes;
        if text.len() > max {
            return Err(FleetError::invalid(
                what,
                format!(
                    "the message is {} bytes; the limit is injector.max_message_bytes = {max}",
                    text.len()
                ),
                format!(
                    "a message of at most {max} bytes (put long content in a file and send its path)"
                ),
            ));
        }
        if text.trim().is_empty() {
            return Err(FleetError::invalid(
                what,
                "the message is empty",
                "a non-empty message",
            ));
        }
        Ok(())
    }

    /// Open a ticket and queue its message, committing both in one transaction (the injector's,
    /// or the post office's for `Via::Mail`); the ticket never dangles: if the queue refuses,
    /// it is recorded as undeliverable.
    async fn ticketed(
        &self,
        kind: TicketKind,
        from: Party,
        to: &MemberName,
        body: String,
        origin: Option<Origin>,
        via: Via,
    ) -> Result<Ticket, FleetError> {
        let c = self.ctx.config();
        let msg_id = self.ctx.alloc_msg_id();
        let (to2, body2) = (to.clone(), body.clone());
        let ttl_ms = c.tickets.ttl_seconds.saturating_mul(1000);
        let desk = self.desk().await?;
        let remote = match &via {
            Via::Injector => None,
            Via::Mail { receipt, .. } => Some(Box::new(receipt.clone())),
        };
        let ticket = desk
            .call(
                |reply| DeskMsg::Open {
                    kind,
                    from: from.clone(),
                    to: to2,
                    msg: Some(msg_id),
                    body: body2,
                    ttl_ms,
                    defer: true,
                    remote,
                    origin,
                    reply,
                },
                CALL,
            )
            .await??;
        let queued = match via {
            Via::Mail { mail, receipt } => mail
                .call(
                    |reply| MailMsg::Send {
                        host: receipt.host,
                        ticket: Box::new(ticket.clone()),
                        body,
                        reply,
                    },
                    CALL,
                )
                .await
                .and_then(|r| r.map(drop)),
            Via::Injector => {
                let msg = Message {
                    id: msg_id,
                    target: to.clone(),
                    from,
                    ticket: Some(ticket.id),
                    body,
                    state: ReceiptState::Queued,
                    queued_at: 0,
                    delivered_at: None,
                    settled_at: None,
                    note: None,
                    altered: None,
                };
                match self.injector(to).await {
                    Some(i) => i
                        .call(
                            |reply| InjectorMsg::Enqueue {
                                msg: Box::new(msg),
                                ticket: Some(Box::new(ticket.clone())),
                                reply,
                            },
                            CALL,
                        )
                        .await
                        .and_then(|r| r.map(drop)),
                    None => Err(FleetError::unavailable(
                        format!("message to `{to}`"),
                        "its injector is restarting",
                    )),
                }
            }
        };
        if let Err(e) = queued {
            // Never durable yet: this records it, as undeliverable, so it does not dangle.
            desk.cast(DeskMsg::Undeliverable {
                tickets: vec![(ticket.id, e.to_string())],
                requeued: false,
            });
            return Err(e);
        }
        // The ticket is durable now (with its message); tell a desk that restarted meanwhile.
        if let Ok(d) = self.desk().await {
            d.cast(DeskMsg::Known {
                ticket: Box::new(ticket.clone()),
            });
        }
        Ok(ticket)
    }

    /// Sends `message` from `caller` to the member `to` (or, as `NAME@HOST`, to another host's
    /// lead over the mail link). Returns once the message is durably queued, as a ticket the
    /// receiver answers with [`Fleet::reply`]; with `wait`, it waits up to `wait_secs` (capped by
    /// `tickets.send_wait_max_seconds`) for the answer, a tail or an expiry. The message reaches
    /// the terminal only when the target can take it, as one neutralised paste. Refused: a send
    /// to itself, an unknown or exited member, text over `limits.max_message_bytes`, and what
    /// Authz does not allow `caller`.
    pub async fn send(
        &self,
        caller: &Caller,
        to: &str,
        message: String,
        wait: bool,
        wait_secs: Option<u64>,
    ) -> Result<SendResult, FleetError> {
        if let Some((member, host)) = to.split_once('@') {
            return self
                .send_remote(caller, member, host, message, wait, wait_secs)
                .await;
        }
        authorize(caller, &Action::Send, "fleet_send")?;
        let from = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_send", "no party"))?;
        let to = member_name(to)?;
        let what = format!("fleet_send to `{to}`");
        self.check_size(&what, &message)?;
        if from.member() == Some(&to) {
            return Err(FleetError::invalid(
                what,
                "a member cannot send to itself",
                "a message to another member",
            ));
        }
        self.live_member(&to, &what).await?;
        let ticket = self
            .ticketed(TicketKind::Send, from, &to, message, None, Via::Injector)
            .await?;
        self.sent(ticket, wait, wait_secs).await
    }

    /// Answer a send: the ticket at once, or after a bounded wait for its answer.
    async fn sent(
        &self,
        ticket: Ticket,
        wait: bool,
        wait_secs: Option<u64>,
    ) -> Result<SendResult, FleetError> {
        if !wait {
            return Ok(SendResult {
                ticket: self.view(ticket).await,
                resolved: None,
            });
        }
        let max = self.ctx.config().tickets.send_wait_max_seconds;
        let secs = wait_secs.unwrap_or(max).min(max);
        let (t, resolved) = self.wait_ticket(ticket.id, secs).await?;
        Ok(SendResult {
            ticket: self.view(t).await,
            resolved: Some(resolved),
        })
    }

    /// `fleet_send` to `lead@HOST`: durable in this host's outbox before it returns, then
    /// carried by the post office until the other host holds it.
    async fn send_remote(
        &self,
        caller: &Caller,
        member: &str,
        host: &str,
        message: String,
        wait: bool,
        wait_secs: Option<u64>,
    ) -> Result<SendResult, FleetError> {
        let what = format!(
            "fleet_send to `{}@{}`",
            crate::types::truncate(member, 40),
            crate::types::truncate(host, 40)
        );
        authorize(caller, &Action::SendRemote, &what)?;
        let c = self.ctx.config();
        let accepted = || {
            let peers: Vec<String> = c.peers.keys().map(|p| format!("lead@{p}")).collect();
            if peers.is_empty() {
                "lead@HOST for a host in [peers] (none is configured)".to_string()
            } else {
                peers.join(", ")
            }
        };
        if member != "lead" {
            return Err(FleetError::invalid(
                what,
                "lead-to-lead mail goes to the other host's lead, addressed as `lead`",
                accepted(),
            ));
        }
        if host == c.daemon.host {
            return Err(FleetError::invalid(
                what,
                "that is this host; send to a member by name",
                accepted(),
            ));
        }
        if !c.peers.contains_key(host) {
            return Err(FleetError::not_found(
                what,
                format!("`{host}` is not a configured peer"),
                accepted(),
            ));
        }
        self.check_size(&what, &message)?;
        let mail = self.ctx.dir.mail().ok_or_else(|| {
            FleetError::unavailable(
                what.clone(),
                "the post office is not running (no [link] listen address, or it is restarting)",
            )
        })?;
        let from = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_send", "no party"))?;
        let receipt = RemoteReceipt {
            host: host.to_string(),
            state: ReceiptState::Queued,
            queued_at: self.ctx.now(),
            transmitted_at: None,
            delivered_at: None,
            settled_at: None,
            note: None,
            altered: crate::sanitize::for_terminal(&message).1.describe(),
        };
        let lead = MemberName::new("lead")?;
        let ticket = self
            .ticketed(
                TicketKind::Send,
                from,
                &lead,
                message,
                None,
                Via::Mail { mail, receipt },
            )
            .await?;
        self.sent(ticket, wait, wait_secs).await
    }

    /// Hand a message received from another host's lead to this host's primary (through its
    /// injector, as any message). Once only: a message that already has its ticket here is not
    /// handed on again. Refused while there is no live primary: it then stays held.
    pub async fn deliver_remote(
        &self,
        origin: Origin,
        from: MemberName,
        body: String,
    ) -> Result<TicketId, FleetError> {
        let desk = self.desk().await?;
        let o2 = origin.clone();
        if let Some(t) = desk
            .call(|reply| DeskMsg::ByOrigin { origin: o2, reply }, CALL)
            .await?
        {
            return Ok(t.id);
        }
        let primary = self.live_primary().await?.ok_or_else(|| {
            FleetError::unavailable(
                format!("mail from lead@{}", origin.host),
                "there is no live primary to take it; it stays in the coordinator's mailbox",
            )
        })?;
        let from = Party::Remote {
            member: from,
            host: origin.host.clone(),
        };
        let t = self
            .ticketed(
                TicketKind::Send,
                from,
                &primary.name,
                body,
                Some(origin),
                Via::Injector,
            )
            .await?;
        Ok(t.id)
    }

    async fn wait_ticket(&self, id: TicketId, secs: u64) -> Result<(Ticket, bool), FleetError> {
        let deadline = self.ctx.now() + secs * 1000;
        let desk = self.desk().await?;
        let out = desk
            .call(
                |reply| DeskMsg::Wait {
                    ticket: id,
                    deadline,
                    reply,
                },
                Duration::from_secs(secs + 5),
            )
            .await??;
        Ok(match out {
            WaitOutcome::Resolved(t) => (t, true),
            WaitOutcome::TimedOut(t) => (t, false),
        })
    }

    /// Answers `ticket` with `text`. Only the ticket's addressee may reply, once; a reply after
    /// the ticket expired is refused as late and kept visible on the ticket. Wakes a sender
    /// waiting on it, and, for mail from another host, sends the answer back over the link.
    pub async fn reply(
        &self,
        caller: &Caller,
        ticket: &str,
        text: String,
    ) -> Result<TicketView, FleetError> {
        let id: TicketId = ticket.parse()?;
        self.check_size(&format!("fleet_reply to {id}"), &text)?;
        let c = caller.clone();
        let t = self
            .desk()
            .await?
            .call(
                |reply| DeskMsg::Reply {
                    caller: c,
                    ticket: id,
                    text,
                    reply,
                },
                CALL,
            )
            .await??;
        Ok(self.view(t).await)
    }

    /// Asks `caller`'s lead (the live primary) `question` and waits up to
    /// `tickets.ask_wait_seconds` for its reply or its turn's tail; otherwise the ticket stays
    /// open and [`Fleet::poll`] shows the answer when it comes.
    pub async fn ask(&self, caller: &Caller, question: String) -> Result<AskResult, FleetError> {
        let lead = self.live_primary().await?;
        let lead_name = lead.as_ref().map(|m| m.name.clone());
        authorize(
            caller,
            &Action::Ask {
                lead: lead_name.as_ref(),
            },
            "fleet_ask",
        )?;
        let (Some(lead), Some(from)) = (lead, caller.party()) else {
            return Err(FleetError::internal(
                "fleet_ask",
                "authorized without a lead",
            ));
        };
        self.check_size("fleet_ask", &question)?;
        let ticket = self
            .ticketed(
                TicketKind::Ask,
                from,
                &lead.name,
                format!("question: {question}"),
                None,
                Via::Injector,
            )
            .await?;
        let secs = self.ctx.config().tickets.ask_wait_seconds;
        let (t, _) = self.wait_ticket(ticket.id, secs).await?;
        let (answered, answer, note) = match t.state {
            TicketState::Replied => (
                true,
                t.reply.as_ref().map(|r| r.text.clone()),
                "your lead answered".to_string(),
            ),
            TicketState::Tail => (
                true,
                t.tail.as_ref().map(|r| r.text.clone()),
                "your lead ended its turn without fleet_reply; this is its transcript tail"
                    .to_string(),
            ),
            TicketState::Open => (
                false,
                None,
                format!(
                    "no answer within {secs} s (tickets.ask_wait_seconds); fleet_poll shows {} when it comes",
                    t.id
                ),
            ),
            other => (
                false,
                None,
                format!("the question could not be answered: {other:?}"),
            ),
        };
        Ok(AskResult {
            ticket: self.view(t).await,
            answered,
            answer,
            note,
        })
    }

    /// The tickets `caller` sent whose answers it has not acknowledged yet.
    pub async fn poll(&self, caller: &Caller) -> Result<Vec<TicketView>, FleetError> {
        authorize(caller, &Action::Read, "fleet_poll")?;
        let party = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_poll", "no party"))?;
        let ts = self
            .desk()
            .await?
            .call(|reply| DeskMsg::Poll { party, reply }, CALL)
            .await?;
        let mut out = vec![];
        for t in ts {
            out.push(self.view(t).await);
        }
        Ok(out)
    }

    /// Acknowledges an answered ticket of `caller`'s, so [`Fleet::poll`] stops showing it.
    pub async fn ack(&self, caller: &Caller, ticket: &str) -> Result<(), FleetError> {
        authorize(caller, &Action::Read, "fleet_ack")?;
        let id: TicketId = ticket.parse()?;
        let party = caller
            .party()
            .ok_or_else(|| FleetError::internal("fleet_ack", "no party"))?;
        self.desk()
            .await?
            .call(
                |reply| DeskMsg::Ack {
                    party,
                    ticket: id,
                    reply,
                },
                CALL,
            )
            .await?
    }

    /// One ticket, if the caller opened it, owns it, or is the operator.
    pub async fn ticket(&self, caller: &Caller, ticket: &str) -> Result<TicketView, FleetError> {
        authorize(caller, &Action::Read, "ticket lookup")?;
        let id: TicketId = ticket.parse()?;
        let t = self
            .desk()
            .await?
            .call(|reply| DeskMsg::Get { ticket: id, reply }, CALL)
            .await?
            .ok_or_else(|| {
                FleetError::not_found(
                    format!("ticket {id}"),
                    "no such ticket",
                    "a ticket id from fleet_send",
                )
            })?;
        authorize(
            caller,
            &Action::ReadOwn {
                from: &t.from,
                to: &t.to,
            },
            &format!("lookup of {id}"),
        )?;
        Ok(self.view(t).await)
    }

    /// Tickets: all of them for the operator; for a member, those it opened or was sent.
    pub async fn tickets(&self, caller: &Caller) -> Result<Vec<TicketView>, FleetError> {
        authorize(caller, &Action::Read, "ticket listing")?;
        let all = self
            .desk()
            .await?
            .call(|reply| DeskMsg::All { reply }, CALL)
            .await?;
        let mut out = vec![];
        for t in all {
            let visible = authorize(
                caller,
                &Action::ReadOwn {
                    from: &t.from,
                    to: &t.to,
                },
                "ticket listing",
            );
            if visible.is_ok() {
                out.push(self.view(t).await);
            }
        }
        Ok(out)
    }

    /// The receipt of message `id`: its state (queued, delivered, accepted, ...) and when.
    pub async fn message(&self, caller: &Caller, id: &str) -> Result<Receipt, FleetError> {
        authorize(caller, &Action::Read, "receipt lookup")?;
        let id: MsgId = id.parse()?;
        let m = self
            .ctx
            .store
            .run(move |s| s.message(id))
            .await?
            .ok_or_else(|| {
                FleetError::not_found(
                    format!("message {id}"),
                    "no such message",
                    "a message id from a ticket",
                )
            })?;
        authorize(
            caller,
            &Action::ReadOwn {
                from: &m.from,
                to: &m.target,
            },
            &format!("lookup of {id}"),
        )?;
        Ok(Receipt::from(&m))
    }

    /// The members with their status, role, lineage and slots; the coordinator row only for
    /// the callers the coordinator gate shows it to.
    pub async fn list(&self, caller: &Caller) -> Result<ListView, FleetError> {
        authorize(caller, &Action::Read, "fleet_list")?;
        let members = self.registry_members().await?;
        let architect_slots = self
            .registry()
            .await?
            .call(|reply| RegistryMsg::Slots { reply }, CALL)
            .await?;
        let host = self.ctx.config().daemon.host.clone();
        // The gate runs before the row is built: other callers never cause it to be assembled.
        let coordinator = if coordinator_row_visible(caller) {
            Some(self.coordinator_row(&members, &host).await)
        } else {
            None
        };
        let mut members: Vec<MemberView> = members.iter().map(MemberView::from).collect();
        members.sort_by_key(|m| (m.status == Status::Exited, m.spawned_at));
        let open_decisions = coordinator_row_visible(caller).then(|| self.open_decisions());
        Ok(ListView {
            host,
            members,
            architect_slots,
            coordinator,
            open_decisions,
        })
    }

    async fn coordinator_row(&self, members: &[MemberRecord], host: &str) -> CoordinatorRow {
        let primary = crate::registry::state::live_primary(members);
        let queue = match primary.and_then(|p| self.ctx.dir.injector(&p.name)) {
            Some(i) => i
                .call(|reply| InjectorMsg::Queue { reply }, CALL)
                .await
                .ok(),
            None => None,
        };
        let held: Vec<&Message> = queue
            .as_ref()
            .map(|q| q.queued.iter().collect())
            .unwrap_or_default();
        // Mail from other hosts' leads that is not in the queue yet (no live primary to take it).
        let (remote, remote_total) = {
            let v = self.ctx.mail_view.read().unwrap_or_else(|p| p.into_inner());
            (
                v.held.iter().take(3).cloned().collect::<Vec<_>>(),
                v.held_total,
            )
        };
        let n = held.len() + remote_total;
        CoordinatorRow {
            coord_id: format!("{host}/{}", std::process::id()),
            mailbox: MailboxRow {
                state: match (primary.is_some(), n == 0) {
                    (false, _) => "no-primary",
                    (true, true) => "empty",
                    (true, false) => "holding",
                },
                held: n,
                preview: held
                    .iter()
                    .map(|m| {
                        format!(
                            "{} from {}: {}",
                            m.id,
                            m.from,
                            crate::tickets::state::subject_of(&m.body)
                        )
                    })
                    .chain(remote.iter().map(|r| format!("held from {r}")))
                    .take(3)
                    .collect(),
            },
            // Reachability of every peer host (up/down since, last RTT).
            peers: self
                .ctx
                .link_views()
                .into_iter()
                .filter_map(|v| serde_json::to_value(v).ok())
                .collect(),
        }
    }

    /// The daemon's health: members by status, open tickets, the supervisor's children and
    /// their restarts, the ledger, links and drift.
    pub async fn daemon_status(&self, caller: &Caller) -> Result<DaemonStatus, FleetError> {
        authorize(caller, &Action::Read, "fleet_status")?;
        let members = self.registry_members().await?;
        let mut by_status = BTreeMap::new();
        for m in &members {
            *by_status.entry(m.status.to_string()).or_insert(0) += 1;
        }
        let open_tickets = self.open_tickets().await?;
        let children = match self
            .sup
            .call(|reply| SupervisorMsg::Children { reply }, Some(CALL))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(c)) => c,
            _ => vec![],
        };
        let now = self.ctx.now();
        let escalation = self
            .ctx
            .escalation
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        Ok(DaemonStatus {
            host: self.ctx.config().daemon.host.clone(),
            version: env!("CARGO_PKG_VERSION"),
            pid: std::process::id(),
            state_dir: self.ctx.state_dir.display().to_string(),
            started_at: self.ctx.started_at,
            uptime_ms: now.saturating_sub(self.ctx.started_at),
            members: by_status,
            open_tickets,
            children,
            escalation,
            public_key: crate::keys::public_text(&self.ctx.host_key.verifying_key()),
            ledger_vkey: crate::keys::vkey(
                &self.ctx.ledger_origin(),
                &self.ctx.host_key.verifying_key(),
            ),
            witness_vkey: crate::keys::cosigner_vkey(
                &self.ctx.witness_name(),
                &self.ctx.host_key.verifying_key(),
            ),
            ledger: match self.ctx.dir.ledger() {
                Ok(l) => l.call(|reply| LedgerMsg::Status { reply }, CALL).await.ok(),
                Err(_) => None,
            },
            open_decisions: self.open_decisions(),
            drift_alerts: {
                let a = self.ctx.drift.alerts();
                a[a.len().saturating_sub(10)..].to_vec()
            },
            untrusted_peers: self
                .ctx
                .drift
                .reports()
                .into_iter()
                .filter(|r| r.verdict == "untrusted")
                .map(|r| r.peer)
                .collect(),
        })
    }

    fn open_decisions(&self) -> Vec<DecisionSummary> {
        let now = self.ctx.now();
        self.ctx
            .decision_views()
            .iter()
            .filter(|d| d.is_open())
            .map(|d| DecisionSummary::of(d, now))
            .collect()
    }

    // ---- decisions --------------------------------------------------------------------

    /// `fleet_decision open` (primary only): convene slots on a subject, with a deadline fixed
    /// by the daemon's clock and a round cap. Durable in the ledger before it returns.
    pub async fn decision_open(
        &self,
        caller: &Caller,
        req: OpenRequest,
    ) -> Result<Decision, FleetError> {
        let author = authorize_decide(caller, "fleet_decision open")?;
        let now = self.ctx.now();
        let deadline_ms = match (&req.deadline, req.deadline_secs) {
            (Some(t), None) => chrono::DateTime::parse_from_rfc3339(t)
                .map(|t| t.timestamp_millis().max(0) as Millis)
                .map_err(|e| {
                    FleetError::invalid(
                        "fleet_decision open",
                        format!("deadline {t:?} is not RFC 3339: {e}"),
                        "e.g. 2026-12-02T18:00:00Z, or deadline_secs",
                    )
                })?,
            (None, Some(secs)) => now + secs.saturating_mul(1000),
            _ => {
                return Err(FleetError::invalid(
                    "fleet_decision open",
                    "it needs exactly one of deadline and deadline_secs",
                    "deadline (RFC 3339) or deadline_secs (seconds from now)",
                ));
            }
        };
        let max_rounds = req.max_rounds.unwrap_or(2);
        let configured: Vec<String> = self.ctx.config().architects.keys().cloned().collect();
        validate_open(
            &req.subject,
            &req.slots,
            &configured,
            deadline_ms,
            max_rounds,
            now,
        )?;
        let id = self.ctx.alloc_decision_id();
        let event = DecisionEvent::Open {
            decision: id,
            subject: req.subject,
            slots: req.slots,
            deadline: crate::clock::rfc3339(deadline_ms),
            max_rounds,
        };
        let entry = ledger_append(&self.ctx, author, event).await?;
        let d = Decision::opened(&entry).ok_or_else(|| {
            FleetError::internal("fleet_decision open", "the entry is not an open")
        })?;
        self.ctx.put_decision(d.clone());
        self.ctx.events.emit(crate::events::EventKind::Decision {
            decision: id,
            action: "open".into(),
            slot: None,
            outcome: None,
            ledger_seq: Some(entry.seq),
        });
        tracing::info!(decision = %id, slots = ?d.slots, deadline = %d.deadline, "decision opened");
        self.start_decision(id).await?;
        Ok(d)
    }

    fn decision_id(id: &str) -> Result<DecisionId, FleetError> {
        id.parse()
    }

    async fn decision_actor(
        &self,
        id: DecisionId,
        what: &str,
    ) -> Result<Mailbox<DecisionMsg>, FleetError> {
        match self.ctx.decision_view(id) {
            None => Err(FleetError::not_found(
                what,
                format!("there is no decision {id}"),
                "a decision id from fleet_decision open or fleetd decision list",
            )),
            Some(d) if !d.is_open() => Err(FleetError::conflict(
                what,
                format!(
                    "{id} is closed ({})",
                    d.closed
                        .map(|c| format!("{:?}", c.outcome).to_lowercase())
                        .unwrap_or_default()
                ),
                "a call on an open decision",
            )),
            Some(_) => self
                .ctx
                .dir
                .wait_for(|d| d.decision(id), RIDE_OUT)
                .await
                .ok_or_else(|| FleetError::unavailable(what, "its record is restarting")),
        }
    }

    /// `fleet_decision position` (architect only): the slot, round and time come from the
    /// connection and the daemon's clock.
    pub async fn decision_record(
        &self,
        caller: &Caller,
        id: &str,
        round: u32,
        kind: &str,
        content: String,
    ) -> Result<Entry, FleetError> {
        let what = "fleet_decision position";
        crate::decision::state::authorize_position(caller, what)?;
        let abstain = match kind {
            "position" => false,
            "abstain" => true,
            other => {
                return Err(FleetError::invalid(
                    what,
                    format!("kind {other:?} is not a kind"),
                    "position or abstain",
                ));
            }
        };
        let id = Self::decision_id(id)?;
        let a = self.decision_actor(id, what).await?;
        let c = caller.clone();
        a.call(
            |reply| DecisionMsg::Record {
                caller: c,
                round,
                abstain,
                content,
                reply,
            },
            Duration::from_secs(40),
        )
        .await?
    }

    /// `fleet_decision close` (primary only): refused unless every convened slot has a terminal
    /// outcome. The daemon never reads the verdict for meaning.
    pub async fn decision_close(
        &self,
        caller: &Caller,
        id: &str,
        verdict: String,
        rationale: String,
    ) -> Result<Decision, FleetError> {
        let what = "fleet_decision close";
        authorize_decide(caller, what)?;
        let id = Self::decision_id(id)?;
        let a = self.decision_actor(id, what).await?;
        let c = caller.clone();
        a.call(
            |reply| DecisionMsg::Close {
                caller: c,
                verdict,
                rationale,
                reply,
            },
            Duration::from_secs(40),
        )
        .await??;
        self.ctx
            .decision_view(id)
            .ok_or_else(|| FleetError::internal(what, "closed decision vanished"))
    }

    /// One decision, whole (READ).
    pub fn decision_show(&self, caller: &Caller, id: &str) -> Result<Decision, FleetError> {
        authorize(caller, &Action::Read, "decision show")?;
        let id = Self::decision_id(id)?;
        self.ctx.decision_view(id).ok_or_else(|| {
            FleetError::not_found(
                format!("decision {id}"),
                "no such decision",
                "a decision id from fleetd decision list",
            )
        })
    }

    /// Every decision, newest first (READ).
    pub fn decision_list(&self, caller: &Caller) -> Result<Vec<DecisionSummary>, FleetError> {
        authorize(caller, &Action::Read, "decision list")?;
        let now = self.ctx.now();
        let mut v: Vec<DecisionSummary> = self
            .ctx
            .decision_views()
            .iter()
            .map(|d| DecisionSummary::of(d, now))
            .collect();
        v.reverse();
        Ok(v)
    }

    /// One member in detail: its record, status and why, queue and receipts.
    pub async fn member_status(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<MemberDetail, FleetError> {
        authorize(caller, &Action::Read, "fleet_status")?;
        let name = member_name(name)?;
        let rec = self.member(&name).await?.ok_or_else(|| {
            FleetError::not_found(
                format!("status of `{name}`"),
                "no such member",
                "a name from fleet_list",
            )
        })?;
        let slot_view = match self.ctx.dir.slot(&name) {
            Some(s) => s.call(|reply| SlotMsg::View { reply }, CALL).await.ok(),
            None => None,
        };
        // A screen's text is shown to its member and the operator only.
        let shown = authorize(caller, &Action::Screen { member: &name }, "screen").is_ok();
        let slot_view = slot_view.map(|mut v| {
            if !shown {
                v.screen = String::new();
            }
            v
        });
        let queue = match self.ctx.dir.injector(&name) {
            Some(i) => i
                .call(|reply| InjectorMsg::Queue { reply }, CALL)
                .await
                .ok(),
            None => None,
        };
        let n2 = name.clone();
        let owes = self
            .desk()
            .await?
            .call(|reply| DeskMsg::All { reply }, CALL)
            .await?
            .into_iter()
            .filter(|t| t.to == n2 && t.state == TicketState::Open)
            .map(|t| t.id)
            .collect();
        let mut member = MemberView::from(&rec);
        if let Some(v) = &slot_view {
            member.status = v.status;
            member.status_since = v.status_since;
        }
        Ok(MemberDetail {
            member,
            slot_view,
            queue,
            owes,
        })
    }

    /// Stops member `name`: at once (its queued messages are settled as undeliverable), or
    /// with `drain` after its queue has been delivered. Its terminal is hung up and, past the
    /// grace period, killed; its record stays (`spawn` with `resume` continues its agent's
    /// session, if the agent reported one).
    pub async fn stop(
        &self,
        caller: &Caller,
        name: &str,
        drain: bool,
    ) -> Result<MemberView, FleetError> {
        authorize(
            caller,
            &if drain { Action::Drain } else { Action::Stop },
            "fleet_stop",
        )?;
        let name = member_name(name)?;
        let what = format!("fleet_stop of `{name}`");
        self.live_member(&name, &what).await?;
        if drain {
            self.drain(&name).await?;
        }
        let slot = self
            .slot(&name)
            .await
            .ok_or_else(|| FleetError::unavailable(what.clone(), "its slot is restarting"))?;
        let who = caller.describe();
        let grace = self.ctx.config().lifecycle.stop_grace_ms;
        let reason = format!(
            "stopped by {who}{}",
            if drain { " after draining" } else { "" }
        );
        slot.call(
            |reply| SlotMsg::Stop { reason, reply },
            Duration::from_millis(grace + 5_000),
        )
        .await?;
        // The slot told the injector of the exit before it answered. A call queued behind that
        // returns once the injector has failed every queued message and handed their tickets
        // to the desk (or has stopped); the desk's `Settled` then waits until it has settled
        // them (a chunk at a time, serving others in between), so when a stop returns, a
        // listing shows them settled.
        if let Some(i) = self.ctx.dir.injector(&name) {
            let _ = i.call(|reply| InjectorMsg::Queue { reply }, CALL).await;
            if let Ok(desk) = self.desk().await {
                let _ = desk
                    .call(|reply| DeskMsg::Settled { reply }, Duration::from_secs(60))
                    .await;
            }
        }
        let rec = self
            .member(&name)
            .await?
            .ok_or_else(|| FleetError::internal(what, "member vanished"))?;
        Ok(MemberView::from(&rec))
    }

    /// How many messages wait for `name` (the one being delivered included); `None` when it
    /// has no injector (exited). For metrics: no authorization, no member text.
    pub async fn queue_depth(&self, name: &MemberName) -> Option<usize> {
        let i = self.ctx.dir.injector(name)?;
        i.call(|reply| InjectorMsg::Depth { reply }, CALL)
            .await
            .ok()
    }

    /// Every live member's queue depth (as `queue_depth`), for the dashboard and metrics (READ).
    pub async fn queue_depths(
        &self,
        caller: &Caller,
    ) -> Result<BTreeMap<MemberName, usize>, FleetError> {
        authorize(caller, &Action::Read, "queue depths")?;
        let mut out = BTreeMap::new();
        for m in self
            .registry_members()
            .await?
            .iter()
            .filter(|m| m.is_live())
        {
            if let Some(depth) = self.queue_depth(&m.name).await {
                out.insert(m.name.clone(), depth);
            }
        }
        Ok(out)
    }

    /// How many tickets are open (counted at the desk).
    pub async fn open_tickets(&self) -> Result<usize, FleetError> {
        Ok(self
            .desk()
            .await?
            .call(|reply| DeskMsg::All { reply }, CALL)
            .await?
            .iter()
            .filter(|t| t.state == TicketState::Open)
            .count())
    }

    /// The decision ledger's writer's status (entries, sync times), if it answers. For metrics.
    pub async fn ledger_status(&self) -> Option<LedgerStatus> {
        let l = self.ctx.dir.ledger().ok()?;
        l.call(|reply| LedgerMsg::Status { reply }, CALL).await.ok()
    }

    /// Wait until `name` has nothing queued or in flight and is idle (bounded by the ticket TTL).
    async fn drain(&self, name: &MemberName) -> Result<(), FleetError> {
        let (_, mut rx) = self.ctx.events.subscribe(u64::MAX);
        let deadline = tokio::time::Instant::now()
            + Duration::from_secs(self.ctx.config().tickets.ttl_seconds);
        loop {
            let depth = self.queue_depth(name).await;
            let v = match self.ctx.dir.slot(name) {
                Some(s) => s.call(|reply| SlotMsg::View { reply }, CALL).await.ok(),
                None => None,
            };
            let empty = depth.is_none_or(|d| d == 0);
            let idle = v.is_none_or(|v| matches!(v.status, Status::Idle | Status::Exited));
            if empty && idle {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Ok(_)) | Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) => return Ok(()),
                Err(_) => {
                    return Err(FleetError::timeout(
                        format!("drain of `{name}`"),
                        "its queue did not empty within the ticket TTL",
                        "fleet_stop without drain",
                    ));
                }
            }
        }
    }

    /// A status report from inside a member's process tree: `fleetd signal STATE`, or an agent
    /// hook's payload (`fleetd signal --hook`). Records the agent's session id for resume.
    pub async fn signal(
        &self,
        caller: &Caller,
        req: SignalRequest,
    ) -> Result<SignalAck, FleetError> {
        let report = match (&req.status, &req.hook) {
            (Some(state), None) => crate::hooks::Report {
                event: state.clone(),
                signal: Some(crate::hooks::from_state(state)?),
                session_id: None,
            },
            (None, Some(payload)) => crate::hooks::from_payload(payload)?,
            _ => {
                return Err(FleetError::invalid(
                    "fleetd signal",
                    "give either a state or a hook payload",
                    format!("{{status: {}}} or {{hook: PAYLOAD}}", crate::hooks::STATES),
                ));
            }
        };
        authorize(caller, &Action::Signal, "fleetd signal")?;
        let Caller::Member(m) = caller else {
            return Err(FleetError::internal(
                "fleetd signal",
                "an authorized signal has no member",
            ));
        };
        if let Some(id) = &report.session_id
            && let Ok(r) = self.registry().await
        {
            r.cast(RegistryMsg::Session {
                name: m.name.clone(),
                id: id.clone(),
            });
        }
        let signal = report.signal.clone();
        if let Some(signal) = signal {
            let slot = self.slot(&m.name).await.ok_or_else(|| {
                FleetError::unavailable("fleetd signal", "the member's slot is restarting")
            })?;
            slot.call(|reply| SlotMsg::Signal { signal, reply }, CALL)
                .await??;
        }
        Ok(SignalAck {
            member: m.name.clone(),
            event: report.event,
            signal: report.signal.as_ref().map(|s| s.name().to_string()),
            session_id: report.session_id,
        })
    }

    /// A member's MCP session listed the fleet tools: its first turn can use them.
    pub async fn tools_listed(&self, caller: &Caller) {
        if let Caller::Member(m) = caller
            && let Some(slot) = self.slot(&m.name).await
        {
            slot.cast(SlotMsg::ToolsListed);
        }
    }

    /// Attach: the current screen and a live stream of the terminal's output (operator only).
    pub async fn attach(
        &self,
        caller: &Caller,
        name: &str,
    ) -> Result<(Vec<u8>, broadcast::Receiver<Vec<u8>>), FleetError> {
        authorize(caller, &Action::Terminal, "attach")?;
        let name = member_name(name)?;
        let slot = self.slot_of(&name).await?;
        slot.call(|reply| SlotMsg::Attach { reply }, CALL).await
    }

    /// Keys from an attached operator.
    pub async fn input(
        &self,
        caller: &Caller,
        name: &str,
        bytes: Vec<u8>,
    ) -> Result<(), FleetError> {
        authorize(caller, &Action::Terminal, "terminal input")?;
        let name = member_name(name)?;
        let slot = self.slot_of(&name).await?;
        slot.call(|reply| SlotMsg::Input { bytes, reply }, CALL)
            .await?
    }

    /// Resizes member `name`'s terminal (operator only; sizes out of bounds are refused).
    pub async fn resize(
        &self,
        caller: &Caller,
        name: &str,
        rows: u16,
        cols: u16,
    ) -> Result<(), FleetError> {
        authorize(caller, &Action::Terminal, "terminal resize")?;
        let name = member_name(name)?;
        if let Some(why) = crate::term::size_problem(rows, cols) {
            return Err(FleetError::invalid(
                format!("resizing `{name}`'s terminal"),
                why,
                "the size of a real terminal (`fleetd attach` sends yours)",
            ));
        }
        let slot = self.slot_of(&name).await?;
        slot.cast(SlotMsg::Resize { rows, cols });
        Ok(())
    }

    async fn slot_of(&self, name: &MemberName) -> Result<Mailbox<SlotMsg>, FleetError> {
        self.live_member(name, &format!("terminal of `{name}`"))
            .await?;
        self.slot(name).await.ok_or_else(|| {
            FleetError::unavailable(format!("terminal of `{name}`"), "its slot is restarting")
        })
    }

    /// Debug builds only: make an actor panic, to exercise supervision.
    pub async fn inject_fault(&self, caller: &Caller, target: &str) -> Result<(), FleetError> {
        authorize(caller, &Action::Admin, "fault injection")?;
        if !cfg!(debug_assertions) {
            return Err(FleetError::invalid(
                "fault injection",
                "this is a release build",
                "a debug build",
            ));
        }
        if let Some(id) = target.strip_prefix("decision:") {
            let id: DecisionId = id.parse()?;
            self.ctx
                .dir
                .decision(id)
                .ok_or_else(|| {
                    FleetError::not_found(target, "no such open decision", "decision:d-N")
                })?
                .cast(DecisionMsg::Panic);
            return Ok(());
        }
        let hook = self
            .ctx
            .fault_hooks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(target)
            .cloned();
        if let Some(h) = hook {
            h();
            return Ok(());
        }
        if let Some(peer) = target.strip_prefix("drift:") {
            let a = self.ctx.drift.puller(peer).ok_or_else(|| {
                FleetError::not_found(target, "no such drift puller", "drift:PEER")
            })?;
            let _ = a.cast(crate::drift::actor::PullerMsg::Panic);
            return Ok(());
        }
        match target {
            "registry" => self.registry().await?.cast(RegistryMsg::Panic),
            "tickets" => self.desk().await?.cast(DeskMsg::Panic),
            "mail" => self
                .ctx
                .dir
                .mail()
                .ok_or_else(|| {
                    FleetError::not_found(
                        target,
                        "no post office is running",
                        "mail with [link] configured",
                    )
                })?
                .cast(MailMsg::Panic),
            t => {
                let (kind, name) = t.split_once(':').unwrap_or(("slot", t));
                let name = member_name(name)?;
                match kind {
                    "slot" => self
                        .slot(&name)
                        .await
                        .ok_or_else(|| FleetError::not_found(t, "no such slot", "slot:NAME"))?
                        .cast(SlotMsg::Panic),
                    "injector" => self
                        .injector(&name)
                        .await
                        .ok_or_else(|| {
                            FleetError::not_found(t, "no such injector", "injector:NAME")
                        })?
                        .cast(InjectorMsg::Panic),
                    _ => {
                        return Err(FleetError::invalid(
                            t,
                            "unknown fault target",
                            "registry, tickets, mail, slot:NAME, injector:NAME, decision:d-N, drift:PEER or link:PEER",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Swap in a new config and tell every actor to re-read what it uses.
    pub async fn reload(&self, config: crate::config::Config) {
        self.ctx.set_config(config);
        if let Ok(r) = self.ctx.dir.registry() {
            r.cast(RegistryMsg::Reload);
        }
        if let Ok(t) = self.ctx.dir.tickets() {
            t.cast(DeskMsg::Reload);
        }
        for n in self.live_members().await.unwrap_or_default() {
            if let Some(s) = self.ctx.dir.slot(&n) {
                s.cast(SlotMsg::Reload);
            }
            if let Some(i) = self.ctx.dir.injector(&n) {
                i.cast(InjectorMsg::Reload);
            }
        }
    }

    /// Live members (for shutdown with `on_shutdown = "stop"`).
    pub async fn live_members(&self) -> Result<Vec<MemberName>, FleetError> {
        Ok(self
            .registry_members()
            .await?
            .into_iter()
            .filter(|m| m.is_live())
            .map(|m| m.name)
            .collect())
    }

    /// Stop every child in reverse start order within `deadline`, then the supervisor.
    /// Returns the children that had to be killed.
    /// A shutdown's first step, before anything is stopped or saved: no injector starts a
    /// delivery from now, and a paste already handed to a terminal host gets until `wait` to
    /// be confirmed written. Returns the deliveries still unconfirmed: the stop is then not
    /// clean, and the next start resolves them from the host's record.
    pub async fn quiesce(&self, wait: Duration) -> Vec<String> {
        let names = self.ctx.dir.injector_names();
        let mut quiet = tokio::task::JoinSet::new();
        for i in names.iter().filter_map(|n| self.ctx.dir.injector(n)) {
            quiet.spawn(async move {
                let _ = i
                    .call(
                        |reply| InjectorMsg::Quiesce { reply },
                        Duration::from_secs(1),
                    )
                    .await;
            });
        }
        quiet.join_all().await;
        let mut settle = tokio::task::JoinSet::new();
        for (n, slot) in names
            .into_iter()
            .filter_map(|n| self.ctx.dir.slot(&n).map(|s| (n, s)))
        {
            settle.spawn(async move {
                if slot
                    .call(|reply| SlotMsg::Settled { reply }, wait)
                    .await
                    .is_ok()
                {
                    return None;
                }
                let id = slot
                    .call(|reply| SlotMsg::Unconfirmed { reply }, Duration::from_secs(1))
                    .await
                    .ok()
                    .flatten()?;
                Some(format!(
                    "the paste of {id} to `{n}` was not confirmed written within {} ms; the next start resolves it from its terminal's record",
                    wait.as_millis()
                ))
            });
        }
        settle.join_all().await.into_iter().flatten().collect()
    }

    /// Stops the whole actor tree within `deadline`, leaving the members' terminals running
    /// for the next daemon; returns the children that did not stop in time.
    pub async fn shutdown(&self, deadline: Duration) -> Vec<String> {
        let hung = match self
            .sup
            .call(
                |reply| SupervisorMsg::Shutdown { deadline, reply },
                Some(deadline + Duration::from_secs(2)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(h)) => h,
            _ => vec!["supervisor".into()],
        };
        self.sup.stop(Some("shutdown".into()));
        hung
    }
}

/// Where a ticketed message is queued, in the same commit as its ticket.
enum Via {
    /// The target member's injector, on this host.
    Injector,
    /// This host's outbox to another host's lead (`receipt.host`).
    Mail {
        mail: Mailbox<MailMsg>,
        receipt: RemoteReceipt,
    },
}

/// What a spawn reads of the user's own configuration for an agent CLI whose wiring builds on
/// it (bounded: a settings file over 1 MiB is left out, as are more than 1,000 entries).
fn read_user_config(kind: crate::config::AgentKind) -> crate::agents::UserConfig {
    let Some(home) = std::env::var_os("HOME") else {
        return Default::default();
    };
    let Some(dir) = crate::agents::user_config_dir(kind, std::path::Path::new(&home)) else {
        return Default::default();
    };
    let settings = std::fs::metadata(dir.join("settings.json"))
        .ok()
        .filter(|m| m.len() <= 1 << 20)
        .and_then(|_| std::fs::read_to_string(dir.join("settings.json")).ok());
    let entries = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .take(1_000)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    crate::agents::UserConfig {
        dir: Some(dir),
        settings,
        entries,
    }
}

/// A member's working directory must be an absolute path to a directory that exists (the
/// agent would otherwise start somewhere else, e.g. `$HOME`, and work there).
fn check_cwd(name: &MemberName, dir: &str) -> Result<(), FleetError> {
    let what = format!("the spawn of `{name}`");
    let accepted =
        "the absolute path of an existing directory (fleetd spawn sends the directory it runs in)";
    let path = std::path::Path::new(dir);
    if !path.is_absolute() {
        return Err(FleetError::invalid(
            what,
            format!("the working directory {dir:?} is not an absolute path"),
            accepted,
        ));
    }
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(FleetError::invalid(
            what,
            format!("the working directory {dir:?} is not a directory"),
            accepted,
        )),
        Err(e) => Err(FleetError::invalid(
            what,
            format!("the working directory {dir:?} cannot be used: {e}"),
            accepted,
        )),
    }
}

/// Write a file readable only by its owner, durably: a temporary beside it, fsync, rename,
/// fsync the directory (so the rename itself survives a crash).
pub fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_data()?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}
