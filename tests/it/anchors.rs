//! Drift anchors across hosts, on three real daemons on 127.0.0.x: each pulls its peers'
//! anchors over the links (verified against the home host's key) and runs the gates on them
//! (G2 by its own clock, G4 against its lead's own statements), and a host that signs two
//! anchors for one identity on one UTC day with different roles is caught: the leads on both
//! other hosts are alerted, with both signed lines as proof.

use fleetd_actors::drift::line::{NewLine, sign};
use fleetd_actors::events::EventKind;
use serde_json::Value;

use crate::common::*;
use crate::link::{config, host, link_event};

fn anchor_line(key_file: &std::path::Path, ts_ms: u64, tick: u64, role: &str) -> String {
    let key = fleetd_actors::keys::load(key_file).unwrap();
    sign(&NewLine::anchor(ts_ms, tick, role), &key)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn chrono_ms(rfc3339: &str) -> u64 {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .unwrap()
        .timestamp_millis() as u64
}

/// `d`'s drift report about `peer` once `pred` holds, checked after each drift pass.
async fn drift_report(d: &D, e: &mut Events, peer: &str, pred: impl Fn(&Value) -> bool) -> Value {
    loop {
        let v: Value = d.client.get("/drift").await.unwrap();
        if let Some(r) = v["peers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["peer"] == peer && pred(r))
        {
            return r.clone();
        }
        let seq = e.seen.last().map_or(0, |x| x.seq);
        e.drift_pass(seq).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_equivocating_host_is_caught_and_both_other_leads_are_alerted_with_the_proof() {
    let (a, b, c) = (host("alpha", 12), host("beta", 13), host("gamma", 14));
    let cfg = |me, peers: &[&crate::link::Host]| {
        let mut x = config(me, peers);
        x.drift.heartbeat_secs = 1;
        x
    };
    let mut da = D::with(cfg(&a, &[&b, &c])).await;
    let db = D::with(cfg(&b, &[&a, &c])).await;
    let dc = D::with(cfg(&c, &[&a, &b])).await;
    da.spawn("lead", "primary", crate::mail::exec()).await;
    db.spawn("lead", "primary", sim(&["--script", "sink"]))
        .await;
    let (mut ea, mut eb) = (da.events().await, db.events().await);
    for (e, peer) in [(&mut ea, "gamma"), (&mut eb, "gamma")] {
        e.until("linked to gamma", |x| link_event(x, peer, true))
            .await;
    }
    // gamma's identity `x` anchors honestly: both peers pull it, verified, and show it.
    let t = now_ms();
    let kb = dc.state.join("kb");
    let day = fleetd_actors::drift::kb::date_of(t);
    let first = anchor_line(&c.key_file, t, 1, "code reviewer");
    fleetd_actors::drift::kb::append(&kb, "x", &day, &first).unwrap();
    // A line signed by another key in gamma's KB is not served as gamma's anchor.
    let forged = anchor_line(&a.key_file, t + 1, 2, "release manager");
    fleetd_actors::drift::kb::append(&kb, "y", &day, &forged).unwrap();
    let shows_x = |d: &D| {
        let d = d.client.clone();
        async move {
            let v: Value = d.get("/peers").await.unwrap();
            v["remote_anchors"].clone()
        }
    };
    // The first pull that sees gamma's anchor (the forged line is not served, or is dropped).
    ea.until(
        "alpha pulls gamma's anchor",
        |e| matches!(&e.kind, EventKind::AnchorsPulled { peer, anchors: 1 } if peer == "gamma"),
    )
    .await;
    let ra = shows_x(&da).await;
    let xs: Vec<&Value> = ra
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["home"] == "gamma")
        .collect();
    assert_eq!(xs.len(), 1, "{ra}");
    assert_eq!(xs[0]["identity"], "x");
    assert_eq!(xs[0]["role"], "code reviewer");
    assert!(
        !ea.seen
            .iter()
            .any(|e| matches!(&e.kind, EventKind::DriftAlert { peer, .. } if peer == "x@gamma"))
    );
    // alpha's drift pass runs the gates on gamma's identity too: G1 (verified against gamma's
    // key), G2 by alpha's clock, trusted.
    let r = drift_report(&da, &mut ea, "x@gamma", |r| r["verdict"] == "trusted").await;
    assert_eq!(
        (r["g1"].clone(), r["g2"].clone()),
        ("pass".into(), "fresh".into()),
        "{r}"
    );
    assert_eq!(r["anchor"], "code reviewer");
    // G4 across hosts: alpha's lead records x@gamma drifting, and gamma anchors x clean (same
    // role) in that same minute: alpha's lead is alerted, and the alert goes into its own log.
    let mut lead = da
        .calls_as(
            "lead",
            serde_json::json!([{"tool": "fleet_drift", "args": {"action": "observe", "subject": "x@gamma", "baseline": "code reviewer", "delta": {"looping": true}}}]),
        )
        .await;
    let obs = lead.remove(0);
    assert_eq!(obs["is_error"], false, "{obs}");
    let obs_ts = obs["structured"]["line"]["ts"]
        .as_str()
        .unwrap()
        .to_string();
    let obs_ms = chrono_ms(&obs_ts);
    let clean = anchor_line(&c.key_file, obs_ms, 2, "code reviewer");
    fleetd_actors::drift::kb::append(&kb, "x", &fleetd_actors::drift::kb::date_of(obs_ms), &clean)
        .unwrap();
    let text = ea
        .alert("alpha's G4 alert about x@gamma", "x@gamma", "G4", |_| true)
        .await;
    assert!(text.contains("gamma's anchors of x"), "{text}");
    let r = drift_report(&da, &mut ea, "x@gamma", |r| r["g4"] == "alert").await;
    assert_eq!(r["verdict"], "untrusted", "{r}");
    // The line is written right after the alert; each drift pass ends after its pullers.
    let own_log = da.state.join("kb/fleet/drift/lead").join(format!(
        "{}.jsonl",
        fleetd_actors::drift::kb::date_of(obs_ms)
    ));
    loop {
        let own = std::fs::read_to_string(&own_log).unwrap();
        if own.contains("peer_consistency_alert") {
            assert!(own.contains("\"subject\":\"x@gamma\""), "{own}");
            break;
        }
        let seq = ea.seen.last().map_or(0, |x| x.seq);
        ea.drift_pass(seq).await;
    }
    // Now gamma signs a second anchor for `x`, the same UTC day, another role.
    let second = anchor_line(&c.key_file, obs_ms + 2, 3, "release manager");
    fleetd_actors::drift::kb::append(&kb, "x", &day, &second).unwrap();
    for (d, e) in [(&da, &mut ea), (&db, &mut eb)] {
        let text = e
            .alert("the equivocation alert", "x@gamma", "G3", |t| {
                t.starts_with("equivocation")
            })
            .await;
        assert!(text.contains("equivocation"), "{text}");
        assert!(text.contains(&second), "{text}");
        assert!(text.contains(&first) || text.contains(&clean), "{text}");
        // The lead was told.
        e.until("the lead gets the alert", |x| {
            matches!(&x.kind, EventKind::Receipt { target, from, ticket: None, .. }
                if target.as_str() == "lead" && from.to_string() == "fleetd")
        })
        .await;
        // The proof is kept on disk.
        let proofs: Vec<_> = std::fs::read_dir(d.state.join("drift-proofs"))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(proofs.len(), 1);
        let p: Value = serde_json::from_slice(&std::fs::read(proofs[0].path()).unwrap()).unwrap();
        assert_eq!(p["lines"][0], first);
        assert_eq!(p["lines"][1], second);
        let alerts: Value = d.client.get("/alerts").await.unwrap();
        assert!(alerts.to_string().contains("x@gamma"), "{alerts}");
    }
    // Restarted, alpha pulls gamma's lines anew but does not raise again what its kept proof
    // shows it raised already.
    drop(ea);
    da.kill9();
    da.boot().await;
    let mut ea = da.events().await;
    let pulled = |x: &fleetd_actors::events::Event| matches!(&x.kind, EventKind::AnchorsPulled { peer, anchors } if peer == "gamma" && *anchors >= 3);
    let p1 = ea
        .until("alpha's first pull after the restart", pulled)
        .await;
    ea.after(p1.seq, "and the next one", pulled).await;
    assert!(
        !ea.seen.iter().any(
            |x| matches!(&x.kind, EventKind::DriftAlert { peer, text, .. }
            if peer == "x@gamma" && text.starts_with("equivocation"))
        ),
        "raised again after a restart"
    );
}
