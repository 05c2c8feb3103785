//! Nothing acknowledged is lost: kill -9 and restart, SIGTERM, members that outlive the daemon.

use std::time::Duration;

use fleetd_actors::config::OnShutdown;
use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_and_restart_lose_no_queued_message_or_open_ticket() {
    let mut d = D::start().await;
    let mut ev = d.events().await;
    // A worker that stops at a permission dialog on every task: the first message is delivered,
    // the next two wait in its queue.
    d.spawn("w1", "worker", sim(&["--permission", "--work-ms", "20"]))
        .await;
    let pid = d.member("w1").await["pid"].as_u64().unwrap();
    let t: Vec<String> = vec![
        d.send("w1", "sum: 1").await,
        d.send("w1", "sum: 2").await,
        d.send("w1", "sum: 3").await,
    ];
    ev.until("dialog", |e| matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "blocked")).await;
    d.kill9();
    drop(ev);
    d.boot().await;
    let mut ev = d.events().await;
    // The agent survived the daemon and was re-adopted, screen and all.
    let m = d.member("w1").await;
    assert_eq!(m["pid"].as_u64().unwrap(), pid, "{m}");
    assert!(
        m["slot_view"]["screen"]
            .as_str()
            .unwrap()
            .contains("Allow sim to edit files?"),
        "{m}"
    );
    assert!(d.log().contains("terminal re-adopted"));
    // The first message was accepted before the daemon died, or recorded delivered: then its
    // terminal host says it was written, and the dialog on screen is its turn.
    if d.ticket(&t[0]).await["receipt"]["state"] != "accepted" {
        ev.receipt(&t[0], "accepted").await;
    }
    let receipts: Vec<String> = futures_receipts(&d, &t).await;
    assert_eq!(receipts, vec!["accepted", "queued", "queued"]);
    for id in &t {
        assert_eq!(d.ticket(id).await["state"], "open");
    }
    // Answer each dialog; every message is delivered exactly once, in order.
    for (i, id) in t.iter().enumerate() {
        ev.until("dialog", |e| e.seq > 0 && matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "blocked")).await;
        ev.seen.clear();
        let _: Value = d
            .client
            .post("/members/w1/input", &json!({"text": "y"}))
            .await
            .unwrap();
        ev.ticket(id, "replied").await;
        assert_eq!(
            d.ticket(id).await["reply"]["text"],
            format!("sum of 1 numbers = {}", i + 1)
        );
    }
    // The last reply is in; once the worker is back at its prompt its screen is complete.
    let last = ev.seen.last().map(|e| e.seq).unwrap_or(0);
    ev.until("idle after the last reply", |e| {
        e.seq > last && matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "idle")
    })
    .await;
    let all: Vec<Value> = d.client.get("/tickets").await.unwrap();
    assert_eq!(all.len(), 3, "no duplicate tickets");
    let screen = d.client.get_text("/members/w1/screen").await.unwrap();
    for i in 1..=3 {
        assert_eq!(
            screen.matches(&format!("sum of 1 numbers = {i}")).count(),
            1,
            "message {i} not exactly once:\n{screen}"
        );
    }
}

async fn futures_receipts(d: &D, tickets: &[String]) -> Vec<String> {
    let mut out = vec![];
    for t in tickets {
        out.push(
            d.ticket(t).await["receipt"]["state"]
                .as_str()
                .unwrap()
                .to_string(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_process_died_while_the_daemon_was_down_is_marked_exited() {
    let mut d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    d.spawn("w2", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    let w1 = d.member("w1").await;
    let (pid, host_pid) = (
        w1["pid"].as_i64().unwrap(),
        w1["host_pid"].as_i64().unwrap(),
    );
    let t = d.send("w1", "sum: 1").await;
    ev.ticket(&t, "replied").await;
    let t2 = d.send("w1", "sum: 2").await;
    ev.ticket(&t2, "replied").await;
    d.kill9();
    // SAFETY: killing the agent this test started.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    // Its PTY host records the exit and ends; wait until it is gone.
    assert!(
        wait_pid_gone(host_pid as i32, T),
        "the PTY host did not exit"
    );
    d.boot().await;
    let mut ev = d.events().await;
    ev.until(
        "w1 exit",
        |e| matches!(&e.kind, EventKind::Exited { member, .. } if member.as_str() == "w1"),
    )
    .await;
    let m = d.member("w1").await;
    assert_eq!(m["status"], "exited");
    assert!(
        m["exit"]["reason"]
            .as_str()
            .unwrap()
            .contains("while the daemon was down"),
        "{m}"
    );
    // The other member was re-adopted and still works.
    assert_eq!(
        d.ask("w2", "sum: 5 5").await["reply"]["text"],
        "sum of 2 numbers = 10"
    );
    // Nothing is queued for the dead member: a new message is refused clearly.
    let e = d
        .client
        .post::<Value>("/members/w1/messages", &json!({"message": "x"}))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("has exited"), "{e}");
    // And leaves no ticket behind.
    let all: Value = d.client.get("/tickets").await.unwrap();
    let to_w1 = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["to"] == "w1" && t["state"] == "open")
        .count();
    assert_eq!(to_w1, 0, "{all}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_shuts_down_gracefully_and_members_are_kept_for_the_next_daemon() {
    let mut c = test_config();
    c.daemon.on_shutdown = OnShutdown::Keep;
    let mut d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "10"])).await;
    ev.status("w1", "idle").await;
    let pid = d.member("w1").await["pid"].as_i64().unwrap();
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(Duration::from_secs(15));
    assert!(st.success(), "exit status {st:?}\n{}", d.log());
    let log = d.log();
    assert!(
        log.contains("SIGTERM: shutting down") && log.contains("fleetd stopped cleanly"),
        "{log}"
    );
    assert!(
        !d.state.join("api.sock").exists(),
        "the API socket is removed"
    );
    // SAFETY: probing our own agent with signal 0.
    assert_eq!(
        unsafe { libc::kill(pid as i32, 0) },
        0,
        "the agent kept running"
    );
    d.boot().await;
    assert_eq!(
        d.ask("w1", "sum: 1 1").await["reply"]["text"],
        "sum of 2 numbers = 2"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_on_shutdown_stop_stops_members_first() {
    let mut d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    let pid = d.member("w1").await["pid"].as_i64().unwrap();
    d.signal(libc::SIGTERM);
    assert!(
        d.wait_exit(Duration::from_secs(15)).success(),
        "{}",
        d.log()
    );
    // SAFETY: probing our own agent with signal 0.
    assert_ne!(
        unsafe { libc::kill(pid as i32, 0) },
        0,
        "the agent was stopped"
    );
}

/// A SIGTERM that lands while a paste is in its terminal host's hands (its Enter still due)
/// is not a clean stop: the daemon says which delivery was in flight and exits non-zero; the
/// next daemon learns from the host that it was written, and it is pasted exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_paste_is_not_a_clean_stop_and_the_paste_is_not_repeated() {
    let mut c = test_config();
    c.daemon.on_shutdown = OnShutdown::Keep;
    // The host waits this long between the paste and its Enter: the stop lands in between.
    if let Some(p) = c.profiles.get_mut("sim") {
        p.enter_delay_ms = 4_000;
    }
    let mut d = D::with(c).await;
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("w1.bytes");
    let mut ev = d.events().await;
    d.spawn(
        "w1",
        "worker",
        sim(&["--work-ms", "10", "--record", &record.display().to_string()]),
    )
    .await;
    ev.status("w1", "idle").await;
    let t = d.send("w1", "sum: 2 3").await;
    ev.receipt(&t, "delivered").await;
    d.signal(libc::SIGTERM);
    let st = d.wait_exit(Duration::from_secs(15));
    let log = d.log();
    assert!(
        !st.success(),
        "a delivery was in flight: not a clean stop\n{log}"
    );
    assert!(!log.contains("fleetd stopped cleanly"), "{log}");
    assert!(
        log.contains("was not confirmed written")
            && log.contains("stopped with deliveries in flight"),
        "{log}"
    );
    d.boot().await;
    let mut ev = d.events().await;
    ev.ticket(&t, "replied").await;
    assert_eq!(d.ticket(&t).await["reply"]["text"], "sum of 2 numbers = 5");
    assert_eq!(d.ticket(&t).await["receipt"]["state"], "accepted");
    let bytes = std::fs::read(&record).unwrap();
    let pastes = bytes.windows(6).filter(|w| w == b"\x1b[200~").count();
    assert_eq!(
        pastes,
        1,
        "pasted exactly once: {:?}",
        String::from_utf8_lossy(&bytes)
    );
    assert!(
        d.log()
            .contains("a delivery from before the restart resolved")
    );
}

/// A turn the daemon's crash cut short is still attributed: when the member is back at its
/// prompt its ticket gets the transcript tail, not a silent wait for the TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_cut_short_by_a_crash_still_ends_with_its_tail() {
    let mut d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--no-reply", "--work-ms", "1500"]))
        .await;
    ev.status("w1", "idle").await;
    let t = d.send("w1", "sum: 4 4").await;
    ev.receipt(&t, "accepted").await;
    d.kill9();
    drop(ev);
    d.boot().await;
    let mut ev = d.events().await;
    ev.ticket(&t, "tail").await;
    let tk = d.ticket(&t).await;
    assert!(
        tk["tail"]["text"]
            .as_str()
            .unwrap()
            .contains("sum of 2 numbers = 8"),
        "{tk}"
    );
    assert_eq!(tk["receipt"]["state"], "accepted");
}
