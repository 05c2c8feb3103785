//! `fleetd sim-agent`: a scripted terminal agent for the demo and the tests. Seen through its
//! terminal it behaves like a real CLI agent: raw mode, bracketed paste, a prompt, a busy line
//! while it works, and MCP tool calls through `fleetd mcp` with rmcp's client.
//!
//! `--record FILE` (any script) appends every raw byte the agent reads from its terminal to FILE
//! before the script sees it: a byte-exact record of what fleetd typed into it, for tests that
//! check pastes carry nothing but the paste (`tests/it/hostile.rs`).
//!
//! Owns only the scripts. Must never talk to the daemon except as an agent would (MCP through
//! the shim, `fleetd signal` hooks).

use std::io::Write;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ProtocolVersion};
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{ClientLifecycleMode, ClientServiceExt, RoleClient, ServiceExt};
use serde_json::{Value, json};
use tokio::sync::mpsc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Script {
    /// Answer every message with fleet_reply after working for --work-ms.
    Worker,
    /// The demo's lead: spawn a worker per `task:` line, hand each its task, collect the replies.
    Lead,
    /// Treat each message body as JSON calls (`{"tool": NAME, "args": {..}}` or
    /// `{"run": [argv]}`), make them from inside this member, reply with the results.
    Exec,
    /// Echo each message and show the prompt again at once (for benchmarks).
    Sink,
    /// An architect: for a message naming `decision d-N` and `round R`, record a position (or
    /// abstain) with fleet_decision, then reply with it.
    Architect,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Era {
    /// MCP 2025-11-25: `initialize` handshake.
    Initialize,
    /// MCP 2026-07-28: `server/discover`, no handshake.
    Discover,
}

#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// What the agent does with each message (a worker sums numbers; see the module doc).
    #[arg(long, value_enum, default_value_t = Script::Worker)]
    pub script: Script,
    /// How long each task "works", in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub work_ms: u64,
    /// End each turn without fleet_reply (the ticket then gets the transcript tail).
    #[arg(long)]
    pub no_reply: bool,
    /// Report status with `fleetd signal` hooks, like an agent with lifecycle hooks.
    #[arg(long)]
    pub hooks: bool,
    /// Show a permission dialog before each task and wait for y/n.
    #[arg(long)]
    pub permission: bool,
    /// Never read the terminal (so deliveries stall).
    #[arg(long)]
    pub ignore_input: bool,
    /// Which MCP protocol era to speak to the shim.
    #[arg(long, value_enum, default_value_t = Era::Initialize)]
    pub mcp_era: Era,
    /// Architect: the position it takes.
    #[arg(long, default_value = "no strong view")]
    pub stance: String,
    /// Architect: abstain instead of taking a position.
    #[arg(long)]
    pub abstain: bool,
    /// Architect: from round 2 on, adopt the other position quoted after `other:`.
    #[arg(long)]
    pub converge: bool,
    /// Worker: anchor this identity statement with fleet_drift before each reply.
    #[arg(long)]
    pub anchor: Option<String>,
    /// Append every raw byte read from the terminal to this file (created if missing; written
    /// unbuffered as each read returns, before the script sees it).
    #[arg(long, value_name = "FILE")]
    pub record: Option<std::path::PathBuf>,
}

const PROMPT: &str = "sim> ";

fn out(s: &str) {
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(s.as_bytes());
    let _ = o.flush();
}

/// A raw-mode guard for the controlling terminal.
struct Raw {
    saved: Option<nix::sys::termios::Termios>,
}

impl Raw {
    fn enter() -> Raw {
        use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
        let stdin = std::io::stdin();
        let saved = tcgetattr(&stdin).ok();
        if let Some(s) = &saved {
            let mut raw = s.clone();
            cfmakeraw(&mut raw);
            let _ = tcsetattr(&stdin, SetArg::TCSANOW, &raw);
        }
        Raw { saved }
    }
}

impl Drop for Raw {
    fn drop(&mut self) {
        if let Some(s) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(
                std::io::stdin(),
                nix::sys::termios::SetArg::TCSANOW,
                s,
            );
        }
        out("\x1b[?2004l");
    }
}

/// Keys and pastes, turned into submitted lines.
#[derive(Default)]
struct LineEditor {
    line: String,
    pending: Vec<u8>,
    in_paste: bool,
}

enum Key {
    Submit(String),
    Interrupt,
    Char(char),
    Yes,
    No,
}

impl LineEditor {
    fn feed(&mut self, bytes: &[u8], awaiting_yes_no: bool) -> Vec<Key> {
        self.pending.extend_from_slice(bytes);
        let mut keys = vec![];
        loop {
            if self.pending.is_empty() {
                break;
            }
            if self.pending.starts_with(b"\x1b[200~") {
                self.in_paste = true;
                self.pending.drain(..6);
                continue;
            }
            if self.pending.starts_with(b"\x1b[201~") {
                self.in_paste = false;
                self.pending.drain(..6);
                continue;
            }
            if self.pending[0] == 0x1b
                && self.pending.len() < 6
                && b"\x1b[20".starts_with(&self.pending[..self.pending.len().min(4)])
            {
                break; // wait for the rest of a bracket marker
            }
            // Take one UTF-8 character.
            let s = String::from_utf8_lossy(&self.pending);
            let Some(c) = s.chars().next() else { break };
            let n = if c == char::REPLACEMENT_CHARACTER
                && self.pending.len() < 4
                && !self.pending.is_empty()
                && self.pending[0] >= 0x80
            {
                break;
            } else {
                c.len_utf8().min(self.pending.len())
            };
            self.pending.drain(..n);
            if self.in_paste {
                self.line.push(if c == '\r' { '\n' } else { c });
                continue;
            }
            match c {
                '\r' | '\n' => keys.push(Key::Submit(std::mem::take(&mut self.line))),
                '\u{3}' => keys.push(Key::Interrupt),
                '\u{7f}' | '\u{8}' => {
                    self.line.pop();
                }
                'y' | 'Y' if awaiting_yes_no => keys.push(Key::Yes),
                'n' | 'N' if awaiting_yes_no => keys.push(Key::No),
                c if !c.is_control() => {
                    self.line.push(c);
                    keys.push(Key::Char(c));
                }
                _ => {}
            }
        }
        keys
    }
}

/// The agent's MCP connection: `fleetd mcp` as a child process, through rmcp's client.
struct Tools {
    svc: Option<RunningService<RoleClient, ()>>,
    era: Era,
}

impl Tools {
    async fn call(&mut self, name: &str, args: Value) -> Result<CallToolResult, String> {
        if self.svc.is_none() {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let mut cmd = tokio::process::Command::new(exe);
            cmd.arg("mcp");
            let (transport, _stderr) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("could not start `fleetd mcp`: {e}"))?;
            let svc = match self.era {
                Era::Initialize => ().serve(transport).await.map_err(|e| e.to_string())?,
                Era::Discover => ()
                    .serve_with_lifecycle(
                        transport,
                        ClientLifecycleMode::Discover {
                            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
                        },
                    )
                    .await
                    .map_err(|e| e.to_string())?,
            };
            self.svc = Some(svc);
        }
        let svc = self.svc.as_ref().ok_or("no MCP session")?;
        let mut p = CallToolRequestParams::new(name.to_string());
        if let Value::Object(m) = args {
            p = p.with_arguments(m);
        }
        svc.call_tool(p).await.map_err(|e| e.to_string())
    }
}

fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

fn ticket_of(text: &str) -> Option<String> {
    let i = text.find("ticket t-")?;
    let rest = &text[i + 7..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(rest.len());
    Some(rest[..end].to_string())
}

/// The message body (without the fleet header line).
fn body_of(text: &str) -> &str {
    match text.split_once('\n') {
        Some((first, rest)) if first.starts_with("[fleet") => rest,
        _ => text,
    }
}

/// What a worker makes of a task: a small deterministic computation, so replies carry results.
pub fn do_task(task: &str) -> String {
    let t = task.trim();
    let t = t.strip_prefix("question:").map(str::trim).unwrap_or(t);
    if let Some(rest) = t.strip_prefix("sum:") {
        let nums: Vec<f64> = rest
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        return format!(
            "sum of {} numbers = {}",
            nums.len(),
            nums.iter().sum::<f64>()
        );
    }
    if let Some(rest) = t.strip_prefix("count words:") {
        return format!("{} words", rest.split_whitespace().count());
    }
    if let Some(rest) = t.strip_prefix("reverse:") {
        return format!(
            "reversed: {}",
            rest.trim().chars().rev().collect::<String>()
        );
    }
    if let Some(rest) = t.strip_prefix("upper:") {
        return format!("upper: {}", rest.trim().to_uppercase());
    }
    format!(
        "done: {}",
        fleetd_actors::types::truncate(t.lines().next().unwrap_or(""), 60)
    )
}

fn hook(status: &str) {
    if let Ok(exe) = std::env::current_exe() {
        let _ = std::process::Command::new(exe)
            .args(["signal", status])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Run the sim agent until Ctrl-C or end of input.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    rt.block_on(main_loop(args))
}

async fn main_loop(args: SimArgs) -> anyhow::Result<()> {
    let mut record = match &args.record {
        Some(p) => Some(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| anyhow::anyhow!("--record {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let _raw = Raw::enter();
    let name = std::env::var("FLEETD_MEMBER").unwrap_or_else(|_| "sim".into());
    out("\x1b[?2004h");
    out(&format!(
        "fleetd sim agent `{name}` ({:?} script). Ctrl-C quits.\r\n",
        args.script
    ));
    if let Ok(f) = std::env::var("FLEETD_CHARTER_FILE")
        && let Ok(text) = std::fs::read_to_string(&f)
    {
        out(&format!(
            "charter: {}\r\n",
            fleetd_actors::types::truncate(text.lines().next().unwrap_or(""), 70)
        ));
    }
    out(PROMPT);
    if args.hooks {
        hook("idle");
    }
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(64);
    if !args.ignore_input {
        std::thread::spawn(move || {
            use std::io::Read;
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 4096];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if let Some(f) = record.as_mut() {
                            // A File is unbuffered: the bytes are in the file when this returns.
                            let _ = f.write_all(&buf[..n]);
                        }
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
    } else {
        std::mem::forget(tx);
    }
    let tools = Arc::new(tokio::sync::Mutex::new(Tools {
        svc: None,
        era: args.mcp_era,
    }));
    let mut ed = LineEditor::default();
    let mut queue: std::collections::VecDeque<String> = Default::default();
    loop {
        let Some(bytes) = rx.recv().await else { break };
        for k in ed.feed(&bytes, false) {
            match k {
                Key::Interrupt => return Ok(()),
                Key::Char(c) => out(&c.to_string()),
                Key::Submit(line) => queue.push_back(line),
                Key::Yes | Key::No => {}
            }
        }
        while let Some(line) = queue.pop_front() {
            if line.trim().is_empty() {
                out(&format!("\r\n{PROMPT}"));
                continue;
            }
            if args.hooks {
                hook("working");
            }
            let first = line.lines().next().unwrap_or("").to_string();
            // The echo of what was submitted, then the busy line (the current line while working).
            out(&format!(
                "{}\r\n",
                fleetd_actors::types::truncate(&first, 100).trim_start_matches(PROMPT)
            ));
            if args.permission {
                out("Allow sim to edit files? [y/n] ");
                let answer = loop {
                    let Some(b) = rx.recv().await else {
                        return Ok(());
                    };
                    if let Some(k) = ed
                        .feed(&b, true)
                        .into_iter()
                        .find(|k| matches!(k, Key::Yes | Key::No | Key::Interrupt))
                    {
                        break k;
                    }
                };
                match answer {
                    Key::Interrupt => return Ok(()),
                    Key::Yes => out("yes\r\n"),
                    _ => out("no\r\n"),
                }
            }
            let ticket = ticket_of(&first);
            let body = body_of(&line).to_string();
            out(&format!(
                "* working on {}: {}",
                ticket.as_deref().unwrap_or("input"),
                fleetd_actors::types::truncate(body.lines().next().unwrap_or(""), 60)
            ));
            let result = match args.script {
                Script::Sink => String::new(),
                Script::Worker => {
                    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
                    let answer = do_task(&body);
                    if let Some(a) = &args.anchor {
                        let r = tools
                            .lock()
                            .await
                            .call("fleet_drift", json!({"action": "anchor", "baseline": a}))
                            .await;
                        match r {
                            Ok(r) if r.is_error != Some(true) => {
                                out(&format!("* anchored as {a:?}"))
                            }
                            Ok(r) => out(&format!("✗ fleet_drift refused: {}", structured(&r))),
                            Err(e) => out(&format!("✗ fleet_drift failed: {e}")),
                        }
                    }
                    match (&ticket, args.no_reply) {
                        (Some(t), false) => match tools
                            .lock()
                            .await
                            .call("fleet_reply", json!({"ticket": t, "message": answer}))
                            .await
                        {
                            Ok(r) if r.is_error != Some(true) => {
                                format!("✓ replied to {t}: {answer}")
                            }
                            Ok(r) => format!("✗ fleet_reply refused: {}", structured(&r)),
                            Err(e) => format!("✗ fleet_reply failed: {e}"),
                        },
                        _ => format!("✓ {answer} (no fleet_reply)"),
                    }
                }
                Script::Exec => {
                    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
                    let results = exec_calls(&tools, &body).await;
                    match (&ticket, args.no_reply) {
                        (Some(t), false) => {
                            let msg = results.to_string();
                            match tools
                                .lock()
                                .await
                                .call("fleet_reply", json!({"ticket": t, "message": msg}))
                                .await
                            {
                                Ok(_) => format!("✓ ran tools, replied to {t}"),
                                Err(e) => format!("✗ fleet_reply failed: {e}"),
                            }
                        }
                        _ => format!(
                            "✓ ran tools: {}",
                            fleetd_actors::types::truncate(&results.to_string(), 200)
                        ),
                    }
                }
                Script::Lead => lead_turn(&tools, &body, ticket.as_deref(), args.work_ms).await,
                Script::Architect => {
                    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
                    architect_turn(&tools, &body, ticket.as_deref(), &args).await
                }
            };
            out(&format!("\r\x1b[2K{result}\r\n{PROMPT}"));
            if args.hooks {
                hook("idle");
            }
        }
    }
    Ok(())
}

/// The number after `word ` in a text (e.g. `round 2`), or the `d-N` after `decision `.
fn after<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let i = text.find(word)? + word.len();
    let rest = text[i..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(rest.len());
    Some(&rest[..end]).filter(|s| !s.is_empty())
}

async fn architect_turn(
    tools: &tokio::sync::Mutex<Tools>,
    body: &str,
    ticket: Option<&str>,
    args: &SimArgs,
) -> String {
    let (Some(decision), Some(round)) = (
        after(body, "decision"),
        after(body, "round").and_then(|r| r.parse::<u32>().ok()),
    ) else {
        return "✗ the brief names no `decision d-N` and `round R`".into();
    };
    let content = match body.split_once("other:") {
        Some((_, other)) if args.converge && round > 1 => format!("agree with: {}", other.trim()),
        _ => args.stance.clone(),
    };
    let kind = if args.abstain { "abstain" } else { "position" };
    let mut t = tools.lock().await;
    let recorded = t
        .call("fleet_decision", json!({"action": "position", "decision_id": decision, "round": round, "kind": kind, "content": content}))
        .await;
    let note = match &recorded {
        Ok(r) if r.is_error != Some(true) => {
            format!("recorded {kind} for {decision} round {round}: {content}")
        }
        Ok(r) => format!(
            "fleet_decision refused: {}",
            r.content
                .first()
                .and_then(|c| c.as_text())
                .map(|t| t.text.clone())
                .unwrap_or_default()
        ),
        Err(e) => format!("fleet_decision failed: {e}"),
    };
    if let Some(tk) = ticket {
        let _ = t
            .call("fleet_reply", json!({"ticket": tk, "message": note}))
            .await;
    }
    format!("✓ {note}")
}

async fn exec_calls(tools: &tokio::sync::Mutex<Tools>, body: &str) -> Value {
    let calls: Value = match serde_json::from_str(body.trim()) {
        Ok(v) => v,
        Err(e) => return json!([{"error": format!("the message is not JSON tool calls: {e}")}]),
    };
    let calls = match calls {
        Value::Array(a) => a,
        v => vec![v],
    };
    let mut results = vec![];
    for c in calls {
        if let Some(argv) = c.get("run").and_then(|v| v.as_array()) {
            // Run a command inside this member's process tree (as an agent's shell would).
            let argv: Vec<String> = argv
                .iter()
                .filter_map(|a| a.as_str().map(String::from))
                .collect();
            let Some((prog, rest)) = argv.split_first() else {
                continue;
            };
            let prog = if prog == "fleetd" {
                std::env::current_exe()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            } else {
                prog.clone()
            };
            let o = tokio::process::Command::new(prog)
                .args(rest)
                .stdin(Stdio::null())
                .output()
                .await;
            results.push(match o {
                Ok(o) => json!({"run": argv, "code": o.status.code(), "stdout": String::from_utf8_lossy(&o.stdout), "stderr": String::from_utf8_lossy(&o.stderr)}),
                Err(e) => json!({"run": argv, "error": e.to_string()}),
            });
            continue;
        }
        let name = c
            .get("tool")
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        let args = c.get("args").cloned().unwrap_or(json!({}));
        let r = tools.lock().await.call(&name, args).await;
        results.push(match r {
            Ok(r) => json!({"tool": name, "is_error": r.is_error == Some(true), "structured": structured(&r),
                "text": r.content.first().and_then(|c| c.as_text()).map(|t| t.text.clone())}),
            Err(e) => json!({"tool": name, "protocol_error": e}),
        });
    }
    Value::Array(results)
}

/// The demo lead's turn: one worker per `task:` line, send each its task, collect the replies,
/// stop the workers, answer the operator.
async fn lead_turn(
    tools: &tokio::sync::Mutex<Tools>,
    body: &str,
    ticket: Option<&str>,
    work_ms: u64,
) -> String {
    let tasks: Vec<String> = body
        .lines()
        .filter_map(|l| l.trim().strip_prefix("task:").map(|t| t.trim().to_string()))
        .collect();
    if tasks.is_empty() {
        return "✗ no `task:` lines in the brief".into();
    }
    let mut t = tools.lock().await;
    // The lead anchors its own identity (the first write bootstraps its drift log).
    let _ = t
        .call(
            "fleet_drift",
            json!({"action": "anchor", "baseline": "lead coordinating the workers"}),
        )
        .await;
    let mut sent = vec![];
    for (i, task) in tasks.iter().enumerate() {
        let w = format!("worker-{}", i + 1);
        let cmd = json!([
            std::env::current_exe()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|_| "fleetd".into()),
            "sim-agent",
            "--script",
            "worker",
            "--work-ms",
            work_ms.to_string(),
            "--anchor",
            "worker"
        ]);
        if let Ok(r) = t
            .call(
                "fleet_spawn",
                json!({"role": "worker", "name": w, "profile": "sim", "command": cmd}),
            )
            .await
            && r.is_error == Some(true)
        {
            return format!("✗ fleet_spawn {w} refused: {}", structured(&r));
        }
        match t
            .call(
                "fleet_send",
                json!({"to": w, "message": task, "wait": false}),
            )
            .await
        {
            Ok(r) if r.is_error != Some(true) => {
                let tid = structured(&r)["ticket"]["id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                sent.push((w, tid));
            }
            Ok(r) => return format!("✗ fleet_send refused: {}", structured(&r)),
            Err(e) => return format!("✗ fleet_send failed: {e}"),
        }
    }
    // Collect: poll until every ticket is resolved (bounded).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut answers: std::collections::BTreeMap<String, String> = Default::default();
    while answers.len() < sent.len() && tokio::time::Instant::now() < deadline {
        if let Ok(r) = t.call("fleet_poll", json!({})).await {
            for tk in structured(&r)["tickets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let id = tk["id"].as_str().unwrap_or("").to_string();
                let state = tk["state"].as_str().unwrap_or("");
                if state != "open"
                    && sent.iter().any(|(_, t)| t == &id)
                    && !answers.contains_key(&id)
                {
                    let text = tk["reply"]["text"]
                        .as_str()
                        .or(tk["tail"]["text"].as_str())
                        .unwrap_or(state)
                        .to_string();
                    answers.insert(id.clone(), text);
                    let _ = t.call("fleet_ack", json!({"ticket": id})).await;
                }
            }
        }
        if answers.len() < sent.len() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for (w, tid) in &sent {
        // What the lead saw of each worker that answered goes into its own drift log.
        if answers.contains_key(tid) {
            let _ = t
                .call(
                    "fleet_drift",
                    json!({"action": "observe", "subject": w, "baseline": "worker"}),
                )
                .await;
        }
        let _ = t.call("fleet_stop", json!({"name": w})).await;
    }
    let summary: Vec<String> = sent
        .iter()
        .map(|(w, tid)| {
            format!(
                "{w}: {}",
                answers
                    .get(tid)
                    .map(String::as_str)
                    .unwrap_or("(no answer)")
            )
        })
        .collect();
    let summary = summary.join("; ");
    if let Some(tk) = ticket {
        let _ = t
            .call("fleet_reply", json!({"ticket": tk, "message": summary}))
            .await;
    }
    format!("✓ {} tasks done: {summary}", sent.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editor_handles_bracketed_paste_split_across_reads() {
        let mut ed = LineEditor::default();
        let mut keys = ed.feed(b"\x1b[20", false);
        keys.extend(ed.feed(b"0~[fleet ticket t-3 from lead]\nsum: 1 2\x1b[2", false));
        keys.extend(ed.feed(b"01~\r", false));
        let subs: Vec<String> = keys
            .into_iter()
            .filter_map(|k| {
                if let Key::Submit(s) = k {
                    Some(s)
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(
            subs,
            vec!["[fleet ticket t-3 from lead]\nsum: 1 2".to_string()]
        );
    }

    #[test]
    fn tickets_and_tasks() {
        assert_eq!(
            ticket_of("[fleet ticket t-12 from lead · answer]"),
            Some("t-12".into())
        );
        assert_eq!(
            body_of("[fleet ticket t-1 from x]\nsum: 1 2 3"),
            "sum: 1 2 3"
        );
        assert_eq!(do_task("sum: 1 2 3.5"), "sum of 3 numbers = 6.5");
        assert_eq!(do_task("count words: a b c"), "3 words");
        assert_eq!(do_task("reverse: abc"), "reversed: cba");
    }
}
