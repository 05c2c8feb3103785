//! Human output: tables, tickets, decisions, drift reports and events, every piece of member
//! text through `say!` (shown, never interpreted by the terminal).

use super::*;

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

/// Print rows as aligned columns.
pub(super) fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        say!("{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|s| s.to_string()).collect());
    for r in rows {
        line(r);
    }
}

pub(super) fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub(super) fn print_members(v: &Value) {
    let rows = v["members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            vec![
                s(&m["name"]),
                s(&m["role"]),
                s(&m["slot"]),
                s(&m["status"]),
                ago(m["status_since"].as_u64()),
                s(&m["parent"]),
                s(&m["pid"]),
                s(&m["profile"]),
                s(&m["worktree"]["branch"]),
                m["exit"]["reason"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    table(
        &[
            "NAME", "ROLE", "SLOT", "STATUS", "FOR", "PARENT", "PID", "PROFILE", "WORKTREE", "EXIT",
        ],
        rows,
    );
    let slots: Vec<Vec<String>> = v["architect_slots"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|x| {
            vec![
                s(&x["slot"]),
                s(&x["state"]),
                s(&x["member"]),
                s(&x["waiting"]),
            ]
        })
        .collect();
    if !slots.is_empty() {
        say!();
        table(&["SLOT", "STATE", "MEMBER", "WAITING"], slots);
    }
    if let Some(c) = v.get("coordinator") {
        say!();
        say!(
            "coordinator {}: mailbox {} ({} held)",
            s(&c["coord_id"]),
            s(&c["mailbox"]["state"]),
            s(&c["mailbox"]["held"])
        );
    }
}

pub(super) fn print_agents(v: &Value) {
    let rows = v
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|a| {
            vec![
                s(&a["profile"]),
                s(&a["agent"]),
                s(&a["command"]),
                a["path"].as_str().unwrap_or("not installed").to_string(),
                s(&a["version"]),
                match a["verified"].as_bool() {
                    Some(true) => "yes".into(),
                    Some(false) => format!("no (verified: {})", s(&a["verified_versions"])),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &["PROFILE", "AGENT", "COMMAND", "PATH", "VERSION", "VERIFIED"],
        rows,
    );
}

/// A ticket's receipt state: the remote one for mail to another host.
pub(super) fn ticket_receipt(t: &Value) -> String {
    if t["remote"].is_object() {
        s(&t["remote"]["state"])
    } else {
        s(&t["receipt"]["state"])
    }
}

/// A time as RFC 3339 with how long ago, or `-`.
pub(super) fn when(ms: &Value) -> String {
    match ms.as_u64() {
        Some(m) => format!(
            "{} ({} ago)",
            fleetd_actors::clock::rfc3339(m),
            ago(Some(m))
        ),
        None => "-".into(),
    }
}

/// One ticket, for a person (`fleetd tickets ID`; `--json` prints the daemon's answer).
pub(super) fn print_ticket(t: &Value) {
    say!(
        "{} ({}) {} -> {}: {}",
        s(&t["id"]),
        s(&t["kind"]),
        s(&t["from"]),
        s(&t["to"]),
        s(&t["state"])
    );
    say!("  subject   {}", s(&t["subject"]));
    say!("  opened    {}", when(&t["created_at"]));
    say!(
        "  expires   {}",
        fleetd_actors::clock::rfc3339(t["expires_at"].as_u64().unwrap_or(0))
    );
    if t["remote"].is_object() {
        let r = &t["remote"];
        say!(
            "  mail      to {}: {} (transmitted {}, delivered {})",
            s(&r["host"]),
            s(&r["state"]),
            when(&r["transmitted_at"]),
            when(&r["delivered_at"])
        );
    } else if t["receipt"].is_object() {
        let r = &t["receipt"];
        say!(
            "  receipt   {} {} (queued {}, delivered {}){}",
            s(&r["msg"]),
            s(&r["state"]),
            when(&r["queued_at"]),
            when(&r["delivered_at"]),
            r["note"]
                .as_str()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
    }
    if t["origin"].is_object() {
        say!(
            "  from      lead@{} (their {})",
            s(&t["origin"]["host"]),
            s(&t["origin"]["ticket"])
        );
    }
    for (label, key) in [("reply", "reply"), ("tail", "tail")] {
        if let Some(text) = t[key]["text"].as_str() {
            say!("  {label:<9} at {}", when(&t[key]["at"]));
            for line in text.lines() {
                say!("    {line}");
            }
        }
    }
    if let Some(late) = t["late"].as_array().filter(|l| !l.is_empty()) {
        say!(
            "  late      {} replies after the TTL (kept, refused)",
            late.len()
        );
    }
    if let Some(n) = t["note"].as_str() {
        say!("  note      {n}");
    }
    say!(
        "  acked     {}",
        if t["acked"] == true { "yes" } else { "no" }
    );
}

pub(super) fn print_tickets(v: &Value) {
    let rows = v
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            let answer = t["reply"]["text"]
                .as_str()
                .or(t["tail"]["text"].as_str())
                .or(t["note"].as_str())
                .unwrap_or("");
            vec![
                s(&t["id"]),
                s(&t["kind"]),
                s(&t["from"]),
                s(&t["to"]),
                s(&t["state"]),
                ticket_receipt(t),
                ago(t["created_at"].as_u64()),
                fleetd_actors::types::truncate(
                    &t["subject"].as_str().unwrap_or("").replace('\n', " "),
                    30,
                ),
                fleetd_actors::types::truncate(&answer.replace('\n', " "), 50),
            ]
        })
        .collect();
    table(
        &[
            "TICKET", "KIND", "FROM", "TO", "STATE", "RECEIPT", "AGE", "SUBJECT", "ANSWER",
        ],
        rows,
    );
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

pub(super) fn print_decision(v: &Value) {
    say!("{}  {}", s(&v["id"]), s(&v["subject"]));
    say!(
        "  opened by {} at {}; deadline {}; at most {} rounds",
        s(&v["opened_by"]),
        s(&v["opened_at"]),
        s(&v["deadline"]),
        s(&v["max_rounds"])
    );
    say!(
        "  convened: {}",
        v["slots"]
            .as_array()
            .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    );
    for r in v["records"].as_array().cloned().unwrap_or_default() {
        say!(
            "  round {} {:<5} ({}) {} at {} [#{}]:\n      {}",
            s(&r["round"]),
            s(&r["slot"]),
            s(&r["member"]),
            s(&r["kind"]),
            s(&r["at"]),
            s(&r["seq"]),
            s(&r["content"]).replace('\n', "\n      ")
        );
    }
    for r in v["refused"].as_array().cloned().unwrap_or_default() {
        say!(
            "  REFUSED round {} from {} (slot {}): {}",
            s(&r["round"]),
            s(&r["member"]),
            s(&r["slot"]),
            s(&r["why"])
        );
    }
    match v.get("closed").filter(|c| !c.is_null()) {
        None => say!("  OPEN: missing {}", {
            let recorded: Vec<String> = v["records"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|r| s(&r["slot"]))
                .collect();
            v["slots"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(s)
                .filter(|x| !recorded.contains(x))
                .collect::<Vec<_>>()
                .join(", ")
        }),
        Some(c) => {
            say!(
                "  CLOSED {} by {} at {} [#{}]",
                s(&c["outcome"]).to_uppercase(),
                s(&c["by"]),
                s(&c["at"]),
                s(&c["seq"])
            );
            for o in c["slots"].as_array().cloned().unwrap_or_default() {
                say!(
                    "    {:<6} {}{}",
                    s(&o["slot"]),
                    s(&o["outcome"]),
                    o["round"]
                        .as_u64()
                        .map(|r| format!(" (round {r})"))
                        .unwrap_or_default()
                );
            }
            say!("  verdict:   {}", s(&c["verdict"]));
            say!("  rationale: {}", s(&c["rationale"]));
        }
    }
}

pub(super) fn print_drift_reports(rows: Vec<Value>) {
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                s(&r["peer"]),
                s(&r["verdict"]),
                s(&r["g1"]),
                s(&r["g2"]),
                s(&r["g3"]),
                s(&r["g4"]),
                fleetd_actors::types::truncate(r["anchor"].as_str().unwrap_or("-"), 40),
                r["alerts"]
                    .as_array()
                    .map(|a| a.len())
                    .unwrap_or(0)
                    .to_string(),
            ]
        })
        .collect();
    table(
        &[
            "PEER", "VERDICT", "G1", "G2", "G3", "G4", "ANCHOR", "ALERTS",
        ],
        rows,
    );
}
