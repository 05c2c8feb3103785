//! The terminal interface a member slot drives: launch a command in a PTY, re-adopt one that
//! survived a daemon restart, write keys, read output, learn the exit.
//!
//! Owns only the contract. The implementation (a per-member PTY host process, see
//! `src/term.rs` in the `fleetd` package) lives outside this crate so the actors stay free of
//! process and PTY code. Every channel here is bounded.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

use crate::error::FleetError;
use crate::types::MemberName;

/// What a terminal reports.
#[derive(Debug)]
pub enum TermEvent {
    /// Bytes the program wrote.
    Output(Vec<u8>),
    /// The program exited with this code (None: killed by a signal or unknown).
    Exited {
        code: Option<i32>,
        signal: Option<String>,
    },
    /// The connection to the terminal broke and its exit is unknown.
    Lost(String),
    /// A paste (`TermInput::Paste`) and its Enter were written to the PTY.
    Pasted { id: u64 },
    /// A paste could not be written (the program stopped reading its input).
    PasteRefused { id: u64, why: String },
    /// The terminal's screen as escape sequences that redraw it, asked for by
    /// `TermInput::Screen`; it holds every `Output` sent before it.
    Screen(Vec<u8>),
}

/// What a slot sends to a terminal.
#[derive(Debug)]
pub enum TermInput {
    /// Keys to write to the PTY.
    Bytes(Vec<u8>),
    /// One message: its paste bytes, then, after `enter_delay_ms`, its Enter, written by the
    /// terminal host as one unit (a daemon that dies in between leaves no paste without its
    /// Enter). The host remembers the ids it has taken, so the same id is never written twice
    /// and a restarted daemon can ask whether a paste it recorded as delivered was written.
    Paste {
        id: u64,
        bytes: Vec<u8>,
        enter_delay_ms: u64,
    },
    Resize {
        rows: u16,
        cols: u16,
    },
    /// SIGTERM the program's process group, SIGKILL after `grace_ms`.
    Terminate {
        grace_ms: u64,
    },
    /// Close the connection and leave the program running (for re-adoption later).
    Detach,
    /// Send the screen as it is now (`TermEvent::Screen`); only to a terminal whose handle
    /// says `screen_on_request`.
    Screen,
}

pub use fleetd_core::term::{
    MAX_COLS, MAX_ROWS, MIN_COLS, MIN_ROWS, PASTES_REMEMBERED, clamp_size, size_problem,
};

/// A live terminal.
pub struct TermHandle {
    /// The program's pid (root of the member's process tree).
    pub pid: u32,
    /// The pid of the process that holds the PTY, if it is not the daemon.
    pub host_pid: Option<u32>,
    /// Escape sequences that redraw the current screen (empty for a fresh launch).
    pub snapshot: Vec<u8>,
    pub input: mpsc::Sender<TermInput>,
    pub events: mpsc::Receiver<TermEvent>,
    /// The paste ids the host has taken (its most recent [`PASTES_REMEMBERED`]), oldest first.
    pub pasted: Vec<u64>,
    /// Whether the terminal sends its screen when asked (`TermInput::Screen`); a host from
    /// before that was possible does not, and its member's screen then stays in the daemon.
    pub screen_on_request: bool,
}

/// Everything needed to start a member's command.
#[derive(Clone, Debug)]
pub struct LaunchSpec {
    pub name: MemberName,
    pub generation: u64,
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
    /// Variables of the daemon's environment the program must not inherit.
    pub unset: Vec<String>,
    pub cwd: Option<String>,
    pub rows: u16,
    pub cols: u16,
}

/// A boxed future, so backends can be trait objects.
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// How terminals are made and found again.
pub trait TermBackend: Send + Sync + 'static {
    /// Start `spec.argv` in a new PTY.
    fn launch(&self, spec: LaunchSpec) -> BoxFut<'_, Result<TermHandle, FleetError>>;
    /// Reconnect to member `name`'s terminal of `generation`, if it is still there.
    fn connect(
        &self,
        name: &MemberName,
        generation: u64,
    ) -> BoxFut<'_, Result<TermHandle, FleetError>>;
    /// The recorded exit of a terminal that is gone: (code, signal), if known.
    fn recorded_exit(
        &self,
        name: &MemberName,
        generation: u64,
    ) -> Option<(Option<i32>, Option<String>)>;
    /// Remove leftovers of terminals that belong to no live member.
    fn sweep(&self, live: &[(MemberName, u64)]);
}
