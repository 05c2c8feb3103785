//! The command line: `fleetd serve` runs the daemon; every other subcommand is a thin client of
//! its REST API (found through `--state-dir` or `FLEETD_STATE_DIR`), printing readable tables
//! for people and JSON (`--json`) for scripts.
//!
//! Owns argument parsing and presentation. Must never decide anything the daemon decides.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use serde_json::{Value, json};

use crate::client::{Client, ClientError};
use fleetd_actors::types::wire_name;

/// Human output. Member text (names aside, everything an agent wrote: replies, notes, exit
/// reasons, screens) never reaches the operator's terminal as control sequences: it is shown
/// through [`fleetd_actors::sanitize::for_display`]. `--json` output stays exact.
macro_rules! say {
    () => {
        println!()
    };
    ($($t:tt)*) => {
        println!("{}", fleetd_actors::sanitize::for_display(&format!($($t)*)))
    };
}

#[derive(Debug, Parser)]
#[command(
    name = "fleetd",
    version,
    about = "Runs a fleet of AI coding agents as one team.",
    propagate_version = true
)]
pub struct Cli {
    /// The daemon's state dir (its sockets, database and terminals live there).
    #[arg(long, global = true, env = "FLEETD_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run the daemon.
    Serve {
        /// Config file (TOML); without it, the built-in default (`fleetd config default`).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Run a command as a member (the operator's way to start the lead).
    Spawn {
        /// primary (the lead; one at a time), architect or worker.
        #[arg(long, required_unless_present = "resume", value_parser = ["primary", "architect", "worker"])]
        role: Option<String>,
        /// The member's name: 1-32 of A-Z a-z 0-9 . _ -
        #[arg(long, required_unless_present = "resume")]
        name: Option<String>,
        /// For an architect: the configured architect slot it binds.
        #[arg(long)]
        slot: Option<String>,
        /// The agent profile: claude, codex, gemini, opencode (wired with the fleet tools, the
        /// status hooks and the charter; `fleetd agents` shows them), sim or shell. Without it a
        /// command runs with the `generic` profile.
        #[arg(long)]
        profile: Option<String>,
        /// Restart this exited member with its conversation (same name, role, slot, charter).
        #[arg(long, conflicts_with_all = ["role", "name", "slot", "profile", "command"])]
        resume: Option<String>,
        /// Give the member its own git worktree and branch under the state dir (removed at
        /// its exit unless it holds commits or changes).
        #[arg(long)]
        worktree: bool,
        /// Print the daemon's JSON answer.
        #[arg(long)]
        json: bool,
        /// The command; without it, the profile's.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// The agent profiles: whether each CLI is installed, its version, and whether that version
    /// is one the profile was verified against.
    Agents {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// List members and architect slots.
    List {
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// Daemon status, or one member's.
    Status {
        /// A member's name (see `fleetd list`); without it, the daemon's status.
        name: Option<String>,
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// Send a message to a member (it lands when the member is idle).
    ///
    /// Exit status: 0 once the message is accepted (queued); with --wait, 0 on a reply (or the
    /// transcript tail), 3 when none came in time (the ticket stays open: `fleetd tickets ID`
    /// follows it), 1 when the ticket ended undeliverable or expired. To another host's lead:
    /// not from the operator (remote mail is the lead's: `fleet_send` to `lead@HOST`).
    Send {
        /// The member (see `fleetd list`).
        name: String,
        /// The message text (words are joined with spaces); `-` reads it from stdin.
        #[arg(required_unless_present = "file")]
        message: Vec<String>,
        /// Read the message from this file.
        #[arg(long, conflicts_with = "message")]
        file: Option<PathBuf>,
        /// Wait for the reply (bounded by --wait-secs, else the daemon's ticket TTL).
        #[arg(long)]
        wait: bool,
        /// Wait at most this long for the reply (implies --wait).
        #[arg(long, value_name = "SECS")]
        wait_secs: Option<u64>,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Reply to a ticket (from inside the member it was sent to, e.g. an agent hook).
    Reply {
        /// The ticket id (`t-N`).
        ticket: String,
        /// The reply text (words are joined with spaces); `-` reads it from stdin.
        #[arg(required_unless_present = "file")]
        message: Vec<String>,
        /// Read the reply from this file.
        #[arg(long, conflicts_with = "message")]
        file: Option<PathBuf>,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop a member.
    Stop {
        /// The member (see `fleetd list`).
        name: String,
        /// Let it work through its queue and finish its turn first; progress goes to stderr.
        #[arg(long)]
        drain: bool,
        /// With --drain: give up after this long (exit 3; the member keeps running). Default:
        /// the daemon's bound, the ticket TTL.
        #[arg(long, value_name = "SECS", requires = "drain")]
        drain_secs: Option<u64>,
        /// Print the daemon's answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Attach this terminal to a member's (keys in, screen out); Ctrl-] detaches.
    Attach {
        /// The member (see `fleetd list`).
        name: String,
    },
    /// Print a member's screen.
    Screen {
        /// The member (see `fleetd list`).
        name: String,
    },
    /// Tickets (all for the operator; for a member, its own), or one ticket.
    Tickets {
        /// One ticket's id (`t-N`): that ticket in full.
        id: Option<String>,
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// Your unacknowledged tickets (run inside a member, or as the operator).
    Poll {
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// Acknowledge a resolved ticket.
    Ack {
        /// The ticket id (`t-N`).
        ticket: String,
    },
    /// Follow the event stream (status changes, receipts, tickets, spawns).
    Events {
        /// Replay from after this sequence number (0 = everything the daemon still holds).
        #[arg(long, default_value_t = 0)]
        since: u64,
        /// Exit after this many events.
        #[arg(long)]
        count: Option<usize>,
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// Config tools.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Report this member's status from an agent hook (wins over screen rules).
    Signal {
        /// The state (working, idle, permission, question, exited; blocked = permission), or
        /// with --hook the hook's JSON payload when the CLI passes it as an argument (Codex's
        /// notify); without it the payload is read from stdin.
        arg: Option<String>,
        /// Report what an agent CLI's hook payload means (Claude Code, Gemini CLI, Codex's
        /// notify, fleetd's opencode plugin). Never fails the hook: problems go to stderr.
        #[arg(long)]
        hook: bool,
        /// With --hook: at a SessionStart, answer with this file as the session's additional
        /// context (how Gemini CLI members get their charter).
        #[arg(long, requires = "hook")]
        context: Option<PathBuf>,
    },
    /// The MCP server an agent's MCP config launches (stdio; forwards to the daemon).
    Mcp {
        /// Keep retrying the daemon this long when it is down (e.g. restarting).
        #[arg(long, default_value_t = 30)]
        reconnect_secs: u64,
    },
    /// A scripted terminal agent for the demo and tests.
    SimAgent(crate::sim::SimArgs),
    /// Run the demo: an embedded daemon, a lead, two workers.
    Demo {
        /// How long each sim worker "works".
        #[arg(long, default_value_t = 400)]
        work_ms: u64,
        /// Give up (and fail) if the demo has not finished within this long.
        #[arg(long, default_value_t = 90)]
        timeout_secs: u64,
    },
    /// Benchmarks against a baseline measured in the same run.
    Bench(crate::bench::BenchArgs),
    /// A bare rmcp echo server on stdio (the benchmark's baseline).
    #[command(hide = true)]
    EchoServer,
    /// Holds one member's PTY (started by the daemon).
    #[command(hide = true)]
    PtyHost(crate::term::HostArgs),
    /// Debug builds: make an actor panic (registry, tickets, slot:NAME, injector:NAME).
    #[command(hide = true)]
    Fault { target: String },
    /// Reload the daemon's config file (same as SIGHUP).
    Reload,
    /// The fleet in a browser, read-only and live: serves a page on a loopback port and prints
    /// a link that works once (it sets a session cookie); Ctrl-C stops it.
    Dashboard {
        /// The loopback port (0: any free one).
        #[arg(long, default_value_t = 0)]
        port: u16,
    },
    /// Peer hosts: each link's state (up/down since, last RTT, why it is down).
    Peers {
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// Decisions recorded in the ledger.
    Decision {
        #[command(subcommand)]
        cmd: DecisionCmd,
    },
    /// Offline checks of a ledger file.
    Ledger {
        #[command(subcommand)]
        cmd: LedgerCmd,
    },
    /// Create a host key (mode 0600) and KEYFILE.pub; prints the public key.
    Keygen {
        /// Where to write the private key (KEYFILE.pub gets the public one); never overwritten.
        #[arg(long)]
        out: PathBuf,
    },
    /// The drift protocol: append offline, check a KB offline, or ask the daemon.
    Drift {
        #[command(subcommand)]
        cmd: DriftCmd,
    },
}

#[derive(Debug, Subcommand)]
pub enum DriftCmd {
    /// Append a signed line to an identity's log in a KB directory (no daemon needed).
    Append {
        /// The KB directory (one `IDENTITY/DATE.jsonl` log per identity).
        #[arg(long)]
        kb: PathBuf,
        /// The host key to sign with (`fleetd keygen --out FILE`).
        #[arg(long)]
        key: PathBuf,
        /// The identity whose log gets the line.
        #[arg(long)]
        identity: String,
        /// fencepost, reanchor, drift, first_contact or peer_consistency_alert.
        #[arg(long = "type")]
        kind: String,
        /// The anchor's baseline text (fencepost, reanchor, first_contact).
        #[arg(long)]
        baseline: Option<String>,
        /// drift_delta as JSON (omit for null: a clean line).
        #[arg(long)]
        delta: Option<String>,
        /// The identity the line is about, if not the log's own.
        #[arg(long)]
        subject: Option<String>,
        /// RFC 3339; default now.
        #[arg(long)]
        ts: Option<String>,
        /// Default: one past the identity's highest tick.
        #[arg(long)]
        tick: Option<u64>,
        /// first_contact: peer_consensus or operator_default.
        #[arg(long)]
        source: Option<String>,
    },
    /// Evaluate every peer in a KB as SELF would at NOW, trusting only the given signer keys;
    /// prints one JSON object per peer. Exits 0 even when peers are untrusted.
    Check {
        /// The KB directory to read.
        #[arg(long)]
        kb: PathBuf,
        /// The identity doing the reading (its circle and its own log decide the gates).
        #[arg(long = "self")]
        reader: String,
        /// RFC 3339; default now.
        #[arg(long)]
        now: Option<String>,
        /// A trusted signer: a base64 public key or a FILE.pub (repeatable).
        #[arg(long)]
        trust: Vec<String>,
        /// Circles, TTLs, skew, fleet-wide drift and `drift.trust` from a config file.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// The daemon's pullers' view of every peer, and the alerts.
    Peers {
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum DecisionCmd {
    /// Every decision, newest first, with age and missing slots.
    List {
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
    /// One decision, whole: who said what in which round, timeouts, outcome, verdict.
    Show {
        /// The decision's id (`d-N`, see `fleetd decision list`).
        id: String,
        /// Print JSON (exactly what the daemon answered) instead of text for people.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum LedgerCmd {
    /// Recompute the hash chain and check every checkpoint; exits non-zero at the first bad
    /// line (1), or on a torn final line (3).
    Verify {
        /// The ledger file (`STATE_DIR/ledger.jsonl`).
        path: PathBuf,
        /// The host's public key (base64, a .pub file, or a signed-note verifier key); without
        /// it, `host.key.pub` beside the ledger if there is one.
        #[arg(long)]
        key: Option<String>,
        /// A peer's state dir: check the ledger against the checkpoints that peer witnessed
        /// (catches a history rewritten and re-signed with this host's own key).
        #[arg(long)]
        witness: Vec<PathBuf>,
        /// Check only the hash chain and structure, knowingly without signatures (without it,
        /// a verification that could check no signature fails, exit 4).
        #[arg(long)]
        no_signatures: bool,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Print the built-in default config, commented.
    Default,
    /// Check a config file (or the default); fails on any problem.
    Check {
        /// The config file; without it, the built-in default.
        file: Option<PathBuf>,
    },
    /// Print the effective config: FILE layered over the built-in default (what a daemon
    /// started with `--config FILE` runs), or the default alone.
    Show {
        /// The config file; without it, the built-in default.
        file: Option<PathBuf>,
    },
}

/// A command that ran and failed in a way with its own exit status (e.g. `send --wait` that
/// got no reply in time: 3). The message goes to stderr as any error's does.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failed {
    pub code: u8,
    pub message: String,
}

impl Failed {
    pub fn new(code: u8, message: String) -> Self {
        Failed { code, message }
    }
}

/// The largest message the CLI reads from stdin or a file (the daemon's own limit,
/// `injector.max_message_bytes`, is smaller by default and says so).
const MAX_MESSAGE_INPUT: u64 = 1 << 20;

/// A message's text: the words joined, or stdin for `-`, or a file; bounded by bytes read.
fn message_text(words: &[String], file: Option<&Path>) -> anyhow::Result<String> {
    use std::io::Read;
    let (what, reader): (String, Box<dyn Read>) = match (file, words) {
        (Some(f), _) => (
            f.display().to_string(),
            Box::new(
                std::fs::File::open(f).with_context(|| format!("message file {}", f.display()))?,
            ),
        ),
        (None, [dash]) if dash == "-" => ("stdin".into(), Box::new(std::io::stdin())),
        (None, words) => return Ok(words.join(" ")),
    };
    let mut buf = Vec::new();
    reader
        .take(MAX_MESSAGE_INPUT + 1)
        .read_to_end(&mut buf)
        .with_context(|| format!("reading the message from {what}"))?;
    anyhow::ensure!(
        buf.len() as u64 <= MAX_MESSAGE_INPUT,
        "the message from {what} is over {} MiB; send a path to the text instead",
        MAX_MESSAGE_INPUT >> 20
    );
    let text = String::from_utf8(buf)
        .map_err(|_| anyhow::anyhow!("the message from {what} is not UTF-8 text"))?;
    let text = text.strip_suffix('\n').unwrap_or(&text).to_string();
    anyhow::ensure!(!text.trim().is_empty(), "the message from {what} is empty");
    Ok(text)
}

/// `stop --drain`: ask the daemon to drain and stop, and meanwhile say on stderr what it waits
/// for. Past `drain_secs` the request is dropped (the daemon then stops waiting and the member
/// keeps running) and the command fails with status 3.
async fn drain_then_stop(c: &Client, name: &str, drain_secs: Option<u64>) -> anyhow::Result<Value> {
    let started = std::time::Instant::now();
    let path = format!("/members/{name}?drain=true");
    let stop = c.delete::<Value>(&path);
    tokio::pin!(stop);
    let bound = drain_secs.map(Duration::from_secs);
    let mut last = String::new();
    loop {
        let tick = tokio::time::sleep(Duration::from_secs(1));
        tokio::select! {
            r = &mut stop => return r.map_err(api),
            _ = tick => {}
        }
        let waited = started.elapsed();
        if let Some(b) = bound
            && waited >= b
        {
            return Err(Failed::new(
                3,
                format!(
                    "{name} did not drain within {} s ({last}); it keeps running: `fleetd stop {name}` stops it now",
                    b.as_secs()
                ),
            )
            .into());
        }
        // Progress, when it changes: what the drain still waits for.
        if let Ok(m) = c.get::<Value>(&format!("/members/{name}")).await {
            let queued = m["queue"]["queued"].as_array().map_or(0, |a| a.len());
            let in_flight = !m["queue"]["in_flight"].is_null();
            let now = format!(
                "{queued} queued{}, status {}",
                if in_flight {
                    ", one being delivered"
                } else {
                    ""
                },
                s(&m["status"])
            );
            if now != last {
                eprintln!(
                    "{}",
                    fleetd_actors::sanitize::for_display(&format!(
                        "draining {name}: {now} ({} s); waits for an empty queue and an idle member",
                        waited.as_secs()
                    ))
                );
                last = now;
            }
        }
    }
}

fn state_dir(cli: &Option<PathBuf>) -> anyhow::Result<PathBuf> {
    cli.clone()
        .context("no state dir: pass --state-dir DIR or set FLEETD_STATE_DIR")
}

fn client(cli: &Option<PathBuf>) -> anyhow::Result<Client> {
    Ok(Client::new(&state_dir(cli)?))
}

/// An API refusal, printed as the daemon worded it, addressed to the operator: the fleet tools
/// the CLI has a command for are named by that command (`fleetd list`, not `fleet_list`).
fn api(e: ClientError) -> anyhow::Error {
    match e {
        ClientError::Api(mut f) => {
            f.refused = for_operator(&f.refused);
            f.accepted = for_operator(&f.accepted);
            anyhow::Error::new(f)
        }
        other => anyhow::Error::new(other),
    }
}

/// `fleet_X` -> `` `fleetd X` `` for the tools the CLI has a command of the same name for.
fn for_operator(text: &str) -> String {
    const SAME: [&str; 8] = [
        "list", "send", "stop", "spawn", "status", "poll", "ack", "reply",
    ];
    let mut out = text.to_string();
    for c in SAME {
        let tool = format!("fleet_{c}");
        let mut from = 0;
        while let Some(i) = out[from..].find(&tool).map(|i| i + from) {
            let end = i + tool.len();
            let word_ends = out[end..]
                .chars()
                .next()
                .is_none_or(|ch| !(ch.is_alphanumeric() || ch == '_'));
            let cmd = format!("`fleetd {c}`");
            if word_ends {
                // A tool name already in backticks keeps one pair.
                let (i, end) = if out[..i].ends_with('`') && out[end..].starts_with('`') {
                    (i - 1, end + 1)
                } else {
                    (i, end)
                };
                out.replace_range(i..end, &cmd);
                from = i + cmd.len();
            } else {
                from = end;
            }
        }
    }
    out
}

/// JSON output: exact (it parses to what the daemon sent), with the characters a terminal could
/// act on written as `\uXXXX` escapes.
fn print_json(v: &Value) {
    let text = serde_json::to_string_pretty(v).unwrap_or_default();
    println!("{}", fleetd_actors::sanitize::json_for_terminal(&text));
}

fn ago(ms: Option<u64>) -> String {
    let Some(ms) = ms else { return "-".into() };
    let now = fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock);
    let s = now.saturating_sub(ms) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        _ => format!("{}h", s / 3600),
    }
}

/// Print rows as aligned columns.
fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut w: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let s: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = w[i]))
            .collect();
        say!("{}", s.join("  ").trim_end());
    };
    line(header.iter().map(|s| s.to_string()).collect());
    for r in rows {
        line(r);
    }
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn print_members(v: &Value) {
    let rows = v["members"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            vec![
                s(&m["name"]),
                s(&m["role"]),
                s(&m["slot"]),
                s(&m["status"]),
                ago(m["status_since"].as_u64()),
                s(&m["parent"]),
                s(&m["pid"]),
                s(&m["profile"]),
                s(&m["worktree"]["branch"]),
                m["exit"]["reason"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    table(
        &[
            "NAME", "ROLE", "SLOT", "STATUS", "FOR", "PARENT", "PID", "PROFILE", "WORKTREE", "EXIT",
        ],
        rows,
    );
    let slots: Vec<Vec<String>> = v["architect_slots"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|x| {
            vec![
                s(&x["slot"]),
                s(&x["state"]),
                s(&x["member"]),
                s(&x["waiting"]),
            ]
        })
        .collect();
    if !slots.is_empty() {
        say!();
        table(&["SLOT", "STATE", "MEMBER", "WAITING"], slots);
    }
    if let Some(c) = v.get("coordinator") {
        say!();
        say!(
            "coordinator {}: mailbox {} ({} held)",
            s(&c["coord_id"]),
            s(&c["mailbox"]["state"]),
            s(&c["mailbox"]["held"])
        );
    }
}

fn print_agents(v: &Value) {
    let rows = v
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|a| {
            vec![
                s(&a["profile"]),
                s(&a["agent"]),
                s(&a["command"]),
                a["path"].as_str().unwrap_or("not installed").to_string(),
                s(&a["version"]),
                match a["verified"].as_bool() {
                    Some(true) => "yes".into(),
                    Some(false) => format!("no (verified: {})", s(&a["verified_versions"])),
                    None => "-".into(),
                },
            ]
        })
        .collect();
    table(
        &["PROFILE", "AGENT", "COMMAND", "PATH", "VERSION", "VERIFIED"],
        rows,
    );
}

/// A hook's payload on stdin: bounded (1 MiB), and an error rather than a wait if it never
/// ends (stdin is a terminal).
async fn read_hook_stdin() -> anyhow::Result<String> {
    use tokio::io::AsyncReadExt;
    let mut buf = Vec::new();
    let limit = 1 << 20;
    tokio::time::timeout(
        Duration::from_secs(2),
        tokio::io::stdin().take(limit + 1).read_to_end(&mut buf),
    )
    .await
    .context("no hook payload on stdin within 2 s (pass it as an argument, or pipe it)")??;
    anyhow::ensure!(
        buf.len() as u64 <= limit,
        "the hook payload is over {limit} bytes"
    );
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// A ticket's receipt state: the remote one for mail to another host.
fn ticket_receipt(t: &Value) -> String {
    if t["remote"].is_object() {
        s(&t["remote"]["state"])
    } else {
        s(&t["receipt"]["state"])
    }
}

/// A time as RFC 3339 with how long ago, or `-`.
fn when(ms: &Value) -> String {
    match ms.as_u64() {
        Some(m) => format!(
            "{} ({} ago)",
            fleetd_actors::clock::rfc3339(m),
            ago(Some(m))
        ),
        None => "-".into(),
    }
}

/// One ticket, for a person (`fleetd tickets ID`; `--json` prints the daemon's answer).
fn print_ticket(t: &Value) {
    say!(
        "{} ({}) {} -> {}: {}",
        s(&t["id"]),
        s(&t["kind"]),
        s(&t["from"]),
        s(&t["to"]),
        s(&t["state"])
    );
    say!("  subject   {}", s(&t["subject"]));
    say!("  opened    {}", when(&t["created_at"]));
    say!(
        "  expires   {}",
        fleetd_actors::clock::rfc3339(t["expires_at"].as_u64().unwrap_or(0))
    );
    if t["remote"].is_object() {
        let r = &t["remote"];
        say!(
            "  mail      to {}: {} (transmitted {}, delivered {})",
            s(&r["host"]),
            s(&r["state"]),
            when(&r["transmitted_at"]),
            when(&r["delivered_at"])
        );
    } else if t["receipt"].is_object() {
        let r = &t["receipt"];
        say!(
            "  receipt   {} {} (queued {}, delivered {}){}",
            s(&r["msg"]),
            s(&r["state"]),
            when(&r["queued_at"]),
            when(&r["delivered_at"]),
            r["note"]
                .as_str()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
    }
    if t["origin"].is_object() {
        say!(
            "  from      lead@{} (their {})",
            s(&t["origin"]["host"]),
            s(&t["origin"]["ticket"])
        );
    }
    for (label, key) in [("reply", "reply"), ("tail", "tail")] {
        if let Some(text) = t[key]["text"].as_str() {
            say!("  {label:<9} at {}", when(&t[key]["at"]));
            for line in text.lines() {
                say!("    {line}");
            }
        }
    }
    if let Some(late) = t["late"].as_array().filter(|l| !l.is_empty()) {
        say!(
            "  late      {} replies after the TTL (kept, refused)",
            late.len()
        );
    }
    if let Some(n) = t["note"].as_str() {
        say!("  note      {n}");
    }
    say!(
        "  acked     {}",
        if t["acked"] == true { "yes" } else { "no" }
    );
}

fn print_tickets(v: &Value) {
    let rows = v
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            let answer = t["reply"]["text"]
                .as_str()
                .or(t["tail"]["text"].as_str())
                .or(t["note"].as_str())
                .unwrap_or("");
            vec![
                s(&t["id"]),
                s(&t["kind"]),
                s(&t["from"]),
                s(&t["to"]),
                s(&t["state"]),
                ticket_receipt(t),
                ago(t["created_at"].as_u64()),
                fleetd_actors::types::truncate(
                    &t["subject"].as_str().unwrap_or("").replace('\n', " "),
                    30,
                ),
                fleetd_actors::types::truncate(&answer.replace('\n', " "), 50),
            ]
        })
        .collect();
    table(
        &[
            "TICKET", "KIND", "FROM", "TO", "STATE", "RECEIPT", "AGE", "SUBJECT", "ANSWER",
        ],
        rows,
    );
}

/// An optional value for a person: the value, or `-`.
fn opt<T: std::fmt::Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), |v| v.to_string())
}

fn describe_event(e: &fleetd_actors::events::Event) -> String {
    use fleetd_actors::events::EventKind as K;
    let body = match &e.kind {
        K::Spawned {
            member,
            role,
            parent,
            pid,
            ..
        } => format!("spawned {member} ({role}) by {parent}, pid {}", opt(pid)),
        K::Adopted { member, pid } => format!("re-adopted {member}, pid {}", opt(pid)),
        K::Status {
            member,
            from,
            to,
            cause,
            ..
        } => format!("{member}: {from} -> {to} ({cause})"),
        K::Exited { member, reason, .. } => format!("{member} exited: {reason}"),
        K::Reaped { member, idle_ms } => format!("{member} reaped after {} s idle", idle_ms / 1000),
        K::Receipt {
            msg,
            target,
            state,
            note,
            ..
        } => {
            format!(
                "{msg} to {target}: {}{}",
                wire_name(state),
                note.as_ref().map(|n| format!(" ({n})")).unwrap_or_default()
            )
        }
        K::Ticket {
            ticket,
            from,
            to,
            state,
            ..
        } => format!("{ticket} {from} -> {to}: {}", wire_name(state)),
        K::Restarted {
            child,
            attempt,
            reason,
        } => format!("restarted {child} (attempt {attempt}): {reason}"),
        K::Escalated { reason } => format!("ESCALATED: {reason}"),
        K::ConfigReloaded { ok, detail } => format!(
            "config reload {}: {detail}",
            if *ok { "ok" } else { "refused" }
        ),
        K::DriftAlert { peer, rule, text } => format!("DRIFT ALERT ({rule}) about {peer}: {text}"),
        K::Link { peer, up, detail } => {
            if *up {
                format!("link to {peer} up ({detail})")
            } else {
                format!("link to {peer} down: {detail}")
            }
        }
        K::LinkRefused { detail } => format!("link refused: {detail}"),
        K::Witnessed { peer, origin, size } => {
            format!("witnessed {origin} of {peer} at size {size}")
        }
        K::Cosigned { witness, size } => {
            format!("{witness} cosigned this host's ledger at size {size}")
        }
        K::AnchorsPulled { peer, anchors } => {
            format!("drift: pulled {anchors} verified anchors from {peer}")
        }
        K::MailHanded {
            peer,
            envelope,
            their_ticket,
            ticket,
        } => format!(
            "mail #{envelope} from lead@{peer} (their {their_ticket}) handed to the lead as {ticket}"
        ),
        K::DriftLine {
            identity,
            kind,
            tick,
        } => format!("drift: {identity} logged {kind} (tick {tick})"),
        K::DriftPass {
            peers,
            untrusted,
            late,
            took_us,
            kb_error,
        } => match kb_error {
            Some(e) => format!(
                "drift pass: the KB could not be read ({e}); {peers} peers keep their last reports"
            ),
            None => format!(
                "drift pass: {peers} peers, {untrusted} untrusted, {late} late, {:.1} ms",
                *took_us as f64 / 1000.0
            ),
        },
        K::Decision {
            decision,
            action,
            slot,
            outcome,
            ledger_seq: seq,
        } => format!(
            "{decision} {action}{}{}{}",
            slot.as_ref()
                .map(|s| format!(" by slot {s}"))
                .unwrap_or_default(),
            outcome
                .map(|o| format!(" ({})", wire_name(&o)))
                .unwrap_or_default(),
            seq.map(|s| format!(" [ledger #{s}]")).unwrap_or_default()
        ),
    };
    format!(
        "{:>6} {} {body}",
        e.seq,
        fleetd_actors::clock::rfc3339(e.at)
    )
}

async fn attach(c: &Client, name: &str) -> anyhow::Result<()> {
    use nix::sys::termios::{SetArg, cfmakeraw, tcgetattr, tcsetattr};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stdin = std::io::stdin();
    anyhow::ensure!(
        nix::unistd::isatty(&stdin).unwrap_or(false),
        "attach needs a terminal on stdin"
    );
    let (rows, cols) = term_size().unwrap_or((40, 120));
    let (rows, cols) = fleetd_actors::term::clamp_size(rows, cols);
    let conn = c.attach(name, rows, cols).await.map_err(api)?;
    let saved = tcgetattr(&stdin)?;
    let mut raw = saved.clone();
    cfmakeraw(&mut raw);
    tcsetattr(&stdin, SetArg::TCSANOW, &raw)?;
    eprint!("[attached to {name}; Ctrl-] detaches]\r\n");
    let (mut rd, mut wr) = tokio::io::split(conn);
    let (key_tx, mut key_rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = [0u8; 1024];
        let mut stdin = std::io::stdin().lock();
        while let Ok(n) = stdin.read(&mut buf) {
            if n == 0 || key_tx.blocking_send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut buf = vec![0u8; 16 * 1024];
    let mut stdout = tokio::io::stdout();
    let why = loop {
        tokio::select! {
            n = rd.read(&mut buf) => match n {
                Ok(0) | Err(_) => break "the member's terminal closed",
                Ok(n) => { let _ = stdout.write_all(&buf[..n]).await; let _ = stdout.flush().await; }
            },
            k = key_rx.recv() => match k {
                Some(k) => {
                    if let Some(i) = k.iter().position(|&b| b == 0x1d) {
                        let _ = wr.write_all(&k[..i]).await;
                        break "detached";
                    }
                    if wr.write_all(&k).await.is_err() { break "the daemon closed the connection" }
                }
                None => break "end of input",
            },
        }
    };
    tcsetattr(&stdin, SetArg::TCSANOW, &saved)?;
    eprintln!("\r\n[{why}; {name} keeps running]");
    Ok(())
}

fn term_size() -> Option<(u16, u16)> {
    let ws = rustix::termios::tcgetwinsize(std::io::stdout()).ok()?;
    (ws.ws_row > 0).then_some((ws.ws_row, ws.ws_col))
}

/// Run a client subcommand.
pub async fn run_client(cli: Cli) -> anyhow::Result<()> {
    let sd = cli.state_dir.clone();
    match cli.cmd {
        Cmd::Spawn {
            role,
            name,
            slot,
            profile,
            resume,
            worktree,
            json,
            command,
        } => {
            let cwd = std::env::current_dir()
                .ok()
                .map(|p| p.display().to_string());
            let body = match resume {
                Some(r) => json!({"resume": r, "worktree": worktree}),
                None => json!({"role": role, "name": name, "slot": slot, "profile": profile,
                    "command": if command.is_empty() { Value::Null } else { json!(command) },
                    "cwd": cwd, "worktree": worktree}),
            };
            let v: Value = client(&sd)?.post("/members", &body).await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                say!(
                    "spawned {} ({}, profile {}) pid {} charter sha256 {}",
                    s(&v["name"]),
                    s(&v["role"]),
                    s(&v["profile"]),
                    s(&v["pid"]),
                    s(&v["charter_sha256"])
                );
                for n in v["notes"].as_array().cloned().unwrap_or_default() {
                    say!("  {}", s(&n));
                }
            }
        }
        Cmd::List { json } => {
            let v: Value = client(&sd)?.get("/members").await.map_err(api)?;
            if json {
                print_json(&v)
            } else {
                print_members(&v)
            }
        }
        Cmd::Status { name, json } => {
            let c = client(&sd)?;
            match name {
                Some(n) => {
                    let v: Value = c.get(&format!("/members/{n}")).await.map_err(api)?;
                    if json {
                        print_json(&v);
                    } else {
                        say!(
                            "{} ({}{})",
                            s(&v["name"]),
                            s(&v["role"]),
                            v["slot"]
                                .as_str()
                                .map(|x| format!(", slot {x}"))
                                .unwrap_or_default()
                        );
                        say!(
                            "  status     {} for {}{}",
                            s(&v["status"]),
                            ago(v["status_since"].as_u64()),
                            if v["slot_view"]["pinned_by_signal"] == true {
                                " (by signal)"
                            } else {
                                ""
                            }
                        );
                        say!("  parent     {}", s(&v["parent"]));
                        say!("  pid        {}", s(&v["pid"]));
                        say!("  profile    {}", s(&v["profile"]));
                        say!("  charter    sha256 {}", s(&v["charter_sha256"]));
                        say!(
                            "  queue      {} waiting{}",
                            v["queue"]["queued"].as_array().map_or(0, |a| a.len()),
                            if v["queue"]["stalled"] == true {
                                ", held behind a stalled message"
                            } else {
                                ""
                            }
                        );
                        say!(
                            "  owes       {}",
                            v["owes"]
                                .as_array()
                                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
                                .unwrap_or_default()
                        );
                        if let Some(r) = v["exit"]["reason"].as_str() {
                            say!("  exit       {r}");
                        }
                    }
                }
                None => {
                    let v: Value = c.get("/status").await.map_err(api)?;
                    if json {
                        print_json(&v);
                    } else {
                        say!(
                            "fleetd {} on {} (pid {}), up {}",
                            s(&v["version"]),
                            s(&v["host"]),
                            s(&v["pid"]),
                            ago(v["started_at"].as_u64())
                        );
                        say!("  state dir  {}", s(&v["state_dir"]));
                        say!(
                            "  members    {}",
                            v["members"]
                                .as_object()
                                .map(|m| m
                                    .iter()
                                    .map(|(k, n)| format!("{n} {k}"))
                                    .collect::<Vec<_>>()
                                    .join(", "))
                                .unwrap_or_default()
                        );
                        say!("  tickets    {} open", s(&v["open_tickets"]));
                        let restarts: u64 = v["children"]
                            .as_array()
                            .map(|a| a.iter().filter_map(|c| c["restarts_total"].as_u64()).sum())
                            .unwrap_or(0);
                        say!(
                            "  actors     {} supervised, {restarts} restarts",
                            v["children"].as_array().map_or(0, |a| a.len())
                        );
                        say!("  public key {}", s(&v["public_key"]));
                        say!(
                            "  ledger     {} entries{}; verifier key {}",
                            s(&v["ledger"]["entries"]),
                            v["ledger"]["broken"]
                                .as_str()
                                .map(|b| format!(" (BROKEN: {b})"))
                                .unwrap_or_default(),
                            s(&v["ledger_vkey"])
                        );
                        say!("  witness    cosigner key {}", s(&v["witness_vkey"]));
                        let open = v["open_decisions"].as_array().cloned().unwrap_or_default();
                        say!(
                            "  decisions  {} open{}",
                            open.len(),
                            open.iter()
                                .map(|d| format!(
                                    "; {} missing {}",
                                    s(&d["id"]),
                                    d["missing"]
                                        .as_array()
                                        .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                                        .unwrap_or_default()
                                ))
                                .collect::<String>()
                        );
                        if let Some(e) = v["escalation"].as_str() {
                            say!("  ESCALATED  {e}");
                        }
                    }
                }
            }
        }
        Cmd::Send {
            name,
            message,
            file,
            wait,
            wait_secs,
            json,
        } => {
            let text = message_text(&message, file.as_deref())?;
            let wait = wait || wait_secs.is_some();
            let body = json!({"message": text, "wait": wait, "wait_secs": wait_secs});
            let v: Value = client(&sd)?
                .post(&format!("/members/{name}/messages"), &body)
                .await
                .map_err(api)?;
            let t = &v["ticket"];
            if json {
                print_json(&v);
            } else {
                say!(
                    "{} to {}: {} (receipt {})",
                    s(&t["id"]),
                    s(&t["to"]),
                    s(&t["state"]),
                    s(&t["receipt"]["state"])
                );
                if let Some(r) = t["reply"]["text"].as_str().or(t["tail"]["text"].as_str()) {
                    say!("{r}");
                }
            }
            if wait {
                match t["state"].as_str() {
                    Some("replied" | "tail") => {}
                    Some("open") => {
                        return Err(Failed::new(
                            3,
                            format!(
                                "no reply {}: ticket {} is still open (receipt {}); `fleetd tickets {}` follows it",
                                wait_secs.map_or("within the daemon's wait bound".to_string(), |w| format!("within {w} s")),
                                s(&t["id"]),
                                s(&t["receipt"]["state"]),
                                s(&t["id"])
                            ),
                        )
                        .into());
                    }
                    other => {
                        return Err(Failed::new(
                            1,
                            format!(
                                "ticket {} ended {} without a reply{}",
                                s(&t["id"]),
                                other.unwrap_or("?"),
                                t["receipt"]["note"]
                                    .as_str()
                                    .map(|n| format!(": {n}"))
                                    .unwrap_or_default()
                            ),
                        )
                        .into());
                    }
                }
            }
        }
        Cmd::Reply {
            ticket,
            message,
            file,
            json,
        } => {
            let text = message_text(&message, file.as_deref())?;
            let v: Value = client(&sd)?
                .post(
                    &format!("/tickets/{ticket}/reply"),
                    &json!({"message": text}),
                )
                .await
                .map_err(api)?;
            if json {
                print_json(&v)
            } else {
                say!("replied to {}", s(&v["id"]))
            }
        }
        Cmd::Stop {
            name,
            drain,
            drain_secs,
            json,
        } => {
            let c = client(&sd)?;
            let v: Value = if drain {
                drain_then_stop(&c, &name, drain_secs).await?
            } else {
                c.delete(&format!("/members/{name}")).await.map_err(api)?
            };
            if json {
                print_json(&v)
            } else {
                say!("{} stopped: {}", s(&v["name"]), s(&v["exit"]["reason"]))
            }
        }
        Cmd::Attach { name } => attach(&client(&sd)?, &name).await?,
        Cmd::Screen { name } => {
            let t = client(&sd)?
                .get_text(&format!("/members/{name}/screen"))
                .await
                .map_err(api)?;
            say!("{t}");
        }
        Cmd::Tickets { id, json } => {
            let c = client(&sd)?;
            match id {
                Some(id) => {
                    let v: Value = c.get(&format!("/tickets/{id}")).await.map_err(api)?;
                    if json {
                        print_json(&v)
                    } else {
                        print_ticket(&v)
                    }
                }
                None => {
                    let v: Value = c.get("/tickets").await.map_err(api)?;
                    if json {
                        print_json(&v)
                    } else {
                        print_tickets(&v)
                    }
                }
            }
        }
        Cmd::Poll { json } => {
            let v: Value = client(&sd)?.get("/poll").await.map_err(api)?;
            if json {
                print_json(&v)
            } else {
                print_tickets(&v)
            }
        }
        Cmd::Ack { ticket } => {
            let _: Value = client(&sd)?
                .post(&format!("/tickets/{ticket}/ack"), &json!({}))
                .await
                .map_err(api)?;
            say!("acknowledged {ticket}");
        }
        Cmd::Events { since, count, json } => {
            let mut st = client(&sd)?.events(since).await.map_err(api)?;
            let mut n = 0;
            let mut out = std::io::stdout();
            while let Some(e) = st.next().await {
                let e = e.map_err(api)?;
                if json {
                    let text = serde_json::to_string(&e).unwrap_or_default();
                    let _ = writeln!(out, "{}", fleetd_actors::sanitize::json_for_terminal(&text));
                } else {
                    let text = describe_event(&e);
                    let _ = writeln!(out, "{}", fleetd_actors::sanitize::for_display(&text));
                }
                let _ = out.flush();
                n += 1;
                if count.is_some_and(|c| n >= c) {
                    break;
                }
            }
        }
        Cmd::Signal {
            arg, hook: false, ..
        } => {
            let Some(state) = arg else {
                anyhow::bail!(
                    "fleetd signal needs a state: {}",
                    fleetd_actors::hooks::STATES
                );
            };
            let _: Value = client(&sd)?
                .post("/signal", &json!({"status": state}))
                .await
                .map_err(api)?;
        }
        Cmd::Signal {
            arg,
            hook: true,
            context,
        } => {
            // An agent waits for its hook: bounded, and never a failure it would act on. Its
            // stdout goes to the model (Claude Code) or is parsed (Gemini CLI): nothing is
            // printed there but the context asked for.
            let sent = tokio::time::timeout(Duration::from_secs(5), async {
                let payload = match arg {
                    Some(a) => a,
                    None => read_hook_stdin().await?,
                };
                let v: Value =
                    serde_json::from_str(&payload).context("the hook payload is not JSON")?;
                // A resumed session has its charter already (in its history).
                let starts = v["hook_event_name"] == "SessionStart" && v["source"] != "resume";
                let _: Value = client(&sd)?
                    .post("/signal", &json!({"hook": v}))
                    .await
                    .map_err(api)?;
                if let (Some(file), true) = (context, starts) {
                    let text = std::fs::read(&file)
                        .with_context(|| format!("the context file {}", file.display()))?;
                    anyhow::ensure!(text.len() <= 1 << 20, "{} is over 1 MiB", file.display());
                    let out = json!({"hookSpecificOutput": {
                        "hookEventName": "SessionStart",
                        "additionalContext": String::from_utf8_lossy(&text),
                    }});
                    println!("{out}");
                }
                anyhow::Ok(())
            })
            .await;
            match sent {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!(
                    "fleetd signal --hook: {}",
                    fleetd_actors::sanitize::for_display(&crate::entry::report(&e))
                ),
                Err(_) => eprintln!("fleetd signal --hook: the daemon did not answer within 5 s"),
            }
        }
        Cmd::Agents { json } => {
            // The daemon's view (its config, its PATH), or, with no daemon, this shell's with
            // the built-in profiles.
            let remote = match client(&sd) {
                Ok(c) => c.get::<Value>("/agents").await.ok(),
                Err(_) => None,
            };
            let v = match remote {
                Some(v) => v,
                None => {
                    eprintln!(
                        "(no daemon answered: the built-in profiles, checked on this shell's PATH)"
                    );
                    serde_json::to_value(
                        crate::doctor::check(&fleetd_actors::config::Config::default()).await,
                    )?
                }
            };
            if json {
                print_json(&v);
            } else {
                print_agents(&v);
            }
        }
        Cmd::Fault { target } => {
            let _: Value = client(&sd)?
                .post("/debug/fault", &json!({"target": target}))
                .await
                .map_err(api)?;
            say!("fault injected into {target}");
        }
        Cmd::Decision {
            cmd: DecisionCmd::List { json },
        } => {
            let v: Value = client(&sd)?.get("/decisions").await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                let rows = v
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|d| {
                        vec![
                            s(&d["id"]),
                            s(&d["state"]),
                            ago(Some(
                                fleetd_actors::clock::Clock::now(
                                    &fleetd_actors::clock::SystemClock,
                                )
                                .saturating_sub(d["age_ms"].as_u64().unwrap_or(0)),
                            )),
                            d["slots"]
                                .as_array()
                                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                                .unwrap_or_default(),
                            d["missing"]
                                .as_array()
                                .map(|a| a.iter().map(s).collect::<Vec<_>>().join(","))
                                .unwrap_or_default(),
                            s(&d["deadline"]),
                            fleetd_actors::types::truncate(d["subject"].as_str().unwrap_or(""), 50),
                        ]
                    })
                    .collect();
                table(
                    &[
                        "DECISION", "STATE", "AGE", "SLOTS", "MISSING", "DEADLINE", "SUBJECT",
                    ],
                    rows,
                );
            }
        }
        Cmd::Decision {
            cmd: DecisionCmd::Show { id, json },
        } => {
            let v: Value = client(&sd)?
                .get(&format!("/decisions/{id}"))
                .await
                .map_err(api)?;
            if json {
                print_json(&v);
            } else {
                print_decision(&v);
            }
        }
        Cmd::Peers { json } => {
            let v: Value = client(&sd)?.get("/peers").await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                say!(
                    "this host: {} (key {}), links {}",
                    s(&v["host"]),
                    s(&v["public_key"]),
                    v["listen"]
                        .as_str()
                        .map_or("off (link.listen is not set)".to_string(), |l| format!(
                            "on {l}"
                        ))
                );
                let rows = v["links"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|l| {
                        vec![
                            s(&l["peer"]),
                            s(&l["addr"]),
                            s(&l["phase"]),
                            ago(l["since"].as_u64()),
                            l["rtt_us"]
                                .as_u64()
                                .map_or("-".into(), |r| format!("{:.2} ms", r as f64 / 1000.0)),
                            match l["dialled"].as_bool() {
                                Some(true) => "dialled".into(),
                                Some(false) => "accepted".into(),
                                None => "-".into(),
                            },
                            l["reason"].as_str().unwrap_or("").to_string(),
                        ]
                    })
                    .collect();
                table(
                    &["PEER", "ADDR", "STATE", "SINCE", "RTT", "BY", "WHY DOWN"],
                    rows,
                );
            }
        }
        Cmd::Drift {
            cmd: DriftCmd::Peers { json },
        } => {
            let v: Value = client(&sd)?.get("/drift").await.map_err(api)?;
            if json {
                print_json(&v);
            } else {
                say!(
                    "reader {} (the live primary), heartbeat {} s, last pass {}",
                    s(&v["reader"]),
                    s(&v["heartbeat_secs"]),
                    s(&v["last_pass"])
                );
                print_drift_reports(v["peers"].as_array().cloned().unwrap_or_default());
                for a in v["alerts"].as_array().cloned().unwrap_or_default() {
                    say!(
                        "ALERT {} {}: {}",
                        s(&a["rule"]),
                        s(&a["peer"]),
                        s(&a["text"])
                    );
                }
            }
        }
        Cmd::Dashboard { port } => crate::dashboard::run(state_dir(&sd)?, port).await?,
        Cmd::Reload => {
            let v: Value = client(&sd)?
                .post("/config/reload", &json!({}))
                .await
                .map_err(api)?;
            say!("{}", s(&v["detail"]));
        }
        Cmd::Serve { .. }
        | Cmd::Config { .. }
        | Cmd::Mcp { .. }
        | Cmd::SimAgent(_)
        | Cmd::Demo { .. }
        | Cmd::Bench(_)
        | Cmd::EchoServer
        | Cmd::Ledger { .. }
        | Cmd::Keygen { .. }
        | Cmd::Drift {
            cmd: DriftCmd::Append { .. } | DriftCmd::Check { .. },
        }
        | Cmd::PtyHost(_) => unreachable!("handled in main"),
    }
    Ok(())
}

fn print_decision(v: &Value) {
    say!("{}  {}", s(&v["id"]), s(&v["subject"]));
    say!(
        "  opened by {} at {}; deadline {}; at most {} rounds",
        s(&v["opened_by"]),
        s(&v["opened_at"]),
        s(&v["deadline"]),
        s(&v["max_rounds"])
    );
    say!(
        "  convened: {}",
        v["slots"]
            .as_array()
            .map(|a| a.iter().map(s).collect::<Vec<_>>().join(", "))
            .unwrap_or_default()
    );
    for r in v["records"].as_array().cloned().unwrap_or_default() {
        say!(
            "  round {} {:<5} ({}) {} at {} [#{}]:\n      {}",
            s(&r["round"]),
            s(&r["slot"]),
            s(&r["member"]),
            s(&r["kind"]),
            s(&r["at"]),
            s(&r["seq"]),
            s(&r["content"]).replace('\n', "\n      ")
        );
    }
    for r in v["refused"].as_array().cloned().unwrap_or_default() {
        say!(
            "  REFUSED round {} from {} (slot {}): {}",
            s(&r["round"]),
            s(&r["member"]),
            s(&r["slot"]),
            s(&r["why"])
        );
    }
    match v.get("closed").filter(|c| !c.is_null()) {
        None => say!("  OPEN: missing {}", {
            let recorded: Vec<String> = v["records"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(|r| s(&r["slot"]))
                .collect();
            v["slots"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .iter()
                .map(s)
                .filter(|x| !recorded.contains(x))
                .collect::<Vec<_>>()
                .join(", ")
        }),
        Some(c) => {
            say!(
                "  CLOSED {} by {} at {} [#{}]",
                s(&c["outcome"]).to_uppercase(),
                s(&c["by"]),
                s(&c["at"]),
                s(&c["seq"])
            );
            for o in c["slots"].as_array().cloned().unwrap_or_default() {
                say!(
                    "    {:<6} {}{}",
                    s(&o["slot"]),
                    s(&o["outcome"]),
                    o["round"]
                        .as_u64()
                        .map(|r| format!(" (round {r})"))
                        .unwrap_or_default()
                );
            }
            say!("  verdict:   {}", s(&c["verdict"]));
            say!("  rationale: {}", s(&c["rationale"]));
        }
    }
}

/// `fleetd ledger verify PATH [--key K]`: returns the exit code.
pub fn ledger_verify(
    path: &Path,
    key: Option<&str>,
    witnesses: &[PathBuf],
    no_signatures: bool,
    json: bool,
) -> anyhow::Result<i32> {
    use fleetd_actors::keys;
    use fleetd_actors::ledger::state::verify;
    let meta = std::fs::metadata(path).with_context(|| format!("ledger {}", path.display()))?;
    anyhow::ensure!(
        meta.len() <= fleetd_actors::ledger::actor::MAX_LEDGER_BYTES,
        "{} is too large to verify here",
        path.display()
    );
    let bytes = std::fs::read(path).with_context(|| format!("ledger {}", path.display()))?;
    let text = String::from_utf8(bytes).map_err(|e| {
        anyhow::anyhow!(
            "ledger {}: FAILS: it is not text (byte {} is not UTF-8), so it is not a fleetd ledger or it was overwritten; restore it from a backup",
            path.display(),
            e.utf8_error().valid_up_to()
        )
    })?;
    let (key_text, key_source) = match key {
        Some(k) if Path::new(k).exists() => {
            (Some(std::fs::read_to_string(k)?), format!("--key {k}"))
        }
        Some(k) => (Some(k.to_string()), "--key".into()),
        None => {
            let p = path.with_file_name("host.key.pub");
            match std::fs::read_to_string(&p) {
                Ok(t) => (Some(t), p.display().to_string()),
                Err(_) => (None, String::new()),
            }
        }
    };
    let vk = key_text.as_deref().map(keys::parse_public).transpose()?;
    match verify(&text, vk.as_ref()) {
        Ok(r) => {
            if json {
                print_json(&serde_json::to_value(&r)?);
            } else {
                say!(
                    "{}: {} entries, {} checkpoints ({}), head {}",
                    path.display(),
                    r.entries,
                    r.checkpoints,
                    if r.signatures_checked {
                        format!("signatures verified with {key_source}")
                    } else {
                        "signatures NOT checked: no --key".into()
                    },
                    r.head
                );
                if !r.pending_checkpoints.is_empty() {
                    say!(
                        "note: checkpoints for entries {:?} are not written yet (a crash between an append and its checkpoint; the daemon writes them at start)",
                        r.pending_checkpoints
                    );
                }
            }
            let mut witnessed_bad = false;
            for dir in witnesses {
                let held = crate::link::witness::load_all(dir)
                    .with_context(|| format!("witness state {}", dir.display()))?;
                let mine: Vec<_> = held.iter().filter(|w| w.origin == r.origin).collect();
                if mine.is_empty() {
                    eprintln!(
                        "{}: holds no witnessed checkpoint of {}",
                        dir.display(),
                        r.origin
                    );
                    witnessed_bad = true;
                }
                for w in mine {
                    match fleetd_actors::ledger::witness::check_against(&text, w) {
                        Ok(what) => say!("witness {}: {what}", dir.display()),
                        Err(why) => {
                            eprintln!("witness {}: {why}", dir.display());
                            witnessed_bad = true;
                        }
                    }
                }
            }
            if witnessed_bad {
                return Ok(1);
            }
            if !r.signatures_checked && !no_signatures {
                eprintln!(
                    "{}: FAILS as a verification: no signature was checked (no --key, and no host.key.pub beside the ledger). Pass --key KEY (the host's public key), or --no-signatures to check only the hash chain",
                    path.display()
                );
                return Ok(4);
            }
            if let Some(line) = r.torn_tail {
                eprintln!(
                    "line {line}: torn final line (a crash during an append); the daemon truncates it at start"
                );
                return Ok(3);
            }
            Ok(0)
        }
        Err(bad) => {
            if json {
                print_json(&serde_json::json!({"bad": bad}));
            }
            eprintln!("{}: line {}: {}", path.display(), bad.line, bad.reason);
            Ok(1)
        }
    }
}

fn print_drift_reports(rows: Vec<Value>) {
    let rows = rows
        .iter()
        .map(|r| {
            vec![
                s(&r["peer"]),
                s(&r["verdict"]),
                s(&r["g1"]),
                s(&r["g2"]),
                s(&r["g3"]),
                s(&r["g4"]),
                fleetd_actors::types::truncate(r["anchor"].as_str().unwrap_or("-"), 40),
                r["alerts"]
                    .as_array()
                    .map(|a| a.len())
                    .unwrap_or(0)
                    .to_string(),
            ]
        })
        .collect();
    table(
        &[
            "PEER", "VERDICT", "G1", "G2", "G3", "G4", "ANCHOR", "ALERTS",
        ],
        rows,
    );
}

fn read_key_arg(k: &str) -> anyhow::Result<ed25519_dalek::VerifyingKey> {
    let text = if Path::new(k).is_file() {
        std::fs::read_to_string(k).with_context(|| format!("key file {k}"))?
    } else {
        k.to_string()
    };
    Ok(fleetd_actors::keys::parse_public(text.trim())?)
}

fn parse_time(s: &str) -> anyhow::Result<u64> {
    let t = chrono::DateTime::parse_from_rfc3339(s)
        .with_context(|| format!("{s:?} is not RFC 3339"))?;
    u64::try_from(t.timestamp_millis()).map_err(|_| anyhow::anyhow!("{s:?} is before 1970"))
}

/// `fleetd drift check`: returns the exit code.
pub fn drift_check(
    kb: &Path,
    reader: &str,
    now: Option<&str>,
    trust: &[String],
    config: Option<&Path>,
    json: bool,
) -> anyhow::Result<i32> {
    use fleetd_actors::drift::{gates, kb as kbmod};
    let config = crate::daemon::load_config(config)?;
    fleetd_actors::types::MemberName::new(reader).map_err(|e| anyhow::anyhow!("--self: {e}"))?;
    let now = match now {
        Some(n) => parse_time(n)?,
        None => fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock),
    };
    let mut keys = vec![];
    for t in trust.iter().chain(config.drift.trust.iter()) {
        keys.push(read_key_arg(t).with_context(|| format!("--trust {t}"))?);
    }
    anyhow::ensure!(kb.is_dir(), "the KB {} is not a directory", kb.display());
    let snap = kbmod::read(kb).with_context(|| format!("reading the KB {}", kb.display()))?;
    let ix = gates::index(&snap, &keys);
    let p = gates::Params::from_config(&config.drift, now);
    let reports = gates::evaluate_all(&ix, Some(reader), &p);
    if json {
        for r in &reports {
            println!(
                "{}",
                fleetd_actors::sanitize::json_for_terminal(&serde_json::to_string(r)?)
            );
        }
    } else {
        if keys.is_empty() {
            eprintln!("note: no --trust key given: every signed line fails G1");
        }
        print_drift_reports(
            reports
                .iter()
                .map(|r| serde_json::to_value(r).unwrap_or_default())
                .collect(),
        );
        for r in &reports {
            for a in &r.alerts {
                say!("{}: {a}", r.peer);
            }
        }
    }
    Ok(0)
}

/// `fleetd drift append`.
#[allow(clippy::too_many_arguments)]
pub fn drift_append(
    kb: &Path,
    key: &Path,
    identity: &str,
    kind: &str,
    baseline: Option<String>,
    delta: Option<&str>,
    subject: Option<String>,
    ts: Option<&str>,
    tick: Option<u64>,
    source: Option<String>,
) -> anyhow::Result<()> {
    use fleetd_actors::drift::{kb as kbmod, line};
    fleetd_actors::types::MemberName::new(identity)
        .map_err(|e| anyhow::anyhow!("--identity: {e}"))?;
    if let Some(s) = &subject {
        fleetd_actors::types::MemberName::new(s).map_err(|e| anyhow::anyhow!("--subject: {e}"))?;
    }
    let kind = line::Kind::parse(kind)
        .with_context(|| format!("--type {kind:?}: expected fencepost, reanchor, drift, first_contact or peer_consistency_alert"))?;
    let signing = fleetd_actors::keys::load(key)?;
    let delta = delta
        .map(serde_json::from_str::<Value>)
        .transpose()
        .context("--delta is not JSON")?;
    let ts_ms = match ts {
        Some(t) => parse_time(t)?,
        None => fleetd_actors::clock::Clock::now(&fleetd_actors::clock::SystemClock),
    };
    let mut extra = serde_json::Map::new();
    if let Some(s) = source {
        extra.insert("source".into(), Value::String(s));
    }
    let tick = tick.unwrap_or_else(|| kbmod::next_tick(kb, identity));
    let nl = line::NewLine {
        ts_ms,
        tick,
        kind: Some(kind),
        baseline,
        delta,
        subject,
        extra,
    };
    let signed = line::sign(&nl, &signing);
    let path = kbmod::append(kb, identity, &kbmod::date_of(ts_ms), &signed)?;
    eprintln!("appended to {}", path.display());
    say!("{signed}");
    Ok(())
}

/// `fleetd keygen --out FILE`.
pub fn keygen(out: &Path) -> anyhow::Result<()> {
    let k = fleetd_actors::keys::generate();
    fleetd_actors::keys::save(out, &k)?;
    say!("{}", fleetd_actors::keys::public_text(&k.verifying_key()));
    Ok(())
}

/// `fleetd config check [FILE]`.
pub fn config_check(file: Option<&Path>) -> anyhow::Result<()> {
    let c = crate::daemon::load_config(file)?;
    // With a key file named, a peer that carries this host's own key is caught here too (the
    // daemon refuses it at start either way).
    if let Some(kf) = &c.daemon.key_file
        && let Ok(key) = fleetd_actors::keys::load(Path::new(kf))
        && let Some(name) = crate::daemon::own_key_as_peer(&c, &key.verifying_key())
    {
        anyhow::bail!(
            "peers.{name}.public_key is this host's own key ({kf}): a host cannot be its own peer. Put {name}'s key there"
        );
    }
    say!(
        "{}: ok",
        file.map(|f| f.display().to_string())
            .unwrap_or_else(|| "built-in default".into())
    );
    Ok(())
}

/// How long the shim keeps retrying a daemon that is down.
pub fn reconnect(secs: u64) -> Duration {
    Duration::from_secs(secs)
}

#[cfg(test)]
mod tests {
    use super::for_operator;

    /// Every visible command, argument and flag says what it is in `--help`.
    #[test]
    fn every_argument_has_help_text() {
        use clap::CommandFactory;
        fn walk(c: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if a.is_hide_set() || id == "help" || id == "version" {
                    continue;
                }
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path} {id}"));
                }
            }
            for s in c.get_subcommands() {
                if s.is_hide_set() {
                    continue;
                }
                let p = format!("{path} {}", s.get_name());
                if s.get_about().is_none() && s.get_name() != "help" {
                    missing.push(p.clone());
                }
                walk(s, &p, missing);
            }
        }
        let mut missing = vec![];
        walk(&super::Cli::command(), "fleetd", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }

    #[test]
    fn refusals_name_the_cli_command_not_the_tool() {
        assert_eq!(
            for_operator("a member name from fleet_list"),
            "a member name from `fleetd list`"
        );
        assert_eq!(
            for_operator("fleet_send to `w1`; see `fleet_status`"),
            "`fleetd send` to `w1`; see `fleetd status`"
        );
        // Tools without a command of that name, and longer words, stay as they are.
        assert_eq!(
            for_operator("fleet_ask, fleet_sendx, fleet_decision"),
            "fleet_ask, fleet_sendx, fleet_decision"
        );
    }
}
