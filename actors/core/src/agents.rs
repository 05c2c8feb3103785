//! The wiring fleetd gives each real agent CLI at spawn.
//!
//! Owns, per CLI (see [`AgentKind`]), what a member needs so that it works with no hand-edited
//! config: the MCP server entry for `fleetd mcp` (with the state dir and the member's name, which
//! some CLIs do not pass through their environment), the status hooks (`fleetd signal --hook`,
//! hooks first, the screen second), and the charter (as the CLI's system-prompt addition). The
//! result is files to write into the member's wiring directory and arguments to append to its
//! command. Pure: paths in, text out. Must never write the files itself (the spawn does) and
//! never guess a flag: each one is taken from the CLI's docs/source and verified against the
//! versions in the profile's `verified` list (docs/AGENTS.md). Must never put a charter, a
//! prompt or a hook payload in an argument or an environment value (any local user reads
//! `/proc/PID/cmdline`): it takes no charter text, only the charter file's path.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::config::AgentKind;

/// What a member is, for its wiring.
#[derive(Clone, Debug)]
pub struct Member<'a> {
    pub name: &'a str,
    /// This fleetd binary (the MCP shim and the hooks run it).
    pub fleetd: &'a Path,
    pub state_dir: &'a Path,
    /// The member's charter file.
    pub charter: &'a Path,
    /// The directory its generated files go to (one per member).
    pub dir: &'a Path,
    /// Where it starts (its worktree, or the spawner's directory), if known.
    pub cwd: Option<&'a Path>,
}

/// What the spawn read of the user's own configuration for a CLI (where the wiring must add to
/// it rather than replace it): the CLI's config directory, its settings file, its entries.
#[derive(Clone, Debug, Default)]
pub struct UserConfig {
    pub dir: Option<PathBuf>,
    pub settings: Option<String>,
    pub entries: Vec<String>,
}

/// The user's configuration directory of `kind` that the wiring builds on, if any.
pub fn user_config_dir(kind: AgentKind, home: &Path) -> Option<PathBuf> {
    match kind {
        AgentKind::Gemini => Some(home.join(".gemini")),
        _ => None,
    }
}

/// What to add to a member's launch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wiring {
    /// Files to write (mode 0600) before the launch.
    pub files: Vec<(PathBuf, String)>,
    /// Symbolic links to make (target, link), e.g. the user's own CLI state.
    pub links: Vec<(PathBuf, PathBuf)>,
    /// Arguments appended to the command.
    pub args: Vec<String>,
    /// Environment for the agent.
    pub env: Vec<(String, String)>,
    /// What was wired, one line each, for the spawn's answer and `fleetd agents`.
    pub summary: Vec<String>,
}

/// `s` quoted for a POSIX shell (hook commands run through `sh -c`).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A TOML string literal (for Codex's `-c key=value`, whose value is TOML).
fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn toml_list(items: &[&str]) -> String {
    format!(
        "[{}]",
        items
            .iter()
            .map(|s| toml_str(s))
            .collect::<Vec<_>>()
            .join(",")
    )
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The shim's argv after the binary: the state dir passed explicitly, so a CLI that does not
/// hand its environment to MCP servers still reaches the right daemon.
fn shim_args(m: &Member) -> Vec<String> {
    vec!["--state-dir".into(), path(m.state_dir), "mcp".into()]
}

/// The hook command line (run by the CLI through a shell; the payload comes on stdin, never
/// on the command line, which every local user can read in `/proc/PID/cmdline`).
fn hook_command(m: &Member) -> String {
    format!(
        "{} --state-dir {} signal --hook",
        shell_quote(&path(m.fleetd)),
        shell_quote(&path(m.state_dir))
    )
}

/// The hook command line that also answers a SessionStart with the charter as the session's
/// additional context, read from the charter file (0600): the CLI gets its charter without it
/// ever being on a command line.
fn hook_command_with_charter(m: &Member) -> String {
    format!(
        "{} --context {}",
        hook_command(m),
        shell_quote(&path(m.charter))
    )
}

/// The environment the shim is given where a CLI takes an explicit server environment.
fn shim_env(m: &Member) -> serde_json::Value {
    json!({
        "FLEETD_STATE_DIR": path(m.state_dir),
        "FLEETD_MEMBER": m.name,
    })
}

/// Claude Code: `--mcp-config FILE`, `--settings FILE` (hooks, and the fleet tools allowed
/// without a permission dialog), `--append-system-prompt-file CHARTER`.
pub const CLAUDE_HOOKS: &[&str] = &[
    "SessionStart",
    "UserPromptSubmit",
    "Stop",
    "Notification",
    "PermissionRequest",
    "PostToolUse",
    "SessionEnd",
];

fn claude(m: &Member) -> Wiring {
    let mcp = m.dir.join("mcp.json");
    let settings = m.dir.join("settings.json");
    let mcp_text = json!({
        "mcpServers": {
            "fleet": {
                "type": "stdio",
                "command": path(m.fleetd),
                "args": shim_args(m),
                "env": shim_env(m),
            }
        }
    });
    let hook =
        json!([{ "hooks": [{ "type": "command", "command": hook_command(m), "timeout": 10 }] }]);
    let hooks: serde_json::Map<String, serde_json::Value> = CLAUDE_HOOKS
        .iter()
        .map(|e| (e.to_string(), hook.clone()))
        .collect();
    let settings_text = json!({
        "hooks": hooks,
        "permissions": { "allow": ["mcp__fleet"] },
    });
    Wiring {
        files: vec![
            (mcp.clone(), pretty(&mcp_text)),
            (settings.clone(), pretty(&settings_text)),
        ],
        links: vec![],
        args: vec![
            "--mcp-config".into(),
            path(&mcp),
            "--settings".into(),
            path(&settings),
            "--append-system-prompt-file".into(),
            path(m.charter),
        ],
        env: vec![],
        summary: vec![
            format!("MCP server `fleet` (fleetd mcp) in {}", path(&mcp)),
            format!(
                "hooks {} -> fleetd signal --hook, and the fleet tools allowed, in {}",
                CLAUDE_HOOKS.join(", "),
                path(&settings)
            ),
            format!(
                "charter appended to the system prompt from {}",
                path(m.charter)
            ),
        ],
    }
}

/// Codex CLI hooks, and the timeout each is registered with (Codex clamps SessionEnd and
/// Interrupt to 3 s, and the clamped value is what it hashes for trust).
pub const CODEX_HOOKS: &[(&str, &str, u64)] = &[
    ("SessionStart", "session_start", 10),
    ("UserPromptSubmit", "user_prompt_submit", 10),
    ("PermissionRequest", "permission_request", 10),
    ("PostToolUse", "post_tool_use", 10),
    ("Stop", "stop", 10),
    ("Interrupt", "interrupt", 3),
    ("SessionEnd", "session_end", 3),
];

/// The trust Codex gives a hook registered by `-c` (so no "Hooks need review" screen): the
/// sha256 of the compact, key-sorted JSON of the hook group, as Codex 0.171 computes it.
fn codex_hook_trust(event_snake: &str, command: &str, timeout: u64) -> String {
    use sha2::{Digest, Sha256};
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let canonical = format!(
        r#"{{"event_name":{},"hooks":[{{"async":false,"command":{},"timeout":{timeout},"type":"command"}}]}}"#,
        q(event_snake),
        q(command)
    );
    let digest = Sha256::digest(canonical.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Codex CLI: `-c` overrides only (nothing written into the user's `~/.codex`). `--no-daemon`:
/// each member's MCP server and hooks run in its own process tree, with its own environment
/// (a shared app-server would run them under the first member's). The MCP server with the
/// variables it must see (`env_vars`; Codex passes no other environment to MCP servers),
/// required (the first turn waits for its tools) and pre-approved. The hooks, pre-trusted.
/// The working directory trusted (its first-run screen would stop the agent before its
/// prompt). The charter comes back from the `SessionStart` hook as additional context (added
/// to Codex's instructions; Codex fires it again after a compaction). Not
/// `-c developer_instructions=TEXT`: that put the whole charter on the command line, readable
/// by every local user; `model_instructions_file` would replace Codex's own instructions.
fn codex(m: &Member) -> Wiring {
    let fleetd = path(m.fleetd);
    let shim: Vec<String> = shim_args(m);
    let shim_refs: Vec<&str> = shim.iter().map(String::as_str).collect();
    let command = hook_command_with_charter(m);
    let mut args = vec!["--no-daemon".to_string()];
    let mut c = |k: &str, v: String| {
        args.push("-c".into());
        args.push(format!("{k}={v}"));
    };
    c("features.daemon_auto_start", "false".into());
    c(
        "mcp_servers.fleet",
        format!(
            "{{command={},args={},env_vars={},default_tools_approval_mode=\"approve\",required=true}}",
            toml_str(&fleetd),
            toml_list(&shim_refs),
            toml_list(&["FLEETD_STATE_DIR", "FLEETD_MEMBER"])
        ),
    );
    let hooks: Vec<String> = CODEX_HOOKS
        .iter()
        .map(|(event, _, t)| {
            format!(
                "{event}=[{{hooks=[{{type=\"command\",command={},timeout={t}}}]}}]",
                toml_str(&command)
            )
        })
        .collect();
    c("hooks", format!("{{{}}}", hooks.join(",")));
    let state: Vec<String> = CODEX_HOOKS
        .iter()
        .map(|(_, snake, t)| {
            format!(
                "{}={{trusted_hash={}}}",
                toml_str(&format!("/<session-flags>/config.toml:{snake}:0:0")),
                toml_str(&codex_hook_trust(snake, &command, *t))
            )
        })
        .collect();
    c("hooks.state", format!("{{{}}}", state.join(",")));
    if let Some(cwd) = m.cwd {
        c(
            "projects",
            format!("{{{}={{trust_level=\"trusted\"}}}}", toml_str(&path(cwd))),
        );
    }
    Wiring {
        files: vec![],
        links: vec![],
        args,
        env: vec![],
        summary: vec![
            "--no-daemon: this member's MCP server and hooks run in its own process tree".into(),
            "MCP server `fleet` (fleetd mcp, with FLEETD_STATE_DIR and FLEETD_MEMBER; required, pre-approved) by -c mcp_servers.fleet".into(),
            format!(
                "hooks {} -> fleetd signal --hook, pre-trusted, by -c hooks",
                CODEX_HOOKS.iter().map(|h| h.0).collect::<Vec<_>>().join(", ")
            ),
            "the working directory trusted, by -c".into(),
            format!(
                "charter given as SessionStart context from {}",
                path(m.charter)
            ),
        ],
    }
}

/// Gemini CLI hooks.
pub const GEMINI_HOOKS: &[&str] = &[
    "SessionStart",
    "BeforeAgent",
    "AfterAgent",
    "AfterTool",
    "Notification",
    "SessionEnd",
];

/// JSON with comments (Gemini CLI's settings files allow `//` and `/* */`), comments removed.
pub fn strip_json_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_str = false;
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        out.push(n);
                    }
                }
                '"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_str = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for n in chars.by_ref() {
                    if n == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut prev = ' ';
                for n in chars.by_ref() {
                    if prev == '*' && n == '/' {
                        break;
                    }
                    prev = n;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Gemini CLI: a per-member Gemini home (`GEMINI_CLI_HOME`) whose `.gemini` holds the user's
/// own entries (credentials, history, extensions: linked, not copied) and a `settings.json`
/// that is the user's settings plus fleetd's: the MCP server (trusted: no dialog per fleet
/// call), the hooks (added to the user's), and the input box pinned to the bottom rows
/// (`ui.useAlternateBuffer`) so the screen rules find it. The charter comes back from the
/// `SessionStart` hook as additional context (`GEMINI_SYSTEM_MD` would replace Gemini's whole
/// system prompt). A system settings file cannot be used: Gemini reads one only when it and
/// every directory above it belong to root.
fn gemini(m: &Member, user: &UserConfig) -> Wiring {
    let home = m.dir.join("gemini-home");
    let dot = home.join(".gemini");
    let settings = dot.join("settings.json");
    // Gemini CLI keeps the hook's context in its session file but does not replay it on
    // `--resume`: a resumed member is given its charter again.
    let command = format!("{} --context-on-resume", hook_command_with_charter(m));
    let ours = json!({ "hooks": [{ "type": "command", "command": command, "name": "fleetd", "timeout": 10000 }] });
    let mut merged = user
        .settings
        .as_deref()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&strip_json_comments(t)).ok())
        .filter(|v| v.is_object())
        .unwrap_or_else(|| json!({}));
    merged["mcpServers"]["fleet"] = json!({
        "command": path(m.fleetd),
        "args": shim_args(m),
        "env": shim_env(m),
        "trust": true,
    });
    for e in GEMINI_HOOKS {
        let list = &mut merged["hooks"][*e];
        if !list.is_array() {
            *list = json!([]);
        }
        if let Some(a) = list.as_array_mut() {
            a.push(ours.clone());
        }
    }
    merged["ui"]["useAlternateBuffer"] = json!(true);
    let links = match &user.dir {
        Some(d) => user
            .entries
            .iter()
            .filter(|e| e.as_str() != "settings.json")
            .map(|e| (d.join(e), dot.join(e)))
            .collect(),
        None => vec![],
    };
    Wiring {
        files: vec![(settings.clone(), pretty(&merged))],
        links,
        args: vec![],
        env: vec![("GEMINI_CLI_HOME".into(), path(&home))],
        summary: vec![
            format!(
                "MCP server `fleet` (fleetd mcp, trusted) and hooks {} -> fleetd signal --hook, added to your settings in {} (GEMINI_CLI_HOME; the rest of ~/.gemini linked)",
                GEMINI_HOOKS.join(", "),
                path(&settings)
            ),
            format!(
                "charter given as SessionStart context from {}",
                path(m.charter)
            ),
        ],
    }
}

/// The opencode plugin: reports the session's events to `fleetd signal --hook`, one at a
/// time and in order (spawned reports can otherwise overtake each other), skipping repeats.
/// The payload goes on the report's stdin, never its command line (which every local user can
/// read); of a user message it carries only the first line, the header that tells the daemon
/// the turn is on its paste.
fn opencode_plugin(m: &Member) -> String {
    let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
    format!(
        r#"// Generated by fleetd for member {name}: reports this opencode's session events to
// fleetd (`fleetd signal --hook`). Regenerated at every spawn; do not edit.
import {{ spawn }} from "node:child_process";
const FLEETD = {fleetd};
const STATE = {state};
let chain = Promise.resolve();
let last = "";
function report(payload) {{
  const key = payload.event + ":" + (payload.prompt || "");
  if (key === last) return;
  last = key;
  chain = chain.then(() => new Promise((resolve) => {{
    try {{
      const p = spawn(FLEETD, ["--state-dir", STATE, "signal", "--hook"], {{ stdio: ["pipe", "ignore", "ignore"] }});
      p.on("exit", resolve);
      p.on("error", resolve);
      p.stdin.on("error", () => {{}});
      p.stdin.end(JSON.stringify(payload));
    }} catch (e) {{ resolve(); }}
  }}));
}}
export const FleetdPlugin = async () => ({{
  event: async ({{ event }}) => {{
    const p = event.properties || {{}};
    const session_id = p.sessionID || (p.info && p.info.id) || undefined;
    switch (event.type) {{
      case "session.created": report({{ event: "session-start", session_id }}); break;
      case "session.status":
        if (p.status && p.status.type === "busy") report({{ event: "working", session_id }});
        break;
      case "session.idle": report({{ event: "idle", session_id }}); break;
      case "permission.asked": report({{ event: "permission", session_id }}); break;
      case "permission.replied": report({{ event: "working", session_id }}); break;
    }}
  }},
  "chat.message": async (input, output) => {{
    const parts = (output && output.parts) || [];
    const text = parts.filter((x) => x && x.type === "text").map((x) => x.text).join("\n");
    const prompt = text.split("\n", 1)[0].slice(0, 512);
    report({{ event: "turn-started", session_id: input && input.sessionID, prompt }});
  }},
}});
"#,
        name = m.name,
        fleetd = q(&path(m.fleetd)),
        state = q(&path(m.state_dir)),
    )
}

/// opencode: a config file merged over the user's (`OPENCODE_CONFIG`) with the MCP server, the
/// charter as instructions, and the plugin that reports its events (opencode has no command
/// hooks), named by a `file://` URL: a plugin in a config directory would make opencode wait at
/// start for an `npm install` into that directory.
fn opencode(m: &Member) -> Wiring {
    let config = m.dir.join("opencode.json");
    let plugin = m.dir.join("fleetd-plugin.js");
    let mut command = vec![path(m.fleetd)];
    command.extend(shim_args(m));
    let text = json!({
        "mcp": {
            "fleet": {
                "type": "local",
                "command": command,
                "environment": shim_env(m),
                "enabled": true,
            }
        },
        "instructions": [path(m.charter)],
        "plugin": [format!("file://{}", path(&plugin))],
    });
    Wiring {
        files: vec![
            (config.clone(), pretty(&text)),
            (plugin.clone(), opencode_plugin(m)),
        ],
        links: vec![],
        args: vec![],
        env: vec![("OPENCODE_CONFIG".into(), path(&config))],
        summary: vec![format!(
            "MCP server `fleet` (fleetd mcp), the charter as instructions, and the plugin {} that reports session events -> fleetd signal --hook, in {} (OPENCODE_CONFIG)",
            path(&plugin),
            path(&config)
        )],
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_default() + "\n"
}

/// The wiring for a member of kind `kind`; `user` what the spawn read of the user's own config
/// for this CLI. Every CLI reads its charter from the charter file (`m.charter`): no charter,
/// prompt or hook payload is ever put on a command line or in the environment.
pub fn wire(kind: AgentKind, m: &Member, user: &UserConfig) -> Wiring {
    match kind {
        AgentKind::Claude => claude(m),
        AgentKind::Codex => codex(m),
        AgentKind::Gemini => gemini(m, user),
        AgentKind::Opencode => opencode(m),
    }
}

/// The version number in a CLI's `--version` output (the first thing that looks like one).
pub fn version_in(output: &str) -> Option<String> {
    output
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')' || c == ',')
        .map(|w| w.trim_start_matches('v'))
        .find(|w| {
            let parts: Vec<&str> = w.split('.').collect();
            parts.len() >= 2
                && parts
                    .iter()
                    .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        })
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member<'a>(dir: &'a Path) -> Member<'a> {
        Member {
            name: "w1",
            fleetd: Path::new("/opt/fleet d/fleetd"),
            state_dir: Path::new("/var/lib/fleetd"),
            charter: Path::new("/var/lib/fleetd/charters/w1.md"),
            dir,
            cwd: Some(Path::new("/src/proj")),
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("/usr/bin/fleetd"), "/usr/bin/fleetd");
        assert_eq!(shell_quote("/a b/it's"), r"'/a b/it'\''s'");
        assert_eq!(shell_quote(""), "''");
        for tricky in ["a\"b\\c", "it's", "x\ny", "'''"] {
            let t: toml::Table = toml::from_str(&format!("v = {}", toml_str(tricky))).unwrap();
            assert_eq!(t["v"].as_str(), Some(tricky));
        }
    }

    #[test]
    fn claude_is_wired_with_files_and_flags() {
        let dir = PathBuf::from("/var/lib/fleetd/agents/w1");
        let w = wire(AgentKind::Claude, &member(&dir), &UserConfig::default());
        assert_eq!(
            w.args,
            [
                "--mcp-config",
                "/var/lib/fleetd/agents/w1/mcp.json",
                "--settings",
                "/var/lib/fleetd/agents/w1/settings.json",
                "--append-system-prompt-file",
                "/var/lib/fleetd/charters/w1.md"
            ]
        );
        let mcp: serde_json::Value = serde_json::from_str(&w.files[0].1).unwrap();
        let server = &mcp["mcpServers"]["fleet"];
        assert_eq!(server["command"], "/opt/fleet d/fleetd");
        assert_eq!(
            server["args"],
            json!(["--state-dir", "/var/lib/fleetd", "mcp"])
        );
        assert_eq!(server["env"]["FLEETD_MEMBER"], "w1");
        let settings: serde_json::Value = serde_json::from_str(&w.files[1].1).unwrap();
        for e in CLAUDE_HOOKS {
            let cmd = settings["hooks"][e][0]["hooks"][0]["command"]
                .as_str()
                .unwrap();
            assert_eq!(
                cmd,
                "'/opt/fleet d/fleetd' --state-dir /var/lib/fleetd signal --hook"
            );
        }
        assert_eq!(settings["permissions"]["allow"], json!(["mcp__fleet"]));
    }

    #[test]
    fn codex_is_wired_by_overrides_that_parse_as_toml() {
        let dir = PathBuf::from("/x");
        let w = wire(AgentKind::Codex, &member(&dir), &UserConfig::default());
        assert!(w.files.is_empty());
        assert_eq!(w.args[0], "--no-daemon");
        let mut doc = toml::Table::new();
        for pair in w.args[1..].chunks(2) {
            assert_eq!(pair[0], "-c");
            let (k, v) = pair[1].split_once('=').unwrap();
            let parsed: toml::Table =
                toml::from_str(&format!("v = {v}")).unwrap_or_else(|e| panic!("{k}: {v}: {e}"));
            doc.insert(k.to_string(), parsed["v"].clone());
        }
        assert_eq!(
            doc["features.daemon_auto_start"],
            toml::Value::Boolean(false)
        );
        let mcp = doc["mcp_servers.fleet"].as_table().unwrap();
        assert_eq!(
            mcp["env_vars"],
            toml::Value::Array(vec!["FLEETD_STATE_DIR".into(), "FLEETD_MEMBER".into()])
        );
        assert_eq!(mcp["required"], toml::Value::Boolean(true));
        assert_eq!(
            mcp["args"].as_array().unwrap()[0].as_str(),
            Some("--state-dir")
        );
        // The charter comes from its file by the SessionStart hook, never by a -c value.
        assert!(!doc.contains_key("developer_instructions"), "{doc:?}");
        let hooks = doc["hooks"].as_table().unwrap();
        let stop = &hooks["Stop"].as_array().unwrap()[0]["hooks"][0];
        assert_eq!(
            stop["command"].as_str(),
            Some(
                "'/opt/fleet d/fleetd' --state-dir /var/lib/fleetd signal --hook --context /var/lib/fleetd/charters/w1.md"
            )
        );
        let state = doc["hooks.state"].as_table().unwrap();
        assert_eq!(state.len(), CODEX_HOOKS.len());
        assert!(state.contains_key("/<session-flags>/config.toml:interrupt:0:0"));
        let projects = doc["projects"].as_table().unwrap();
        assert_eq!(
            projects["/src/proj"]["trust_level"].as_str(),
            Some("trusted")
        );
    }

    #[test]
    fn codex_hook_trust_matches_what_codex_computes() {
        // Computed by Codex 0.171's "Trust all" for this hook (docs/AGENTS.md, the research's
        // hooks_override.py reproduces it): sha256 of the compact, key-sorted hook group.
        let h = codex_hook_trust("stop", "fleetd signal codex Stop", 10);
        let canonical = r#"{"event_name":"stop","hooks":[{"async":false,"command":"fleetd signal codex Stop","timeout":10,"type":"command"}]}"#;
        use sha2::{Digest, Sha256};
        let want: String = Sha256::digest(canonical.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(h, format!("sha256:{want}"));
    }

    #[test]
    // Checks the generated plugin with a real node, where one is installed.
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
    fn gemini_and_opencode_are_wired_through_generated_config_files() {
        let dir = PathBuf::from("/var/lib/fleetd/agents/w1");
        let user = UserConfig {
            dir: Some(PathBuf::from("/home/u/.gemini")),
            settings: Some(
                r#"{ // mine
                    "security": {"auth": {"selectedType": "oauth-personal"}},
                    /* a hook of my own */
                    "hooks": {"AfterAgent": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]},
                    "url": "http://x/*not a comment*/"
                }"#
                .into(),
            ),
            entries: vec!["oauth_creds.json".into(), "settings.json".into(), "tmp".into()],
        };
        let w = wire(AgentKind::Gemini, &member(&dir), &user);
        assert_eq!(
            w.env,
            vec![(
                "GEMINI_CLI_HOME".to_string(),
                "/var/lib/fleetd/agents/w1/gemini-home".to_string()
            )]
        );
        let g: serde_json::Value = serde_json::from_str(&w.files[0].1).unwrap();
        assert!(w.files[0].0.ends_with("gemini-home/.gemini/settings.json"));
        // The user's settings are kept, fleetd's added.
        assert_eq!(g["security"]["auth"]["selectedType"], "oauth-personal");
        assert_eq!(g["url"], "http://x/*not a comment*/");
        assert_eq!(g["mcpServers"]["fleet"]["trust"], true);
        assert_eq!(g["mcpServers"]["fleet"]["env"]["FLEETD_MEMBER"], "w1");
        let after = g["hooks"]["AfterAgent"].as_array().unwrap();
        assert_eq!(after.len(), 2, "the user's hook stays: {after:?}");
        let cmd = after[1]["hooks"][0]["command"].as_str().unwrap();
        assert!(
            cmd.ends_with(
                "signal --hook --context /var/lib/fleetd/charters/w1.md --context-on-resume"
            ),
            "{cmd}"
        );
        assert_eq!(
            w.links,
            vec![
                (
                    PathBuf::from("/home/u/.gemini/oauth_creds.json"),
                    PathBuf::from("/var/lib/fleetd/agents/w1/gemini-home/.gemini/oauth_creds.json")
                ),
                (
                    PathBuf::from("/home/u/.gemini/tmp"),
                    PathBuf::from("/var/lib/fleetd/agents/w1/gemini-home/.gemini/tmp")
                ),
            ]
        );
        let w = wire(AgentKind::Opencode, &member(&dir), &UserConfig::default());
        let o: serde_json::Value = serde_json::from_str(&w.files[0].1).unwrap();
        assert_eq!(
            o["mcp"]["fleet"]["command"],
            json!([
                "/opt/fleet d/fleetd",
                "--state-dir",
                "/var/lib/fleetd",
                "mcp"
            ])
        );
        assert_eq!(o["instructions"], json!(["/var/lib/fleetd/charters/w1.md"]));
        let plugin = &w.files[1].1;
        assert!(
            plugin.contains(r#"const FLEETD = "/opt/fleet d/fleetd";"#),
            "{plugin}"
        );
        assert_eq!(
            o["plugin"],
            json!([format!("file://{}", w.files[1].0.display())])
        );
        assert_eq!(
            w.env.len(),
            1,
            "no config dir: opencode would npm-install into it"
        );
        // The plugin is valid JavaScript (opencode drops one that is not, silently).
        if let Ok(node) = which_node() {
            let dir = tempfile::tempdir().unwrap();
            let f = dir.path().join("p.mjs");
            std::fs::write(&f, plugin).unwrap();
            let out = std::process::Command::new(node)
                .arg("--check")
                .arg(&f)
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    #[test]
    // Runs the generated plugin with a real node, where one is installed.
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
    fn the_opencode_plugin_reports_on_stdin_and_never_on_the_command_line() {
        use std::os::unix::fs::PermissionsExt;
        let Ok(node) = which_node() else {
            eprintln!("skipped: no node on PATH to run the generated opencode plugin");
            return;
        };
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        // A stand-in for fleetd that records its command line and its stdin, one report each.
        let fake = d.join("fleetd");
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{0}/argv'\ncat >> '{0}/stdin'\necho >> '{0}/stdin'\n",
                d.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o700)).unwrap();
        let m = Member {
            name: "w1",
            fleetd: &fake,
            state_dir: d,
            charter: &d.join("charter.md"),
            dir: d,
            cwd: None,
        };
        let plugin = d.join("plugin.mjs");
        std::fs::write(&plugin, opencode_plugin(&m)).unwrap();
        let header = "[fleet ticket t-1 from lead · answer with fleet_reply]";
        let body = "MESSAGE-MARKER-51c2: the body of the pasted message";
        let driver = d.join("driver.mjs");
        std::fs::write(
            &driver,
            format!(
                r#"import {{ FleetdPlugin }} from {url};
const p = await FleetdPlugin();
await p["chat.message"]({{ sessionID: "s1" }}, {{ parts: [{{ type: "text", text: {text} }}] }});
await p.event({{ event: {{ type: "session.idle", properties: {{ sessionID: "s1" }} }} }});
"#,
                url = serde_json::to_string(&format!("file://{}", plugin.display())).unwrap(),
                text = serde_json::to_string(&format!("{header}\n{body}\n{body}")).unwrap(),
            ),
        )
        .unwrap();
        // node exits once every report's child has: the reports are chained.
        let out = std::process::Command::new(node)
            .arg(&driver)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let argv = std::fs::read_to_string(d.join("argv")).unwrap();
        let lines: Vec<&str> = argv.lines().collect();
        let args = format!("--state-dir {} signal --hook", d.display());
        assert_eq!(lines, [args.as_str(), args.as_str()], "{argv}");
        let stdin = std::fs::read_to_string(d.join("stdin")).unwrap();
        let reports: Vec<serde_json::Value> = stdin
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            reports,
            [
                json!({"event": "turn-started", "session_id": "s1", "prompt": header}),
                json!({"event": "idle", "session_id": "s1"}),
            ]
        );
        assert!(!stdin.contains("MESSAGE-MARKER"), "{stdin}");
    }

    /// node, for checking the generated plugin's syntax where it is installed.
    #[allow(clippy::disallowed_methods)]
    fn which_node() -> Result<std::path::PathBuf, ()> {
        std::env::var_os("PATH")
            .and_then(|p| {
                std::env::split_paths(&p)
                    .map(|d| d.join("node"))
                    .find(|p| p.is_file())
            })
            .ok_or(())
    }

    #[test]
    fn versions() {
        assert_eq!(
            version_in("2.1.332 (Claude Code)").as_deref(),
            Some("2.1.332")
        );
        assert_eq!(version_in("codex-cli 0.171.0").as_deref(), Some("0.171.0"));
        assert_eq!(version_in("v1.18.33\n").as_deref(), Some("1.18.33"));
        assert_eq!(version_in("no version here"), None);
    }
}
