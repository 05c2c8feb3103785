//! Supervision: a panic restarts only the failed actor; a crash loop escalates and the daemon
//! exits non-zero with the reason logged.

use std::time::Duration;

use fleetd_actors::events::EventKind;
use fleetd_actors::supervisor::policy::Restart;

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_slot_is_restarted_alone_and_its_agent_survives() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--work-ms", "10"])).await;
    d.spawn("w2", "worker", sim(&["--work-ms", "10"])).await;
    ev.status("w1", "idle").await;
    let pid = d.member("w1").await["pid"].clone();
    d.fault("slot:w1").await;
    let e = ev
        .until(
            "restart",
            |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "slot:w1"),
        )
        .await;
    let EventKind::Restarted { reason, .. } = &e.kind else {
        unreachable!()
    };
    assert!(reason.contains("injected fault"), "{reason}");
    ev.until(
        "re-adoption",
        |e| matches!(&e.kind, EventKind::Adopted { member, .. } if member.as_str() == "w1"),
    )
    .await;
    // Only that actor restarted; the other member kept working.
    assert!(
        !ev.seen
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Restarted { child, .. } if child != "slot:w1"))
    );
    assert_eq!(
        d.ask("w2", "sum: 2 3").await["reply"]["text"],
        "sum of 2 numbers = 5"
    );
    // Its terminal survived: same process, state rebuilt, still answering.
    assert_eq!(d.member("w1").await["pid"], pid);
    assert_eq!(
        d.ask("w1", "sum: 4 4").await["reply"]["text"],
        "sum of 2 numbers = 8"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ticket_desk_and_injector_rebuild_from_the_store_after_a_panic() {
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&["--permission", "--work-ms", "10"]))
        .await;
    let t1 = d.send("w1", "sum: 1").await;
    let t2 = d.send("w1", "sum: 2").await;
    ev.until("dialog", |e| matches!(&e.kind, EventKind::Status { member, to, .. } if member.as_str() == "w1" && to.as_str() == "blocked")).await;
    d.fault("tickets").await;
    ev.until(
        "desk restart",
        |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "tickets"),
    )
    .await;
    d.fault("injector:w1").await;
    ev.until(
        "injector restart",
        |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "injector:w1"),
    )
    .await;
    assert_eq!(d.ticket(&t1).await["state"], "open");
    assert_eq!(d.ticket(&t2).await["receipt"]["state"], "queued");
    let _: serde_json::Value = d
        .client
        .post("/members/w1/input", &serde_json::json!({"text": "y"}))
        .await
        .unwrap();
    ev.ticket(&t1, "replied").await;
    ev.receipt(&t2, "delivered").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_escalates_and_the_daemon_exits_non_zero() {
    let mut c = test_config();
    let slot = c.supervision.get_mut("slot").unwrap();
    slot.restart = Restart::Transient;
    slot.max_restarts = 2;
    slot.window_secs = 60;
    let mut d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    for attempt in 1..=2u32 {
        d.fault("slot:w1").await;
        ev.until("restart", |e| matches!(&e.kind, EventKind::Restarted { child, attempt: a, .. } if child == "slot:w1" && *a == attempt)).await;
        ev.until("re-adoption", |e| {
            e.seq > 0
                && matches!(&e.kind, EventKind::Adopted { member, .. } if member.as_str() == "w1")
        })
        .await;
        ev.seen.clear();
    }
    d.fault("slot:w1").await;
    escalates_and_exits_2(&mut d, &mut ev, &["slot:w1", "limit 2"]).await;
    let log = d.log();
    assert!(
        log.contains("restart limit exceeded") && log.contains("slot:w1"),
        "{log}"
    );
}

/// Restart intensity is counted for the supervisor as a whole, as OTP does: children that
/// each stay under their own limit still escalate together past the supervisor's.
#[tokio::test(flavor = "multi_thread")]
async fn children_each_under_their_limit_escalate_together_past_the_supervisors() {
    let mut c = test_config();
    let slot = c.supervision.get_mut("slot").unwrap();
    slot.restart = Restart::Transient;
    slot.max_restarts = 5;
    slot.window_secs = 60;
    let mut overall = slot.clone();
    overall.max_restarts = 3;
    c.supervision.insert("supervisor".into(), overall);
    let mut d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    d.spawn("w2", "worker", sim(&[])).await;
    ev.status("w2", "idle").await;
    // Three restarts in all, never more than two of one child: each is within its own limit.
    for (n, who) in ["w1", "w2", "w1"].into_iter().enumerate() {
        let child = format!("slot:{who}");
        d.fault(&child).await;
        ev.until(
            "restart",
            |e| matches!(&e.kind, EventKind::Restarted { child: c, .. } if *c == child),
        )
        .await;
        ev.until("re-adoption", |e| {
            e.seq > 0
                && matches!(&e.kind, EventKind::Adopted { member, .. } if member.as_str() == who)
        })
        .await;
        assert!(
            !ev.seen
                .iter()
                .any(|e| matches!(e.kind, EventKind::Escalated { .. })),
            "escalated after {} restarts",
            n + 1
        );
        ev.seen.clear();
    }
    // The fourth, of w2 (its second): over the supervisor's intensity of 3.
    d.fault("slot:w2").await;
    escalates_and_exits_2(&mut d, &mut ev, &["children together", "limit 3"]).await;
}

/// The next escalation's reason names each of `says`, and the daemon exits with code 2.
async fn escalates_and_exits_2(d: &mut D, ev: &mut Events, says: &[&str]) {
    let e = ev
        .until("escalation", |e| {
            matches!(&e.kind, EventKind::Escalated { .. })
        })
        .await;
    let EventKind::Escalated { reason } = &e.kind else {
        unreachable!()
    };
    assert!(says.iter().all(|s| reason.contains(s)), "{reason}");
    let st = d.wait_exit(Duration::from_secs(15));
    assert_eq!(st.code(), Some(2), "{}", d.log());
}
