//! MCP requests as they arrive: the bounded line meter and id scan, rmcp's message decoding,
//! a tool call's arguments decoded into every fleet tool's argument type (what each handler
//! receives), and the status-hook payloads members send.
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
            let args = v
                .get("params")
                .and_then(|p| p.get("arguments"))
                .cloned()
                .unwrap_or(v);
            use fleetd::mcp::*;
            let _ = serde_json::from_value::<SpawnArgs>(args.clone());
            let _ = serde_json::from_value::<SendArgs>(args.clone());
            let _ = serde_json::from_value::<ReplyArgs>(args.clone());
            let _ = serde_json::from_value::<AskArgs>(args.clone());
            let _ = serde_json::from_value::<AckArgs>(args.clone());
            let _ = serde_json::from_value::<StatusArgs>(args.clone());
            let _ = serde_json::from_value::<StopArgs>(args.clone());
            let _ = serde_json::from_value::<DecisionArgs>(args.clone());
            let _ = serde_json::from_value::<DriftArgs>(args);
        }
    }
});
