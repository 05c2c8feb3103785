//! The PTY host's wire: the frames the host and the daemon exchange over the member's socket
//! (each through `crate::codec`), and the exit file the host leaves. Both sides of `super`
//! use these; changing them changes the protocol a running host and a restarted daemon speak.

use serde::{Deserialize, Serialize};

/// Host -> daemon.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum HostMsg {
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
        /// The paste ids taken, oldest first (at most `PASTES_REMEMBERED`).
        pasted: Vec<u64>,
    },
}

/// Daemon -> host. New variants go at the end: an older host that reads one it does not know
/// drops the connection.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum DaemonMsg {
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
pub(super) struct ExitRecord {
    pub(super) code: Option<i32>,
    pub(super) signal: Option<String>,
}
