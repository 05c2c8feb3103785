//! The drift protocol through the real binary: agents anchoring through fleet_drift, forged
//! lines rejected, a forbidden role flip alerting the lead within a heartbeat, bootstrapping,
//! G4 alerts in the reader's log, an unreadable log falling back to the cached anchor, and the
//! offline `fleetd drift check`.

use fleetd_actors::config::{CircleConfig, DriftIdentity};
use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use crate::common::*;

fn exec() -> Vec<String> {
    sim(&["--script", "exec", "--work-ms", "0"])
}

fn drift_config() -> fleetd_actors::config::Config {
    let mut c = test_config();
    c.drift.heartbeat_secs = 1;
    c.drift.circles.insert(
        "read-only".into(),
        CircleConfig {
            forbidden: vec!["deployer".into()],
        },
    );
    c.drift.identities.insert(
        "w1".into(),
        DriftIdentity {
            circle: Some("read-only".into()),
            default_baseline: None,
        },
    );
    c
}

async fn drift_call(d: &D, who: &str, args: Value) -> Value {
    let r = d
        .calls_as(who, json!([{"tool": "fleet_drift", "args": args}]))
        .await;
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    r[0]["structured"].clone()
}

fn check(d: &D, reader: &str) -> Vec<Value> {
    let o = std::process::Command::new(bin())
        .args(["drift", "check", "--kb"])
        .arg(d.state.join("kb"))
        .args(["--self", reader, "--json", "--trust"])
        .arg(d.state.join("host.key.pub"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report<'a>(rs: &'a [Value], peer: &str) -> &'a Value {
    rs.iter()
        .find(|r| r["peer"] == peer)
        .unwrap_or_else(|| panic!("no report for {peer}: {rs:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_anchor_through_fleet_drift_and_only_in_their_own_log() {
    let d = D::with(drift_config()).await;
    d.spawn("w1", "worker", exec()).await;
    d.spawn("w2", "worker", exec()).await;
    let w = drift_call(
        &d,
        "w1",
        json!({"action": "anchor", "baseline": "researcher"}),
    )
    .await;
    assert_eq!(w["identity"], "w1");
    // First use bootstraps: nobody had observed w1, so the operator default (its role).
    assert_eq!(w["first_contact"]["type"], "first_contact");
    assert_eq!(w["first_contact"]["source"], "operator_default");
    assert_eq!(w["first_contact"]["baseline_pos"], "worker");
    assert_eq!(w["line"]["type"], "fencepost");
    let st: Value = d.client.get("/status").await.unwrap();
    assert_eq!(
        w["line"]["signer"], st["public_key"],
        "signed with the host key"
    );
    // No way to write another identity's log: there is no such argument, and observe lands in
    // the observer's own log.
    let r = d.calls_as("w2", json!([{"tool": "fleet_drift", "args": {"action": "anchor", "baseline": "x", "identity": "w1"}}])).await;
    assert_eq!(r[0]["is_error"], true);
    assert!(
        r[0]["text"]
            .as_str()
            .unwrap()
            .contains("unknown field `identity`"),
        "{}",
        r[0]
    );
    drift_call(
        &d,
        "w2",
        json!({"action": "observe", "subject": "w1", "baseline": "research agent"}),
    )
    .await;
    let dates: Vec<String> = d.client.get("/kb/fleet/drift/w2/").await.unwrap();
    let log = d
        .client
        .get_text(&format!("/kb/fleet/drift/w2/{}.jsonl", dates[0]))
        .await
        .unwrap();
    assert!(log.contains("\"subject\":\"w1\""), "{log}");
    let w1_log = d
        .client
        .get_text(&format!("/kb/fleet/drift/w1/{}.jsonl", dates[0]))
        .await
        .unwrap();
    assert_eq!(
        w1_log.lines().count(),
        3,
        "header, first_contact, fencepost: {w1_log}"
    );
    // A process outside every member cannot write at all.
    let mcp = crate::mcp::client(&d, crate::mcp::Era::Initialize).await;
    let r = crate::mcp::call(
        &mcp,
        "fleet_drift",
        json!({"action": "anchor", "baseline": "x"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true));
    assert_eq!(r.structured_content.unwrap()["error"]["rule"], "DRIFT");
    let _ = mcp.cancel().await;
    // The offline check agrees: two consistent reporters about w1.
    let rs = check(&d, "w2");
    let w1 = report(&rs, "w1");
    assert_eq!(
        (
            w1["anchor"].as_str(),
            w1["verdict"].as_str(),
            w1["g3"].as_str()
        ),
        (Some("researcher"), Some("trusted"), Some("consensus")),
        "{w1}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_line_appended_by_hand_is_rejected() {
    let d = D::with(drift_config()).await;
    d.spawn("w2", "worker", exec()).await;
    let w = drift_call(&d, "w2", json!({"action": "anchor", "baseline": "writer"})).await;
    let date = w["line"]["ts"].as_str().unwrap()[..10].to_string();
    let path = d.state.join(format!("kb/fleet/drift/w2/{date}.jsonl"));
    // Take the real signed line and change what it says: the signature no longer covers it.
    let forged = serde_json::to_string(&w["line"])
        .unwrap()
        .replace("writer", "deployer");
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str(&forged);
    text.push('\n');
    std::fs::write(&path, text).unwrap();
    let rs = check(&d, "w1");
    let w2 = report(&rs, "w2");
    assert_eq!(w2["g1"], "fail");
    assert_eq!(
        w2["anchor"], "writer",
        "the forged line is never the anchor"
    );
    assert!(
        w2["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("signature does not verify")),
        "{w2}"
    );
    // Unsigned, or signed by a key nobody trusts: rejected the same way.
    let other = tempfile::tempdir().unwrap();
    let k = other.path().join("k");
    assert!(
        std::process::Command::new(bin())
            .args(["keygen", "--out"])
            .arg(&k)
            .output()
            .unwrap()
            .status
            .success()
    );
    let o = std::process::Command::new(bin())
        .args(["drift", "append", "--kb"])
        .arg(d.state.join("kb"))
        .arg("--key")
        .arg(&k)
        .args([
            "--identity",
            "w2",
            "--type",
            "fencepost",
            "--baseline",
            "deployer",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rs = check(&d, "w1");
    let w2 = report(&rs, "w2");
    assert_eq!(w2["anchor"], "writer");
    assert!(
        w2["alerts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.as_str().unwrap().contains("does not trust")),
        "{w2}"
    );
}

/// Append a line offline, signed with the daemon's own host key (as an operator would).
fn append(d: &D, identity: &str, args: &[&str]) {
    let o = std::process::Command::new(bin())
        .args(["drift", "append", "--kb"])
        .arg(d.state.join("kb"))
        .arg("--key")
        .arg(d.state.join("host.key"))
        .args(["--identity", identity])
        .args(args)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// The seq of the event that announced `w`'s line (what happened after it happened after the
/// write).
async fn written(ev: &mut Events, identity: &str, w: &Value) -> u64 {
    let tick = w["line"]["tick"].as_u64().unwrap();
    ev.until("the drift line event", |e| {
        matches!(&e.kind, EventKind::DriftLine { identity: i, tick: t, .. } if i == identity && *t == tick)
    })
    .await
    .seq
}

/// Await drift passes (at most ten) until `peer`'s report satisfies `pred`; returns it.
async fn view_when(d: &D, ev: &mut Events, peer: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let mut seq = ev.seen.last().map_or(0, |e| e.seq);
    for _ in 0..10 {
        let v = peer_view(d, peer).await;
        if pred(&v) {
            return v;
        }
        seq = ev.drift_pass(seq).await.seq;
    }
    panic!(
        "{peer} never reached the expected state: {}",
        peer_view(d, peer).await
    );
}

async fn peer_view(d: &D, peer: &str) -> Value {
    let v: Value = d.client.get("/drift").await.unwrap();
    v["peers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["peer"] == peer)
        .cloned()
        .unwrap_or(Value::Null)
}

fn is_alert(e: &fleetd_actors::events::Event, who: &str, r: &str) -> bool {
    matches!(&e.kind, EventKind::DriftAlert { peer, rule, .. } if peer == who && rule == r)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flip_to_a_forbidden_role_alerts_the_lead_within_a_heartbeat() {
    let d = D::with(drift_config()).await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", sim(&["--work-ms", "10", "--no-reply"]))
        .await;
    d.spawn("w1", "worker", exec()).await;
    ev.status("lead", "idle").await;
    let w = drift_call(
        &d,
        "w1",
        json!({"action": "anchor", "baseline": "researcher"}),
    )
    .await;
    assert_eq!(w["line"]["type"], "fencepost");
    let v = view_when(&d, &mut ev, "w1", |v| v["verdict"] == "trusted").await;
    assert_eq!(v["anchor"], "researcher", "{v}");

    let flip = drift_call(
        &d,
        "w1",
        json!({"action": "anchor", "baseline": "deployment agent", "reanchor": true}),
    )
    .await;
    assert_eq!(flip["line"]["type"], "reanchor");
    let mark = written(&mut ev, "w1", &flip).await;
    let alert = ev
        .after(mark, "the G3 circle alert", |e| {
            is_alert(e, "w1", "G3") && matches!(&e.kind, EventKind::DriftAlert { text, .. } if text.contains("forbidden"))
        })
        .await;
    let EventKind::DriftAlert { text, .. } = &alert.kind else {
        unreachable!()
    };
    assert!(text.contains("forbidden"), "{text}");
    assert!(text.contains("deployer"), "{text}");
    // Within one heartbeat: the pass under way at the flip may have read the KB before it, but
    // the next pass (started after the write) raised it, so at most one pass ended in between.
    let passes_between = ev
        .seen
        .iter()
        .filter(|e| {
            e.seq > mark && e.seq < alert.seq && matches!(e.kind, EventKind::DriftPass { .. })
        })
        .count();
    assert!(
        passes_between <= 1,
        "{passes_between} passes completed before the alert"
    );
    // The lead receives it in its terminal, as a message without a ticket, from the daemon
    // itself (not from the operator).
    ev.after(mark, "the alert delivered to the lead", |e| {
        matches!(&e.kind, EventKind::Receipt { target, ticket: None, state, from, .. }
            if target.as_str() == "lead" && serde_json::to_value(state).unwrap() == "delivered"
                && from.to_string() == "fleetd")
    })
    .await;
    let forbidden = |a: &&Value| {
        a["peer"] == "w1" && a["rule"] == "G3" && a["text"].as_str().unwrap().contains("forbidden")
    };
    let alerts: Vec<Value> = d.client.get("/alerts").await.unwrap();
    assert_eq!(alerts.iter().filter(forbidden).count(), 1, "{alerts:?}");
    let st: Value = d.client.get("/status").await.unwrap();
    assert!(
        st["untrusted_peers"]
            .as_array()
            .unwrap()
            .contains(&json!("w1")),
        "{st}"
    );
    let v = peer_view(&d, "w1").await;
    assert_eq!(
        (v["g3"].as_str(), v["verdict"].as_str()),
        (Some("conflict"), Some("untrusted")),
        "{v}"
    );
    // Raised once, not at every heartbeat: two more passes bring no second alert.
    let p1 = ev.drift_pass(alert.seq).await;
    let p2 = ev.drift_pass(p1.seq).await;
    let before: Vec<Value> = d.client.get("/alerts").await.unwrap();
    let again = ev
        .seen
        .iter()
        .filter(|e| e.seq > p1.seq && e.seq <= p2.seq && is_alert(e, "w1", "G3"))
        .count();
    assert_eq!(again, 0, "a pass raised an alert it had raised before");
    let alerts: Vec<Value> = d.client.get("/alerts").await.unwrap();
    assert_eq!(alerts.len(), before.len(), "{alerts:?}");
    assert_eq!(alerts.iter().filter(forbidden).count(), 1, "{alerts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_without_a_log_bootstraps_from_its_peers_observations() {
    let d = D::with(drift_config()).await;
    d.spawn("w2", "worker", exec()).await;
    d.spawn("w3", "worker", exec()).await;
    drift_call(
        &d,
        "w2",
        json!({"action": "observe", "subject": "w3", "baseline": "code reviewer"}),
    )
    .await;
    let w = drift_call(
        &d,
        "w3",
        json!({"action": "drift", "baseline": "code reviewer", "delta": {"scope": "widened"}}),
    )
    .await;
    let fc = &w["first_contact"];
    assert_eq!(fc["type"], "first_contact");
    assert_eq!(fc["source"], "peer_consensus");
    assert_eq!(fc["observed_by"], "w2");
    assert_eq!(fc["baseline_pos"], "code reviewer");
    assert_eq!(w["line"]["type"], "drift");
    assert!(w["line"]["tick"].as_u64().unwrap() > fc["tick"].as_u64().unwrap());
    // A stale observation does not count: w4 was seen 8 days ago, so the operator default wins.
    let old = chrono::Utc::now() - chrono::Duration::days(8);
    append(
        &d,
        "w2",
        &[
            "--type",
            "fencepost",
            "--subject",
            "w4",
            "--baseline",
            "tester",
            "--ts",
            &old.to_rfc3339(),
        ],
    );
    d.spawn("w4", "worker", exec()).await;
    let w = drift_call(&d, "w4", json!({"action": "anchor", "baseline": "tester"})).await;
    assert_eq!(w["first_contact"]["source"], "operator_default");
    assert_eq!(w["first_contact"]["baseline_pos"], "worker");
    // Only the first write bootstraps.
    let w = drift_call(&d, "w4", json!({"action": "anchor", "baseline": "tester"})).await;
    assert!(w["first_contact"].is_null(), "{w}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_g4_disagreement_is_logged_in_the_readers_own_log_and_reaches_the_lead() {
    let d = D::with(drift_config()).await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", sim(&["--work-ms", "10", "--no-reply"]))
        .await;
    d.spawn("w1", "worker", exec()).await;
    ev.status("lead", "idle").await;
    // The lead saw w1 clean; in the same minute w1 logged itself drifting. Both lines are dated
    // inside one minute that has already started, so the test cannot straddle a boundary.
    let now = chrono::Utc::now();
    let minute = now
        - chrono::Duration::seconds(now.timestamp() % 60)
        - chrono::Duration::nanoseconds(now.timestamp_subsec_nanos() as i64);
    let (t1, t2) = (
        minute.to_rfc3339(),
        (minute + chrono::Duration::milliseconds(1)).to_rfc3339(),
    );
    append(
        &d,
        "lead",
        &[
            "--type",
            "fencepost",
            "--subject",
            "w1",
            "--baseline",
            "researcher",
            "--ts",
            &t1,
            "--tick",
            "1",
        ],
    );
    append(
        &d,
        "w1",
        &[
            "--type",
            "fencepost",
            "--baseline",
            "researcher",
            "--ts",
            &t1,
            "--tick",
            "1",
        ],
    );
    append(
        &d,
        "w1",
        &[
            "--type",
            "drift",
            "--baseline",
            "researcher",
            "--delta",
            r#"{"goal":"rewrote tests"}"#,
            "--ts",
            &t2,
            "--tick",
            "2",
        ],
    );
    let alert = ev.until("the G4 alert", |e| is_alert(e, "w1", "G4")).await;
    let EventKind::DriftAlert { text, .. } = &alert.kind else {
        unreachable!()
    };
    assert!(text.contains("G4"), "{text}");
    // The pass that raised it wrote peer_consistency_alert into the lead's log, signed.
    ev.after(alert.seq, "the peer_consistency_alert line", |e| {
        matches!(&e.kind, EventKind::DriftLine { identity, kind, .. } if identity == "lead" && kind == "peer_consistency_alert")
    })
    .await;
    let date = &t1[..10];
    let log = d
        .client
        .get_text(&format!("/kb/fleet/drift/lead/{date}.jsonl"))
        .await
        .unwrap();
    let pca: Vec<Value> = log
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["type"] == "peer_consistency_alert")
        .collect();
    assert_eq!(pca.len(), 1, "{log}");
    assert_eq!(pca[0]["subject"], "w1");
    assert!(pca[0]["sig"].is_string());
    ev.after(alert.seq, "the G4 alert delivered to the lead", |e| {
        matches!(&e.kind, EventKind::Receipt { target, ticket: None, state, .. }
            if target.as_str() == "lead" && serde_json::to_value(state).unwrap() == "delivered")
    })
    .await;
    // The offline check, reading as the lead, reaches the same conclusion.
    let rs = check(&d, "lead");
    let w1 = report(&rs, "w1");
    assert_eq!(
        (w1["g4"].as_str(), w1["verdict"].as_str()),
        (Some("alert"), Some("untrusted")),
        "{w1}"
    );
    // As anyone else, there is no G4 (no own entry about w1).
    let rs = check(&d, "w9");
    assert_eq!(report(&rs, "w1")["g4"], "n/a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_log_keeps_the_cached_anchor_across_passes_and_restarts() {
    let mut d = D::with(drift_config()).await;
    let mut ev = d.events().await;
    d.spawn("w2", "worker", exec()).await;
    let w = drift_call(&d, "w2", json!({"action": "anchor", "baseline": "writer"})).await;
    let v = view_when(&d, &mut ev, "w2", |v| v["anchor"] == "writer").await;
    assert_eq!(v["verdict"], "trusted", "{v}");
    // The day's log becomes unreadable (a directory where the file was).
    let date = w["line"]["ts"].as_str().unwrap()[..10].to_string();
    let path = d.state.join(format!("kb/fleet/drift/w2/{date}.jsonl"));
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let unreadable = |v: &Value| {
        v["alerts"].as_array().is_some_and(|a| {
            a.iter()
                .any(|a| a.as_str().unwrap_or("").contains("could not be read"))
        })
    };
    let v = view_when(&d, &mut ev, "w2", unreadable).await;
    assert_eq!(v["anchor"], "writer", "the cached anchor is kept: {v}");
    // Still so a pass later: never discarded.
    let p = ev.drift_pass(ev.seen.last().map_or(0, |e| e.seq)).await;
    ev.drift_pass(p.seq).await;
    let v = peer_view(&d, "w2").await;
    assert!(unreadable(&v) && v["anchor"] == "writer", "{v}");
    // A crash of that puller restarts it alone; it reloads the cached anchor from the store.
    let mark = ev.seen.last().map_or(0, |e| e.seq);
    d.fault("drift:w2").await;
    ev.after(
        mark,
        "drift:w2 restarted",
        |e| matches!(&e.kind, EventKind::Restarted { child, .. } if child == "drift:w2"),
    )
    .await;
    let p = ev.drift_pass(ev.seen.last().map_or(0, |e| e.seq)).await;
    ev.drift_pass(p.seq).await;
    let v = peer_view(&d, "w2").await;
    assert!(
        unreadable(&v) && v["anchor"] == "writer",
        "after the puller's restart: {v}"
    );
    // The cache is durable: a daemon killed and restarted still has it.
    d.kill9();
    d.boot().await;
    let mut ev = d.events().await;
    let v = view_when(&d, &mut ev, "w2", unreadable).await;
    assert_eq!(v["anchor"], "writer", "after a restart: {v}");
    // Readable again: the real log is read, not the cache.
    std::fs::remove_dir(&path).unwrap();
    drift_call(
        &d,
        "w2",
        json!({"action": "anchor", "baseline": "technical writer"}),
    )
    .await;
    let v = view_when(&d, &mut ev, "w2", |v| v["anchor"] == "technical writer").await;
    assert!(!unreadable(&v), "{v}");
}
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kb_is_served_read_only_and_refuses_paths_outside_it() {
    let d = D::with(drift_config()).await;
    d.spawn("w1", "worker", exec()).await;
    let w = drift_call(
        &d,
        "w1",
        json!({"action": "anchor", "baseline": "researcher"}),
    )
    .await;
    let date = w["line"]["ts"].as_str().unwrap()[..10].to_string();
    let dates: Vec<String> = d.client.get("/kb/fleet/drift/w1/").await.unwrap();
    assert_eq!(dates, vec![date.clone()]);
    let text = d
        .client
        .get_text(&format!("/kb/fleet/drift/w1/{date}.jsonl"))
        .await
        .unwrap();
    let on_disk =
        std::fs::read_to_string(d.state.join(format!("kb/fleet/drift/w1/{date}.jsonl"))).unwrap();
    assert_eq!(text, on_disk);
    let header: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(
        (
            header["schema"].as_str(),
            header["identity"].as_str(),
            header["date"].as_str()
        ),
        (Some("fleet.drift/0.2"), Some("w1"), Some(date.as_str()))
    );
    // An identity without logs is a 404 that says so; a bad name or date is refused.
    match d.client.get::<Vec<String>>("/kb/fleet/drift/nobody/").await {
        Err(fleetd::client::ClientError::Api(e)) => {
            assert_eq!(e.kind, fleetd_actors::error::ErrorKind::NotFound, "{e:?}")
        }
        other => panic!("{other:?}"),
    }
    for bad in [
        "/kb/fleet/drift/..%2F..%2Fhost.key/",
        "/kb/fleet/drift/w1/..%2F..%2F..%2Fhost.key.jsonl",
        "/kb/fleet/drift/w1/2026-13-45.jsonl",
    ] {
        assert!(d.client.get_text(bad).await.is_err(), "{bad} was served");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_kb_keeps_every_cached_anchor_and_is_retried() {
    let d = D::with(drift_config()).await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", exec()).await;
    drift_call(
        &d,
        "w1",
        json!({"action": "anchor", "baseline": "researcher"}),
    )
    .await;
    view_when(&d, &mut ev, "w1", |v| v["verdict"] == "trusted").await;
    // The whole KB goes away (a file where its directory was).
    let (kb, away) = (d.state.join("kb"), d.state.join("kb.away"));
    std::fs::rename(&kb, &away).unwrap();
    std::fs::write(&kb, b"not a directory").unwrap();
    let mark = ev.seen.last().map_or(0, |e| e.seq);
    let failed = ev
        .after(mark, "a pass that could not read the KB", |e| {
            matches!(
                &e.kind,
                EventKind::DriftPass {
                    kb_error: Some(_),
                    ..
                }
            )
        })
        .await;
    let v = peer_view(&d, "w1").await;
    assert_eq!(
        (v["anchor"].as_str(), v["verdict"].as_str()),
        (Some("researcher"), Some("trusted")),
        "never discarded on a failure: {v}"
    );
    // It is retried at the next heartbeat, and reads again once the KB is back.
    std::fs::remove_file(&kb).unwrap();
    std::fs::rename(&away, &kb).unwrap();
    ev.after(
        failed.seq,
        "a pass that read the KB again",
        |e| matches!(&e.kind, EventKind::DriftPass { kb_error: None, peers, .. } if *peers >= 1),
    )
    .await;
    let v = peer_view(&d, "w1").await;
    assert_eq!(v["verdict"], "trusted", "{v}");
}
