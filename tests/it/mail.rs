//! Lead-to-lead mail between real daemons on 127.0.0.x: a send to `lead@HOST` and its answer
//! by ticket, receipts travelling back, the primary-only rule on both sides, and exactly-once,
//! in-order delivery across a receiver killed mid-stream and a sender killed with a full outbox.

use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use crate::common::*;
use crate::link::{config, host, link_event};

pub fn exec() -> Vec<String> {
    sim(&["--script", "exec", "--work-ms", "0"])
}

/// `lead` on `d` sends these messages to `lead@to`; returns the tickets (in order).
pub async fn send_all(d: &D, to: &str, bodies: &[String]) -> Vec<String> {
    let mut r = vec![];
    // Ten at a time: the exec agent's reply carries every result and must fit one message.
    for chunk in bodies.chunks(10) {
        let calls: Vec<Value> = chunk
            .iter()
            .map(|b| json!({"tool": "fleet_send", "args": {"to": format!("lead@{to}"), "message": b}}))
            .collect();
        r.extend(d.calls_as("lead", Value::Array(calls)).await);
    }
    assert_eq!(r.len(), bodies.len());
    r.iter()
        .map(|x| {
            assert_eq!(x["is_error"], false, "{x}");
            assert_eq!(x["structured"]["ticket"]["remote"]["host"], to, "{x}");
            x["structured"]["ticket"]["id"]
                .as_str()
                .unwrap_or_else(|| panic!("{x}"))
                .to_string()
        })
        .collect()
}

/// The subjects of the tickets `d` holds from `lead@from`, in ticket order.
pub async fn received(d: &D, from: &str) -> Vec<String> {
    let v: Value = d.client.get("/tickets").await.unwrap();
    let mut ts: Vec<(u64, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["from"] == format!("lead@{from}"))
        .map(|t| {
            let id = t["id"].as_str().unwrap()[2..].parse::<u64>().unwrap();
            (id, t["subject"].as_str().unwrap().to_string())
        })
        .collect();
    ts.sort();
    ts.into_iter().map(|(_, s)| s).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lead_sends_to_another_hosts_lead_and_gets_its_answer_by_ticket() {
    let (a, b) = (host("alpha", 8), host("beta", 9));
    let da = D::with(config(&a, &[&b])).await;
    let mut ea = da.events().await;
    let db = D::with(config(&b, &[&a])).await;
    let mut eb = db.events().await;
    da.spawn("lead", "primary", exec()).await;
    db.spawn("lead", "primary", sim(&["--work-ms", "20"])).await;
    da.spawn("w1", "worker", exec()).await;
    ea.until("alpha sees beta up", |e| link_event(e, "beta", true))
        .await;
    let r = da
        .calls_as(
            "lead",
            json!([
                {"tool": "fleet_send", "args": {"to": "lead@beta", "message": "sum: 2 3 4", "wait": true, "wait_secs": 20}},
                {"tool": "fleet_send", "args": {"to": "lead@nowhere", "message": "x"}},
                {"tool": "fleet_send", "args": {"to": "w9@beta", "message": "x"}},
            ]),
        )
        .await;
    let t = &r[0]["structured"];
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
    assert_eq!(t["resolved"], true, "{t}");
    assert_eq!(t["ticket"]["state"], "replied", "{t}");
    assert_eq!(t["ticket"]["reply"]["text"], "sum of 3 numbers = 9", "{t}");
    assert_eq!(t["ticket"]["remote"]["host"], "beta");
    // On the sender the owner is named with its host, as the receiver names the sender.
    assert_eq!(t["ticket"]["to"], "lead@beta", "{t}");
    assert!(t["ticket"]["remote"]["transmitted_at"].is_u64(), "{t}");
    // The receipt travelled back: the remote lead took the message before it answered.
    assert_eq!(t["ticket"]["receipt"]["state"], "accepted", "{t}");
    assert!(t["ticket"]["receipt"]["delivered_at"].is_u64(), "{t}");
    // Unknown hosts and other members are refused, saying what would be accepted.
    for i in [1, 2] {
        assert_eq!(r[i]["is_error"], true, "{}", r[i]);
        assert!(
            r[i]["structured"]["error"]["accepted"]
                .as_str()
                .unwrap()
                .contains("lead@beta"),
            "{}",
            r[i]
        );
    }
    // On beta it was a ticket from lead@alpha, handed to its lead and answered there.
    let handed = eb
        .until(
            "beta hands the mail to its lead",
            |e| matches!(&e.kind, EventKind::MailHanded { peer, .. } if peer == "alpha"),
        )
        .await;
    let EventKind::MailHanded { ticket, .. } = &handed.kind else {
        unreachable!()
    };
    let bt = db.ticket(&ticket.to_string()).await;
    assert_eq!(bt["from"], "lead@alpha", "{bt}");
    assert_eq!(bt["to"], "lead");
    assert_eq!(bt["origin"]["host"], "alpha");
    assert_eq!(bt["origin"]["ticket"], t["ticket"]["id"]);
    assert_eq!(bt["state"], "replied");
    assert_eq!(received(&db, "alpha").await, vec!["sum: 2 3 4"]);
    // Only the primary sends lead-to-lead mail: not a worker, not the operator.
    let w = da
        .calls_as(
            "w1",
            json!([{"tool": "fleet_send", "args": {"to": "lead@beta", "message": "x"}}]),
        )
        .await;
    assert_eq!(w[0]["is_error"], true, "{}", w[0]);
    assert_eq!(
        w[0]["structured"]["error"]["rule"], "SEND_REMOTE",
        "{}",
        w[0]
    );
    let op = da
        .client
        .post::<Value>("/members/lead@beta/messages", &json!({"message": "x"}))
        .await;
    let e = op.expect_err("the operator may not send lead-to-lead mail");
    assert!(
        e.to_string().contains("SEND_REMOTE") || e.to_string().contains("primary"),
        "{e}"
    );
    // And the sender cannot answer its own remote ticket.
    let own = da
        .calls_as(
            "lead",
            json!([{"tool": "fleet_reply", "args": {"ticket": t["ticket"]["id"], "message": "x"}}]),
        )
        .await;
    assert_eq!(own[0]["is_error"], true, "{}", own[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_is_delivered_once_in_order_across_a_killed_receiver_and_a_killed_sender() {
    let (a, b) = (host("alpha", 10), host("beta", 11));
    let mut da = D::with(config(&a, &[&b])).await;
    let mut ea = da.events().await;
    let mut db = D::with(config(&b, &[&a])).await;
    da.spawn("lead", "primary", exec()).await;
    db.spawn("lead", "primary", sim(&["--script", "sink"]))
        .await;
    ea.until("alpha sees beta up", |e| link_event(e, "beta", true))
        .await;
    let bodies: Vec<String> = (1..=100).map(|i| format!("message {i:03}")).collect();
    // 1. Beta is killed while the first 40 are on their way; 30 more are sent while it is down.
    let first = send_all(&da, "beta", &bodies[..40]).await;
    db.kill9();
    let second = send_all(&da, "beta", &bodies[40..70]).await;
    // 2. Alpha is killed with (at least) those 30 in its outbox, and comes back.
    let p: Value = da.client.get("/peers").await.unwrap();
    assert!(p["mail"]["outbox"]["beta"].as_u64().unwrap() >= 30, "{p}");
    da.kill9();
    da.boot().await;
    let third = send_all(&da, "beta", &bodies[70..]).await;
    let last = third.last().unwrap().clone();
    let tickets: Vec<String> = [first, second, third].concat();
    assert_eq!(tickets.len(), 100);
    // 3. Beta comes back: everything arrives, once, in order.
    db.boot().await;
    let mut eb = db.events().await;
    eb.until("beta hands alpha's last message to its lead", |e| {
        matches!(&e.kind, EventKind::MailHanded { peer, their_ticket, .. }
            if peer == "alpha" && their_ticket.to_string() == last)
    })
    .await;
    assert_eq!(received(&db, "alpha").await, bodies);
    // The sender's receipts say transmitted (at least) for every one of them. The last one's
    // ticket changes only when beta's acknowledgement of it comes back (earlier ones before it).
    let mut ea = da.events().await;
    ea.until(
        "alpha's last ticket transmitted",
        |e| matches!(&e.kind, EventKind::Ticket { ticket, .. } if ticket.to_string() == last),
    )
    .await;
    for t in &tickets {
        let v = da.ticket(t).await;
        assert_ne!(v["receipt"]["state"], "queued", "{v}");
    }
    let p: Value = da.client.get("/peers").await.unwrap();
    assert_eq!(p["mail"]["outbox"]["beta"], 0, "{p}");
    // Marked transmitted and dropped from the outbox in one commit: a kill right after the
    // ticket says so leaves nothing to send again.
    da.kill9();
    da.boot().await;
    let p: Value = da.client.get("/peers").await.unwrap();
    assert_eq!(p["mail"]["outbox"]["beta"], 0, "{p}");
}

/// Two daemons in this process: `a`'s primary sends 100 messages to `lead@b`, 32 calls at a
/// time, so the post office commits them in groups. Each call returns only once its message is
/// stored; every one is transmitted; b holds each exactly once (no primary there to take them),
/// and a's outbox drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_are_stored_in_groups_and_each_arrives_once() {
    use fleetd::daemon::Daemon;
    use fleetd_actors::types::{Caller, MemberIdentity, MemberName, Role};
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (host("a", 17), host("b", 18));
    let mut daemons = vec![];
    for (name, me, other) in [("a", &a, &b), ("b", &b, &a)] {
        let sd = dir.path().join(name);
        std::fs::create_dir_all(&sd).unwrap();
        let cp = sd.join("fleetd.toml");
        std::fs::write(&cp, toml::to_string(&config(me, &[other])).unwrap()).unwrap();
        daemons.push(Daemon::start(&sd, Some(cp), bin()).await.unwrap());
    }
    let (fa, fb) = (daemons[0].fleet.clone(), daemons[1].fleet.clone());
    let (_, mut events) = fa.ctx.events.subscribe(0);
    let lead = Caller::Member(MemberIdentity {
        name: MemberName::new("lead").unwrap(),
        role: Role::Primary,
        slot: None,
    });
    let bodies: Vec<String> = (0..100).map(|i| format!("group {i:03}")).collect();
    let tickets: Vec<_> = futures::stream::iter(bodies.clone())
        .map(|body| {
            let (f, c) = (fa.clone(), lead.clone());
            async move { f.send(&c, "lead@b", body, false, None).await }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    let mut waiting = std::collections::HashSet::new();
    for t in tickets {
        let t = t.expect("every send is stored and answered");
        assert_eq!(
            t.ticket.ticket.remote.as_ref().map(|r| r.host.as_str()),
            Some("b")
        );
        waiting.insert(t.ticket.ticket.id);
    }
    assert_eq!(waiting.len(), 100);
    // Every one is transmitted (its ticket changes when b's acknowledgement comes back).
    tokio::time::timeout(T, async {
        while !waiting.is_empty() {
            match events.recv().await {
                Ok(e) => {
                    if let EventKind::Ticket { ticket, .. } = &e.kind
                        && waiting.contains(ticket)
                    {
                        let v = fa
                            .ticket(&Caller::Operator, &ticket.to_string())
                            .await
                            .unwrap();
                        if v.ticket.remote.is_some_and(|r| r.transmitted_at.is_some()) {
                            waiting.remove(ticket);
                        }
                    }
                }
                Err(e) => panic!("events: {e}"),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not transmitted: {} left", waiting.len()));
    // b holds each exactly once (their order per sender is the core's property test).
    let (held, total) = {
        let v = fb.ctx.views.mail.get();
        (v.held.clone(), v.held_total)
    };
    assert_eq!(total, 100);
    let mut got: Vec<String> = held
        .iter()
        .map(|h| h.rsplit_once(": ").unwrap().1.to_string())
        .collect();
    assert_eq!(got.len(), 100, "{held:?}");
    got.sort();
    assert_eq!(got, bodies);
    assert_eq!(fa.ctx.views.mail.get().outbox["b"], 0);
    for d in daemons {
        d.shutdown().await;
    }
}
