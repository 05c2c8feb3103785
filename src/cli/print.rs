//! Human output: tables, tickets, decisions, drift reports and events, rendered from the typed
//! answers of `views.rs` into a `String` (the command prints it), every piece of member text
//! through `put!` (shown, never interpreted by the terminal).
//!
//! Owns how the daemon's answers look to a person. Must never read raw JSON (`--json` goes
//! through [`print_json`] untouched) or decide anything the daemon decides.

use fleetd_actors::decision::state::Decision;
use fleetd_actors::fleet::{
    DecisionSummary, MemberView, Receipt, SendResult, SpawnView, TicketView,
};
use fleetd_actors::tickets::state::Reply;
use fleetd_actors::types::truncate;

use super::views::{DaemonStatus, Drift, DriftReport, MemberDetail, Members, Peers};
use super::*;
use crate::doctor::AgentRow;

/// JSON output: exact (it parses to what the daemon sent), with the characters a terminal could
/// act on written as `\uXXXX` escapes.
pub(super) fn print_json(v: &Value) {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    println!("{}", fleetd_actors::sanitize::json_for_terminal(&text));
}

pub(super) fn ago(ms: Option<u64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    let now = fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock);
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// Rows as aligned columns.
pub(super) fn table(out: &mut String, header: &[&str], rows: Vec<Vec<String>>) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let mut line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        put!(out, "{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|s| s.to_string()).collect());
    for r in rows {
        line(r);
    }
}

/// A list for a person: the items joined with `sep`.
fn joined<T: std::fmt::Display>(items: &[T], sep: &str) -> String {
    items
        .iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(sep)
}

pub(super) fn print_members(v: &Members) -> String {
    let mut out = String::new();
    let rows = v
        .members
        .iter()
        .map(|m| {
            vec![
                m.name.to_string(),
                wire_name(&m.role),
                opt(&m.slot),
                match &m.blocked {
                    Some(b) if m.status == fleetd_actors::types::Status::Blocked => {
                        format!("{} ({})", wire_name(&m.status), b.reason)
                    }
                    _ => wire_name(&m.status),
                },
                ago(Some(m.status_since)),
                m.parent.to_string(),
                opt(&m.pid),
                m.profile.clone(),
                opt(&m.worktree.as_ref().map(|w| &w.branch)),
                m.exit.as_ref().map_or(String::new(), |e| e.reason.clone()),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            "NAME", "ROLE", "SLOT", "STATUS", "FOR", "PARENT", "PID", "PROFILE", "WORKTREE", "EXIT",
        ],
        rows,
    );
    let slots: Vec<Vec<String>> = v
        .architect_slots
        .iter()
        .map(|x| vec![opt(&x.slot), opt(&x.state), opt(&x.member), opt(&x.waiting)])
        .collect();
    if !slots.is_empty() {
        put!(out);
        table(&mut out, &["SLOT", "STATE", "MEMBER", "WAITING"], slots);
    }
    if let Some(c) = &v.coordinator {
        put!(out);
        put!(
            out,
            "coordinator {}: mailbox {} ({} held)",
            opt(&c.coord_id),
            opt(&c.mailbox.state),
            opt(&c.mailbox.held)
        );
    }
    out
}

pub(super) fn print_agents(v: &[AgentRow]) -> String {
    let mut out = String::new();
    let rows = v
        .iter()
        .map(|a| {
            vec![
                a.profile.clone(),
                opt(&a.agent),
                a.command.clone(),
                a.path.clone().unwrap_or_else(|| "not installed".into()),
                opt(&a.version),
                match a.verified {
                    Some(true) => "yes".into(),
                    Some(false) => format!(
                        "no (verified: {})",
                        serde_json::to_string(&a.verified_versions).unwrap_or_default()
                    ),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &mut out,
        &["PROFILE", "AGENT", "COMMAND", "PATH", "VERSION", "VERIFIED"],
        rows,
    );
    out
}

/// A ticket's receipt state: the remote one for mail to another host.
pub(super) fn ticket_receipt(t: &TicketView) -> String {
    match (&t.ticket.remote, &t.receipt) {
        (Some(r), _) => wire_name(&r.state),
        (None, Some(r)) => wire_name(&r.state),
        (None, None) => "-".into(),
    }
}

/// A ticket's `to` as the daemon shows it: `member@host` for mail to another host's lead.
fn ticket_to(t: &TicketView) -> String {
    match &t.ticket.remote {
        Some(r) => format!("{}@{}", t.ticket.to, r.host),
        None => t.ticket.to.to_string(),
    }
}

/// A time as RFC 3339 with how long ago, or `-`.
pub(super) fn when(ms: Option<u64>) -> String {
    match ms {
        Some(m) => format!(
            "{} ({} ago)",
            fleetd_actors::clock::rfc3339(m),
            ago(Some(m))
        ),
        None => "-".into(),
    }
}

/// One ticket, for a person (`fleetd tickets ID`; `--json` prints the daemon's answer).
pub(super) fn print_ticket(v: &TicketView) -> String {
    let mut out = String::new();
    let t = &v.ticket;
    put!(
        out,
        "{} ({}) {} -> {}: {}",
        t.id,
        wire_name(&t.kind),
        t.from,
        ticket_to(v),
        wire_name(&t.state)
    );
    put!(out, "  subject   {}", t.subject);
    put!(out, "  opened    {}", when(Some(t.created_at)));
    put!(
        out,
        "  expires   {}",
        fleetd_actors::clock::rfc3339(t.expires_at)
    );
    if let Some(r) = &t.remote {
        put!(
            out,
            "  mail      to {}: {} (transmitted {}, delivered {})",
            r.host,
            wire_name(&r.state),
            when(r.transmitted_at),
            when(r.delivered_at)
        );
    } else if let Some(r) = &v.receipt {
        put!(
            out,
            "  receipt   {} {} (queued {}, delivered {}){}",
            r.msg,
            wire_name(&r.state),
            when(Some(r.queued_at)),
            when(r.delivered_at),
            r.note
                .as_ref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
    }
    if let Some(o) = &t.origin {
        put!(out, "  from      lead@{} (their {})", o.host, o.ticket);
    }
    let answers: [(&str, &Option<Reply>); 2] = [("reply", &t.reply), ("tail", &t.tail)];
    for (label, answer) in answers {
        if let Some(a) = answer {
            put!(out, "  {label:<9} at {}", when(Some(a.at)));
            for line in a.text.lines() {
                put!(out, "    {line}");
            }
        }
    }
    if !t.late.is_empty() {
        put!(
            out,
            "  late      {} replies after the TTL (kept, refused)",
            t.late.len()
        );
    }
    if let Some(n) = &t.note {
        put!(out, "  note      {n}");
    }
    put!(out, "  acked     {}", if t.acked { "yes" } else { "no" });
    out
}

pub(super) fn print_tickets(v: &[TicketView]) -> String {
    let mut out = String::new();
    let rows = v
        .iter()
        .map(|tv| {
            let t = &tv.ticket;
            let answer = t
                .reply
                .as_ref()
                .or(t.tail.as_ref())
                .map(|r| r.text.as_str())
                .or(t.note.as_deref())
                .unwrap_or("");
            vec![
                t.id.to_string(),
                wire_name(&t.kind),
                t.from.to_string(),
                ticket_to(tv),
                wire_name(&t.state),
                ticket_receipt(tv),
                ago(Some(t.created_at)),
                truncate(&t.subject.replace('\n', " "), 30),
                truncate(&answer.replace('\n', " "), 50),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            "TICKET", "KIND", "FROM", "TO", "STATE", "RECEIPT", "AGE", "SUBJECT", "ANSWER",
        ],
        rows,
    );
    out
}

/// An optional value for a person: the value, or `-`.
pub(super) fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), |v| v.to_string())
}

pub(super) fn describe_event(e: &fleetd_actors::events::Event) -> String {
    use fleetd_actors::events::EventKind as K;
    let body = match &e.kind {
        K::Spawned {
            member,
            role,
            parent,
            pid,
            ..
        } => format!("spawned {member} ({role}) by {parent}, pid {}", opt(pid)),
        K::Adopted { member, pid } => format!("re-adopted {member}, pid {}", opt(pid)),
        K::Status {
            member,
            from,
            to,
            cause,
            ..
        } => format!("{member}: {from} -> {to} ({cause})"),
        K::Exited { member, reason, .. } => format!("{member} exited: {reason}"),
        K::Reaped { member, idle_ms } => format!("{member} reaped after {} s idle", idle_ms / 1000),
        K::Receipt {
            msg,
            target,
            state,
            note,
            ..
        } => {
            format!(
                "{msg} to {target}: {}{}",
                wire_name(state),
                note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            )
        }
        K::Ticket {
            ticket,
            from,
            to,
            state,
            ..
        } => format!("{ticket} {from} -> {to}: {}", wire_name(state)),
        K::Restarted {
            child,
            attempt,
            reason,
        } => format!("restarted {child} (attempt {attempt}): {reason}"),
        K::Escalated { reason } => format!("ESCALATED: {reason}"),
        K::ConfigReloaded { ok, detail } => format!(
            "config reload {}: {detail}",
            if *ok { "ok" } else { "refused" }
        ),
        K::DriftAlert { peer, rule, text } => format!("DRIFT ALERT ({rule}) about {peer}: {text}"),
        K::Link { peer, up, detail } => {
            if *up {
                format!("link to {peer} up ({detail})")
            } else {
                format!("link to {peer} down: {detail}")
            }
        }
        K::LinkRefused { detail } => format!("link refused: {detail}"),
        K::Witnessed { peer, origin, size } => {
            format!("witnessed {origin} of {peer} at size {size}")
        }
        K::Cosigned { witness, size } => {
            format!("{witness} cosigned this host's ledger at size {size}")
        }
        K::AnchorsPulled { peer, anchors } => {
            format!("drift: pulled {anchors} verified anchors from {peer}")
        }
        K::MailHanded {
            peer,
            envelope,
            their_ticket,
            ticket,
        } => format!(
            "mail #{envelope} from lead@{peer} (their {their_ticket}) handed to the lead as {ticket}"
        ),
        K::DriftLine {
            identity,
            kind,
            tick,
        } => format!("drift: {identity} logged {kind} (tick {tick})"),
        K::DriftPass {
            peers,
            untrusted,
            late,
            took_us,
            kb_error,
        } => match kb_error {
            Some(e) => format!(
                "drift pass: the KB could not be read ({e}); {peers} peers keep their last reports"
            ),
            None => format!(
                "drift pass: {peers} peers, {untrusted} untrusted, {late} late, {:.1} ms",
                *took_us as f64 / 1000.0
            ),
        },
        K::Decision {
            decision,
            action,
            slot,
            outcome,
            ledger_seq: seq,
        } => format!(
            "{decision} {action}{}{}{}",
            slot.as_ref()
                .map(|s| format!(" by slot {s}"))
                .unwrap_or_default(),
            outcome
                .map(|o| format!(" ({})", wire_name(&o)))
                .unwrap_or_default(),
            seq.map(|s| format!(" [ledger #{s}]")).unwrap_or_default()
        ),
    };
    format!(
        "{:>6} {} {body}",
        e.seq,
        fleetd_actors::clock::rfc3339(e.at)
    )
}

pub(super) fn print_decision(v: &Decision) -> String {
    let mut out = String::new();
    put!(out, "{}  {}", v.id, v.subject);
    put!(
        out,
        "  opened by {} at {}; deadline {}; at most {} rounds",
        v.opened_by,
        v.opened_at,
        v.deadline,
        v.max_rounds
    );
    put!(out, "  convened: {}", v.slots.join(", "));
    for r in &v.records {
        put!(
            out,
            "  round {} {:<5} ({}) {} at {} [#{}]:\n      {}",
            r.round,
            r.slot,
            r.member,
            wire_name(&r.kind),
            r.at,
            r.seq,
            r.content.replace('\n', "\n      ")
        );
    }
    for r in &v.refused {
        put!(
            out,
            "  REFUSED round {} from {} (slot {}): {}",
            r.round,
            r.member,
            opt(&r.slot),
            r.why
        );
    }
    match &v.closed {
        None => put!(out, "  OPEN: missing {}", {
            let recorded: Vec<&String> = v.records.iter().map(|r| &r.slot).collect();
            v.slots
                .iter()
                .filter(|x| !recorded.contains(x))
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        }),
        Some(c) => {
            put!(
                out,
                "  CLOSED {} by {} at {} [#{}]",
                wire_name(&c.outcome).to_uppercase(),
                c.by,
                c.at,
                c.seq
            );
            for o in &c.slots {
                put!(
                    out,
                    "    {:<6} {}{}",
                    o.slot,
                    wire_name(&o.outcome),
                    o.round.map(|r| format!(" (round {r})")).unwrap_or_default()
                );
            }
            put!(out, "  verdict:   {}", c.verdict);
            put!(out, "  rationale: {}", c.rationale);
        }
    }
    out
}

/// The drift reports' table (`fleetd drift peers`, `fleetd drift check`).
pub(super) fn print_drift_reports(out: &mut String, rows: &[DriftReport]) {
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                opt(&r.peer),
                opt(&r.verdict),
                opt(&r.g1),
                opt(&r.g2),
                opt(&r.g3),
                opt(&r.g4),
                truncate(r.anchor.as_deref().unwrap_or("-"), 40),
                r.alerts.len().to_string(),
            ]
        })
        .collect();
    table(
        out,
        &[
            "PEER", "VERDICT", "G1", "G2", "G3", "G4", "ANCHOR", "ALERTS",
        ],
        rows,
    );
}

/// What `fleetd spawn` did.
pub(super) fn print_spawned(v: &SpawnView) -> String {
    let mut out = String::new();
    let m = &v.member;
    put!(
        out,
        "spawned {} ({}, profile {}) pid {} charter sha256 {}",
        m.name,
        wire_name(&m.role),
        m.profile,
        opt(&m.pid),
        m.charter_sha256
    );
    for n in &v.notes {
        put!(out, "  {n}");
    }
    out
}

/// One member (`fleetd status NAME`).
pub(super) fn print_member_detail(v: &MemberDetail) -> String {
    let mut out = String::new();
    let m = &v.member;
    put!(
        out,
        "{} ({}{})",
        m.name,
        wire_name(&m.role),
        m.slot
            .as_ref()
            .map(|x| format!(", slot {x}"))
            .unwrap_or_default()
    );
    put!(
        out,
        "  status     {} for {}{}",
        wire_name(&m.status),
        ago(Some(m.status_since)),
        if v.slot_view.as_ref().is_some_and(|s| s.pinned_by_signal) {
            " (by signal)"
        } else {
            ""
        }
    );
    if let Some(b) = m
        .blocked
        .as_ref()
        .filter(|_| m.status == fleetd_actors::types::Status::Blocked)
    {
        put!(out, "  blocked    {}", b.reason);
        for l in b.screen.lines() {
            put!(out, "             | {l}");
        }
    }
    put!(out, "  parent     {}", m.parent);
    put!(out, "  pid        {}", opt(&m.pid));
    put!(out, "  profile    {}", m.profile);
    put!(
        out,
        "  sandbox    {}",
        m.sandbox.as_deref().unwrap_or("none (unconfined)")
    );
    put!(out, "  charter    sha256 {}", m.charter_sha256);
    put!(
        out,
        "  queue      {} waiting{}",
        v.queue.as_ref().map_or(0, |q| q.queued.len()),
        if v.queue.as_ref().is_some_and(|q| q.stalled) {
            ", held behind a stalled message"
        } else {
            ""
        }
    );
    put!(out, "  owes       {}", joined(&v.owes, ", "));
    if let Some(e) = &m.exit {
        put!(out, "  exit       {}", e.reason);
    }
    out
}

/// The daemon (`fleetd status`).
pub(super) fn print_daemon_status(v: &DaemonStatus) -> String {
    let mut out = String::new();
    put!(
        out,
        "fleetd {} on {} (pid {}), up {}",
        opt(&v.version),
        opt(&v.host),
        opt(&v.pid),
        ago(v.started_at)
    );
    put!(out, "  state dir  {}", opt(&v.state_dir));
    put!(
        out,
        "  members    {}",
        v.members
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    put!(out, "  tickets    {} open", opt(&v.open_tickets));
    if let Some(s) = &v.sandbox {
        put!(
            out,
            "  sandbox    {}: {}",
            if s.confined {
                "members confined"
            } else {
                "NONE"
            },
            s.detail
        );
    }
    let restarts: u64 = v.children.iter().map(|c| c.restarts_total).sum();
    put!(
        out,
        "  actors     {} supervised, {restarts} restarts",
        v.children.len()
    );
    put!(out, "  public key {}", opt(&v.public_key));
    put!(
        out,
        "  ledger     {} entries{}; verifier key {}",
        opt(&v.ledger.as_ref().and_then(|l| l.entries)),
        v.ledger
            .as_ref()
            .and_then(|l| l.broken.as_ref())
            .map(|b| format!(" (BROKEN: {b})"))
            .unwrap_or_default(),
        opt(&v.ledger_vkey)
    );
    put!(out, "  witness    cosigner key {}", opt(&v.witness_vkey));
    put!(
        out,
        "  decisions  {} open{}",
        v.open_decisions.len(),
        v.open_decisions
            .iter()
            .map(|d| format!("; {} missing {}", d.id, d.missing.join(",")))
            .collect::<String>()
    );
    if let Some(e) = &v.escalation {
        put!(out, "  ESCALATED  {e}");
    }
    out
}

/// What `fleetd send` got back: the ticket, and its answer if `--wait` brought one.
pub(super) fn print_sent(v: &SendResult) -> String {
    let mut out = String::new();
    let t = &v.ticket;
    put!(
        out,
        "{} to {}: {} (receipt {})",
        t.ticket.id,
        ticket_to(t),
        wire_name(&t.ticket.state),
        receipt_state(t.receipt.as_ref())
    );
    if let Some(r) = t.ticket.reply.as_ref().or(t.ticket.tail.as_ref()) {
        put!(out, "{}", r.text);
    }
    out
}

/// A local receipt's state, or `-` (mail to another host has none).
pub(super) fn receipt_state(r: Option<&Receipt>) -> String {
    r.map_or_else(|| "-".into(), |r| wire_name(&r.state))
}

/// `fleetd decision list`.
pub(super) fn print_decisions(v: &[DecisionSummary]) -> String {
    let mut out = String::new();
    let now = fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock);
    let rows = v
        .iter()
        .map(|d| {
            vec![
                d.id.to_string(),
                d.state.clone(),
                ago(Some(now.saturating_sub(d.age_ms))),
                d.slots.join(","),
                d.missing.join(","),
                d.deadline.clone(),
                truncate(&d.subject, 50),
            ]
        })
        .collect();
    table(
        &mut out,
        &[
            "DECISION", "STATE", "AGE", "SLOTS", "MISSING", "DEADLINE", "SUBJECT",
        ],
        rows,
    );
    out
}

/// `fleetd peers`: this host and its links.
pub(super) fn print_peers(v: &Peers) -> String {
    let mut out = String::new();
    put!(
        out,
        "this host: {} (key {}), links {}",
        opt(&v.host),
        opt(&v.public_key),
        v.listen
            .as_ref()
            .map_or("off (link.listen is not set)".to_string(), |l| format!(
                "on {l}"
            ))
    );
    let rows = v
        .links
        .iter()
        .map(|l| {
            vec![
                opt(&l.peer),
                opt(&l.addr),
                opt(&l.phase),
                ago(l.since),
                l.rtt_us
                    .map_or("-".into(), |r| format!("{:.2} ms", r as f64 / 1000.0)),
                match l.dialled {
                    Some(true) => "dialled".into(),
                    Some(false) => "accepted".into(),
                    None => "-".into(),
                },
                l.reason.clone().unwrap_or_default(),
            ]
        })
        .collect();
    table(
        &mut out,
        &["PEER", "ADDR", "STATE", "SINCE", "RTT", "BY", "WHY DOWN"],
        rows,
    );
    out
}

/// `fleetd drift peers`: the reader, each peer's report, the alerts.
pub(super) fn print_drift(v: &Drift) -> String {
    let mut out = String::new();
    put!(
        out,
        "reader {} (the live primary), heartbeat {} s, last pass {}",
        opt(&v.reader),
        opt(&v.heartbeat_secs),
        opt(&v.last_pass)
    );
    print_drift_reports(&mut out, &v.peers);
    for a in &v.alerts {
        put!(
            out,
            "ALERT {} {}: {}",
            opt(&a.rule),
            opt(&a.peer),
            opt(&a.text)
        );
    }
    out
}

/// A member that stopped (`fleetd stop`).
pub(super) fn print_stopped(m: &MemberView) -> String {
    let mut out = String::new();
    put!(
        out,
        "{} stopped: {}",
        m.name,
        opt(&m.exit.as_ref().map(|e| &e.reason))
    );
    out
}
#[cfg(test)]
mod tests {
    use super::super::samples;
    use super::super::views::{Answer, parse};
    use super::*;

    /// A sample answer, read as the CLI reads the daemon's.
    fn read<T: Answer>(v: &Value) -> T {
        parse(v, "a sample").unwrap_or_else(|e| panic!("{e}\n{v:#}"))
    }

    /// A rendering with the sample's time written as `AT` (it is an hour from now: ages are `0s`).
    fn pin(text: String, at: u64) -> String {
        text.replace(&fleetd_actors::clock::rfc3339(at), "AT")
    }

    /// Every human rendering of the daemon's answers, byte for byte: `tests/golden/cli-print.txt`
    /// holds what the printers printed before they were typed, section by section.
    #[test]
    fn every_rendering_matches_the_golden_file() {
        let at = samples::soon();
        let all = [
            ("members", print_members(&read(&samples::list(at)))),
            (
                "members_plain",
                print_members(&read(&samples::list_plain(at))),
            ),
            (
                "agents",
                print_agents(&read::<Vec<AgentRow>>(&samples::agents())),
            ),
            (
                "tickets",
                print_tickets(&read::<Vec<TicketView>>(&samples::tickets(at))),
            ),
            (
                "ticket_local",
                print_ticket(&read(&samples::tickets(at)[0])),
            ),
            (
                "ticket_remote",
                print_ticket(&read(&samples::tickets(at)[1])),
            ),
            (
                "ticket_received",
                print_ticket(&read(&samples::tickets(at)[2])),
            ),
            (
                "decision_open",
                print_decision(&read(&samples::decision_open())),
            ),
            (
                "decision_closed",
                print_decision(&read(&samples::decision_closed())),
            ),
            (
                "decisions",
                print_decisions(&read::<Vec<DecisionSummary>>(&samples::decisions(at))),
            ),
            ("spawned", print_spawned(&read(&samples::spawned(at)))),
            (
                "member_detail",
                print_member_detail(&read(&samples::member_detail(at))),
            ),
            (
                "member_detail_exited",
                print_member_detail(&read(&samples::member_detail_exited(at))),
            ),
            (
                "daemon_status",
                print_daemon_status(&read(&samples::daemon_status(at))),
            ),
            (
                "daemon_status_quiet",
                print_daemon_status(&read(&samples::daemon_status_quiet(at))),
            ),
            ("sent", print_sent(&read(&samples::sent(at)))),
            ("sent_remote", print_sent(&read(&samples::sent_remote(at)))),
            ("peers", print_peers(&read(&samples::peers(at)))),
            (
                "peers_listening",
                print_peers(&read(&samples::peers_listening())),
            ),
            ("drift", print_drift(&read(&samples::drift(at)))),
            ("drift_empty", print_drift(&read(&samples::drift_empty()))),
        ];
        let golden = include_str!("../../tests/golden/cli-print.txt");
        let mut want: Vec<(&str, &str)> = vec![];
        for section in golden.split("=== ").skip(1) {
            let (name, text) = section.split_once('\n').expect("a section name line");
            want.push((name, text));
        }
        assert_eq!(
            want.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            all.iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            "the golden file's sections"
        );
        for ((name, got), (_, want)) in all.into_iter().zip(want) {
            assert_eq!(pin(got, at), want, "rendering {name}");
        }
    }

    /// Fields an answer leaves out print as `-`, as they did when the printers read raw JSON.
    #[test]
    fn missing_fields_print_as_a_dash() {
        let v = serde_json::json!({});
        assert_eq!(
            print_daemon_status(&read(&v)),
            "fleetd - on - (pid -), up -\n  state dir  -\n  members    \n  tickets    - open\n  \
             actors     0 supervised, 0 restarts\n  public key -\n  ledger     - entries; \
             verifier key -\n  witness    cosigner key -\n  decisions  0 open\n"
        );
        assert_eq!(
            print_peers(&read(&serde_json::json!({"links": [{}]}))),
            "this host: - (key -), links off (link.listen is not set)\n\
             PEER  ADDR  STATE  SINCE  RTT  BY  WHY DOWN\n\
             -     -     -      -      -    -\n"
        );
        assert_eq!(
            print_drift(&read(&serde_json::json!({"peers": [{}], "alerts": [{}]}))),
            "reader - (the live primary), heartbeat - s, last pass -\n\
             PEER  VERDICT  G1  G2  G3  G4  ANCHOR  ALERTS\n\
             -     -        -   -   -   -   -       0\n\
             ALERT - -: -\n"
        );
    }
}
