//! Confining a member: whether its agent runs in a sandbox, and the bubblewrap (`bwrap`) command
//! line that builds it.
//!
//! Owns the sandbox's rules, as data: what a confined member sees of the filesystem (everything
//! as the user sees it, but the state dir replaced by an empty read-only directory in which only
//! the member's own paths are mounted back: its wiring, its charter, its worktree, the MCP and
//! hook sockets; the token and key files hidden wherever they live), a pid namespace of its own
//! (no other process's `/proc`, no signals or ptrace across it), a `/dev` of its own (no other
//! terminal's `/dev/pts/N`), and what the mode in `[sandbox]` means when bubblewrap works or does
//! not (`decide`). Must never look at the filesystem or run anything: the shell probes bubblewrap,
//! canonicalises the paths and says which hidden path is a directory; this builds argv.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::FleetError;

/// `[sandbox] mode`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Confine every member with bubblewrap where it works; where it does not, run unconfined
    /// and say so (the default).
    #[default]
    Auto,
    /// Confine every member; a spawn that cannot be confined is refused.
    Bwrap,
    /// Run members unconfined, as the daemon's user.
    Off,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Bwrap => "bwrap",
            Mode::Off => "off",
        }
    }
}

/// `[sandbox]`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxConfig {
    pub mode: Mode,
    /// The bubblewrap program (a name looked up in PATH, or a path).
    pub bwrap: Option<String>,
    /// More paths a confined member must not see (files become empty, directories empty and
    /// read-only): secrets of your own outside the state dir.
    pub hide: Vec<String>,
}

impl SandboxConfig {
    /// The bubblewrap program to run.
    pub fn program(&self) -> &str {
        self.bwrap.as_deref().unwrap_or("bwrap")
    }

    /// The config check's part: hidden paths must be absolute.
    pub fn check(&self) -> Result<(), String> {
        for h in &self.hide {
            if !Path::new(h).is_absolute() {
                return Err(format!(
                    "[sandbox] hide: `{h}` is not an absolute path (accepted: absolute paths)"
                ));
            }
        }
        if let Some(b) = &self.bwrap
            && b.trim().is_empty()
        {
            return Err("[sandbox] bwrap is empty (accepted: a program name or path)".into());
        }
        Ok(())
    }
}

/// What the shell found when it tried bubblewrap once (`bwrap ... true` with the namespaces a
/// member gets).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Probe {
    /// It ran: this program builds sandboxes here.
    Works { program: String, version: String },
    /// It did not, and why (not installed; no user namespaces; ...).
    Unavailable { why: String },
}

/// How one member runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// In a bubblewrap sandbox built by `program`.
    Confined { program: String },
    /// Unconfined: the config says so (`off`), or the sandbox cannot be built here (`why`).
    Unconfined { why: String },
}

/// Whether a member runs confined, by the mode, what the probe found, and where it starts.
/// `Bwrap` refuses what `Auto` runs unconfined.
pub fn decide(
    mode: Mode,
    probe: &Probe,
    state_dir: &Path,
    cwd: Option<&Path>,
    own: &[PathBuf],
) -> Result<Decision, FleetError> {
    let cannot = |why: String| {
        match mode {
        Mode::Bwrap => Err(FleetError::invalid(
            "a confined spawn",
            format!("the sandbox cannot be built: {why}"),
            "a machine where bubblewrap runs (installed, with user namespaces), or [sandbox] mode = \"auto\" or \"off\"",
        )
        .with_rule("SANDBOX")),
        _ => Ok(Decision::Unconfined { why }),
    }
    };
    if mode == Mode::Off {
        return Ok(Decision::Unconfined {
            why: "[sandbox] mode = \"off\"".into(),
        });
    }
    if let Some(cwd) = cwd
        && cwd.starts_with(state_dir)
        && !own.iter().any(|o| cwd.starts_with(o))
    {
        return cannot(format!(
            "its working directory {} is inside the state dir, which a confined member does not see",
            cwd.display()
        ));
    }
    match probe {
        Probe::Works { program, .. } => Ok(Decision::Confined {
            program: program.clone(),
        }),
        Probe::Unavailable { why } => cannot(why.clone()),
    }
}

/// How members run on this daemon, as `fleetd status` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// `[sandbox] mode`.
    pub mode: Mode,
    /// Whether new members run confined.
    pub confined: bool,
    /// The sandbox (`bubblewrap 0.8.0`), or why members run unconfined.
    pub detail: String,
}

/// What `fleetd status` says of the sandbox, by the mode and what the probe found.
pub fn status(mode: Mode, probe: &Probe) -> Status {
    let (confined, detail) = match (mode, probe) {
        (Mode::Off, _) => (
            false,
            "[sandbox] mode = \"off\": members run as the daemon's user".to_string(),
        ),
        (_, Probe::Works { version, .. }) => (true, version.clone()),
        (Mode::Bwrap, Probe::Unavailable { why }) => (false, format!("spawns are refused: {why}")),
        (Mode::Auto, Probe::Unavailable { why }) => {
            (false, format!("members run unconfined: {why}"))
        }
    };
    Status {
        mode,
        confined,
        detail,
    }
}

/// A path a confined member must not see, and whether it is a directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hidden {
    pub path: PathBuf,
    pub dir: bool,
}

/// What a confined member sees, with every path canonical (the shell resolves symlinks first:
/// a mount over a symlinked path would land elsewhere).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// The state dir: replaced by an empty read-only directory.
    pub state_dir: PathBuf,
    /// The member's own directories and files, read-write (its wiring dir, its worktree).
    pub own_rw: Vec<PathBuf>,
    /// The member's own files, read-only (its charter).
    pub own_ro: Vec<PathBuf>,
    /// The directory of the sockets it talks to fleetd on (MCP and hooks), mounted read-only:
    /// the directory, not the files, so that sockets bound again after a restart are reached.
    pub socket_dir: Option<PathBuf>,
    /// Symlinks made in the emptied state dir: (link, target), the sockets' public names.
    pub links: Vec<(PathBuf, String)>,
    /// Secrets outside the state dir (the API token file, the host key file, `[sandbox] hide`).
    pub hidden: Vec<Hidden>,
    /// Where it starts.
    pub cwd: Option<PathBuf>,
}

/// What every confined member starts from, and what the shell's probe tries with `true`: the
/// user's whole view, its own pid and IPC namespaces, `/proc` and `/dev`, gone with its parent.
pub const NAMESPACES: &[&str] = &[
    "--die-with-parent",
    "--unshare-pid",
    "--unshare-ipc",
    "--dev-bind",
    "/",
    "/",
    "--proc",
    "/proc",
    "--dev",
    "/dev",
];

/// The state dir's subdirectory where the daemon's listening sockets are (`api.sock` and
/// `mcp.sock` at the top of the state dir are symlinks into it).
pub const SOCKET_DIR: &str = "sock";

/// Size of the empty directory that replaces the state dir: it holds only the mount points of
/// the member's own paths.
const STATE_TMPFS_BYTES: u32 = 1 << 20;

/// The command that runs `argv` confined by `program` (bubblewrap) in `layout`. Later mounts
/// cover earlier ones, so the order is: the user's whole view, a `/proc` and `/dev` of its own,
/// the state dir emptied, the member's own paths mounted back, the secrets hidden, the emptied
/// state dir made read-only.
pub fn command(program: &str, layout: &Layout, argv: &[String]) -> Vec<String> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let mut c: Vec<String> = std::iter::once(program)
        .chain(NAMESPACES.iter().copied())
        .map(str::to_string)
        .collect();
    let state = s(&layout.state_dir);
    c.extend([
        "--size".into(),
        STATE_TMPFS_BYTES.to_string(),
        "--perms".into(),
        "0700".into(),
        "--tmpfs".into(),
        state.clone(),
    ]);
    let inside = |p: &Path| p.starts_with(&layout.state_dir);
    for p in layout.own_rw.iter().filter(|p| inside(p)) {
        c.extend(["--bind".into(), s(p), s(p)]);
    }
    for p in layout.own_ro.iter().filter(|p| inside(p)) {
        c.extend(["--ro-bind".into(), s(p), s(p)]);
    }
    for p in layout.socket_dir.iter().filter(|p| inside(p)) {
        c.extend(["--ro-bind".into(), s(p), s(p)]);
    }
    for (link, target) in layout.links.iter().filter(|(l, _)| inside(l)) {
        c.extend(["--symlink".into(), target.clone(), s(link)]);
    }
    for h in &layout.hidden {
        if h.dir {
            c.extend([
                "--size".into(),
                "4096".into(),
                "--tmpfs".into(),
                s(&h.path),
                "--remount-ro".into(),
                s(&h.path),
            ]);
        } else {
            c.extend(["--ro-bind".into(), "/dev/null".into(), s(&h.path)]);
        }
    }
    c.extend(["--remount-ro".into(), state]);
    if let Some(cwd) = &layout.cwd {
        c.extend(["--chdir".into(), s(cwd)]);
    }
    c.push("--".into());
    c.extend(argv.iter().cloned());
    c
}

/// The note a spawn carries on how its member runs.
pub fn note(decision: &Decision, first: bool) -> String {
    match decision {
        Decision::Confined { .. } => "sandbox: bwrap (its own pid namespace and /dev; of the state dir it sees only its own wiring, charter, worktree and sockets)".into(),
        Decision::Unconfined { why } if first => format!(
            "sandbox: none, the member runs unconfined as the daemon's user ({why}); see `fleetd status`"
        ),
        Decision::Unconfined { .. } => "sandbox: none (see `fleetd status`)".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        Layout {
            state_dir: "/s".into(),
            own_rw: vec![
                "/s/agents/w".into(),
                "/s/worktrees/w".into(),
                "/home/u".into(),
            ],
            own_ro: vec!["/s/charters/w.md".into()],
            socket_dir: Some("/s/sock".into()),
            links: vec![
                ("/s/mcp.sock".into(), "sock/mcp.sock".into()),
                ("/s/api.sock".into(), "sock/api.sock".into()),
            ],
            hidden: vec![
                Hidden {
                    path: "/etc/fleetd/token".into(),
                    dir: false,
                },
                Hidden {
                    path: "/etc/fleetd/keys".into(),
                    dir: true,
                },
            ],
            cwd: Some("/s/worktrees/w".into()),
        }
    }

    fn pos(c: &[String], seq: &[&str]) -> usize {
        c.windows(seq.len())
            .position(|w| w.iter().zip(seq).all(|(a, b)| a == b))
            .unwrap_or_else(|| panic!("{seq:?} not in {c:?}"))
    }

    #[test]
    fn the_state_dir_is_emptied_before_the_own_paths_come_back_and_read_only_after() {
        let argv = vec!["claude".to_string(), "--x".into()];
        let c = command("bwrap", &layout(), &argv);
        let tmpfs = pos(&c, &["--tmpfs", "/s"]);
        assert!(pos(&c, &["--dev-bind", "/", "/"]) < tmpfs);
        for own in [
            &["--bind", "/s/agents/w", "/s/agents/w"][..],
            &["--bind", "/s/worktrees/w", "/s/worktrees/w"],
            &["--ro-bind", "/s/charters/w.md", "/s/charters/w.md"],
            &["--ro-bind", "/s/sock", "/s/sock"],
            &["--symlink", "sock/mcp.sock", "/s/mcp.sock"],
            &["--symlink", "sock/api.sock", "/s/api.sock"],
        ] {
            let at = pos(&c, own);
            assert!(tmpfs < at && at < pos(&c, &["--remount-ro", "/s"]));
        }
        // A path outside the state dir is the user's already: not mounted again.
        assert!(!c.iter().any(|a| a == "/home/u"));
        // Secrets are covered, files by /dev/null, directories by an empty read-only tmpfs.
        pos(&c, &["--ro-bind", "/dev/null", "/etc/fleetd/token"]);
        pos(
            &c,
            &[
                "--tmpfs",
                "/etc/fleetd/keys",
                "--remount-ro",
                "/etc/fleetd/keys",
            ],
        );
        // Its own pid namespace, /proc and /dev.
        for ns in ["--unshare-pid", "--die-with-parent"] {
            assert!(c.contains(&ns.to_string()));
        }
        pos(&c, &["--proc", "/proc"]);
        pos(&c, &["--dev", "/dev"]);
        // The program last, after `--`, untouched.
        assert_eq!(&c[c.len() - 3..], &["--", "claude", "--x"]);
        pos(&c, &["--chdir", "/s/worktrees/w"]);
        assert_eq!(c[0], "bwrap");
    }

    #[test]
    fn nothing_of_the_state_dir_but_the_own_paths_is_mounted() {
        let c = command("bwrap", &layout(), &["sh".into()]);
        let mounted: Vec<&String> = c
            .windows(3)
            .filter(|w| w[0] == "--bind" || w[0] == "--ro-bind" || w[0] == "--dev-bind")
            .map(|w| &w[1])
            .filter(|src| src.starts_with("/s"))
            .collect();
        let l = layout();
        let own: Vec<String> = l
            .own_rw
            .iter()
            .chain(&l.own_ro)
            .chain(&l.socket_dir)
            .map(|p| p.display().to_string())
            .collect();
        assert!(!mounted.is_empty());
        for m in mounted {
            assert!(own.contains(m), "{m} is not the member's own");
        }
    }

    #[test]
    fn off_auto_and_bwrap_against_what_the_probe_found() {
        let works = Probe::Works {
            program: "/usr/bin/bwrap".into(),
            version: "bubblewrap 0.8.0".into(),
        };
        let broken = Probe::Unavailable {
            why: "no user namespaces".into(),
        };
        let s = Path::new("/s");
        let here = Some(Path::new("/work/repo"));
        assert!(matches!(
            decide(Mode::Auto, &works, s, here, &[]),
            Ok(Decision::Confined { program }) if program == "/usr/bin/bwrap"
        ));
        assert!(matches!(
            decide(Mode::Off, &works, s, here, &[]),
            Ok(Decision::Unconfined { .. })
        ));
        assert!(matches!(
            decide(Mode::Auto, &broken, s, here, &[]),
            Ok(Decision::Unconfined { why }) if why == "no user namespaces"
        ));
        let e = decide(Mode::Bwrap, &broken, s, here, &[]).unwrap_err();
        assert!(e.why.contains("no user namespaces"), "{e}");
        assert_eq!(e.rule.as_deref(), Some("SANDBOX"));
        // A member that starts inside the state dir but outside its own paths would see an
        // empty directory: unconfined under auto, refused under bwrap.
        let inside = Some(Path::new("/s/kb"));
        assert!(matches!(
            decide(Mode::Auto, &works, s, inside, &[]),
            Ok(Decision::Unconfined { .. })
        ));
        assert!(decide(Mode::Bwrap, &works, s, inside, &[]).is_err());
        // Its own worktree is fine.
        let wt = Some(Path::new("/s/worktrees/w/src"));
        assert!(matches!(
            decide(Mode::Bwrap, &works, s, wt, &["/s/worktrees/w".into()]),
            Ok(Decision::Confined { .. })
        ));
    }

    #[test]
    fn the_config_section_parses_and_checks() {
        let c: SandboxConfig = toml::from_str("mode = \"off\"\nhide = [\"/x\"]").unwrap();
        assert_eq!(c.mode, Mode::Off);
        assert!(c.check().is_ok());
        let c: SandboxConfig = toml::from_str("hide = [\"rel\"]").unwrap();
        assert!(c.check().unwrap_err().contains("rel"));
        assert!(toml::from_str::<SandboxConfig>("mode = \"docker\"").is_err());
        assert_eq!(SandboxConfig::default().mode, Mode::Auto);
    }
}
