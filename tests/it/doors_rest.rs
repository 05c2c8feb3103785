//! Side doors of member isolation (issue 24), each through the real binary: what one member
//! could read or hold of another's (or the operator's) through a route other than the one the
//! Authz table guards, and what a local user could do to the TCP listener.

use fleetd_actors::events::EventKind;
use serde_json::{Value, json};

use crate::common::*;

fn exec() -> Vec<String> {
    sim(&["--script", "exec", "--work-ms", "0"])
}

/// Everything `calls` answered, as one text to search.
fn all_text(r: &[Value]) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

/// Door 3: a worker refused `GET /tickets/t-N` must not read the same message's body in the
/// lead's queue (REST member status, MCP fleet_status, the list); it sees the queue's shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door3_a_worker_does_not_read_the_bodies_queued_for_the_lead() {
    let d = D::start().await;
    let mut ev = d.events().await;
    // A lead that never takes a paste: the first message stays in flight, the second queued.
    d.spawn("lead", "primary", sim(&["--ignore-input"])).await;
    d.spawn("w1", "worker", exec()).await;
    ev.status("lead", "idle").await;
    let t1 = d.send("lead", "SECRET-INFLIGHT the plan for w2").await;
    let t2 = d.send("lead", "SECRET-QUEUED the plan for w3").await;
    // The operator reads them.
    let m = d.member("lead").await;
    assert_eq!(
        m["queue"]["in_flight"]["body"], "SECRET-INFLIGHT the plan for w2",
        "{m}"
    );
    assert_eq!(
        m["queue"]["queued"][0]["body"],
        "SECRET-QUEUED the plan for w3"
    );
    // The worker is refused the ticket itself ...
    let r = d
        .calls_as(
            "w1",
            json!([
                {"run": ["fleetd", "tickets", &t1, "--json"]},
                {"run": ["fleetd", "status", "lead", "--json"]},
                {"tool": "fleet_status", "args": {"name": "lead"}},
                {"tool": "fleet_list"},
            ]),
        )
        .await;
    assert!(
        r[0]["stderr"].as_str().unwrap_or("").contains("rule READ"),
        "{}",
        r[0]
    );
    // ... and so reads its body nowhere else.
    let text = all_text(&r);
    assert!(
        !text.contains("SECRET-"),
        "a worker read the lead's queue: {text}"
    );
    // It still sees the queue's shape: what is in flight, what waits, from whom.
    let rest: Value = serde_json::from_str(r[1]["stdout"].as_str().unwrap_or("")).unwrap();
    let mcp = &r[2]["structured"];
    for (how, v) in [("REST", &rest), ("MCP", mcp)] {
        assert_eq!(v["queue"]["in_flight"]["ticket"], t1.as_str(), "{how}: {v}");
        assert_eq!(v["queue"]["queued"][0]["ticket"], t2.as_str(), "{how}: {v}");
        assert_eq!(v["queue"]["queued"][0]["from"], "operator", "{how}: {v}");
        assert_eq!(v["queue"]["queued"][0]["body"], "", "{how}: {v}");
    }
}

/// Door 4: a stalled paste's receipt quotes the last lines of its target's screen. That text
/// obeys the Screen rule (the member itself and the operator) in the receipt, the event
/// stream, ticket views and the member's status: not even the message's sender sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door4_a_stalled_receipt_shows_the_screen_to_the_operator_only() {
    let mut c = test_config();
    c.injector.accept_timeout_ms = 400;
    let d = D::with(c).await;
    let mut ev = d.events().await;
    d.spawn("lead", "primary", exec()).await;
    d.spawn("w2", "worker", exec()).await;
    // w1 never takes a paste; its screen shows its banner.
    d.spawn("w1", "worker", sim(&["--ignore-input"])).await;
    ev.status("w1", "idle").await;
    let on_screen = "sim agent `w1`";
    let r = d
        .calls_as(
            "lead",
            json!([{"tool": "fleet_send", "args": {"to": "w1", "message": "hello w1"}}]),
        )
        .await;
    let t = r[0]["structured"]["ticket"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}", r[0]))
        .to_string();
    let stalled = ev.receipt(&t, "stalled").await;
    // The operator sees what the screen showed, in the ticket and the receipt event.
    let tk = d.ticket(&t).await;
    assert!(tk["receipt"].to_string().contains(on_screen), "{tk}");
    let EventKind::Receipt { msg, .. } = &stalled.kind else {
        unreachable!()
    };
    let msg = msg.to_string();
    let since = (stalled.seq - 1).to_string();
    let replay = d.cli(&["events", "--since", &since, "--count", "1", "--json"]);
    assert!(
        String::from_utf8_lossy(&replay.stdout).contains(on_screen),
        "{replay:?}"
    );
    // The sender (the lead) and a bystander (w2) do not, through any route.
    let looks = json!([
        {"run": ["fleetd", "events", "--since", &since, "--count", "1", "--json"]},
        {"run": ["fleetd", "status", "w1", "--json"]},
        {"tool": "fleet_status", "args": {"name": "w1"}},
    ]);
    let w2 = d.calls_as("w2", looks.clone()).await;
    let lead_extra = json!([
        {"run": ["fleetd", "tickets", &t, "--json"]},
        {"run": ["fleetd", "tickets", "--json"]},
        {"tool": "fleet_poll"},
    ]);
    let mut lead_looks = looks.as_array().cloned().unwrap_or_default();
    lead_looks.extend(lead_extra.as_array().cloned().unwrap_or_default());
    let lead = d.calls_as("lead", Value::Array(lead_looks)).await;
    for (who, r) in [("w2", &w2), ("lead", &lead)] {
        let text = all_text(r);
        // Each look answered (the event itself, the status, the ticket) ...
        assert!(
            r[0]["stdout"].as_str().unwrap_or("").contains("stalled"),
            "{who}: {}",
            r[0]
        );
        assert!(text.contains(&msg), "{who}: {text}");
        // ... without the screen's text.
        assert!(!text.contains(on_screen), "{who} saw w1's screen: {text}");
    }
    assert!(
        lead[3]["stdout"].as_str().unwrap_or("").contains("stalled"),
        "{}",
        lead[3]
    );
}

/// The child's output if it exits within the test timeout; `None` (and killed) otherwise.
fn exited_output(child: std::process::Child) -> Option<std::process::Output> {
    let pid = child.id() as i32;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(T) {
        Ok(o) => o.ok(),
        Err(_) => {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            None
        }
    }
}

/// Door 7: the API token file is a secret like the host key: one that group or others may
/// read or write stops the start, naming the file, its mode and the fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door7_a_token_file_others_can_read_stops_the_start() {
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let token = root.path().join("api.token");
    std::fs::write(&token, "s3cret-token\n").unwrap();
    let mut c = test_config();
    c.api.tcp = Some("127.0.0.1:0".into());
    c.api.token_file = Some(token.display().to_string());
    let config = root.path().join("fleetd.toml");
    std::fs::write(&config, toml::to_string(&c).unwrap()).unwrap();
    for mode in [0o644, 0o640, 0o602] {
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(mode)).unwrap();
        let child = std::process::Command::new(bin())
            .args(["serve", "--state-dir"])
            .arg(root.path().join("s"))
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = exited_output(child)
            .unwrap_or_else(|| panic!("the daemon started with a {mode:o} token file"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(&token.display().to_string()), "{err}");
        assert!(err.contains(&format!("mode {mode:o}")), "{err}");
        assert!(err.contains("chmod 600"), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    // The same file made private: the daemon starts and takes the token.
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let d = D::with(c).await;
    let v: Value = d.client.get("/status").await.unwrap();
    assert!(v.is_object());
}

/// Door 9: an identity directory that is a symlink (here to a directory outside the KB) is
/// refused on every KB route: its dates, its logs, and appends to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door9_a_symlinked_identity_dir_is_refused_on_every_kb_route() {
    let d = D::start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("2026-11-30.jsonl"), "secret-contents\n").unwrap();
    let drift = d.state.join("kb/fleet/drift");
    std::fs::create_dir_all(&drift).unwrap();
    std::os::unix::fs::symlink(outside.path(), drift.join("w1")).unwrap();
    for path in ["/kb/fleet/drift/w1/", "/kb/fleet/drift/w1"] {
        let e = d.client.get_text(path).await.expect_err(path).to_string();
        assert!(e.contains("symlink"), "{path}: {e}");
        assert!(!e.contains("2026-11-30"), "{path}: {e}");
    }
    let e = d
        .client
        .get_text("/kb/fleet/drift/w1/2026-11-30.jsonl")
        .await
        .expect_err("log")
        .to_string();
    assert!(
        e.contains("symlink") && !e.contains("secret-contents"),
        "{e}"
    );
    // A member named w1 cannot write through it either.
    d.spawn("w1", "worker", exec()).await;
    let r = d
        .calls_as(
            "w1",
            json!([{"tool": "fleet_drift", "args": {"action": "anchor", "baseline": "w1 works"}}]),
        )
        .await;
    assert_eq!(r[0]["is_error"], true, "{}", r[0]);
    assert!(r[0].to_string().contains("symlink"), "{}", r[0]);
    let names: Vec<String> = std::fs::read_dir(outside.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["2026-11-30.jsonl".to_string()]);
}

/// A TCP connection to the daemon's listener from `source` (a loopback address).
async fn tcp_from(source: &str, port: u16) -> tokio::net::TcpStream {
    let s = tokio::net::TcpSocket::new_v4().unwrap();
    s.bind(format!("{source}:0").parse().unwrap()).unwrap();
    s.connect(([127, 0, 0, 1], port).into()).await.unwrap()
}

/// Everything the daemon sends on `s` until it closes it (a reset counts as closed), bounded
/// by the test timeout: the close is awaited, never slept for.
async fn until_closed(s: &mut tokio::net::TcpStream, what: &str) -> String {
    use tokio::io::AsyncReadExt;
    let mut out = vec![];
    match tokio::time::timeout(T, s.read_to_end(&mut out)).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Ok(Err(e)) => panic!("{what}: {e}"),
        Err(_) => panic!("{what}: the daemon did not close it within {T:?}"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Door 8: connections to the TCP listener are bounded per source address and in all (the
/// excess is refused at once, naming the bound), one that does not authenticate in time or
/// sits idle is closed, and `api.sock` answers while TCP is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn door8_tcp_connections_are_bounded_and_time_out_while_api_sock_serves() {
    use std::os::unix::fs::PermissionsExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut c = test_config();
    c.api.tcp = Some(format!("127.0.0.1:{port}"));
    c.api.token_file = Some(token_file.display().to_string());
    c.api.tcp_max_per_source = 4;
    c.api.tcp_max_connections = 6;
    c.api.tcp_auth_timeout_secs = 4;
    c.api.tcp_idle_secs = 4;
    let d = D::with(c).await;
    // One address takes its four; its fifth and sixth are refused at once.
    let mut held = vec![];
    for _ in 0..4 {
        held.push(tcp_from("127.0.0.1", port).await);
    }
    for i in 0..2 {
        let mut s = tcp_from("127.0.0.1", port).await;
        let got = until_closed(&mut s, &format!("excess connection {i}")).await;
        assert!(got.starts_with("HTTP/1.1 503"), "{got}");
        assert!(got.contains("api.tcp_max_per_source = 4"), "{got}");
    }
    // Another address takes the last two places; then the listener is full for everyone.
    for _ in 0..2 {
        held.push(tcp_from("127.0.0.2", port).await);
    }
    let mut s = tcp_from("127.0.0.3", port).await;
    let got = until_closed(&mut s, "a connection past the total").await;
    assert!(got.contains("api.tcp_max_connections = 6"), "{got}");
    // The operator's socket still answers, at once.
    let status: Value = tokio::time::timeout(T, d.client.get("/status"))
        .await
        .expect("api.sock answered")
        .unwrap();
    assert!(status.is_object());
    // None of the held connections authenticated: each is closed by the daemon.
    let opened = std::time::Instant::now();
    for (i, s) in held.iter_mut().enumerate() {
        let got = until_closed(s, &format!("held connection {i}")).await;
        assert!(got.is_empty(), "{got}");
    }
    assert!(
        opened.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        opened.elapsed()
    );
    // Their places are free again. A request without the token is answered (403) and its
    // connection, still not authenticated, closed; one with the token is served on a kept-alive
    // connection that is closed once it sits idle.
    let mut s = tcp_from("127.0.0.1", port).await;
    s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let got = until_closed(&mut s, "an unauthenticated connection").await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    let mut s = tcp_from("127.0.0.1", port).await;
    s.write_all(b"GET /status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer s3cret\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    tokio::time::timeout(T, s.read_exact(&mut first))
        .await
        .expect("an answer")
        .unwrap();
    assert_eq!(&first, b"HTTP/1.1 200");
    let idle_from = std::time::Instant::now();
    until_closed(&mut s, "an idle authenticated connection").await;
    assert!(
        idle_from.elapsed() >= std::time::Duration::from_secs(3),
        "closed before its idle timeout: {:?}",
        idle_from.elapsed()
    );
}
