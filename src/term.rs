//! Terminals: the daemon's backend for the small per-member PTY host processes.
//!
//! Each member's command runs in a PTY (portable-pty) held by a tiny host process,
//! `fleetd-pty-host` (`src/bin/`; `fleetd pty-host` runs the same code when the small binary is
//! not beside `fleetd`), which the member's slot actor launches and addresses over a Unix
//! socket in the state dir. The host itself is [`host`] (synchronous, no tokio: one runs per
//! member); what the two sides exchange is [`wire`]; this file is the daemon's side. The host
//! keeps a vt100 model of the screen, so a daemon that restarts (or a slot actor that is
//! restarted by its supervisor) re-adopts the running agent with its screen intact instead of
//! killing it. The host records the program's exit in a file so a daemon that was down when the
//! program ended still learns how it ended. Owns PTYs, process groups and that socket protocol;
//! must never interpret what an agent prints (the slot core does).

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fleetd_actors::error::FleetError;
use fleetd_actors::term::{BoxFut, LaunchSpec, TermBackend, TermEvent, TermHandle, TermInput};
use fleetd_actors::types::MemberName;
use tokio::io::AsyncBufReadExt;
use tokio::net::UnixStream;
use tokio::sync::mpsc;

use crate::codec::{self, MAX_FRAME};

mod host;
mod owner;
mod wire;

pub use host::{HostArgs, run_host};
pub use owner::LOCK_FILE;
use wire::{DaemonMsg, ExitRecord, Greeting, HostMsg};

/// Paths of one member terminal's files.
fn paths(term_dir: &Path, name: &MemberName, generation: u64) -> (PathBuf, PathBuf, PathBuf) {
    let base = format!("{name}.{generation}");
    (
        term_dir.join(format!("{base}.sock")),
        term_dir.join(format!("{base}.exit")),
        term_dir.join(format!("{base}.log")),
    )
}

/// Longest Unix socket path Linux accepts.
const SUN_PATH_MAX: usize = 107;

// ---- the daemon's side ---------------------------------------------------------------

/// The daemon's terminal backend: launches `fleetd pty-host` processes and talks to them.
pub struct HostBackend {
    term_dir: PathBuf,
    /// `STATE/daemon.lock`, held exclusively for the backend's (the daemon's) life: the PTY
    /// hosts answer only its holder (`owner`).
    lock_path: PathBuf,
    _lock: nix::fcntl::Flock<std::fs::File>,
    /// The program that hosts a PTY, and the arguments before its own (`fleetd-pty-host`
    /// beside the fleetd binary, else `fleetd pty-host`).
    host: (PathBuf, Vec<&'static str>),
}

/// The PTY host program for `fleetd_exe`: `fleetd-pty-host` in the same directory when it is
/// there (a small binary: one runs per member), else `fleetd_exe pty-host`.
pub fn host_program(fleetd_exe: &Path) -> (PathBuf, Vec<&'static str>) {
    let small = fleetd_exe.with_file_name("fleetd-pty-host");
    if small.is_file() {
        (small, vec![])
    } else {
        (fleetd_exe.to_path_buf(), vec!["pty-host"])
    }
}

impl HostBackend {
    pub fn new(state_dir: &Path, fleetd_exe: PathBuf) -> std::io::Result<Self> {
        let term_dir = state_dir.join("term");
        std::fs::create_dir_all(&term_dir)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&term_dir, std::fs::Permissions::from_mode(0o700))?;
        let lock_path = state_dir.join(owner::LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)?;
        let lock = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| {
                std::io::Error::new(
                    std::io::ErrorKind::WouldBlock,
                    format!(
                        "could not lock {} ({e}): is another `fleetd serve` running on this state dir?",
                        lock_path.display()
                    ),
                )
            })?;
        Ok(HostBackend {
            term_dir,
            lock_path,
            _lock: lock,
            host: host_program(&fleetd_exe),
        })
    }

    async fn launch_inner(&self, spec: LaunchSpec) -> Result<TermHandle, FleetError> {
        let what = format!("terminal for `{}`", spec.name);
        let (sock, exit, log) = paths(&self.term_dir, &spec.name, spec.generation);
        if sock.as_os_str().len() > SUN_PATH_MAX {
            return Err(FleetError::invalid(
                what,
                format!(
                    "the socket path {} is longer than Unix sockets allow ({SUN_PATH_MAX} bytes)",
                    sock.display()
                ),
                "a shorter --state-dir",
            ));
        }
        let _ = std::fs::remove_file(&exit);
        let logf = std::fs::File::create(&log)
            .map_err(|e| FleetError::internal(what.clone(), format!("log file: {e}")))?;
        let mut cmd = tokio::process::Command::new(&self.host.0);
        cmd.args(&self.host.1)
            .arg("--socket")
            .arg(&sock)
            .arg("--exit-file")
            .arg(&exit)
            .arg("--rows")
            .arg(spec.rows.to_string())
            .arg("--cols")
            .arg(spec.cols.to_string())
            .arg("--unset")
            .arg("RUST_LOG_STYLE");
        for k in &spec.unset {
            cmd.arg("--unset").arg(k);
        }
        if let Some(m) = user_umask() {
            cmd.arg("--umask").arg(m.to_string());
        }
        if let Some(cwd) = &spec.cwd {
            cmd.arg("--cwd").arg(cwd);
        }
        cmd.arg("--owner-lock").arg(&self.lock_path);
        cmd.arg("--").args(&spec.argv);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(logf));
        // The host gets its own process group, so signals sent to the daemon's (a Ctrl-C in its
        // terminal, the terminal hanging up) do not reach the host or its agent. (Each agent
        // gets a session of its own from the PTY.)
        cmd.process_group(0);
        let mut child = cmd.spawn().map_err(|e| {
            FleetError::internal(what.clone(), format!("could not start the PTY host: {e}"))
        })?;
        let stdout = child.stdout.take();
        // Reap the host when it ends (the daemon is its parent until the daemon restarts).
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        let ready = async {
            let mut lines = tokio::io::BufReader::new(stdout?).lines();
            lines.next_line().await.ok().flatten()
        };
        match tokio::time::timeout(Duration::from_secs(10), ready).await {
            Ok(Some(line)) if line.starts_with("ready ") => {}
            other => {
                let log_text = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(FleetError::invalid(
                    what,
                    format!(
                        "the command {:?} did not start: {}",
                        spec.argv,
                        match other {
                            Err(_) => "the PTY host did not report ready within 10 s".to_string(),
                            _ => log_text
                                .trim()
                                .lines()
                                .last()
                                .unwrap_or("the PTY host exited")
                                .to_string(),
                        }
                    ),
                    "a command that exists and can run (check PATH and the profile's command)",
                ));
            }
        }
        self.connect_inner(&spec.name, spec.generation).await
    }

    async fn connect_inner(
        &self,
        name: &MemberName,
        generation: u64,
    ) -> Result<TermHandle, FleetError> {
        let what = format!("terminal of `{name}`");
        let (sock, _, _) = paths(&self.term_dir, name, generation);
        let stream = UnixStream::connect(&sock).await.map_err(|e| {
            let why = format!("its PTY host at {} is not answering: {e}", sock.display());
            match e.kind() {
                // Nobody listens there: the host is gone.
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound => {
                    FleetError::not_found(what.clone(), why, "a live member")
                }
                _ => FleetError::unavailable(what.clone(), why),
            }
        })?;
        let (mut r, mut w) = stream.into_split();
        let hello = tokio::time::timeout(
            Duration::from_secs(5),
            codec::read_frame::<_, HostMsg>(&mut r, MAX_FRAME),
        )
        .await
        .map_err(|_| {
            FleetError::timeout(
                what.clone(),
                "its PTY host did not greet within 5 s",
                "a retry",
            )
        })?
        .map_err(|e| FleetError::internal(what.clone(), e.to_string()))?;
        let (
            Greeting {
                pid,
                host_pid,
                snapshot,
                pasted,
                ..
            },
            screen_on_request,
        ) = match hello {
            Some(HostMsg::Welcome(g)) => (g, true),
            Some(HostMsg::Hello(g)) => (g, false),
            _ => return Err(FleetError::internal(what, "the PTY host did not say hello")),
        };
        let (ev_tx, ev_rx) = mpsc::channel::<TermEvent>(64);
        let (in_tx, mut in_rx) = mpsc::channel::<TermInput>(256);
        tokio::spawn(async move {
            loop {
                match codec::read_frame::<_, HostMsg>(&mut r, MAX_FRAME).await {
                    Ok(Some(HostMsg::Output(b))) => {
                        if ev_tx.send(TermEvent::Output(b)).await.is_err() {
                            break;
                        }
                    }
                    Ok(Some(HostMsg::Exited { code, signal })) => {
                        let _ = ev_tx.send(TermEvent::Exited { code, signal }).await;
                        break;
                    }
                    Ok(Some(HostMsg::Pasted { id })) => {
                        if ev_tx.send(TermEvent::Pasted { id }).await.is_err() {
                            break;
                        }
                    }
                    Ok(Some(HostMsg::PasteRefused { id, why })) => {
                        if ev_tx
                            .send(TermEvent::PasteRefused { id, why })
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                    Ok(Some(HostMsg::Screen(b))) => {
                        if ev_tx.send(TermEvent::Screen(b)).await.is_err() {
                            break;
                        }
                    }
                    Ok(Some(HostMsg::Hello(_) | HostMsg::Welcome(_))) => {}
                    Ok(None) => {
                        let _ = ev_tx
                            .send(TermEvent::Lost("the PTY host closed the connection".into()))
                            .await;
                        break;
                    }
                    Err(e) => {
                        let _ = ev_tx.send(TermEvent::Lost(e.to_string())).await;
                        break;
                    }
                }
            }
        });
        tokio::spawn(async move {
            while let Some(m) = in_rx.recv().await {
                let frame = match m {
                    TermInput::Bytes(b) => DaemonMsg::Input(b),
                    TermInput::Paste {
                        id,
                        bytes,
                        enter_delay_ms,
                    } => DaemonMsg::Paste {
                        id,
                        bytes,
                        enter_delay_ms,
                    },
                    TermInput::Resize { rows, cols } => DaemonMsg::Resize { rows, cols },
                    TermInput::Terminate { grace_ms } => DaemonMsg::Terminate { grace_ms },
                    TermInput::Screen => DaemonMsg::Screen,
                    TermInput::Detach => {
                        let _ = codec::write_frame(&mut w, &DaemonMsg::Detach).await;
                        break;
                    }
                };
                if codec::write_frame(&mut w, &frame).await.is_err() {
                    break;
                }
            }
        });
        Ok(TermHandle {
            pid,
            host_pid: Some(host_pid),
            // Also for a fresh launch: the program may have drawn its first screen before this
            // connection existed, and that output was never sent as Output frames.
            snapshot,
            input: in_tx,
            events: ev_rx,
            pasted,
            screen_on_request,
        })
    }
}

impl TermBackend for HostBackend {
    fn launch(&self, spec: LaunchSpec) -> BoxFut<'_, Result<TermHandle, FleetError>> {
        Box::pin(self.launch_inner(spec))
    }

    fn connect(
        &self,
        name: &MemberName,
        generation: u64,
    ) -> BoxFut<'_, Result<TermHandle, FleetError>> {
        let name = name.clone();
        Box::pin(async move { self.connect_inner(&name, generation).await })
    }

    fn recorded_exit(
        &self,
        name: &MemberName,
        generation: u64,
    ) -> Option<(Option<i32>, Option<String>)> {
        let (_, exit, _) = paths(&self.term_dir, name, generation);
        let bytes = std::fs::read(exit).ok()?;
        let rec: ExitRecord = serde_json::from_slice(&bytes).ok()?;
        Some((rec.code, rec.signal))
    }

    fn sweep(&self, live: &[(MemberName, u64)]) {
        let keep: HashSet<String> = live.iter().map(|(n, g)| format!("{n}.{g}")).collect();
        let Ok(rd) = std::fs::read_dir(&self.term_dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            let Some(file) = p.file_name().and_then(|f| f.to_str()) else {
                continue;
            };
            let Some((base, ext)) = file.rsplit_once('.') else {
                continue;
            };
            if keep.contains(base) {
                continue;
            }
            if ext == "sock" {
                // A host nobody owns (a spawn that crashed before it was recorded): stop it.
                if let Ok(mut s) = std::os::unix::net::UnixStream::connect(&p) {
                    let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                    if let Ok(frame) = codec::encode_frame(&DaemonMsg::Terminate { grace_ms: 500 })
                    {
                        let _ = s.write_all(&frame);
                    }
                    tracing::warn!(socket = %p.display(), "stopped an orphaned PTY host");
                } else {
                    let _ = std::fs::remove_file(&p);
                }
            } else if ext == "exit" || ext == "log" {
                // The member's exit is recorded in the store; its terminal's files can go.
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

/// The umask the process had before the daemon set its own (0o077), for its members.
static USER_UMASK: std::sync::OnceLock<u32> = std::sync::OnceLock::new();

/// Set the daemon's umask to 0o077, keeping the one it was started with for its members.
pub fn remember_user_umask() {
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
    let _ = USER_UMASK.set(old.bits() as u32);
}

/// The umask members get (the one the daemon was started with).
pub fn user_umask() -> Option<u32> {
    USER_UMASK.get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The daemon runs the small host when it sits beside `fleetd`, and `fleetd pty-host`
    /// otherwise (a `cargo run` builds only `fleetd`).
    #[test]
    fn the_small_host_is_used_when_it_sits_beside_fleetd() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("fleetd");
        std::fs::write(&exe, b"").unwrap();
        assert_eq!(host_program(&exe), (exe.clone(), vec!["pty-host"]));
        let small = dir.path().join("fleetd-pty-host");
        std::fs::write(&small, b"").unwrap();
        assert_eq!(host_program(&exe), (small, vec![]));
    }

    /// A host from before screen requests greets with `Hello`: its handle says it cannot hand
    /// its screen back (so its slot keeps the screen). One that greets with `Welcome` can, and
    /// answers `Screen` in order after the output it sent before.
    #[tokio::test]
    async fn only_a_host_that_says_welcome_is_asked_for_its_screen() {
        let dir = tempfile::tempdir().unwrap();
        let backend = HostBackend::new(dir.path(), dir.path().join("fleetd")).unwrap();
        let name = MemberName::new("w1").unwrap();
        for (generation, welcome) in [(1u64, false), (2, true)] {
            let (sock, _, _) = paths(&backend.term_dir, &name, generation);
            let listener = tokio::net::UnixListener::bind(&sock).unwrap();
            let host = tokio::spawn(async move {
                let (mut s, _) = listener.accept().await.unwrap();
                let g = Greeting {
                    pid: 7,
                    host_pid: 8,
                    rows: 40,
                    cols: 120,
                    snapshot: vec![],
                    pasted: vec![],
                };
                let greeting = if welcome {
                    HostMsg::Welcome(g)
                } else {
                    HostMsg::Hello(g)
                };
                codec::write_frame(&mut s, &greeting).await.unwrap();
                codec::write_frame(&mut s, &HostMsg::Output(b"before".to_vec()))
                    .await
                    .unwrap();
                if welcome {
                    let asked = codec::read_frame::<_, DaemonMsg>(&mut s, MAX_FRAME).await;
                    assert!(matches!(asked, Ok(Some(DaemonMsg::Screen))), "{asked:?}");
                    codec::write_frame(&mut s, &HostMsg::Screen(b"the screen".to_vec()))
                        .await
                        .unwrap();
                }
            });
            let mut h = backend.connect_inner(&name, generation).await.unwrap();
            assert_eq!(h.screen_on_request, welcome);
            assert_eq!(h.pid, 7);
            let first = h.events.recv().await;
            assert!(matches!(&first, Some(TermEvent::Output(b)) if b == b"before"));
            if welcome {
                h.input.send(TermInput::Screen).await.unwrap();
                let screen = h.events.recv().await;
                assert!(matches!(&screen, Some(TermEvent::Screen(b)) if b == b"the screen"));
            }
            host.await.unwrap();
        }
    }
}
