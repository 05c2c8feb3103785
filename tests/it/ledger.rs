//! The decision ledger through the real binary: the seed's two-round flow with sim architects,
//! timeouts, abstains, a lead that dies, tampering caught by `fleetd ledger verify`, torn-tail
//! recovery, and checkpoints checked by the reference signed-note implementation (Go's
//! golang.org/x/mod/sumdb/note).

use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use crate::common::*;

fn exec() -> Vec<String> {
    sim(&["--script", "exec", "--work-ms", "0"])
}

fn architect(stance: &str, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "--script",
        "architect",
        "--work-ms",
        "10",
        "--stance",
        stance,
    ];
    a.extend_from_slice(extra);
    sim(&a)
}

/// Have the lead (exec script) make one call; its structured result (or error) and is_error.
async fn lead(d: &D, tool: &str, args: Value) -> (Value, bool) {
    let r = d
        .calls_as("lead", json!([{"tool": tool, "args": args}]))
        .await;
    (r[0]["structured"].clone(), r[0]["is_error"] == true)
}

async fn open(d: &D, slots: &[&str], deadline_secs: u64) -> String {
    let (v, err) = lead(d, "fleet_decision", json!({"action": "open", "subject": "which store for the queue", "slots": slots, "deadline_secs": deadline_secs})).await;
    assert!(!err, "{v}");
    v["decision_id"].as_str().unwrap().to_string()
}

/// The lead spawns an architect into a slot and sends it a brief; returns the ticket.
async fn brief(
    d: &D,
    ev: &mut Events,
    name: &str,
    slot: &str,
    cmd: Vec<String>,
    text: &str,
) -> String {
    let (v, err) = lead(
        d,
        "fleet_spawn",
        json!({"role": "architect", "name": name, "slot": slot, "command": cmd}),
    )
    .await;
    assert!(!err, "{v}");
    ev.status(name, "idle").await;
    send(d, name, text).await
}

async fn send(d: &D, to: &str, text: &str) -> String {
    let (v, err) = lead(d, "fleet_send", json!({"to": to, "message": text})).await;
    assert!(!err, "{v}");
    v["ticket"]["id"].as_str().unwrap().to_string()
}

fn verify(d: &D) -> (i32, String, String) {
    let o = std::process::Command::new(bin())
        .args(["ledger", "verify"])
        .arg(d.state.join("ledger.jsonl"))
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into(),
        String::from_utf8_lossy(&o.stderr).into(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_flow_two_architects_disagree_exchange_then_close_quorate() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", exec()).await;
    let id = open(&d, &["opus", "sol"], 120).await;
    // Spawn both first, then brief both, independently.
    let t1 = brief(
        &d,
        &mut ev,
        "arch-opus",
        "opus",
        architect("use redb", &["--converge"]),
        &format!("decision {id} round 1: which store for the queue?"),
    )
    .await;
    let t2 = brief(
        &d,
        &mut ev,
        "arch-sol",
        "sol",
        architect("use sqlite", &[]),
        &format!("decision {id} round 1: which store for the queue?"),
    )
    .await;
    ev.ticket(&t1, "replied").await;
    ev.ticket(&t2, "replied").await;
    // They disagree; one exchange round, each given the other's position verbatim.
    let r1 = send(
        &d,
        "arch-opus",
        &format!("decision {id} round 2. other: use sqlite"),
    )
    .await;
    let r2 = send(
        &d,
        "arch-sol",
        &format!("decision {id} round 2. other: use redb"),
    )
    .await;
    ev.ticket(&r1, "replied").await;
    ev.ticket(&r2, "replied").await;
    let (v, err) = lead(&d, "fleet_decision", json!({"action": "close", "decision_id": id, "verdict": "use sqlite", "rationale": "opus came round; sol held"})).await;
    assert!(!err, "{v}");
    let c = &v["decision"]["closed"];
    assert_eq!(c["outcome"], "quorate");
    assert_eq!(
        c["slots"],
        json!([{"slot": "opus", "outcome": "position", "round": 2}, {"slot": "sol", "outcome": "position", "round": 2}])
    );
    // Attribution: every record is its writer's slot; contents are what each said.
    let rec = v["decision"]["records"].as_array().unwrap();
    assert_eq!(rec.len(), 4);
    for r in rec {
        let expected = if r["slot"] == "opus" {
            "arch-opus"
        } else {
            "arch-sol"
        };
        assert_eq!(r["member"], expected, "{r}");
    }
    assert_eq!(rec[2]["content"], "agree with: use sqlite");
    // The readable record, and the file verifies (signatures with the host key beside it).
    let o = d.cli(&["decision", "show", &id]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("CLOSED QUORATE")
            && out.contains("agree with: use sqlite")
            && out.contains("verdict:   use sqlite"),
        "{out}"
    );
    let (code, out, err) = verify(&d);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("6 entries") && out.contains("signatures verified"),
        "{out}"
    );
    // `/metrics` shows the appends and how long their syncs took: each group commit is one
    // sync, so 1 to 6 of them for 6 entries (checkpoints may add one more).
    let m = d.client.get_text("/metrics").await.unwrap();
    let value = |name: &str| -> f64 {
        m.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {name} in:\n{m}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("fleetd_ledger_entries"), 6.0);
    let syncs = value("fleetd_ledger_sync_seconds_count");
    assert!((1.0..=7.0).contains(&syncs), "{syncs} syncs");
    assert!(value("fleetd_ledger_sync_seconds_sum") > 0.0);
    assert_eq!(
        value(r#"fleetd_ledger_sync_seconds_bucket{le="+Inf"}"#),
        syncs
    );
    // The dashboard's decision pane: each record names its ledger entry.
    let shown: Value = d.client.get(&format!("/decisions/{id}")).await.unwrap();
    assert!(shown["opened_seq"].as_u64().unwrap() >= 1, "{shown}");
    assert!(shown["closed"]["seq"].as_u64().unwrap() > shown["opened_seq"].as_u64().unwrap());
    // Nothing can be recorded after close.
    let t = send(
        &d,
        "arch-opus",
        &format!("decision {id} round 2. other: anything"),
    )
    .await;
    ev.ticket(&t, "replied").await;
    let reply = d.ticket(&t).await["reply"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reply.contains("refused") && reply.contains("closed"),
        "{reply}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_architect_killed_before_answering_times_out_and_the_close_is_degraded() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", exec()).await;
    let id = open(&d, &["opus", "sol"], 3).await;
    let t1 = brief(
        &d,
        &mut ev,
        "arch-opus",
        "opus",
        architect("use redb", &[]),
        &format!("decision {id} round 1"),
    )
    .await;
    ev.ticket(&t1, "replied").await;
    // sol's architect dies before it answers.
    let (v, err) = lead(&d, "fleet_spawn", json!({"role": "architect", "name": "arch-sol", "slot": "sol", "command": architect("x", &["--ignore-input"])})).await;
    assert!(!err, "{v}");
    let (_, err) = lead(&d, "fleet_stop", json!({"name": "arch-sol"})).await;
    assert!(!err);
    // A premature close is refused: sol has no terminal outcome and the deadline has not passed.
    let (v, err) = lead(
        &d,
        "fleet_decision",
        json!({"action": "close", "decision_id": id, "verdict": "v", "rationale": "r"}),
    )
    .await;
    assert!(err);
    assert!(
        v["error"]["why"]
            .as_str()
            .unwrap()
            .contains("has not passed"),
        "{v}"
    );
    // The daemon's clock passes the deadline; now the close is accepted, degraded.
    ev.until("deadline", |e| matches!(&e.kind, EventKind::Decision { action, .. } if action.starts_with("deadline: timed out sol"))).await;
    let (v, err) = lead(&d, "fleet_decision", json!({"action": "close", "decision_id": id, "verdict": "use redb", "rationale": "sol never answered"})).await;
    assert!(!err, "{v}");
    assert_eq!(v["decision"]["closed"]["outcome"], "degraded");
    assert_eq!(
        v["decision"]["closed"]["slots"][1],
        json!({"slot": "sol", "outcome": "timeout", "round": null})
    );
    assert_eq!(verify(&d).0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_position_is_refused_and_kept_visible() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", exec()).await;
    let id = open(&d, &["opus"], 2).await;
    // A slow architect: it works past the deadline, then tries to record.
    let t = brief(
        &d,
        &mut ev,
        "arch-opus",
        "opus",
        sim(&[
            "--script",
            "architect",
            "--work-ms",
            "3500",
            "--stance",
            "too late",
        ]),
        &format!("decision {id} round 1"),
    )
    .await;
    ev.ticket(&t, "replied").await;
    let reply = d.ticket(&t).await["reply"]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        reply.contains("refused") && reply.contains("timed out"),
        "{reply}"
    );
    ev.until(
        "refusal event",
        |e| matches!(&e.kind, EventKind::Decision { action, .. } if action == "refused"),
    )
    .await;
    let show: Value = d.client.get(&format!("/decisions/{id}")).await.unwrap();
    assert_eq!(show["refused"][0]["slot"], "opus", "{show}");
    assert!(show["records"].as_array().unwrap().is_empty());
    assert!(d.log().contains("late position refused"));
    let (v, err) = lead(
        &d,
        "fleet_decision",
        json!({"action": "close", "decision_id": id, "verdict": "none", "rationale": "timed out"}),
    )
    .await;
    assert!(!err, "{v}");
    assert_eq!(v["decision"]["closed"]["outcome"], "degraded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_abstain_is_degraded() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", exec()).await;
    let id = open(&d, &["opus", "sol"], 120).await;
    let a = brief(
        &d,
        &mut ev,
        "arch-opus",
        "opus",
        architect("outside my evidence", &["--abstain"]),
        &format!("decision {id} round 1"),
    )
    .await;
    let b = brief(
        &d,
        &mut ev,
        "arch-sol",
        "sol",
        architect("both options equal", &["--abstain"]),
        &format!("decision {id} round 1"),
    )
    .await;
    ev.ticket(&a, "replied").await;
    ev.ticket(&b, "replied").await;
    let (v, err) = lead(&d, "fleet_decision", json!({"action": "close", "decision_id": id, "verdict": "defer", "rationale": "nobody had evidence"})).await;
    assert!(!err, "{v}");
    assert_eq!(v["decision"]["closed"]["outcome"], "degraded");
    assert_eq!(v["decision"]["closed"]["slots"][0]["outcome"], "abstain");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_lead_dies_the_decision_stays_open_and_visible_across_restarts() {
    let mut d = D::start().await;
    d.spawn("lead", "primary", exec()).await;
    let id = open(&d, &["opus", "sol"], 600).await;
    let _: Value = d.client.delete("/members/lead").await.unwrap();
    let list: Vec<Value> = d.client.get("/decisions").await.unwrap();
    assert_eq!(list[0]["state"], "open");
    assert_eq!(list[0]["missing"], json!(["opus", "sol"]));
    let st: Value = d.client.get("/status").await.unwrap();
    assert_eq!(st["open_decisions"][0]["id"], id.as_str());
    let table = String::from_utf8_lossy(&d.cli(&["decision", "list"]).stdout).to_string();
    assert!(
        table.contains(&id) && table.contains("open") && table.contains("opus,sol"),
        "{table}"
    );
    // A panic in its record restarts it from the ledger; a daemon restart rebuilds it too.
    let mut ev = d.events().await;
    d.fault(&format!("decision:{id}")).await;
    ev.until("restart", |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == &format!("decision:{id}"))).await;
    d.kill9();
    drop(ev);
    d.boot().await;
    let list: Vec<Value> = d.client.get("/decisions").await.unwrap();
    assert_eq!(list[0]["state"], "open", "never auto-closed");
    // A new lead sees it in its fleet_list.
    d.spawn("lead2", "primary", exec()).await;
    let r = d.calls_as("lead2", json!([{"tool": "fleet_list"}])).await;
    assert_eq!(r[0]["structured"]["open_decisions"][0]["id"], id.as_str());
    assert_eq!(verify(&d).0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_ledger_writer_keeps_every_answered_entry_and_takes_appends_again() {
    let d = D::start().await;
    d.spawn("lead", "primary", exec()).await;
    let first = open(&d, &["opus"], 600).await;
    let mut ev = d.events().await;
    d.fault("ledger").await;
    ev.until(
        "restart",
        |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "ledger"),
    )
    .await;
    // The new run recovered the file and its board: the next open gets the next id, and is
    // appended after the first.
    let second = open(&d, &["opus"], 600).await;
    assert_ne!(first, second);
    let list: Vec<Value> = d.client.get("/decisions").await.unwrap();
    let ids: Vec<&str> = list.iter().filter_map(|v| v["id"].as_str()).collect();
    assert!(
        ids.contains(&first.as_str()) && ids.contains(&second.as_str()),
        "{list:?}"
    );
    let (code, out, err) = verify(&d);
    assert_eq!(code, 0, "{out}{err}");
    let text = std::fs::read_to_string(d.state.join("ledger.jsonl")).unwrap();
    let opens: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("\"type\":\"open\""))
        .collect();
    assert_eq!(opens.len(), 2, "{text}");
    assert!(
        opens[0].contains(&format!("\"decision\":\"{first}\"")),
        "{text}"
    );
    assert!(
        opens[1].contains(&format!("\"decision\":\"{second}\"")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_roles_of_the_table_may_open_record_and_close() {
    let d = D::start().await;
    d.spawn("lead", "primary", exec()).await;
    d.spawn("w1", "worker", exec()).await;
    let id = open(&d, &["opus"], 60).await;
    let r = d
        .calls_as(
            "w1",
            json!([
                {"tool": "fleet_decision", "args": {"action": "open", "subject": "x", "slots": ["opus"], "deadline_secs": 9}},
                {"tool": "fleet_decision", "args": {"action": "position", "decision_id": id, "round": 1, "kind": "position", "content": "me"}},
                {"tool": "fleet_decision", "args": {"action": "close", "decision_id": id, "verdict": "v", "rationale": "r"}},
                {"tool": "fleet_decision", "args": {"action": "show", "decision_id": id}},
            ]),
        )
        .await;
    assert_eq!(r[0]["structured"]["error"]["rule"], "DECIDE");
    assert_eq!(r[1]["structured"]["error"]["rule"], "POSITION");
    assert_eq!(r[2]["structured"]["error"]["rule"], "DECIDE");
    assert_eq!(r[3]["is_error"], false);
    // Bad opens are refused with what would be accepted.
    let (v, err) = lead(
        &d,
        "fleet_decision",
        json!({"action": "open", "subject": "x", "slots": ["nope"], "deadline_secs": 9}),
    )
    .await;
    assert!(
        err && v["error"]["accepted"].as_str().unwrap().contains("opus"),
        "{v}"
    );
    let (v, err) = lead(
        &d,
        "fleet_decision",
        json!({"action": "open", "subject": "x", "slots": ["opus"]}),
    )
    .await;
    assert!(
        err && v["error"]["why"].as_str().unwrap().contains("deadline"),
        "{v}"
    );
}

/// Tamper with copies of a real ledger; `fleetd ledger verify` names the first bad line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampering_with_the_ledger_file_is_caught() {
    let mut c = test_config();
    c.ledger.checkpoint_every = 2;
    let d = D::with(c).await;
    d.spawn("lead", "primary", exec()).await;
    for _ in 0..3 {
        open(&d, &["opus", "sol"], 600).await;
    }
    let text = std::fs::read_to_string(d.state.join("ledger.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        d.state.join("host.key.pub"),
        dir.path().join("host.key.pub"),
    )
    .unwrap();
    let check = |name: &str, body: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        let o = std::process::Command::new(bin())
            .args(["ledger", "verify"])
            .arg(&p)
            .output()
            .unwrap();
        (
            o.status.code().unwrap(),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    assert_eq!(check("ok.jsonl", text.clone()).0, 0);
    let entries: Vec<usize> = (1..lines.len())
        .filter(|&i| !lines[i].starts_with("{\"checkpoint\""))
        .collect();
    let join = |v: Vec<String>| v.join("\n") + "\n";
    let owned: Vec<String> = lines.iter().map(|s| s.to_string()).collect();
    // Edit a subject (still canonical JSON).
    let mut e = owned.clone();
    e[entries[0]] = e[entries[0]].replace("which store", "which stove");
    let (code, err) = check("edit.jsonl", join(e));
    assert_eq!(code, 1);
    assert!(err.contains(&format!("line {}:", entries[1] + 1)), "{err}");
    // Delete, reorder, truncate in the middle.
    let mut e = owned.clone();
    e.remove(entries[1]);
    assert_eq!(check("delete.jsonl", join(e)).0, 1);
    let mut e = owned.clone();
    e.swap(entries[0], entries[1]);
    assert_eq!(check("reorder.jsonl", join(e)).0, 1);
    let mut e = owned.clone();
    e.drain(entries[0]..entries[2]);
    assert_eq!(check("truncated.jsonl", join(e)).0, 1);
    // Forge a checkpoint with another key.
    let cp = (1..owned.len())
        .find(|&i| owned[i].starts_with("{\"checkpoint\""))
        .unwrap();
    let other = fleetd_actors::keys::generate();
    let v: Value = serde_json::from_str(&owned[cp]).unwrap();
    let note = v["checkpoint"].as_str().unwrap();
    let body = &note[..note.rfind("\n\n").unwrap() + 1];
    let mut e = owned.clone();
    e[cp] = fleetd_actors::ledger::state::checkpoint_line(&fleetd_actors::keys::sign_note(
        body,
        "fleetd/local/ledger",
        &other,
    ));
    let (code, err) = check("forged.jsonl", join(e));
    assert_eq!(code, 1);
    assert!(
        err.contains(&format!("line {}: forged checkpoint", cp + 1)),
        "{err}"
    );
    // A torn final line is reported as such, with its own exit code.
    let (code, err) = check("torn.jsonl", format!("{text}{{\"actor\":{{\"mem"));
    assert_eq!(code, 3);
    assert!(err.contains("torn final line"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_final_line_is_truncated_at_start() {
    let mut d = D::start().await;
    d.spawn("lead", "primary", exec()).await;
    let id = open(&d, &["opus"], 600).await;
    d.kill9();
    let path = d.state.join("ledger.jsonl");
    let before = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{before}{{\"actor\":{{\"member\":\"le")).unwrap();
    d.boot().await;
    assert!(d.log().contains("torn"), "{}", d.log());
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
    assert_eq!(verify(&d).0, 0);
    let show: Value = d.client.get(&format!("/decisions/{id}")).await.unwrap();
    assert_eq!(show["subject"], "which store for the queue");
}

/// The checkpoints verify with an independent signed-note implementation (the `signed_note`
/// crate; and Go's golang.org/x/mod/sumdb/note too with FLEETD_INTEROP_GO=1, see note.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_verify_with_an_independent_signed_note_implementation() {
    let mut c = test_config();
    c.ledger.checkpoint_every = 1;
    let d = D::with(c).await;
    d.spawn("lead", "primary", exec()).await;
    open(&d, &["opus"], 600).await;
    let st: Value = d.client.get("/status").await.unwrap();
    let vkey = st["ledger_vkey"].as_str().unwrap().to_string();
    let text = std::fs::read_to_string(d.state.join("ledger.jsonl")).unwrap();
    let notes: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with("{\"checkpoint\""))
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["checkpoint"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(!notes.is_empty());
    for n in &notes {
        let text = crate::note::open(&vkey, n).unwrap_or_else(|e| panic!("{e}: {n}"));
        assert!(text.starts_with("fleetd/local/ledger\n1\n"), "{text}");
    }
    // And it refuses one signed by another key, and one whose text was changed.
    let other = fleetd_actors::keys::generate();
    let forged = fleetd_actors::keys::sign_note(
        "fleetd/local/ledger\n1\nAAAA\n",
        "fleetd/local/ledger",
        &other,
    );
    assert!(crate::note::refused(&vkey, &forged));
    let edited = notes[0].replacen("fleetd/local/ledger\n1\n", "fleetd/local/ledger\n2\n", 1);
    assert!(crate::note::refused(&vkey, &edited));
}

#[test]
fn keygen_writes_a_private_key_and_its_public_half() {
    let dir = tempfile::tempdir().unwrap();
    let k = dir.path().join("host.key");
    let o = std::process::Command::new(bin())
        .args(["keygen", "--out"])
        .arg(&k)
        .output()
        .unwrap();
    assert!(o.status.success());
    let printed = String::from_utf8_lossy(&o.stdout).trim().to_string();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&k).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("host.key.pub"))
            .unwrap()
            .trim(),
        printed
    );
    assert!(fleetd_actors::keys::parse_public(&printed).is_ok());
    // Never overwritten.
    let o = std::process::Command::new(bin())
        .args(["keygen", "--out"])
        .arg(&k)
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("never overwritten"));
}

/// A verification that could check no signature does not pass unless asked for explicitly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_without_a_key_fails_unless_asked_for() {
    let d = D::start().await;
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("ledger.jsonl");
    std::fs::copy(d.state.join("ledger.jsonl"), &copy).unwrap();
    let run = |extra: &[&str]| {
        let o = std::process::Command::new(bin())
            .args(["ledger", "verify"])
            .arg(&copy)
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stderr).to_string(),
        )
    };
    let (code, err) = run(&[]);
    assert_eq!(code, 4, "{err}");
    assert!(
        err.contains("no signature was checked") && err.contains("--key"),
        "{err}"
    );
    assert_eq!(run(&["--no-signatures"]).0, 0);
    let key = d.state.join("host.key.pub");
    assert_eq!(run(&["--key", key.to_str().unwrap()]).0, 0);
}
