//! Test samples: the daemon's REST answers, built from the daemon's own view types and
//! serialised as the daemon serialises them, for the printers' tests.
//!
//! Owns nothing but test data. Must never be compiled outside `cfg(test)`.

use fleetd_actors::decision::state::{
    Closed, Decision, Outcome, Record, Refused, SlotOutcome, SlotResult,
};
use fleetd_actors::drift::alerts::Alert;
use fleetd_actors::drift::gates::{G1, G2, G3, G4, Report, Verdict};
use fleetd_actors::drift::service::PeersView;
use fleetd_actors::fleet::{
    CoordinatorRow, DaemonStatus, DecisionSummary, ListView, MailboxRow, MemberDetail, MemberView,
    Receipt, SendResult, SpawnView, TicketView,
};
use fleetd_actors::injector::actor::QueueView;
use fleetd_actors::injector::state::{Message, ReceiptState};
use fleetd_actors::ledger::actor::LedgerStatus;
use fleetd_actors::link::state::{LinkView, Phase};
use fleetd_actors::registry::actor::SlotView as ArchitectSlotView;
use fleetd_actors::registry::state::{ExitInfo, Worktree};
use fleetd_actors::slot::actor::SlotView;
use fleetd_actors::supervisor::actor::ChildView;
use fleetd_actors::tickets::state::{
    Origin, RemoteReceipt, Reply, Ticket, TicketKind, TicketState,
};
use fleetd_actors::types::{DecisionId, MemberName, Millis, MsgId, Party, Role, Status, TicketId};
use serde_json::{Value, json};

/// A time an hour from now: the printers' `ago` shows it as `0s` however slowly the test runs.
pub(super) fn soon() -> Millis {
    fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock) + 3_600_000
}

fn name(s: &str) -> MemberName {
    MemberName::new(s).expect("a valid sample name")
}

fn value<T: serde::Serialize>(v: &T) -> Value {
    serde_json::to_value(v).expect("a view serialises")
}

pub(super) fn member(at: Millis) -> MemberView {
    MemberView {
        name: name("w1"),
        role: Role::Worker,
        slot: None,
        profile: "claude".into(),
        parent: Party::Operator,
        status: Status::Idle,
        status_since: at,
        spawned_at: at,
        pid: Some(4242),
        host_pid: Some(4241),
        exit: None,
        charter_sha256: "c0ffee".into(),
        session_id: Some("sess-1".into()),
        worktree: Some(Worktree {
            path: "/s/worktrees/w1".into(),
            branch: "fleet/w1".into(),
            repo: "/src".into(),
            base: "abc123".into(),
        }),
        sandbox: Some("bwrap".into()),
        blocked: None,
    }
}

fn exited_architect(at: Millis) -> MemberView {
    MemberView {
        name: name("a2"),
        role: Role::Architect,
        slot: Some("A".into()),
        profile: "generic".into(),
        parent: Party::Member(name("lead")),
        status: Status::Exited,
        status_since: at,
        spawned_at: at,
        pid: None,
        host_pid: None,
        exit: Some(ExitInfo {
            at,
            code: Some(0),
            reason: "exited with status 0".into(),
        }),
        charter_sha256: "beef".into(),
        session_id: None,
        worktree: None,
        sandbox: None,
        blocked: None,
    }
}

/// `GET /members` as the operator sees it (a coordinator row).
pub(super) fn list(at: Millis) -> Value {
    value(&ListView {
        host: "h1".into(),
        members: vec![member(at), exited_architect(at)],
        architect_slots: vec![ArchitectSlotView {
            slot: "A".into(),
            state: "bound",
            member: Some(name("a2")),
            waiting: 1,
        }],
        coordinator: Some(CoordinatorRow {
            coord_id: "h1-c1".into(),
            mailbox: MailboxRow {
                state: "open",
                held: 2,
                preview: vec!["hello".into()],
            },
            peers: vec![],
        }),
        open_decisions: None,
    })
}

/// `GET /members` as a member sees it: no coordinator row, no slots, no members but one.
pub(super) fn list_plain(at: Millis) -> Value {
    value(&ListView {
        host: "h1".into(),
        members: vec![member(at)],
        architect_slots: vec![],
        coordinator: None,
        open_decisions: None,
    })
}

fn receipt(at: Millis) -> Receipt {
    Receipt {
        msg: MsgId(7),
        target: name("w1"),
        state: ReceiptState::Accepted,
        queued_at: at,
        delivered_at: Some(at),
        settled_at: Some(at),
        note: Some("turn started".into()),
        screen: None,
        altered: None,
    }
}

fn ticket(at: Millis) -> Ticket {
    Ticket {
        id: TicketId(1),
        kind: TicketKind::Send,
        from: Party::Operator,
        to: name("w1"),
        msg: Some(MsgId(7)),
        subject: "sum: 1 2\nand more".into(),
        created_at: at,
        expires_at: 1_700_000_000_000,
        state: TicketState::Replied,
        reply: Some(Reply {
            text: "3\nthat is all".into(),
            at,
            altered: None,
        }),
        tail: None,
        late: vec![],
        note: None,
        acked: true,
        updated_at: at,
        remote: None,
        origin: None,
    }
}

/// A local ticket with its receipt and a reply.
pub(super) fn local_ticket(at: Millis) -> TicketView {
    TicketView {
        ticket: ticket(at),
        receipt: Some(receipt(at)),
    }
}

/// Mail to another host's lead: no local receipt, the remote one; a tail, late replies, a note.
pub(super) fn remote_ticket(at: Millis) -> TicketView {
    let mut t = ticket(at);
    t.id = TicketId(2);
    t.kind = TicketKind::Ask;
    t.from = Party::Member(name("lead"));
    t.to = name("lead");
    t.msg = None;
    t.state = TicketState::Tail;
    t.reply = None;
    t.tail = Some(Reply {
        text: "worked on it\nno reply".into(),
        at,
        altered: None,
    });
    t.late = vec![Reply {
        text: "late".into(),
        at,
        altered: None,
    }];
    t.note = Some("no fleet_reply".into());
    t.acked = false;
    t.remote = Some(RemoteReceipt {
        host: "h2".into(),
        state: ReceiptState::Transmitted,
        queued_at: at,
        transmitted_at: Some(at),
        delivered_at: None,
        settled_at: None,
        note: None,
        altered: None,
    });
    TicketView {
        ticket: t,
        receipt: None,
    }
}

/// Mail received from another host's lead, still open, nothing delivered yet.
pub(super) fn received_ticket(at: Millis) -> TicketView {
    let mut t = ticket(at);
    t.id = TicketId(3);
    t.from = Party::Remote {
        member: name("lead"),
        host: "h2".into(),
    };
    t.to = name("lead");
    t.state = TicketState::Open;
    t.reply = None;
    t.acked = false;
    t.origin = Some(Origin {
        host: "h2".into(),
        ticket: TicketId(9),
    });
    let mut r = receipt(at);
    r.state = ReceiptState::Queued;
    r.delivered_at = None;
    r.settled_at = None;
    r.note = None;
    TicketView {
        ticket: t,
        receipt: Some(r),
    }
}

/// `GET /tickets`.
pub(super) fn tickets(at: Millis) -> Value {
    value(&vec![
        local_ticket(at),
        remote_ticket(at),
        received_ticket(at),
    ])
}

/// `POST /members/w1/messages` with `wait`: answered.
pub(super) fn sent(at: Millis) -> Value {
    value(&SendResult {
        ticket: local_ticket(at),
        resolved: Some(true),
    })
}

/// `POST /members/lead@h2/messages`: queued for another host, no local receipt.
pub(super) fn sent_remote(at: Millis) -> Value {
    let mut t = remote_ticket(at);
    t.ticket.state = TicketState::Open;
    t.ticket.tail = None;
    value(&SendResult {
        ticket: t,
        resolved: None,
    })
}

/// `POST /members`.
pub(super) fn spawned(at: Millis) -> Value {
    value(&SpawnView {
        member: member(at),
        notes: vec!["profile claude (named)".into(), "wired: MCP, hooks".into()],
    })
}

/// `GET /members/w1`.
pub(super) fn member_detail(at: Millis) -> Value {
    let mut m = Message::new(
        MsgId(8),
        name("w1"),
        Party::Operator,
        Some(TicketId(4)),
        "x".into(),
    );
    m.queued_at = at;
    value(&MemberDetail {
        member: member(at),
        slot_view: Some(SlotView {
            status: Status::Idle,
            injectable: true,
            status_since: at,
            pinned_by_signal: true,
            rows: 40,
            cols: 120,
            screen: "$ ".into(),
            screen_dormant: false,
        }),
        queue: Some(QueueView {
            in_flight: None,
            queued: vec![m],
            stalled: true,
        }),
        owes: vec![TicketId(1), TicketId(5)],
    })
}

/// `GET /members/a2`: exited, no slot view, no queue, owes nothing.
pub(super) fn member_detail_exited(at: Millis) -> Value {
    value(&MemberDetail {
        member: exited_architect(at),
        slot_view: None,
        queue: None,
        owes: vec![],
    })
}

fn summary(at: Millis) -> DecisionSummary {
    let _ = at;
    DecisionSummary {
        id: DecisionId(2),
        subject: "use redb or sqlite for the store, a subject long enough to be cut short".into(),
        state: "open".into(),
        slots: vec!["A".into(), "B".into()],
        opened_by: "lead".into(),
        opened_at: "2026-12-05T05:00:00Z".into(),
        age_ms: 0,
        deadline: "2026-12-05T06:00:00Z".into(),
        deadline_passed: false,
        missing: vec!["A".into(), "B".into()],
        records: 0,
    }
}

/// `GET /decisions`.
pub(super) fn decisions(at: Millis) -> Value {
    let mut quorate = summary(at);
    quorate.id = DecisionId(1);
    quorate.subject = "short".into();
    quorate.state = "quorate".into();
    quorate.missing = vec![];
    quorate.records = 2;
    value(&vec![quorate, summary(at)])
}

/// `GET /status`.
pub(super) fn daemon_status(at: Millis) -> Value {
    value(&DaemonStatus {
        host: "h1".into(),
        version: "0.9.0",
        pid: 100,
        state_dir: "/s".into(),
        started_at: at,
        uptime_ms: 0,
        members: [("idle".to_string(), 2), ("working".to_string(), 1)]
            .into_iter()
            .collect(),
        open_tickets: 3,
        children: vec![
            ChildView {
                id: "registry".into(),
                kind: "permanent".into(),
                running: true,
                restarts_in_window: 0,
                restarts_total: 2,
            },
            ChildView {
                id: "slot:w1".into(),
                kind: "transient".into(),
                running: true,
                restarts_in_window: 1,
                restarts_total: 1,
            },
        ],
        escalation: Some("slot:w1 restarted too often".into()),
        public_key: "PK".into(),
        ledger_vkey: "h1+1234+AAAA".into(),
        witness_vkey: "h1-witness+5678+BBBB".into(),
        ledger: Some(LedgerStatus {
            path: "/s/ledger.jsonl".into(),
            origin: "h1/ledger".into(),
            entries: 12,
            head: "abc".into(),
            broken: Some("entry 7 does not chain".into()),
            syncs: Default::default(),
        }),
        open_decisions: vec![summary(at)],
        drift_alerts: vec![],
        untrusted_peers: vec![],
        sandbox: fleetd_actors::sandbox::Status {
            mode: fleetd_actors::sandbox::Mode::Auto,
            confined: false,
            detail: "members run unconfined: `bwrap` could not be run".into(),
        },
    })
}

/// `GET /status` of a daemon with no ledger yet, nothing open, nothing escalated.
pub(super) fn daemon_status_quiet(at: Millis) -> Value {
    let mut v = daemon_status(at);
    v["ledger"] = Value::Null;
    v["escalation"] = Value::Null;
    v["open_decisions"] = json!([]);
    v["children"] = json!([]);
    v["members"] = json!({});
    v["sandbox"] = json!({"mode": "auto", "confined": true, "detail": "bubblewrap 0.8.0"});
    v
}

fn decision() -> Decision {
    Decision {
        id: DecisionId(1),
        subject: "store".into(),
        slots: vec!["A".into(), "B".into(), "C".into()],
        deadline: "2026-12-05T06:00:00Z".into(),
        deadline_ms: 1_796_450_400_000,
        max_rounds: 2,
        opened_by: "lead".into(),
        opened_at: "2026-12-05T05:00:00Z".into(),
        opened_ms: 1_796_446_800_000,
        opened_seq: 3,
        records: vec![
            Record {
                seq: 4,
                slot: "A".into(),
                member: "a1".into(),
                round: 1,
                kind: SlotResult::Position,
                content: "redb\nbecause it is embedded".into(),
                at: "2026-12-05T05:01:00Z".into(),
            },
            Record {
                seq: 5,
                slot: "B".into(),
                member: "a2".into(),
                round: 1,
                kind: SlotResult::Abstain,
                content: "no view".into(),
                at: "2026-12-05T05:02:00Z".into(),
            },
        ],
        closed: None,
        refused: vec![Refused {
            slot: None,
            member: "w9".into(),
            round: 3,
            at: 1_796_446_900_000,
            why: "no such round".into(),
        }],
    }
}

/// `GET /decisions/d-1`, still open (slot C has not spoken).
pub(super) fn decision_open() -> Value {
    value(&decision())
}

/// `GET /decisions/d-1`, closed.
pub(super) fn decision_closed() -> Value {
    let mut d = decision();
    d.refused = vec![];
    d.closed = Some(Closed {
        seq: 6,
        outcome: Outcome::Degraded,
        slots: vec![
            SlotOutcome {
                slot: "A".into(),
                outcome: SlotResult::Position,
                round: Some(1),
            },
            SlotOutcome {
                slot: "B".into(),
                outcome: SlotResult::Abstain,
                round: Some(1),
            },
            SlotOutcome {
                slot: "C".into(),
                outcome: SlotResult::Timeout,
                round: None,
            },
        ],
        verdict: "redb".into(),
        rationale: "one position".into(),
        by: "lead".into(),
        at: "2026-12-05T06:01:00Z".into(),
    });
    value(&d)
}

/// `GET /peers`: one link up, one down; this host does not listen.
pub(super) fn peers(at: Millis) -> Value {
    json!({
        "host": "h1",
        "public_key": "PK",
        "listen": null,
        "links": [
            value(&LinkView {
                peer: "h2".into(),
                addr: "10.0.0.2:7443".into(),
                phase: Phase::Up,
                since: at,
                reason: None,
                dialled: Some(true),
                rtt_us: Some(1234),
                attempts: 0,
                retry_at: None,
            }),
            value(&LinkView {
                peer: "h3".into(),
                addr: "10.0.0.3:7443".into(),
                phase: Phase::Down,
                since: at,
                reason: Some("connection refused".into()),
                dialled: None,
                rtt_us: None,
                attempts: 3,
                retry_at: Some(at),
            }),
        ],
        "mail": {},
        "remote_anchors": [],
    })
}

/// `GET /peers` of a host that listens.
pub(super) fn peers_listening() -> Value {
    json!({"host": "h1", "public_key": "PK", "listen": "0.0.0.0:7443", "links": [], "mail": {}, "remote_anchors": []})
}

/// `GET /drift`.
pub(super) fn drift(at: Millis) -> Value {
    value(&PeersView {
        reader: Some("lead".into()),
        heartbeat_secs: 30,
        last_pass: Some("2026-12-05T05:00:00Z".into()),
        peers: vec![
            Report {
                peer: "a1".into(),
                anchor: Some("a code reviewer who reads every diff before it lands on main".into()),
                anchor_ts: Some("2026-12-05T04:00:00Z".into()),
                anchor_tick: Some(3),
                g1: G1::Pass,
                g2: G2::Fresh,
                g3: G3::Conflict,
                g4: G4::NotApplicable,
                verdict: Verdict::Untrusted,
                alerts: vec!["G3: w2 says otherwise".into()],
                reporters: vec!["w2".into()],
                raise: vec![],
            },
            Report {
                peer: "w2".into(),
                anchor: None,
                anchor_ts: None,
                anchor_tick: None,
                g1: G1::Pass,
                g2: G2::NotApplicable,
                g3: G3::NotApplicable,
                g4: G4::NotApplicable,
                verdict: Verdict::FreshInstance,
                alerts: vec![],
                reporters: vec![],
                raise: vec![],
            },
        ],
        alerts: vec![Alert {
            at,
            peer: "a1".into(),
            rule: "G3".into(),
            text: "w2 says otherwise".into(),
        }],
    })
}

/// `GET /drift` before any pass, with no live primary.
pub(super) fn drift_empty() -> Value {
    value(&PeersView {
        reader: None,
        heartbeat_secs: 30,
        last_pass: None,
        peers: vec![],
        alerts: vec![],
    })
}

/// `GET /agents`.
pub(super) fn agents() -> Value {
    value(&vec![
        crate::doctor::AgentRow {
            profile: "claude".into(),
            agent: Some("claude".into()),
            command: "claude".into(),
            path: Some("/usr/bin/claude".into()),
            version: Some("2.1.0".into()),
            verified_versions: vec!["2.1.0".into()],
            verified: Some(true),
        },
        crate::doctor::AgentRow {
            profile: "codex".into(),
            agent: Some("codex".into()),
            command: "codex".into(),
            path: Some("/usr/bin/codex".into()),
            version: Some("0.9".into()),
            verified_versions: vec!["1.0".into(), "1.1".into()],
            verified: Some(false),
        },
        crate::doctor::AgentRow {
            profile: "generic".into(),
            agent: None,
            command: "bash".into(),
            path: None,
            version: None,
            verified_versions: vec![],
            verified: None,
        },
    ])
}
