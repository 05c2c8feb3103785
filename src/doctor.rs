//! `fleetd agents`: which agent CLIs the profiles launch, whether each is installed (on the
//! daemon's PATH), its version, and whether that version is one its profile was verified
//! against.
//!
//! Owns finding and asking the CLIs (`--version`, bounded in time). Must never start an agent
//! session or change anything.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fleetd_actors::config::Config;
use serde::{Deserialize, Serialize};

/// One profile's row (`GET /agents`; the CLI reads it back as this type).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AgentRow {
    pub profile: String,
    /// The CLI it wires (claude, codex, gemini, opencode), if any.
    pub agent: Option<String>,
    pub command: String,
    /// Where the command was found; None: not installed.
    pub path: Option<String>,
    pub version: Option<String>,
    pub verified_versions: Vec<String>,
    /// Whether the installed version is one the profile was verified against (None: the
    /// profile lists none, or the CLI is missing).
    pub verified: Option<bool>,
}

/// `exe` as the daemon would run it: a path as given, else the first match on PATH.
pub fn find(exe: &str) -> Option<PathBuf> {
    if exe.contains('/') {
        let p = PathBuf::from(exe);
        return is_executable(&p).then_some(p);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(exe))
            .find(|p| is_executable(p))
    })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

async fn version_of(path: &Path) -> Option<String> {
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::process::Command::new(path)
            .arg("--version")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .ok()?
    .ok()?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    fleetd_actors::agents::version_in(&text)
}

/// Every profile of `config`, checked (the CLIs are asked in parallel).
pub async fn check(config: &Config) -> Vec<AgentRow> {
    let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("fleetd"));
    let rows = config.profiles.iter().map(|(name, p)| {
        let command = p
            .command
            .first()
            .map(|c| c.replace("{fleetd}", &exe.display().to_string()))
            .unwrap_or_default();
        let agent = p.agent;
        let verified_versions = p.verified.clone();
        let name = name.clone();
        async move {
            let path = (!command.is_empty()).then(|| find(&command)).flatten();
            let version = match (&path, agent) {
                (Some(p), Some(_)) => version_of(p).await,
                _ => None,
            };
            let verified = match (&version, verified_versions.is_empty()) {
                (Some(v), false) => Some(verified_versions.contains(v)),
                _ => None,
            };
            AgentRow {
                profile: name,
                agent: agent.map(|a| a.to_string()),
                command,
                path: path.map(|p| p.display().to_string()),
                version,
                verified_versions,
                verified,
            }
        }
    });
    futures::future::join_all(rows).await
}
