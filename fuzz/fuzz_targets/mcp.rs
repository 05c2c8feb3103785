//! MCP requests as they arrive: the bounded line meter and id scan, rmcp's message decoding,
//! and the status-hook payloads members send.
#![no_main]
use fleetd::bounded::{LineMeter, find_id};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut m = LineMeter::new(256);
    for chunk in data.chunks(97) {
        let _ = m.feed(chunk);
    }
    let _ = find_id(data);
    for line in data.split(|b| *b == b'\n').take(32) {
        let _ = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(line);
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(line) {
            let _ = fleetd_actors::hooks::from_payload(&v);
        }
    }
});
