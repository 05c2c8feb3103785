//! The daemon's configuration: its TOML shape, the built-in default, validation, and compiled
//! agent profiles.
//!
//! Owns parsing and checking config. Must never read files itself (callers hand it text) and
//! never hold live state: a reload builds a new `Config` and swaps it in whole.

use std::collections::BTreeMap;

use regex::Regex;
use serde::{Deserialize, Serialize};

use crate::error::FleetError;
use crate::supervisor::policy::{Restart, RestartPolicy};
use crate::types::Role;

/// The profile of a command spawned without one: idle when its screen is still.
pub const GENERIC: &str = "generic";

/// Lay the table `over` (from a config file, at `path`) on `base` (the built-in default):
/// tables merge key by key, other values replace; a named profile and `[architects]` are
/// replaced whole (see [`Config::parse`]).
fn layer(base: &mut toml::Table, over: toml::Table, path: &[&str]) {
    for (k, v) in over {
        let whole = matches!(path, [] if k == "architects") || matches!(path, ["profiles"]);
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) if !whole => {
                let mut p = path.to_vec();
                p.push(k.as_str());
                layer(b, o, &p);
            }
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// The built-in default config, commented; `fleetd config default` prints it.
pub const DEFAULT_CONFIG_TOML: &str = include_str!("default-config.toml");

/// A config file is layered over the built-in default (see [`Config::parse`]): what it leaves
/// out is the default's.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub daemon: DaemonConfig,
    #[serde(default)]
    pub lifecycle: LifecycleConfig,
    #[serde(default)]
    pub tickets: TicketConfig,
    #[serde(default)]
    pub injector: InjectorConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub api: ApiConfig,
    #[serde(default)]
    pub ledger: LedgerConfig,
    #[serde(default)]
    pub drift: DriftConfig,
    #[serde(default)]
    pub link: LinkConfig,
    /// Other hosts' fleetd instances, by host name.
    #[serde(default)]
    pub peers: BTreeMap<String, PeerConfig>,
    #[serde(default)]
    pub supervision: BTreeMap<String, RestartPolicyConfig>,
    #[serde(default)]
    pub architects: BTreeMap<String, ArchitectSlot>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
    #[serde(default)]
    pub charters: Charters,
    /// How members are confined (bubblewrap; on by default where it works).
    #[serde(default)]
    pub sandbox: crate::sandbox::SandboxConfig,
}

impl Default for Config {
    /// The built-in default (the demo's config).
    fn default() -> Self {
        match Config::parse_text(DEFAULT_CONFIG_TOML) {
            Ok(c) => c,
            // The default text is a compile-time constant covered by a unit test.
            Err(e) => panic!("built-in default config does not parse: {e}"),
        }
    }
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum OnShutdown {
    Keep,
    Stop,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    pub host: String,
    /// The host's ed25519 key (`fleetd keygen --out FILE`); without it, `STATE_DIR/host.key`,
    /// created at first start.
    pub key_file: Option<String>,
    pub on_shutdown: OnShutdown,
    pub shutdown_deadline_secs: u64,
}

impl DaemonConfig {
    /// How long a shutdown (or a supervisor giving up) may take: at least a second.
    pub fn shutdown_deadline(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.shutdown_deadline_secs.max(1))
    }
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            host: "local".into(),
            key_file: None,
            on_shutdown: OnShutdown::Keep,
            shutdown_deadline_secs: 10,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LifecycleConfig {
    pub idle_ttl_seconds: u64,
    pub idle_ttl_exempt: Vec<Role>,
    pub spawn_wait_seconds: u64,
    pub spawn_queue_max: usize,
    pub stop_grace_ms: u64,
    pub rows: u16,
    pub cols: u16,
    pub max_members: usize,
    /// After this long with a still screen (and no paste in flight), a member's screen model
    /// is dropped from the daemon (its terminal host keeps the screen, and hands it back at the
    /// next output or attach): an idle member then costs the daemon no screen grid (32 bytes a
    /// cell, 154 KiB at 40 x 120). 0 keeps every screen.
    pub screen_dormant_seconds: u64,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            idle_ttl_seconds: 1800,
            idle_ttl_exempt: vec![],
            spawn_wait_seconds: 60,
            spawn_queue_max: 8,
            stop_grace_ms: 3000,
            rows: 40,
            cols: 120,
            max_members: 256,
            screen_dormant_seconds: 10,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct TicketConfig {
    pub ttl_seconds: u64,
    pub ask_wait_seconds: u64,
    pub send_wait_max_seconds: u64,
    pub retention: usize,
    pub tail_lines: usize,
}

impl Default for TicketConfig {
    fn default() -> Self {
        TicketConfig {
            ttl_seconds: 600,
            ask_wait_seconds: 55,
            send_wait_max_seconds: 50,
            retention: 10_000,
            tail_lines: 40,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct InjectorConfig {
    pub max_message_bytes: usize,
    pub max_queue: usize,
    pub accept_timeout_ms: u64,
}

impl Default for InjectorConfig {
    fn default() -> Self {
        InjectorConfig {
            max_message_bytes: 16 * 1024,
            max_queue: 256,
            accept_timeout_ms: 10_000,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub mailbox: usize,
    pub max_request_bytes: usize,
    /// MCP connections from processes outside the fleet (kept apart from members').
    pub mcp_outsiders: usize,
    /// An MCP connection from outside the fleet that sends nothing this long is closed.
    pub mcp_outsider_idle_secs: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            mailbox: 1024,
            max_request_bytes: 1024 * 1024,
            mcp_outsiders: 32,
            mcp_outsider_idle_secs: 30,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// A signed checkpoint every this many entries (and at each close). Fixed in a ledger's
    /// header when the ledger is created.
    pub checkpoint_every: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        LedgerConfig {
            checkpoint_every: 16,
        }
    }
}

/// The drift protocol's knobs (see docs/drift-schema.md).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DriftConfig {
    /// Pullers read the KB at most once per heartbeat.
    pub heartbeat_secs: u64,
    /// G2: an anchor this young is fresh...
    pub ttl_hours: u64,
    /// ...this young is in grace (usable, flagged); older is expired.
    pub grace_days: u64,
    /// G2: a timestamp more than this far in the future fails.
    pub skew_secs: u64,
    /// G4: the reader's own drift events count as statements about every peer.
    pub fleet_wide_drift: bool,
    /// Bootstrapping: the baseline an identity starts from when no peer has observed it.
    pub default_baseline: Option<String>,
    /// Signer keys trusted besides this host's own (base64 public keys).
    pub trust: Vec<String>,
    /// Circles: name -> the roles an identity in it may not take.
    pub circles: BTreeMap<String, CircleConfig>,
    /// Per identity: its circle and its own default baseline.
    pub identities: BTreeMap<String, DriftIdentity>,
}

impl Default for DriftConfig {
    fn default() -> Self {
        DriftConfig {
            heartbeat_secs: 60,
            ttl_hours: 48,
            grace_days: 7,
            skew_secs: 300,
            fleet_wide_drift: false,
            default_baseline: None,
            trust: vec![],
            circles: BTreeMap::new(),
            identities: BTreeMap::new(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct CircleConfig {
    pub forbidden: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct DriftIdentity {
    pub circle: Option<String>,
    pub default_baseline: Option<String>,
}

/// The QUIC endpoint for peer links.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// UDP address to listen on (e.g. "0.0.0.0:7801"); without it, no links.
    pub listen: Option<String>,
    /// QUIC keep-alive; must be below the idle timeout.
    pub keep_alive_secs: u64,
    pub idle_timeout_secs: u64,
    /// Redial backoff: the ceiling doubles from min to max; the wait is random in [1 ms, ceiling]
    /// (full jitter).
    pub backoff_min_ms: u64,
    pub backoff_max_ms: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        LinkConfig {
            listen: None,
            keep_alive_secs: 5,
            idle_timeout_secs: 20,
            backoff_min_ms: 200,
            backoff_max_ms: 30_000,
        }
    }
}

/// A peer host: where its fleetd listens and its host key.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PeerConfig {
    pub addr: String,
    /// Its host public key (base64 of 32 bytes, as `fleetd keygen` prints it).
    pub public_key: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ApiConfig {
    pub tcp: Option<String>,
    pub token_file: Option<String>,
    /// The TCP listener holds at most this many connections at once; more are refused at once.
    pub tcp_max_connections: usize,
    /// ... and at most this many from one address.
    pub tcp_max_per_source: usize,
    /// A TCP connection that has not sent a complete, correctly authenticated request this
    /// long after it opened is closed.
    pub tcp_auth_timeout_secs: u64,
    /// A TCP connection with nothing read or written this long (and no request being served)
    /// is closed.
    pub tcp_idle_secs: u64,
}

impl Default for ApiConfig {
    fn default() -> Self {
        ApiConfig {
            tcp: None,
            token_file: None,
            tcp_max_connections: 64,
            tcp_max_per_source: 16,
            tcp_auth_timeout_secs: 10,
            tcp_idle_secs: 120,
        }
    }
}

impl ApiConfig {
    /// The TCP listener's connection bounds.
    pub fn tcp_admission(&self) -> crate::admission::AdmissionLimits {
        crate::admission::AdmissionLimits {
            max_total: self.tcp_max_connections,
            max_per_source: self.tcp_max_per_source,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct RestartPolicyConfig {
    pub restart: Restart,
    pub max_restarts: u32,
    pub window_secs: u64,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
}

impl Default for RestartPolicyConfig {
    fn default() -> Self {
        RestartPolicyConfig {
            restart: Restart::Permanent,
            max_restarts: 5,
            window_secs: 60,
            backoff_initial_ms: 50,
            backoff_max_ms: 2000,
        }
    }
}

impl RestartPolicyConfig {
    pub fn policy(&self) -> RestartPolicy {
        RestartPolicy {
            restart: self.restart,
            max_restarts: self.max_restarts,
            window_ms: self.window_secs.saturating_mul(1000),
            backoff_initial_ms: self.backoff_initial_ms,
            backoff_max_ms: self.backoff_max_ms.max(self.backoff_initial_ms),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct ArchitectSlot {
    pub profile: Option<String>,
    pub command: Option<Vec<String>>,
    pub description: Option<String>,
}

/// Which agent CLI a profile launches, for the wiring fleetd generates at spawn (the MCP
/// server entry, the status hooks, the charter): see `crate::agents`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "lowercase")]
pub enum AgentKind {
    Claude,
    Codex,
    Gemini,
    Opencode,
}

impl AgentKind {
    pub const ALL: [AgentKind; 4] = [
        AgentKind::Claude,
        AgentKind::Codex,
        AgentKind::Gemini,
        AgentKind::Opencode,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AgentKind::Claude => "claude",
            AgentKind::Codex => "codex",
            AgentKind::Gemini => "gemini",
            AgentKind::Opencode => "opencode",
        }
    }
}

impl std::fmt::Display for AgentKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Profile {
    pub command: Vec<String>,
    /// The agent CLI this profile launches: fleetd then generates its wiring per member (MCP
    /// server, hooks, charter). None: the command runs as given.
    pub agent: Option<AgentKind>,
    /// The CLI versions this profile's screen rules and wiring were verified against
    /// (`fleetd agents` compares them with the installed one).
    pub verified: Vec<String>,
    /// The command that resumes a member's conversation; `{session_id}` is the id the agent
    /// reported, in its CLI's format (`session.rs`), passed glued (`--resume={session_id}`) or
    /// after `--` (the wiring then goes before the `--`). Empty: this profile cannot resume.
    pub resume: Vec<String>,
    /// On a stable screen, the agent is at its prompt with an empty input box (idle). None: a
    /// stable screen is idle.
    pub prompt: Option<String>,
    pub busy: Option<String>,
    pub blocked: Option<String>,
    pub permission: Option<String>,
    pub permission_injectable: bool,
    /// The input box is on screen, whatever is in it: when `prompt` (empty) does not match,
    /// text sits in the box (typed by someone, left there by an interrupted turn, or a paste
    /// waiting for its Enter): idle, but nothing is pasted on top of it.
    pub input: Option<String>,
    pub stable_ms: u64,
    /// Pause between the paste and its Enter, for TUIs that swallow an Enter sent too soon.
    pub enter_delay_ms: u64,
    /// If the pasted text still sits in the input box this long after its Enter (and no turn
    /// started), press Enter once more. 0: never.
    pub enter_retry_ms: u64,
    /// The regexes look at this many last non-blank lines of the screen (what the agent is
    /// showing now), not at what has scrolled up.
    pub scan_lines: usize,
    /// A new member takes no message until its `fleetd mcp` has listed the fleet tools (so its
    /// first turn has them), or this long has passed. 0: no wait.
    pub wait_for_tools_ms: u64,
    /// A new member takes no message until its session-start hook has come (a CLI that shows
    /// its prompt before it has loaded a resumed session, and drops what is typed meanwhile),
    /// or this long has passed. 0: no wait (a CLI whose session starts with its first prompt).
    pub wait_for_session_ms: u64,
    /// A status reported by a hook holds until the next hook, unless the screen has since
    /// changed and then read differently for this long (a hook that never came, e.g. no
    /// `Stop` after the user interrupted a turn).
    pub hook_yield_ms: u64,
    /// A screen that is none of the above (not the prompt, the input box, the busy marker, a
    /// dialog or a question), still this long with no hook since, is `blocked` with the reason
    /// "unrecognised screen": something nobody foresaw waits (a new dialog, a chooser, an error
    /// page, a blank screen). It overrides a hook's `working`. 0: never (a silent shell command).
    pub unrecognised_ms: u64,
    pub env: BTreeMap<String, String>,
    /// Variables of the daemon's environment the agent must not inherit: names, or prefixes
    /// ending in `*` (Gemini CLI will not start interactively when it sees `CI` or any `CI_*`).
    pub unset_env: Vec<String>,
}

impl Profile {
    /// The names among `vars` that `unset_env` removes.
    pub fn unset_in<'a>(&self, vars: impl Iterator<Item = &'a str>) -> Vec<String> {
        vars.filter(|v| {
            self.unset_env.iter().any(|u| match u.strip_suffix('*') {
                Some(prefix) => v.starts_with(prefix),
                None => v == u,
            })
        })
        .map(str::to_string)
        .collect()
    }
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            command: vec![],
            agent: None,
            verified: vec![],
            resume: vec![],
            prompt: None,
            busy: None,
            blocked: None,
            permission: None,
            permission_injectable: false,
            input: None,
            stable_ms: 1500,
            enter_delay_ms: 0,
            enter_retry_ms: 0,
            scan_lines: 6,
            wait_for_tools_ms: 0,
            wait_for_session_ms: 0,
            hook_yield_ms: 5000,
            unrecognised_ms: 10_000,
            env: BTreeMap::new(),
            unset_env: vec![],
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Charters {
    pub primary: String,
    pub architect: String,
    pub worker: String,
    pub reply: String,
}

impl Charters {
    /// The text a member of `role` receives at spawn: its role charter composed with the reply
    /// charter.
    pub fn compose(&self, role: Role) -> String {
        let role_text = match role {
            Role::Primary => &self.primary,
            Role::Architect => &self.architect,
            Role::Worker => &self.worker,
        };
        let mut out = String::new();
        out.push_str(role_text.trim());
        if !self.reply.trim().is_empty() {
            out.push_str("\n\n");
            out.push_str(self.reply.trim());
        }
        out.push('\n');
        out
    }
}

/// A profile with its regexes compiled, as the slot core uses it.
#[derive(Clone, Debug)]
pub struct CompiledProfile {
    pub name: String,
    pub prompt: Option<Regex>,
    pub busy: Option<Regex>,
    pub blocked: Option<Regex>,
    pub permission: Option<Regex>,
    pub permission_injectable: bool,
    pub input: Option<Regex>,
    pub stable_ms: u64,
    pub enter_delay_ms: u64,
    pub enter_retry_ms: u64,
    pub scan_lines: usize,
    pub wait_for_tools_ms: u64,
    pub wait_for_session_ms: u64,
    pub hook_yield_ms: u64,
    pub unrecognised_ms: u64,
}

impl CompiledProfile {
    pub fn compile(name: &str, p: &Profile) -> Result<Self, FleetError> {
        let re = |field: &str, src: &str| {
            Regex::new(src).map_err(|e| {
                FleetError::invalid(
                    format!("profiles.{name}.{field}"),
                    format!("it is not a valid regex: {e}"),
                    "a regex in Rust `regex` syntax",
                )
            })
        };
        let opt =
            |field: &str, src: &Option<String>| src.as_deref().map(|s| re(field, s)).transpose();
        Ok(CompiledProfile {
            name: name.to_string(),
            prompt: opt("prompt", &p.prompt)?,
            busy: opt("busy", &p.busy)?,
            blocked: opt("blocked", &p.blocked)?,
            permission: opt("permission", &p.permission)?,
            permission_injectable: p.permission_injectable,
            input: opt("input", &p.input)?,
            stable_ms: p.stable_ms,
            enter_delay_ms: p.enter_delay_ms,
            enter_retry_ms: p.enter_retry_ms,
            scan_lines: p.scan_lines.max(1),
            wait_for_tools_ms: p.wait_for_tools_ms,
            wait_for_session_ms: p.wait_for_session_ms,
            hook_yield_ms: p.hook_yield_ms,
            unrecognised_ms: p.unrecognised_ms,
        })
    }
}

impl Config {
    /// The configured public key of peer host `name` (None if it is not a peer, or its key does
    /// not parse; `validate` refuses such a config).
    pub fn peer_key(&self, name: &str) -> Option<ed25519_dalek::VerifyingKey> {
        self.peers
            .get(name)
            .and_then(|p| crate::keys::parse_public(&p.public_key).ok())
    }

    /// Parse a config file's TOML text, layered over the built-in default: a section, table or
    /// value the file gives replaces the default's at that place, and everything it leaves out
    /// is the default's (charters, limits, profiles, ...). Two tables are taken whole rather
    /// than merged: each named profile (a profile of a built-in's name replaces that profile;
    /// the other built-ins stay), and `[architects]` (a file that lists slots has exactly
    /// those). Unknown keys are errors, with their place in the file, so typos do not pass
    /// silently.
    pub fn parse(text: &str) -> Result<Config, FleetError> {
        // The file alone first: its errors name its own lines.
        Config::parse_text(text)?;
        let over: toml::Table = toml::from_str(text).map_err(|e| {
            FleetError::invalid(
                "config",
                e.to_string().trim().to_string(),
                "TOML in the shape `fleetd config default` prints",
            )
        })?;
        let mut base: toml::Table = match toml::from_str(DEFAULT_CONFIG_TOML) {
            Ok(t) => t,
            // A compile-time constant covered by a unit test.
            Err(e) => panic!("built-in default config does not parse: {e}"),
        };
        layer(&mut base, over, &[]);
        toml::Value::Table(base).try_into::<Config>().map_err(|e| {
            FleetError::invalid(
                "config",
                e.to_string().trim().to_string(),
                "TOML in the shape `fleetd config default` prints",
            )
        })
    }

    /// The effective config as TOML (what `fleetd config show` prints).
    pub fn to_toml(&self) -> Result<String, FleetError> {
        toml::to_string(self)
            .map_err(|e| FleetError::internal("config", format!("cannot write it as TOML: {e}")))
    }

    fn parse_text(text: &str) -> Result<Config, FleetError> {
        toml::from_str::<Config>(text).map_err(|e| {
            FleetError::invalid(
                "config",
                e.to_string().trim().to_string(),
                "TOML in the shape `fleetd config default` prints",
            )
        })
    }

    /// The restart policy for a child kind (`registry`, `tickets`, `slot`, `injector`, `api`).
    /// The root supervisor's intensity: restarts across all its children within a window.
    pub fn supervisor_intensity(&self) -> RestartPolicy {
        self.supervision
            .get("supervisor")
            .cloned()
            .unwrap_or(SUPERVISOR_INTENSITY)
            .policy()
    }

    pub fn restart_policy(&self, kind: &str) -> RestartPolicy {
        self.supervision
            .get(kind)
            .or_else(|| self.supervision.get("default"))
            .cloned()
            .unwrap_or_default()
            .policy()
    }

    /// The profile a spawn uses: the one named; else the architect slot's; else, for a spawn
    /// that gives its own command, `generic` (and a note saying so); a spawn with neither is
    /// refused.
    pub fn profile_for(
        &self,
        role: Role,
        slot: Option<&str>,
        requested: Option<&str>,
        command: Option<&[String]>,
    ) -> Result<(String, Option<String>), FleetError> {
        if let Some(p) = requested {
            return Ok((p.to_string(), None));
        }
        if role == Role::Architect
            && let Some(p) = slot
                .and_then(|s| self.architects.get(s))
                .and_then(|a| a.profile.clone())
        {
            return Ok((p, None));
        }
        if let Some(cmd) = command.filter(|c| !c.is_empty()) {
            let exe = cmd[0].rsplit('/').next().unwrap_or("");
            let hint = self
                .profiles
                .iter()
                .find(|(_, p)| p.agent.is_some() && p.command.first().is_some_and(|c| c == exe))
                .map(|(n, _)| format!("; `{exe}` has its own profile: --profile {n} wires its tools, hooks and charter"))
                .unwrap_or_default();
            let stable = self
                .profiles
                .get(GENERIC)
                .map(|p| p.stable_ms)
                .unwrap_or(Profile::default().stable_ms);
            return Ok((
                GENERIC.to_string(),
                Some(format!(
                    "no profile given: the `{GENERIC}` profile reads this terminal (idle = its screen still for {stable} ms; no prompt regex, no hooks){hint}"
                )),
            ));
        }
        Err(FleetError::invalid(
            "fleet_spawn",
            "it names neither a profile nor a command",
            format!(
                "a profile (one of: {}) or a command (run with the `{GENERIC}` profile)",
                self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ))
    }

    pub fn compiled_profile(&self, name: &str) -> Result<CompiledProfile, FleetError> {
        let p = self.profiles.get(name).ok_or_else(|| {
            FleetError::not_found(
                format!("profile `{name}`"),
                "no such profile in config",
                format!(
                    "one of: {}",
                    self.profiles.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        CompiledProfile::compile(name, p)
    }

    /// Every problem with this config, as readable lines; empty means it is good.
    /// `known_tools` is the tool surface the MCP server registers: a charter that names any
    /// other `fleet_*` tool is a problem.
    pub fn check(&self, known_tools: &[&str]) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = self.sandbox.check() {
            problems.push(e);
        }
        for (name, p) in &self.profiles {
            if let Err(e) = CompiledProfile::compile(name, p) {
                problems.push(e.to_string());
            }
            if p.command.is_empty() && name != GENERIC {
                problems.push(format!(
                    "profiles.{name}.command is empty: give the agent's argv"
                ));
            }
        }
        for (slot, a) in &self.architects {
            if let Some(p) = &a.profile
                && !self.profiles.contains_key(p)
            {
                problems.push(format!(
                    "architects.{slot}.profile names `{p}`, which is not a configured profile"
                ));
            }
            if crate::types::MemberName::new(slot).is_err() {
                problems.push(format!(
                    "architects.{slot}: a slot name must be a valid member name"
                ));
            }
        }
        for (id, d) in &self.drift.identities {
            if let Some(c) = &d.circle
                && !self.drift.circles.contains_key(c)
            {
                problems.push(format!(
                    "drift.identities.{id}.circle names `{c}`, which is not in drift.circles"
                ));
            }
        }
        if let Some(l) = &self.link.listen
            && l.parse::<std::net::SocketAddr>().is_err()
        {
            problems.push(format!(
                "link.listen `{l}` is not an address: give IP:PORT, e.g. \"0.0.0.0:7801\""
            ));
        }
        if self.link.keep_alive_secs == 0
            || self.link.keep_alive_secs >= self.link.idle_timeout_secs
        {
            problems.push(
                "link.keep_alive_secs must be greater than 0 and below link.idle_timeout_secs"
                    .into(),
            );
        }
        if self.link.backoff_min_ms == 0 || self.link.backoff_min_ms > self.link.backoff_max_ms {
            problems.push(
                "link.backoff_min_ms must be greater than 0 and at most backoff_max_ms".into(),
            );
        }
        for (name, p) in &self.peers {
            if crate::types::MemberName::new(name).is_err() || *name == self.daemon.host {
                problems.push(format!(
                    "peers.{name}: a peer is another host, named like a member (letters, digits, - and _), not this host ({})",
                    self.daemon.host
                ));
            }
            if p.addr.parse::<std::net::SocketAddr>().is_err() {
                problems.push(format!("peers.{name}.addr `{}` is not IP:PORT", p.addr));
            }
            if crate::keys::parse_public(&p.public_key).is_err() {
                problems.push(format!(
                    "peers.{name}.public_key is not a public key (base64 of 32 bytes, from `fleetd keygen`)"
                ));
            }
        }
        if !self.peers.is_empty() && self.link.listen.is_none() {
            problems.push(
                "peers are configured but link.listen is not: set link.listen to link them".into(),
            );
        }
        for k in &self.drift.trust {
            if crate::keys::parse_public(k).is_err() {
                problems.push(format!(
                    "drift.trust: `{k}` is not a public key (base64 of 32 bytes)"
                ));
            }
        }
        if self.drift.heartbeat_secs == 0 || self.drift.ttl_hours == 0 || self.drift.grace_days == 0
        {
            problems.push(
                "drift.heartbeat_secs, ttl_hours and grace_days must be greater than 0".into(),
            );
        }
        if self.drift.ttl_hours > self.drift.grace_days * 24 {
            problems.push("drift.ttl_hours must not exceed drift.grace_days (in hours)".into());
        }
        if self.ledger.checkpoint_every == 0 {
            problems.push("ledger.checkpoint_every must be at least 1".into());
        }
        if self.daemon.host.is_empty()
            || self
                .daemon
                .host
                .chars()
                .any(|c| c.is_whitespace() || c == '+' || c == '/')
        {
            problems.push(format!("daemon.host {:?} must be non-empty, without spaces, `+` or `/` (it names the ledger's origin)", self.daemon.host));
        }
        if let Some(why) = crate::term::size_problem(self.lifecycle.rows, self.lifecycle.cols) {
            problems.push(format!("lifecycle.rows/cols: {why}"));
        }
        for (field, v) in [
            (
                "injector.max_message_bytes",
                self.injector.max_message_bytes,
            ),
            ("injector.max_queue", self.injector.max_queue),
            ("limits.mailbox", self.limits.mailbox),
            ("lifecycle.max_members", self.lifecycle.max_members),
            ("limits.mcp_outsiders", self.limits.mcp_outsiders),
            (
                "limits.mcp_outsider_idle_secs",
                self.limits.mcp_outsider_idle_secs as usize,
            ),
            ("api.tcp_max_connections", self.api.tcp_max_connections),
            ("api.tcp_max_per_source", self.api.tcp_max_per_source),
            (
                "api.tcp_auth_timeout_secs",
                self.api.tcp_auth_timeout_secs as usize,
            ),
            ("api.tcp_idle_secs", self.api.tcp_idle_secs as usize),
        ] {
            if v == 0 {
                problems.push(format!("{field} must be greater than 0"));
            }
        }
        for (kind, p) in &self.supervision {
            if !KINDS.contains(&kind.as_str()) {
                problems.push(format!(
                    "supervision.{kind} is not a child kind ({})",
                    KINDS.join(", ")
                ));
            }
            if p.max_restarts == 0 && p.restart != Restart::Temporary {
                problems.push(format!(
                    "supervision.{kind}.max_restarts is 0: any failure would escalate"
                ));
            }
        }
        for (role, text) in [
            ("primary", &self.charters.primary),
            ("architect", &self.charters.architect),
            ("worker", &self.charters.worker),
            ("reply", &self.charters.reply),
        ] {
            for tool in tool_names_in(text) {
                if !known_tools.contains(&tool.as_str()) {
                    problems.push(format!(
                        "charters.{role} names `{tool}`, a tool the server does not register (registered: {})",
                        known_tools.join(", ")
                    ));
                }
            }
        }
        if self.api.tcp_max_per_source > self.api.tcp_max_connections {
            problems.push(format!(
                "api.tcp_max_per_source ({}) is over api.tcp_max_connections ({}): one address could take every connection",
                self.api.tcp_max_per_source, self.api.tcp_max_connections
            ));
        }
        if self.api.tcp_max_connections > MAX_TCP_CONNECTIONS {
            problems.push(format!(
                "api.tcp_max_connections ({}) is over {MAX_TCP_CONNECTIONS}: TCP clients could take the descriptors api.sock and the members need",
                self.api.tcp_max_connections
            ));
        }
        if let Some(addr) = &self.api.tcp {
            match addr.parse::<std::net::SocketAddr>() {
                Ok(a) if a.ip().is_loopback() => {
                    if self.api.token_file.is_none() {
                        problems.push("api.tcp is set but api.token_file is not: the TCP listener needs a bearer token".into());
                    }
                }
                Ok(_) => problems.push(format!("api.tcp `{addr}` is not a loopback address")),
                Err(e) => problems.push(format!("api.tcp `{addr}`: {e}")),
            }
        }
        problems
    }
}

/// The most connections `api.tcp_max_connections` may allow (the systemd unit gives the
/// daemon 65,536 descriptors; its members' terminals and `api.sock` need theirs).
pub const MAX_TCP_CONNECTIONS: usize = 4096;

/// The supervised child kinds a `[supervision.KIND]` policy may name.
pub const KINDS: &[&str] = &[
    "default",
    "supervisor",
    "registry",
    "tickets",
    "ledger",
    "decision",
    "slot",
    "injector",
    "api",
    "link",
    "mail",
    "anchors",
    "drift",
    "alerts",
    "gc",
];

/// The root supervisor's own restart intensity when `[supervision.supervisor]` does not set
/// one: restarts of all its children together, as OTP counts them. Each child's policy
/// (`[supervision.KIND]`) still bounds that child alone; this bound is what escalates when many
/// children fail at once (fifty crash-looping slots, each under its own limit).
pub const SUPERVISOR_INTENSITY: RestartPolicyConfig = RestartPolicyConfig {
    restart: Restart::Permanent,
    max_restarts: 50,
    window_secs: 60,
    backoff_initial_ms: 0,
    backoff_max_ms: 0,
};

/// Every `fleet_*` or `bridge_*` tool-like name in a text.
pub fn tool_names_in(text: &str) -> Vec<String> {
    // A literal pattern; compiling it cannot fail.
    let re = Regex::new(r"\b(?:fleet|bridge)_[a-z][a-z_]*\b").expect("static regex");
    let mut out: Vec<String> = re.find_iter(text).map(|m| m.as_str().to_string()).collect();
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOOLS: &[&str] = &[
        "fleet_spawn",
        "fleet_send",
        "fleet_reply",
        "fleet_ask",
        "fleet_poll",
        "fleet_ack",
        "fleet_list",
        "fleet_status",
        "fleet_stop",
        "fleet_whoami",
    ];

    #[test]
    fn default_parses_and_checks_clean() {
        let c = Config::default();
        assert!(c.architects.contains_key("opus"));
        assert!(c.architects.contains_key("sol"));
        assert_eq!(c.lifecycle.idle_ttl_seconds, 1800);
        assert_eq!(c.tickets.ttl_seconds, 600);
        assert_eq!(c.tickets.ask_wait_seconds, 55);
        assert_eq!(c.check(TOOLS), Vec::<String>::new());
        for name in c.profiles.keys() {
            c.compiled_profile(name).unwrap();
        }
    }

    #[test]
    fn serde_defaults_match_the_default_text() {
        let c = Config::default();
        assert_eq!(c.daemon, DaemonConfig::default());
        assert_eq!(c.lifecycle, LifecycleConfig::default());
        assert_eq!(c.tickets, TicketConfig::default());
        assert_eq!(c.injector, InjectorConfig::default());
        assert_eq!(c.limits, Limits::default());
    }

    #[test]
    fn unset_env_takes_names_and_prefixes() {
        let p = Profile {
            unset_env: vec!["CI".into(), "CI_*".into()],
            ..Profile::default()
        };
        let vars = ["CI", "CI_TOKEN", "CIRCLE", "PATH", "XCI"];
        assert_eq!(p.unset_in(vars.into_iter()), vec!["CI", "CI_TOKEN"]);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = Config::parse("[lifecycle]\nidle_ttl = 5\n").unwrap_err();
        assert!(e.to_string().contains("idle_ttl"), "{e}");
    }

    #[test]
    fn a_file_is_layered_over_the_built_in_default() {
        let d = Config::default();
        // A file with its own host only: everything else is the default's.
        let c = Config::parse("[daemon]\nhost = \"build-a\"\n").unwrap();
        assert_eq!(c.daemon.host, "build-a");
        assert_eq!(c.daemon.on_shutdown, d.daemon.on_shutdown);
        assert_eq!(c.charters, d.charters);
        assert_eq!(c.architects, d.architects);
        assert_eq!(c.profiles, d.profiles);
        assert_eq!(c.limits, d.limits);
        assert!(!c.charters.worker.is_empty());
        // One charter and one limit given: the others stay.
        let c = Config::parse("[charters]\nworker = \"Do the task.\"\n[limits]\nmailbox = 7\n")
            .unwrap();
        assert_eq!(c.charters.worker, "Do the task.");
        assert_eq!(c.charters.primary, d.charters.primary);
        assert_eq!(c.charters.reply, d.charters.reply);
        assert_eq!(c.limits.mailbox, 7);
        assert_eq!(c.limits.max_request_bytes, d.limits.max_request_bytes);
        // A named profile is replaced whole (no built-in regex left behind); the rest stay.
        let c = Config::parse("[profiles.claude]\ncommand = [\"my-claude\"]\n").unwrap();
        assert_eq!(c.profiles["claude"].command, vec!["my-claude".to_string()]);
        assert_eq!(c.profiles["claude"].prompt, None);
        assert_eq!(c.profiles["codex"], d.profiles["codex"]);
        // A file that lists architect slots has exactly those.
        let c = Config::parse("[architects.judge]\nprofile = \"claude\"\n").unwrap();
        assert_eq!(c.architects.keys().collect::<Vec<_>>(), vec!["judge"]);
        // The effective config written out reads back as itself.
        let again = Config::parse(&c.to_toml().unwrap()).unwrap();
        assert_eq!(again, c);
    }

    #[test]
    fn a_mistake_is_reported_at_its_place_in_the_file() {
        let e = Config::parse("[daemon]\nhost = \"a\"\n\n[charters]\nwroker = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("wroker") && e.contains("line 5"), "{e}");
    }

    #[test]
    fn charter_naming_unknown_tool_fails_check() {
        let mut c = Config::default();
        c.charters.architect = "call bridge_send and fleet_sned".into();
        let p = c.check(TOOLS);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].contains("bridge_send"));
        assert!(p[1].contains("fleet_sned"));
    }

    #[test]
    fn bad_regex_and_bad_profile_ref_fail_check() {
        let mut c = Config::default();
        c.profiles.get_mut("sim").unwrap().prompt = Some("(".into());
        c.architects.get_mut("opus").unwrap().profile = Some("nope".into());
        let p = c.check(TOOLS);
        assert!(p.iter().any(|l| l.contains("profiles.sim.prompt")), "{p:?}");
        assert!(p.iter().any(|l| l.contains("`nope`")), "{p:?}");
    }

    #[test]
    fn tcp_bounds_are_checked() {
        let mut c = Config::default();
        assert!(c.api.tcp_max_connections > 0 && c.api.tcp_max_per_source > 0);
        c.api.tcp_max_per_source = 100;
        c.api.tcp_max_connections = 10;
        c.api.tcp_auth_timeout_secs = 0;
        let p = c.check(TOOLS);
        assert!(
            p.iter().any(|l| l.contains("api.tcp_max_per_source (100)")),
            "{p:?}"
        );
        assert!(
            p.iter()
                .any(|l| l.contains("api.tcp_auth_timeout_secs must be greater than 0")),
            "{p:?}"
        );
        c.api.tcp_max_per_source = 10;
        c.api.tcp_auth_timeout_secs = 5;
        c.api.tcp_max_connections = MAX_TCP_CONNECTIONS + 1;
        let p = c.check(TOOLS);
        assert!(
            p.iter().any(|l| l.contains("api.tcp_max_connections")),
            "{p:?}"
        );
    }

    #[test]
    fn charter_composition() {
        let c = Config::default();
        let w = c.charters.compose(Role::Worker);
        assert!(w.contains("You are a worker"));
        assert!(w.contains("fleet_reply"));
        let p = c.charters.compose(Role::Primary);
        assert!(p.starts_with("You are the lead"));
        assert!(p.contains("carries a ticket id"));
    }
}
