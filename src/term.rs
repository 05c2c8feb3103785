//! Terminals: a small per-member PTY host process, and the daemon's backend that talks to it.
//!
//! Each member's command runs in a PTY (portable-pty) held by a tiny host process,
//! `fleetd-pty-host` (`src/bin/`; `fleetd pty-host` runs the same code when the small binary is
//! not beside `fleetd`), which the member's slot actor launches and addresses over a Unix socket in the state dir. The host
//! keeps a vt100 model of the screen, so a daemon that restarts (or a slot actor that is
//! restarted by its supervisor) re-adopts the running agent with its screen intact instead of
//! killing it. The host records the program's exit in a file so a daemon that was down when the
//! program ended still learns how it ended. Owns PTYs, process groups and that socket protocol;
//! must never interpret what an agent prints (the slot core does).

use nix::sys::signal::Signal;
use std::collections::HashSet;
use std::io::{Read, Write};
use std::num::NonZeroU16;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fleetd_actors::error::FleetError;
use fleetd_actors::term::{
    BoxFut, LaunchSpec, PASTES_REMEMBERED, TermBackend, TermEvent, TermHandle, TermInput,
};
use fleetd_actors::types::MemberName;
use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;

use crate::codec::{self, MAX_FRAME};

/// Host -> daemon.
#[derive(Debug, Serialize, Deserialize)]
enum HostMsg {
    Hello {
        pid: u32,
        host_pid: u32,
        rows: u16,
        cols: u16,
        snapshot: Vec<u8>,
        /// The paste ids taken, oldest first (at most `PASTES_REMEMBERED`).
        pasted: Vec<u64>,
    },
    Output(Vec<u8>),
    /// A paste and its Enter were written.
    Pasted {
        id: u64,
    },
    /// A paste could not be taken.
    PasteRefused {
        id: u64,
        why: String,
    },
    Exited {
        code: Option<i32>,
        signal: Option<String>,
    },
    /// The screen, as asked for by `DaemonMsg::Screen`.
    Screen(Vec<u8>),
    /// `Hello` from a host that also takes `DaemonMsg::Screen` (a variant of its own, so a
    /// daemon still tells an older host's `Hello` apart and never asks it for its screen).
    Welcome {
        pid: u32,
        host_pid: u32,
        rows: u16,
        cols: u16,
        snapshot: Vec<u8>,
        pasted: Vec<u64>,
    },
}

/// Daemon -> host. New variants go at the end: an older host that reads one it does not know
/// drops the connection.
#[derive(Debug, Serialize, Deserialize)]
enum DaemonMsg {
    Input(Vec<u8>),
    /// A paste and, `enter_delay_ms` later, its Enter; taken once per id.
    Paste {
        id: u64,
        bytes: Vec<u8>,
        enter_delay_ms: u64,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    Terminate {
        grace_ms: u64,
    },
    Detach,
    /// Send the screen as it is now (`HostMsg::Screen`).
    Screen,
}

/// What the exit file records.
#[derive(Debug, Serialize, Deserialize)]
struct ExitRecord {
    code: Option<i32>,
    signal: Option<String>,
}

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

// ---- the host process ----------------------------------------------------------------

/// Arguments of `fleetd pty-host`.
#[derive(Debug, clap::Args)]
pub struct HostArgs {
    #[arg(long)]
    pub socket: PathBuf,
    #[arg(long)]
    pub exit_file: PathBuf,
    #[arg(long, default_value_t = 40)]
    pub rows: u16,
    #[arg(long, default_value_t = 120)]
    pub cols: u16,
    #[arg(long)]
    pub cwd: Option<PathBuf>,
    /// Variables to remove from the program's environment.
    #[arg(long = "unset")]
    pub unset: Vec<String>,
    /// The file mode mask the program runs with (the daemon's own is 0o077).
    #[arg(long)]
    pub umask: Option<u32>,
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

impl HostArgs {
    /// The same arguments read without clap, for `fleetd-pty-host` (whose footprint is
    /// multiplied by the fleet: clap's parser is most of a small binary's touched pages). Takes
    /// exactly what the daemon passes: `--socket P --exit-file P [--rows N] [--cols N] [--cwd P]
    /// [--unset VAR]... [--umask N] -- PROGRAM [ARG]...` (also `--flag=value`).
    pub fn parse_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Self, String> {
        let mut it = args.into_iter();
        let (mut socket, mut exit_file, mut cwd, mut umask) = (None, None, None, None);
        let (mut rows, mut cols, mut unset) = (40u16, 120u16, vec![]);
        let mut argv = vec![];
        while let Some(a) = it.next() {
            let a = a
                .into_string()
                .map_err(|a| format!("an argument is not UTF-8: {a:?}"))?;
            if a == "--" {
                for p in it.by_ref() {
                    argv.push(
                        p.into_string()
                            .map_err(|p| format!("a program argument is not UTF-8: {p:?}"))?,
                    );
                }
                break;
            }
            let (flag, inline) = match a.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
                _ => (a.clone(), None),
            };
            let mut value = || -> Result<String, String> {
                match &inline {
                    Some(v) => Ok(v.clone()),
                    None => it
                        .next()
                        .and_then(|v| v.into_string().ok())
                        .ok_or_else(|| format!("{flag} needs a value")),
                }
            };
            let number = |v: String| -> Result<u32, String> {
                v.parse()
                    .map_err(|_| format!("{flag} takes a number, not {v:?}"))
            };
            match flag.as_str() {
                "--socket" => socket = Some(PathBuf::from(value()?)),
                "--exit-file" => exit_file = Some(PathBuf::from(value()?)),
                "--rows" => rows = number(value()?)?.min(u16::MAX as u32) as u16,
                "--cols" => cols = number(value()?)?.min(u16::MAX as u32) as u16,
                "--cwd" => cwd = Some(PathBuf::from(value()?)),
                "--unset" => unset.push(value()?),
                "--umask" => umask = Some(number(value()?)?),
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; the host takes --socket, --exit-file, --rows, --cols, --cwd, --unset, --umask, then -- and the program"
                    ));
                }
            }
        }
        if argv.is_empty() {
            return Err("no program: give it after --".into());
        }
        Ok(HostArgs {
            socket: socket.ok_or("--socket is required")?,
            exit_file: exit_file.ok_or("--exit-file is required")?,
            rows,
            cols,
            cwd,
            unset,
            umask,
            argv,
        })
    }
}

fn nz(v: u16) -> NonZeroU16 {
    NonZeroU16::new(v).unwrap_or(NonZeroU16::MIN)
}

/// How long a host whose program exited waits for the daemon that launched it to connect
/// for the first time (the program ran and ended before the daemon's connection was taken).
const FIRST_CONNECTION_WAIT: Duration = Duration::from_secs(10);

/// Run the PTY host until its program exits. Prints `ready PID` on stdout once the socket is
/// bound and the program runs.
pub fn run_host(args: HostArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(host_main(args))
}

enum HostEvent {
    Output(Vec<u8>),
    Eof,
}

async fn host_main(mut args: HostArgs) -> anyhow::Result<()> {
    (args.rows, args.cols) = fleetd_actors::term::clamp_size(args.rows, args.cols);
    let _ = std::fs::remove_file(&args.socket);
    let listener = UnixListener::bind(&args.socket)?;
    let pty = native_pty_system();
    let pair = pty
        .openpty(PtySize {
            rows: args.rows,
            cols: args.cols,
            pixel_width: 0,
            pixel_height: 0,
        })
        .map_err(|e| anyhow::anyhow!("openpty: {e}"))?;
    let mut cmd = CommandBuilder::from_argv(args.argv.iter().map(Into::into).collect());
    for k in &args.unset {
        cmd.env_remove(k);
    }
    if let Some(d) = &args.cwd {
        // portable-pty quietly starts the program in $HOME when the directory is missing.
        if !d.is_dir() {
            anyhow::bail!(
                "the working directory {} is not a directory that exists",
                d.display()
            );
        }
        cmd.cwd(d);
    }
    if let Some(m) = args.umask {
        // The program inherits it.
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate((m & 0o777) as _));
    }
    let mut child = pair
        .slave
        .spawn_command(cmd)
        .map_err(|e| anyhow::anyhow!("spawn {:?}: {e}", args.argv))?;
    drop(pair.slave);
    let pid = child.process_id().unwrap_or(0);
    let master = pair.master;
    let mut reader = master
        .try_clone_reader()
        .map_err(|e| anyhow::anyhow!("pty reader: {e}"))?;
    let mut writer = master
        .take_writer()
        .map_err(|e| anyhow::anyhow!("pty writer: {e}"))?;

    // Reader thread: PTY output -> main loop (bounded).
    let (out_tx, mut out_rx) = mpsc::channel::<HostEvent>(64);
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = out_tx.blocking_send(HostEvent::Eof);
                    break;
                }
                Ok(n) => {
                    if out_tx
                        .blocking_send(HostEvent::Output(buf[..n].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    });
    // Writer thread: input -> PTY (PTY writes may block while the program is not reading).
    let (in_tx, in_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(256);
    std::thread::spawn(move || {
        while let Ok(b) = in_rx.recv() {
            if writer.write_all(&b).and_then(|_| writer.flush()).is_err() {
                break;
            }
        }
    });
    // The program's exit: looked for at each SIGCHLD (no thread waits for it). The handler is
    // in place before the first look, so an exit that came before it is still seen.
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    let exit_record = |st: portable_pty::ExitStatus| match st.signal() {
        Some(sig) => ExitRecord {
            code: None,
            signal: Some(sig.to_string()),
        },
        None => ExitRecord {
            code: Some(st.exit_code() as i32),
            signal: None,
        },
    };
    let mut exited = child.try_wait().ok().flatten().map(exit_record);

    println!("ready {pid}");
    // stdout is a pipe to the daemon that launched us; it is done with it now.
    let _ = std::io::stdout().flush();
    if let Ok(devnull) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&devnull);
    }

    let mut parser = vt100::Parser::new(nz(args.rows), nz(args.cols), 0);
    let mut conn: Option<(
        tokio::net::unix::OwnedReadHalf,
        tokio::net::unix::OwnedWriteHalf,
    )> = None;
    let mut exit: Option<ExitRecord> = exited.take();
    let mut eof = false;
    let mut term_deadline: Option<tokio::time::Instant> = None;
    let host_pid = std::process::id();
    // Pastes taken (their ids, oldest first) and the Enters still due (when, id).
    let mut pasted: std::collections::VecDeque<u64> = Default::default();
    let mut enters: std::collections::VecDeque<(tokio::time::Instant, u64)> = Default::default();
    // Whether any daemon has connected since this host started.
    let mut greeted = false;
    let hello = |parser: &vt100::Parser, pasted: &std::collections::VecDeque<u64>| {
        let (rows, cols) = parser.screen().size();
        HostMsg::Welcome {
            pid,
            host_pid,
            rows: rows.get(),
            cols: cols.get(),
            snapshot: parser.screen().state_formatted().into_bytes(),
            pasted: pasted.iter().copied().collect(),
        }
    };

    loop {
        // After the program exits, give its output a moment to drain, then finish.
        if let Some(rec) = &exit
            && eof
        {
            let _ = write_exit_file(&args.exit_file, rec);
            if conn.is_none() && !greeted {
                // The daemon that launched us has not connected yet (a program that exits at
                // once): wait for it, bounded, so it hears the exit and sees the output from us
                // instead of finding the socket gone or reset.
                if let Ok(Ok((stream, _))) =
                    tokio::time::timeout(FIRST_CONNECTION_WAIT, listener.accept()).await
                {
                    let (r, mut w) = stream.into_split();
                    if codec::write_frame(&mut w, &hello(&parser, &pasted))
                        .await
                        .is_ok()
                    {
                        conn = Some((r, w));
                    }
                }
            }
            if let Some((_, w)) = conn.as_mut() {
                let _ = codec::write_frame(
                    w,
                    &HostMsg::Exited {
                        code: rec.code,
                        signal: rec.signal.clone(),
                    },
                )
                .await;
            }
            let _ = std::fs::remove_file(&args.socket);
            return Ok(());
        }
        let drain_timer = async {
            if exit.is_some() {
                tokio::time::sleep(Duration::from_millis(300)).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let kill_timer = async {
            match term_deadline {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        let enter_timer = async {
            match enters.front() {
                Some((d, _)) => tokio::time::sleep_until(*d).await,
                None => std::future::pending::<()>().await,
            }
        };
        let read_conn = async {
            match conn.as_mut() {
                Some((r, _)) => codec::read_frame::<_, DaemonMsg>(r, MAX_FRAME).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            ev = out_rx.recv(), if !eof => match ev {
                Some(HostEvent::Output(b)) => {
                    parser.process(&b);
                    if let Some((_, w)) = conn.as_mut()
                        && codec::write_frame(w, &HostMsg::Output(b)).await.is_err()
                    {
                        conn = None;
                    }
                }
                Some(HostEvent::Eof) | None => eof = true,
            },
            _ = sigchld.recv(), if exit.is_none() => {
                match child.try_wait() {
                    Ok(Some(st)) => exit = Some(exit_record(st)),
                    Ok(None) => {}
                    // The program cannot be waited for any more: it is gone, how is unknown.
                    Err(_) => exit = Some(ExitRecord { code: None, signal: None }),
                }
            }
            _ = drain_timer => eof = true,
            _ = enter_timer => {
                if let Some((_, id)) = enters.pop_front() {
                    // The paste was taken; its Enter goes the same way (the writer thread keeps
                    // the order). A full input queue loses the Enter: say so.
                    let msg = match in_tx.try_send(b"\r".to_vec()) {
                        Ok(()) => HostMsg::Pasted { id },
                        Err(_) => HostMsg::PasteRefused {
                            id,
                            why: "its Enter could not be written: the program is not reading its input".into(),
                        },
                    };
                    if let Some((_, w)) = conn.as_mut()
                        && codec::write_frame(w, &msg).await.is_err()
                    {
                        conn = None;
                    }
                }
            }
            _ = kill_timer => {
                term_deadline = None;
                signal_group(pid, Signal::SIGKILL);
            }
            acc = listener.accept() => {
                if let Ok((stream, _)) = acc {
                    greeted = true;
                    let (r, mut w) = stream.into_split();
                    if codec::write_frame(&mut w, &hello(&parser, &pasted)).await.is_ok() {
                        // A new daemon connection replaces the old one.
                        conn = Some((r, w));
                    }
                }
            }
            msg = read_conn => match msg {
                Ok(Some(DaemonMsg::Input(b))) => {
                    if in_tx.try_send(b).is_err() {
                        eprintln!("pty-host: input dropped: the program is not reading its input");
                    }
                }
                Ok(Some(DaemonMsg::Paste { id, bytes, enter_delay_ms })) => {
                    if pasted.contains(&id) {
                        // Taken before (a daemon that restarted sent it again): never twice.
                        // Its Enter is done, or still due and will be acknowledged then.
                        if !enters.iter().any(|(_, e)| *e == id)
                            && let Some((_, w)) = conn.as_mut()
                            && codec::write_frame(w, &HostMsg::Pasted { id }).await.is_err()
                        {
                            conn = None;
                        }
                    } else if in_tx.try_send(bytes).is_ok() {
                        pasted.push_back(id);
                        if pasted.len() > PASTES_REMEMBERED {
                            pasted.pop_front();
                        }
                        let at = tokio::time::Instant::now() + Duration::from_millis(enter_delay_ms);
                        enters.push_back((at, id));
                    } else if let Some((_, w)) = conn.as_mut() {
                        let refused = HostMsg::PasteRefused {
                            id,
                            why: "the program is not reading its input (its input queue is full)".into(),
                        };
                        if codec::write_frame(w, &refused).await.is_err() {
                            conn = None;
                        }
                    }
                }
                Ok(Some(DaemonMsg::Resize { rows, cols })) => {
                    let (rows, cols) = fleetd_actors::term::clamp_size(rows, cols);
                    let _ = master.resize(PtySize { rows, cols, pixel_width: 0, pixel_height: 0 });
                    parser.screen_mut().set_size(nz(rows), nz(cols));
                }
                Ok(Some(DaemonMsg::Terminate { grace_ms })) => {
                    signal_group(pid, Signal::SIGHUP);
                    signal_group(pid, Signal::SIGTERM);
                    term_deadline = Some(tokio::time::Instant::now() + Duration::from_millis(grace_ms));
                }
                Ok(Some(DaemonMsg::Screen)) => {
                    let screen = HostMsg::Screen(parser.screen().state_formatted().into_bytes());
                    if let Some((_, w)) = conn.as_mut()
                        && codec::write_frame(w, &screen).await.is_err()
                    {
                        conn = None;
                    }
                }
                Ok(Some(DaemonMsg::Detach)) | Ok(None) | Err(_) => conn = None,
            },
        }
    }
}

/// Signals the program's process group (the PTY made the program a session and group leader),
/// so what it started goes too. A pid of 0 (never started) signals nothing.
fn signal_group(pid: u32, sig: Signal) {
    if let Ok(p) = i32::try_from(pid)
        && p > 0
    {
        let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(p), sig);
    }
}

fn write_exit_file(path: &Path, rec: &ExitRecord) -> std::io::Result<()> {
    let json = serde_json::to_vec(rec).unwrap_or_default();
    fleetd_actors::files::write_private(path, &json)
}

// ---- the daemon's side ---------------------------------------------------------------

/// The daemon's terminal backend: launches `fleetd pty-host` processes and talks to them.
pub struct HostBackend {
    term_dir: PathBuf,
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
        Ok(HostBackend {
            term_dir,
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
            FleetError::not_found(
                what.clone(),
                format!("its PTY host at {} is not answering: {e}", sock.display()),
                "a live member",
            )
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
        let (pid, host_pid, snapshot, pasted, screen_on_request) = match hello {
            Some(HostMsg::Welcome {
                pid,
                host_pid,
                snapshot,
                pasted,
                ..
            }) => (pid, host_pid, snapshot, pasted, true),
            Some(HostMsg::Hello {
                pid,
                host_pid,
                snapshot,
                pasted,
                ..
            }) => (pid, host_pid, snapshot, pasted, false),
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
                    Ok(Some(HostMsg::Hello { .. } | HostMsg::Welcome { .. })) => {}
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
                    if let Ok(frame) = codec::encode(&DaemonMsg::Terminate { grace_ms: 500 }) {
                        let mut buf = (frame.len() as u32).to_be_bytes().to_vec();
                        buf.extend_from_slice(&frame);
                        let _ = s.write_all(&buf);
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
    use clap::Parser;

    #[derive(Parser)]
    struct WithClap {
        #[command(flatten)]
        host: HostArgs,
    }

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

    /// `fleetd-pty-host` reads its arguments without clap; it must read what `fleetd pty-host`
    /// reads, and refuse what clap refuses.
    #[test]
    fn the_small_hosts_parser_reads_what_clap_reads() {
        let cases: &[&[&str]] = &[
            &["--socket", "/s", "--exit-file", "/e", "--", "cat"],
            &[
                "--socket",
                "/s",
                "--exit-file",
                "/e",
                "--rows",
                "10",
                "--cols",
                "80",
                "--unset",
                "A",
                "--unset",
                "B",
                "--umask",
                "18",
                "--cwd",
                "/w",
                "--",
                "sh",
                "-c",
                "echo --rows 5",
            ],
            &[
                "--socket=/s",
                "--exit-file=/e",
                "--rows=3",
                "--",
                "x",
                "--",
                "y",
            ],
        ];
        for c in cases {
            let clap = WithClap::try_parse_from(std::iter::once("h").chain(c.iter().copied()))
                .expect("clap reads it")
                .host;
            let ours = HostArgs::parse_from(c.iter().map(|s| s.into())).expect("we read it");
            assert_eq!(format!("{ours:?}"), format!("{clap:?}"), "{c:?}");
        }
        let refused: &[&[&str]] = &[
            &["--socket", "/s", "--exit-file", "/e"],
            &["--socket", "/s", "--", "cat"],
            &[
                "--socket",
                "/s",
                "--exit-file",
                "/e",
                "--rows",
                "many",
                "--",
                "cat",
            ],
            &[
                "--socket",
                "/s",
                "--exit-file",
                "/e",
                "--bogus",
                "--",
                "cat",
            ],
            &["--socket"],
        ];
        for c in refused {
            assert!(
                WithClap::try_parse_from(std::iter::once("h").chain(c.iter().copied())).is_err(),
                "clap refuses {c:?}"
            );
            assert!(
                HostArgs::parse_from(c.iter().map(|s| s.into())).is_err(),
                "we refuse {c:?}"
            );
        }
    }
}
