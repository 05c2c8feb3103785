//! Hostile message text, end to end: whatever a message holds, it reaches an agent's terminal as
//! one bracketed paste and its Enter, with every control shown visibly, on every path that
//! pastes: a worker's fleet_ask (into the lead), a lead's fleet_send, the operator's send (CLI and
//! REST), and lead-to-lead mail from another host. The receiving agents run `sim-agent --record`,
//! which keeps every byte fleetd typed into their terminals.

use std::path::{Path, PathBuf};

use fleetd_actors::events::EventKind;
use fleetd_actors::sanitize::{PASTE_END, PASTE_START, for_terminal};
use fleetd_actors::tickets::state::subject_of;
use serde_json::{Value, json};

use crate::common::*;
use crate::link::{config, host, link_event};

/// A file name no earlier run used; the hostile text tries to `touch` it.
fn pwned_path() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    PathBuf::from(format!("/tmp/PWNED-{}-{nanos}", std::process::id()))
}

/// Text that would end the paste early and type into the terminal: the end marker then Enter
/// and Ctrl-C, a title change, a screen clear, a C1 CSI, a bare CR, a command, another CR, a
/// nested start marker, DEL, a bidi override, and an end marker as the very last thing.
fn hostile(pwned: &Path) -> String {
    format!(
        "hostile \x1b[201~\r\x03 then \x1b]0;pwned\x07 title \x1b[2J clear \u{9b}31m csi\
         \rtouch {}\r\x1b[200~ nested\x7f del \u{202e}bidi\nsecond line\tkept\n\x1b[201~",
        pwned.display()
    )
}

/// What must arrive of `h`, visibly: the text around each control, and the controls shown.
fn assert_visible(clean: &str, pwned: &Path) {
    for part in [
        "hostile ^[[201~^M^C then ",
        "^[]0;pwned^G title ^[[2J clear <U+009B>31m csi",
        &format!(
            "^Mtouch {}^M^[[200~ nested^? del <U+202E>bidi",
            pwned.display()
        ),
        "\nsecond line\tkept\n^[[201~",
    ] {
        assert!(clean.contains(part), "{part:?} not in {clean:?}");
    }
}

/// JSON with DEL and every non-ASCII character escaped (`\u009b`; serde_json escapes only
/// the C0 controls), so the tool calls themselves pass
/// through the exec agent's paste unaltered and the calls it makes carry the raw characters.
fn ascii_json(v: &Value) -> String {
    let mut out = String::new();
    for c in v.to_string().chars() {
        if c.is_ascii() && c != '\x7f' {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
    out
}

/// `D::calls_as` with the calls sent as ASCII-only JSON.
async fn calls_as(d: &D, name: &str, calls: Value) -> Vec<Value> {
    let t = d.ask(name, &ascii_json(&calls)).await;
    let text = t["reply"]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no reply: {t}"));
    serde_json::from_str::<Value>(text)
        .unwrap_or_else(|e| panic!("results json: {e}: {text}"))
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The pastes in a recording. Panics unless the recording is exactly a sequence of
/// `ESC[200~ payload ESC[201~ CR`, nothing before, between or after them, and each payload
/// holds no byte below 0x20 but newline and tab, no DEL, no ESC, no C1 control and no bidi
/// override.
fn pastes(file: &Path) -> Vec<String> {
    let rec = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    pastes_in(&rec, &file.display().to_string())
}

fn pastes_in(rec: &[u8], what: &str) -> Vec<String> {
    let show = |b: &[u8]| format!("{:?}", String::from_utf8_lossy(&b[..b.len().min(120)]));
    let mut out = vec![];
    let mut rest = rec;
    while !rest.is_empty() {
        let at = rec.len() - rest.len();
        let inner = rest
            .strip_prefix(PASTE_START)
            .unwrap_or_else(|| panic!("{what}: bytes outside a paste at {at}: {}", show(rest)));
        let esc = inner
            .iter()
            .position(|&b| b == 0x1b)
            .unwrap_or_else(|| panic!("a paste without its end at {at}: {}", show(inner)));
        assert!(
            inner[esc..].starts_with(PASTE_END),
            "an ESC inside the paste at {at}: {}",
            show(&inner[esc.saturating_sub(40)..])
        );
        let payload = &inner[..esc];
        let after = &inner[esc + PASTE_END.len()..];
        assert_eq!(
            after.first(),
            Some(&b'\r'),
            "the paste at {at} is not followed by exactly its Enter: {}",
            show(after)
        );
        if let Some(b) = payload
            .iter()
            .find(|&&b| (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f)
        {
            panic!(
                "control byte {b:#04x} in the paste at {at}: {}",
                show(payload)
            );
        }
        let text = std::str::from_utf8(payload)
            .unwrap_or_else(|e| panic!("the paste at {at} is not UTF-8: {e}"));
        let bad = |c: &char| {
            ('\u{80}'..='\u{9f}').contains(c)
                || ('\u{202a}'..='\u{202e}').contains(c)
                || ('\u{2066}'..='\u{2069}').contains(c)
        };
        if let Some(c) = text.chars().find(bad) {
            panic!("{c:?} in the paste at {at}: {text:?}");
        }
        out.push(text.to_string());
        rest = &after[1..];
    }
    out
}

/// The check above catches what the unfixed slot wrote (the raw text between the markers), and
/// passes what the fixed one writes.
#[test]
fn hostile_the_recording_check_tells_a_neutralised_paste_from_a_raw_one() {
    let h = hostile(Path::new("/tmp/PWNED-x"));
    let paste = |text: &str| {
        let mut b = PASTE_START.to_vec();
        b.extend_from_slice(text.as_bytes());
        b.extend_from_slice(PASTE_END);
        b.push(b'\r');
        b
    };
    let fixed = [
        fleetd_actors::sanitize::paste_bytes(&h, true),
        b"\r".to_vec(),
    ]
    .concat();
    assert_eq!(pastes_in(&fixed, "fixed"), vec![for_terminal(&h).0]);
    let cases = [
        ("the raw text", paste(&h)),
        ("only C1", paste("a\u{9b}2J")),
        ("only a bidi override", paste("a\u{202e}b")),
        ("only DEL", paste("a\x7fb")),
        ("only a bare CR", paste("a\rb")),
        (
            "a key after the Enter",
            [paste("a"), b"\x03".to_vec()].concat(),
        ),
        (
            "no Enter",
            paste("a")[..PASTE_START.len() + 1 + PASTE_END.len()].to_vec(),
        ),
    ];
    for (what, bytes) in cases {
        let r = std::panic::catch_unwind(|| pastes_in(&bytes, what));
        assert!(r.is_err(), "{what} passed the check");
    }
}

/// A paste's header line and its body; the header names the ticket and the sender.
fn check_paste<'a>(paste: &'a str, ticket: &str, from: &str) -> &'a str {
    let (head, body) = paste
        .split_once('\n')
        .unwrap_or_else(|| panic!("no header line: {paste:?}"));
    assert!(
        head.starts_with("[fleet ticket ")
            && head.contains(&format!("ticket {ticket} "))
            && head.contains(&format!("from {from} ")),
        "header {head:?} for {ticket} from {from}"
    );
    body
}

/// Every member of `d` is alive (none exited).
async fn all_alive(d: &D, names: &[&str]) {
    let v: Value = d.client.get("/members").await.unwrap();
    let ms = v["members"].as_array().unwrap();
    for n in names {
        let m = ms
            .iter()
            .find(|m| m["name"] == *n)
            .unwrap_or_else(|| panic!("no member {n}: {v}"));
        assert_ne!(m["status"], "exited", "{m}");
        assert!(m["exit"].is_null(), "{m}");
    }
}

/// `fleetd tickets`: the human table shows member text visibly (no ESC, no control byte, no C1),
/// while `--json` is exact: the stored subject, raw controls and all, as JSON escapes.
fn cli_tickets(d: &D, tickets: &[(String, String)]) {
    let o = d.cli(&["tickets"]);
    assert!(o.status.success(), "{o:?}");
    let human = o.stdout;
    if let Some(b) = human
        .iter()
        .find(|&&b| (b < 0x20 && b != b'\n') || b == 0x7f)
    {
        panic!(
            "control byte {b:#04x} in `fleetd tickets`:\n{}",
            String::from_utf8_lossy(&human)
        );
    }
    let human = String::from_utf8(human).expect("utf-8");
    assert!(
        !human.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
        "a C1 control in `fleetd tickets`: {human:?}"
    );
    for (id, _) in tickets {
        let row = human
            .lines()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for {id}:\n{human}"));
        assert!(row.contains("^["), "{row}");
    }
    let o = d.cli(&["tickets", "--json"]);
    assert!(o.status.success(), "{o:?}");
    assert!(!o.stdout.contains(&0x1b), "a raw ESC in --json output");
    let v: Value = serde_json::from_slice(&o.stdout).expect("--json is JSON");
    for (id, body) in tickets {
        let t = v
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == *id)
            .unwrap_or_else(|| panic!("{id} not in --json: {v}"));
        assert_eq!(t["subject"], subject_of(body), "{t}");
        assert!(t["subject"].as_str().unwrap().contains('\x1b'), "{t}");
        assert_eq!(
            t["receipt"]["altered"].as_str(),
            for_terminal(body).1.describe().as_deref(),
            "{t}"
        );
    }
}

/// Wait (bounded) until ticket `id` is resolved, however (answered, tail, undeliverable, ...),
/// so a recording is checked first even when the paste killed its agent; the state.
async fn settled(ev: &mut Events, id: &str) -> String {
    let e = ev
        .until(&format!("{id} resolved"), |e| {
            matches!(&e.kind, EventKind::Ticket { ticket, state, .. }
                if ticket.to_string() == id && state.is_resolved())
        })
        .await;
    let EventKind::Ticket { state, .. } = e.kind else {
        unreachable!()
    };
    serde_json::to_value(state)
        .unwrap()
        .as_str()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_text_reaches_each_local_terminal_as_one_visible_paste() {
    let dir = tempfile::tempdir().unwrap();
    let (lead_bytes, rec_bytes) = (dir.path().join("lead.bytes"), dir.path().join("rec.bytes"));
    let pwned = pwned_path();
    let h = hostile(&pwned);
    let (clean, alteration) = for_terminal(&h);
    assert_visible(&clean, &pwned);
    let altered = alteration.describe().expect("the text is altered");
    assert!(
        altered.contains("13 control characters") && altered.contains("^[ x5"),
        "{altered}"
    );
    let d = D::start().await;
    let mut ev = d.events().await;
    // The lead runs tool calls (so it can fleet_send) and records its terminal.
    let mut lead = sim(&["--script", "exec", "--work-ms", "100", "--record"]);
    lead.push(lead_bytes.display().to_string());
    d.spawn("lead", "primary", lead).await;
    d.spawn(
        "asker",
        "worker",
        sim(&["--script", "exec", "--work-ms", "0"]),
    )
    .await;
    d.spawn("rec", "worker", recorder(&rec_bytes, 150)).await;

    // 1. A worker asks its lead: the question is pasted into the lead's terminal.
    let r = calls_as(
        &d,
        "asker",
        json!([{"tool": "fleet_ask", "args": {"question": h}}]),
    )
    .await;
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    let ask = r[0]["structured"]["ticket"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", r[0]))
        .to_string();
    let state = settled(&mut ev, &ask).await;
    let lead_pastes = pastes(&lead_bytes);
    assert_eq!(lead_pastes.len(), 1, "{lead_pastes:#?}");
    let body = check_paste(&lead_pastes[0], &ask, "asker");
    assert_eq!(body, format!("question: {clean}"));
    assert_eq!(state, "replied", "{}", r[0]);
    assert_eq!(r[0]["structured"]["answered"], true, "{}", r[0]);
    ev.receipt(&ask, "accepted").await;

    // 2. The lead sends to a worker.
    let r = calls_as(
        &d,
        "lead",
        json!([{"tool": "fleet_send", "args": {"to": "rec", "message": h, "wait": false}}]),
    )
    .await;
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert!(
        r[0]["structured"]["ticket"]["receipt"]["altered"]
            .as_str()
            .is_some_and(|a| a.starts_with("altered: 13 control characters")),
        "the sender learns at once that its text was altered: {}",
        r[0]
    );
    let sent = r[0]["structured"]["ticket"]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // 3. The operator sends, with the CLI and over REST.
    let o = d.cli(&["send", "rec", &h]);
    assert!(o.status.success(), "{o:?}");
    assert!(!o.stdout.contains(&0x1b), "{o:?}");
    let out = String::from_utf8(o.stdout).unwrap();
    let by_cli = out
        .split_whitespace()
        .next()
        .filter(|t| t.starts_with("t-"))
        .unwrap_or_else(|| panic!("no ticket in {out:?}"))
        .to_string();
    let by_rest = d.send("rec", &h).await;

    let rec_tickets = [
        (&sent, "lead"),
        (&by_cli, "operator"),
        (&by_rest, "operator"),
    ];
    let mut states = vec![];
    for (t, _) in rec_tickets {
        states.push(settled(&mut ev, t).await);
    }
    // The worker's terminal got one paste per message, in order, each the whole text shown
    // visibly; the lead's got the operator's tool calls after the question.
    let rec_pastes = pastes(&rec_bytes);
    assert_eq!(rec_pastes.len(), 3, "{rec_pastes:#?}");
    for (p, (t, from)) in rec_pastes.iter().zip(rec_tickets) {
        assert_eq!(check_paste(p, t, from), clean);
    }
    let lead_pastes = pastes(&lead_bytes);
    assert_eq!(lead_pastes.len(), 2, "{lead_pastes:#?}");
    assert!(lead_pastes[1].contains("fleet_send"), "{}", lead_pastes[1]);
    // Each was taken as one turn, which ended without fleet_reply.
    assert_eq!(states, ["tail", "tail", "tail"]);

    // Receipts say what was altered.
    let ask_body = format!("question: {h}");
    for (t, body) in [
        (&ask, &ask_body),
        (&sent, &h),
        (&by_cli, &h),
        (&by_rest, &h),
    ] {
        let v = d.ticket(t).await;
        assert_eq!(v["receipt"]["state"], "accepted", "{v}");
        assert_eq!(
            v["receipt"]["altered"].as_str(),
            for_terminal(body).1.describe().as_deref(),
            "{v}"
        );
    }
    // Nothing was typed as keys: nobody quit on the Ctrl-C, no command ran.
    all_alive(&d, &["lead", "asker", "rec"]).await;
    assert!(!pwned.exists(), "{} exists", pwned.display());
    assert!(
        !ev.seen
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Exited { .. })),
        "a member exited"
    );
    cli_tickets(
        &d,
        &[
            (ask.clone(), ask_body.clone()),
            (sent.clone(), h.clone()),
            (by_cli.clone(), h.clone()),
            (by_rest.clone(), h.clone()),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_mail_from_another_host_reaches_its_lead_as_one_visible_paste() {
    let dir = tempfile::tempdir().unwrap();
    let beta_bytes = dir.path().join("beta-lead.bytes");
    let pwned = pwned_path();
    let h = hostile(&pwned);
    let (clean, _) = for_terminal(&h);
    let altered = for_terminal(&h).1.describe();
    let (a, b) = (host("alpha", 19), host("beta", 20));
    let da = D::with(config(&a, &[&b])).await;
    let mut ea = da.events().await;
    let db = D::with(config(&b, &[&a])).await;
    let mut eb = db.events().await;
    da.spawn(
        "lead",
        "primary",
        sim(&["--script", "exec", "--work-ms", "0"]),
    )
    .await;
    db.spawn("lead", "primary", recorder(&beta_bytes, 150))
        .await;
    ea.until("alpha sees beta up", |e| link_event(e, "beta", true))
        .await;

    // 4. Alpha's lead mails beta's lead.
    let r = calls_as(
        &da,
        "lead",
        json!([{"tool": "fleet_send", "args": {"to": "lead@beta", "message": h, "wait": false}}]),
    )
    .await;
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    let t = &r[0]["structured"]["ticket"];
    assert_eq!(t["remote"]["host"], "beta", "{t}");
    assert_eq!(t["remote"]["altered"].as_str(), altered.as_deref(), "{t}");
    assert_eq!(t["receipt"]["altered"].as_str(), altered.as_deref(), "{t}");
    let sent = t["id"].as_str().unwrap().to_string();

    let handed = eb
        .until("beta hands the mail to its lead", |e| {
            matches!(&e.kind, EventKind::MailHanded { peer, their_ticket, .. }
                if peer == "alpha" && their_ticket.to_string() == sent)
        })
        .await;
    let EventKind::MailHanded { ticket, .. } = &handed.kind else {
        unreachable!()
    };
    let got = ticket.to_string();
    let state = settled(&mut eb, &got).await;
    let ps = pastes(&beta_bytes);
    assert_eq!(ps.len(), 1, "{ps:#?}");
    assert_eq!(check_paste(&ps[0], &got, "lead@alpha"), clean);
    assert_visible(&ps[0], &pwned);
    assert_eq!(state, "tail");
    eb.receipt(&got, "accepted").await;
    // The answer (the transcript tail) travels back to alpha.
    ea.ticket(&sent, "tail").await;

    let bt = db.ticket(&got).await;
    assert_eq!(bt["from"], "lead@alpha", "{bt}");
    assert_eq!(bt["receipt"]["state"], "accepted", "{bt}");
    assert_eq!(
        bt["receipt"]["altered"].as_str(),
        altered.as_deref(),
        "{bt}"
    );
    let at = da.ticket(&sent).await;
    assert_eq!(at["state"], "tail", "{at}");
    assert_eq!(at["receipt"]["state"], "accepted", "{at}");
    assert_eq!(
        at["receipt"]["altered"].as_str(),
        altered.as_deref(),
        "{at}"
    );
    assert_eq!(at["remote"]["altered"].as_str(), altered.as_deref(), "{at}");
    // The tail that came back is shown visibly too.
    let tail = at["tail"]["text"].as_str().unwrap_or_default();
    assert!(!tail.contains('\x1b') && !tail.contains('\r'), "{tail:?}");

    all_alive(&da, &["lead"]).await;
    all_alive(&db, &["lead"]).await;
    assert!(!pwned.exists(), "{} exists", pwned.display());
    cli_tickets(&db, &[(got, h.clone())]);
    cli_tickets(&da, &[(sent, h)]);
}
