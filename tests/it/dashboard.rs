//! `fleetd dashboard`: the gate (a link that works once, a session cookie, loopback Host only,
//! read-only), and the page in a real browser: headless Chromium, driven over its DevTools
//! protocol, shows the members (with queue depth and receipts) and a decision's ledger entries,
//! and follows a spawn and a status change live; a screenshot is
//! kept in target/test-artifacts/. The browser part runs when FLEETD_BROWSER names a Chromium
//! (.ci/run installs Debian's and sets it); without it that part says so and is not claimed.

use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};

use crate::common::*;

/// `fleetd dashboard` on any free port: the child and its login URL.
fn dashboard(d: &D) -> (std::process::Child, String) {
    let mut child = Command::new(bin())
        .args(["dashboard"])
        .env("FLEETD_STATE_DIR", &d.state)
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    // Keep reading what else it prints, so its stdout stays open.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    let url = first
        .trim()
        .strip_prefix("fleetd dashboard: ")
        .unwrap_or_else(|| panic!("no URL in {first:?}"))
        .to_string();
    (child, url)
}

/// A raw HTTP/1.0 GET (or other method) to 127.0.0.1: the status line and the whole answer.
fn raw(port: u16, method: &str, path: &str, host: &str, cookie: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let cookie = cookie
        .map(|c| format!("Cookie: {c}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: {host}\r\n{cookie}\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let code = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, out)
}

/// The browser's list of targets (`GET /json/list`; its server keeps HTTP/1.1 connections
/// open, so the body is read by its Content-Length).
fn devtools_list(port: u16) -> String {
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut w = s.try_clone().unwrap();
    write!(
        w,
        "GET /json/list HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .unwrap();
    let mut r = std::io::BufReader::new(s);
    let mut len = 0usize;
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if l.trim().is_empty() {
            break;
        }
        if let Some(v) = l.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}

fn port_and_path(url: &str) -> (u16, String) {
    let rest = url.strip_prefix("http://127.0.0.1:").unwrap();
    let (port, path) = rest.split_once('/').unwrap();
    (port.parse().unwrap(), format!("/{path}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_link_works_once_and_only_reads() {
    let d = D::start().await;
    let (mut child, url) = dashboard(&d);
    let (port, login) = port_and_path(&url);
    let host = format!("127.0.0.1:{port}");
    // Nothing without the session.
    assert_eq!(raw(port, "GET", "/", &host, None).0, 403);
    assert_eq!(raw(port, "GET", "/api/members", &host, None).0, 403);
    // The link, once: a session cookie; a second use is refused.
    let (code, answer) = raw(port, "GET", &login, &host, None);
    assert_eq!(code, 303, "{answer}");
    let cookie = answer
        .lines()
        .find_map(|l| l.strip_prefix("set-cookie: "))
        .and_then(|c| c.split(';').next())
        .expect("a session cookie")
        .to_string();
    assert!(
        answer.contains("HttpOnly") && answer.contains("SameSite=Strict"),
        "{answer}"
    );
    assert_eq!(raw(port, "GET", &login, &host, None).0, 403);
    // With it: the page and the operator's reads.
    let (code, page) = raw(port, "GET", "/", &host, Some(&cookie));
    assert_eq!(code, 200);
    assert!(page.contains("<title>fleetd</title>"));
    let (code, members) = raw(port, "GET", "/api/members", &host, Some(&cookie));
    assert_eq!(code, 200, "{members}");
    assert!(members.contains("\"members\""), "{members}");
    // Never a write, never a terminal, never another Host (DNS rebinding).
    assert_eq!(
        raw(port, "POST", "/api/members", &host, Some(&cookie)).0,
        405
    );
    assert_eq!(
        raw(port, "GET", "/api/members/w1/attach", &host, Some(&cookie)).0,
        403
    );
    assert_eq!(
        raw(
            port,
            "GET",
            "/api/members",
            "evil.example:80",
            Some(&cookie)
        )
        .0,
        403
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// One DevTools protocol session on a page.
struct Cdp {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next: u64,
    /// Events that arrived while an answer was awaited.
    events: Vec<Value>,
}

impl Cdp {
    async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next += 1;
        let id = self.next;
        self.ws
            .send(
                json!({"id": id, "method": method, "params": params})
                    .to_string()
                    .into(),
            )
            .await
            .unwrap();
        loop {
            let v = self.next_message(&format!("an answer to {method}")).await;
            if v["id"] == id {
                return v;
            }
            if v["method"].is_string() {
                self.events.push(v);
            }
        }
    }

    /// Wait (bounded) for the protocol event `method`.
    async fn event(&mut self, method: &str) -> Value {
        if let Some(i) = self.events.iter().position(|e| e["method"] == method) {
            return self.events.remove(i);
        }
        loop {
            let v = self.next_message(method).await;
            if v["method"] == method {
                return v;
            }
        }
    }

    /// The next JSON message from the browser (bounded; `what` names what was awaited).
    async fn next_message(&mut self, what: &str) -> Value {
        loop {
            let m = tokio::time::timeout(T, self.ws.next())
                .await
                .unwrap_or_else(|_| panic!("no {what}"))
                .expect("devtools connection open")
                .unwrap();
            if let Ok(text) = m.into_text() {
                return serde_json::from_str(&text).unwrap();
            }
        }
    }

    /// Wait (bounded) until the text of element `id` contains every one of `texts`.
    async fn until_text(&mut self, id: &str, texts: &[&str]) {
        let want = serde_json::to_string(texts).unwrap();
        let el = serde_json::to_string(id).unwrap();
        self.until(&format!(
            "{want}.every((w) => (document.getElementById({el})?.innerText || \"\").includes(w))"
        ))
        .await;
    }

    /// Wait (bounded) until the JavaScript expression `cond` is true in the page, by a
    /// MutationObserver inside the page: no polling.
    async fn until(&mut self, cond: &str) {
        let expr = format!(
            "new Promise((done) => {{ const ok = () => {{ try {{ return !!({cond}); }} catch {{ return false; }} }}; \
             if (ok()) return done(true); \
             new MutationObserver(() => {{ if (ok()) done(true); }}) \
               .observe(document.body, {{subtree: true, childList: true, characterData: true}}); }})"
        );
        let v = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "awaitPromise": true, "timeout": 30000}),
            )
            .await;
        assert_eq!(v["result"]["result"]["value"], true, "{cond}: {v}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_shows_the_fleet_live_in_a_real_browser() {
    let Some(browser) = std::env::var_os("FLEETD_BROWSER") else {
        eprintln!(
            "NOT RUN: FLEETD_BROWSER does not name a Chromium (.ci/run installs one and sets it)"
        );
        return;
    };
    let d = D::start().await;
    let mut ev = d.events().await;
    d.spawn("w1", "worker", sim(&[])).await;
    ev.status("w1", "idle").await;
    let (mut dash, url) = dashboard(&d);
    let profile = tempfile::tempdir().unwrap();
    let mut chromium = Command::new(&browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--window-size=1400,1000",
            "--remote-debugging-port=0",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("about:blank")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the browser");
    // It says where its DevTools endpoint listens.
    let stderr = chromium.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(ws) = l.strip_prefix("DevTools listening on ") {
                let _ = tx.send(ws.to_string());
            }
        }
    });
    let browser_ws = rx.recv_timeout(T).expect("the browser's DevTools endpoint");
    let port: u16 = browser_ws
        .strip_prefix("ws://127.0.0.1:")
        .and_then(|r| r.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap();
    let pages: Value = serde_json::from_str(&devtools_list(port)).unwrap();
    let page_ws = pages
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["type"] == "page")
        .and_then(|p| p["webSocketDebuggerUrl"].as_str())
        .expect("a page")
        .to_string();
    let (ws, _) = tokio_tungstenite::connect_async(page_ws).await.unwrap();
    let mut cdp = Cdp {
        ws,
        next: 0,
        events: vec![],
    };
    // Open the link (it sets the session and redirects to the page) and wait for the load.
    cdp.call("Page.enable", json!({})).await;
    cdp.call("Page.navigate", json!({"url": url})).await;
    cdp.event("Page.loadEventFired").await;
    // The page, with the member as it is.
    cdp.until_text("members", &["w1", "idle"]).await;
    cdp.until_text("live", &["live"]).await;
    // Live: a spawn appears, and a stop shows as a status change, without reloading.
    d.spawn("w2", "worker", sim(&[])).await;
    cdp.until_text("members", &["w2"]).await;
    d.client
        .delete::<Value>("/members/w1")
        .await
        .expect("stop w1");
    cdp.until_text("members", &["exited"]).await;
    cdp.until_text("events", &["w1: idle -> exited", "spawned w2"])
        .await;
    // Per member: its queue depth and its messages' receipts.
    ev.status("w2", "idle").await;
    assert_eq!(
        d.ask("w2", "sum: 2 3").await["reply"]["text"],
        "sum of 2 numbers = 5"
    );
    cdp.until_text("members", &["1 accepted"]).await;
    // Its queue is empty once its turn is over.
    ev.status("w2", "idle").await;
    cdp.until(
        "[...document.querySelectorAll('#members tbody tr')].find((tr) => tr.cells[0].innerText === 'w2')?.cells[4].innerText === '0'",
    )
    .await;
    // A decision and its ledger entries: the lead opens one; the pane lists the entry.
    d.spawn(
        "lead",
        "primary",
        sim(&["--script", "exec", "--work-ms", "0"]),
    )
    .await;
    ev.status("lead", "idle").await;
    let r = d
        .calls_as(
            "lead",
            json!([{"tool": "fleet_decision", "args": {"action": "open", "subject": "which store for the queue", "slots": ["opus"], "deadline_secs": 600}}]),
        )
        .await;
    let id = r[0]["structured"]["decision_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{r:?}"))
        .to_string();
    cdp.until_text("decisions", &[&id, "which store for the queue"])
        .await;
    cdp.until_text("entries", &["#1", "open", "lead", "slots: opus"])
        .await;
    // A member's screen, read-only, on a click.
    cdp.call(
        "Runtime.evaluate",
        json!({"expression": "document.querySelector('#members tbody tr').click()"}),
    )
    .await;
    cdp.until_text("screen", &["fleetd sim agent `w2`"]).await;
    let shot = cdp
        .call("Page.captureScreenshot", json!({"format": "png"}))
        .await;
    let png = shot["result"]["data"].as_str().expect("a screenshot");
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(png)
        .unwrap();
    assert!(bytes.starts_with(b"\x89PNG"));
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("dashboard.png"), &bytes).unwrap();
    let _ = chromium.kill();
    let _ = chromium.wait();
    let _ = dash.kill();
    let _ = dash.wait();
}
