//! The real agent CLIs as fleetd members: Claude Code, Codex, Gemini CLI and opencode, each in
//! its own PTY under a per-test daemon, against the scripted mock model server on loopback
//! (`mockmodel.rs`). What fleetd promises is checked through its REST API and event stream
//! only: the member starts and goes idle; a message is delivered once, as one intact prompt,
//! and accepted only when the agent started a turn on it; the agent answers its ticket with
//! `fleet_reply`, and `fleet_whoami` names the member itself (identity from the process tree);
//! one message per turn; a message queued while a permission dialog shows waits for it.
//!
//! The CLIs come from `FLEETD_AGENTS_BIN` (a directory: claude, codex, gemini, opencode at the
//! versions the profiles list as verified). Unset: every test here returns at once, saying so
//! on stderr. Set with a CLI missing: that CLI's tests fail.
//!
//! Each test gets a throwaway HOME (under the target dir: Codex refuses helper binaries under
//! /tmp) holding the CLI's first-run config, a working directory under /tmp (outside any git
//! repository), and a daemon whose environment (which members inherit) has the agents
//! directory first on PATH, that HOME and the mock's address.
//!
//! Timings (spawn -> idle, send -> accepted, the mock's last answer of a turn -> fleetd's
//! `idle`) are printed to stderr as `timing ...` lines.

use std::path::PathBuf;
use std::time::Duration;

use fleetd::client::EventStream;
use fleetd_actors::events::{Event, EventKind};
use serde::Serialize;
use serde_json::{Value, json};

use crate::common::*;
use crate::mockmodel::{Api, Mock, now_ms};

/// Spawn to idle (opencode needs 10-20 s on a loaded 2-core machine).
const STARTUP: Duration = Duration::from_secs(60);
/// One turn's events.
const TURN: Duration = Duration::from_secs(45);
/// How long a held message is watched not to be delivered.
const HOLD: Duration = Duration::from_secs(3);
/// In every member's charter: it must reach the model, and never a command line.
const CHARTER_MARKER: &str = "Charter marker 4d1f: you are a fleet member.";
/// In the big message's body (its second line, after the header): never on a command line.
const BODY_MARKER: &str = "Here is a long brief.";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cli {
    Claude,
    Codex,
    Gemini,
    Opencode,
}

impl Cli {
    fn name(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
            Cli::Gemini => "gemini",
            Cli::Opencode => "opencode",
        }
    }

    fn api(self) -> Api {
        match self {
            Cli::Claude => Api::Anthropic,
            Cli::Codex => Api::Responses,
            Cli::Gemini => Api::Gemini,
            Cli::Opencode => Api::Chat,
        }
    }
}

/// The agents directory, or None (with one line on stderr) when FLEETD_AGENTS_BIN is unset.
/// Set but without this CLI: a failure, never a silent pass.
fn agents_dir(cli: Cli) -> Option<PathBuf> {
    let Some(dir) = std::env::var_os("FLEETD_AGENTS_BIN") else {
        eprintln!(
            "skipped: FLEETD_AGENTS_BIN is unset (set it to the directory holding claude, codex, gemini and opencode to run the real-agent tests)"
        );
        return None;
    };
    let dir = PathBuf::from(dir);
    let bin = dir.join(cli.name());
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(&bin) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Some(dir),
        Ok(_) => panic!(
            "FLEETD_AGENTS_BIN={} is set but {} is not an executable file",
            dir.display(),
            bin.display()
        ),
        Err(e) => panic!(
            "FLEETD_AGENTS_BIN={} is set but {} is missing ({e}): install the pinned CLIs there (see the profiles' `verified` lists) or unset it",
            dir.display(),
            bin.display()
        ),
    }
}

fn text<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

fn is_status(e: &Event, member: &str, to: &str) -> bool {
    matches!(&e.kind, EventKind::Status { member: m, to: t, .. } if m.as_str() == member && t.as_str() == to)
}

fn status_of(e: &Event, member: &str) -> Option<(String, String, String)> {
    match &e.kind {
        EventKind::Status {
            member: m,
            from,
            to,
            cause,
            ..
        } if m.as_str() == member => Some((
            from.as_str().to_string(),
            to.as_str().to_string(),
            cause.clone(),
        )),
        _ => None,
    }
}

fn is_receipt(e: &Event, ticket: &str, state: &str) -> bool {
    matches!(&e.kind, EventKind::Receipt { ticket: Some(t), state: s, .. }
        if t.to_string() == ticket && text(s) == state)
}

fn is_ticket(e: &Event, ticket: &str, state: &str) -> bool {
    matches!(&e.kind, EventKind::Ticket { ticket: t, state: s, .. }
        if t.to_string() == ticket && text(s) == state)
}

/// The header fleetd puts above an operator's message.
fn header(ticket: &str) -> String {
    format!("[fleet ticket {ticket} from operator · answer with fleet_reply]")
}

/// Whether a reply the mock's script made ("whoami: " + the first line of the fleet_whoami
/// result the CLI gave the model) names `role` `name`. Most CLIs give the model the result's
/// text (its first line is the note); Claude Code gives it the structured content, a one-line
/// JSON object.
fn names_itself(reply: &str, role: &str, name: &str) -> bool {
    let Some(line) = reply.strip_prefix("whoami: ") else {
        return false;
    };
    match serde_json::from_str::<Value>(line) {
        Ok(v) => v["name"] == name && v["role"] == role && v["member"] == true,
        Err(_) => {
            line == format!("you are {role} `{name}`, resolved from your connection's process tree")
        }
    }
}

/// A ~10 KB, multi-line body with what a shell, a TUI's command parser or a paste handler could
/// take for something else: quotes, `$`, backticks, backslashes, lines starting with `/`, `!`
/// and `#`, blank lines, trailing spaces, non-ASCII. No tabs (Claude turns them into spaces),
/// no `@` (Gemini reads `@path` as a file reference), and it ends on a plain character (Codex
/// trims the message's ends; Gemini reads a final `\` as a line continuation).
fn big_body() -> String {
    let mut s = String::from("Please check in: who are you? Here is a long brief.\n");
    let mut i = 0;
    while s.len() < 10_000 {
        i += 1;
        let line = match i % 8 {
            0 => format!("/compact line {i}: a slash command at the start of a line"),
            1 => format!("!echo line {i}: a bang at the start && rm -rf ./nothing"),
            2 => format!("# line {i}: a heading, or a shell comment"),
            3 => format!(
                "quotes {i}: \"double\" 'single' `uname -a` $(whoami) ${{HOME}} $PATH $1 \\$escaped"
            ),
            4 => format!(
                "backslashes {i}: C:\\path\\to\\file, \\n is not a newline, \\\\ is two, end\\ here"
            ),
            5 => format!("unicode {i}: é — “curly” ❯ 日本語 🙂 and trailing spaces   "),
            6 => String::new(),
            _ => {
                format!("plain {i}: the quick brown fox jumps over the lazy dog; 0123456789 <>&|;")
            }
        };
        s.push_str(&line);
        s.push('\n');
    }
    s.push_str("End of the brief.");
    s
}

/// Whether the prompt the model got is the message as sent. opencode expands a large paste's
/// placeholder followed by the one space it typed after it (documented in the research); that
/// trailing space is allowed for opencode only.
fn same_prompt(cli: Cli, got: &str, want: &str) -> Result<(), String> {
    if got == want || (cli == Cli::Opencode && got.strip_suffix(' ') == Some(want)) {
        return Ok(());
    }
    let at = got
        .char_indices()
        .zip(want.chars())
        .find(|((_, a), b)| a != b)
        .map(|((i, _), _)| i)
        .unwrap_or(got.len().min(want.len()));
    let ctx = |s: &str| {
        let mut from = at.saturating_sub(60).min(s.len());
        while !s.is_char_boundary(from) {
            from -= 1;
        }
        let mut to = (at + 60).min(s.len());
        while !s.is_char_boundary(to) {
            to += 1;
        }
        format!("{:?}", &s[from..to])
    };
    Err(format!(
        "the prompt differs from the message at byte {at} (got {} bytes, sent {}):\n  got:  {}\n  sent: {}",
        got.len(),
        want.len(),
        ctx(got),
        ctx(want)
    ))
}

/// A daemon with one CLI's environment, the mock, and the event stream.
struct Rig {
    cli: Cli,
    d: D,
    mock: Mock,
    _home: tempfile::TempDir,
    _work: tempfile::TempDir,
    work: PathBuf,
    stream: EventStream,
    seen: Vec<Event>,
    timings: Vec<String>,
}

fn write(path: &std::path::Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).expect("mkdir");
    std::fs::write(path, text).expect("write config");
}

impl Rig {
    async fn new(cli: Cli) -> Option<Rig> {
        let dir = agents_dir(cli)?;
        let home_dir = tempfile::Builder::new()
            .prefix("agents-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("throwaway HOME");
        let home = home_dir.path().to_path_buf();
        // The members' working directory, outside any git repository (in a repository Claude
        // Code keys folder trust on its root, and Codex asks to trust it).
        let work_dir = tempfile::Builder::new()
            .prefix("agents-work-")
            .tempdir_in("/tmp")
            .expect("work dir");
        let work = work_dir.path().to_path_buf();
        let mock = Mock::start_with(
            Duration::from_millis(300),
            Some(work.join("fleet-permission.touched")),
        )
        .await;
        let base = mock.base_url();
        let h = |p: &str| home.join(p).display().to_string();
        let mut env: Vec<(String, String)> = vec![
            (
                "PATH".into(),
                format!(
                    "{}:{}",
                    dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            ),
            ("HOME".into(), home.display().to_string()),
            ("XDG_CONFIG_HOME".into(), h(".config")),
            ("XDG_DATA_HOME".into(), h(".local/share")),
            ("XDG_CACHE_HOME".into(), h(".cache")),
            ("XDG_STATE_HOME".into(), h(".local/state")),
            // As on a CI runner: Gemini CLI would refuse to start interactively (its profile
            // unsets these for the member).
            ("CI".into(), "true".into()),
            ("CI_JOB_ID".into(), "1".into()),
        ];
        let mut add = |k: &str, v: &str| env.push((k.into(), v.into()));
        match cli {
            Cli::Claude => {
                // Onboarding done, the working directory trusted (`/` alone does not cover a
                // directory inside a git repository: Claude keys trust on the repository's
                // root); a token (not an API key) shows no "use this API key?" dialog.
                let trusted = json!({"hasTrustDialogAccepted": true});
                write(
                    &home.join(".claude.json"),
                    &json!({
                        "hasCompletedOnboarding": true,
                        "projects": {"/": trusted, work.display().to_string(): trusted},
                    })
                    .to_string(),
                );
                add("ANTHROPIC_BASE_URL", &base);
                add("ANTHROPIC_AUTH_TOKEN", "mock-token");
                add("DISABLE_AUTOUPDATER", "1");
                add("DISABLE_TELEMETRY", "1");
                add("DISABLE_ERROR_REPORTING", "1");
                add("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
            }
            Cli::Codex => {
                // CODEX_HOME must exist; the user's config names the mock provider (so a
                // resumed member, whose command is the profile's resume command, has it too).
                write(
                    &home.join(".codex/config.toml"),
                    &format!(
                        "model_provider = \"mock\"\nmodel = \"mock-model\"\ncheck_for_update_on_startup = false\n\n[model_providers.mock]\nname = \"mock\"\nbase_url = \"{base}/v1\"\nenv_key = \"MOCK_KEY\"\nwire_api = \"responses\"\n"
                    ),
                );
                add("CODEX_HOME", &h(".codex"));
                add("MOCK_KEY", "mock-key");
            }
            Cli::Gemini => {
                // The user's settings hold the auth type and folder trust; fleetd adds its own
                // to a copy in the member's GEMINI_CLI_HOME.
                write(
                    &home.join(".gemini/settings.json"),
                    &json!({
                        "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
                        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
                        "privacy": {"usageStatisticsEnabled": false},
                        "telemetry": {"enabled": false},
                        "ui": {"hideBanner": true, "hideTips": true},
                        "model": {"name": "gemini-2.5-flash"}
                    })
                    .to_string(),
                );
                add("GEMINI_API_KEY", "mock-key");
                add("GOOGLE_GEMINI_BASE_URL", &base);
            }
            Cli::Opencode => {
                // fleetd's config is OPENCODE_CONFIG; the user's holds the provider.
                write(
                    &home.join(".config/opencode/opencode.json"),
                    &json!({
                        "$schema": "https://opencode.ai/config.json",
                        "autoupdate": false,
                        "share": "disabled",
                        "model": "mock/mock-model",
                        "small_model": "mock/mock-model",
                        "provider": {"mock": {
                            "npm": "@ai-sdk/openai-compatible",
                            "name": "Mock",
                            "options": {"baseURL": format!("{base}/v1"), "apiKey": "mock-key"},
                            "models": {"mock-model": {"name": "Mock Model", "tool_call": true}}
                        }},
                        "permission": {"bash": "ask"}
                    })
                    .to_string(),
                );
                for k in [
                    "OPENCODE_DISABLE_AUTOUPDATE",
                    "OPENCODE_DISABLE_MODELS_FETCH",
                    "OPENCODE_DISABLE_LSP_DOWNLOAD",
                    "OPENCODE_DISABLE_SHARE",
                ] {
                    add(k, "1");
                }
                // opencode runs `npm install @opencode-ai/plugin` in every config directory in
                // the background: no traffic leaves the machine (it fails at once, harmlessly).
                add("npm_config_registry", "http://127.0.0.1:9/");
                add("npm_config_fetch_retries", "0");
            }
        }
        let mut config = test_config();
        for c in [&mut config.charters.primary, &mut config.charters.worker] {
            c.push_str(&format!("\n{CHARTER_MARKER}\n"));
        }
        let d = D::with_env(config, env).await;
        let stream = d.client.events(0).await.expect("event stream");
        Some(Rig {
            cli,
            d,
            mock,
            _home: home_dir,
            _work: work_dir,
            work,
            stream,
            seen: vec![],
            timings: vec![],
        })
    }

    /// The command a member runs: the profile's (by name, through PATH) plus what the test
    /// needs; fleetd appends its wiring.
    fn command(&self) -> Option<Vec<String>> {
        let v = |a: &[&str]| Some(a.iter().map(|s| s.to_string()).collect());
        match self.cli {
            // The default (auto) mode has a model classifier approve tools; manual asks.
            Cli::Claude => v(&["claude", "--permission-mode", "manual"]),
            Cli::Codex | Cli::Gemini | Cli::Opencode => None,
        }
    }

    async fn spawn(&self, name: &str, role: &str) -> Value {
        let mut body = json!({
            "role": role, "name": name, "profile": self.cli.name(),
            "cwd": self.work.display().to_string(),
        });
        if let Some(c) = self.command() {
            body["command"] = json!(c);
        }
        let v = self
            .d
            .try_spawn(body)
            .await
            .unwrap_or_else(|e| panic!("spawn {name}: {e}\n{}", self.d.log()));
        // The real CLIs run in the sandbox (the default where it works; .ci/run installs
        // bubblewrap), with their own network access to the model.
        if sandbox_here() {
            assert_eq!(
                v["sandbox"],
                "bwrap",
                "{}: {name} must run confined: {v}",
                self.cli.name()
            );
        }
        v
    }

    /// The first event (seen or new) matching `pred` within `within`, or None.
    async fn within(&mut self, within: Duration, pred: impl Fn(&Event) -> bool) -> Option<Event> {
        if let Some(e) = self.seen.iter().find(|e| pred(e)) {
            return Some(e.clone());
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.stream.next()).await {
                Ok(Some(Ok(e))) => {
                    self.seen.push(e.clone());
                    if pred(&e) {
                        return Some(e);
                    }
                }
                Ok(Some(Err(e))) => panic!("event stream: {e}"),
                Ok(None) => panic!("event stream ended\n{}", self.d.log()),
                Err(_) => return None,
            }
        }
    }

    /// The first event matching `pred`, or a failure that shows what happened.
    async fn wait(&mut self, what: &str, within: Duration, pred: impl Fn(&Event) -> bool) -> Event {
        match self.within(within, pred).await {
            Some(e) => e,
            None => {
                self.fail(&format!("timed out after {within:?} waiting for {what}"))
                    .await
            }
        }
    }

    /// Fail with the events, the mock's requests, every member's screen (and the lines the
    /// profile's regexes read, escaped) and the daemon log (whole, in a file under the target
    /// dir).
    async fn fail(&self, why: &str) -> ! {
        let events: Vec<String> = self
            .seen
            .iter()
            .map(|e| format!("  {} @{} {:?}", e.seq, e.at, e.kind))
            .collect();
        let mut screens = String::new();
        if let Ok(v) = self.d.client.get::<Value>("/members").await {
            for m in v["members"].as_array().into_iter().flatten() {
                let n = m["name"].as_str().unwrap_or("");
                let s = self
                    .d
                    .client
                    .get_text(&format!("/members/{n}/screen"))
                    .await
                    .unwrap_or_default();
                let window: Vec<String> = s
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(|l| format!("    {l:?}"))
                    .collect();
                let window = &window[window.len().saturating_sub(12)..];
                screens.push_str(&format!(
                    "--- {n} ({}) ---\n{}\n  last 12 non-blank lines, as the regexes see them:\n{}\n",
                    m["status"],
                    s.lines()
                        .map(str::trim_end)
                        .collect::<Vec<_>>()
                        .join("\n")
                        .trim_end(),
                    window.join("\n")
                ));
            }
        }
        let log = self.d.log();
        let file = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "agents-{}-{}-daemon.log",
            self.cli.name(),
            std::process::id()
        ));
        let _ = std::fs::write(&file, &log);
        let requests: String = self
            .mock
            .requests()
            .iter()
            .map(|r| {
                json!({"seq": r.seq, "api": format!("{:?}", r.api), "path": r.path, "at_ms": r.at_ms,
                       "answer": r.answer, "body": r.body})
                .to_string()
                    + "\n"
            })
            .collect();
        let mock_file = file.with_file_name(format!(
            "agents-{}-{}-mock.jsonl",
            self.cli.name(),
            std::process::id()
        ));
        let _ = std::fs::write(&mock_file, requests);
        let interesting: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("signal")
                    || l.contains("turn started")
                    || l.contains("not taken")
                    || l.contains("WARN")
                    || l.contains("ERROR")
            })
            .collect();
        let interesting = &interesting[interesting.len().saturating_sub(40)..];
        panic!(
            "{}: {why}\nevents:\n{}\nmock requests (bodies in {}):\n{}\nscreens:\n{screens}\ndaemon log (signals, turns, warnings; last 40; whole log in {}):\n{}",
            self.cli.name(),
            events.join("\n"),
            mock_file.display(),
            self.mock.summary(),
            file.display(),
            interesting.join("\n")
        )
    }

    async fn send(&self, to: &str, message: &str) -> (String, u64) {
        let at = now_ms();
        (self.d.send(to, message).await, at)
    }

    fn count(&self, pred: impl Fn(&Event) -> bool) -> usize {
        self.seen.iter().filter(|e| pred(e)).count()
    }

    /// Spawn `name` and wait for it to go starting -> idle; returns the time it took.
    async fn start(&mut self, name: &str, role: &str) {
        let t0 = now_ms();
        self.spawn(name, role).await;
        let n = name.to_string();
        let idle = self
            .wait(&format!("{name} idle after its spawn"), STARTUP, |e| {
                is_status(e, &n, "idle")
            })
            .await;
        let first = self
            .seen
            .iter()
            .find_map(|e| status_of(e, name))
            .expect("a status event");
        assert_eq!(first.0, "starting", "{name}: first status change {first:?}");
        let exited = self.count(|e| is_status(e, &n, "exited") && e.seq < idle.seq);
        assert_eq!(exited, 0, "{name} exited before it went idle");
        // A CLI that refused part of fleetd's wiring says so on screen (Gemini: "Security
        // Warning: Skipping system settings file ...").
        let screen = self
            .d
            .client
            .get_text(&format!("/members/{name}/screen"))
            .await
            .unwrap_or_default();
        if let Some(at) = screen.find("Security Warning") {
            let warning: String = screen[at..]
                .lines()
                .take(3)
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            self.fail(&format!(
                "{name} started with a warning: the CLI dropped part of fleetd's wiring: {warning}"
            ))
            .await;
        }
        self.timing(format!("spawn -> idle {} ms ({name})", idle.at - t0));
    }

    fn timing(&mut self, line: String) {
        eprintln!("timing {}: {line}", self.cli.name());
        self.timings.push(line);
    }

    /// After ticket `t` (sent at `sent`) to `member` was accepted: send -> accepted, and the
    /// mock's last answer of that turn -> fleetd's next `idle` for the member.
    async fn turn_timings(&mut self, member: &str, t: &str, sent: u64) -> Event {
        let tt = t.to_string();
        let accepted = self
            .wait(&format!("{t} accepted"), TURN, |e| {
                is_receipt(e, &tt, "accepted")
            })
            .await;
        let m = member.to_string();
        let idle = self
            .wait(&format!("{member} idle after {t}"), TURN, |e| {
                e.seq > accepted.seq && is_status(e, &m, "idle")
            })
            .await;
        let cause = match &idle.kind {
            EventKind::Status { cause, .. } => cause.clone(),
            _ => String::new(),
        };
        let delivered = self
            .seen
            .iter()
            .find(|e| is_receipt(e, &tt, "delivered"))
            .map(|e| e.at)
            .unwrap_or(accepted.at);
        let ended = self.mock.turn_ended_ms(self.cli.api(), &header(t));
        let end = match ended {
            Some(ms) => format!("{} ms (idle by {cause})", idle.at as i64 - ms as i64),
            None => format!("n/a: the mock answered no final text for {t} before idle"),
        };
        self.timing(format!(
            "{t} to {member}: send -> accepted {} ms (delivered -> accepted {} ms); turn end -> idle {end}",
            accepted.at as i64 - sent as i64,
            accepted.at as i64 - delivered as i64
        ));
        idle
    }

    fn summary(&self, name: &str) {
        eprintln!(
            "timing {} {name}: summary\n  {}",
            self.cli.name(),
            self.timings.join("\n  ")
        );
    }
}

/// The round trip: lead and worker start; a 10 KB message to the lead is delivered once as one
/// intact prompt, accepted, answered with the lead's own name; the worker names itself; two
/// messages in a row are two turns, the second pasted only after the first turn ended.
async fn round_trip(cli: Cli) {
    let Some(mut r) = Rig::new(cli).await else {
        return;
    };
    let api = cli.api();
    let t_test = now_ms();
    // Every command line in the fleet's process tree, sampled through the test: the CLIs, their
    // MCP servers, their hooks (which a sample may miss, being short), the PTY hosts.
    let watch = ArgvWatch::start(r.d.pid(), vec![CHARTER_MARKER.into(), BODY_MARKER.into()]);
    r.start("lead", "primary").await;
    r.start("w1", "worker").await;

    // A 10 KB message to the lead and a short one to the worker, at the same time.
    let body = big_body();
    let (t1, sent1) = r.send("lead", &body).await;
    let (t2, sent2) = r.send("w1", "Who are you? Answer your ticket.").await;
    let idle1 = r.turn_timings("lead", &t1, sent1).await;
    r.turn_timings("w1", &t2, sent2).await;
    for (t, role, name) in [(&t1, "primary", "lead"), (&t2, "worker", "w1")] {
        let tt = t.clone();
        r.wait(&format!("{t} replied"), TURN, |e| {
            is_ticket(e, &tt, "replied")
        })
        .await;
        let tk = r.d.ticket(t).await;
        assert!(
            names_itself(tk["reply"]["text"].as_str().unwrap_or(""), role, name),
            "{}: {name}'s reply to {t} must name itself: {tk}",
            cli.name()
        );
        assert_eq!(tk["receipt"]["state"], "accepted", "{tk}");
    }
    // The CLI's hooks reach fleetd: each member's session id was reported by them.
    for name in ["lead", "w1"] {
        let m = r.d.member(name).await;
        if m["session_id"].as_str().is_none_or(str::is_empty) {
            r.fail(&format!(
                "no session id recorded for {name} after a turn: its hooks (fleetd signal --hook) never reached the daemon: {m}"
            ))
            .await;
        }
    }
    // Delivered once, as one intact prompt.
    let want = format!("{}\n{body}", header(&t1));
    let prompts = r.mock.wait_prompts(api, 2, TURN).await;
    let got: Vec<&String> = prompts
        .iter()
        .filter(|p| p.contains(&header(&t1)))
        .collect();
    if got.len() != 1 {
        r.fail(&format!(
            "{t1} reached the model in {} prompts, not 1",
            got.len()
        ))
        .await;
    }
    if let Err(e) = same_prompt(cli, got[0], &want) {
        r.fail(&e).await;
    }
    let t1c = t1.clone();
    assert_eq!(
        r.count(|e| is_receipt(e, &t1c, "delivered")),
        1,
        "{t1} delivered more than once"
    );
    // The receipt went delivered -> accepted, and the lead idle -> working -> idle around it.
    let delivered = r
        .wait("t1 delivered", TURN, |e| is_receipt(e, &t1c, "delivered"))
        .await;
    let working = r
        .seen
        .iter()
        .find(|e| e.seq > delivered.seq && is_status(e, "lead", "working"))
        .cloned();
    let Some(working) = working else {
        r.fail("the lead never showed working after the paste")
            .await
    };
    assert!(
        working.seq < idle1.seq,
        "working after the idle that ended the turn"
    );
    let before = r
        .seen
        .iter()
        .filter(|e| e.seq < delivered.seq)
        .filter_map(|e| status_of(e, "lead"))
        .next_back();
    assert_eq!(
        before.map(|s| s.1).as_deref(),
        Some("idle"),
        "the lead was not idle when the message was pasted"
    );

    // One message per turn: two sends in a row are two prompts, the second pasted after the
    // first turn ended.
    let (t3, sent3) = r.send("lead", "First of two: who are you?").await;
    let (t4, sent4) = r.send("lead", "Second of two: who are you, again?").await;
    let idle3 = r.turn_timings("lead", &t3, sent3).await;
    r.turn_timings("lead", &t4, sent4).await;
    for t in [&t3, &t4] {
        let tt = t.clone();
        r.wait(&format!("{t} replied"), TURN, |e| {
            is_ticket(e, &tt, "replied")
        })
        .await;
        let tk = r.d.ticket(t).await;
        assert!(
            names_itself(
                tk["reply"]["text"].as_str().unwrap_or(""),
                "primary",
                "lead"
            ),
            "{tk}"
        );
    }
    let prompts = r.mock.wait_prompts(api, 4, TURN).await;
    let (h3, h4) = (header(&t3), header(&t4));
    let p3: Vec<&String> = prompts.iter().filter(|p| p.contains(&h3)).collect();
    let p4: Vec<&String> = prompts.iter().filter(|p| p.contains(&h4)).collect();
    if p3.len() != 1 || p4.len() != 1 || p3[0].contains(&h4) || p4[0].contains(&h3) {
        r.fail(&format!(
            "two sends were not two separate prompts: {p3:?} / {p4:?}"
        ))
        .await;
    }
    for (p, t, m) in [
        (p3[0], &t3, "First of two: who are you?"),
        (p4[0], &t4, "Second of two: who are you, again?"),
    ] {
        if let Err(e) = same_prompt(cli, p, &format!("{}\n{m}", header(t))) {
            r.fail(&e).await;
        }
    }
    let end3 = r.mock.turn_ended_ms(api, &h3).expect("t3's turn ended");
    let start4 = r.mock.turn_started_ms(api, &h4).expect("t4's turn started");
    if start4 < end3 {
        r.fail(&format!(
            "{t4}'s turn started ({start4}) before {t3}'s ended ({end3})"
        ))
        .await;
    }
    let t4c = t4.clone();
    let delivered4 = r
        .wait("t4 delivered", TURN, |e| is_receipt(e, &t4c, "delivered"))
        .await;
    assert!(
        delivered4.seq > idle3.seq,
        "{t4} was pasted (seq {}) before the turn of {t3} ended (idle at seq {})",
        delivered4.seq,
        idle3.seq
    );
    // The charter reached the model with each member's first turn (from its 0600 file), and
    // neither it nor the message was ever on a command line.
    for t in [&t1, &t2] {
        let h = header(t);
        let first = r
            .mock
            .requests()
            .into_iter()
            .find(|q| q.turn_prompt.as_deref().is_some_and(|p| p.contains(&h)));
        let Some(first) = first else {
            r.fail(&format!("no request of {t}'s turn")).await
        };
        if !first.body.to_string().contains(CHARTER_MARKER) {
            r.fail(&format!("{t}'s first request does not carry the charter"))
                .await;
        }
        if cli == Cli::Codex {
            // Added to Codex's own instructions, not in place of them: Codex 0.171 sends its
            // base instructions as the first developer message of the input (no `instructions`
            // field), and the charter as a developer message of its own.
            let texts: Vec<(String, String)> = first.body["input"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|item| {
                    let role = item["role"].as_str().unwrap_or("").to_string();
                    (role, item["content"].to_string())
                })
                .collect();
            let base = texts.first().cloned().unwrap_or_default();
            eprintln!(
                "codex input[0]: {} {} chars, starting {:?}",
                base.0,
                base.1.len(),
                base.1.chars().take(80).collect::<String>()
            );
            let charter_in = texts
                .iter()
                .position(|(role, text)| role == "developer" && text.contains(CHARTER_MARKER));
            if base.0 != "developer"
                || base.1.len() < 1000
                || base.1.contains(CHARTER_MARKER)
                || charter_in.is_none_or(|i| i == 0)
            {
                r.fail(&format!(
                    "Codex's own instructions were not kept beside the charter: {texts:?}"
                ))
                .await;
            }
        }
    }
    let (seen, hits) = watch.finish();
    eprintln!("argv watch {}: {seen} processes sampled", cli.name());
    if !hits.is_empty() {
        r.fail(&format!(
            "command lines carried the charter or the message: {hits:#?}"
        ))
        .await;
    }
    r.timing(format!("round trip test body {} ms", now_ms() - t_test));
    r.summary("round trip");
}

/// Resume: a member that exited comes back with `fleetd spawn --resume` (REST `{resume}`) as
/// the same name, role and charter, in its conversation: the model's next request carries the
/// turn from before the exit.
async fn resume_continues_the_conversation(cli: Cli) {
    let Some(mut r) = Rig::new(cli).await else {
        return;
    };
    let t_test = now_ms();
    r.start("lead", "primary").await;
    let (t1, sent1) = r.send("lead", "Remember PINEAPPLE-7. Who are you?").await;
    r.turn_timings("lead", &t1, sent1).await;
    let tt = t1.clone();
    r.wait(&format!("{t1} replied"), TURN, |e| {
        is_ticket(e, &tt, "replied")
    })
    .await;
    let before = r.d.member("lead").await;
    let session = before["session_id"].as_str().unwrap_or("").to_string();
    if session.is_empty() {
        r.fail(&format!("no session id recorded before the stop: {before}"))
            .await;
    }
    let _: Value =
        r.d.client
            .delete("/members/lead")
            .await
            .unwrap_or_else(|e| panic!("stop: {e}"));
    let stop_seq = r
        .wait("lead exited", TURN, |e| is_status(e, "lead", "exited"))
        .await
        .seq;
    let v =
        r.d.try_spawn(json!({"resume": "lead"}))
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "resume: {e}
{}",
                    r.d.log()
                )
            });
    assert_eq!(v["name"], "lead", "{v}");
    assert_eq!(v["role"], "primary", "{v}");
    assert_eq!(v["charter_sha256"], before["charter_sha256"], "{v}");
    assert!(
        v["notes"].to_string().contains(&session),
        "the answer names the resumed session: {v}"
    );
    r.wait("lead idle after its resume", STARTUP, |e| {
        e.seq > stop_seq && is_status(e, "lead", "idle")
    })
    .await;
    let (t2, sent2) = r.send("lead", "What did I ask you to remember?").await;
    r.turn_timings("lead", &t2, sent2).await;
    // The model saw the earlier turn in the resumed conversation.
    let h2 = header(&t2);
    let carried = r.mock.requests().iter().any(|q| {
        let b = q.body.to_string();
        b.contains(&h2) && b.contains("PINEAPPLE-7")
    });
    if !carried {
        r.fail("the resumed member's request did not carry the turn from before its exit")
            .await;
    }
    // And its charter: a resumed lead that runs without it is not the lead it was (Gemini CLI
    // does not replay the SessionStart context it was given; fleetd gives it again).
    let chartered = r.mock.requests().iter().any(|q| {
        let b = q.body.to_string();
        b.contains(&h2) && b.contains(CHARTER_MARKER)
    });
    if !chartered {
        r.fail("the resumed member's request did not carry its charter")
            .await;
    }
    let after = r.d.member("lead").await;
    assert_eq!(after["session_id"], session, "the same session: {after}");
    r.timing(format!("resume test body {} ms", now_ms() - t_test));
    r.summary("resume");
}

/// A turn whose model answer is held 30 s (a slow or thinking model: nothing streams) is still
/// a turn: the member is never read idle in it, and the message queued meanwhile is pasted only
/// after the turn ended (the mock's last answer of it), exactly once.
async fn a_long_turn_holds_the_queue(cli: Cli) {
    let Some(mut r) = Rig::new(cli).await else {
        return;
    };
    r.start("lead", "primary").await;
    let (t1, sent1) = r
        .send("lead", "FLEET-HOLD-AFTER-TOOL FLEET-HOLD-30s Who are you?")
        .await;
    let tt = t1.clone();
    let accepted = r
        .wait(&format!("{t1} accepted"), TURN, |e| {
            is_receipt(e, &tt, "accepted")
        })
        .await;
    let (t2, _) = r.send("lead", "And now?").await;
    let t2b = t2.clone();
    let delivered = r
        .wait(
            &format!("{t2} delivered"),
            TURN + Duration::from_secs(30),
            |e| is_receipt(e, &t2b, "delivered"),
        )
        .await;
    let ended = r.mock.turn_ended_ms(cli.api(), &header(&t1));
    // Every `idle` between the first turn's start and the paste came after that turn ended.
    let idle_in_turn: Vec<String> = r
        .seen
        .iter()
        .filter(|e| {
            e.seq > accepted.seq
                && e.seq < delivered.seq
                && is_status(e, "lead", "idle")
                && ended.is_none_or(|end| e.at < end)
        })
        .map(|e| format!("{e:?}"))
        .collect();
    match ended {
        Some(end) if delivered.at >= end && idle_in_turn.is_empty() => {}
        _ => {
            r.fail(&format!(
                "{t2} was pasted into the held turn of {t1}: delivered at {}, the turn ended at {ended:?} (sent {sent1}); idle events before it: {idle_in_turn:?}",
                delivered.at
            ))
            .await
        }
    }
    r.turn_timings("lead", &t2, delivered.at).await;
    let t2c = t2.clone();
    r.wait(&format!("{t2} replied"), TURN, |e| {
        is_ticket(e, &t2c, "replied")
    })
    .await;
    let pasted = r.count(|e| is_receipt(e, &t2, "delivered"));
    assert_eq!(pasted, 1, "{t2} pasted {pasted} times");
    r.timing(format!(
        "held turn: accepted {} ms after send, {t2} delivered {} ms after the turn's last answer",
        accepted.at as i64 - sent1 as i64,
        delivered.at as i64 - ended.unwrap_or(0) as i64
    ));
    r.summary("hold");
}

/// A message queued while a permission dialog shows is held (its receipt stays `queued`) and
/// delivered after the operator answers the dialog (Enter through the input API).
async fn permission_holds_the_queue(cli: Cli) {
    let Some(mut r) = Rig::new(cli).await else {
        return;
    };
    let api = cli.api();
    let t_test = now_ms();
    r.start("lead", "primary").await;
    let (tp, sent) = r
        .send("lead", "FLEET-PERMISSION: run the command you are given.")
        .await;
    let blocked = r
        .wait("lead blocked on the permission dialog", TURN, |e| {
            is_status(e, "lead", "blocked")
        })
        .await;
    r.timing(format!("send -> blocked {} ms", blocked.at - sent));
    let tpc = tp.clone();
    r.wait(&format!("{tp} accepted"), TURN, |e| {
        is_receipt(e, &tpc, "accepted")
    })
    .await;
    let prompts_before = r.mock.user_prompts(api).len();

    // Held while the dialog shows.
    let (tq, _) = r
        .send("lead", "FLEET-TEXT: this one waits for the dialog.")
        .await;
    let tqc = tq.clone();
    if let Some(e) = r
        .within(HOLD, |e| {
            is_receipt(e, &tqc, "delivered")
                || status_of(e, "lead").is_some_and(|s| s.1 != "blocked" && e.seq > blocked.seq)
        })
        .await
    {
        r.fail(&format!(
            "while the dialog showed: {:?} (the queued message must wait, the lead stay blocked)",
            e.kind
        ))
        .await;
    }
    let tk = r.d.ticket(&tq).await;
    assert_eq!(tk["receipt"]["state"], "queued", "held message: {tk}");
    let m = r.d.member("lead").await;
    assert_eq!(m["status"], "blocked", "{m}");
    assert_eq!(
        r.mock.user_prompts(api).len(),
        prompts_before,
        "a prompt reached the model while the dialog showed"
    );
    assert!(
        !r.mock.perm_file().exists(),
        "the command ran before the dialog was answered"
    );

    // The operator answers the dialog (Enter = the first choice, allow once).
    let answered = now_ms();
    let _: Value =
        r.d.client
            .post("/members/lead/input", &json!({"text": "\r"}))
            .await
            .expect("input");
    let delivered = r
        .wait(&format!("{tq} delivered after the dialog"), TURN, |e| {
            is_receipt(e, &tqc, "delivered")
        })
        .await;
    let idle_between = r
        .seen
        .iter()
        .any(|e| e.seq > blocked.seq && e.seq < delivered.seq && is_status(e, "lead", "idle"));
    assert!(
        idle_between,
        "{tq} was delivered without the lead going idle after the dialog"
    );
    r.wait(&format!("{tq} accepted"), TURN, |e| {
        is_receipt(e, &tqc, "accepted")
    })
    .await;
    r.timing(format!(
        "dialog answered -> held message delivered {} ms",
        delivered.at as i64 - answered as i64
    ));
    assert!(
        r.mock.perm_file().exists(),
        "the approved command did not run ({})",
        r.mock.perm_file().display()
    );
    // The held message was its own turn, after the permission turn had ended.
    let prompts = r.mock.wait_prompts(api, prompts_before + 1, TURN).await;
    let hq = header(&tq);
    let pq: Vec<&String> = prompts.iter().filter(|p| p.contains(&hq)).collect();
    if pq.len() != 1 {
        r.fail(&format!("{tq} reached the model in {} prompts", pq.len()))
            .await;
    }
    if let Err(e) = same_prompt(
        cli,
        pq[0],
        &format!("{hq}\nFLEET-TEXT: this one waits for the dialog."),
    ) {
        r.fail(&e).await;
    }
    let endp = r.mock.turn_ended_ms(api, &header(&tp));
    let startq = r.mock.turn_started_ms(api, &hq);
    match (endp, startq) {
        (Some(e), Some(s)) if s >= e => {}
        other => {
            r.fail(&format!(
                "the held message's turn did not follow the permission turn (end, start) = {other:?}"
            ))
            .await
        }
    }
    r.timing(format!("permission test body {} ms", now_ms() - t_test));
    r.summary("permission");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_a_long_turn_holds_the_queue() {
    a_long_turn_holds_the_queue(Cli::Claude).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_a_long_turn_holds_the_queue() {
    a_long_turn_holds_the_queue(Cli::Codex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_a_long_turn_holds_the_queue() {
    a_long_turn_holds_the_queue(Cli::Gemini).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_a_long_turn_holds_the_queue() {
    a_long_turn_holds_the_queue(Cli::Opencode).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_round_trip() {
    round_trip(Cli::Claude).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_permission_dialog_holds_the_queue() {
    permission_holds_the_queue(Cli::Claude).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_resume_continues_the_conversation() {
    resume_continues_the_conversation(Cli::Claude).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_resume_continues_the_conversation() {
    resume_continues_the_conversation(Cli::Codex).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_resume_continues_the_conversation() {
    resume_continues_the_conversation(Cli::Gemini).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_resume_continues_the_conversation() {
    resume_continues_the_conversation(Cli::Opencode).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_round_trip() {
    round_trip(Cli::Codex).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_permission_dialog_holds_the_queue() {
    permission_holds_the_queue(Cli::Codex).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_round_trip() {
    round_trip(Cli::Gemini).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_permission_dialog_holds_the_queue() {
    permission_holds_the_queue(Cli::Gemini).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_round_trip() {
    round_trip(Cli::Opencode).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_permission_dialog_holds_the_queue() {
    permission_holds_the_queue(Cli::Opencode).await
}
