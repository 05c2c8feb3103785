//! The PTY host: the small process that holds one member's terminal (`fleetd-pty-host`, or
//! `fleetd pty-host`), started by the daemon's [`super::HostBackend`] and outliving it.
//!
//! Owns the PTY master, the program's process group, the vt100 model of its screen (how a
//! restarted daemon gets the screen back), the ids of the pastes it took, the exit file, and the
//! socket the daemon connects to, on which it answers only the daemon that holds the state dir's
//! lock (`owner`: any other process is closed before it is sent anything). It is one thread running one poll(2) loop over the PTY, the
//! listening socket, the daemon's connection and a pidfd for the program's exit, with its
//! timers (a paste's Enter, the SIGKILL after a terminate's grace, the drain after the exit) as
//! the poll's timeout: no async runtime and no helper threads, since one host runs per member
//! and its footprint is multiplied by the fleet (docs/PERFORMANCE.md).
//!
//! Must never: interpret what the program prints (the slot core does); block on the daemon (a
//! daemon that stops reading holds back the program's output, as a terminal nobody draws
//! would, but never the loop: a new connection from the daemon still replaces it); hold a
//! queue without a
//! bound (input waiting for the program, frames waiting for the daemon, a frame being read);
//! or use tokio (the `fleetd-pty-host` binary links none).

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::num::NonZeroU16;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use filedescriptor::FileDescriptor;
use fleetd_actors::term::PASTES_REMEMBERED;
use nix::sys::signal::Signal;
use portable_pty::{CommandBuilder, MasterPty, PtySize, native_pty_system};
use rustix::event::{PollFd, PollFlags, Timespec};

use super::owner;
use super::wire::{DaemonMsg, ExitRecord, Greeting, HostMsg};
use crate::codec::{self, MAX_FRAME};

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
    /// The daemon's lock file: only the process holding it may connect (see `owner`).
    #[arg(long)]
    pub owner_lock: Option<PathBuf>,
    #[arg(last = true, required = true)]
    pub argv: Vec<String>,
}

impl HostArgs {
    /// The same arguments read without clap, for `fleetd-pty-host` (whose footprint is
    /// multiplied by the fleet: clap's parser is most of a small binary's touched pages). Takes
    /// exactly what the daemon passes: `--socket P --exit-file P [--rows N] [--cols N] [--cwd P]
    /// [--unset VAR]... [--umask N] [--owner-lock P] -- PROGRAM [ARG]...` (also `--flag=value`).
    pub fn parse_from(args: impl IntoIterator<Item = std::ffi::OsString>) -> Result<Self, String> {
        let mut it = args.into_iter();
        let (mut socket, mut exit_file, mut cwd, mut umask) = (None, None, None, None);
        let mut owner_lock = None;
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
                "--owner-lock" => owner_lock = Some(PathBuf::from(value()?)),
                other => {
                    return Err(format!(
                        "unknown argument {other:?}; the host takes --socket, --exit-file, --rows, --cols, --cwd, --unset, --umask, --owner-lock, then -- and the program"
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
            owner_lock,
            argv,
        })
    }
}

fn nz(v: u16) -> NonZeroU16 {
    NonZeroU16::new(v).unwrap_or(NonZeroU16::MIN)
}

/// How long a host whose program exited waits for the daemon that launched it to connect
/// for the first time (the program ran and ended before the daemon's connection was taken),
/// and, at the end, for the daemon to read the last frames.
const FIRST_CONNECTION_WAIT: Duration = Duration::from_secs(10);
/// One read from the PTY or the daemon (the one buffer both use).
const READ_BUF: usize = 16 * 1024;
/// Writes waiting for the program to read its input, at most: this many...
const INPUT_QUEUE_LEN: usize = 256;
/// ...and this many bytes in all (more than one frame's worth, so one paste always fits).
const INPUT_QUEUE_BYTES: usize = 4 * MAX_FRAME;
/// Encoded frames waiting for the daemon to read, beyond which the host stops reading the PTY
/// and the daemon's frames until the daemon catches up (or a new connection replaces it).
const OUTPUT_HIGH: usize = 64 * 1024;
/// A buffer emptied after a burst keeps at most this much capacity.
const KEEP_CAPACITY: usize = 64 * 1024;
/// After the program exits, its output is drained until the PTY ends or is this quiet.
const DRAIN_QUIET: Duration = Duration::from_millis(300);
/// Without a pidfd (a kernel before 5.3), how often the program's exit is looked for.
const EXIT_POLL: Duration = Duration::from_secs(1);

const PASTE_QUEUE_FULL: &str = "the program is not reading its input (its input queue is full)";
const ENTER_LOST: &str = "its Enter could not be written: the program is not reading its input";

/// Run the PTY host until its program exits. Prints `ready PID` on stdout once the socket is
/// bound and the program runs.
pub fn run_host(mut args: HostArgs) -> anyhow::Result<()> {
    (args.rows, args.cols) = fleetd_actors::term::clamp_size(args.rows, args.cols);
    let _ = std::fs::remove_file(&args.socket);
    let listener = UnixListener::bind(&args.socket)?;
    listener.set_nonblocking(true)?;
    let pair = native_pty_system()
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
    // The loop's own descriptor of the PTY master, non-blocking (the master stays for resizes).
    let raw = master
        .as_raw_fd()
        .ok_or_else(|| anyhow::anyhow!("the PTY master has no descriptor"))?;
    let mut pty = FileDescriptor::dup(&raw).map_err(|e| anyhow::anyhow!("pty: {e}"))?;
    pty.set_non_blocking(true)
        .map_err(|e| anyhow::anyhow!("pty: {e}"))?;
    // The program's exit: its pidfd turns readable (opened before the first look, so an exit
    // that came before it is still seen).
    let pidfd = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
    let exit = match child.try_wait() {
        Ok(st) => st.map(exit_record),
        Err(_) => Some(ExitRecord {
            code: None,
            signal: None,
        }),
    };

    println!("ready {pid}");
    // stdout is a pipe to the daemon that launched us; it is done with it now.
    let _ = std::io::stdout().flush();
    if let Ok(devnull) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&devnull);
    }

    Host {
        parser: vt100::Parser::new(nz(args.rows), nz(args.cols), 0),
        args,
        listener,
        master,
        pty,
        child,
        pidfd,
        pid,
        host_pid: std::process::id(),
        conn: None,
        greeted: false,
        exit,
        eof: false,
        quiet_since: Instant::now(),
        term_deadline: None,
        pasted: VecDeque::new(),
        enters: VecDeque::new(),
        input: VecDeque::new(),
        input_bytes: 0,
        input_written: 0,
        input_broken: false,
        scratch: vec![0; READ_BUF],
        refused: 0,
    }
    .run()
}

fn exit_record(st: portable_pty::ExitStatus) -> ExitRecord {
    match st.signal() {
        Some(sig) => ExitRecord {
            code: None,
            signal: Some(sig.to_string()),
        },
        None => ExitRecord {
            code: Some(st.exit_code() as i32),
            signal: None,
        },
    }
}

/// The daemon's connection: what it sent that is not a whole frame yet, and the frames waiting
/// for it to read.
struct Conn {
    stream: UnixStream,
    /// At most `4 + MAX_FRAME + READ_BUF` bytes: a longer frame is refused from its prefix.
    inbuf: Vec<u8>,
    out: Vec<u8>,
    /// How much of `out` is written.
    sent: usize,
}

impl Conn {
    fn new(stream: UnixStream) -> std::io::Result<Self> {
        stream.set_nonblocking(true)?;
        Ok(Conn {
            stream,
            inbuf: Vec::new(),
            out: Vec::new(),
            sent: 0,
        })
    }

    fn pending(&self) -> usize {
        self.out.len() - self.sent
    }

    /// Queue a frame and write what the socket takes now. `false`: the connection is broken.
    fn send(&mut self, msg: &HostMsg) -> bool {
        codec::encode_frame_into(&mut self.out, msg).is_ok() && self.flush().is_ok()
    }

    /// Write queued frames until the socket would block or none are left.
    fn flush(&mut self) -> std::io::Result<()> {
        while self.sent < self.out.len() {
            match self.stream.write(&self.out[self.sent..]) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if self.sent == self.out.len() {
            self.out.clear();
            self.sent = 0;
            shrink(&mut self.out);
        } else if self.sent > OUTPUT_HIGH {
            self.out.drain(..self.sent);
            self.sent = 0;
        }
        Ok(())
    }

    /// Read what the daemon sent (at most one `scratch`ful). `false`: it closed or broke.
    fn fill(&mut self, scratch: &mut [u8]) -> bool {
        match self.stream.read(scratch) {
            Ok(0) => false,
            Ok(n) => {
                self.inbuf.extend_from_slice(&scratch[..n]);
                true
            }
            Err(e) => matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted),
        }
    }

    /// The next whole frame the daemon sent, if one is in.
    fn next_frame(&mut self) -> Result<Option<DaemonMsg>, codec::CodecError> {
        let Some((msg, used)) = codec::decode_frame(&self.inbuf, MAX_FRAME)? else {
            return Ok(None);
        };
        self.inbuf.drain(..used);
        shrink(&mut self.inbuf);
        Ok(Some(msg))
    }
}

/// Give back the memory of an emptied buffer that grew in a burst.
fn shrink(buf: &mut Vec<u8>) {
    if buf.is_empty() && buf.capacity() > KEEP_CAPACITY {
        *buf = Vec::new();
    }
}

struct Host {
    args: HostArgs,
    listener: UnixListener,
    /// For resizes; the loop reads and writes `pty`.
    master: Box<dyn MasterPty + Send>,
    pty: FileDescriptor,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    /// Readable once the program exited; `None` on a kernel without pidfds.
    pidfd: Option<OwnedFd>,
    pid: u32,
    host_pid: u32,
    parser: vt100::Parser,
    conn: Option<Conn>,
    /// Whether any daemon has connected since this host started.
    greeted: bool,
    exit: Option<ExitRecord>,
    /// The PTY ended (every holder of its other side closed it).
    eof: bool,
    /// When the PTY last said something (for the drain after the exit).
    quiet_since: Instant,
    /// When the program's group gets SIGKILL (a terminate's grace ends).
    term_deadline: Option<Instant>,
    /// Pastes taken (their ids, oldest first) and the Enters still due (when, id).
    pasted: VecDeque<u64>,
    enters: VecDeque<(Instant, u64)>,
    /// Writes waiting for the program to read its input, how many bytes they hold, and how
    /// much of the first is written.
    input: VecDeque<Vec<u8>>,
    input_bytes: usize,
    input_written: usize,
    /// A write to the PTY failed: the program's side is gone, nothing more is taken.
    input_broken: bool,
    scratch: Vec<u8>,
    /// Connections refused so far (for a log that a flood cannot fill).
    refused: u64,
}

impl Host {
    fn run(mut self) -> anyhow::Result<()> {
        loop {
            // After the program exits, give its output a moment to drain, then finish.
            if self.exit.is_some() && self.eof {
                return self.finish();
            }
            self.wait_and_handle()?;
            self.fire_timers();
        }
    }

    /// The next time a timer is due.
    fn next_deadline(&self) -> Option<Instant> {
        let exit_look = match (&self.exit, &self.pidfd) {
            (None, None) => Some(Instant::now() + EXIT_POLL),
            _ => None,
        };
        let drain = self.exit.as_ref().map(|_| self.quiet_since + DRAIN_QUIET);
        [
            self.enters.front().map(|(at, _)| *at),
            self.term_deadline,
            drain,
            exit_look,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// One poll(2) over what there is to wait for, and what it found.
    fn wait_and_handle(&mut self) -> anyhow::Result<()> {
        let backlog = self
            .conn
            .as_ref()
            .is_some_and(|c| c.pending() > OUTPUT_HIGH);
        let read_pty = !self.eof && !backlog;
        let write_pty = !self.input.is_empty();
        let timeout = self.next_deadline().map(|d| {
            Timespec::try_from(d.saturating_duration_since(Instant::now())).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        let (pty_ev, listen_ev, conn_ev, exit_ev) = {
            let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(4);
            let mut idx = [usize::MAX; 4];
            if read_pty || write_pty {
                let mut flags = PollFlags::empty();
                if read_pty {
                    flags |= PollFlags::IN;
                }
                if write_pty {
                    flags |= PollFlags::OUT;
                }
                idx[0] = fds.len();
                fds.push(PollFd::new(&self.pty, flags));
            }
            idx[1] = fds.len();
            fds.push(PollFd::new(&self.listener, PollFlags::IN));
            if let Some(c) = &self.conn {
                let mut flags = PollFlags::empty();
                if !backlog {
                    flags |= PollFlags::IN;
                }
                if c.pending() > 0 {
                    flags |= PollFlags::OUT;
                }
                idx[2] = fds.len();
                fds.push(PollFd::new(&c.stream, flags));
            }
            if self.exit.is_none()
                && let Some(p) = &self.pidfd
            {
                idx[3] = fds.len();
                fds.push(PollFd::new(p, PollFlags::IN));
            }
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => return Ok(()),
                Err(e) => return Err(anyhow::anyhow!("poll: {e}")),
            }
            let got = |i: usize| fds.get(i).map(|f| f.revents()).filter(|r| !r.is_empty());
            (got(idx[0]), got(idx[1]), got(idx[2]), got(idx[3]))
        };
        if exit_ev.is_some() {
            self.look_for_exit();
        }
        if let Some(ev) = pty_ev {
            if write_pty && ev.intersects(PollFlags::OUT | PollFlags::HUP | PollFlags::ERR) {
                self.write_input();
            }
            if read_pty && ev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
                self.read_pty();
            }
        }
        if let Some(ev) = conn_ev {
            self.serve_conn(ev, backlog);
        }
        if listen_ev.is_some() {
            self.accept_all();
        }
        Ok(())
    }

    fn look_for_exit(&mut self) {
        match self.child.try_wait() {
            Ok(Some(st)) => self.exit = Some(exit_record(st)),
            Ok(None) => return,
            // The program cannot be waited for any more: it is gone, how is unknown.
            Err(_) => {
                self.exit = Some(ExitRecord {
                    code: None,
                    signal: None,
                })
            }
        }
        self.quiet_since = Instant::now();
    }

    fn read_pty(&mut self) {
        match self.pty.read(&mut self.scratch) {
            Ok(0) => self.eof = true,
            Ok(n) => {
                self.quiet_since = Instant::now();
                let bytes = &self.scratch[..n];
                self.parser.process(bytes);
                if self.conn.is_some() {
                    self.send(&HostMsg::Output(bytes.to_vec()));
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {}
            // EIO: every holder of the PTY's other side closed it.
            Err(_) => self.eof = true,
        }
    }

    /// Write waiting input until the PTY would block or none is left.
    fn write_input(&mut self) {
        while let Some(head) = self.input.front() {
            match self.pty.write(&head[self.input_written..]) {
                Ok(n) => {
                    self.input_written += n;
                    if self.input_written == head.len() {
                        self.input_bytes -= head.len();
                        self.input_written = 0;
                        self.input.pop_front();
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => {
                    self.input_broken = true;
                    self.input.clear();
                    self.input_bytes = 0;
                    self.input_written = 0;
                    return;
                }
            }
        }
    }

    /// Queue bytes for the program, bounded; `false` when there is no room.
    fn enqueue(&mut self, bytes: Vec<u8>) -> bool {
        if self.input_broken
            || self.input.len() >= INPUT_QUEUE_LEN
            || self.input_bytes + bytes.len() > INPUT_QUEUE_BYTES
        {
            return false;
        }
        if !bytes.is_empty() {
            self.input_bytes += bytes.len();
            self.input.push_back(bytes);
            self.write_input();
        }
        true
    }

    fn serve_conn(&mut self, ev: PollFlags, backlog: bool) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        if ev.contains(PollFlags::OUT) && conn.flush().is_err() {
            self.conn = None;
            return;
        }
        if backlog || !ev.intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR) {
            return;
        }
        let open = conn.fill(&mut self.scratch);
        loop {
            let Some(conn) = self.conn.as_mut() else {
                return;
            };
            match conn.next_frame() {
                Ok(Some(msg)) => self.handle(msg),
                Ok(None) => break,
                Err(_) => {
                    self.conn = None;
                    return;
                }
            }
        }
        if !open {
            self.conn = None;
        }
    }

    fn handle(&mut self, msg: DaemonMsg) {
        match msg {
            DaemonMsg::Input(b) => {
                if !self.enqueue(b) {
                    eprintln!("pty-host: input dropped: the program is not reading its input");
                }
            }
            DaemonMsg::Paste {
                id,
                bytes,
                enter_delay_ms,
            } => {
                if self.pasted.contains(&id) {
                    // Taken before (a daemon that restarted sent it again): never twice. Its
                    // Enter is done, or still due and will be acknowledged then.
                    if !self.enters.iter().any(|(_, e)| *e == id) {
                        self.send(&HostMsg::Pasted { id });
                    }
                } else if self.enqueue(bytes) {
                    self.pasted.push_back(id);
                    if self.pasted.len() > PASTES_REMEMBERED {
                        self.pasted.pop_front();
                    }
                    let at = Instant::now() + Duration::from_millis(enter_delay_ms);
                    self.enters.push_back((at, id));
                } else {
                    self.send(&HostMsg::PasteRefused {
                        id,
                        why: PASTE_QUEUE_FULL.into(),
                    });
                }
            }
            DaemonMsg::Resize { rows, cols } => {
                let (rows, cols) = fleetd_actors::term::clamp_size(rows, cols);
                let _ = self.master.resize(PtySize {
                    rows,
                    cols,
                    pixel_width: 0,
                    pixel_height: 0,
                });
                self.parser.screen_mut().set_size(nz(rows), nz(cols));
            }
            DaemonMsg::Terminate { grace_ms } => {
                signal_group(self.pid, Signal::SIGHUP);
                signal_group(self.pid, Signal::SIGTERM);
                self.term_deadline = Some(Instant::now() + Duration::from_millis(grace_ms));
            }
            DaemonMsg::Detach => self.conn = None,
            DaemonMsg::Screen => {
                // After every Output frame already queued: the screen holds them all.
                let screen = self.parser.screen().state_formatted().into_bytes();
                self.send(&HostMsg::Screen(screen));
            }
        }
    }

    /// Take every waiting connection: one from the daemon replaces the one before, any other
    /// is closed unanswered and changes nothing.
    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    self.admit(stream);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }

    /// Greet `stream` if its peer is the daemon that owns this host (see `owner`), else close it
    /// before anything is sent. Whether it was taken.
    fn admit(&mut self, stream: UnixStream) -> bool {
        match owner::admit(&stream, self.args.owner_lock.as_deref()) {
            Ok(()) => {
                self.connect(stream);
                true
            }
            Err(why) => {
                self.refused += 1;
                // The first few, then one in a thousand: a flood cannot fill the log.
                if self.refused <= 8 || self.refused.is_multiple_of(1000) {
                    eprintln!(
                        "pty-host: refused a connection ({} so far): {why}",
                        self.refused
                    );
                }
                false
            }
        }
    }

    /// A daemon connected: greet it with the screen, and drop the connection it replaces.
    fn connect(&mut self, stream: UnixStream) {
        self.greeted = true;
        self.conn = Conn::new(stream).ok();
        let (rows, cols) = self.parser.screen().size();
        let hello = HostMsg::Welcome(Greeting {
            pid: self.pid,
            host_pid: self.host_pid,
            rows: rows.get(),
            cols: cols.get(),
            snapshot: self.parser.screen().state_formatted().into_bytes(),
            pasted: self.pasted.iter().copied().collect(),
        });
        self.send(&hello);
    }

    /// Send a frame to the daemon, if one is connected; a broken connection is dropped.
    fn send(&mut self, msg: &HostMsg) {
        if let Some(c) = self.conn.as_mut()
            && !c.send(msg)
        {
            self.conn = None;
        }
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(&(at, id)) = self.enters.front()
            && at <= now
        {
            self.enters.pop_front();
            // The paste was taken; its Enter goes the same way, after it. A full input queue
            // loses the Enter: say so.
            let msg = if self.enqueue(b"\r".to_vec()) {
                HostMsg::Pasted { id }
            } else {
                HostMsg::PasteRefused {
                    id,
                    why: ENTER_LOST.into(),
                }
            };
            self.send(&msg);
        }
        if self.term_deadline.is_some_and(|d| d <= now) {
            self.term_deadline = None;
            signal_group(self.pid, Signal::SIGKILL);
        }
        if self.exit.is_none() && self.pidfd.is_none() {
            self.look_for_exit();
        }
        if self.exit.is_some() && self.quiet_since + DRAIN_QUIET <= now {
            self.eof = true;
        }
    }

    /// The program exited and its output is drained: record the exit, tell the daemon (waiting
    /// a bounded time for the one that launched us if it never connected), and end.
    fn finish(mut self) -> anyhow::Result<()> {
        let rec = self.exit.take().unwrap_or(ExitRecord {
            code: None,
            signal: None,
        });
        let _ = write_exit_file(&self.args.exit_file, &rec);
        let until = Instant::now() + FIRST_CONNECTION_WAIT;
        if self.conn.is_none() && !self.greeted {
            // The daemon that launched us has not connected yet (a program that exits at
            // once): wait for it, bounded, so it hears the exit and sees the output from us
            // instead of finding the socket gone or reset.
            while wait_for(&self.listener, PollFlags::IN, until) {
                match self.listener.accept() {
                    Ok((stream, _)) => {
                        if self.admit(stream) {
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => break,
                }
            }
        }
        self.send(&HostMsg::Exited {
            code: rec.code,
            signal: rec.signal,
        });
        // The last frames go out before the socket does, as long as the daemon reads them.
        while let Some(c) = self.conn.as_mut()
            && c.pending() > 0
            && wait_for(&c.stream, PollFlags::OUT, until)
            && c.flush().is_ok()
        {}
        let _ = std::fs::remove_file(&self.args.socket);
        Ok(())
    }
}

/// Wait until `fd` is ready for `events` or `until` passes; whether it is ready.
fn wait_for(fd: &impl AsFd, events: PollFlags, until: Instant) -> bool {
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(timeout) = Timespec::try_from(left) else {
            return false;
        };
        let mut fds = [PollFd::new(fd, events)];
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct WithClap {
        #[command(flatten)]
        host: HostArgs,
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
                "--owner-lock",
                "/state/daemon.lock",
                "--",
                "sh",
                "-c",
                "echo --rows 5",
            ],
            &[
                "--socket=/s",
                "--exit-file=/e",
                "--rows=3",
                "--owner-lock=/l",
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
