//! The daemon's REST answers as the CLI reads them: each answer it prints for people is parsed
//! once into a type, and the printers read fields, never raw JSON.
//!
//! Where the daemon's own view type deserializes (members, spawns, tickets, sends, decisions,
//! agents) the CLI reads that very type; the answers that are not one reusable Rust type on the
//! daemon's side (they hold actor-internal views, or are built ad hoc) have a small type here
//! with only the fields the CLI shows, every one it would show as `-` optional.
//!
//! Owns which shape each answer must have and the refusal when it does not. Must never decide
//! anything the daemon decides, and never print (`print.rs` does); `--json` output never
//! passes through here.

use std::collections::BTreeMap;

use fleetd_actors::decision::state::Decision;
use fleetd_actors::error::FleetError;
use fleetd_actors::fleet::{DecisionSummary, MemberView, SendResult, SpawnView, TicketView};
use fleetd_actors::types::TicketId;
use serde::Deserialize;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde_json::Value;

use crate::doctor::AgentRow;

/// An answer the CLI knows the shape of.
pub(super) trait Answer: DeserializeOwned {
    /// The shape, for a person: what would be accepted.
    const SHAPE: &'static str;
}

/// Read the daemon's answer to `request` as `T`; refused (what, why, what would be accepted)
/// if it does not have that shape.
pub(super) fn parse<T: Answer>(v: &Value, request: &str) -> Result<T, FleetError> {
    T::deserialize(v).map_err(|e| {
        FleetError::invalid(
            format!("the daemon's answer to {request}"),
            format!("it does not read as {}: {e}", T::SHAPE),
            format!(
                "{} as a fleetd daemon of this version sends it (`--json` prints any answer as sent)",
                T::SHAPE
            ),
        )
    })
}

impl Answer for MemberView {
    const SHAPE: &'static str = "a member {name, role, slot, profile, parent, status, ...}";
}

impl Answer for SpawnView {
    const SHAPE: &'static str = "a spawned member {name, role, profile, pid, ..., notes}";
}

impl Answer for TicketView {
    const SHAPE: &'static str = "a ticket {id, kind, from, to, state, ..., receipt}";
}

impl Answer for Vec<TicketView> {
    const SHAPE: &'static str = "a list of tickets [{id, kind, from, to, state, ..., receipt}]";
}

impl Answer for SendResult {
    const SHAPE: &'static str = "a sent message {ticket: {id, to, state, ..., receipt}}";
}

impl Answer for Vec<DecisionSummary> {
    const SHAPE: &'static str = "a list of decisions [{id, state, age_ms, slots, missing, ...}]";
}

impl Answer for Decision {
    const SHAPE: &'static str = "a decision {id, subject, slots, records, refused, closed, ...}";
}

impl Answer for Vec<AgentRow> {
    const SHAPE: &'static str = "a list of agent profiles [{profile, agent, command, path, ...}]";
}

/// `GET /members`: the daemon's `ListView` (whose architect slots and coordinator row are
/// actor-internal views), as far as the table shows it.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Members {
    pub members: Vec<MemberView>,
    #[serde(default)]
    pub architect_slots: Vec<ArchitectSlot>,
    /// Absent for every caller but the primary and the operator.
    #[serde(default)]
    pub coordinator: Option<Coordinator>,
}

impl Answer for Members {
    const SHAPE: &'static str = "a member list {members: [...], architect_slots: [...]}";
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct ArchitectSlot {
    pub slot: Option<String>,
    pub state: Option<String>,
    pub member: Option<String>,
    /// Spawns queued for the slot.
    pub waiting: Option<u64>,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct Coordinator {
    pub coord_id: Option<String>,
    #[serde(default)]
    pub mailbox: Mailbox,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct Mailbox {
    pub state: Option<String>,
    pub held: Option<u64>,
}

/// `GET /members/NAME`: the daemon's `MemberDetail` (whose slot and queue views are
/// actor-internal), as far as `fleetd status NAME` and `stop --drain` show it.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct MemberDetail {
    #[serde(flatten)]
    pub member: MemberView,
    #[serde(default)]
    pub slot_view: Option<SlotBrief>,
    #[serde(default)]
    pub queue: Option<QueueBrief>,
    #[serde(default)]
    pub owes: Vec<TicketId>,
}

impl Answer for MemberDetail {
    const SHAPE: &'static str =
        "a member's status {name, role, status, ..., slot_view, queue, owes}";
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct SlotBrief {
    /// The status is held by a signal (a hook) rather than read from the screen.
    #[serde(default)]
    pub pinned_by_signal: bool,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct QueueBrief {
    /// The message being delivered, if one is.
    #[serde(default)]
    pub in_flight: Option<IgnoredAny>,
    #[serde(default)]
    pub queued: Vec<IgnoredAny>,
    /// The queue waits behind a stalled message.
    #[serde(default)]
    pub stalled: bool,
}

/// `GET /status`: the daemon's `DaemonStatus` (whose version is a static string and whose
/// children, ledger and alerts are actor-internal views), as far as `fleetd status` shows it.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct DaemonStatus {
    pub version: Option<String>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub started_at: Option<u64>,
    pub state_dir: Option<String>,
    /// Members by status.
    #[serde(default)]
    pub members: BTreeMap<String, u64>,
    pub open_tickets: Option<u64>,
    #[serde(default)]
    pub children: Vec<Child>,
    pub public_key: Option<String>,
    pub ledger: Option<Ledger>,
    pub ledger_vkey: Option<String>,
    pub witness_vkey: Option<String>,
    #[serde(default)]
    pub open_decisions: Vec<DecisionSummary>,
    pub escalation: Option<String>,
    /// Absent from a daemon older than the sandbox.
    pub sandbox: Option<fleetd_actors::sandbox::Status>,
}

impl Answer for DaemonStatus {
    const SHAPE: &'static str =
        "the daemon's status {version, host, pid, members, children, ledger, ...}";
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct Child {
    #[serde(default)]
    pub restarts_total: u64,
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct Ledger {
    pub entries: Option<u64>,
    /// Why the ledger fails verification, if it does.
    pub broken: Option<String>,
}

/// `GET /peers`: built ad hoc by the REST layer from the link views.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Peers {
    pub host: Option<String>,
    pub public_key: Option<String>,
    /// The link listener's address; none: links are off.
    pub listen: Option<String>,
    #[serde(default)]
    pub links: Vec<Link>,
}

impl Answer for Peers {
    const SHAPE: &'static str = "this host's links {host, public_key, listen, links: [...]}";
}

/// One link (the daemon's `LinkView`).
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Link {
    pub peer: Option<String>,
    pub addr: Option<String>,
    pub phase: Option<String>,
    pub since: Option<u64>,
    pub rtt_us: Option<u64>,
    pub dialled: Option<bool>,
    /// Why it is down.
    pub reason: Option<String>,
}

/// `GET /drift`: the daemon's drift `PeersView` (its reports and alerts are the drift core's
/// types, serialise-only).
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Drift {
    pub reader: Option<String>,
    pub heartbeat_secs: Option<u64>,
    pub last_pass: Option<String>,
    #[serde(default)]
    pub peers: Vec<DriftReport>,
    #[serde(default)]
    pub alerts: Vec<DriftAlert>,
}

impl Answer for Drift {
    const SHAPE: &'static str =
        "the drift reader's view {reader, heartbeat_secs, last_pass, peers: [...], alerts: [...]}";
}

/// One peer's drift report: the gates' outcomes and the verdict, as the protocol's words.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct DriftReport {
    pub peer: Option<String>,
    pub verdict: Option<String>,
    pub g1: Option<String>,
    pub g2: Option<String>,
    pub g3: Option<String>,
    pub g4: Option<String>,
    pub anchor: Option<String>,
    #[serde(default)]
    pub alerts: Vec<String>,
}

impl From<&fleetd_actors::drift::gates::Report> for DriftReport {
    fn from(r: &fleetd_actors::drift::gates::Report) -> Self {
        DriftReport {
            peer: Some(r.peer.clone()),
            verdict: Some(r.verdict.to_string()),
            g1: Some(r.g1.to_string()),
            g2: Some(r.g2.to_string()),
            g3: Some(r.g3.to_string()),
            g4: Some(r.g4.to_string()),
            anchor: r.anchor.clone(),
            alerts: r.alerts.clone(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
pub(super) struct DriftAlert {
    pub rule: Option<String>,
    pub peer: Option<String>,
    pub text: Option<String>,
}

/// `POST /config/reload`.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Reloaded {
    /// What changed, for a person.
    pub detail: Option<String>,
}

impl Answer for Reloaded {
    const SHAPE: &'static str = "a reload's outcome {reloaded, detail}";
}

#[cfg(test)]
mod tests {
    use super::super::samples;
    use super::*;
    use serde::Serialize;
    use serde_json::json;

    /// Read as the CLI reads it, serialised again as the daemon serialises it: the same JSON.
    fn round_trip<T: Answer + Serialize>(v: &Value) {
        let typed: T = parse(v, "a sample").unwrap_or_else(|e| panic!("{e}\n{v:#}"));
        assert_eq!(&serde_json::to_value(&typed).expect("serialises"), v);
    }

    #[test]
    fn the_daemons_own_views_read_back_exactly() {
        let at = samples::soon();
        round_trip::<SpawnView>(&samples::spawned(at));
        round_trip::<MemberView>(&serde_json::to_value(samples::member(at)).unwrap());
        round_trip::<Vec<TicketView>>(&samples::tickets(at));
        for t in samples::tickets(at).as_array().unwrap() {
            round_trip::<TicketView>(t);
        }
        round_trip::<SendResult>(&samples::sent(at));
        round_trip::<SendResult>(&samples::sent_remote(at));
        round_trip::<Vec<DecisionSummary>>(&samples::decisions(at));
        round_trip::<Decision>(&samples::decision_open());
        round_trip::<Decision>(&samples::decision_closed());
        round_trip::<Vec<AgentRow>>(&samples::agents());
    }

    #[test]
    fn mail_to_another_host_names_the_member_and_the_host_once() {
        let at = samples::soon();
        let v = serde_json::to_value(samples::remote_ticket(at)).unwrap();
        assert_eq!(v["to"], "lead@h2");
        let t: TicketView = parse(&v, "a sample").unwrap();
        assert_eq!(t.ticket.to.as_str(), "lead");
        // Another host's suffix is not this ticket's: refused, as a name with an `@` is.
        let mut other = v.clone();
        other["to"] = json!("lead@h3");
        let e = parse::<TicketView>(&other, "GET /tickets/t-2").unwrap_err();
        assert!(e.why.contains("member name `lead@h3`"), "{e}");
    }

    #[test]
    fn every_client_side_view_reads_the_daemons_answer() {
        let at = samples::soon();
        let m: Members = parse(&samples::list(at), "a sample").unwrap();
        assert_eq!((m.members.len(), m.architect_slots.len()), (2, 1));
        assert_eq!(m.coordinator.unwrap().mailbox.held, Some(2));
        let d: MemberDetail = parse(&samples::member_detail(at), "a sample").unwrap();
        assert_eq!(d.member.name.as_str(), "w1");
        assert!(d.slot_view.unwrap().pinned_by_signal);
        let q = d.queue.unwrap();
        assert!(q.stalled && q.in_flight.is_none() && q.queued.len() == 1);
        assert_eq!(d.owes, vec![TicketId(1), TicketId(5)]);
        let s: DaemonStatus = parse(&samples::daemon_status(at), "a sample").unwrap();
        assert_eq!(s.children.iter().map(|c| c.restarts_total).sum::<u64>(), 3);
        assert_eq!(s.ledger.unwrap().entries, Some(12));
        let p: Peers = parse(&samples::peers(at), "a sample").unwrap();
        assert_eq!(p.links[0].phase.as_deref(), Some("up"));
        assert_eq!(p.links[1].reason.as_deref(), Some("connection refused"));
        let d: Drift = parse(&samples::drift(at), "a sample").unwrap();
        assert_eq!(d.peers[1].verdict.as_deref(), Some("fresh_instance"));
        assert_eq!(d.peers[0].g2.as_deref(), Some("fresh"));
        let r: Reloaded = parse(&json!({"reloaded": true, "detail": "2 changes"}), "x").unwrap();
        assert_eq!(r.detail.as_deref(), Some("2 changes"));
    }

    #[test]
    fn a_drift_report_reads_the_same_from_the_core_and_from_the_wire() {
        let at = samples::soon();
        let wire: Drift = parse(&samples::drift(at), "a sample").unwrap();
        let core = fleetd_actors::drift::gates::Report {
            peer: "a1".into(),
            anchor: Some("a code reviewer who reads every diff before it lands on main".into()),
            anchor_ts: None,
            anchor_tick: None,
            g1: fleetd_actors::drift::gates::G1::Pass,
            g2: fleetd_actors::drift::gates::G2::Fresh,
            g3: fleetd_actors::drift::gates::G3::Conflict,
            g4: fleetd_actors::drift::gates::G4::NotApplicable,
            verdict: fleetd_actors::drift::gates::Verdict::Untrusted,
            alerts: vec!["G3: w2 says otherwise".into()],
            reporters: vec![],
            raise: vec![],
        };
        let from_core = DriftReport::from(&core);
        let w = &wire.peers[0];
        assert_eq!(
            (
                &from_core.peer,
                &from_core.verdict,
                &from_core.g1,
                &from_core.g2
            ),
            (&w.peer, &w.verdict, &w.g1, &w.g2)
        );
        assert_eq!(
            (
                &from_core.g3,
                &from_core.g4,
                &from_core.anchor,
                &from_core.alerts
            ),
            (&w.g3, &w.g4, &w.anchor, &w.alerts)
        );
    }

    /// What the printers show as `-` may be missing: an older or newer daemon's answer with
    /// fewer fields still prints.
    #[test]
    fn optional_fields_may_be_missing() {
        let s: DaemonStatus = parse(&json!({}), "GET /status").unwrap();
        assert!(s.version.is_none() && s.members.is_empty() && s.open_decisions.is_empty());
        let p: Peers = parse(&json!({"links": [{}]}), "GET /peers").unwrap();
        assert!(p.listen.is_none() && p.links[0].rtt_us.is_none());
        let d: Drift = parse(&json!({"peers": [{"peer": "a1"}]}), "GET /drift").unwrap();
        assert!(d.peers[0].anchor.is_none() && d.alerts.is_empty());
        let m: Members = parse(&json!({"members": []}), "GET /members").unwrap();
        assert!(m.coordinator.is_none() && m.architect_slots.is_empty());
        // Unknown fields are no reason to refuse.
        let r: Reloaded = parse(&json!({"detail": "ok", "new": 1}), "x").unwrap();
        assert_eq!(r.detail.as_deref(), Some("ok"));
    }

    /// An answer of the wrong shape is refused in the one error shape: what (the answer to
    /// which request), why (serde's reason), what would be accepted. Never a panic.
    #[test]
    fn an_answer_of_another_shape_is_refused_saying_what_would_be_accepted() {
        let cases: Vec<(FleetError, &str)> = vec![
            (
                parse::<Members>(&json!({"members": "none"}), "GET /members").unwrap_err(),
                "a member list",
            ),
            (
                parse::<Vec<TicketView>>(&json!([{"id": "t-1"}]), "GET /tickets").unwrap_err(),
                "a list of tickets",
            ),
            (
                parse::<SendResult>(&json!({"ticket": null}), "POST /members/w1/messages")
                    .unwrap_err(),
                "a sent message",
            ),
            (
                parse::<Decision>(&json!([]), "GET /decisions/d-1").unwrap_err(),
                "a decision",
            ),
            (
                parse::<DaemonStatus>(&json!({"pid": "many"}), "GET /status").unwrap_err(),
                "the daemon's status",
            ),
            (
                parse::<MemberView>(&json!({"name": "no such name!"}), "DELETE /members/x")
                    .unwrap_err(),
                "a member",
            ),
        ];
        for (e, shape) in cases {
            assert_eq!(e.kind, fleetd_actors::error::ErrorKind::Invalid);
            assert!(e.refused.starts_with("the daemon's answer to "), "{e}");
            assert!(
                e.why.starts_with(&format!("it does not read as {shape}")),
                "{e}"
            );
            assert!(!e.why.ends_with(": "), "serde's reason is given: {e}");
            assert!(e.accepted.starts_with(shape), "{e}");
            assert!(e.accepted.contains("--json"), "{e}");
        }
    }
}
