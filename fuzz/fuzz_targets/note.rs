//! Signed notes, checkpoints and cosignatures a peer submits for witnessing.
#![no_main]
use fleetd_actors::ledger::witness;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The note, then the entry lines that should extend the last witnessed checkpoint.
    let (note, rest) = text.split_once("\n\n\n").unwrap_or((&text, ""));
    let lines: Vec<String> = rest.lines().take(64).map(str::to_string).collect();
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let _ = witness::judge(None, "peer", &key, note, 0, &lines);
    let prev = witness::Witnessed {
        peer: "peer".into(),
        origin: "fleetd/peer/ledger".into(),
        size: 1,
        head: "00".repeat(32),
        note: note.to_string(),
        equivocation: None,
    };
    let _ = witness::judge(Some(&prev), "peer", &key, note, 1, &lines);
    let _ = witness::check_against(rest, &prev);
    let _ = fleetd_actors::keys::parse_public(note);
});
