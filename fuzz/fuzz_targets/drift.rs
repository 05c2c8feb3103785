//! Drift: JSONL lines and whole logs through the parser, the header check and the gates.
#![no_main]
use std::collections::BTreeMap;

use fleetd_actors::drift::gates::{self, LogFile, Logs, Params, Snapshot};
use fleetd_actors::drift::line;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    for l in text.lines().take(64) {
        let _ = line::parse(l, std::slice::from_ref(&key));
        let _ = line::check_header(l, "w1", "2026-12-01");
    }
    let mut identities = BTreeMap::new();
    identities.insert(
        "w1".to_string(),
        Logs::Present(vec![LogFile {
            date: "2026-12-01".into(),
            path: "fleet/drift/w1/2026-12-01.jsonl".into(),
            text: text.into_owned(),
        }]),
    );
    let snap = Snapshot { identities };
    let ix = gates::index(&snap, std::slice::from_ref(&key));
    let params = Params::from_config(&Default::default(), 1_796_212_800_000);
    let _ = gates::evaluate_all(&ix, Some("w1"), &params);
});
