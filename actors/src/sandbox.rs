//! The sandbox's shell: tries bubblewrap once per program (`Sandbox::probe`), and lays out what
//! one member sees from the real paths (`layout`: canonical paths, only those that exist, which
//! hidden path is a directory). The rules and the command line are `fleetd_core::sandbox`,
//! re-exported here. Must never let a member run unconfined without the spawn saying so, and
//! never decide anything the core decides.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

pub use fleetd_core::sandbox::*;

/// The probe's last answer, per bubblewrap program (a reload may name another).
#[derive(Default)]
pub struct Sandbox {
    probed: Mutex<Option<(String, Probe)>>,
    /// Whether a spawn has said why members run unconfined (said once, in full).
    said_unconfined: std::sync::atomic::AtomicBool,
}

impl Sandbox {
    /// What bubblewrap does here (run once per program, then remembered). Blocking: a few
    /// milliseconds, the first time.
    pub fn probe(&self, cfg: &SandboxConfig) -> Probe {
        let program = cfg.program().to_string();
        let mut g = self.probed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((p, probe)) = g.as_ref()
            && *p == program
        {
            return probe.clone();
        }
        let probe = run_probe(&program);
        match &probe {
            Probe::Works { version, .. } => {
                tracing::info!(program, version, "members run confined by bubblewrap")
            }
            Probe::Unavailable { why } => {
                tracing::warn!(program, why, "members cannot be confined here")
            }
        }
        *g = Some((program, probe.clone()));
        probe
    }

    /// True the first time it is asked (whether a spawn is the first to run unconfined).
    pub fn first_unconfined(&self) -> bool {
        !self
            .said_unconfined
            .swap(true, std::sync::atomic::Ordering::Relaxed)
    }
}

fn run_probe(program: &str) -> Probe {
    let version = match Command::new(program)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Ok(o) => {
            return Probe::Unavailable {
                why: format!(
                    "`{program} --version` failed: {}",
                    crate::types::truncate(String::from_utf8_lossy(&o.stderr).trim(), 200)
                ),
            };
        }
        Err(e) => {
            return Probe::Unavailable {
                why: format!(
                    "bubblewrap (`{program}`) could not be run: {e}; install it (Debian and Ubuntu: apt-get install bubblewrap)"
                ),
            };
        }
    };
    match Command::new(program)
        .args(NAMESPACES)
        .args(["--", "true"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(o) if o.status.success() => Probe::Works {
            program: program.to_string(),
            version,
        },
        Ok(o) => Probe::Unavailable {
            why: format!(
                "`{program}` cannot build a sandbox here ({}); it needs unprivileged user namespaces (sysctl user.max_user_namespaces > 0, and kernel.unprivileged_userns_clone = 1 or an AppArmor profile that allows bwrap where those apply)",
                crate::types::truncate(String::from_utf8_lossy(&o.stderr).trim(), 200)
            ),
        },
        Err(e) => Probe::Unavailable {
            why: format!("`{program}` could not be run: {e}"),
        },
    }
}

/// A path as the kernel sees it (symlinks resolved), if it exists.
fn real(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok()
}

/// What member `name` sees, from the real filesystem: its own paths that exist, the secrets
/// that exist, all canonical. `own_rw` are its wiring dir and worktree, `own_ro` its charter.
pub fn layout(
    cfg: &crate::config::Config,
    state_dir: &Path,
    own_rw: &[PathBuf],
    own_ro: &[PathBuf],
    cwd: Option<&Path>,
) -> Layout {
    let state = real(state_dir).unwrap_or_else(|| state_dir.to_path_buf());
    let reals = |ps: &[PathBuf]| ps.iter().filter_map(|p| real(p)).collect::<Vec<_>>();
    let mut secrets: Vec<String> = cfg.sandbox.hide.clone();
    secrets.extend(cfg.api.token_file.clone());
    secrets.extend(cfg.daemon.key_file.clone());
    let hidden = secrets
        .iter()
        .filter_map(|s| real(Path::new(s)))
        .filter(|p| !p.starts_with(&state))
        .map(|p| Hidden {
            dir: p.is_dir(),
            path: p,
        })
        .collect();
    Layout {
        socket_dir: real(&state_dir.join(SOCKET_DIR)),
        links: ["mcp.sock", "api.sock"]
            .iter()
            .map(|n| (state.join(n), format!("{SOCKET_DIR}/{n}")))
            .collect(),
        own_rw: reals(own_rw),
        own_ro: reals(own_ro),
        hidden,
        cwd: cwd.and_then(real),
        state_dir: state,
    }
}

/// Whether `program` (a member's argv\[0\]) names an executable file, found as `execvp` would
/// find it: a path with a `/` (relative to `cwd`), else the first match in `path` (the member's
/// PATH). A confined member's program is started by bubblewrap, after the terminal is up, so
/// this is how its spawn still refuses a command that does not exist (as the PTY host does for
/// an unconfined one).
pub fn find_program(program: &str, path: &str, cwd: Option<&Path>) -> Result<PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.is_empty() {
        return Err("the command is empty".into());
    }
    if program.contains('/') {
        let p = match (Path::new(program).is_absolute(), cwd) {
            (false, Some(c)) => c.join(program),
            _ => PathBuf::from(program),
        };
        return match runnable(&p) {
            true => Ok(p),
            false => Err(format!("{program}: no such executable file")),
        };
    }
    path.split(':')
        .map(|d| Path::new(if d.is_empty() { "." } else { d }).join(program))
        .find(|p| runnable(p))
        .ok_or_else(|| format!("{program}: not found in PATH"))
}
