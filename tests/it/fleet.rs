//! The single-host fleet through the real binary: round trips, Authz, the injector's rules,
//! tickets, terminals.

use fleetd_actors::events::EventKind;
use serde_json::{Value, json};
use std::time::Duration;

use crate::common::*;

fn exec(extra: &[&str]) -> Vec<String> {
    let mut a = vec!["--script", "exec", "--work-ms", "0"];
    a.extend_from_slice(extra);
    sim(&a)
}

fn err_of(e: fleetd::client::ClientError) -> fleetd_actors::error::FleetError {
    match e {
        fleetd::client::ClientError::Api(f) => f,
        other => panic!("expected an API refusal, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lead_hands_work_to_two_workers_and_collects_replies() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn(
        "lead",
        "primary",
        sim(&["--script", "lead", "--work-ms", "100"]),
    )
    .await;
    let t = d
        .send("lead", "brief\ntask: sum: 1 2 3\ntask: reverse: fleet")
        .await;
    ev.ticket(&t, "replied").await;
    let brief = d.ticket(&t).await;
    let answer = brief["reply"]["text"].as_str().unwrap();
    assert!(
        answer.contains("worker-1: sum of 3 numbers = 6"),
        "{answer}"
    );
    assert!(answer.contains("worker-2: reversed: teelf"), "{answer}");
    // Both workers were spawned by the lead (lineage), and each answered its own ticket.
    for w in ["worker-1", "worker-2"] {
        let e = ev
            .until(
                &format!("spawn of {w}"),
                |e| matches!(&e.kind, EventKind::Spawned { member, .. } if member.as_str() == w),
            )
            .await;
        let EventKind::Spawned { parent, role, .. } = e.kind else {
            unreachable!()
        };
        assert_eq!(parent.to_string(), "lead");
        assert_eq!(role.as_str(), "worker");
    }
    let all: Vec<Value> = d.client.get("/tickets").await.unwrap();
    assert_eq!(all.len(), 3);
    for tk in &all {
        assert_eq!(tk["state"], "replied", "{tk}");
        assert_eq!(tk["receipt"]["state"], "accepted", "{tk}");
    }
    let members: Value = d.client.get("/members").await.unwrap();
    let parent_of = |n: &str| {
        members["members"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == n)
            .unwrap()["parent"]
            .clone()
    };
    assert_eq!(parent_of("worker-1"), "lead");
    assert_eq!(parent_of("lead"), "operator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_cannot_spawn_stop_or_send_and_each_refusal_names_its_rule() {
    let d = D::start().await;
    d.spawn("w1", "worker", exec(&[])).await;
    d.spawn("w2", "worker", exec(&[])).await;
    let r = d
        .calls_as(
            "w1",
            json!([
                {"tool": "fleet_whoami"},
                {"tool": "fleet_spawn", "args": {"role": "worker", "name": "w3"}},
                {"tool": "fleet_stop", "args": {"name": "w2"}},
                {"tool": "fleet_send", "args": {"to": "w2", "message": "hi"}},
                {"tool": "fleet_list"},
                {"run": ["fleetd", "spawn", "--role", "worker", "--name", "w4", "--", "true"]},
            ]),
        )
        .await;
    assert_eq!(r[0]["structured"]["name"], "w1");
    assert_eq!(r[0]["structured"]["role"], "worker");
    for (i, rule) in [(1, "SPAWN"), (2, "STOP"), (3, "SEND")] {
        assert_eq!(r[i]["is_error"], true, "{}", r[i]);
        assert_eq!(r[i]["structured"]["error"]["rule"], rule, "{}", r[i]);
        assert!(
            !r[i]["structured"]["error"]["accepted"]
                .as_str()
                .unwrap()
                .is_empty()
        );
    }
    // A worker's fleet_list has no coordinator key at all.
    assert_eq!(r[4]["is_error"], false);
    assert!(r[4]["structured"].get("coordinator").is_none(), "{}", r[4]);
    // Calling the operator's CLI from inside a member does not make it the operator.
    assert_ne!(r[5]["code"], 0, "{}", r[5]);
    assert!(
        r[5]["stderr"].as_str().unwrap().contains("rule SPAWN"),
        "{}",
        r[5]
    );
    let members: Value = d.client.get("/members").await.unwrap();
    assert_eq!(members["members"].as_array().unwrap().len(), 2);
    // The operator does get the coordinator row.
    assert!(members.get("coordinator").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lead_gets_the_coordinator_row_and_may_spawn() {
    let d = D::start().await;
    d.spawn("lead", "primary", exec(&[])).await;
    let r = d
        .calls_as(
            "lead",
            json!([
                {"tool": "fleet_list"},
                {"tool": "fleet_spawn", "args": {"role": "worker", "name": "w9", "command": exec(&[])}},
                {"tool": "fleet_spawn", "args": {"role": "primary", "name": "lead2", "profile": "sim"}},
            ]),
        )
        .await;
    let row = &r[0]["structured"]["coordinator"];
    assert!(
        row["coord_id"].as_str().unwrap().starts_with("local/"),
        "{row}"
    );
    assert_eq!(row["mailbox"]["state"], "empty");
    assert_eq!(r[1]["is_error"], false, "{}", r[1]);
    assert_eq!(r[1]["structured"]["parent"], "lead");
    assert_eq!(r[2]["is_error"], true);
    assert!(
        r[2]["structured"]["error"]["why"]
            .as_str()
            .unwrap()
            .contains("one primary per host")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_outside_every_member_cannot_reply_as_one() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "60000"])).await;
    let t = d.send("w1", "sum: 1").await;
    ev.receipt(&t, "accepted").await;
    let mcp = crate::mcp::client(&d, crate::mcp::Era::Initialize).await;
    let who = crate::mcp::call(&mcp, "fleet_whoami", json!({})).await;
    assert_eq!(who.structured_content.as_ref().unwrap()["member"], false);
    assert!(crate::mcp::text(&who).contains("not a member"));
    let r = crate::mcp::call(
        &mcp,
        "fleet_reply",
        json!({"ticket": t, "message": "forged"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(
        r.structured_content.as_ref().unwrap()["error"]["rule"],
        "REPLY"
    );
    for (tool, args) in [
        ("fleet_send", json!({"to": "w1", "message": "x"})),
        ("fleet_spawn", json!({"role": "worker", "name": "x"})),
        ("fleet_stop", json!({"name": "w1"})),
        ("fleet_list", json!({})),
    ] {
        let r = crate::mcp::call(&mcp, tool, args).await;
        assert_eq!(r.is_error, Some(true), "{tool} was not refused");
        assert!(
            crate::mcp::text(&r).contains("not a fleet member"),
            "{tool}: {}",
            crate::mcp::text(&r)
        );
    }
    assert_eq!(d.ticket(&t).await["state"], "open");
    let _ = mcp.cancel().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_target_holds_messages_and_takes_them_in_order_one_per_turn() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "300"])).await;
    let mut tickets = vec![];
    for i in 1..=4 {
        tickets.push(d.send("w1", &format!("sum: {i}")).await);
    }
    ev.ticket(tickets.last().unwrap(), "replied").await;
    let delivered: Vec<(u64, String)> = ev
        .seen
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Receipt {
                ticket: Some(t),
                state,
                ..
            } if format!("{state:?}") == "Delivered" => Some((e.seq, t.to_string())),
            _ => None,
        })
        .collect();
    assert_eq!(
        delivered.iter().map(|(_, t)| t.clone()).collect::<Vec<_>>(),
        tickets,
        "not in send order"
    );
    // Between two deliveries the previous ticket was answered and the worker came back to idle.
    for w in delivered.windows(2) {
        let (a, b) = (w[0].0, w[1].0);
        let replied = ev.seen.iter().any(|e| e.seq > a && e.seq < b && matches!(&e.kind, EventKind::Ticket { ticket, state, .. } if ticket.to_string() == w[0].1 && format!("{state:?}") == "Replied"));
        let idle = ev.seen.iter().any(|e| e.seq > a && e.seq < b && matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "idle"));
        assert!(
            replied && idle,
            "two messages landed in one turn between seq {a} and {b}"
        );
    }
    for (i, t) in tickets.iter().enumerate() {
        let tk = d.ticket(t).await;
        assert_eq!(tk["reply"]["text"], format!("sum of 1 numbers = {}", i + 1));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_arguments_get_a_clear_error() {
    let d = D::start().await;
    let mcp = crate::mcp::client(&d, crate::mcp::Era::Initialize).await;
    for (args, needle) in [
        (json!({}), "missing field `to`"),
        (
            json!({"to": "w1", "message": "x", "bogus": 1}),
            "unknown field `bogus`",
        ),
        (json!({"to": 5, "message": "x"}), "invalid type"),
    ] {
        let e = crate::mcp::call_err(&mcp, "fleet_send", args).await;
        assert!(e.contains(needle), "{e}");
    }
    let e = crate::mcp::call_err(&mcp, "fleet_nonexistent", json!({})).await;
    assert!(
        e.to_lowercase().contains("not found") || e.contains("fleet_nonexistent"),
        "{e}"
    );
    let _ = mcp.cancel().await;
    // The REST API refuses bad bodies the same way, naming what it accepts.
    let e = err_of(
        d.client
            .post::<Value>("/members", &json!({"role": "worker"}))
            .await
            .unwrap_err(),
    );
    assert!(e.why.contains("name"), "{e}");
    assert!(e.accepted.contains("role, name"), "{e}");
    let e = err_of(
        d.try_spawn(json!({"role": "boss", "name": "x", "command": ["true"]}))
            .await
            .unwrap_err(),
    );
    assert!(e.accepted.contains("primary, architect or worker"), "{e}");
    let e = err_of(
        d.try_spawn(json!({"role": "worker", "name": "bad name", "command": ["true"]}))
            .await
            .unwrap_err(),
    );
    assert!(e.refused.contains("bad name"), "{e}");
    let e = err_of(
        d.try_spawn(json!({"role": "worker", "name": "x", "command": ["/nonexistent/agent"]}))
            .await
            .unwrap_err(),
    );
    assert!(e.why.contains("did not start"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_without_fleet_reply_returns_the_transcript_tail() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--no-reply", "--work-ms", "50"]))
        .await;
    let t = d.send("w1", "sum: 20 22").await;
    ev.ticket(&t, "tail").await;
    let tk = d.ticket(&t).await;
    assert!(
        tk["tail"]["text"]
            .as_str()
            .unwrap()
            .contains("sum of 2 numbers = 42"),
        "{tk}"
    );
    assert!(
        tk["note"]
            .as_str()
            .unwrap()
            .contains("without a structured fleet_reply"),
        "{tk}"
    );
    assert!(tk["reply"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reply_is_refused_and_kept_visible() {
    let mut c = test_config();
    c.tickets.ttl_seconds = 1;
    let d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "1800"])).await;
    let t = d.send("w1", "sum: 1").await;
    let expired = ev.ticket(&t, "expired").await.seq;
    // The worker replies after the TTL: refused, and kept on the ticket as late.
    let late = ev
        .until("late reply recorded", |e| {
            e.seq > expired
                && matches!(&e.kind, EventKind::Ticket { ticket, .. } if ticket.to_string() == t)
        })
        .await
        .seq;
    // Back at its prompt after that (not the idle from before the message).
    ev.until("idle after the late reply", |e| {
        e.seq > late
            && matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "idle")
    })
    .await;
    let tk = d.ticket(&t).await;
    assert_eq!(tk["state"], "expired");
    assert_eq!(tk["late"][0]["text"], "sum of 1 numbers = 1");
    let screen = d.client.get_text("/members/w1/screen").await.unwrap();
    assert!(screen.contains("fleet_reply refused"), "{screen}");
    assert!(screen.contains("expired"), "{screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_is_not_taken_is_reported_stalled_and_the_queue_holds() {
    let mut c = test_config();
    c.injector.accept_timeout_ms = 400;
    c.injector.max_queue = 2;
    let d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--ignore-input"])).await;
    ev.status("w1", "idle").await;
    // A send answers with the receipt as committed with its ticket: the first went to the idle
    // target at once, the second waits behind it.
    let send = |m: &'static str| {
        let c = &d.client;
        async move {
            c.post::<Value>("/members/w1/messages", &json!({ "message": m }))
                .await
                .unwrap()
        }
    };
    let (s1, s2) = (send("first").await, send("second").await);
    assert_eq!(s1["ticket"]["receipt"]["state"], "delivered", "{s1}");
    assert_eq!(s2["ticket"]["receipt"]["state"], "queued", "{s2}");
    assert_eq!(s1["ticket"]["receipt"]["target"], "w1", "{s1}");
    let (t1, t2) = (
        s1["ticket"]["id"].as_str().unwrap().to_string(),
        s2["ticket"]["id"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        d.ticket(&t2).await["receipt"]["queued_at"],
        s2["ticket"]["receipt"]["queued_at"]
    );
    ev.receipt(&t1, "stalled").await;
    let m = d.member("w1").await;
    assert_eq!(m["queue"]["stalled"], true);
    assert_eq!(m["queue"]["queued"][0]["ticket"], t2.as_str());
    let tk1 = d.ticket(&t1).await;
    assert!(
        tk1["receipt"]["note"]
            .as_str()
            .unwrap()
            .contains("did not start a turn on it"),
        "{tk1}"
    );
    assert_eq!(d.ticket(&t2).await["receipt"]["state"], "queued");
    // The queue is bounded: a third message is refused, naming the limit.
    let e = err_of(
        d.client
            .post::<Value>("/members/w1/messages", &json!({"message": "third"}))
            .await
            .unwrap_err(),
    );
    assert_eq!(e.kind, fleetd_actors::error::ErrorKind::Overloaded);
    assert!(e.why.contains("injector.max_queue = 2"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_message_is_refused_with_the_limit_named() {
    let mut c = test_config();
    c.injector.max_message_bytes = 100;
    let d = D::with(c).await;
    d.spawn("w1", "worker", sim(&[])).await;
    let e = err_of(
        d.client
            .post::<Value>("/members/w1/messages", &json!({"message": "x".repeat(101)}))
            .await
            .unwrap_err(),
    );
    assert!(e.why.contains("101 bytes"), "{e}");
    assert!(e.why.contains("injector.max_message_bytes = 100"), "{e}");
    let tickets: Vec<Value> = d.client.get("/tickets").await.unwrap();
    assert!(
        tickets.is_empty(),
        "a refused message must not leave a ticket"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_dialog_is_never_answered_by_a_message() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--permission", "--work-ms", "50"]))
        .await;
    let t1 = d.send("w1", "sum: 1").await;
    let t2 = d.send("w1", "sum: 2").await;
    // The first lands; the agent asks permission: blocked, not injectable.
    ev.until("permission dialog", |e| {
        matches!(&e.kind, EventKind::Status { member, to, injectable: false, .. } if member.as_str() == "w1" && to.as_str() == "blocked")
    })
    .await;
    assert_eq!(d.ticket(&t2).await["receipt"]["state"], "queued");
    // The operator answers the dialog; then the first completes and the second lands.
    let _: Value = d
        .client
        .post("/members/w1/input", &json!({"text": "y"}))
        .await
        .unwrap();
    ev.ticket(&t1, "replied").await;
    let delivered = ev.receipt(&t2, "delivered").await;
    // The second dialog: the first blocked status after the second message landed (`until`
    // would find the first dialog again among the events already seen).
    ev.after(delivered.seq, "second dialog", |e| {
        matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "blocked")
    })
    .await;
    let _: Value = d
        .client
        .post("/members/w1/input", &json!({"text": "y"}))
        .await
        .unwrap();
    ev.ticket(&t2, "replied").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_explicit_signal_wins_over_the_screen_rules() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", exec(&[])).await;
    ev.status("w1", "idle").await;
    // The agent's hook says "blocked" in the middle of its turn. (That is a turn end for the
    // injector, so the ticket gets the tail first; the agent's reply still lands after it.)
    let t = d
        .send(
            "w1",
            &json!([{"run": ["fleetd", "signal", "blocked"]}]).to_string(),
        )
        .await;
    ev.ticket(&t, "replied").await;
    let r: Vec<Value> =
        serde_json::from_str(d.ticket(&t).await["reply"]["text"].as_str().unwrap()).unwrap();
    assert_eq!(r[0]["code"], 0, "{}", r[0]);
    let e = ev
        .until("signalled blocked", |e| matches!(&e.kind, EventKind::Status { member, to, cause, .. } if member.as_str() == "w1" && to.as_str() == "blocked" && cause == "signal"))
        .await;
    // The agent shows its prompt again, but the signal holds. (Subscribe to the terminal first,
    // then look at the screen; every output wakes us to look again.)
    {
        use tokio::io::AsyncReadExt;
        let mut conn = d.client.attach("w1", 40, 120).await.unwrap();
        let mut buf = vec![0u8; 4096];
        loop {
            let screen = d.client.get_text("/members/w1/screen").await.unwrap();
            if screen.contains("replied to t-1") && screen.trim_end().ends_with("sim>") {
                break;
            }
            let n = tokio::time::timeout(T, conn.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0);
        }
    }
    let m = d.member("w1").await;
    assert!(
        m["slot_view"]["screen"]
            .as_str()
            .unwrap()
            .trim_end()
            .ends_with("sim>"),
        "{m}"
    );
    assert_eq!(m["status"], "blocked");
    assert_eq!(m["slot_view"]["pinned_by_signal"], true);
    assert!(!ev.seen.iter().any(|x| x.seq > e.seq
        && matches!(&x.kind, EventKind::Status { member, .. } if member.as_str() == "w1")));
    // A process outside every member cannot signal.
    let o = d.cli(&["signal", "idle"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("not a member"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_report_status_by_signal() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--hooks", "--work-ms", "100"]))
        .await;
    let t = d.send("w1", "sum: 5").await;
    ev.ticket(&t, "replied").await;
    ev.until("working by signal", |e| matches!(&e.kind, EventKind::Status { member, to, cause, .. } if member.as_str() == "w1" && to.as_str() == "working" && cause == "signal")).await;
    ev.until("idle by signal", |e| matches!(&e.kind, EventKind::Status { member, to, cause, .. } if member.as_str() == "w1" && to.as_str() == "idle" && cause == "signal")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_member_is_reaped_after_its_ttl() {
    let mut c = test_config();
    c.lifecycle.idle_ttl_seconds = 1;
    let d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.until(
        "reap",
        |e| matches!(&e.kind, EventKind::Reaped { member, .. } if member.as_str() == "w1"),
    )
    .await;
    ev.until(
        "exit",
        |e| matches!(&e.kind, EventKind::Exited { member, .. } if member.as_str() == "w1"),
    )
    .await;
    let m = d.member("w1").await;
    assert_eq!(m["status"], "exited");
    assert!(
        m["exit"]["reason"]
            .as_str()
            .unwrap()
            .contains("reaped: idle for 1 s (lifecycle.idle_ttl_seconds = 1)"),
        "{m}"
    );
    let o = d.cli(&["status", "w1"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("reaped"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_architect_slot_holds_one_terminal_and_queues_the_next_spawn() {
    let mut c = test_config();
    c.lifecycle.spawn_wait_seconds = 2;
    let d = D::with(c).await;
    let mut ev = d.events().await;
    d.try_spawn(json!({"role": "architect", "name": "a1", "slot": "opus", "command": sim(&[])}))
        .await
        .unwrap();
    let e = err_of(
        d.try_spawn(
            json!({"role": "architect", "name": "ax", "slot": "nope", "command": sim(&[])}),
        )
        .await
        .unwrap_err(),
    );
    assert!(
        e.accepted.contains("opus") && e.accepted.contains("sol"),
        "{e}"
    );
    // a2 waits for opus; stopping a1 hands the slot over.
    let client = d.client.clone();
    let waiting = tokio::spawn(async move {
        client
            .post::<Value>(
                "/members",
                &json!({"role": "architect", "name": "a2", "slot": "opus", "command": sim(&[])}),
            )
            .await
    });
    ev.status("a1", "idle").await;
    let list: Value = d.client.get("/members").await.unwrap();
    let opus = list["architect_slots"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["slot"] == "opus")
        .unwrap()
        .clone();
    assert_eq!(opus["member"], "a1");
    let _: Value = d.client.delete("/members/a1").await.unwrap();
    let a2 = waiting
        .await
        .unwrap()
        .expect("a2 got the slot once a1 released it");
    assert_eq!(a2["slot"], "opus");
    // A third spawn into the busy slot fails clearly after the bounded wait.
    let e = err_of(
        d.try_spawn(
            json!({"role": "architect", "name": "a3", "slot": "opus", "command": sim(&[])}),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(e.kind, fleetd_actors::error::ErrorKind::Timeout);
    assert!(e.why.contains("`opus` stayed busy"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_shows_the_screen_takes_keys_and_detaches_without_stopping() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "10"])).await;
    ev.status("w1", "idle").await;
    let mut conn = d.client.attach("w1", 30, 100).await.unwrap();
    let mut seen = String::new();
    let mut buf = vec![0u8; 4096];
    while !seen.contains("sim> ") {
        let n = tokio::time::timeout(T, conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    conn.write_all(b"sum: 40 2\r").await.unwrap();
    while !seen.contains("sum of 2 numbers = 42") {
        let n = tokio::time::timeout(T, conn.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "attach closed early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    drop(conn);
    // Detaching leaves the member running; a message still goes through.
    let t = d.ask("w1", "sum: 1 1").await;
    assert_eq!(t["reply"]["text"], "sum of 2 numbers = 2");
    // Attach is the operator's: a member is refused.
    d.spawn("w2", "worker", exec(&[])).await;
    let r = d
        .calls_as("w2", json!([{"run": ["fleetd", "screen", "w1"]}]))
        .await;
    assert!(
        r[0]["stderr"].as_str().unwrap().contains("rule ATTACH"),
        "{}",
        r[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_asks_its_lead_and_gets_the_answer_within_the_bounded_wait() {
    let d = D::start().await;
    d.spawn("lead", "primary", sim(&["--work-ms", "10"])).await;
    d.spawn("w1", "worker", exec(&[])).await;
    let r = d
        .calls_as(
            "w1",
            json!([{"tool": "fleet_ask", "args": {"question": "sum: 1 2"}}]),
        )
        .await;
    let a = &r[0]["structured"];
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert_eq!(a["answered"], true, "{a}");
    assert_eq!(a["answer"], "sum of 2 numbers = 3");
    assert_eq!(a["ticket"]["kind"], "ask");
    assert_eq!(a["ticket"]["to"], "lead");
    // The operator sees the ask ticket.
    let all: Vec<Value> = d.client.get("/tickets").await.unwrap();
    assert!(all.iter().any(|t| t["kind"] == "ask" && t["from"] == "w1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_nobody_answers_returns_the_open_ticket_after_the_bounded_wait() {
    let mut c = test_config();
    c.tickets.ask_wait_seconds = 1;
    let d = D::with(c).await;
    d.spawn("lead", "primary", sim(&["--ignore-input"])).await;
    d.spawn("w1", "worker", exec(&[])).await;
    let r = d
        .calls_as(
            "w1",
            json!([{"tool": "fleet_ask", "args": {"question": "anyone?"}}]),
        )
        .await;
    let a = &r[0]["structured"];
    assert_eq!(a["answered"], false, "{a}");
    assert_eq!(a["ticket"]["state"], "open");
    assert!(
        a["note"]
            .as_str()
            .unwrap()
            .contains("tickets.ask_wait_seconds"),
        "{a}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tcp_listener_requires_the_bearer_token() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut c = test_config();
    c.api.tcp = Some(format!("127.0.0.1:{port}"));
    c.api.token_file = Some(token_file.display().to_string());
    let d = D::with(c).await;
    let get = |auth: Option<&str>| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let auth = auth
            .map(|a| format!("Authorization: Bearer {a}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "GET /status HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
        )
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    assert!(get(None).starts_with("HTTP/1.1 403"), "{}", get(None));
    assert!(get(Some("wrong")).starts_with("HTTP/1.1 403"));
    let ok = get(Some("s3cret"));
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    assert!(ok.contains("\"host\":\"local\""));
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_prints_tables_for_people_and_json_for_scripts() {
    let d = D::start().await;
    let mut ev = d.events().await;
    let o = d.cli(&[
        "spawn",
        "--role",
        "worker",
        "--name",
        "w1",
        "--",
        &bin_str(),
        "sim-agent",
        "--work-ms",
        "10",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // A command without --profile runs with the generic profile, and the spawn says so.
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("spawned w1 (worker, profile generic)"),
        "{out}"
    );
    assert!(out.contains("no profile given"), "{out}");
    ev.status("w1", "idle").await;
    let o = d.cli(&["send", "w1", "sum:", "1", "2", "--wait", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ticket"]["reply"]["text"], "sum of 2 numbers = 3");
    let table = String::from_utf8_lossy(&d.cli(&["list"]).stdout).to_string();
    assert!(
        table.lines().next().unwrap().starts_with("NAME")
            && table.contains("w1")
            && table.contains("worker"),
        "{table}"
    );
    let v: Value = serde_json::from_slice(&d.cli(&["list", "--json"]).stdout).unwrap();
    assert_eq!(v["members"][0]["name"], "w1");
    let t = String::from_utf8_lossy(&d.cli(&["tickets"]).stdout).to_string();
    assert!(
        t.contains("t-1") && t.contains("replied") && t.contains("sum of 2 numbers = 3"),
        "{t}"
    );
    // One ticket for a person: states as the API spells them, times as dates, no JSON.
    let one = String::from_utf8_lossy(&d.cli(&["tickets", "t-1"]).stdout).to_string();
    assert!(
        one.starts_with("t-1 (send) operator -> w1: replied")
            && one.contains("receipt   m-1 accepted")
            && one.contains("sum of 2 numbers = 3")
            && !one.contains('{'),
        "{one}"
    );
    let v: Value = serde_json::from_slice(&d.cli(&["tickets", "t-1", "--json"]).stdout).unwrap();
    assert_eq!(v["state"], "replied");
    let e = String::from_utf8_lossy(&d.cli(&["events", "--count", "8"]).stdout).to_string();
    assert!(
        e.contains("m-1 to w1: accepted")
            && e.contains("t-1 operator -> w1: open")
            && !e.contains("Some(")
            && !e.contains("Accepted")
            && !e.contains("Open"),
        "{e}"
    );
    let s = String::from_utf8_lossy(&d.cli(&["status", "w1"]).stdout).to_string();
    assert!(s.contains("charter") && s.contains("sha256"), "{s}");
    let s: Value = serde_json::from_slice(&d.cli(&["status", "--json"]).stdout).unwrap();
    let live: u64 = s["members"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    assert_eq!(live, 1, "{s}");
    let e =
        String::from_utf8_lossy(&d.cli(&["events", "--count", "3", "--json"]).stdout).to_string();
    assert_eq!(e.lines().count(), 3, "{e}");
    assert!(e.lines().all(|l| serde_json::from_str::<Value>(l).is_ok()));
    let o = d.cli(&["stop", "w1"]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("w1 stopped: stopped by the operator"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // A refusal is printed as the daemon worded it, with a non-zero exit.
    let o = d.cli(&["send", "nobody", "hi"]);
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("there is no member `nobody`"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Addressed to the operator: the CLI command, not the MCP tool.
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("`fleetd list`")
            && !String::from_utf8_lossy(&o.stderr).contains("fleet_"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // Without a state dir the CLI says how to give one.
    let o = std::process::Command::new(bin())
        .args(["list"])
        .env_remove("FLEETD_STATE_DIR")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&o.stderr).contains("--state-dir"));
}

/// `--worktree`: the member runs in its own git worktree and branch under the state dir, `fleetd
/// list` shows it, and at its exit it is removed when it holds no work and kept when it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_gets_its_own_worktree_removed_at_exit_unless_it_holds_work() {
    let repo = tempfile::tempdir().unwrap();
    let git = |dir: &std::path::Path, args: &[&str]| {
        let o = std::process::Command::new("git")
            .arg("-C")
            .arg(dir)
            .args(["-c", "user.email=t@t", "-c", "user.name=t"])
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    };
    git(repo.path(), &["init", "-q", "-b", "main"]);
    git(
        repo.path(),
        &["commit", "-q", "--allow-empty", "-m", "root"],
    );
    let d = D::start().await;
    let mut ev = d.events().await;
    for name in ["w1", "w2"] {
        let v = d
            .try_spawn(
                json!({"role": "worker", "name": name, "profile": "sim", "worktree": true,
                "cwd": repo.path().display().to_string(), "command": sim(&[])}),
            )
            .await
            .unwrap();
        assert_eq!(v["worktree"]["branch"], format!("fleet/{name}"), "{v}");
        ev.status(name, "idle").await;
    }
    let path = |name: &str| d.state.join("worktrees").join(name);
    assert!(path("w1").join(".git").exists());
    let table = String::from_utf8_lossy(&d.cli(&["list"]).stdout).to_string();
    assert!(
        table.contains("WORKTREE") && table.contains("fleet/w1"),
        "{table}"
    );
    // w2 commits work on its branch.
    std::fs::write(path("w2").join("f.txt"), "work").unwrap();
    git(&path("w2"), &["add", "f.txt"]);
    git(&path("w2"), &["commit", "-q", "-m", "work"]);
    for name in ["w1", "w2"] {
        let _: Value = d.client.delete(&format!("/members/{name}")).await.unwrap();
    }
    assert!(!path("w1").exists(), "a worktree without work is removed");
    assert!(
        path("w2").join("f.txt").exists(),
        "a worktree with a commit is kept"
    );
    assert!(d.log().contains("worktree kept"), "the log says why");
}

/// `send -` and `send --file` read the message (bounded); `--wait-secs` implies `--wait`, and a
/// wait that ends with no reply exits 3 saying so; `stop --drain` says what it waits for and,
/// past `--drain-secs`, exits 3 and leaves the member running.
#[tokio::test(flavor = "multi_thread")]
async fn send_and_stop_from_the_cli_say_when_they_did_not_get_what_was_asked() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    let run = |args: &[&str], stdin: &[u8]| {
        let mut c = std::process::Command::new(bin())
            .args(args)
            .env("FLEETD_STATE_DIR", &d.state)
            .env_remove("RUST_LOG")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut i = c.stdin.take().unwrap();
        std::io::Write::write_all(&mut i, stdin).unwrap();
        drop(i);
        c.wait_with_output().unwrap()
    };
    let o = run(&["send", "w1", "-", "--wait", "--json"], b"sum: 4 5\n");
    assert!(o.status.success(), "{o:?}");
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["ticket"]["reply"]["text"], "sum of 2 numbers = 9");
    let f = d.state.parent().unwrap().join("msg.txt");
    std::fs::write(&f, "sum: 1 1 1").unwrap();
    let o = run(
        &[
            "send",
            "w1",
            "--file",
            f.to_str().unwrap(),
            "--wait-secs",
            "20",
        ],
        b"",
    );
    assert!(o.status.success(), "{o:?}");
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("sum of 3 numbers = 3"),
        "--wait-secs waited for the reply: {o:?}"
    );
    let o = run(&["send", "w1", "-"], b"   \n");
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("empty"),
        "{o:?}"
    );

    // A member that never goes idle: nothing is delivered, so no reply comes.
    d.client
        .post::<Value>(
            "/members",
            &json!({"role": "worker", "name": "busy", "profile": "generic",
                "command": ["sh", "-c", "while :; do date +%s%N; sleep 0.02; done"]}),
        )
        .await
        .unwrap();
    let o = run(&["send", "busy", "hello", "--wait-secs", "1"], b"");
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("no reply within 1 s") && err.contains("still open"),
        "{err}"
    );
    let o = run(&["stop", "busy", "--drain", "--drain-secs", "2"], b"");
    assert_eq!(o.status.code(), Some(3), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("draining busy: 1 queued") && err.contains("did not drain within 2 s"),
        "{err}"
    );
    let m = d.member("busy").await;
    assert_ne!(
        m["status"], "exited",
        "a drain given up leaves it running: {m}"
    );
}

/// A command that exits at once is a member that ran and exited, every time: its PTY host waits
/// for the daemon's first connection before it ends (it used to end first now and then, and the
/// spawn failed with "Connection reset by peer ... this is a fleetd bug").
#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_exits_at_once_is_a_member_that_exited() {
    let d = D::start().await;
    let mut ev = d.events().await;
    for i in 0..30 {
        let name = format!("t{i}");
        let (cmd, code) = if i % 2 == 0 {
            (vec!["true".to_string()], 0)
        } else {
            (
                vec!["sh".into(), "-c".into(), "echo boom; exit 3".into()],
                3,
            )
        };
        d.client
            .post::<Value>(
                "/members",
                &json!({"role": "worker", "name": name, "command": cmd, "profile": "generic"}),
            )
            .await
            .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
        let e = ev
            .until(
                &format!("{name} exited"),
                |e| matches!(&e.kind, EventKind::Exited { member, .. } if member.as_str() == name),
            )
            .await;
        let EventKind::Exited { code: got, .. } = e.kind else {
            unreachable!()
        };
        assert_eq!(got, Some(code), "{name}");
    }
}

/// `GET /metrics`: members by status and role, receipts by state, the time-to-reply histogram,
/// in the OpenMetrics text format. Read by Prometheus' own parser (the Python client's, when
/// .ci/run provides it in FLEETD_PROMETHEUS_PYTHON) and checked line by line here.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_show_the_fleet_in_the_prometheus_format() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    assert_eq!(
        d.ask("w1", "sum: 2 3").await["reply"]["text"],
        "sum of 2 numbers = 5"
    );
    let body = d.client.get_text("/metrics").await.unwrap();
    assert!(body.ends_with("# EOF\n"), "{body}");
    let sample = regex::Regex::new(
        r#"^fleetd_[a-z_]+(\{[a-z_]+="[^"\\]*"(,[a-z_]+="[^"\\]*")*\})? -?[0-9.e+-]+$|^# (HELP|TYPE) fleetd_[a-z_]+ .+$|^# EOF$"#,
    )
    .unwrap();
    for l in body.lines() {
        assert!(sample.is_match(l), "not an OpenMetrics line: {l:?}");
    }
    let value = |name: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
            .unwrap_or_else(|| panic!("no {name} in:\n{body}"))
            .parse()
            .unwrap()
    };
    assert_eq!(value("fleetd_spawns_total"), 1.0);
    assert_eq!(value(r#"fleetd_receipts_total{state="accepted"}"#), 1.0);
    assert_eq!(
        value(r#"fleetd_tickets_resolved_total{state="replied"}"#),
        1.0
    );
    assert_eq!(value("fleetd_ticket_reply_seconds_count"), 1.0);
    assert!(value("fleetd_ticket_reply_seconds_sum") > 0.0);
    assert_eq!(value("fleetd_tickets_open"), 0.0);
    assert!(
        body.lines()
            .any(|l| l.starts_with("fleetd_members{") && l.contains(r#"role="worker""#)),
        "{body}"
    );
    if let Some(py) = std::env::var_os("FLEETD_PROMETHEUS_PYTHON") {
        let script = r#"
import sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families
names = {f.name for f in text_string_to_metric_families(sys.stdin.read())}
need = {"fleetd_receipts", "fleetd_ticket_reply_seconds", "fleetd_members", "fleetd_spawns"}
missing = need - names
assert not missing, f"missing {missing} in {sorted(names)}"
print(len(names))
"#;
        let mut c = std::process::Command::new(py)
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut c.stdin.take().unwrap(), body.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "Prometheus' parser refused it: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    } else {
        eprintln!(
            "NOTE: FLEETD_PROMETHEUS_PYTHON unset: checked here only, not by Prometheus' parser"
        );
    }
}

/// Polls a member's view until `pred` holds (bounded): the screen's dormancy has no event.
async fn member_until(d: &D, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let m = d.member(name).await;
        if pred(&m) {
            return m;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not happen within 20 s: {m}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_still_members_screen_leaves_the_daemon_and_comes_back_whole() {
    use tokio::io::AsyncReadExt;
    let mut c = test_config();
    c.lifecycle.screen_dormant_seconds = 1;
    let d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    let dormant = |m: &Value| m["slot_view"]["screen_dormant"] == true;
    let m = member_until(&d, "w1", "the screen's drop", dormant).await;
    let still = m["slot_view"]["screen"].as_str().unwrap().to_string();
    assert!(still.trim_end().ends_with("sim>"), "{still}");
    assert_eq!(m["status"], "idle");
    // An attach gets the screen back from the terminal host, whole.
    let mut conn = d.client.attach("w1", 40, 120).await.unwrap();
    let mut seen = vt100::Parser::new(
        std::num::NonZeroU16::new(40).unwrap(),
        std::num::NonZeroU16::new(120).unwrap(),
        0,
    );
    let mut buf = vec![0u8; 8192];
    while seen.screen().contents().trim_end() != still.trim_end() {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("the attached screen never matched the dropped one")
            .unwrap();
        assert!(n > 0, "the attach closed");
        seen.process(&buf[..n]);
    }
    drop(conn);
    // A message to the member as it drops its screen again is delivered, its turn is read
    // from the screen the host hands back, and the member is idle after it.
    member_until(&d, "w1", "the second drop", dormant).await;
    let t = d.send("w1", "sum: 2 3").await;
    ev.ticket(&t, "replied").await;
    let m = member_until(&d, "w1", "the third drop", |m| {
        dormant(m) && m["status"] == "idle"
    })
    .await;
    let screen = m["slot_view"]["screen"].as_str().unwrap();
    assert!(screen.contains(&format!("replied to {t}")), "{screen}");
    assert_eq!(d.ticket(&t).await["receipt"]["state"], "accepted");
}

/// The safe default for a screen nobody foresaw: a member whose screen is neither its
/// profile's prompt nor its busy marker nor a dialog, still for the profile's window, is
/// `blocked` ("unrecognised screen"), not `working`; its last lines are shown to the operator
/// and the lead (not to another worker); and nothing is pasted into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecognised_still_screen_is_blocked_and_shown_to_the_operator_and_the_lead() {
    let mut config = test_config();
    let mut odd = config.profiles["sim"].clone();
    odd.unrecognised_ms = 600;
    config.profiles.insert("odd".into(), odd);
    let d = D::with(config).await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", exec(&[])).await;
    d.spawn("w2", "worker", exec(&[])).await;
    let script = "printf 'Something new this release\\r\\n  Enter to go on'; exec sleep 600";
    d.try_spawn(json!({"role": "worker", "name": "odd", "profile": "odd",
        "command": ["sh", "-c", script]}))
        .await
        .unwrap_or_else(|e| panic!("spawn: {e}\n{}", d.log()));
    let e = ev
        .until("odd blocked", |e| {
            matches!(&e.kind, EventKind::Status { member, to, .. }
                if member.as_str() == "odd" && to.as_str() == "blocked")
        })
        .await;
    let EventKind::Status {
        injectable,
        reason,
        screen,
        ..
    } = &e.kind
    else {
        unreachable!()
    };
    assert!(!injectable);
    assert_eq!(reason.as_deref(), Some("unrecognised screen"));
    assert!(
        screen
            .as_deref()
            .is_some_and(|s| s.contains("Something new this release")),
        "{e:?}"
    );
    // The operator sees why and the lines.
    let m = d.member("odd").await;
    assert_eq!(m["status"], "blocked", "{m}");
    assert_eq!(m["blocked"]["reason"], "unrecognised screen", "{m}");
    assert!(
        m["blocked"]["screen"]
            .as_str()
            .is_some_and(|s| s.contains("Enter to go on")),
        "{m}"
    );
    let out = d.cli(&["list"]);
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("blocked (unrecognised screen)"), "{list}");
    // So does the lead; another worker gets the reason without the text.
    let r = d.calls_as("lead", json!([{"tool": "fleet_list"}])).await;
    let row = |r: &Value| {
        r["structured"]["members"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == "odd").cloned())
            .unwrap_or_else(|| panic!("no odd in {r}"))
    };
    let lead_row = row(&r[0]);
    assert!(
        lead_row["blocked"]["screen"]
            .as_str()
            .is_some_and(|s| s.contains("Something new")),
        "{lead_row}"
    );
    let r = d.calls_as("w2", json!([{"tool": "fleet_list"}])).await;
    let w_row = row(&r[0]);
    assert_eq!(w_row["blocked"]["reason"], "unrecognised screen", "{w_row}");
    assert_eq!(w_row["blocked"]["screen"], "", "{w_row}");
    // A message waits: queued, never delivered into a screen nobody can read.
    let t = d.send("odd", "sum: 1").await;
    ev.receipt(&t, "queued").await;
    // A round trip through another member later, still held.
    d.calls_as("lead", json!([{"tool": "fleet_whoami"}])).await;
    let later = d.member("odd").await;
    assert_eq!(later["status"], "blocked", "{later}");
    assert_eq!(
        later["queue"]["queued"].as_array().map(Vec::len),
        Some(1),
        "{later}"
    );
    assert!(
        !ev.seen.iter().any(|e| matches!(&e.kind, EventKind::Receipt { target, state, .. }
                if target.as_str() == "odd" && *state != fleetd_actors::injector::state::ReceiptState::Queued)),
        "a message went further than queued into an unrecognised screen"
    );
}

/// A message whose ticket expires while it waits behind a dialog is never pasted when the
/// dialog closes: its receipt says it expired, its ticket ends (the sender sees why), and the
/// message sent after it, still in time, is the next one delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_ticket_expired_in_the_queue_is_not_pasted() {
    let mut config = test_config();
    config.tickets.ttl_seconds = 2;
    let d = D::with(config).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--permission", "--work-ms", "50"]))
        .await;
    let t1 = d.send("w1", "sum: 1").await;
    ev.until("permission dialog", |e| {
        matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "blocked")
    })
    .await;
    let t2 = d.send("w1", "sum: 2").await;
    let failed = ev.receipt(&t2, "failed").await;
    let EventKind::Receipt { note, .. } = &failed.kind else {
        unreachable!()
    };
    assert!(
        note.as_deref()
            .is_some_and(|n| n.starts_with(&format!("expired: its ticket {t2} expired"))),
        "{failed:?}"
    );
    let ticket = d.ticket(&t2).await;
    assert!(
        ["expired", "undeliverable"].contains(&ticket["state"].as_str().unwrap_or("")),
        "the sender sees the ticket end: {ticket}"
    );
    assert_eq!(ticket["receipt"]["state"], "failed", "{ticket}");
    // A third, sent now with a fresh TTL; then the dialog is answered.
    let t3 = d.send("w1", "sum: 3").await;
    let _: Value = d
        .client
        .post("/members/w1/input", &json!({"text": "y"}))
        .await
        .unwrap();
    let delivered = ev.receipt(&t3, "delivered").await;
    assert!(
        !ev.seen.iter().any(|e| e.seq < delivered.seq
            && matches!(&e.kind, EventKind::Receipt { ticket: Some(t), state, .. }
                if t.to_string() == t2 && *state == fleetd_actors::injector::state::ReceiptState::Delivered)),
        "the expired message was pasted"
    );
    let _ = t1;
}
