//! The command line's arguments: every subcommand and flag, with its help text (clap).

use super::*;

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
        /// with --hook the hook's JSON payload as an argument (for a hand-run report: every
        /// local user can read a command line); without it the payload is read from stdin
        /// (bounded), which is how every hook fleetd wires passes it.
        arg: Option<String>,
        /// Report what an agent CLI's hook payload means (Claude Code, Gemini CLI, Codex's
        /// notify, fleetd's opencode plugin). Never fails the hook: problems go to stderr.
        #[arg(long)]
        hook: bool,
        /// With --hook: at a SessionStart, answer with this file as the session's additional
        /// context (how Gemini CLI and Codex members get their charter).
        #[arg(long, requires = "hook")]
        context: Option<PathBuf>,
        /// With --context: after a resumed session start, answer the first turn's hook
        /// (BeforeAgent, UserPromptSubmit) with the context (Gemini CLI loads a resumed
        /// conversation after its SessionStart hook, over what the hook added; Codex replays
        /// it from its history, so its wiring leaves this off).
        #[arg(long, requires = "context")]
        context_on_resume: bool,
    },
    /// The MCP server an agent's MCP config launches (stdio; forwards to the daemon).
    Mcp {
        /// Keep retrying the daemon this long when it is down (e.g. restarting).
        #[arg(long, default_value_t = 30)]
        reconnect_secs: u64,
    },
    /// A scripted terminal agent for the demo and tests.
    SimAgent(crate::harness::sim::SimArgs),
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
    Bench(crate::harness::bench::BenchArgs),
    /// Plays a hostile member (run as a member's command): tries every door out of its role and
    /// writes one line per door (`tests/it/probe.rs`).
    #[command(hide = true)]
    Probe(crate::harness::probe::ProbeArgs),
    /// A bare rmcp echo server on stdio (the benchmark's baseline).
    #[command(hide = true)]
    EchoServer,
    /// Holds one member's PTY (started by the daemon).
    #[command(hide = true)]
    PtyHost(crate::term::HostArgs),
    /// Debug builds: make an actor panic (registry, tickets, slot:NAME, injector:NAME), or break
    /// a member's terminal link (term:NAME).
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
