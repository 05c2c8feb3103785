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

pub(super) fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

pub(super) fn print_members(v: &Value) -> String {
    let mut out = String::new();
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
        &mut out,
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
        put!(out);
        table(&mut out, &["SLOT", "STATE", "MEMBER", "WAITING"], slots);
    }
    if let Some(c) = v.get("coordinator") {
        put!(out);
        put!(
            out,
            "coordinator {}: mailbox {} ({} held)",
            s(&c["coord_id"]),
            s(&c["mailbox"]["state"]),
            s(&c["mailbox"]["held"])
        );
    }
    out
}

pub(super) fn print_agents(v: &Value) -> String {
    let mut out = String::new();
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
        &mut out,
        &["PROFILE", "AGENT", "COMMAND", "PATH", "VERSION", "VERIFIED"],
        rows,
    );
    out
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
pub(super) fn print_ticket(t: &Value) -> String {
    let mut out = String::new();
    put!(
        out,
        "{} ({}) {} -> {}: {}",
        s(&t["id"]),
        s(&t["kind"]),
        s(&t["from"]),
        s(&t["to"]),
        s(&t["state"])
    );
    put!(out, "  subject   {}", s(&t["subject"]));
    put!(out, "  opened    {}", when(&t["created_at"]));
    put!(
        out,
        "  expires   {}",
        fleetd_actors::clock::rfc3339(t["expires_at"].as_u64().unwrap_or(0))
    );
    if t["remote"].is_object() {
        let r = &t["remote"];
        put!(
            out,
            "  mail      to {}: {} (transmitted {}, delivered {})",
            s(&r["host"]),
            s(&r["state"]),
            when(&r["transmitted_at"]),
            when(&r["delivered_at"])
        );
    } else if t["receipt"].is_object() {
        let r = &t["receipt"];
        put!(
            out,
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
        put!(
            out,
            "  from      lead@{} (their {})",
            s(&t["origin"]["host"]),
            s(&t["origin"]["ticket"])
        );
    }
    for (label, key) in [("reply", "reply"), ("tail", "tail")] {
        if let Some(text) = t[key]["text"].as_str() {
            put!(out, "  {label:<9} at {}", when(&t[key]["at"]));
            for line in text.lines() {
                put!(out, "    {line}");
            }
        }
    }
    if let Some(late) = t["late"].as_array().filter(|l| !l.is_empty()) {
        put!(
            out,
            "  late      {} replies after the TTL (kept, refused)",
            late.len()
        );
    }
    if let Some(n) = t["note"].as_str() {
        put!(out, "  note      {n}");
    }
    put!(
        out,
        "  acked     {}",
        if t["acked"] == true { "yes" } else { "no" }
    );
    out
}

pub(super) fn print_tickets(v: &Value) -> String {
    let mut out = String::new();
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

pub(super) fn print_decision(v: &Value) -> String {
    let mut out = String::new();
    put!(out, "{}  {}", s(&v["id"]), s(&v["subject"]));
    put!(
        out,
        "  opened by {} at {}; deadline {}; at most {} rounds",
        s(&v["opened_by"]),
        s(&v["opened_at"]),
        s(&v["deadline"]),
        s(&v["max_rounds"])
    );
    put!(
        out,
        "  convened: {}",
        v["slots"]
            .as_array()
            .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    );
    for r in v["records"].as_array().cloned().unwrap_or_default() {
        put!(
            out,
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
        put!(
            out,
            "  REFUSED round {} from {} (slot {}): {}",
            s(&r["round"]),
            s(&r["member"]),
            s(&r["slot"]),
            s(&r["why"])
        );
    }
    match v.get("closed").filter(|c| !c.is_null()) {
        None => put!(out, "  OPEN: missing {}", {
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
            put!(
                out,
                "  CLOSED {} by {} at {} [#{}]",
                s(&c["outcome"]).to_uppercase(),
                s(&c["by"]),
                s(&c["at"]),
                s(&c["seq"])
            );
            for o in c["slots"].as_array().cloned().unwrap_or_default() {
                put!(
                    out,
                    "    {:<6} {}{}",
                    s(&o["slot"]),
                    s(&o["outcome"]),
                    o["round"]
                        .as_u64()
                        .map(|r| format!(" (round {r})"))
                        .unwrap_or_default()
                );
            }
            put!(out, "  verdict:   {}", s(&c["verdict"]));
            put!(out, "  rationale: {}", s(&c["rationale"]));
        }
    }
    out
}

pub(super) fn print_drift_reports(out: &mut String, rows: Vec<Value>) {
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
        out,
        &[
            "PEER", "VERDICT", "G1", "G2", "G3", "G4", "ANCHOR", "ALERTS",
        ],
        rows,
    );
}

/// What `fleetd spawn` did.
pub(super) fn print_spawned(v: &Value) -> String {
    let mut out = String::new();
    put!(
        out,
        "spawned {} ({}, profile {}) pid {} charter sha256 {}",
        s(&v["name"]),
        s(&v["role"]),
        s(&v["profile"]),
        s(&v["pid"]),
        s(&v["charter_sha256"])
    );
    for n in v["notes"].as_array().cloned().unwrap_or_default() {
        put!(out, "  {}", s(&n));
    }
    out
}

/// One member (`fleetd status NAME`).
pub(super) fn print_member_detail(v: &Value) -> String {
    let mut out = String::new();
    put!(
        out,
        "{} ({}{})",
        s(&v["name"]),
        s(&v["role"]),
        v["slot"]
            .as_str()
            .map(|x| format!(", slot {x}"))
            .unwrap_or_default()
    );
    put!(
        out,
        "  status     {} for {}{}",
        s(&v["status"]),
        ago(v["status_since"].as_u64()),
        if v["slot_view"]["pinned_by_signal"] == true {
            " (by signal)"
        } else {
            ""
        }
    );
    put!(out, "  parent     {}", s(&v["parent"]));
    put!(out, "  pid        {}", s(&v["pid"]));
    put!(out, "  profile    {}", s(&v["profile"]));
    put!(out, "  charter    sha256 {}", s(&v["charter_sha256"]));
    put!(
        out,
        "  queue      {} waiting{}",
        v["queue"]["queued"].as_array().map_or(0, |a| a.len()),
        if v["queue"]["stalled"] == true {
            ", held behind a stalled message"
        } else {
            ""
        }
    );
    put!(
        out,
        "  owes       {}",
        v["owes"]
            .as_array()
            .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    );
    if let Some(r) = v["exit"]["reason"].as_str() {
        put!(out, "  exit       {r}");
    }
    out
}

/// The daemon (`fleetd status`).
pub(super) fn print_daemon_status(v: &Value) -> String {
    let mut out = String::new();
    put!(
        out,
        "fleetd {} on {} (pid {}), up {}",
        s(&v["version"]),
        s(&v["host"]),
        s(&v["pid"]),
        ago(v["started_at"].as_u64())
    );
    put!(out, "  state dir  {}", s(&v["state_dir"]));
    put!(
        out,
        "  members    {}",
        v["members"]
            .as_object()
            .map(|m| m
                .iter()
                .map(|(k, n)| format!("{n} {k}"))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default()
    );
    put!(out, "  tickets    {} open", s(&v["open_tickets"]));
    let restarts: u64 = v["children"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["restarts_total"].as_u64()).sum())
        .unwrap_or(0);
    put!(
        out,
        "  actors     {} supervised, {restarts} restarts",
        v["children"].as_array().map_or(0, |a| a.len())
    );
    put!(out, "  public key {}", s(&v["public_key"]));
    put!(
        out,
        "  ledger     {} entries{}; verifier key {}",
        s(&v["ledger"]["entries"]),
        v["ledger"]["broken"]
            .as_str()
            .map(|b| format!(" (BROKEN: {b})"))
            .unwrap_or_default(),
        s(&v["ledger_vkey"])
    );
    put!(out, "  witness    cosigner key {}", s(&v["witness_vkey"]));
    let open = v["open_decisions"].as_array().cloned().unwrap_or_default();
    put!(
        out,
        "  decisions  {} open{}",
        open.len(),
        open.iter()
            .map(|d| format!(
                "; {} missing {}",
                s(&d["id"]),
                d["missing"]
                    .as_array()
                    .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                    .unwrap_or_default()
            ))
            .collect::<String>()
    );
    if let Some(e) = v["escalation"].as_str() {
        put!(out, "  ESCALATED  {e}");
    }
    out
}

/// What `fleetd send` got back: the ticket, and its answer if `--wait` brought one.
pub(super) fn print_sent(v: &Value) -> String {
    let mut out = String::new();
    let t = &v["ticket"];
    put!(
        out,
        "{} to {}: {} (receipt {})",
        s(&t["id"]),
        s(&t["to"]),
        s(&t["state"]),
        s(&t["receipt"]["state"])
    );
    if let Some(r) = t["reply"]["text"].as_str().or(t["tail"]["text"].as_str()) {
        put!(out, "{r}");
    }
    out
}

/// `fleetd decision list`.
pub(super) fn print_decisions(v: &Value) -> String {
    let mut out = String::new();
    let rows = v
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|d| {
            vec![
                s(&d["id"]),
                s(&d["state"]),
                ago(Some(
                    fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock)
                        .saturating_sub(d["age_ms"].as_u64().unwrap_or(0)),
                )),
                d["slots"]
                    .as_array()
                    .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                    .unwrap_or_default(),
                d["missing"]
                    .as_array()
                    .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                    .unwrap_or_default(),
                s(&d["deadline"]),
                fleetd_actors::types::truncate(d["subject"].as_str().unwrap_or(""), 50),
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
pub(super) fn print_peers(v: &Value) -> String {
    let mut out = String::new();
    put!(
        out,
        "this host: {} (key {}), links {}",
        s(&v["host"]),
        s(&v["public_key"]),
        v["listen"]
            .as_str()
            .map_or("off (link.listen is not set)".to_string(), |l| format!(
                "on {l}"
            ))
    );
    let rows = v["links"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|l| {
            vec![
                s(&l["peer"]),
                s(&l["addr"]),
                s(&l["phase"]),
                ago(l["since"].as_u64()),
                l["rtt_us"]
                    .as_u64()
                    .map_or("-".into(), |r| format!("{:.2} ms", r as f64 / 1000.0)),
                match l["dialled"].as_bool() {
                    Some(true) => "dialled".into(),
                    Some(false) => "accepted".into(),
                    None => "-".into(),
                },
                l["reason"].as_str().unwrap_or("").to_string(),
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
pub(super) fn print_drift(v: &Value) -> String {
    let mut out = String::new();
    put!(
        out,
        "reader {} (the live primary), heartbeat {} s, last pass {}",
        s(&v["reader"]),
        s(&v["heartbeat_secs"]),
        s(&v["last_pass"])
    );
    print_drift_reports(&mut out, v["peers"].as_array().cloned().unwrap_or_default());
    for a in v["alerts"].as_array().cloned().unwrap_or_default() {
        put!(
            out,
            "ALERT {} {}: {}",
            s(&a["rule"]),
            s(&a["peer"]),
            s(&a["text"])
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::samples;
    use super::*;

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
            ("members", print_members(&samples::list(at))),
            ("members_plain", print_members(&samples::list_plain(at))),
            ("agents", print_agents(&samples::agents())),
            ("tickets", print_tickets(&samples::tickets(at))),
            ("ticket_local", print_ticket(&samples::tickets(at)[0])),
            ("ticket_remote", print_ticket(&samples::tickets(at)[1])),
            ("ticket_received", print_ticket(&samples::tickets(at)[2])),
            ("decision_open", print_decision(&samples::decision_open())),
            (
                "decision_closed",
                print_decision(&samples::decision_closed()),
            ),
            ("decisions", print_decisions(&samples::decisions(at))),
            ("spawned", print_spawned(&samples::spawned(at))),
            (
                "member_detail",
                print_member_detail(&samples::member_detail(at)),
            ),
            (
                "member_detail_exited",
                print_member_detail(&samples::member_detail_exited(at)),
            ),
            (
                "daemon_status",
                print_daemon_status(&samples::daemon_status(at)),
            ),
            (
                "daemon_status_quiet",
                print_daemon_status(&samples::daemon_status_quiet(at)),
            ),
            ("sent", print_sent(&samples::sent(at))),
            ("sent_remote", print_sent(&samples::sent_remote(at))),
            ("peers", print_peers(&samples::peers(at))),
            ("peers_listening", print_peers(&samples::peers_listening())),
            ("drift", print_drift(&samples::drift(at))),
            ("drift_empty", print_drift(&samples::drift_empty())),
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
}
