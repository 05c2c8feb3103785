//! The config parser and its checks (a config file is outside bytes too).
#![no_main]
use fleetd_actors::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = Config::parse(text) {
        let _ = c.check(&["fleet_whoami", "fleet_send"]);
    }
});
