//! Crash trials: acknowledged messages survive `kill -9` of the daemon, each pasted exactly once.
//!
//! Recording agents (`sim-agent --record`) keep every byte fleetd types into them. Concurrent
//! senders send through the REST API; each send the daemon acknowledged carries a unique token.
//! Meanwhile the daemon is killed with SIGKILL, aimed at the moment a paste is due (right after
//! a `delivered` receipt is published) and at bursts of sends, and restarted on the same state
//! dir. At the end every acknowledged message must have reached its agent's terminal exactly
//! once, or be `stalled`/`failed` with a reason; none may be `accepted` without having been
//! written; no ticket may wait, open with an accepted receipt, for its TTL.
//!
//! The default size runs in the test suite; `FLEETD_CRASH_TRIALS`, `FLEETD_CRASH_SENDS` and
//! `FLEETD_CRASH_KILLS` scale it up (the trial is 20 trials of 1,000 sends and 20 kills:
//! see docs/PERFORMANCE.md for the figures).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use crate::common::*;

fn env_or(name: &str, dflt: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(dflt)
}

/// The tokens pasted into a recording, in order: each message body is `crash-token-NxA`.
fn tokens_in(record: &Path) -> Vec<String> {
    let bytes = std::fs::read(record).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    text.match_indices("crash-token-")
        .map(|(i, _)| {
            text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect()
        })
        .collect()
}

#[derive(Default)]
struct Outcome {
    acknowledged: usize,
    lost: Vec<String>,
    duplicated: Vec<String>,
    accepted_unwritten: Vec<String>,
    stalled: usize,
    waiting_open: Vec<String>,
}

async fn trial(sends: usize, kills: usize, seed: u64) -> Outcome {
    let mut c = test_config();
    // Ticket TTLs must not end the trial's tickets: anything still open at the end is a bug.
    c.tickets.ttl_seconds = 3_600;
    c.injector.accept_timeout_ms = 3_000;
    let mut d = D::with(c).await;
    let dir = tempfile::tempdir().unwrap();
    let members = ["c1", "c2", "c3"];
    let records: Vec<PathBuf> = members
        .iter()
        .map(|m| dir.path().join(format!("{m}.bytes")))
        .collect();
    let mut ev = d.events().await;
    for (m, r) in members.iter().zip(&records) {
        d.spawn(m, "worker", recorder(r, 5)).await;
        ev.status(m, "idle").await;
    }
    // Four senders; each acknowledged send is (token, member, ticket).
    let acked = Arc::new(std::sync::Mutex::new(Vec::<(String, String, String)>::new()));
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = vec![];
    for s in 0..4u64 {
        let client = d.client.clone();
        let (acked, next) = (acked.clone(), next.clone());
        senders.push(tokio::spawn(async move {
            let mut rng = seed ^ (s.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            loop {
                let n = next.fetch_add(1, Ordering::SeqCst);
                if n >= sends {
                    return;
                }
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let member = ["c1", "c2", "c3"][(rng % 3) as usize];
                // Until the daemon acknowledges one (it may be down). A send that failed was
                // not acknowledged (though it may have been stored, and then it is delivered
                // too): the next attempt is a new message with a token of its own.
                for attempt in 0.. {
                    let token = format!("crash-token-{n}x{attempt}");
                    let r: Result<Value, _> = client
                        .post(
                            &format!("/members/{member}/messages"),
                            &json!({"message": token}),
                        )
                        .await;
                    match r {
                        Ok(v) => {
                            let t = v["ticket"]["id"].as_str().unwrap_or("").to_string();
                            acked
                                .lock()
                                .unwrap()
                                .push((token.clone(), member.into(), t));
                            break;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
            }
        }));
    }
    // The killer: aimed at a due paste (a `delivered` receipt just published), every other one
    // at a burst (a moment after a send was queued).
    for k in 0..kills {
        if next.load(Ordering::SeqCst) >= sends {
            break;
        }
        let aim_paste = k % 2 == 0;
        ev.until("a moment to kill", |e| match &e.kind {
            EventKind::Receipt { state, .. } => {
                let s = serde_json::to_value(state).unwrap_or_default();
                if aim_paste {
                    s == "delivered"
                } else {
                    s == "queued"
                }
            }
            _ => false,
        })
        .await;
        d.kill9();
        drop(ev);
        d.boot().await;
        ev = d.events().await;
    }
    for s in senders {
        s.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    // Settle: every acknowledged message's ticket resolved (a reply, a tail, or undeliverable),
    // or its receipt stalled or failed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut views: BTreeMap<String, Value> = BTreeMap::new();
    loop {
        views.clear();
        let all: Vec<Value> = d.client.get("/tickets").await.unwrap();
        for t in all {
            views.insert(t["id"].as_str().unwrap_or("").to_string(), t);
        }
        let unsettled: Vec<String> = acked
            .iter()
            .filter(|(_, _, t)| {
                views.get(t).is_none_or(|v| {
                    v["state"] == "open"
                        && !matches!(v["receipt"]["state"].as_str(), Some("stalled" | "failed"))
                })
            })
            .map(|(tok, m, t)| {
                format!(
                    "{tok} to {m} ({t}): {}",
                    views
                        .get(t)
                        .map(|v| v["receipt"].to_string())
                        .unwrap_or_default()
                )
            })
            .collect();
        if unsettled.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            for m in members {
                let v = d.member(m).await;
                eprintln!(
                    "{m}: status {} pinned {} queue {}\nscreen:\n{}",
                    v["slot_view"]["status"],
                    v["slot_view"]["pinned_by_signal"],
                    v["queue"]["in_flight"],
                    v["slot_view"]["screen"].as_str().unwrap_or("")
                );
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} messages did not settle: {:#?}",
            unsettled.len(),
            &unsettled[..unsettled.len().min(10)]
        );
        // Wait for the next event rather than a fixed time.
        let _ = tokio::time::timeout(Duration::from_secs(2), ev.next()).await;
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for r in &records {
        for t in tokens_in(r) {
            *seen.entry(t).or_default() += 1;
        }
    }
    let mut out = Outcome {
        acknowledged: acked.len(),
        ..Outcome::default()
    };
    for (token, _, ticket) in &acked {
        let v = &views[ticket];
        let receipt = v["receipt"]["state"].as_str().unwrap_or("");
        match seen.get(token).copied().unwrap_or(0) {
            0 if receipt == "stalled" || receipt == "failed" => out.stalled += 1,
            0 => {
                if receipt == "accepted" {
                    out.accepted_unwritten.push(format!("{token} ({ticket})"));
                }
                out.lost
                    .push(format!("{token} ({ticket}): receipt {receipt}"));
            }
            1 => {
                if receipt == "stalled" {
                    out.stalled += 1;
                }
            }
            n => out.duplicated.push(format!("{token} ({ticket}) x{n}")),
        }
        if v["state"] == "open" && receipt == "accepted" {
            out.waiting_open.push(format!("{token} ({ticket})"));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_loses_no_acknowledged_message_and_pastes_none_twice() {
    let trials = env_or("FLEETD_CRASH_TRIALS", 1);
    let sends = env_or("FLEETD_CRASH_SENDS", 90);
    let kills = env_or("FLEETD_CRASH_KILLS", 4);
    let mut total = Outcome::default();
    for i in 0..trials {
        let o = trial(sends, kills, 0x5eed + i as u64).await;
        eprintln!(
            "trial {}: {} acknowledged, {} lost, {} duplicated, {} accepted unwritten, {} stalled, {} waiting open",
            i + 1,
            o.acknowledged,
            o.lost.len(),
            o.duplicated.len(),
            o.accepted_unwritten.len(),
            o.stalled,
            o.waiting_open.len()
        );
        total.acknowledged += o.acknowledged;
        total.lost.extend(o.lost);
        total.duplicated.extend(o.duplicated);
        total.accepted_unwritten.extend(o.accepted_unwritten);
        total.stalled += o.stalled;
        total.waiting_open.extend(o.waiting_open);
    }
    assert!(total.lost.is_empty(), "lost: {:?}", total.lost);
    assert!(
        total.duplicated.is_empty(),
        "pasted twice: {:?}",
        total.duplicated
    );
    assert!(
        total.accepted_unwritten.is_empty(),
        "accepted but never written: {:?}",
        total.accepted_unwritten
    );
    assert!(
        total.waiting_open.is_empty(),
        "turns never attributed (open, accepted): {:?}",
        total.waiting_open
    );
}
