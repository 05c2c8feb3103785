//! The decision ledger file: verification, entries and resume from arbitrary text.
#![no_main]
use fleetd_actors::ledger::state;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
    let _ = state::verify(text, Some(&key));
    if let Ok(report) = state::verify(text, None) {
        let _ = state::resume(&report, text);
    }
    let _ = state::entries(text);
});
