//! Ledger witnessing between two real daemons: beta witnesses alpha's checkpoints (re-hashing
//! the entries between them, persisting before it cosigns); `ledger verify --witness` then
//! catches a history that alpha's own operator rewrote and re-signed with alpha's key, and when
//! alpha comes back with it, beta sees two signed checkpoints of one size with different heads:
//! an equivocation, alerted, kept as proof, and alpha refused from then on. Beta's cosignature
//! is a C2SP `cosignature/v1`, checked by an independent (Go) verifier.

use fleetd_actors::events::EventKind;
use fleetd_actors::ledger::state::{LedgerCore, entries};
use serde_json::{Value, json};

use crate::common::*;
use crate::link::{config, host, link_event};

async fn open_decision(d: &D, subject: &str) {
    let r = d
        .calls_as(
            "lead",
            json!([{"tool": "fleet_decision", "args": {"action": "open", "subject": subject, "slots": ["opus"], "deadline_secs": 600}}]),
        )
        .await;
    assert_eq!(r[0]["is_error"], false, "{}", r[0]);
}

fn verify(ledger: &std::path::Path, extra: &[&str]) -> (i32, String) {
    let o = std::process::Command::new(bin())
        .args(["ledger", "verify"])
        .arg(ledger)
        .args(extra)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_catches_a_rewritten_ledger_and_an_equivocating_host() {
    let (a, b) = (host("alpha", 15), host("beta", 16));
    let cfg = |me, peers: &[&crate::link::Host]| {
        let mut x = config(me, peers);
        x.drift.heartbeat_secs = 1;
        x.ledger.checkpoint_every = 2;
        x
    };
    let mut da = D::with(cfg(&a, &[&b])).await;
    let mut ea = da.events().await;
    let db = D::with(cfg(&b, &[&a])).await;
    let mut eb = db.events().await;
    eb.until("beta sees alpha up", |e| link_event(e, "alpha", true))
        .await;
    da.spawn(
        "lead",
        "primary",
        sim(&["--script", "exec", "--work-ms", "0"]),
    )
    .await;
    open_decision(&da, "which queue").await;
    open_decision(&da, "which store").await;
    // Beta witnesses alpha's ledger at size 2 (its checkpoint), persisted before it cosigns.
    eb.until(
        "beta witnesses alpha at size 2",
        |e| matches!(&e.kind, EventKind::Witnessed { peer, size: 2, .. } if peer == "alpha"),
    )
    .await;
    let ledger = da.state.join("ledger.jsonl");
    let pubkey = a.public.clone();
    let beta_state = db.state.display().to_string();
    let (code, out) = verify(&ledger, &["--key", &pubkey, "--witness", &beta_state]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("matches what `alpha`'s witness cosigned"),
        "{out}"
    );
    // Alpha's cosignature from beta is kept beside its ledger.
    ea.until(
        "alpha keeps beta's cosignature",
        |e| matches!(&e.kind, EventKind::Cosigned { witness, size: 2 } if witness == "beta"),
    )
    .await;
    let cosig = std::fs::read_to_string(da.state.join("witness-cosigs/beta.note")).unwrap();
    assert!(cosig.contains("— fleetd/beta/witness "), "{cosig}");
    // It is a C2SP `cosignature/v1` (timestamped, algorithm 0x04) by beta's witness key, as an
    // independent verifier reads it: beta's published cosigner key accepts it, and it carries
    // alpha's checkpoint as signed by alpha.
    let st: Value = db.client.get("/status").await.unwrap();
    let wkey = st["witness_vkey"].as_str().unwrap().to_string();
    assert!(wkey.starts_with("fleetd/beta/witness+"), "{wkey}");
    let text = crate::note::open(&wkey, &cosig).unwrap_or_else(|e| panic!("{e}: {cosig}"));
    assert!(text.starts_with("fleetd/alpha/ledger\n2\n"), "{text}");
    let alpha_vkey = da.client.get::<Value>("/status").await.unwrap()["ledger_vkey"]
        .as_str()
        .unwrap()
        .to_string();
    crate::note::open(&alpha_vkey, &cosig).unwrap_or_else(|e| panic!("{e}: {cosig}"));
    // A cosignature that claims another time does not verify.
    let line = cosig.lines().last().unwrap();
    let b64 = line.rsplit_once(' ').unwrap().1;
    use base64::Engine;
    let mut blob = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .unwrap();
    blob[11] ^= 1;
    let retimed = cosig.replace(
        b64,
        &base64::engine::general_purpose::STANDARD.encode(&blob),
    );
    assert!(crate::note::refused(&wkey, &retimed));
    // Alpha's operator stops it and rewrites its history, re-signing with alpha's own key.
    da.signal(libc::SIGTERM);
    assert!(da.wait_exit(std::time::Duration::from_secs(20)).success());
    let text = std::fs::read_to_string(&ledger).unwrap();
    let key = fleetd_actors::keys::load(&a.key_file).unwrap();
    let (mut core, header) = LedgerCore::create("fleetd/alpha/ledger", 2);
    let mut out_lines = vec![header];
    for mut e in entries(&text) {
        if let fleetd_actors::decision::state::DecisionEvent::Open { subject, .. } = &mut e.event {
            *subject = subject.replace("queue", "bus");
        }
        let (_, l) = core.append(e.actor.clone(), e.event.clone(), 1_000);
        out_lines.push(l);
        out_lines.extend(core.checkpoints(&key));
    }
    std::fs::write(&ledger, out_lines.join("\n") + "\n").unwrap();
    // On its own the rewritten ledger verifies (its chain and signatures are valid) ...
    let (code, out) = verify(&ledger, &["--key", &pubkey]);
    assert_eq!(code, 0, "{out}");
    // ... but not against what beta witnessed.
    let (code, out) = verify(&ledger, &["--key", &pubkey, "--witness", &beta_state]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("rewritten"), "{out}");
    // Alpha comes back with it: beta sees two signed checkpoints of size 2, different heads.
    da.boot().await;
    let text = eb
        .alert(
            "beta alerts on the equivocation",
            "alpha",
            "WITNESS",
            |_| true,
        )
        .await;
    assert!(text.contains("equivocation"), "{text}");
    let w: Value = serde_json::from_slice(
        &std::fs::read(db.state.join("witness/fleetd_alpha_ledger.json")).unwrap(),
    )
    .unwrap();
    let proof = w["equivocation"].as_array().unwrap();
    assert_eq!(proof.len(), 2);
    assert_ne!(proof[0], proof[1]);
    let alerts: Value = db.client.get("/alerts").await.unwrap();
    assert!(alerts.to_string().contains("equivocation"), "{alerts}");
}
